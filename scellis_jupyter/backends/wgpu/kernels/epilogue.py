"""`matmul_fused`: a matmul whose store runs the elementwise chain that consumed it (program/epilogue.py).

Why: bias, activation, residual and dropout after a matmul otherwise cost a dispatch each and a full
read and write of the activation. The chain's instruction list becomes a WGSL function `epilogue` (the
pieces of kernels/matmul.wgsl `epi_*`, op expressions from kernels/ops.wgsl, each instruction rounded to
its dtype as kernels/fused.wgsl does), called by every tile variant's store; with a K-split it runs in
the partials' sum, after the last partial. Its other inputs bind whole, after A, B and C.

Where the matmul cannot run it (K blocks added onto C under the binding limit, an epilogue input larger
than one binding, an output dtype other than the matmul's, an empty K), the product goes to a scratch
buffer and the chain runs as a `fused` kernel on it: two dispatches, the same values.
"""
from __future__ import annotations

import functools
import hashlib
import math
import struct
from types import SimpleNamespace

from .... import dtypes as dt
from ...storage import Storage
from ..templates import WGSL_TYPE, bindings, enable_f16, snippet
from . import fused, matmul
from .elementwise import compute_type
from .registry import LAUNCHERS, launcher
from .strided import window


@functools.lru_cache(maxsize=256)
def wgsl(code: tuple, slot: int, mm_dtype: str, ext_dtypes: tuple, first: int,
         int64: bool = False) -> tuple[str, int, str, str]:
    """(the epilogue's module-scope WGSL, its input count for Params (at least 1), the `enable` line, a
    short tag of the text for pipeline keys); int64: draws multiply in 64 bits (the device's `shader-int64`)."""
    lines, draws = [], 0
    for j, (op, attrs, refs, shape, dtype) in enumerate(code):
        if op == "philox_uniform":      # the logical element index is the pseudo-input after the others
            off = (snippet("matmul", "epi_draw_off_based", J=draws, B=_ext(refs[0][1], slot)) if refs
                   else snippet("matmul", "epi_draw_off", J=draws))
            lines.append(snippet("fused", "let", J=j, EXPR=snippet("matmul", "epi_draw", K=len(ext_dtypes),
                                                                 OFF=off, J=draws)))
            draws += 1
            continue
        args = []
        for kind, k in refs:
            if kind == "in" and k == slot:
                args.append((snippet("matmul", "epi_acc", T=WGSL_TYPE[mm_dtype]), mm_dtype))
            elif kind == "in":
                e = _ext(k, slot)
                args.append((snippet("matmul", "epi_load", CT=compute_type(ext_dtypes[e]), K=e), ext_dtypes[e]))
            else:
                args.append((snippet("fused", "temp", J=k), code[k][4]))
        ex = fused._expr(op, dict(attrs), args, dtype)
        if dtype == "f16":
            ex = snippet("fused", "round_f16", EXPR=ex)
        lines.append(snippet("fused", "let", J=j, EXPR=ex))
    decl = bindings(*((f"x{k}", d) for k, d in enumerate(ext_dtypes)), first=first)
    offsets = "\n".join(snippet("matmul", "epi_offset", K=k) for k in range(len(ext_dtypes) + (1 if draws else 0)))
    philox = "\n" + snippet("matmul", "epi_philox", flags={"INT64": int64}) if draws else ""
    helpers = snippet("ops", "helpers") + philox
    text = snippet("matmul", "epi_fn", BINDINGS=decl, HELPERS=helpers,
                   TC=WGSL_TYPE[code[-1][4]], OFFSETS=offsets, BODY="\n".join(lines), LAST=len(code) - 1)
    also = [c[4] for c in code]
    tag = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return text, (max(1, len(ext_dtypes) + (1 if draws else 0)), max(1, draws)), \
        enable_f16(mm_dtype, *ext_dtypes, *also), tag


def _ext(k: int, slot: int) -> int:
    """Binding index (x0, x1, ...) of the chain's input slot k: the product's slot is no binding."""
    return k if k < slot else k - 1


