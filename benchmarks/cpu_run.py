"""Whole small runs on the CPU: `sc.train` on the numpy reference path beside the same loop in PyTorch.

Why whole runs: the reference step alone is on a par with torch on the CPU, but a run is more than its
steps (data batches, the loss read every step, per-epoch evaluation, the run record, heartbeats, the final
checkpoint and test metrics). Both sides run the same recipe: the same rows (our split, standardized on the
training rows), a 64-unit MLP, Adam lr 1e-2, batch 16 (last partial batch dropped, reshuffled every epoch),
the loss read every step, validation loss and accuracy every epoch in batches of 16, val and test at the end,
and a final save of weights and optimizer state. torch runs on one thread (torch.set_num_threads(1)).

Timed: from the call to the finished run, warm (each side has run once in this process before, so one-time
imports and torch's lazy initialization are not counted; the first, cold run is reported beside it). Best of
--repeats, by wall time and by this process's CPU time (steadier on a shared machine). ratio = torch steps/s / scellis steps/s (1.0: as fast as torch; the target is <= 1.5).

    python benchmarks/cpu_run.py                    # wine and breast_cancer, 50 epochs
    python benchmarks/cpu_run.py --epochs 20 --repeats 5 --profile wine
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

# What the profile of a whole run showed (cProfile, wine, 400 steps) and what changed; printed after the table.
CHANGES = """\
where a whole run's time went, before: ~80% in the step Program's dispatch on the reference backend, almost
all of it Python around tiny numpy calls (57 dispatches a step: a kernel lookup, np.frombuffer windows for
every input and output, np.errstate entered per dispatch and again per op, and per fused group a
SimpleNamespace + dict per sub-op and np.full for every constant); the rest: the target check of each batch,
per-step input copies, per-epoch evaluation, the final checkpoint's fsyncs, the record.
what changed: the reference backend compiles each Program (from its 3rd run, run_steps) into one generated Python function
over cached arena windows: the same numpy calls in the same order (bit-identical; a test compares every output
byte with op-by-op dispatch), error state entered once, fused groups as generated code with their constants
made once, elementwise ufuncs writing straight into their output; storage windows are cached; a class
target's integer labels skip the whole-number check; per-step inputs are cast without an extra copy."""

HIDDEN, LR, BATCH = 64, 1e-2, 16
CLASSES = {"wine": 3, "breast_cancer": 2}

SPEC = """
name = "{ds}-mlp"
[data]
dataset = "{ds}"
standardize = true
[model]
nodes = [{{ op = "linear", out = {hidden} }}, {{ op = "relu" }}, {{ name = "logits", op = "linear", out = {classes} }}]
[recipe]
loss = "cross_entropy"
optimizer = {{ name = "adam", lr = {lr} }}
batch_size = {batch}
epochs = {epochs}
metrics = ["accuracy"]
determinism = "debug"
"""


def spec_text(ds: str, epochs: int) -> str:
    return SPEC.format(ds=ds, hidden=HIDDEN, classes=CLASSES[ds], lr=LR, batch=BATCH, epochs=epochs)


def ours(ds: str, epochs: int) -> tuple[int, float, float]:
    """One whole `sc.train` run on the reference device into a fresh store: (steps, wall s, CPU s)."""
    import scellis_jupyter as sc
    with tempfile.TemporaryDirectory() as store:
        t0, c0 = time.perf_counter(), time.process_time()
        run = sc.train(spec_text(ds, epochs), store=store, device="reference", progress=False)
        return run.step, time.perf_counter() - t0, time.process_time() - c0


def split_rows(ds: str, epochs: int) -> dict:
    """The rows of our split (so both sides train and evaluate on the very same examples), raw features."""
    import scellis_jupyter as sc
    run = sc.Run(spec_text(ds, epochs), device="reference")
    raw = run.dataset.base if hasattr(run.dataset, "base") else run.dataset
    x, y = raw.read(np.arange(len(raw)))
    return {"x": np.asarray(x, np.float32), "y": np.asarray(y, np.int64),
            **{p: np.asarray(run.split[p]) for p in ("train", "val", "test")}}


