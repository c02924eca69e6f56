"""Kernel benchmarks: scellis wgpu kernels next to PyTorch on the same machine; writes benchmarks/RESULTS.md.

    python benchmarks/kernels.py                       # matmul f32/f16 at 1024..8192 on the best wgpu device
    python benchmarks/kernels.py --sizes 1024,2048 --dtypes f32
    python benchmarks/kernels.py --quick --no-write    # small sizes; runs on llvmpipe in well under a minute

Timing on wgpu: the op is compiled once into a Program and re-executed (no graph overhead); after a
warm-up, N executions are recorded into one pass and the clock stops when a single 4-byte readback
returns (wall clock around queue completion). PyTorch runs on CUDA when available (TF32 off for the
f32 reference: it is what an f32 matmul means) else on the CPU, timed the same way (synchronize).

Sections are functions registered in SECTIONS: each takes (ctx, args) and returns rows (dicts) that
`write_results` renders; attention fwd+bwd, softmax, layer_norm, elementwise and dispatch overhead
slot in the same way (see `section`).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SECTIONS: dict = {}


def section(name: str):
    def deco(fn):
        SECTIONS[name] = fn
        return fn
    return deco


# ---- context: the devices --------------------------------------------------------------------------
class Ctx:
    def __init__(self, device_name: str | None, use_torch: bool):
        import scellis_jupyter as sc
        self.sc = sc
        sc.set_tier("debug") if hasattr(sc, "set_tier") else None
        self.dev = sc.device(device_name or "wgpu")
        if self.dev.backend != "wgpu":
            raise SystemExit(f"not a wgpu device: {self.dev}")
        self.be = self.dev.impl
        self.torch = None
        self.tdev = None
        self.tname = "-"
        if use_torch:
            try:
                import torch
                self.torch = torch
                if torch.cuda.is_available():
                    self.tdev = "cuda"
                    torch.backends.cuda.matmul.allow_tf32 = False
                    torch.backends.cudnn.allow_tf32 = False
                    self.tname = f"torch {torch.__version__} cuda: {torch.cuda.get_device_name(0)} (TF32 off)"
                else:
                    self.tdev = "cpu"
                    self.tname = f"torch {torch.__version__} cpu ({torch.get_num_threads()} threads)"
            except Exception as e:  # pragma: no cover
                print(f"torch unavailable: {e}", file=sys.stderr)

    @property
    def wname(self) -> str:
        return f"wgpu: {self.dev.name} ({self.dev.adapter_type})"

    def fits(self, nbytes_total: int, largest: int) -> bool:
        return largest <= self.be.max_buffer and nbytes_total <= 0.6 * self.dev.memory_bytes


# ---- timing helpers ---------------------------------------------------------------------------------
def wgpu_program(ctx: Ctx, tensors):
    """Compile the nodes of `tensors` once: run() executes the Program (run.result() reads the output back),
    sync() waits for the queue through a 4-byte readback."""
    from scellis_jupyter.determinism import resolve
    from scellis_jupyter.executor.executor import execute
    from scellis_jupyter.program.schedule import compile_program
    be = ctx.be
    tier, _ = resolve("debug")
    prog, leaves = compile_program([t.node for t in tensors], be.name, tier)
    storages = [l.storage for l in leaves]
    box = {}

    def run():
        box["out"] = execute(prog, storages, be)

    def sync():
        s = box["out"][0]
        be.to_numpy(s.sub(0, (1,), s.dtype, min(s.nbytes, 4))) if s.nbytes else be.flush()

    def result():
        return be.to_numpy(box["out"][0])
    run.result = result
    return run, sync


def time_loop(run, sync, iters: int, warmup: int, budget_s: float) -> float:
    """Seconds per iteration: warm up, then N runs with one sync at the end (N shrunk to fit the budget)."""
    for _ in range(max(warmup, 1)):
        run()
    sync()
    t0 = time.perf_counter()
    run()
    sync()
    one = time.perf_counter() - t0
    n = max(1, min(iters, int(budget_s / max(one, 1e-9))))
    t0 = time.perf_counter()
    for _ in range(n):
        run()
    sync()
    return (time.perf_counter() - t0) / n


def torch_time(ctx: Ctx, fn, iters, warmup, budget_s):
    torch = ctx.torch
    sync = (lambda: torch.cuda.synchronize()) if ctx.tdev == "cuda" else (lambda: None)
    with torch.no_grad():
        return time_loop(fn, sync, iters, warmup, budget_s)


# ---- sections -----------------------------------------------------------------------------------------
@section("matmul")
def bench_matmul(ctx: Ctx, args) -> list[dict]:
    sc = ctx.sc
    rows = []
    rng = np.random.default_rng(0)
    for dtype in args.dtypes:
        if dtype == "f16" and not ctx.be.has_f16:
            print("skip f16: adapter lacks shader-f16", file=sys.stderr)
            continue
        isz = 2 if dtype == "f16" else 4
        for n in args.sizes:
            if not ctx.fits(3 * n * n * isz + 2 * n * n * 4, n * n * isz):
                print(f"skip matmul {dtype} {n}: does not fit the device", file=sys.stderr)
                continue
            a = rng.standard_normal((n, n), dtype=np.float32)
            b = rng.standard_normal((n, n), dtype=np.float32)
            flops = 2.0 * n ** 3
            ta, tb = sc.tensor(a, device=ctx.dev), sc.tensor(b, device=ctx.dev)
            if dtype == "f16":
                ta, tb = ta.to("f16").realize(), tb.to("f16").realize()
            run, sync = wgpu_program(ctx, [ta @ tb])
            # a correctness spot check of one row against float64 (the benchmark times a working kernel)
            run()
            out = run.result()
            want = a.astype(np.float64)[:1] @ b.astype(np.float64) if dtype == "f32" else \
                a.astype(np.float16).astype(np.float64)[:1] @ b.astype(np.float16).astype(np.float64)
            err = float(np.abs(out[:1].astype(np.float64) - want).max() / (np.sqrt(n) + 1e-9))
            sec = time_loop(run, sync, args.iters, args.warmup, args.budget)
            row = {"op": "matmul", "dtype": dtype, "shape": f"{n}x{n}x{n}", "wgpu_ms": sec * 1e3,
                   "wgpu_tflops": flops / sec / 1e12, "err": err}
            if ctx.torch is not None and not (ctx.tdev == "cpu" and dtype == "f16" and n > 2048):
                torch = ctx.torch
                tdt = torch.float16 if dtype == "f16" else torch.float32
                xa = torch.from_numpy(a).to(ctx.tdev, tdt)
                xb = torch.from_numpy(b).to(ctx.tdev, tdt)
                tsec = torch_time(ctx, lambda: torch.matmul(xa, xb), args.iters, args.warmup, args.budget)
                row.update(torch_ms=tsec * 1e3, torch_tflops=flops / tsec / 1e12)
            rows.append(row)
            print(fmt_row(row), flush=True)
    return rows


# ---- output ------------------------------------------------------------------------------------------
def fmt_row(r: dict) -> str:
    t = (f"  torch {r['torch_tflops']:9.4g} TFLOP/s {r['torch_ms']:9.3f} ms  wgpu/torch {r['wgpu_tflops'] / r['torch_tflops']:.3g}"
         if "torch_tflops" in r else "  torch -")
    return (f"{r['op']:8s} {r['dtype']:4s} {r['shape']:>16s}  wgpu {r['wgpu_tflops']:9.4g} TFLOP/s "
            f"{r['wgpu_ms']:9.3f} ms{t}")


def render_block(ctx: Ctx, name: str, rows: list[dict], args) -> str:
    day = _dt.date.today().isoformat()
    lines = [f"<!-- BEGIN {name} @ {ctx.dev.name} -->",
             f"### {name} on {ctx.dev.name}", "",
             f"- date: {day}", f"- scellis: {ctx.wname}", f"- reference: {ctx.tname}",
             f"- timing: warm-up {args.warmup}, up to {args.iters} executions of a compiled Program per "
             f"one readback (wall clock); TFLOP/s = 2*M*N*K / time", "",
             "| op | dtype | M x N x K | scellis wgpu TFLOP/s | ms | torch TFLOP/s | ms | wgpu / torch |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "torch_tflops" in r:
            t = f"{r['torch_tflops']:.4g} | {r['torch_ms']:.3f} | {r['wgpu_tflops'] / r['torch_tflops']:.3g}"
        else:
            t = "- | - | -"
        lines.append(f"| {r['op']} | {r['dtype']} | {r['shape']} | {r['wgpu_tflops']:.4g} | {r['wgpu_ms']:.3f} | {t} |")
    lines += ["", f"<!-- END {name} @ {ctx.dev.name} -->"]
    return "\n".join(lines)


def write_results(blocks: list[tuple[str, str]], path: Path = RESULTS) -> None:
    """Replace each (name @ device) block in RESULTS.md, or append it; other blocks are kept."""
    text = path.read_text() if path.exists() else "# Kernel benchmark results\n\nWritten by `benchmarks/kernels.py`.\n"
    for key, block in blocks:
        pat = re.compile(rf"<!-- BEGIN {re.escape(key)} -->.*?<!-- END {re.escape(key)} -->", re.S)
        if pat.search(text):
            text = pat.sub(lambda _m: block, text)
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text if text.endswith("\n") else text + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="wgpu adapter (name or part of it); default: the best")
    ap.add_argument("--sections", default="matmul", help=f"comma list of {sorted(SECTIONS)}")
    ap.add_argument("--sizes", default="1024,2048,4096,8192")
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=5.0, help="seconds per measurement at most (iters shrink)")
    ap.add_argument("--quick", action="store_true", help="small sizes, few iterations (CI / llvmpipe)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args(argv)
    if args.quick:
        if args.sizes == ap.get_default("sizes"):
            args.sizes = "64,128,256"
        args.iters, args.warmup, args.budget = min(args.iters, 3), 1, min(args.budget, 1.0)
    args.sizes = [int(s) for s in str(args.sizes).split(",") if s]
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    names = [s for s in args.sections.split(",") if s]
    for s in names:
        if s not in SECTIONS:
            ap.error(f"unknown section {s!r}; have {sorted(SECTIONS)}")
    ctx = Ctx(args.device, not args.no_torch)
    print(f"# {ctx.wname}\n# {ctx.tname}", flush=True)
    blocks = []
    for s in names:
        rows = SECTIONS[s](ctx, args)
        if rows:
            blocks.append((f"{s} @ {ctx.dev.name}", render_block(ctx, s, rows, args)))
    if not args.no_write and blocks:
        write_results(blocks)
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
