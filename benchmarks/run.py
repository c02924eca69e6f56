"""One call, every speed figure of issue 14 beside PyTorch; writes benchmarks/RESULTS.md's speed block.

    python benchmarks/run.py                 # on the H200: torch on CUDA in the same process
    python benchmarks/run.py --quick --no-write

Reuses benchmarks/kernels.py's sections (each checks its result against a reference before timing and
reports the error) and benchmarks/training.py's step timers. Warm-up: the largest matmul runs first,
untimed, so clocks are up and pipelines built before the first measured size. Matmul is measured
twice in the same run: with the fixed tile table (SCELLIS_MATMUL_TUNE=off) and autotuned per shape class
(=on, cached on disk per adapter), so both columns come from one machine state; f16 also under the `fast`
tier (packed vec4<f16> arithmetic). The training steps run at their specs' tier (prod; fast for gpt_mixed),
with the tile table and autotuned; the default (`auto`) is the table under prod and autotuned under fast on
a GPU. `whole loop` is `for step in run` with streamed data, beside the step.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

from benchmarks import kernels as K      # noqa: E402
from benchmarks import training as T     # noqa: E402


def _reset(ctx) -> None:
    """Forget recorded programs so the next launches re-run the launchers (and re-choose tiles)."""
    ctx.be.flush()
    ctx.be._records.clear()
    ctx.be._prog_params.clear()


def matmul_rows(ctx, args, mode: str) -> list[dict]:
    os.environ["SCELLIS_MATMUL_TUNE"] = mode
    K.TIER = "debug" if mode == "off" else "prod"      # the tuner's K-splits are never chosen under debug
    _reset(ctx)
    rows = []
    for dtype, sizes in (("f32", args.sizes), ("f16", args.sizes[-1:])):
        a = argparse.Namespace(**{**vars(args), "sizes": sizes, "dtypes": [dtype]})
        for r in K.bench_matmul(ctx, a):
            r["op"] = f"matmul ({'tile table, debug' if mode == 'off' else 'autotuned, prod'})"
            rows.append(r)
    if mode == "on":        # packed vec4<f16> arithmetic: only the `fast` tier takes it (matmul_tune.packed_f16)
        K.TIER = "fast"
        _reset(ctx)
        a = argparse.Namespace(**{**vars(args), "sizes": args.sizes, "dtypes": ["f16"]})
        for r in K.bench_matmul(ctx, a):
            r["op"] = "matmul (autotuned, fast: packed f16)"
            rows.append(r)
    return rows


def training_rows(ctx, args, label: str, models) -> list[dict]:
    """Step and whole-loop time of each model at its spec's tier (prod), beside torch eager f32."""
    torch = ctx.torch
    rows = []
    for m in models:
        a = T.ours(T.MODELS[m], ctx.dev, args.steps)
        lp, _end = T.loop(T.MODELS[m], ctx.dev, args.steps, "stream")
        t = T.theirs(m, T.MODELS[m], args.steps, ctx.tdev) if torch is not None else None
        dtype = "mixed f16" if m.endswith("_mixed") else "f32"
        r = {"op": f"training step {m} ({label})", "dtype": dtype,
             "shape": f"batch {a['batch']}, {a['dispatches']} dispatches",
             "wgpu_ms": a["step_ms"], "wgpu_rate": a["step_ms"], "unit": "ms", "err": None, "note": ""}
        lr = {"op": f"whole loop {m} ({label}), streamed data", "dtype": dtype,
              "shape": f"loop / step = {lp / a['step_ms']:.2f}", "wgpu_ms": lp, "wgpu_rate": lp, "unit": "ms",
              "err": None, "note": ""}
        if t:
            r.update(torch_ms=t["step_ms"], torch_rate=t["step_ms"])
            lr.update(torch_ms=t["step_ms"], torch_rate=t["step_ms"])
        print(f"{r['op']:40s} scellis {a['step_ms']:9.3f} ms  loop {lp:9.3f} ms  torch "
              f"{t['step_ms'] if t else float('nan'):9.3f} ms", flush=True)
        rows += [r, lr]
    return rows


def ratio(r) -> str:
    if "torch_rate" not in r:
        return "-"
    if r["unit"] in ("ms", "us/op"):
        return f"{r['torch_rate'] / r['wgpu_rate']:.3g}"
    return f"{r['wgpu_rate'] / r['torch_rate']:.3g}"


