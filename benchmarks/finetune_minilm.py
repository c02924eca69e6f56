"""Fine-tuning benchmark: all-MiniLM-L6-v2 on pydoc_sentences (4 classes), frozen encoder vs LoRA vs QLoRA vs
full fine-tuning, through sc.Run from benchmarks/specs/minilm*.toml; writes a block of benchmarks/RESULTS.md.

Every method sees the same split (seed 0: 60% train, 5% val, 35% test, stratified), batch 8, seq_len 32 and
the same number of steps; accuracy is on the held-out test split. The frozen-encoder baseline is the
LoRA spec with targets = ["head.weight"]: only the classification head adapts (rank 8 >= 4 classes, so
it can reach any head matrix), which is a linear probe on the frozen mean-pooled embedding.

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


def main(argv=None) -> int:
    import scellis_jupyter as sc
    from benchmarks.kernels import write_results
    from scellis_jupyter.train.run import Run
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="reference")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    dev = sc.device(args.device)
    rows = []
    for method in args.methods.split(","):
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
             "", "| method | lr | steps | train / test rows | test accuracy | loss first -> last 10 | trainable params "
             "| predicted peak bytes | measured peak bytes | s/step (incl. val evals) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]:g} | {r[2]} | {r[3]} / {r[4]} | {r[5]:.3f} | {r[6]:.3f} -> {r[7]:.3f} | "
                     f"{r[8]:,} | {r[9]} | {r[10]} | {r[11]:.2f} |")
    lines += ["", f"<!-- END {key} -->"]
    if not args.no_write:
        write_results([(key, "\n".join(lines))])
        print("wrote benchmarks/RESULTS.md")
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
