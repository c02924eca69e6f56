"""Quickstart: plan, train and checkpoint the digits MLP on the best available device.

    python -m scellis_jupyter.quickstart [--store DIR] [--epochs N]

It prints the memory plan (verdict, peak, breakdown) before any compute, trains with one line per
epoch, saves the final checkpoint into the store (default `.scellis/`), and says how to continue it.
"""
from __future__ import annotations

import argparse
import shlex
import sys

from . import settings
from .backends.device import device as pick_device
from .backends.device import ensure_xdg_runtime_dir
from .errors import EXIT_ERROR, EXIT_REFUSED, PlanRefused, ScellisError
from .plan import plan as make_plan
from .run.records import fmt_value
from .run.run import Run

SPEC = """
name = "digits-mlp"

[data]
dataset = "digits"
split = { train = 0.8, val = 0.1, test = 0.1 }

[model]
nodes = [
  { op = "linear", out = 128, init = "kaiming_normal" },
  { op = "relu" },
  { op = "dropout", p = 0.1 },
  { name = "logits", op = "linear", out = 10 },
]

[recipe]
loss = "cross_entropy"
optimizer = { name = "adamw", lr = 3e-3, weight_decay = 0.01 }
scheduler = { name = "cosine", warmup_steps = 20 }
epochs = 30
batch_size = 64
clip_grad_norm = 1.0
metrics = ["accuracy", "f1"]
determinism = "debug"
seed = 0
"""


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m scellis_jupyter.quickstart", description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="store folder (default: $SCELLIS_STORE or .scellis)")
    ap.add_argument("--epochs", type=int, default=None)
    args = ap.parse_args(argv)
    ensure_xdg_runtime_dir()
    store = args.store or settings.text("SCELLIS_STORE") or ".scellis"
    dev = pick_device()
    print(f"device: {dev}\n  chosen: {dev.choice}")
    plan = make_plan(SPEC, device=dev)
    print(plan.table())
    run = Run(SPEC, device=dev, store=store, epochs=args.epochs)
    per_epoch = len(run.loader)
    for step in run:
        if step.step % per_epoch == 0:
            m = step.metrics
            print(f"epoch {step.step // per_epoch:3d}  step {step.step:5d}  loss {fmt_value(step.loss)}  lr {step.lr:.2e}"
                  + (f"  val accuracy {fmt_value(m['accuracy'])}" if "accuracy" in m else ""), flush=True)
    r = run.result()
    print(f"finished {r['steps']} steps on {dev.backend}:{dev.name}{' via ' + dev.via if dev.via else ''} (tier {r['tier']}): test accuracy "
          f"{r['metrics'].get('test_accuracy', float('nan')):.4f}, test f1 {r['metrics'].get('test_f1', float('nan')):.4f}")
    print(f"memory: measured peak {r['measured_peak_bytes']} bytes, planned {r['predicted_peak_bytes']}")
    print(f"checkpoint {r['final_checkpoint']} in {store} (run {r['run']})")
    # the run went to its spec's end: resuming it means asking for more steps (here twice as many)
    q = shlex.quote(str(store))
    print(f"  continue: scellis resume {r['run']} --steps {2 * r['steps']} --store {q}\n"
          f"  runs:     scellis runs --store {q}")
    return r


if __name__ == "__main__":
    try:
        main()
    except ScellisError as e:        # a user-facing entry point prints the diagnostic, not a traceback
        print(e.diagnostic.format(), file=sys.stderr)
        sys.exit(EXIT_REFUSED if isinstance(e, PlanRefused) else EXIT_ERROR)
