"""Kernel benchmarks: scellis wgpu kernels next to PyTorch on the same machine; writes benchmarks/RESULTS.md.

    python benchmarks/kernels.py                       # every section on the best wgpu device
    python benchmarks/kernels.py --sizes 1024,2048 --dtypes f32
    python benchmarks/kernels.py --quick --no-write    # small sizes; runs on llvmpipe in well under a minute

Timing on wgpu: the op is compiled once into a Program and re-executed (no graph overhead); after a
warm-up, N executions are recorded into one pass and the clock stops when a single 4-byte readback
returns (wall clock around queue completion). PyTorch runs on CUDA when available (TF32 off for the
f32 reference: it is what an f32 matmul means) else on the CPU, timed the same way (synchronize).

Sections (SECTIONS): matmul, attention (fwd and fwd+bwd), softmax, layer_norm, rms_norm, cross_entropy,
reduce_sum, elementwise, dispatch;
each takes (ctx, args) and returns rows that `write_results` renders, one block per (section, device).
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
TIER = "debug"        # the tier wgpu_program compiles under (benchmarks/run.py times the tuned matmul under prod)


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
        return f"wgpu: {self.dev.name} via {self.dev.via} ({self.dev.adapter_type})"

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
    tier, _ = resolve(TIER)
    prog, leaves = compile_program([t.node for t in tensors], getattr(be, "program_key", be.name), tier)
    storages = [l.storage for l in leaves]
    box = {}

    def run():
        box["out"] = execute(prog, storages, be)

    def sync():
        s = box["out"][0]
        be.to_numpy(s.sub(0, (1,), s.dtype, min(s.nbytes, 4))) if s.nbytes else be.flush()

    def result(i=0):
        return be.to_numpy(box["out"][i])

    def kernels() -> set:
        """The kernel names (pipeline keys' first field) the Program's recorded dispatches use (after a run)."""
        rec = be._records.get(prog.hash)
        names = {id(pl): key.split(":")[0] for key, pl in be._pipelines.items()}
        return {names.get(id(d[0]), "?") for d in rec[1]} if rec else set()
    run.result, run.kernels = result, kernels
    return run, sync


def attention_path(kernels: set) -> str:
    """Which attention path a Program ran, from its kernels: the flash kernels, the materialized-score path
    (`attention_scores` row kernels between batched matmuls), or the one-row-per-thread kernels."""
    if any(k.startswith("flash_") for k in kernels):
        return "flash"
    if "attention_scores" in kernels:
        return "score path"
    return "row-wise" if any(k.startswith("attention_") for k in kernels) else "?"


WINDOW_S = 0.05     # a measurement spans at least this long (more runs than `iters` for short ones)
# a process's first measurement first runs its kernel this long: an idle GPU's clocks take a while to come up (on an
# H100, 2026-12-06, the first size measured, 4096^3 f32, read 13.1 TFLOP/s after the plain warm-up and 41.5 after
# another size)
FIRST_WARM_S = 1.0
_WARMED = [False]


def time_loop(run, sync, iters: int, warmup: int, budget_s: float) -> float:
    """Seconds per iteration: warm up, then N runs with one sync at the end. N starts at `iters` (fewer if
    one run would overrun `budget_s`) and grows fourfold until the N runs span WINDOW_S: the one sync at
    the end (a readback on wgpu, about 0.5 ms there, against tens of microseconds for
    torch.cuda.synchronize) must be a small share of the window, or it is charged to short kernels (20
    runs of a 25 us softmax read as 49 us a run on the H200). Each shorter round warms the next; a process's
    first measurement warms for FIRST_WARM_S."""
    for _ in range(max(warmup, 1)):
        run()
    sync()
    if not _WARMED[0]:
        _WARMED[0] = True
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < FIRST_WARM_S:
            run()
            sync()
    t0 = time.perf_counter()
    run()
    sync()
    one = time.perf_counter() - t0
    n = max(1, min(iters, int(budget_s / max(one, 1e-9))))
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            run()
        t1 = time.perf_counter()
        sync()
        took = time.perf_counter() - t0
        if took >= WINDOW_S or took * 5 > budget_s:
            break
        n *= 4
    LAST_HOST[0] = (t1 - t0) / n        # host time to issue one run (the rest is waiting for the device)
    return took / n


LAST_HOST = [0.0]


def torch_time(ctx: Ctx, fn, iters, warmup, budget_s):
    torch = ctx.torch
    sync = (lambda: torch.cuda.synchronize()) if ctx.tdev == "cuda" else (lambda: None)
    with torch.no_grad():
        return time_loop(fn, sync, iters, warmup, budget_s)


# ---- sections -----------------------------------------------------------------------------------------
def row(op, dtype, shape, sec, work, unit, tsec=None, err=None, note="") -> dict:
    """One table row; `work` is FLOPs (unit TFLOP/s), bytes (GB/s) or logical ops (us/op)."""
    def rate(t):
        if unit == "TFLOP/s":
            return work / t / 1e12
        if unit == "GB/s":
            return work / t / 1e9
        return t / work * 1e6          # us per op (dispatch benchmark): lower is better
    r = {"op": op, "dtype": dtype, "shape": shape, "wgpu_ms": sec * 1e3, "wgpu_rate": rate(sec), "unit": unit,
         "err": err, "note": note, "host_ms": LAST_HOST[0] * 1e3}
    if tsec is not None:
        r.update(torch_ms=tsec * 1e3, torch_rate=rate(tsec))
    print(fmt_row(r), flush=True)
    return r


def _t(ctx, a, dtype=None):
    torch = ctx.torch
    x = torch.from_numpy(np.ascontiguousarray(a)).to(ctx.tdev)
    return x.to(dtype) if dtype is not None else x


def _relerr(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / (np.abs(want).max() + 1e-30)) if want.size else 0.0


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
            ta, tb = sc.tensor(a, device=ctx.dev), sc.tensor(b, device=ctx.dev)
            if dtype == "f16":
                ta, tb = ta.to("f16").realize(), tb.to("f16").realize()
            run, sync = wgpu_program(ctx, [ta @ tb])
            # a correctness spot check of one row against float64 (the benchmark times a working kernel)
            run()
            out = run.result()
            want = a.astype(np.float64)[:1] @ b.astype(np.float64) if dtype == "f32" else \
                a.astype(np.float16).astype(np.float64)[:1] @ b.astype(np.float16).astype(np.float64)
            err = _relerr(out[:1], want)
            sec = time_loop(run, sync, args.iters, args.warmup, args.budget)
            tsec = None
            if ctx.torch is not None and not (ctx.tdev == "cpu" and dtype == "f16" and n > 2048):
                torch = ctx.torch
                tdt = torch.float16 if dtype == "f16" else torch.float32
                xa, xb = _t(ctx, a, tdt), _t(ctx, b, tdt)
                tsec = torch_time(ctx, lambda: torch.matmul(xa, xb), args.iters, args.warmup, args.budget)
            rows.append(row("matmul", dtype, f"{n}x{n}x{n}", sec, 2.0 * n ** 3, "TFLOP/s", tsec, err))
    return rows


def _attn_shapes(args):
    if args.quick:
        return [(1, 2, 128, 32), (1, 2, 256, 64)]
    shapes = [(4, 16, 1024, 64), (2, 16, 4096, 64), (1, 8, 8192, 64), (1, 8, 16384, 64)]
    if getattr(args, "attn_shapes", None):
        shapes = args.attn_shapes
    lens = getattr(args, "attn_lengths", None)
    return [s for s in shapes if not lens or s[2] in lens]


def _attn_case(ctx, args, q, k, v, g, dtype, causal, bwd, drop=0.0) -> dict:
    """One row: scellis (compiled Program) next to torch SDPA on the same inputs; FLOPs of the full
    (non-causal) score matrix halved for causal, fwd 4*B*H*L^2*D and bwd 10*B*H*L^2*D."""
    from scellis_jupyter.graph import functional as F
    from scellis_jupyter.graph.autodiff import grad
    sc = ctx.sc
    b, h, l, d = q.shape
    tq, tk, tv, tg = (sc.tensor(x, dtype=dtype, device=ctx.dev) for x in (q, k, v, g))
    gen = None
    if drop:
        from scellis_jupyter.rng.generator import Generator
        gen = Generator(0).stream("attention")
    out = F.attention(tq.node, tk.node, tv.node, causal=causal, dropout=drop, gen=gen)
    nodes = [out] if not bwd else list(grad([out], [tq.node, tk.node, tv.node], [tg.node])) + [out]
    run, sync = wgpu_program(ctx, [sc.Tensor(n, ctx.dev) for n in nodes])
    run()
    path = attention_path(run.kernels())       # up to SCORES_MAX_LK keys the score path is the default
    got = [run.result(i) for i in range(len(nodes) - 1 if bwd else 1)]    # out, or dq, dk, dv
    tsec = terr = None
    if ctx.torch is not None:
        torch = ctx.torch
        tdt = torch.float16 if dtype == "f16" else torch.float32
        sdpa = torch.nn.functional.scaled_dot_product_attention
        xq, xk, xv = (_t(ctx, x, tdt).requires_grad_(bwd) for x in (q, k, v))
        xg = _t(ctx, g, tdt)
        if bwd:
            def fn():
                o = sdpa(xq, xk, xv, is_causal=causal, dropout_p=drop)
                return torch.autograd.grad(o, (xq, xk, xv), xg)
            sync_t = (lambda: torch.cuda.synchronize()) if ctx.tdev == "cuda" else (lambda: None)
            want = fn()
            tsec = time_loop(fn, sync_t, args.iters, args.warmup, args.budget)
        else:
            def fn():
                return sdpa(xq, xk, xv, is_causal=causal)
            want = (fn(),)
            tsec = torch_time(ctx, fn, args.iters, args.warmup, args.budget)
        if not drop:
            terr = max(_relerr(np.asarray(a, np.float32)[:, :, :64], w[:, :, :64].float().cpu().numpy())
                       for a, w in zip(got, want))
    sec = time_loop(run, sync, args.iters, args.warmup, args.budget)
    flops = (14.0 if bwd else 4.0) * b * h * l * l * d * (0.5 if causal else 1.0)
    what = ("attention fwd+bwd" if bwd else "attention fwd") + (" causal" if causal else "")
    what += f" dropout {drop:g}" if drop else ""
    return row(what, dtype, f"B{b} H{h} L{l} D{d}, {path}", sec, flops, "TFLOP/s",
               tsec, terr, note="FLOPs 4*B*H*L^2*D fwd, 14* fwd+bwd, halved when causal; err: worst of "
                                "out (fwd) or dq, dk, dv (fwd+bwd) vs torch")


@section("attention")
def bench_attention(ctx: Ctx, args) -> list[dict]:
    """f32 forward, forward+backward (dq, dk, dv for an upstream gradient), causal forward+backward;
    f16 forward+backward where the adapter grants shader-f16 and f16 is among --dtypes; forward+backward with
    dropout 0.1, at every length."""
    rows = []
    rng = np.random.default_rng(1)
    f16 = "f16" in args.dtypes and ctx.be.has_f16
    for (b, h, l, d) in _attn_shapes(args):
        q, k, v, g = (rng.standard_normal((b, h, l, d), dtype=np.float32) for _ in range(4))
        if not ctx.fits(4 * q.nbytes * 3, q.nbytes):
            continue
        rows.append(_attn_case(ctx, args, q, k, v, g, "f32", False, False))
        rows.append(_attn_case(ctx, args, q, k, v, g, "f32", False, True))
        rows.append(_attn_case(ctx, args, q, k, v, g, "f32", True, True))
        if f16:
            rows.append(_attn_case(ctx, args, q, k, v, g, "f16", False, True))
        # dropout (different masks from torch's: no error column)
        rows.append(_attn_case(ctx, args, q, k, v, g, "f32", False, True, drop=0.1))
    return rows


def side_by_side(ctx: Ctx, args, node, torch_fn):
    """(scellis s, torch s or None, err or None) for the Program computing `node` and `torch_fn()` on torch's
    device; err compares scellis' result with torch's."""
    run, sync = wgpu_program(ctx, [ctx.sc.Tensor(node, ctx.dev)])
    run()
    got = run.result()
    tsec = err = None
    if ctx.torch is not None:
        err = _relerr(got, torch_fn().cpu().numpy())
        tsec = torch_time(ctx, torch_fn, args.iters, args.warmup, args.budget)
    return time_loop(run, sync, args.iters, args.warmup, args.budget), tsec, err


def _row_shapes(args):
    return [(256, 512), (1024, 1024)] if args.quick else [(8192, 1024), (4096, 4096), (65536, 256)]


@section("softmax")
def bench_softmax(ctx: Ctx, args) -> list[dict]:
    """Row softmax; GB/s counts one read and one write of the tensor."""
    from scellis_jupyter.graph import functional as F
    sc = ctx.sc
    rows = []
    rng = np.random.default_rng(2)
    for (r, c) in _row_shapes(args):
        x = rng.standard_normal((r, c), dtype=np.float32)
        tx = sc.tensor(x, device=ctx.dev)
        xt = _t(ctx, x) if ctx.torch is not None else None
        sec, tsec, terr = side_by_side(ctx, args, F.softmax(tx.node, -1), lambda: ctx.torch.softmax(xt, -1))
        rows.append(row("softmax", "f32", f"{r}x{c}", sec, 2.0 * x.nbytes, "GB/s", tsec, terr))
    return rows


@section("layer_norm")
def bench_layer_norm(ctx: Ctx, args) -> list[dict]:
    """layer_norm over the last axis with weight and bias (a composite: mean, var, scale, shift)."""
    from scellis_jupyter.graph import functional as F
    sc = ctx.sc
    rows = []
    rng = np.random.default_rng(3)
    for (r, c) in _row_shapes(args):
        x = rng.standard_normal((r, c), dtype=np.float32)
        w = rng.standard_normal(c, dtype=np.float32)
        bb = rng.standard_normal(c, dtype=np.float32)
        tx, tw, tb = (sc.tensor(a, device=ctx.dev) for a in (x, w, bb))
        xt, wt, bt = (_t(ctx, a) for a in (x, w, bb)) if ctx.torch is not None else (None,) * 3
        sec, tsec, terr = side_by_side(ctx, args, F.layer_norm(tx.node, c, tw.node, tb.node),
                                       lambda: ctx.torch.nn.functional.layer_norm(xt, (c,), wt, bt))
        rows.append(row("layer_norm", "f32", f"{r}x{c}", sec, 2.0 * x.nbytes, "GB/s", tsec, terr))
    return rows


@section("rms_norm")
def bench_rms_norm(ctx: Ctx, args) -> list[dict]:
    """rms_norm over the last axis with a weight (one kernel a row); GB/s counts one read and one write."""
    from scellis_jupyter.graph import functional as F
    sc = ctx.sc
    rows = []
    rng = np.random.default_rng(5)
    for (r, c) in _row_shapes(args):
        x = rng.standard_normal((r, c), dtype=np.float32)
        w = rng.standard_normal(c, dtype=np.float32)
        tx, tw = (sc.tensor(a, device=ctx.dev) for a in (x, w))
        xt, wt = (_t(ctx, a) for a in (x, w)) if ctx.torch is not None else (None,) * 2

        def ref():
            fn = getattr(ctx.torch.nn.functional, "rms_norm", None)
            if fn is not None:
                return fn(xt, (c,), wt, 1e-6)
            return xt * ctx.torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + 1e-6) * wt
        sec, tsec, terr = side_by_side(ctx, args, F.rms_norm(tx.node, c, tw.node, 1e-6), ref)
        rows.append(row("rms_norm", "f32", f"{r}x{c}", sec, 2.0 * x.nbytes, "GB/s", tsec, terr))
    return rows


@section("cross_entropy")
def bench_cross_entropy(ctx: Ctx, args) -> list[dict]:
    """The catalog's cross_entropy (mean over rows) on logits [rows, classes] and i32 labels, forward only;
    GB/s counts one read of the logits."""
    from scellis_jupyter.catalog.losses import make_loss
    sc = ctx.sc
    loss = make_loss("cross_entropy")
    rows = []
    rng = np.random.default_rng(6)
    for (r, c) in _row_shapes(args):
        x = rng.standard_normal((r, c), dtype=np.float32)
        y = rng.integers(0, c, r).astype(np.int32)
        tx, ty = sc.tensor(x, device=ctx.dev), sc.tensor(y, device=ctx.dev)
        xt = _t(ctx, x) if ctx.torch is not None else None
        yt = _t(ctx, y.astype(np.int64)) if ctx.torch is not None else None
        sec, tsec, terr = side_by_side(ctx, args, loss(tx.node, ty.node),
                                       lambda: ctx.torch.nn.functional.cross_entropy(xt, yt))
        rows.append(row("cross_entropy", "f32", f"{r}x{c}", sec, 1.0 * x.nbytes, "GB/s", tsec, terr))
    return rows


@section("reduce_sum")
def bench_reduce_sum(ctx: Ctx, args) -> list[dict]:
    """Row sums over the last axis, and whole-tensor sums; GB/s counts one read of the input."""
    from scellis_jupyter.graph import functional as F
    sc = ctx.sc
    rows = []
    rng = np.random.default_rng(7)
    cases = [((r, c), -1) for r, c in _row_shapes(args)]
    cases += [((n,), None) for n in ([1 << 16, 1 << 20] if args.quick else [1 << 24, 1 << 26])]
    for shape, axis in cases:
        x = rng.standard_normal(shape, dtype=np.float32)
        tx = sc.tensor(x, device=ctx.dev)
        xt = _t(ctx, x) if ctx.torch is not None else None
        tfn = (lambda: xt.sum(-1)) if axis == -1 else (lambda: xt.sum())
        sec, tsec, terr = side_by_side(ctx, args, F.sum_(tx.node, axis), tfn)
        name = "sum(-1)" if axis == -1 else "sum(all)"
        rows.append(row(name, "f32", "x".join(map(str, shape)), sec, 1.0 * x.nbytes, "GB/s", tsec, terr))
    # column sums (bias / norm-weight gradients: leading axes reduced, the contiguous axis kept)
    for shape in ([(1024, 384), (4096, 256)] if args.quick else [(16384, 384), (65536, 256), (4096, 4096)]):
        x = rng.standard_normal(shape, dtype=np.float32)
        tx = sc.tensor(x, device=ctx.dev)
        xt = _t(ctx, x) if ctx.torch is not None else None
        sec, tsec, terr = side_by_side(ctx, args, F.sum_(tx.node, 0), lambda: xt.sum(0))
        rows.append(row("sum(0)", "f32", "x".join(map(str, shape)), sec, 1.0 * x.nbytes, "GB/s", tsec, terr))
    # the step's gradient norm: sum of squares over every parameter of the GPT bench (one sum_many)
    w, v, nb = (64, 96, 2) if args.quick else (384, 96, 6)
    shapes = [(v, w), (256, w)] + [s for _ in range(nb) for s in
                                   [(w,), (w,), (w, 3 * w), (3 * w,), (w, w), (w,), (w,), (w,), (w, 4 * w), (4 * w,),
                                    (4 * w, w), (w,)]] + [(w,), (w,), (w, v), (v,)]
    xs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    ts = [sc.tensor(x, device=ctx.dev) for x in xs]
    txs = [_t(ctx, x) for x in xs] if ctx.torch is not None else None

    def tnorm2():            # the same work on torch: the copies (our gradients' stand-ins), then the norm
        ys = [x * 1.0 for x in txs]
        return ctx.torch.stack(ctx.torch._foreach_norm(ys)).square().sum()
    nbytes = 3.0 * sum(x.nbytes for x in xs)         # x * 1 reads and writes each input, the norm reads it
    many = F.sum_many([F.mul(t.node, 1.0) for t in ts], square=True)        # inputs in one arena, like grads
    chain = None
    for t in reversed(ts):
        g = F.mul(t.node, 1.0)
        s_ = F.sum_(F.mul(g, g))
        chain = s_ if chain is None else F.add(chain, s_)
    for name, node in (("grad norm^2: sum_many", many), ("grad norm^2: a sum per tensor", chain)):
        sec, tsec, terr = side_by_side(ctx, args, node, tnorm2)
        rows.append(row(name, "f32", f"{len(xs)} tensors (x*1 then the norm)", sec, nbytes, "GB/s", tsec, terr))
    return rows


@section("elementwise")
def bench_elementwise(ctx: Ctx, args) -> list[dict]:
    """a + b, and the chain gelu(a * b + c); GB/s counts the logical inputs and the output once."""
    from scellis_jupyter.graph import functional as F
    sc = ctx.sc
    rows = []
    rng = np.random.default_rng(4)
    for n in ([1 << 16, 1 << 20] if args.quick else [1 << 20, 1 << 24, 1 << 26]):
        a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
        ta, tb, tc = (sc.tensor(x, device=ctx.dev) for x in (a, b, c))
        cases = [("copy-like a*1 / clone", lambda: F.mul(ta.node, F.scalar(1.0)), 2 * a.nbytes,
                  lambda xa, xb, xc: xa.clone()),
                 ("add", lambda: F.add(ta.node, tb.node), 3 * a.nbytes,
                  lambda xa, xb, xc: xa + xb),
                 ("gelu(a*b+c)", lambda: F.gelu(F.add(F.mul(ta.node, tb.node), tc.node)), 4 * a.nbytes,
                  lambda xa, xb, xc: ctx.torch.nn.functional.gelu(xa * xb + xc))]
        xs = [_t(ctx, x) for x in (a, b, c)] if ctx.torch is not None else [None] * 3
        for name, build, nbytes, tfn in cases:
            sec, tsec, terr = side_by_side(ctx, args, build(), lambda: tfn(*xs))
            rows.append(row(name, "f32", f"{n}", sec, nbytes, "GB/s", tsec, terr))
    return rows


@section("dispatch")
def bench_dispatch(ctx: Ctx, args) -> list[dict]:
    """Per-dispatch cost of a replayed Program: N dependent row softmaxes of 256 floats (one dispatch each,
    nothing to fuse), and N dependent `+ 1` ops (fused into a few dispatches): us per logical op."""
    from scellis_jupyter.graph import functional as F
    sc = ctx.sc
    rows = []
    n = 200 if args.quick else 2000
    x = np.zeros((1, 256), np.float32)
    tx = sc.tensor(x, device=ctx.dev)
    for name, step, tstep in (("dispatch: softmax chain", lambda y: F.softmax(y, -1), lambda z: z.softmax(-1)),
                              ("dispatch: fused +1 chain", lambda y: F.add(y, F.scalar(1.0)), lambda z: z + 1.0)):
        y = tx.node
        for _ in range(n):
            y = step(y)
        run, sync = wgpu_program(ctx, [sc.Tensor(y, ctx.dev)])
        before = ctx.be.dispatches
        run()
        per_run = ctx.be.dispatches - before
        got = run.result()
        tsec = err = None
        if ctx.torch is not None:
            xt = _t(ctx, x)

            def chain():
                z = xt
                for _ in range(n):
                    z = tstep(z)
                return z
            err = _relerr(got, chain().cpu().numpy())
            tsec = torch_time(ctx, chain, max(2, args.iters // 4), 1, args.budget)
        sec = time_loop(run, sync, max(2, args.iters // 4), 1, args.budget)
        rows.append(row(name, "f32", f"{n} ops, {per_run} dispatches", sec, n, "us/op", tsec, err,
                        note="us/op: wall time of the replayed Program / logical ops; torch launches one kernel per op"))
    return rows


# ---- output ------------------------------------------------------------------------------------------
def _ratio(r) -> str:
    if "torch_rate" not in r:
        return "-"
    if r["unit"] == "us/op":
        return f"{r['torch_rate'] / r['wgpu_rate']:.3g}"
    return f"{r['wgpu_rate'] / r['torch_rate']:.3g}"


def fmt_row(r: dict) -> str:
    t = (f"  torch {r['torch_rate']:9.4g} {r['unit']} {r['torch_ms']:9.3f} ms  wgpu/torch speed {_ratio(r)}"
         if "torch_rate" in r else "  torch -")
    e = f"  err {r['err']:.2g}" if r.get("err") is not None else ""
    e += f"  (wgpu host {r['host_ms']:.3f} ms/run)" if r.get("host_ms") else ""
    return (f"{r['op']:18s} {r['dtype']:4s} {r['shape']:>22s}  wgpu {r['wgpu_rate']:9.4g} {r['unit']} "
            f"{r['wgpu_ms']:9.3f} ms{t}{e}")


def render_block(ctx: Ctx, name: str, rows: list[dict], args) -> str:
    day = _dt.date.today().isoformat()
    unit = rows[0]["unit"]
    tag = block_key(ctx, name)
    lines = [f"<!-- BEGIN {tag} -->",
             f"### {name} on {ctx.dev.name} via {ctx.dev.via} (tier {TIER})", "",
             f"- date: {day}", f"- scellis: {ctx.wname}", f"- reference: {ctx.tname}",
             f"- timing: warm-up {args.warmup}, up to {args.iters} executions of a compiled Program per "
             f"one readback (wall clock); speed ratio > 1 means scellis is faster",
             f"- err: max |scellis - reference| / max |reference| on a spot check", ""]
    notes = sorted({r["note"] for r in rows if r.get("note")})
    lines += [f"- {n}" for n in notes] + ([""] if notes else [])
    lines += [f"| op | dtype | shape | scellis {unit} | ms | torch {unit} | ms | speed scellis/torch | err |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t = f"{r['torch_rate']:.4g} | {r['torch_ms']:.3f}" if "torch_rate" in r else "- | -"
        e = f"{r['err']:.2g}" if r.get("err") is not None else "-"
        lines.append(f"| {r['op']} | {r['dtype']} | {r['shape']} | {r['wgpu_rate']:.4g} | {r['wgpu_ms']:.3f} | "
                     f"{t} | {_ratio(r)} | {e} |")
    lines += ["", f"<!-- END {tag} -->"]
    return "\n".join(lines)


def block_key(ctx: Ctx, name: str) -> str:
    """The RESULTS.md block a section's rows go to: per device, WebGPU implementation and tier."""
    return f"{name} @ {ctx.dev.name}" + (f" via {ctx.dev.implementation}" if ctx.dev.implementation != "wgpu-native"
                                         else "") + (f" tier {TIER}" if TIER != "debug" else "")


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
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {sorted(SECTIONS)}")
    ap.add_argument("--sizes", default="1024,2048,4096,8192")
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=5.0, help="seconds per measurement at most (iters shrink)")
    ap.add_argument("--quick", action="store_true", help="small sizes, few iterations (CI / llvmpipe)")
    ap.add_argument("--tier", default=None, choices=("debug", "prod", "fast"),
                    help="the tier programs compile under (default debug; the matrix-unit kernels run under prod "
                         "and fast only)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--attn-lengths", default="", help="attention: only these sequence lengths (comma list)")
    ap.add_argument("--attn-shapes", default="", help="attention: these BxHxLxD shapes instead (comma list), "
                    "e.g. 64x6x256x64 (the GPT bench's)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args(argv)
    if args.quick:
        if args.sizes == ap.get_default("sizes"):
            args.sizes = "64,128,256"
        args.iters, args.warmup, args.budget = min(args.iters, 3), 1, min(args.budget, 1.0)
        global WINDOW_S
        WINDOW_S = 0.0            # a smoke run (CI, llvmpipe): `iters` runs, no window to fill
    if args.tier:
        global TIER
        TIER = args.tier
    args.sizes = [int(s) for s in str(args.sizes).split(",") if s]
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    args.attn_lengths = [int(x) for x in args.attn_lengths.split(",") if x]
    args.attn_shapes = [tuple(int(y) for y in x.split("x")) for x in args.attn_shapes.split(",") if x]
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
            blocks.append((block_key(ctx, s), render_block(ctx, s, rows, args)))
    if not args.no_write and blocks:
        write_results(blocks)
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
