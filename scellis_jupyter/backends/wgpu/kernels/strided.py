"""Strided boxes: collapse dims, and split a box so every operand's bound range fits the binding limit.

Why generic: elementwise ops, copies (permute/slice/expand/concat) and casts all see operands as
(base, strides) over one logical box; splitting by halving the largest dim of the box keeps every
binding under the limit whatever the strides, so large tensors are segmented transparently.
"""
from __future__ import annotations

from ....errors import KernelError
from ...storage import Storage

MAX_RANK = 8


def contiguous_strides(shape) -> tuple:
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return tuple(reversed(st))


def broadcast_strides(in_shape, out_shape) -> tuple:
    """Strides of an input read under broadcasting to out_shape (0 on broadcast axes)."""
    st = contiguous_strides(in_shape)
    lead = len(out_shape) - len(in_shape)
    return tuple(0 if i < lead or in_shape[i - lead] == 1 else st[i - lead] for i in range(len(out_shape)))


def collapse(shape, strides_list):
    """Drop size-1 dims and merge dims that are contiguous in every operand."""
    dims = [(s, [st[i] for st in strides_list]) for i, s in enumerate(shape) if s != 1]
    out: list = []
    for s, st in dims:
        if out:
            ps, pst = out[-1]
            if all(pst[k] == st[k] * s for k in range(len(st))):
                out[-1] = (ps * s, st)
                continue
        out.append((s, st))
    if not out:
        return (1,), [(0,) for _ in strides_list]
    return tuple(s for s, _ in out), [tuple(st[k] for _, st in out) for k in range(len(strides_list))]


def footprint(starts, sizes, strides) -> tuple[int, int]:
    lo = sum(a * s for a, s in zip(starts, strides))
    hi = lo + sum((n - 1) * s for n, s in zip(sizes, strides))
    return lo, hi


def largest_dim(sizes):
    """The default split rule: halve the largest dim (None when every dim is 1)."""
    k = max(range(len(sizes)), key=lambda i: (sizes[i] > 1, sizes[i]))
    return k if sizes[k] > 1 else None


def box_chunks(shape, operands, limit: int, align: int, order=largest_dim):
    """Yield (starts, sizes) boxes covering `shape` so each operand's bytes fit in `limit`.

    operands: list of (base_elem, strides, itemsize); `order(sizes)` picks the dim to halve next.
    """
    def fits(starts, sizes):
        for base, st, isz in operands:
            lo, hi = footprint(starts, sizes, st)
            lo_b = ((base + lo) * isz) // align * align
            if (base + hi + 1) * isz - lo_b > limit:
                return False
        return True

    stack = [((0,) * len(shape), tuple(shape))]
    while stack:
        starts, sizes = stack.pop()
        if fits(starts, sizes):
            yield starts, sizes
            continue
        k = order(sizes)
        if k is None:
            raise KernelError("one element does not fit the binding limit", where="tensor splitting")
        h = sizes[k] // 2
        a = list(sizes); a[k] = h
        b = list(sizes); b[k] = sizes[k] - h
        sb = list(starts); sb[k] += h
        stack.append((tuple(sb), tuple(b)))
        stack.append((starts, tuple(a)))


def window(s: Storage, base_elem: int, lo: int, hi: int, isz: int, align: int) -> tuple[Storage, int]:
    """The aligned binding covering elements base+lo .. base+hi of s, and the element offset inside it."""
    start_b = s.offset + (base_elem + lo) * isz
    aligned = start_b // align * align
    end_b = s.offset + (base_elem + hi + 1) * isz
    size = end_b - aligned
    size = (size + 3) // 4 * 4
    w = Storage(s.backend, s.buffer, aligned, s.shape, s.dtype, size)
    return w, (start_b - aligned) // isz
