"""Subgroup-matrix f16 GEMM designs side by side in one bare harness, the engine's own kernels among them.

    SCELLIS_WEBGPU=dawn python benchmarks/sgm_designs.py [--n 4096] [--only engine]   # a GPU with matrix units

Why: the engine's whole tiles (kernels/matmul_sgm.py) ran 4096^3 at 93 TFLOP/s on the H100 where a bare kernel of
the same design ran at 166 (benchmarks/RESULTS.md, 2026-12-07). This times, on one device and one set of buffers:
`direct` designs (fragments loaded straight from A and B), `staged` designs (vec4 loads into NBUF workgroup buffers,
f32 C stored straight from the fragments) and the engine's sources as it renders them (f16 or f32 C through Cs), so
a difference shows in the kernel or outside it. Every result is checked against torch (CUDA) or float64 first.
Prints one JSON line a design; nothing is written.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
M8 = N8 = K8 = 16


def _mma_step(tag, fm, fn, a, a_off, a_str, b, b_off, b_str) -> list[str]:
    """One k fragment: fm left fragments from `a` at a_off(i), fn right ones from `b` at b_off(j) (row-major, the
    given strides), and their fm x fn multiply-accumulates into c{i}_{j}."""
    out = [f"    let a{i}_{tag} = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&{a}, {a_off(i)}, false, {a_str});"
           for i in range(fm)]
    out += [f"    let b{j}_{tag} = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&{b}, {b_off(j)}, false, "
            f"{b_str});" for j in range(fn)]
    return out + [f"    c{i}_{j} = subgroupMatrixMultiplyAccumulate(a{i}_{tag}, b{j}_{tag}, c{i}_{j});"
                  for i in range(fm) for j in range(fn)]


def direct(fm, fn, wm, wn, ku):
    """One subgroup's fm x fn fragments loaded straight from A and B, ku k fragments a step."""
    sm, sn = fm * M8, fn * N8
    decl = "\n".join(f"  var c{i}_{j} = subgroup_matrix_result<f32, 16, 16>();" for i in range(fm) for j in range(fn))
    body = []
    for u in range(ku):
        body += _mma_step(u, fm, fn, "A", lambda i: f"(row0 + {i * M8}u) * p.k + kk + {u * K8}u", "p.k",
                          "B", lambda j: f"(kk + {u * K8}u) * p.n + col0 + {j * N8}u", "p.n")
    stores = "\n".join(f"  subgroupMatrixStore(&C, (row0 + {i * M8}u) * p.n + col0 + {j * N8}u, c{i}_{j}, false, p.n);"
                       for i in range(fm) for j in range(fn))
    body = "\n".join(body)
    src = f"""enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;
struct P {{ m: u32, n: u32, k: u32, pad: u32 }}
@group(0) @binding(0) var<storage, read> A: array<f16>;
@group(0) @binding(1) var<storage, read> B: array<f16>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size({32 * wm * wn})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(subgroup_id) sg: u32) {{
  let row0 = wg.y * {sm * wm}u + (sg / {wn}u) * {sm}u; let col0 = wg.x * {sn * wn}u + (sg % {wn}u) * {sn}u;
{decl}
  for (var kk = 0u; kk < p.k; kk += {ku * K8}u) {{
{body}
  }}
{stores}
}}
"""
    return src, sm * wm, sn * wn


