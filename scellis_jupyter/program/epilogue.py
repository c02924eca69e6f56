"""Matmul epilogues: the elementwise chain that consumes a matmul runs in the matmul's store.

Why: a linear layer is a matmul followed by a bias add, an activation, a residual add or a dropout, and
each of those, as its own dispatch, reads and writes the whole activation once more. Run right after
elementwise fusion (program/schedule.py), so the chain is already one `fused` group (or one elementwise
op); the group's instruction list becomes the matmul's epilogue, with the group's other inputs (bias,
residual, a dropout's uniforms) read at the same logical element. The memory plan and the dispatch count
follow the new schedule, so the planner predicts what runs.

What is absorbed, and what is not (safety): the matmul's result must have exactly one reader (the chain,
possibly through reshape views) and must not be a program output or a kept value. A result the backward
also reads (the pre-activation that gelu's gradient needs) has a second reader, so it stays: the chain
up to it is fused (bias), the activation stays its own step. The epilogue writes one output.

The step `matmul_fused` has inputs (A, B, *others), attrs `code` (the group's instruction list, its
"in" slot `slot` being the matmul's value), `mm` (the matmul's shape and dtype), `seen` (the shape the
chain reads it as) and `strides` (each other input's element strides over the matmul's shape: values
are contiguous, so these are backend independent). Backends evaluate it as the ops one by one would: the
matmul's value rounded to its dtype, then each instruction rounded to its own dtype.

SCELLIS_EPILOGUE=0 switches the pass off (as SCELLIS_FUSION does fusion).
"""
from __future__ import annotations

import math

from .. import settings
from .fusion import MAX_INPUTS, fusible
from .ir import Value

MATMUL_OPERANDS = 2
MAX_EPILOGUE_INPUTS = MAX_INPUTS + 1 - MATMUL_OPERANDS - 1   # 8 bindings: A, B, the output, 5 more
FLOAT = ("f32", "f16")


def enabled() -> bool:
    return settings.flag("SCELLIS_EPILOGUE")


def contiguous(shape) -> tuple[int, ...]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= int(d)
    return tuple(reversed(st))


def broadcast(shape, to) -> tuple[int, ...]:
    """Element strides of a contiguous `shape` read under broadcasting to `to` (0 on broadcast dims)."""
    st = contiguous(shape)
    lead = len(to) - len(shape)
    return tuple(0 if i < lead or shape[i - lead] == 1 else st[i - lead] for i in range(len(to)))


def restride(shape, strides, to) -> tuple[int, ...] | None:
    """Strides over `to` addressing the same elements as `strides` over `shape` (same element count, same
    row-major order), or None when some merged block of dims is not linear in memory (a view could not)."""
    src = [(int(s), int(t)) for s, t in zip(shape, strides) if int(s) != 1]
    dst = [i for i, s in enumerate(to) if int(s) != 1]
    out = [0] * len(to)
    i = j = 0
    while i < len(src) or j < len(dst):
        if i >= len(src) or j >= len(dst):
            return None
        bi, bj = [src[i]], [dst[j]]
        pi, pj = src[i][0], int(to[dst[j]])
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                if i >= len(src):
                    return None
                bi.append(src[i]); pi *= src[i][0]; i += 1
            else:
                if j >= len(dst):
                    return None
                bj.append(dst[j]); pj *= int(to[dst[j]]); j += 1
        for (_, a), (s, b) in zip(bi, bi[1:]):
            if a != b * s:
                return None
        st = bi[-1][1]
        for d in reversed(bj):
            out[d] = st
            st *= int(to[d])
    return tuple(out)


def _code_of(v) -> tuple:
    """A step's instruction list: a fused group's own, or one instruction for a plain elementwise op."""
    if v.op == "fused":
        return tuple(v.attrs["code"])
    refs = tuple(("in", k) for k in range(len(v.inputs)))
    return ((v.op, tuple(sorted(v.attrs.items())), refs, v.shape, v.dtype),)


