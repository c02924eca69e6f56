"""Planner benchmark: the plan's whole-run peak (step, readbacks, evaluation) against what running it
allocates, measured three ways, beside a parameters-only estimate of the kind common tools print; and
the planned peak of two large models beside parameters + gradients + optimizer state. Writes blocks of
benchmarks/RESULTS.md.

    python benchmarks/planner.py                 # reference device (and wgpu when an adapter exists)
    python benchmarks/planner.py --no-write
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
SPECS = Path(__file__).resolve().parent / "specs"
LARGE = SPECS / "plan_only"          # planned only (too big to run here)
LARGE_MEMORY = 16 * 10**9            # the declared device of issue 11's red plan


def _measured_rows(sc, dev, measure_step) -> list[str]:
    rows = []
    for f in sorted(SPECS.glob("*.toml")):
        try:
            spec = sc.Spec.from_file(f)
        except sc.SpecError as e:       # e.g. a pretrained spec whose weights package is not installed
            print(f"skip {f.name}: {e.diagnostic.message}", file=sys.stderr)
            continue
        p = sc.plan(spec, device=dev)
        po = 4 * spec.graph.param_count
        m = measure_step(p, dev) if p.verdict != "red" else None
        step = p.extras.get("step_peak", p.peak_bytes)
        if m is None:
            meas = indep = "refused (red)"
            ratio = step_m = "-"
        else:
            meas = str(m["measured_peak_bytes"])
            ratio = f"{m['measured_peak_bytes'] / p.peak_bytes:.4f}"
            step_m = str(m["step_peak_bytes"])
            if "device_buffer_peak_bytes" in m:
                indep = f"{m['device_buffer_peak_bytes']} (create_buffer)"
            else:
                bound = p.extras["host temporaries bound"]
                ok = "within" if m["host_peak_bytes"] <= p.peak_bytes + bound else "ABOVE"
                indep = (f"{m['host_peak_bytes']} (tracemalloc, {m['host_peak_bytes'] / p.peak_bytes:.2f}x; {ok} "
                         f"the plan's bound +{bound})")
        print(f"{dev.backend:9s} {spec.name:22s} {p.verdict:6s} predicted {p.peak_bytes:>12} measured {meas:>12}"
              f"  independent {indep}")
        rows.append(f"| {spec.name} | {p.batch_size} | {p.verdict} | {p.peak_bytes} | {meas} | {ratio} | {indep} | "
                    f"{step} | {step_m} | {p.breakdown['evaluation']} | {p.breakdown['readback']} | {po} | "
                    f"{po / p.peak_bytes:.3f} |")
    return rows


def _large_rows(sc, dev) -> list[str]:
    rows = []
    for f in sorted(LARGE.glob("*.toml")):
        spec = sc.Spec.from_file(f)
        p = sc.plan(spec, device=dev, memory=LARGE_MEMORY, fixes=False, evaluation=False)
        b = p.breakdown
        pgs = b["parameters"] + b["gradients"] + b["optimizer_state"] + b["master_weights"]
        full = 2 * b["parameters"] + b["optimizer_state"] + b["master_weights"]   # every gradient at once
        print(f"large on {dev.backend}: {spec.name:12s} peak {p.peak_bytes} params+grads+state {full} workspace {b['workspace']}")
        gib = lambda n: f"{n / 2**30:.3f}"  # noqa: E731
        rows.append(f"| {spec.name} | {p.batch_size} | {spec.graph.param_count:,} | {gib(p.peak_bytes)} | {gib(full)} | "
                    f"{gib(pgs)} | {gib(b['activations'])} | {gib(b['workspace'])} | {gib(b['readback'])} | "
                    f"{p.peak_bytes / full:.3f} |")
    return rows


def main(argv=None) -> int:
    import scellis_jupyter as sc
    from benchmarks.kernels import write_results
    from scellis_jupyter.executor import measure_step
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="reference,wgpu")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    blocks = []
    for dname in args.devices.split(","):
        try:
            dev = sc.device(dname)
        except sc.ScellisError as e:
            print(f"skip {dname}: {e.diagnostic.message}", file=sys.stderr)
            continue
        day = _dt.date.today().isoformat()
        key = f"planner @ {dev.name}"
        lines = [f"<!-- BEGIN {key} -->", f"### planner on {dev.name}", "",
                 f"- date: {day}", f"- device: {dev}",
                 "- predicted: `sc.plan`, the whole run: the step Program's liveness plan, its loss readback, the "
                 "evaluation Programs the run builds (full batches) and the final readback of its largest tensor "
                 "(plan.whole_run); measured: the backend's allocation counter running the same sequence once on a "
                 "fresh backend (`measure_step`); independent: on wgpu every byte `create_buffer` was asked for "
                 "(the device's method wrapped), on the numpy reference the host's real peak (tracemalloc), which "
                 "also holds numpy's temporaries inside kernels: the plan states a bound for those beside its peak; "
                 "params-only: 4 bytes x parameter count, what a summary of parameters would suggest", "",
                 "| spec | batch | verdict | predicted bytes | measured bytes | measured / predicted | independent "
                 "measure | predicted step | measured step | evaluation | readback | params-only bytes | "
                 "params-only / predicted |",
                 "|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
        lines += _measured_rows(sc, dev, measure_step)
        lines += ["", "Large models, planned only (no run): the step's peak beside parameters + gradients + optimizer "
                      f"state, declared {LARGE_MEMORY / 1e9:.0f} GB device", "",
                  "| spec | batch | parameters | peak GiB | params + grads + state GiB | at the peak: params, grads "
                  "live, state GiB | activations GiB | workspace GiB | readback GiB | peak / (params+grads+state) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += _large_rows(sc, dev)
        lines += ["", f"<!-- END {key} -->"]
        blocks.append((key, "\n".join(lines)))
    if not args.no_write and blocks:
        write_results(blocks)
        print("wrote benchmarks/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