def staged(fm, fn, wm, wn, bk, nbuf, pad=8):
    """vec4<f16> loads into registers, scalar stores into nbuf workgroup buffers, fragments from them."""
    nt = 32 * wm * wn
    sm, sn = fm * M8, fn * N8
    bm, bn = sm * wm, sn * wn
    astr, bstr = bk + pad, bn + pad
    alen, blen = bm * astr, bk * bstr
    aslots, bslots = bm * bk // 4 // nt, bk * bn // 4 // nt
    decl = "\n".join(f"  var c{i}_{j} = subgroup_matrix_result<f32, 16, 16>();" for i in range(fm) for j in range(fn))
    regs = "\n".join([f"  var ra{s}: vec4<f16>;" for s in range(aslots)] + [f"  var rb{s}: vec4<f16>;" for s in range(bslots)])

    def fetch(k0):
        out = [f"    {{ let e = (t + {s * nt}u) * 4u; ra{s} = A[((m0 + e / {bk}u) * p.k + {k0} + e % {bk}u) / 4u]; }}"
               for s in range(aslots)]
        out += [f"    {{ let e = (t + {s * nt}u) * 4u; rb{s} = B[(({k0} + e / {bn}u) * p.n + n0 + e % {bn}u) / 4u]; }}"
                for s in range(bslots)]
        return "\n".join(out)

    def put(buf):
        out = [f"    {{ let e = (t + {s * nt}u) * 4u; let o = {buf * alen}u + (e / {bk}u) * {astr}u + e % {bk}u; "
               f"As[o] = ra{s}.x; As[o+1u] = ra{s}.y; As[o+2u] = ra{s}.z; As[o+3u] = ra{s}.w; }}" for s in range(aslots)]
        out += [f"    {{ let e = (t + {s * nt}u) * 4u; let o = {buf * blen}u + (e / {bn}u) * {bstr}u + e % {bn}u; "
                f"Bs[o] = rb{s}.x; Bs[o+1u] = rb{s}.y; Bs[o+2u] = rb{s}.z; Bs[o+3u] = rb{s}.w; }}" for s in range(bslots)]
        return "\n".join(out)

    def compute(buf):
        out = []
        for kk in range(0, bk, K8):
            out += _mma_step(kk, fm, fn, "As", lambda i: f"{buf * alen}u + (fm0 + {i * M8}u) * {astr}u + {kk}u",
                             f"{astr}u", "Bs", lambda j: f"{buf * blen}u + {kk}u * {bstr}u + fn0 + {j * N8}u", f"{bstr}u")
        return "\n".join(out)
    stores = "\n".join(f"  subgroupMatrixStore(&C, (m0 + fm0 + {i * M8}u) * p.n + n0 + fn0 + {j * N8}u, c{i}_{j}, "
                       f"false, p.n);" for i in range(fm) for j in range(fn))
    if nbuf == 1:
        loop = f"""{fetch("0u")}
  for (var k0 = 0u; k0 < p.k; k0 += {bk}u) {{
{put(0)}
    workgroupBarrier();
    if (k0 + {bk}u < p.k) {{
{fetch(f"k0 + {bk}u")}
    }}
    {{
{compute(0)}
    }}
    workgroupBarrier();
  }}"""
    else:
        def half(i: int) -> str:
            """Step i of the loop unrolled by two: compute from buffer i - 1 while the next tile lands in the other."""
            return f"""    let more{i} = k0 + {i * bk}u < p.k;
    if (more{i}) {{
{fetch(f"k0 + {i * bk}u")}
    }}
    {{
{compute(i - 1)}
    }}
    if (more{i}) {{
{put(i % 2)}
    }}
    workgroupBarrier();"""
        loop = f"""{fetch("0u")}
{put(0)}
  workgroupBarrier();
  for (var k0 = 0u; k0 < p.k; k0 += {2 * bk}u) {{
{half(1)}
    if (!more1) {{ break; }}
{half(2)}
  }}"""
    src = f"""enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;
struct P {{ m: u32, n: u32, k: u32, pad: u32 }}
@group(0) @binding(0) var<storage, read> A: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> B: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
var<workgroup> As: array<f16, {nbuf * alen}>;
var<workgroup> Bs: array<f16, {nbuf * blen}>;
@compute @workgroup_size({nt})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sg: u32) {{
  let m0 = wg.y * {bm}u; let n0 = wg.x * {bn}u;
  let fm0 = (sg / {wn}u) * {sm}u; let fn0 = (sg % {wn}u) * {sn}u;
{decl}
{regs}
  {loop}
{stores}
}}
"""
    return src, bm, bn


DESIGNS = {
    "direct 4x4 2x2sg": ("direct", (4, 4, 2, 2, 1)),
    "staged 4x4 2x2sg bk16 2buf": ("staged", (4, 4, 2, 2, 16, 2)),
    "staged 4x4 2x2sg bk32 2buf": ("staged", (4, 4, 2, 2, 32, 2)),
    "staged 4x4 2x2sg bk16 2buf pad0": ("staged", (4, 4, 2, 2, 16, 2, 0)),
    "staged 4x4 2x4sg bk16 2buf": ("staged", (4, 4, 2, 4, 16, 2)),
    "staged 4x4 4x2sg bk16 2buf": ("staged", (4, 4, 4, 2, 16, 2)),
    "staged 2x4 4x2sg bk32 2buf": ("staged", (2, 4, 4, 2, 32, 2)),
    "staged 4x2 2x4sg bk32 2buf": ("staged", (4, 2, 2, 4, 32, 2)),
    "staged 2x2 4x4sg bk32 2buf": ("staged", (2, 2, 4, 4, 32, 2)),
    "staged 4x4 2x4sg bk32 1buf": ("staged", (4, 4, 2, 4, 32, 1)),
}


