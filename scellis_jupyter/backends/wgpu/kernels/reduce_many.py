"""sum_many: one scalar from many tensors (a step's gradient guard or norm) in one multi-tensor dispatch.

Stage one (kernels/reduce_many.wgsl) splits every input, in the op's order, into chunks of CHUNK
elements and writes each chunk's sum to its own slot of a scratch row; inputs that share a buffer (a
step's gradients in the arena) go in one dispatch as long as their span fits one binding (else several,
or an input alone in pieces when it is larger than a binding). Stage two sums that row in increasing
order with kernels/reduce.wgsl. The chunking depends only on the shapes and the binding limit, so the
bits do not depend on which tensors share buffers, nor on how the dispatches are grouped. Before, the
same sums took a reduce_sum (often two stages) and an add per tensor: ~3 dispatches per parameter.
Accumulation in f32 (f16 inputs convert per element and the scalar rounds once).
"""
from __future__ import annotations

import math
import struct

from .... import dtypes as dt
from ...storage import Storage
from ..templates import WGSL_TYPE, enable_f16, render, snippet
from .registry import launcher
from .elementwise import fill
from .reduce import _dispatch, _words
from .strided import window

WG = 256
CHUNK = WG * 16             # elements a workgroup of stage one folds (16 an invocation)
MAX_MEMBERS = 128           # table rows per dispatch (16 bytes each)


def _table_size(count: int) -> int:
    return 8 if count <= 8 else 32 if count <= 32 else MAX_MEMBERS


def segments(ins, limit: int, align: int):
    """(storage, byte offset, n elements, first partial) per contiguous run, in input order: an input larger
    than a binding is cut into runs of a whole number of chunks that fit one."""
    out, part = [], 0
    for s in ins:
        n = math.prod(s.shape)
        if n == 0:
            continue
        isz = dt.ITEMSIZE[s.dtype]
        run = max(CHUNK, (limit - 2 * align) // isz // CHUNK * CHUNK)
        for j in range(0, n, run):
            m = min(run, n - j)
            out.append((s, s.offset + j * isz, m, part))
            part += (m + CHUNK - 1) // CHUNK
    return out, part


def _groups(segs, limit: int, align: int):
    """Segments in dispatches: by buffer, then the longest runs whose span fits one binding and the table."""
    by: dict = {}
    for sg in segs:
        by.setdefault(sg[0].buffer.uid, []).append(sg)
    for ms in by.values():
        cur, lo, hi = [], None, None
        for sg in ms:
            s, off, n, _ = sg
            isz = dt.ITEMSIZE[s.dtype]
            a, b = off // align * align, off + n * isz
            nlo, nhi = (a, b) if lo is None else (min(lo, a), max(hi, b))
            if cur and (nhi - nlo > limit - 4 or len(cur) == MAX_MEMBERS):
                yield cur
                cur, nlo, nhi = [], a, b
            cur.append(sg)
            lo, hi = nlo, nhi
        if cur:
            yield cur


def _stage_one(be, segs, xd: str, square: bool, scr) -> None:
    al = be.offset_align
    s0 = segs[0][0]
    isz = dt.ITEMSIZE[xd]
    lo = min(off for _, off, _, _ in segs) // al * al
    hi = max(off + n * isz for _, off, n, _ in segs)
    hi = (hi - lo + 3) // 4 * 4 + lo
    win = Storage(be, s0.buffer, lo, ((hi - lo) // isz,), xd, hi - lo)
    rows, first = [], 0
    for _, off, n, part in segs:
        rows.append(struct.pack("<4I", first, n, (off - lo) // isz, part))
        first += (n + CHUNK - 1) // CHUNK
    maxm = _table_size(len(segs))
    rows += [bytes(16)] * (maxm - len(rows))
    params = struct.pack("<4I", len(segs), first, 0, 0) + b"".join(rows)
    sg = bool(getattr(be, "subgroups", False))
    term = snippet("reduce_many", "term.square" if square else "term.plain")
    src = render("reduce_many", flags={"SG": sg}, ENABLE=enable_f16(xd), XT=WGSL_TYPE[xd], WG=WG, CHUNK=CHUNK,
                 MAXM=maxm, TERM=term)
    be.launch(f"reduce_many:{xd}:{square}:{maxm}:SG={sg}", src, [scr, win], params, first)


@launcher("sum_many")
def _sum_many(be, v, ins, out):
    xd, od = ins[0].dtype, v.dtype
    square = bool(v.attrs.get("square", False))
    lim, al = be.binding_limit, be.offset_align
    segs, parts = segments(ins, lim, al)
    wo, oo = window(out, 0, 0, 0, dt.ITEMSIZE[od], al)
    if not segs:                                # every input empty: the sum is 0
        fill(be, out, 0)
        return
    # the uniform block takes what one dispatch per segment would (never less), so its size does not
    # depend on which inputs share buffers (the planner's stand-ins share none)
    start = be.param_cursor()
    reserve = be.param_bytes_of(lambda: [_stage_one(be, [s], xd, square, _scratch(be, parts)) for s in segs])
    scr = _scratch(be, parts)
    for group in _groups(segs, lim, al):
        _stage_one(be, group, xd, square, scr)
    be.param_reserve(start, reserve)
    # stage two: the partial row summed in order (one workgroup per output of kernels/reduce.wgsl)
    sg = bool(getattr(be, "subgroups", False))
    comb, init = snippet("reduce", "comb.sum"), snippet("reduce", "init.sum", CT="f32")
    words = _words(1, parts, [1], [parts], [0], [0], [1], oo, 0, 0, 0)
    _dispatch(be, "reduce_sum", od, "f32", "f32", comb, init, words, [wo, scr], 1, parts, sg, 1)


def _scratch(be, parts: int) -> Storage:
    return Storage(be, be.scratch("sum-many", parts * 4), 0, (parts,), "f32", parts * 4)