def render(ctx, rows, changed: str) -> str:
    import subprocess
    drv = ""
    try:
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        drv = "-"
    key = f"speed @ {ctx.dev.name}"
    lines = [f"<!-- BEGIN {key} -->", f"### speed (benchmarks/run.py) on {ctx.dev.name}", "",
             f"- date: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='minutes')}",
             f"- adapter: {ctx.wname}; driver {drv or '-'}", f"- reference: {ctx.tname}",
             "- ratio: scellis / torch speed (> 1: scellis faster); err: max |scellis - reference| / max |reference|"
             " on a spot check made before timing", f"- changed since the last table: {changed}", "",
             "| what | dtype | shape | scellis | torch | unit | ratio | err |", "|---|---|---|---:|---:|---|---:|---:|"]
    for r in rows:
        tr = f"{r['torch_rate']:.4g}" if "torch_rate" in r else "-"
        e = f"{r['err']:.2g}" if r.get("err") is not None else "-"
        lines.append(f"| {r['op']} | {r['dtype']} | {r['shape']} | {r['wgpu_rate']:.4g} | {tr} | {r['unit']} | "
                     f"{ratio(r)} | {e} |")
    lines += ["", f"<!-- END {key} -->"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (llvmpipe / CI smoke)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--changed", default="matmul tile variants, K-split and per-adapter autotuning; this script")
    ap.add_argument("--sections", default="matmul,attention,softmax,layer_norm,rms_norm,cross_entropy,"
                    "reduce_sum,elementwise,dispatch,training")
    args = ap.parse_args(argv)
    q = args.quick
    args.sizes = [64, 128, 256] if q else [2048, 4096, 8192]
    args.iters, args.warmup, args.budget = (3, 1, 0.5) if q else (20, 5, 2.0)
    if q:
        K.WINDOW_S = 0.0          # a smoke run: `iters` runs, no window to fill
    args.models = ["mlp"] if q else ["mlp", "gpt", "gpt_mixed"]
    args.steps = 3 if q else 10
    args.dtypes = ["f32", "f16"]
    secs = args.sections.split(",")
    ctx = K.Ctx(None, True)
    print(f"# {ctx.wname}\n# {ctx.tname}", flush=True)
    rows = []

    def save():       # after every section, so a run cut short still leaves its figures
        if not args.no_write and rows:
            K.write_results([(f"speed @ {ctx.dev.name}", render(ctx, rows, args.changed))])
    if "matmul" in secs:
        warm = argparse.Namespace(**{**vars(args), "sizes": args.sizes[-1:], "dtypes": ["f32"], "iters": 3})
        K.bench_matmul(ctx, warm)                          # warm-up on the largest real shape, untimed
        rows += matmul_rows(ctx, args, "off")
        rows += matmul_rows(ctx, args, "on")
        K.TIER = "debug"
        os.environ["SCELLIS_MATMUL_TUNE"] = "off"
        _reset(ctx)
        save()
    if "training" in secs:            # the tile table (what a prod run gets), then autotuned (what a fast run gets)
        os.environ["SCELLIS_MATMUL_TUNE"] = "off"
        # untimed warm-up: a process's first measured step ran at 0.55x its later rate (H100, 2026-12-05:
        # the MLP at 2.52 ms, then 1.39 and 1.26 in a later call)
        T.ours(T.MODELS[args.models[0]], ctx.dev, args.steps)
        rows += training_rows(ctx, args, "tile table", args.models)
        save()
        os.environ["SCELLIS_MATMUL_TUNE"] = "on"
        rows += training_rows(ctx, args, "autotuned", [m for m in args.models if m != "mlp"])
        os.environ["SCELLIS_MATMUL_TUNE"] = "off"
        save()
    for s in ("attention", "softmax", "layer_norm", "rms_norm", "cross_entropy", "reduce_sum", "elementwise",
              "dispatch"):
        if s in secs:
            rows += K.SECTIONS[s](ctx, args)
            save()
    bad = [r for r in rows if r.get("err") is not None and not r["err"] < 2e-2]   # NaN fails too
    for r in bad:
        print(f"CHECK FAILED: {r['op']} {r['shape']} err {r['err']:.3g}", file=sys.stderr)
    save()
    print(f"wrote {K.RESULTS}" if not args.no_write else "not written (--no-write)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
