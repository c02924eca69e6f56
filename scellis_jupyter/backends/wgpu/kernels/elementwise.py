"""Elementwise ops, casts, fills and copies (permute/expand/slice/unslice/concat) on one strided kernel.

A box that collapses to rank 1 (contiguous operands, or evenly strided ones) takes the kernel's CONTIG
path: no index decomposition, EPT coalesced elements an invocation, unrolled when all are in range."""
from __future__ import annotations

import math
import struct

from .... import dtypes as dt, settings
from ....errors import DTypeError, KernelError
from ..templates import WGSL_TYPE, bindings, enable_f16, render, sections, snippet
from .registry import launcher
from .strided import MAX_RANK, broadcast_strides, box_chunks, collapse, contiguous_strides, window
from .quant import cast_i8

FLOAT_UNARY = tuple(sections("ops", "float."))
INT_UNARY = tuple(sections("ops", "int."))
BINARY = tuple(sections("ops", "binary."))
COMPARE = tuple(sections("ops", "compare."))


EPT = 4     # elements an invocation takes on the rank-1 (contiguous or evenly strided) path


def compute_type(d: str) -> str:
    return "f32" if d in ("f32", "f16") else "i32" if d == "i32" else "u32"


def load(k: int, d: str) -> str:
    """Input operand k read in the compute type of dtype d."""
    return snippet("ops", "load", CT=compute_type(d), K=k, K1=k + 1)


def op_expr(op: str, dtype: str, *args: str) -> str:
    """The ops.wgsl expression of `op` on operands of `dtype` (in their compute type)."""
    if len(args) == 1:
        kind = "float" if dtype in ("f32", "f16") else "int"
        if op not in (FLOAT_UNARY if kind == "float" else INT_UNARY):
            raise DTypeError(f"op '{op}' is not defined for {dtype}", where=f"op '{op}'")
        return snippet("ops", f"{kind}.{op}", A=args[0])
    if op in COMPARE:
        return snippet("ops", f"compare.{op}", A=args[0], B=args[1])
    if dtype not in ("f32", "f16") and op == "pow":
        raise DTypeError("integer pow is not supported on wgpu", where="op 'pow'", hint="cast to f32")
    return snippet("ops", f"binary.{op}", A=args[0], B=args[1])


VEC_DTYPES = ("f32", "f16", "i32", "u32", "bool")


def vec_ok(sizes, cstrides, offs, dtypes) -> bool:
    """A chunk the vec4 kernel can take: rank 1, a whole number of chunks of four, the output and every
    input stepping by 1 from a base that is a multiple of 4 or (inputs) broadcast from one element."""
    if len(sizes) != 1 or sizes[0] % 4 or any(d not in VEC_DTYPES for d in dtypes):
        return False
    for k, (st, off) in enumerate(zip(cstrides, offs)):
        if st[0] == 1:
            if off % 4:
                return False
        elif st[0] != 0 or k == 0:
            return False
    return True


