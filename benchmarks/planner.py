"""Planner benchmark: predicted peak (the step Program's allocation plan) vs the engine's measured peak,
beside a parameters-only estimate of the kind common tools print; writes a block of benchmarks/RESULTS.md.

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
        rows = []
        for f in sorted(SPECS.glob("*.toml")):
            try:
                spec = sc.Spec.from_file(f)
            except sc.SpecError as e:       # e.g. a pretrained spec whose weights package is not installed
                print(f"skip {f.name}: {e.diagnostic.message}", file=sys.stderr)
                continue
            p = sc.plan(spec, device=dev)
            params_only = 4 * spec.graph.param_count
            m = measure_step(p, dev) if p.verdict != "red" else None
            rows.append((spec.name, p, params_only, m))
            meas = f"{m['measured_peak_bytes']:>12}" if m else "     refused"
            print(f"{dev.backend:9s} {spec.name:22s} {p.verdict:6s} predicted {p.peak_bytes:>12} measured {meas}"
                  f"  params-only {params_only:>12} ({100 * params_only / p.peak_bytes:5.1f}% of the peak)")
        day = _dt.date.today().isoformat()
        key = f"planner @ {dev.name}"
        lines = [f"<!-- BEGIN {key} -->", f"### planner on {dev.name}", "",
                 f"- date: {day}", f"- device: {dev}", "- predicted: `sc.plan` (liveness over the training step "
                 "Program); measured: the engine's own allocation peak running that step once on a fresh backend; "
                 "params-only: 4 bytes x parameter count, what a summary of parameters would suggest", "",
                 "| spec | batch | verdict | predicted bytes | measured bytes | measured / predicted | params-only bytes | params-only / predicted |",
                 "|---|---:|---|---:|---:|---:|---:|---:|"]
        for name, p, po, m in rows:
            mb = f"{m['measured_peak_bytes']}" if m else "refused (red)"
            ratio = f"{m['measured_peak_bytes'] / p.peak_bytes:.4f}" if m else "-"
            lines.append(f"| {name} | {p.batch_size} | {p.verdict} | {p.peak_bytes} | {mb} | {ratio} | {po} | "
                         f"{po / p.peak_bytes:.3f} |")
        lines += ["", f"<!-- END {key} -->"]
        blocks.append((key, "\n".join(lines)))
    if not args.no_write and blocks:
        write_results(blocks)
        print("wrote benchmarks/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
