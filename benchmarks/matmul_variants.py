"""Every matmul tile variant forced in turn (SCELLIS_MATMUL_TUNE=<variant>), f32 and f16, one table.

    python benchmarks/matmul_variants.py --sizes 4096,8192          # on the H200
    python benchmarks/matmul_variants.py --quick                    # llvmpipe smoke

Why: the autotuner reports only its winner; this shows what each variant (prefetch, explicit fma,
padded As, 8x16 per thread) is worth on its own, so a variant that never wins can be dropped. f16
runs under prod (the packed-f16 path) and under debug (f16 storage, f32 math). Each figure is checked
against float64 on one row before timing (err column), like benchmarks/kernels.py.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

from benchmarks import kernels as K      # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--variants", default="", help="comma list; default: all")
    ap.add_argument("--modes", default="f32:prod,f16:prod,f16:debug")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    from scellis_jupyter.backends.wgpu.kernels.matmul_tune import VARIANTS
    sizes = [128, 256] if args.quick else [int(s) for s in args.sizes.split(",")]
    names = [v for v in args.variants.split(",") if v] or list(VARIANTS)
    ctx = K.Ctx(None, False)
    print(f"# {ctx.wname}")
    print(f"{'variant':10s} {'mode':10s} " + " ".join(f"{n:>8d}" for n in sizes) + "   (TFLOP/s; max rel err)")
    bad = 0
    for mode in args.modes.split(","):
        dtype, tier = mode.split(":")
        for v in names:
            os.environ["SCELLIS_MATMUL_TUNE"] = v
            K.TIER = tier
            rates, errs = [], []
            for n in sizes:
                ctx.be.flush()
                ctx.be._records.clear()
                ctx.be._prog_params.clear()
                a = argparse.Namespace(sizes=[n], dtypes=[dtype], iters=1 if args.quick else args.iters,
                                       warmup=1 if args.quick else 2, budget=2.0)
                try:
                    r = K.bench_matmul(ctx, a)[0]
                    rates.append(f"{r['wgpu_rate']:8.2f}")
                    errs.append(r["err"])
                except Exception as e:       # a variant the driver cannot build: say so, go on
                    rates.append(f"{'fail':>8s}")
                    print(f"  {v} {mode} {n}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            err = max((e for e in errs if e is not None), default=float("nan"))
            bad += not err < 2e-2
            print(f"{v:10s} {mode:10s} " + " ".join(rates) + f"   {err:.2g}", flush=True)
    K.TIER = "debug"
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
