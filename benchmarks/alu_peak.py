"""Pure-ALU multiply-add throughput through wgpu: f32 against f16 (scalar, vec2, vec4), no memory traffic.

    python benchmarks/alu_peak.py                  # 8448 workgroups x 256, 4096 steps, 16 chains (a GPU)
    python benchmarks/alu_peak.py --quick          # small (llvmpipe)

Why: issue 14 asks for an f16 matmul at twice our f32's rate, which needs the driver to run vec4<f16>
multiply-adds (packed HFMA2 on NVIDIA) at twice the f32 rate. This measures the rate the adapter gives each
type through naga and its Vulkan driver, with nothing else in the way: CHAINS independent chains a = a*m + c
an invocation (benchmarks/alu_peak.wgsl). Every kernel's output is checked against the chains' exact value
before it is timed. Writes the block "alu peak @ <adapter>" of benchmarks/RESULTS.md (--no-write: not).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.kernels import write_results  # noqa: E402

# a = a * MUL + ADD contracts to ADD / (1 - MUL) = 0.1 by 0.9 a step. In f16 a chain stops moving once a step's
# change is under half a unit in the last place: within 3e-4 of 0.1 (0.3%), whatever the rounding (an fma or
# a multiply and an add), so every output can be checked against the exact value in float64.
MUL, ADD = 0.9, 0.01
TOL = {"f32": 1e-4, "f16": 1e-2}
CASES = [("f32", "fma", 4), ("f32", "mad", 4), ("f32", "fma", 1), ("f16", "fma", 4), ("f16", "mad", 4),
         ("f16", "fma", 2), ("f16", "fma", 1)]


def source(templates, t: str, how: str, width: int, chains: int, iters: int) -> str:
    vt = f"vec{width}<{t}>" if width > 1 else t
    decl = "\n".join(templates.snippet("alu_peak", "decl", I=i, VT=vt, T=t) for i in range(chains))
    step = "\n".join(templates.snippet("alu_peak", f"step_{how}", I=i) for i in range(chains))
    out = templates.snippet("alu_peak", f"out_{width}", SUM=" + ".join(f"a{i}" for i in range(chains)))
    from scellis_jupyter.backends.wgpu.templates import enable_f16
    return templates.render("alu_peak", ENABLE=enable_f16(t), VT=vt, T=t, MUL=MUL, ADD=ADD,
                            DECL=decl, STEP=step, ITER=iters, OUT=out)


def start(chains: int, threads: int) -> np.ndarray:
    """The chains' first values, as the kernel sets them: [chains, threads]."""
    g = np.arange(threads) % 256
    return np.stack([g * 0.001 + i * 0.0001 for i in range(chains)])


def reference(chains: int, iters: int, threads: int) -> np.ndarray:
    """Each invocation's sum of chains, exact in float64: a_n = f + (a_0 - f) MUL^n, f = ADD / (1 - MUL)."""
    f = ADD / (1 - MUL)
    return (f + (start(chains, threads) - f) * MUL ** iters).sum(axis=0)


