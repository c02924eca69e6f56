"""What a profile records of one dispatch, the same on every backend (wgpu's timestamped passes, the reference
path's host-timed ops): the op, the layer it was built in, and its operands' and result's shapes and dtypes,
so a table can say WHICH matmul is slow, not only that matmuls are."""
from __future__ import annotations


def _shape(s) -> list:
    return [_shape(d) if isinstance(d, (tuple, list)) else int(d) for d in (s or ())]


def dispatch_tag(value, ins: list) -> dict:
    """{op, scope, ins, out} of one dispatch: its op, the layer it was built in ("" outside any), and each
    operand's and result's [shape, dtype] (a multi-output value lists each of its outputs)."""
    if isinstance(value.dtype, tuple):
        outs = [[_shape(s), str(d)] for s, d in zip(value.shape, value.dtype)]
    else:
        outs = [[_shape(value.shape), str(value.dtype)]]
    return {"op": value.op, "scope": getattr(value, "scope", "") or "",
            "ins": [[_shape(getattr(s, "shape", ())), str(getattr(s, "dtype", ""))] for s in ins], "out": outs}


__all__ = ["dispatch_tag"]