def _run_vec(be, template: str, lanes, sizes, cstrides, offs, wins, dtypes, also_dtypes, body: str) -> None:
    """One chunk through kernels/elementwise_vec.wgsl: `lanes(ld, c)` is lane c's body, `ld(k)` the
    lane's read of input k (a vec4 lane, or the broadcast element). `body`, the scalar body of the same
    op, stands for the lanes in the pipeline key, so the text is written only when the device has no
    pipeline for it (a launch outside a recorded replay rebuilt it each time)."""
    vec = [st[0] == 1 for st in cstrides]
    nvec = sum(vec[1:])
    ept = VEC_EPT if nvec <= 3 else 2
    n4 = sizes[0] // 4
    base = [off // 4 if v else off for off, v in zip(offs, vec)]
    base += [0] * (8 - len(base))
    params = struct.pack("<4I8I", n4, 0, 0, 0, *base)
    key = (f"elementwise_vec:{template}:{ept}:{''.join('v' if v else 's' for v in vec)}:{body}:{','.join(dtypes)}"
           f":{','.join(also_dtypes)}")
    be.launch(key, lambda: _vec_source(template, lanes, vec, ept, dtypes, also_dtypes), wins, params,
              (n4 + 256 * ept - 1) // (256 * ept))


def _vec_source(template: str, lanes, vec: list, ept: int, dtypes, also_dtypes) -> str:
    """The text of kernels/elementwise_vec.wgsl for these lanes, vector inputs and dtypes."""
    decl = "\n".join(snippet("common", "binding", I=1 + i, NAME=n, T=snippet("elementwise_vec", "vtype", T=WGSL_TYPE[d]) if v else WGSL_TYPE[d])
                     for i, (n, d, v) in enumerate(zip(["out"] + [f"x{k}" for k in range(len(dtypes) - 1)],
                                                      dtypes, vec)))
    t = WGSL_TYPE[dtypes[0]]

    def steps(ss, q):
        loads, body = [], []
        for s in ss:
            qq = snippet("elementwise_vec", q, S=s)
            loads += [snippet("elementwise_vec", "load", K=k, K1=k + 1, S=s, Q=qq)
                      for k in range(len(dtypes) - 1) if vec[k + 1]]

            def ld(k, c, s=s):
                if vec[k + 1]:
                    return snippet("elementwise_vec", "lane_load", CT=compute_type(dtypes[k + 1]), K=k, S=s, C=c)
                return load(k, dtypes[k + 1])
            ln = "\n".join(snippet("elementwise_vec", "lane", BODY=lanes(lambda k, c=c: ld(k, c), c)) for c in range(4))
            body.append(snippet("elementwise_vec", "step", T=t, LANES=ln, Q=qq))
        return "\n".join(loads), "\n".join(body)
    loads, body = steps(range(ept), "q.step")
    lloads, lbody = steps([0], "q.loop")
    return render("elementwise_vec", ENABLE=enable_f16(*dtypes, *also_dtypes), BINDINGS=decl, EPT=ept,
                  LAST=ept - 1, LOADS=loads, STEPS=body, LOOP_LOADS=lloads, LOOP_STEP=lbody)


VEC_EPT = 4     # chunks of four an invocation takes in the vec4 kernel (two with more than 3 vector inputs)


def run_strided(be, name: str, body: str, out, out_strides, out_base, ins, shape, value_bits: int = 0,
                template: str = "elementwise", also_dtypes=(), lanes=None, rows: bool = False):
    """Dispatch BODY over `shape`; ins: list of (Storage, strides, base_elem); splits to fit bindings.

    `elementwise.wgsl` has 4 operand slots (out + 3 inputs), `fused.wgsl` 8 (out + 7 inputs). With
    `lanes` (the body of one lane of a four-element chunk, see _run_vec), contiguous chunks take the
    vec4 kernel (kernels/elementwise_vec.wgsl) instead. `rows` (a plain copy of one input): chunks whose
    innermost dim is contiguous on both sides take kernels/copy_rows.wgsl (`rows_ok`).
    """
    slots = 8 if template == "fused" else 4
    if len(ins) + 1 > slots:
        raise KernelError(f"{len(ins)} inputs exceed the {slots - 1} of template {template}", where=f"op '{name}'")
    dtypes = [out.dtype] + [s.dtype for s, _, _ in ins]
    for d in dtypes:
        if d == "i8":
            raise DTypeError("i8 tensors support only casts on wgpu", where=f"op '{name}'",
                             hint="cast to f32 first")
    n = math.prod(shape)
    if n == 0:
        return
    strides = [tuple(out_strides)] + [tuple(st) for _, st, _ in ins]
    cshape, cstrides = collapse(shape, strides)
    if len(cshape) > MAX_RANK:
        raise KernelError(f"rank {len(cshape)} after collapsing exceeds {MAX_RANK}", where=f"op '{name}'")
    bases = [out_base] + [b for _, _, b in ins]
    stores = [out] + [s for s, _, _ in ins]
    isz = [dt.ITEMSIZE[d] for d in dtypes]
    contig = len(cshape) == 1          # rank 1: no index decomposition, EPT elements an invocation
    ept = EPT if contig else 1

    def src() -> str:                  # written only when the device has no pipeline for `key`
        decl = bindings(*zip(["out"] + [f"x{k}" for k in range(len(ins))], dtypes))
        unrolled = "\n".join(snippet(template, "contig_step", K=k, BODY=body) for k in range(ept)) if contig else ""
        return render(template, flags={"CONTIG": contig}, ENABLE=enable_f16(*dtypes, *also_dtypes), BINDINGS=decl,
                      BODY=body, EPT=ept, LAST=ept - 1, UNROLLED=unrolled)
    key = f"{template}:{contig}:{body}:{','.join(dtypes)}"
    ops = [(b, st, i) for b, st, i in zip(bases, cstrides, isz)]
    for starts, sizes in box_chunks(cshape, ops, be.binding_limit, be.offset_align):
        wins, offs = [], []
        for s, (b, st, i) in zip(stores, ops):
            lo = sum(a * x for a, x in zip(starts, st))
            hi = lo + sum((m - 1) * x for m, x in zip(sizes, st))
            w, off = window(s, b, lo, hi, i, be.offset_align)
            wins.append(w)
            offs.append(off)
        if lanes is not None and vec_ok(sizes, cstrides, offs, dtypes):
            _run_vec(be, template, lanes, sizes, cstrides, offs, wins, dtypes, also_dtypes, body)
            continue
        if rows and rows_ok(sizes, cstrides, offs, dtypes):
            _run_rows(be, sizes, cstrides, offs, wins, dtypes[0])
            continue
        r = len(sizes)
        shp = list(sizes) + [1] * (MAX_RANK - r)
        base = offs + [0] * (slots - len(offs))
        st_all = []
        for k in range(slots):
            st = list(cstrides[k]) if k < len(cstrides) else []
            st_all += st + [0] * (MAX_RANK - len(st))
        params = struct.pack(f"<4I{MAX_RANK}I{slots}I{slots * MAX_RANK}I", math.prod(sizes), r, value_bits, 0,
                             *shp, *base, *st_all)
        be.launch(key, src, wins, params, (math.prod(sizes) + 256 * ept - 1) // (256 * ept))


def _contig(node_shape, out_shape):
    return broadcast_strides(node_shape, out_shape)


@launcher(*FLOAT_UNARY, *BINARY, *COMPARE)
def _elementwise(be, v, ins, out):
    d = ins[0].dtype
    expr = op_expr(v.op, d, *("a", "b")[:len(ins)])     # the body's `let a`, `let b`
    body = snippet("elementwise", "unary" if len(ins) == 1 else "binary", A=load(0, d), B=load(len(ins) - 1, d),
                   T=WGSL_TYPE[v.dtype], EXPR=expr)
    shape = v.shape
    kind = "vlane.unary" if len(ins) == 1 else "vlane.binary"

    def lanes(ld, c):
        return snippet("elementwise", kind, A=ld(0), B=ld(len(ins) - 1), T=WGSL_TYPE[v.dtype], EXPR=expr, C=c)
    run_strided(be, v.op, body, out, contiguous_strides(shape), 0,
                [(s, _contig(s.shape, shape), 0) for s in ins], shape, lanes=lanes if vec_enabled() else None)


def vec_enabled() -> bool:
    """The vec4 path is on unless SCELLIS_WGPU_VEC4=off (to compare, or to rule it out)."""
    return settings.flag("SCELLIS_WGPU_VEC4")


@launcher("where")
def _where(be, v, ins, out):
    c, a, b = ins
    if v.dtype not in WGSL_TYPE:         # i8 is packed four to a word: no elementwise select over it
        raise DTypeError(f"'where' on {v.dtype} has no wgpu kernel", where="op 'where'",
                         hint="an 8-bit optimizer's guarded update runs on the reference device")
    expr = snippet("ops", "where", A="a", B="b", C="c")
    body = snippet("elementwise", "where", A=load(1, a.dtype), B=load(2, b.dtype), T=WGSL_TYPE[v.dtype], EXPR=expr)
    run_strided(be, "where", body, out, contiguous_strides(v.shape), 0,
                [(s, _contig(s.shape, v.shape), 0) for s in ins], v.shape)


@launcher("cast")
def _cast(be, v, ins, out):
    (x,) = ins
    src, to = x.dtype, v.dtype
    if "i8" in (src, to):
        return cast_i8(be, v, x, out)
    a = snippet("elementwise", "raw")
    if to == "bool":
        expr = snippet("ops", "cast.to_bool", A=a, ZERO=snippet("ops", f"zero.{WGSL_TYPE[src]}"))
    elif to == "i32" and src in ("f32", "f16"):
        expr = snippet("ops", "cast.float_to_i32", A=load(0, "f32"))
    else:
        expr = snippet("ops", "cast.convert", T=WGSL_TYPE[to], A=a)
    run_strided(be, "cast", snippet("elementwise", "store", EXPR=expr), out, contiguous_strides(v.shape), 0,
                [(x, contiguous_strides(x.shape), 0)], v.shape)


def _value_bits(value, dtype) -> int:
    if dtype in ("f32", "f16"):
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    return int(value) & 0xFFFFFFFF


def fill(be, out, value, dtype=None, strides=None, base=0, shape=None):
    dtype = dtype or out.dtype
    shape = tuple(shape if shape is not None else out.shape)
    kind = "float" if dtype in ("f32", "f16") else "i32" if dtype == "i32" else "u32"
    expr = snippet("elementwise", f"fill.{kind}", T=WGSL_TYPE[dtype])
    run_strided(be, "fill", snippet("elementwise", "store", EXPR=expr), out, strides or contiguous_strides(shape), base, [],
                shape, _value_bits(value, dtype))


@launcher("fill")
def _fill(be, v, ins, out):
    fill(be, out, v.attrs["value"])


@launcher("iota")
def _iota(be, v, ins, out):
    run_strided(be, "iota", snippet("elementwise", "iota", T=WGSL_TYPE[v.dtype]), out, (1,), 0, [], v.shape)


def copy(be, name, out, out_strides, out_base, x, in_strides, in_base, shape):
    run_strided(be, name, snippet("elementwise", "copy"), out, out_strides, out_base, [(x, in_strides, in_base)], shape,
                rows=rows_enabled())


ROW_DTYPES = ("f32", "f16", "i32", "u32", "bool")
ROWS_MAX_RANK = 8


def rows_enabled() -> bool:
    """The row-copy path is on unless SCELLIS_WGPU_ROWS=off (to compare, or to rule it out)."""
    return settings.flag("SCELLIS_WGPU_ROWS")


def rows_ok(sizes, cstrides, offs, dtypes) -> bool:
    """A copy chunk kernels/copy_rows.wgsl can take: rank 2 or more (rank 1 has the vec4 kernel), the same
    dtype both sides, the innermost dim stepping by 1 in the output and the input with a length that is
    a multiple of 4, and every other stride and both bases multiples of 4 (whole 16-byte chunks)."""
    if len(sizes) < 2 or len(sizes) > ROWS_MAX_RANK or len(cstrides) != 2 or dtypes[0] != dtypes[1]:
        return False
    if dtypes[0] not in ROW_DTYPES or sizes[-1] % 4:
        return False
    so, sx = cstrides
    if so[-1] != 1 or sx[-1] != 1 or any(off % 4 for off in offs):
        return False
    return all(s >= 0 and s % 4 == 0 for s in so[:-1] + sx[:-1])


def _run_rows(be, sizes, cstrides, offs, wins, dtype) -> None:
    so, sx = cstrides
    q = sizes[-1] // 4
    decomp = "\n".join(snippet("copy_rows", "dim", S=sizes[d], OS=so[d] // 4, XS=sx[d] // 4)
                        for d in range(len(sizes) - 2, -1, -1))
    src = render("copy_rows", ENABLE=enable_f16(dtype), T=WGSL_TYPE[dtype], Q=q, DECOMP=decomp)
    n4 = math.prod(sizes) // 4
    key = f"copy_rows:{dtype}:{q}:{tuple(sizes)}:{tuple(so)}:{tuple(sx)}"
    be.launch(key, src, wins, struct.pack("<4I", n4, offs[0] // 4, offs[1] // 4, 0), (n4 + 255) // 256)


@launcher("permute")
def _permute(be, v, ins, out):
    (x,) = ins
    st = contiguous_strides(x.shape)
    copy(be, "permute", out, contiguous_strides(v.shape), 0, x, tuple(st[p] for p in v.attrs["perm"]), 0, v.shape)


@launcher("expand")
def _expand(be, v, ins, out):
    (x,) = ins
    copy(be, "expand", out, contiguous_strides(v.shape), 0, x, broadcast_strides(x.shape, v.shape), 0, v.shape)


@launcher("slice")
def _slice(be, v, ins, out):
    (x,) = ins
    st = contiguous_strides(x.shape)
    base = sum(a * s for a, s in zip(v.attrs["starts"], st))
    copy(be, "slice", out, contiguous_strides(v.shape), 0, x,
         tuple(s * k for s, k in zip(st, v.attrs["steps"])), base, v.shape)


@launcher("unslice")
def _unslice(be, v, ins, out):
    (x,) = ins
    fill(be, out, 0)
    st = contiguous_strides(v.shape)
    base = sum(a * s for a, s in zip(v.attrs["starts"], st))
    copy(be, "unslice", out, tuple(s * k for s, k in zip(st, v.attrs["steps"])), base, x,
         contiguous_strides(x.shape), 0, x.shape)


@launcher("concat")
def _concat(be, v, ins, out):
    ax = v.attrs["axis"]
    st = contiguous_strides(v.shape)
    off = 0
    for x in ins:
        copy(be, "concat", out, st, off * st[ax], x, contiguous_strides(x.shape), 0, x.shape)
        off += x.shape[ax]