class Epilogue:
    """What matmul.py's launcher needs to run a chain in its store: the WGSL per kernel, the inputs'
    bindings, and the per-chunk origins of each input (its element at the chunk's first row/column)."""

    def __init__(self, be, v, others):
        self.code, self.slot = v.attrs["code"], v.attrs["slot"]
        self.mm_dtype = v.attrs["mm"][1]
        self.strides = [tuple(int(x) for x in st) for st in v.attrs["strides"]]
        self.dtypes = tuple(s.dtype for s in others)
        self.int64 = be.int64
        self.wins, self.offs = [], []
        for s in others:
            n = max(1, math.prod(s.shape))
            w, off = window(s, 0, 0, n - 1, dt.ITEMSIZE[s.dtype], be.offset_align)
            self.wins.append(w)
            self.offs.append(off)
        self.draws = [dict(c[1]) for c in self.code if c[0] == "philox_uniform"]
        if self.draws:          # the logical element index: contiguous strides over the product
            self.strides.append(_contiguous(v.attrs["mm"][0]))
            self.offs.append(0)

    def source(self, first: int) -> tuple[str, int, str, str]:
        return wgsl(self.code, self.slot, self.mm_dtype, self.dtypes, first, self.int64)

    def batch_strides(self) -> list[tuple]:
        return [st[:-2] for st in self.strides]

    def params(self, bstart, bstrides, tails, m0: int, n0: int, ncols: int) -> bytes:
        """en, eb[], er[] of one chunk: bstart/bstrides over the collapsed batch dims, tails the strides of
        the kernel's three batch dims (d0, d1, d2) per input."""
        ne, nd = max(1, len(self.strides)), max(1, len(self.draws))
        eb, er, eph = [], [], []
        for d in self.draws:
            off, (k0, k1) = int(d["offset"]), (int(k) & 0xFFFFFFFF for k in d["key"])
            eph += [off & 0xFFFFFFFF, (off >> 32) & 0xFFFFFFFF, k0, k1]
        eph += [0] * (4 * nd - len(eph))
        for k, st in enumerate(self.strides):
            rs, cs = st[-2], st[-1]
            base = self.offs[k] + sum(a * s for a, s in zip(bstart, bstrides[k])) + m0 * rs + n0 * cs
            eb += [*tails[k], base]
            er += [rs, cs, 0, 0]
        eb += [0] * (4 * ne - len(eb))
        er += [0] * (4 * ne - len(er))
        return struct.pack(f"<4I{4 * ne}I{4 * ne}I{4 * nd}I", ncols, 0, 0, 0, *eb, *er, *eph)


def _contiguous(shape) -> tuple[int, ...]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= int(d)
    return tuple(reversed(st))


def _fits(be, others) -> bool:
    return all((max(s.nbytes, 4) + 3) // 4 * 4 <= be.binding_limit - be.offset_align for s in others)


@launcher("matmul_fused")
def _matmul_fused(be, v, ins, out):
    a, b, *others = ins
    mshape, mdtype = v.attrs["mm"]
    ta, tb = v.attrs.get("trans", (False, False))
    mm = SimpleNamespace(op="matmul", attrs={"trans_a": ta, "trans_b": tb}, shape=tuple(mshape), dtype=mdtype)
    if v.dtype == mdtype and _fits(be, others):
        if matmul._matmul(be, mm, [a, b], out, epi=Epilogue(be, v, others)):
            return
    _apart(be, v, mm, a, b, others, out)


def _apart(be, v, mm, a, b, others, out) -> None:
    """The product into scratch, then the chain as a `fused` kernel: what the two steps would do."""
    nbytes = dt.nbytes(mm.shape, mm.dtype)
    buf = be.scratch("matmul-epilogue", max(4, (nbytes + 3) // 4 * 4))
    prod = Storage(be, buf, 0, tuple(mm.shape), mm.dtype, nbytes)
    matmul._matmul(be, mm, [a, b], prod)
    seen = Storage(be, buf, 0, tuple(v.attrs["seen"]), mm.dtype, nbytes)
    chain = list(others)
    chain.insert(v.attrs["slot"], seen)
    code = list(v.attrs["code"])
    bases = {k for c in code if c[0] == "philox_uniform" for _, k in c[2]}
    read = {k for c in code if c[0] != "philox_uniform" for kind, k in c[2] if kind == "in"}
    for j, (op, attrs, refs, shape, dtype) in enumerate(code):
        if op == "philox_uniform":      # drawn into scratch by the philox kernel, read back as an input
            un = dt.nbytes(shape, "f32")
            u = Storage(be, be.scratch(f"matmul-epilogue-draw{j}", max(4, un)), 0, tuple(shape), "f32", un)
            LAUNCHERS["philox_uniform"](be, SimpleNamespace(op=op, attrs=dict(attrs), shape=shape),
                                        [chain[k] for _, k in refs], u)
            code[j] = ("cast", (), (("in", len(chain)),), shape, "f32")      # f32 to f32: the value itself
            chain.append(u)
    if bases - read:           # a stream base the rewritten chain no longer reads: dropped, slots renumbered
        keep = [k for k in range(len(chain)) if k not in bases - read]
        new = {k: i for i, k in enumerate(keep)}
        code = [(op, attrs, tuple((kind, new[k]) if kind == "in" else (kind, k) for kind, k in refs), sh, d)
                for op, attrs, refs, sh, d in code]
        chain = [chain[k] for k in keep]
    fused._fused_one(be, SimpleNamespace(attrs={"code": tuple(code)}, shape=v.shape, dtype=v.dtype), chain, out)
