"""Fine-tuning benchmark: all-MiniLM-L6-v2 on pydoc_sentences (4 classes), frozen encoder vs LoRA vs QLoRA vs
full fine-tuning, through sc.Run from benchmarks/specs/minilm*.toml; writes a block of benchmarks/RESULTS.md.

Every method sees the same split (seed 0: 60% train, 5% val, 35% test, stratified), batch 8, seq_len 32 and
the same number of steps; accuracy is on the held-out test split. Two frozen-encoder baselines: "frozen",
the LoRA spec with targets = ["head.weight"] (only the classification head adapts; rank 8 >= 4 classes, so
it can reach any head matrix), trained like the others; and "probe", scikit-learn's logistic regression
(C by cross-validation) on the frozen encoder's embeddings of the train + val rows, trained to convergence.

    python benchmarks/finetune_minilm.py                    # reference device, 3 epochs
    python benchmarks/finetune_minilm.py --epochs 1 --methods frozen,lora --no-write
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
SPECS = Path(__file__).resolve().parent / "specs"
SPLIT = "{ train = 0.6, val = 0.05, test = 0.35 }"

# method -> (spec file, learning rate, peft table replacing the file's, or None to keep it)
METHODS = {
    "frozen": ("minilm_lora.toml", 1e-2, '{ method = "lora", rank = 8, alpha = 16, targets = ["head.weight"] }'),
    "lora": ("minilm_lora.toml", 1e-3, None),
    "qlora": ("minilm_qlora.toml", 1e-3, None),
    "full": ("minilm.toml", 5e-5, None),
}


def spec_for(method: str):
    import scellis_jupyter as sc
    name, lr, peft = METHODS[method]
    text = (SPECS / name).read_text()
    text = text.replace("seq_len = 32", f"seq_len = 32\nsplit = {SPLIT}")
    text = re.sub(r"lr = [0-9.e-]+", f"lr = {lr}", text)
    if peft is not None:
        text = re.sub(r"^peft = .*$", f"peft = {peft}", text, flags=re.M)
    return sc.Spec.from_text(text, source=str(SPECS / name), base_dir=SPECS)


def probe(dev) -> tuple:
    """The frozen encoder's mean-pooled embeddings (this engine, pretrained weights) of the same split, then
    scikit-learn's LogisticRegression with C chosen by 5-fold cross-validation on the train rows: a converged
    linear probe, the strongest frozen-encoder baseline."""
    import dataclasses
    import warnings

    import numpy as np
    from sklearn.linear_model import LogisticRegressionCV

    import scellis_jupyter as sc
    from scellis_jupyter.data import load_dataset, split
    from scellis_jupyter.tensor import Tensor
    from scellis_jupyter.rng import Generator
    from scellis_jupyter.spec import build_graph
    from scellis_jupyter.spec.pretrained import pretrained_overrides
    from scellis_jupyter.run.weights import init_params
    spec = spec_for("full")
    graph = build_graph(dataclasses.replace(spec.model, output="pool"), spec.input["shape"], "i32")
    w = init_params(spec.graph, Generator(0), overrides=pretrained_overrides(spec))
    params = {p.name: sc.tensor(w[p.name], device=dev).node for p in graph.params}
    ds = load_dataset(None, spec.data, spec.base_dir)
    sp = split(ds, dict(spec.data["split"]), seed=int(spec.recipe.get("seed") or 0), stratify=True)
    feats = []
    for lo in range(0, len(ds), 64):
        x, _ = ds.read(np.arange(lo, min(lo + 64, len(ds))))
        out = graph.forward(sc.tensor(x, dtype="i32", device=dev).node, params)
        feats.append(Tensor._from_node(out, dev).numpy())
    e, y = np.concatenate(feats), ds.targets()
    tr, te = np.concatenate([sp["train"], sp["val"]]), sp["test"]
    with warnings.catch_warnings():           # scikit-learn's notices about future defaults
        warnings.simplefilter("ignore", FutureWarning)
        clf = LogisticRegressionCV(Cs=[1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100], cv=5, max_iter=5000,
                                   scoring="accuracy").fit(e[tr], y[tr])
    return float(clf.score(e[te], y[te])), len(tr), len(te), float(clf.C_[0])


def main(argv=None) -> int:
    import scellis_jupyter as sc
    from benchmarks.kernels import write_results
    from scellis_jupyter.run.run import Run
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="reference")
    ap.add_argument("--methods", default=",".join(list(METHODS) + ["probe"]))
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    dev = sc.device(args.device)
    rows = []
    methods = args.methods.split(",")
    probe_row = probe(dev) if "probe" in methods else None
    if probe_row:
        print(f"probe   logistic regression (C = {probe_row[3]:g}) on frozen embeddings: test acc {probe_row[0]:.3f}")
    for method in (m for m in methods if m != "probe"):
        spec = spec_for(method)
        run = Run(spec, device=dev, steps=1)            # the loader's length decides the steps
        steps = max(1, int(round(args.epochs * len(run.loader))))
        run = Run(spec, device=dev, steps=steps)
        t0 = time.perf_counter()
        losses = [s.loss for s in run]
        train_s = run.timings["steps_s"]
        res = run.result()
        m = res["metrics"]
        info = run.step_prog.info.get("peft") or {}
        tr = info.get("trainable_params", spec.graph.param_count)
        rows.append((method, METHODS[method][1], steps, len(run.split["train"]), len(run.split["test"]),
                     m["test_accuracy"], losses[0], sum(losses[-10:]) / len(losses[-10:]), tr,
                     res["predicted_peak_bytes"], res["measured_peak_bytes"], train_s / steps,
                     time.perf_counter() - t0))
        r = rows[-1]
        print(f"{method:7s} lr {r[1]:g} steps {r[2]} test acc {r[5]:.3f} (n={r[4]}) loss {r[6]:.3f} -> {r[7]:.3f} "
              f"trainable {r[8]:,} peak predicted {r[9]} measured {r[10]} {r[11]:.2f} s/step", flush=True)
    key = f"finetune_minilm @ {dev.name}"
    lines = [f"<!-- BEGIN {key} -->", f"### MiniLM-L6 fine-tuning on {dev.name}", "",
             f"- date: {_dt.date.today().isoformat()}", f"- device: {dev}",
             f"- task: pydoc_sentences, 4 classes (statements / expressions / builtin types / data model), "
             f"seq_len 32, batch 8, {args.epochs:g} epochs, split {SPLIT} (seed 0), AdamW; accuracy on the "
             "held-out test split (chance 0.25)",
             "- frozen: only the head adapts (LoRA rank 8 on head.weight), i.e. a linear probe on the frozen "
             "encoder; lora / qlora: rank 8, alpha 16 on every linear weight (head included); full: every weight",
             "- peak: the engine's allocation peak of one training step (predicted by sc.plan, measured running it)",
             "- s/step: wall clock on a shared 2-core machine (other jobs ran beside it), periodic val evaluation "
             "included",
             "", "| method | lr | steps | train / test rows | test accuracy | loss first -> last 10 | trainable params "
             "| predicted peak bytes | measured peak bytes | s/step (incl. val evals) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]:g} | {r[2]} | {r[3]} / {r[4]} | {r[5]:.3f} | {r[6]:.3f} -> {r[7]:.3f} | "
                     f"{r[8]:,} | {r[9]} | {r[10]} | {r[11]:.2f} |")
    if probe_row:
        lines.append(f"| probe: scikit-learn logistic regression (C = {probe_row[3]:g} by 5-fold CV) on the frozen "
                     f"encoder's embeddings | - | - | {probe_row[1]} / {probe_row[2]} | {probe_row[0]:.3f} | - | "
                     f"{4 * 384 + 4:,} | - | - | - |")
    lines += ["", f"<!-- END {key} -->"]
    if not args.no_write:
        write_results([(key, "\n".join(lines))])
        print("wrote benchmarks/RESULTS.md")
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