def simulate(t: str, chains: int, iters: int, threads: int) -> np.ndarray:
    """The same chains stepped in numpy's float16 / float32 (a multiply and an add, each rounded): the
    rounding a kernel of that type may show, for choosing TOL."""
    dt = np.float16 if t == "f16" else np.float32
    a = start(chains, threads).astype(np.float32).astype(dt)
    m, c = dt(MUL), dt(ADD)
    for _ in range(iters):
        a = a * m + c
    return a.astype(np.float64).sum(axis=0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="wgpu adapter (name or part of it); default: the best")
    ap.add_argument("--iters", type=int, default=4096, help="multiply-add steps a chain")
    ap.add_argument("--groups", type=int, default=8448, help="workgroups of 256 invocations")
    ap.add_argument("--chains", type=int, default=16, help="independent chains an invocation")
    ap.add_argument("--reps", type=int, default=5, help="dispatches a timed submit")
    ap.add_argument("--quick", action="store_true", help="64 steps, 64 workgroups, 4 chains (CI / llvmpipe)")
    ap.add_argument("--no-write", action="store_true", help="do not touch benchmarks/RESULTS.md")
    args = ap.parse_args(argv)
    if args.quick:
        args.iters, args.groups, args.chains, args.reps = 64, 64, 4, 2

    import scellis_jupyter as sc
    from scellis_jupyter.backends.wgpu.templates import Templates
    from scellis_jupyter.backends.wgpu.kernels.matmul_tune import time_direct
    dev = sc.device(args.device or "wgpu")
    if dev.backend != "wgpu":
        raise SystemExit(f"not a wgpu device: {dev}")
    be = dev.impl
    templates = Templates(lambda name: (ROOT / "benchmarks" / f"{name}.wgsl").read_text())
    threads = args.groups * 256
    out = be._buffer(threads * 16)
    rows, failed = [], []
    print(f"{dev.name}: {args.groups} workgroups x 256, {args.iters} steps x {args.chains} chains", flush=True)
    for t, how, width in CASES:
        if t == "f16" and "shader-f16" not in be.features:
            print(f"{t} {how} vec{width}: skipped (no shader-f16)")
            continue
        src = source(templates, t, how, width, args.chains, args.iters)
        pipe = be.pipeline(f"alu_peak:{t}:{how}:{width}:{args.chains}:{args.iters}", src)
        bg = be.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
            {"binding": 0, "resource": {"buffer": out, "offset": 0, "size": out.size}}])
        d = [(pipe, bg, (args.groups, 1, 1))]
        time_direct(be, out, d, 1)
        got = np.frombuffer(be.device.queue.read_buffer(out), np.float32).reshape(threads, 4)[:1024].astype(np.float64)
        ref = reference(args.chains, args.iters, min(threads, 1024))
        want = np.zeros((len(ref), 4))
        want[:, :width] = ref[:, None]
        if width == 1:
            want[:] = ref[:, None]
        tol = TOL[t]
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        if not err <= tol:
            failed.append(f"{t} {how} vec{width}: err {err:.3g} over {tol}")
            continue
        time_direct(be, out, d, args.reps)
        s = min(time_direct(be, out, d, args.reps) for _ in range(3))
        rate = threads * args.iters * args.chains * width * 2 / s / 1e12
        rows.append({"t": t, "how": how, "width": width, "rate": rate, "ms": s * 1e3, "err": err})
        print(f"{t} {how:3s} vec{width}: {rate:9.4g} TFLOP/s  {s * 1e3:8.3f} ms  err {err:.2g}", flush=True)
    if failed:
        print("wrong results:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    base = next((r["rate"] for r in rows if (r["t"], r["how"], r["width"]) == ("f32", "fma", 4)), None)
    if not args.no_write and rows:
        key = f"alu peak @ {dev.name}"
        lines = [f"<!-- BEGIN {key} -->", f"### pure-ALU multiply-add rate (benchmarks/alu_peak.py) on {dev.name}", "",
                 f"- date: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%dT%H:%M+00:00')}",
                 f"- {args.groups} workgroups x 256 invocations, {args.chains} independent chains of {args.iters} "
                 f"multiply-adds each (a FLOP: a multiply or an add); best of 3 submits of {args.reps} dispatches",
                 "- ratio: to f32 vec4 fma; every output checked against the exact value (float64) first", "",
                 "| type | op | width | TFLOP/s | ms | ratio to f32 |", "|---|---|---:|---:|---:|---:|"]
        for r in rows:
            ratio = f"{r['rate'] / base:.2f}" if base else "-"
            lines.append(f"| {r['t']} | {r['how']} | vec{r['width']} | {r['rate']:.4g} | {r['ms']:.3f} | {ratio} |")
        lines += ["", f"<!-- END {key} -->"]
        write_results([(key, "\n".join(lines))])
        print(f"wrote {ROOT / 'benchmarks' / 'RESULTS.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