def _draw_inline(values, code: tuple, ext: list, users, fixed: set, shape) -> tuple[tuple, list, list]:
    """Dropout's uniforms drawn in the epilogue: an input made by `philox_uniform` of the result's shape,
    read by this chain alone, becomes the chain's first instructions (its word is its logical element's:
    the same bits), its stream base (if any) an input. Returns (code, inputs, absorbed values)."""
    draws = [k for k, e in enumerate(ext) if values[e].op == "philox_uniform" and values[e].kind == "compute"
             and tuple(values[e].shape) == tuple(shape) and len(users[e]) == 1 and e not in fixed]
    if not draws:
        return code, ext, []
    new_ext: list[int] = []

    def slot_of(e: int) -> int:
        if e not in new_ext:
            new_ext.append(e)
        return new_ext.index(e)
    pre, ref = [], {}
    for k, e in enumerate(ext):
        if k in draws:
            pv = values[e]
            ref[k] = ("t", len(pre))
            pre.append(("philox_uniform", tuple(sorted(pv.attrs.items())),
                        tuple(("in", slot_of(i)) for i in pv.inputs), tuple(pv.shape), "f32"))
        else:
            ref[k] = ("in", slot_of(e))
    body = tuple((op, attrs, tuple(ref[j] if kind == "in" else ("t", j + len(pre)) for kind, j in refs), sh, d)
                 for op, attrs, refs, sh, d in code)
    return tuple(pre) + body, new_ext, [ext[k] for k in draws]


def _whole_reads(code: tuple, slot: int) -> set[int]:
    """Inputs read only as a draw's stream base (two words, not at the element)."""
    base = {j for op, _, refs, _, _ in code if op == "philox_uniform" for kind, j in refs if kind == "in"}
    other = {j for op, _, refs, _, _ in code if op != "philox_uniform" for kind, j in refs if kind == "in"}
    return base - other - {slot}


def absorb(values: list, outputs: list[int], keep: set[int] | None = None) -> tuple[list, list[int], dict[int, int]]:
    """Rewrite `values` with matmul epilogues; returns (values, outputs, old->new) as fusion.fuse does."""
    n = len(values)
    users: list[list[int]] = [[] for _ in range(n)]
    for i, v in enumerate(values):
        for j in set(v.inputs):
            users[j].append(i)
    fixed = set(outputs) | set(keep or ())
    absorbed: set[int] = set()
    replace: dict[int, Value] = {}
    for i, v in enumerate(values):
        if v.kind != "compute" or v.op != "matmul" or v.dtype not in FLOAT or i in fixed:
            continue
        seen = i                                        # through reshape views with one reader each
        chain = [i]
        while len(users[seen]) == 1 and values[users[seen][0]].kind == "view" \
                and values[users[seen][0]].op == "reshape" and users[seen][0] not in fixed:
            seen = users[seen][0]
            chain.append(seen)
        if len(users[seen]) != 1 or any(len(users[c]) != 1 for c in chain) or set(chain[1:]) & fixed:
            continue
        c = users[seen][0]
        cv = values[c]
        if c in replace or c in absorbed or cv.kind != "compute" or cv.dtype not in FLOAT \
                or "batch" in cv.attrs or not (cv.op == "fused" or (fusible(cv, values) and cv.op != "fill")):
            continue
        sshape = tuple(values[seen].shape)
        if math.prod(cv.shape) != math.prod(v.shape) or len(sshape) > len(cv.shape) \
                or sshape != tuple(cv.shape)[len(cv.shape) - len(sshape):]:
            continue
        ext = list(cv.inputs)
        if ext.count(seen) != 1:
            continue                                    # mul(y, y) as a plain op: one value in two slots
        code, ext, drawn = _draw_inline(values, _code_of(cv), ext, users, fixed, cv.shape)
        slot = ext.index(seen)
        others = [e for k, e in enumerate(ext) if k != slot]
        if len(others) > MAX_EPILOGUE_INPUTS:
            continue
        strides = []
        whole = _whole_reads(code, slot)
        for k, e in enumerate(ext):
            if k == slot:
                continue
            st = (0,) * len(v.shape) if k in whole else \
                restride(cv.shape, broadcast(values[e].shape, cv.shape), v.shape)
            if st is None:
                break
            strides.append(st)
        else:
            # trans: the matmul's folded transposes (program/transpose_fold.py), which the product keeps
            attrs = {"code": code, "slot": slot, "mm": (tuple(v.shape), v.dtype),
                     "trans": (bool(v.attrs.get("trans_a", False)), bool(v.attrs.get("trans_b", False))),
                     "seen": tuple(values[seen].shape), "strides": tuple(strides)}
            replace[c] = Value("matmul_fused", tuple(v.inputs) + tuple(others), attrs, cv.shape, cv.dtype,
                               "compute", cv.nbytes, v.scope)        # the matmul's layer
            absorbed.update(chain)
            absorbed.update(drawn)
    if not replace:
        return values, outputs, {i: i for i in range(n)}
    remap: dict[int, int] = {}
    out: list = []
    for i, v in enumerate(values):
        if i in absorbed:
            continue
        nv = replace.get(i, v)
        remap[i] = len(out)
        out.append(Value(nv.op, tuple(remap[j] for j in nv.inputs), nv.attrs, nv.shape, nv.dtype, nv.kind,
                         nv.nbytes, nv.scope))
    return out, [remap[o] for o in outputs], remap
