"""Host time per execute of a replayed one-dispatch Program on wgpu (issue 14 item 4), split into the
native wgpu calls and the Python around them, and a training loop's step beside the step alone.

    python benchmarks/host_overhead.py                  # softmax 64x64 and 4096x4096, tiny MLP loop
    python benchmarks/host_overhead.py --shapes 64x64 --loop-steps 0

Rows: `host` = wall time to issue one execute (no wait for the device); `native` = time inside wgpu
calls (wgpu-py's methods and the direct wgpu-native dispatch calls, each wrapped in a timer whose own
cost is subtracted); `python` = the rest. `python, stubbed` = the same execute with the dispatch calls
replaced by no-ops and no submits (main-thread CPU time, min of 7), the Python cost alone. Where the
device work runs inside the submit call (llvmpipe) `native` holds it and the split is noise beyond a
few hundred microseconds; `python, stubbed` is the figure to compare there.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

WRAPPED = {"GPUDevice": ["create_command_encoder", "create_bind_group", "create_buffer"],
           "GPUCommandEncoder": ["begin_compute_pass", "finish", "copy_buffer_to_buffer"],
           "GPUComputePassEncoder": ["end", "set_pipeline", "set_bind_group", "dispatch_workgroups"],
           "GPUQueue": ["submit", "write_buffer"]}


class Timers:
    """Wraps wgpu-py's methods and the runtime's direct calls in timers (undo() puts them back)."""

    def __init__(self, runtime):
        import wgpu.backends.wgpu_native as wn
        self.total, self.calls, self.saved, self.rt = 0.0, 0, [], runtime
        for cls, names in WRAPPED.items():
            c = getattr(wn, cls)
            for m in names:
                self.saved.append((c, m, getattr(c, m)))
                setattr(c, m, self._wrap(getattr(c, m)))
        self.raw = runtime._RAW
        if self.raw is not None:
            runtime._RAW = tuple(self._wrap(f) for f in self.raw[:3]) + (self.raw[3],)
        w = self._wrap(lambda: None)
        t = time.perf_counter()
        for _ in range(20000):
            w()
        outer = (time.perf_counter() - t) / 20000
        self.inner = self.total / self.calls        # timer cost counted inside a call
        self.outer = outer - self.inner              # and outside it
        self.reset()

    def _wrap(self, fn):
        pc = time.perf_counter

        def timed(*a, **k):
            t = pc()
            try:
                return fn(*a, **k)
            finally:
                self.total += pc() - t
                self.calls += 1
        return timed

    def reset(self):
        self.total, self.calls = 0.0, 0

    def native(self) -> float:
        return self.total - self.calls * self.inner

    def overhead(self) -> float:
        return self.calls * self.outer

    def undo(self):
        for c, m, f in self.saved:
            setattr(c, m, f)
        self.rt._RAW = self.raw


def softmax_program(ctx, shape):
    from benchmarks.kernels import wgpu_program
    from scellis_jupyter.graph import functional as F
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    tx = ctx.sc.tensor(x, device=ctx.dev)
    return wgpu_program(ctx, [ctx.sc.Tensor(F.softmax(tx.node, -1), ctx.dev)])


def split(ctx, run, sync, n: int) -> tuple[float, float, float, float]:
    """(host, native, python, wall) seconds per execute, the best of 3 by host time."""
    from scellis_jupyter.backends.wgpu import runtime
    timers = Timers(runtime)
    best = None
    try:
        for _ in range(3):
            timers.reset()
            t0 = time.perf_counter()
            for _ in range(n):
                run()
            t1 = time.perf_counter()
            sync()
            host = (t1 - t0) / n
            native = timers.native() / n
            got = (host, native, host - native - timers.overhead() / n, (time.perf_counter() - t0) / n)
            best = got if best is None or got[0] < best[0] else best
    finally:
        timers.undo()
    return best


def stubbed(ctx, run, sync, n: int) -> float:
    """Main-thread CPU seconds per execute with the dispatch calls no-ops and no submits (min of 7)."""
    from scellis_jupyter.backends.wgpu import runtime
    be = ctx.be
    raw, after, old = runtime._RAW, getattr(be, "flush_after", None), getattr(runtime, "FLUSH_AFTER_S", None)
    if raw is None:
        return float("nan")
    sync()
    runtime._RAW = (lambda *a: None, lambda *a: None, lambda *a: None, raw[3])
    be.flush_after = runtime.FLUSH_AFTER_S = 1e9      # (older runtimes read the module constant)
    try:
        best = []
        for _ in range(7):
            c = time.thread_time()
            for _ in range(n):
                run()
            best.append((time.thread_time() - c) / n)
    finally:
        runtime._RAW, runtime.FLUSH_AFTER_S = raw, old
        if after is None:
            del be.flush_after
        else:
            be.flush_after = after
        be.flush()          # the pass holds no work (the calls were no-ops)
    return min(best)


TINY_MLP = """
name = "mlp-tiny"
[data]
dataset = "synthetic_classification"
n_rows = 4096
n_features = 32
n_classes = 10
[model]
nodes = [{ op = "linear", out = 64 }, { op = "relu" }, { op = "linear", out = 10 }]
[recipe]
optimizer = { name = "adamw", lr = 1e-3 }
batch_size = 32
determinism = "prod"
"""


def loop_vs_step(dev, steps: int) -> tuple[float, float]:
    """(ms per step alone on one batch, ms per step of `for step in run`) on a tiny MLP, streamed data."""
    from scellis_jupyter.run.run import Run
    run = Run(TINY_MLP, device=dev, steps=10 ** 6)
    x, y = next(iter(run.loader))
    for _ in range(5):
        run._one_step(x, y)
    t = time.perf_counter()
    for _ in range(steps):
        run._one_step(x, y)
    step_ms = (time.perf_counter() - t) / steps * 1e3
    run = Run(TINY_MLP, device=dev, steps=10 ** 6)
    it = iter(run)
    for _ in range(5):
        next(it)
    t = time.perf_counter()
    for _ in range(steps):
        next(it)
    return step_ms, (time.perf_counter() - t) / steps * 1e3


def main(argv=None) -> int:
    from benchmarks.kernels import Ctx
    import scellis_jupyter as sc
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--shapes", default="64x64,4096x4096")
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--loop-steps", type=int, default=200)
    args = ap.parse_args(argv)
    ctx = Ctx(args.device, False)
    print(f"device: {ctx.wname}")
    print("| program | host us/execute | native us | python us | python us, stubbed | wall us/execute |")
    print("|---|---:|---:|---:|---:|---:|")
    for s in args.shapes.split(","):
        shape = tuple(int(v) for v in s.split("x"))
        run, sync = softmax_program(ctx, shape)
        for _ in range(50):
            run()
        sync()
        n = args.runs if shape[0] * shape[1] <= 1 << 20 else max(50, args.runs // 10)
        host, native, py, wall = split(ctx, run, sync, n)
        print(f"| softmax {s} (1 dispatch) | {host * 1e6:.1f} | {native * 1e6:.1f} | {py * 1e6:.1f} | "
              f"{stubbed(ctx, run, sync, n) * 1e6:.2f} | {wall * 1e6:.1f} |", flush=True)
    if args.loop_steps:
        print("\n| tiny MLP (batch 32) | step ms | loop ms per step | loop / step |\n|---|---:|---:|---:|")
        for name in ("wgpu", "reference"):
            dev = ctx.dev if name == "wgpu" else sc.device("reference")
            st, lp = loop_vs_step(dev, args.loop_steps)
            print(f"| {name} | {st:.3f} | {lp:.3f} | {lp / st:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