class Harness:
    """One Dawn device (the engine's toggles: allow_unsafe_apis, f16 on NVIDIA) and n x n f16 operands."""

    def __init__(self, n: int, toggles=()):
        import wgpudawn as wgpu
        from wgpudawn.backends.dawn import extras as dx
        from scellis_jupyter.backends.wgpu import webgpu
        dx.set_instance_extras(enable_toggles=list(webgpu.DAWN_INSTANCE_TOGGLES))
        self.wgpu = wgpu
        self.adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        feats = ["shader-f16", "subgroups", "chromium-experimental-subgroup-matrix", "timestamp-query"]
        self.ok = all(f in self.adapter.features for f in feats[:3])
        if not self.ok:
            return
        lim = {k: self.adapter.limits[k] for k in ("max-storage-buffer-binding-size", "max-buffer-size",
               "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
               "max-compute-workgroup-size-x")}
        self.limits = lim
        self.dev = dx.request_device_sync(self.adapter, required_features=[f for f in feats if f in self.adapter.features],
                                          required_limits=lim, enable_toggles=list(toggles))
        rng = np.random.default_rng(0)
        self.n = n
        self.a = (rng.standard_normal((n, n)) * 0.1).astype(np.float16)
        self.b = (rng.standard_normal((n, n)) * 0.1).astype(np.float16)
        U = wgpu.BufferUsage
        self.ba = self.dev.create_buffer_with_data(data=self.a.tobytes(), usage=U.STORAGE)
        self.bb = self.dev.create_buffer_with_data(data=self.b.tobytes(), usage=U.STORAGE)
        self.bc = self.dev.create_buffer(size=n * n * 4, usage=U.STORAGE | U.COPY_SRC)
        self.ref = _reference(self.a, self.b)

    def time(self, src: str, bindings, groups, out_dtype=np.float32, reps: int = 10) -> tuple[float, float]:
        """(TFLOP/s, relative error) of one design: best of 3 runs of `reps` dispatches in one pass."""
        d, n = self.dev, self.n
        pipe = d.create_compute_pipeline(layout="auto", compute={"module": d.create_shader_module(code=src),
                                                                 "entry_point": "main"})
        bg = d.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
            {"binding": i, "resource": {"buffer": b}} for i, b in bindings])

        def go(k):
            enc = d.create_command_encoder()
            cp = enc.begin_compute_pass()
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, bg)
            for _ in range(k):
                cp.dispatch_workgroups(*groups)
            cp.end()
            d.queue.submit([enc.finish()])
            d.queue.read_buffer(self.bc, 0, 4)
        go(2)
        out = np.frombuffer(d.queue.read_buffer(self.bc), out_dtype)[: n * n].reshape(n, n)
        err = _rel(out, self.ref)
        best = 1e9
        for _ in range(3):
            t0 = time.perf_counter()
            go(reps)
            best = min(best, (time.perf_counter() - t0) / reps)
        return 2 * n ** 3 / best / 1e12, err

    def bare(self, name: str) -> tuple[float, float]:
        kind, v = DESIGNS[name]
        src, bm, bn = (direct if kind == "direct" else staged)(*v)
        U = self.wgpu.BufferUsage
        bp = self.dev.create_buffer_with_data(data=np.array([self.n] * 3 + [0], np.uint32).tobytes(), usage=U.UNIFORM)
        return self.time(src, [(0, self.ba), (1, self.bb), (2, self.bc), (3, bp)], (self.n // bn, self.n // bm, 1))

    def engine(self, tile: str, c_dtype: str) -> tuple[float, float]:
        """The engine's source for `tile` as its launcher renders it for this product (C in `c_dtype`)."""
        from scellis_jupyter.backends.wgpu.kernels import matmul, matmul_sgm as S
        cfg = S.Config("f16", 16, 16, 16, 32)
        limit = int(self.limits["max-compute-workgroup-storage-size"])
        csf = S.cs_frags(cfg, tile, limit)
        src = S.source(cfg, tile, "f16", matmul._epi_parts(None, "f16"), "", False, False, True, True, (True, True),
                       None if c_dtype == "f16" else "f32", csf)
        n = self.n
        params = matmul._params(n, n, n, 0, n, n, n, 0, (0, 0, 0), [1, 1, 1], 1, [[0, 0, 0]] * 3, 0)
        U = self.wgpu.BufferUsage
        bp = self.dev.create_buffer_with_data(data=params + bytes((-len(params)) % 16), usage=U.UNIFORM)
        gx, gy = S.groups(cfg, tile, n, n)
        return self.time(src, [(0, bp), (1, self.ba), (2, self.bb), (3, self.bc)], (gx, gy, 1),
                         np.float16 if c_dtype == "f16" else np.float32)


def _reference(a, b):
    try:
        import torch
        if torch.cuda.is_available():
            return (torch.from_numpy(a).cuda().float() @ torch.from_numpy(b).cuda().float()).cpu().numpy()
    except ImportError:
        pass
    return a.astype(np.float64) @ b


def _rel(got, want) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() + 1e-30))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--only", default="", help="bare | engine (default both)")
    ap.add_argument("--unchecked", action="store_true", help="open the device with disable_robustness, skip_validation")
    args = ap.parse_args(argv)
    h = Harness(args.n, ("disable_robustness", "skip_validation") if args.unchecked else ())
    if not h.ok:
        print("no adapter with shader-f16, subgroups and chromium-experimental-subgroup-matrix: nothing to time")
        return 0
    jobs = [] if args.only == "engine" else [("bare", name) for name in DESIGNS]
    if args.only != "bare":
        jobs += [("engine", (tile, c)) for tile in ("sgm_w_big", "sgm_w_wide", "sgm_big") for c in ("f16", "f32")]
    for kind, what in jobs:
        try:
            tf, err = h.bare(what) if kind == "bare" else h.engine(*what)
            print(json.dumps(dict(n=args.n, kind=kind, design=what, tflops=round(tf, 1), err=f"{err:.1e}",
                                  unchecked=args.unchecked)), flush=True)
        except Exception as e:       # a design that fails to compile or run is reported, the rest go on
            print(json.dumps(dict(kind=kind, design=what, error=str(e).splitlines()[:3])), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
