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


def exclusive_seconds(ticks: list[tuple[int, int]]) -> list[float]:
    """GPU seconds each timed pass adds to the timeline, from its (begin, end) timestamps in nanoseconds, in
    submission order. A pass's beginning timestamp may be written as soon as the GPU reaches the pass, while
    the passes before it still run (Vulkan allows a top-of-pipe write), and then end - begin would count their
    tail too, and the passes' sum could exceed the time the GPU was busy. A pass is charged from the later of
    its beginning and the latest end before it: the charges never overlap and fit between the first beginning
    and the last end. A pass whose end reads before its start (reordered by the driver) is charged 0."""
    out: list[float] = []
    last_end: int | None = None
    for b, e in ticks:
        start = b if last_end is None else max(b, last_end)
        out.append(max(0, e - start) * 1e-9)
        last_end = e if last_end is None else max(last_end, e)
    return out


__all__ = ["dispatch_tag", "exclusive_seconds"]
