"""Matmul epilogues: a linear layer's matmul with its bias / activation / residual / dropout chain fused
into the store (SCELLIS_EPILOGUE=1) against the same chain as separate dispatches (=0), beside torch.

    python benchmarks/epilogue.py                    # GPT-bench shapes (batch 64 x seq 256, width 384)
    python benchmarks/epilogue.py --quick            # small shapes (llvmpipe)

Each case is compiled once per setting into a Program and re-executed (benchmarks/kernels.py's timing:
warm-up, N runs, one 4-byte readback); the output is checked against float64 numpy on its first rows
before timing. Prints a table: ms per run and dispatches, fused and unfused, their ratio, torch's ms.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.kernels import Ctx, torch_time, time_loop, wgpu_program  # noqa: E402


def _gelu64(x):
    from scipy.special import erf
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


# name: (rows, k, n, chain on scellis tensors, chain in float64 numpy or None, the torch chain)
def cases(quick: bool):
    m = 512 if quick else 64 * 256
    d = 64 if quick else 384
    from scellis_jupyter import ops

    def drop(y, b, r):
        import scellis_jupyter as sc
        return ops.dropout(y + b, 0.1, sc.rng.Generator(1)) + r
    return [
        ("qkv: x W + b", m, d, 3 * d, lambda y, b, r: y + b, lambda y, b, r: y + b,
         lambda T, y, b, r: y + b),
        ("fc1: gelu(x W + b)", m, d, 4 * d, lambda y, b, r: ops.gelu(y + b), lambda y, b, r: _gelu64(y + b),
         lambda T, y, b, r: T.nn.functional.gelu(y + b)),
        ("fc2: x W + b + residual", m, 4 * d, d, lambda y, b, r: y + b + r, lambda y, b, r: y + b + r,
         lambda T, y, b, r: y + b + r),
        ("proj: dropout(x W + b) + residual", m, d, d, drop, None,
         lambda T, y, b, r: T.nn.functional.dropout(y + b, 0.1) + r),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args(argv)
    ctx = Ctx(args.device, not args.no_torch)
    sc = ctx.sc
    rng = np.random.default_rng(0)
    print(f"# matmul epilogues on {ctx.wname}; torch: {ctx.tname}")
    print(f"| case | M x K x N | fused ms | dispatches | unfused ms | dispatches | unfused / fused | torch ms | max rel err |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, m, k, n, chain, ref64, tchain in cases(args.quick):
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = (rng.standard_normal((k, n), dtype=np.float32) / np.sqrt(k)).astype(np.float32)
        b = rng.standard_normal(n, dtype=np.float32)
        r = rng.standard_normal((m, n), dtype=np.float32)
        got = {}
        for on in ("1", "0"):
            os.environ["SCELLIS_EPILOGUE"] = on
            X, W, B, R = (sc.tensor(a, device=ctx.dev) for a in (x, w, b, r))
            run, sync = wgpu_program(ctx, [chain(X @ W, B, R)])
            run()
            out = run.result()
            before = ctx.be.dispatches
            run()
            sync()
            disp = ctx.be.dispatches - before
            sec = time_loop(run, sync, args.iters, args.warmup, args.budget)
            got[on] = (sec, disp, out)
        err = float("nan")
        if ref64 is not None:
            rows = slice(0, min(m, 64))
            want = ref64(x[rows].astype(np.float64) @ w.astype(np.float64), b, r[rows])
            err = float(np.max(np.abs(got["1"][2][rows] - want)) / max(np.max(np.abs(want)), 1e-30))
        else:   # dropout: the mask and the kept values must equal the unfused program's
            assert np.array_equal(got["1"][2] != r, got["0"][2] != r), "dropout masks differ"
            err = float(np.max(np.abs(got["1"][2] - got["0"][2])) / max(np.max(np.abs(got["0"][2])), 1e-30))
        tms = "-"
        if ctx.torch is not None:
            T = ctx.torch
            tx, tw, tb, tr = (T.tensor(a, device=ctx.tdev) for a in (x, w, b, r))
            tms = f"{1e3 * torch_time(ctx, lambda: tchain(T, tx @ tw, tb, tr), args.iters, args.warmup, args.budget):.3f}"
        (fs, fd, _), (us, ud, _) = got["1"], got["0"]
        print(f"| {name} | {m}x{k}x{n} | {1e3 * fs:.3f} | {fd} | {1e3 * us:.3f} | {ud} | {us / fs:.2f} | {tms} | {err:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