def torch_run(data: dict, epochs: int) -> tuple[int, float, float]:
    """The same recipe as a plain torch loop: (steps, wall s, CPU s)."""
    import torch
    t0, c0 = time.perf_counter(), time.process_time()
    tr, va, te = data["train"], data["val"], data["test"]
    x = data["x"]
    mu, sd = x[tr].mean(0), x[tr].std(0)
    xs = torch.tensor((x - mu) / np.where(sd > 0, sd, 1), dtype=torch.float32)
    ys = torch.tensor(data["y"])
    torch.manual_seed(0)
    n_cls = int(data["y"].max()) + 1
    model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, n_cls))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)

    def evaluate(part):
        total, correct = 0.0, 0
        with torch.no_grad():
            for lo in range(0, len(part), BATCH):
                b = part[lo:lo + BATCH]
                out = model(xs[b])
                total += float(loss_fn(out, ys[b])) * len(b)
                correct += int((out.argmax(1) == ys[b]).sum())
        return total / len(part), correct / len(part)

    steps, losses, history = 0, [], []
    for _ in range(epochs):
        order = tr[torch.randperm(len(tr), generator=gen).numpy()]
        for lo in range(0, len(order) - BATCH + 1, BATCH):
            b = order[lo:lo + BATCH]
            opt.zero_grad()
            loss = loss_fn(model(xs[b]), ys[b])
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            steps += 1
        history.append(evaluate(va))
    final = (evaluate(va), evaluate(te))
    with tempfile.TemporaryDirectory() as d:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "losses": losses,
                    "history": history, "final": final}, os.path.join(d, "checkpoint.pt"))
    return steps, time.perf_counter() - t0, time.process_time() - c0


def profile_ours(ds: str, epochs: int, top: int = 30) -> str:
    pr = cProfile.Profile()
    pr.enable()
    ours(ds, epochs)
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["wine", "breast_cancer"], choices=sorted(CLASSES))
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", metavar="DATASET", help="print where a warm sc.train run spends its time")
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    import sklearn.datasets  # noqa: F401  (both sides load the data through scikit-learn: imported once)
    rows = []
    for ds in a.datasets:
        data = split_rows(ds, a.epochs)
        t_cold, o_cold = torch_run(data, a.epochs), ours(ds, a.epochs)
        t_runs, o_runs = [], []
        for _ in range(a.repeats):              # interleaved, so both sides see the same machine load
            t_runs.append(torch_run(data, a.epochs))
            o_runs.append(ours(ds, a.epochs))
        steps = t_runs[0][0]
        assert steps == o_runs[0][0], f"{ds}: torch ran {steps} steps, scellis {o_runs[0][0]}"
        tw, ow = min(r[1] for r in t_runs), min(r[1] for r in o_runs)
        tc, oc = min(r[2] for r in t_runs), min(r[2] for r in o_runs)
        rows.append((ds, steps, steps / tw, steps / ow, steps / tc, steps / oc, t_cold[1], o_cold[1]))
    print(f"\nwhole runs, 64-unit MLP, Adam, batch {BATCH}, {a.epochs} epochs, eval every epoch; "
          f"torch {torch.__version__} on 1 thread, scellis on the reference (numpy) path; best of {a.repeats}\n")
    print("| dataset | steps | torch steps/s | scellis steps/s | ratio (torch/scellis) | by CPU time: torch / "
          "scellis steps/s, ratio | cold first run s (torch / scellis) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for ds, steps, tw, ow, tc, oc, tcold, ocold in rows:
        print(f"| {ds} | {steps} | {tw:.0f} | {ow:.0f} | {tw / ow:.2f} | {tc:.0f} / {oc:.0f}, {tc / oc:.2f} | "
              f"{tcold:.2f} / {ocold:.2f} |")
    print("\n" + CHANGES)
    if a.profile:
        ours(a.profile, a.epochs)
        print(profile_ours(a.profile, a.epochs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
