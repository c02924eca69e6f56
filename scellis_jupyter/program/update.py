"""The update half of a step: the finite-gradient guard, gradient clipping, the optimizer update and donation
of new weights and state over the old. Why apart: the supervised and the adversarial step share it."""
from __future__ import annotations

from ..graph import functional as F
from ..graph.node import Node
from ..graph.opset import ELEMENTWISE
from ..graph.opset import make as make_op


def all_finite(grads: list[Node]) -> Node | None:
    """A bool scalar: every gradient element is finite (their sum is, which an inf or NaN element's is
    not: inf, or NaN where infs of both signs or a NaN meet), summed last layer first like the update loop
    takes them, as one `sum_many` (one multi-tensor reduction on wgpu instead of a reduction per parameter).
    The test reads the sum's bits (`isfinite`): wgpu's shader compilers folded the float test
    total - total == 0 to true, so overflowing mixed-precision steps were not skipped."""
    total = _sum_many_last_first(grads, square=False)
    return F.isfinite(total) if total is not None else None


def _sum_many_last_first(grads: list[Node], square: bool) -> Node | None:
    """sum_many over the float gradients, last first (the order `_sum_last_first` adds them in); any
    other dtype (none in a training step today) keeps its own reduction, added after."""
    fl = [g for g in reversed(grads) if g.dtype in ("f32", "f16")]
    if not fl:
        return _sum_last_first(grads, (lambda g: F.sum_(F.mul(g, g))) if square else F.sum_)
    by = {}
    for g in fl:
        by.setdefault(g.dtype, []).append(g)
    total = None
    for gs in by.values():
        s = F.sum_many(gs, square=square)
        total = s if total is None else F.add(total, F.cast(s, total.dtype))
    for g in reversed(grads):
        if g.dtype not in ("f32", "f16"):
            total = F.add(total, F.cast(F.sum_(F.mul(g, g) if square else g), total.dtype))
    return total


def _sum_last_first(grads: list[Node], term) -> Node | None:
    """term(grads[-1]) + ... + term(grads[0]), built in that order: the order the backward produces the
    gradients (last layer first), so each term can run as soon as its gradient exists."""
    total = None
    for g in reversed(grads):
        s = term(g)
        total = s if total is None else F.add(total, s)
    return total


def clip_grads(grads: list[Node], norm: float | None = None, value: float | None = None,
               grad_ids: set | None = None) -> list[Node]:
    """torch.nn.utils.clip_grad_norm_ (the total 2-norm over all gradients scaled down to `norm`, with
    torch's 1e-6 in the denominator) and then clip_grad_value_ (each element clamped to [-value, value]).
    New gradient node ids are added to `grad_ids` (the planner's "gradients" role)."""
    added = grad_ids if grad_ids is not None else set()
    if norm and grads:
        total = _sum_many_last_first(grads, square=True)
        cs = F.minimum(F.div(float(norm), F.add(F.sqrt(total), 1e-6)), F.scalar(1.0, total.dtype))
        grads = [F.mul(g, cs) for g in grads]
        added |= {g.id for g in grads}
    if value:
        grads = [F.clamp(g, -float(value), float(value)) for g in grads]
        added |= {g.id for g in grads}
    return grads


def optimizer_update(opt, name: str, weight: Node, g: Node, step: Node, lr: Node, finite: Node | None, meta: dict,
                     dtype: str = "f32", decay=None) -> tuple[Node, dict, dict]:
    """One parameter's update by the optimizer entry: (new weight, state leaves, new state). The state
    leaves are placeholders named `<name>.<slot>` (role optimizer_state in `meta`); `decay(new)` adjusts
    the new weight (decoupled weight decay); a step whose gradients are not `finite` keeps everything."""
    st = {}
    for d in opt.state(tuple(weight.shape), dtype):
        st[d.name] = F.placeholder(d.shape, d.dtype, f"{name}.{d.name}")
        meta[st[d.name].id] = (f"{name}.{d.name}", "optimizer_state")
    mark = F.scalar(0.0).id                  # nodes the update makes have larger ids than this
    new_w, new_st = opt.update(weight, g, st, step, lr)
    if decay is not None:
        new_w = decay(new_w)
    if finite is not None:
        guarded = {k: F.where(finite, v, st[k]) for k, v in new_st.items()}
        # the new weight reads the guarded new state (equal to the new state whenever the weight changes),
        # which is written in place over the old: no state-sized temporary waits for the weight's kernel
        swap = {v.id: guarded[k] for k, v in new_st.items() if v.shape == st[k].shape}
        if swap and _elementwise_between(new_w, set(swap), mark):
            new_w = _rebuilt(new_w, swap, mark)
        new_w = F.where(finite, new_w, weight)
        new_st = guarded
    return new_w, st, new_st


def _elementwise_between(out: Node, sources: set[int], mark: int) -> bool:
    """Every op from the new state (`sources`) to `out` is elementwise, so each weight element reads the state
    element at its own position: only then may the weight read the guarded state written in place (an
    optimizer that reduces over its state, like Adafactor's factored moments, keeps the unguarded read)."""
    seen: dict[int, bool] = {}

    def reaches(n: Node) -> bool:            # n depends on a source through nodes made by the update
        if n.id in sources:
            return True
        if n.id < mark or not n.inputs:
            return False
        got = seen.get(n.id)
        if got is None:
            seen[n.id] = False
            got = seen[n.id] = any(reaches(i) for i in n.inputs)
        return got

    def ok(n: Node) -> bool:
        if n.id in sources or not reaches(n):
            return True
        return n.op in ELEMENTWISE and all(ok(i) for i in n.inputs)
    return ok(out)


def _rebuilt(out: Node, swap: dict[int, Node], mark: int) -> Node:
    """`out` with the nodes in `swap` (by id) replaced; only nodes made after id `mark` are rebuilt."""
    memo: dict[int, Node] = {}

    def visit(n: Node) -> Node:
        if n.id in swap:
            return swap[n.id]
        if n.id < mark or not n.inputs or n.realized:
            return n
        got = memo.get(n.id)
        if got is None:
            ins = [visit(i) for i in n.inputs]
            got = n if all(a is b for a, b in zip(ins, n.inputs)) else make_op(n.op, ins, **n.attrs)
            memo[n.id] = got
        return got
    return visit(out)


def donated(outs: list, out_names: list, donate: dict, old: Node, new: Node, name: str) -> None:
    """Output `new` as `name`, written over the storage of leaf `old` (an in-place update)."""
    donate[len(outs)] = old
    outs.append(new)
    out_names.append(name)
