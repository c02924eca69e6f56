"""The peak of a whole run, not of one step: the step, its readback, evaluation and the final readback.

Why a ledger: what a run holds at any moment depends on the order things happen (the step's outputs
are released before evaluation, an evaluation batch's inputs before the next batch's, a wgpu output
buffer stays in the backend's pool after it is freed and is reused by the next output of its size).
So the planner replays the run's allocations in the order `Run` makes them, with the backend's own size
rules, and reads the peak off that replay: the same number the backend's allocator reaches.

    leaves (weights, optimizer state, per-step inputs: bound for the whole run)
  + the arena (one, grown to the largest Program that ran) and the launchers' scratch buffers
  + each Program's outputs (freed after use; pooled on wgpu) and uniform block (kept on wgpu)
  + an evaluation batch's x and y while it runs
  + the mapped staging buffer of a readback (wgpu): the loss, an evaluation's outputs, one tensor of a
    checkpoint
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import nbytes as nb
from .model import _StandIn

# roles of the leaves a checkpoint (and the run's weights hash) reads back, one tensor at a time
READ_BACK = ("parameter", "master_weights", "optimizer_state", "buffer")


@dataclass
class Ledger:
    """Live bytes by tag, the peak and what was live at the peak; `pooled`: freed outputs stay allocated
    for reuse by the next output of the same size (wgpu's output pool)."""
    pooled: bool
    live: dict = field(default_factory=dict)
    peak: int = 0
    at_peak: dict = field(default_factory=dict)
    pool: list = field(default_factory=list)         # [size, busy] per pooled output buffer

    def alloc(self, tag: str, n: int) -> None:
        self.live[tag] = self.live.get(tag, 0) + n
        total = sum(self.live.values())
        if total > self.peak:
            self.peak, self.at_peak = total, {k: v for k, v in self.live.items() if v}

    def free(self, tag: str, n: int) -> None:
        self.live[tag] = self.live.get(tag, 0) - n

    def output(self, tag: str, n: int):
        if self.pooled:
            for slot in self.pool:
                if slot[0] == n and not slot[1]:
                    slot[1] = True
                    return slot
            slot = [n, True]
            self.pool.append(slot)
            self.alloc("pooled outputs", n)
            return slot
        self.alloc(tag, n)
        return (tag, n)

    def release(self, handle) -> None:
        if self.pooled:
            handle[1] = False
        else:
            self.free(*handle)


class RunReplay:
    """Replays a run's allocations on one backend's size rules (`impl`: alloc_bytes, arena_bytes,
    staging_bytes, pools_outputs, and dry_run where the backend has uniform blocks and scratch)."""

    def __init__(self, impl):
        self.impl = impl
        self.book = Ledger(bool(getattr(impl, "pools_outputs", False)))
        self.arena = [0, 0]          # the arena's buffer, and a split arena's second one
        self.scratch: dict = {}
        self.uniforms: set = set()

    def leaves(self, leaves) -> None:
        for lf in leaves:
            self.book.alloc("leaves", self.impl.alloc_bytes(nb(lf.node.shape, lf.node.dtype)))

    def program(self, prog, roots, read: list[int]) -> None:
        """One execution of `prog` (its roots' shapes for the dry run), then one readback of the outputs
        at positions `read`, then its outputs released."""
        impl, book = self.impl, self.book
        for slot, part in enumerate(prog.arena.parts()):    # a split arena's second buffer grows on its own
            need = impl.arena_bytes(part)
            if need > self.arena[slot]:              # the old arena goes before the new one comes
                book.free("arena", self.arena[slot])
                book.alloc("arena", need)
                self.arena[slot] = need
        outs = [book.output("outputs", impl.alloc_bytes(prog.values[p].nbytes)) for p in prog.persistent]
        if hasattr(impl, "dry_run"):
            uniform, scratch = impl.dry_run(prog, roots)
            for k, v in scratch.items():
                if v > self.scratch.get(k, 0):
                    book.free("scratch", self.scratch.get(k, 0))
                    book.alloc("scratch", v)
                    self.scratch[k] = v
            if prog.hash not in self.uniforms:       # one uniform block per Program, kept by the backend
                self.uniforms.add(prog.hash)
                book.alloc("uniform blocks", uniform)
        self.readback([prog.values[prog.outputs[i]].nbytes for i in read])
        for h in outs:
            book.release(h)

    def readback(self, sizes: list[int]) -> None:
        n = self.impl.staging_bytes(sizes)
        if n:
            self.book.alloc("readback", n)
            self.book.free("readback", n)

    def transient(self, tag: str, sizes: list[int]):
        """Buffers held while a Program runs (an evaluation batch's x and y): allocate; returns the release."""
        total = sum(self.impl.alloc_bytes(n) for n in sizes)
        self.book.alloc(tag, total)
        return lambda: self.book.free(tag, total)


def replay_run(step, impl, evals: list, in_loop: bool) -> Ledger:
    """The ledger of a run of `step` that evaluates with `evals` (EvalPrograms, in the order the run first
    runs them; in_loop: evaluations happen between steps, so a step also runs after them)."""
    r = RunReplay(impl)
    r.leaves(step.leaves)
    step_roots = [_StandIn(lf.node) for lf in step.leaves]
    read = [i for i, n in enumerate(step.outputs) if n in ("loss", "finite")][:2]
    r.program(step.program, step_roots, read)
    by_name = {lf.name: lf for lf in step.leaves}
    for ev in evals:
        prog = ev.program
        inputs = [prog.values[prog.leaves[j]] for j, name in enumerate(ev.order) if name in ("x", "y")]
        done = r.transient("evaluation inputs", [v.nbytes for v in inputs])
        roots = [_StandIn(_Shaped(prog.values[prog.leaves[j]])) if name in ("x", "y") else _StandIn(by_name[name].node)
                 for j, name in enumerate(ev.order)]
        r.program(prog, roots, list(range(len(ev.outputs))))
        done()
    if in_loop and evals:
        r.program(step.program, step_roots, read)
    big = [nb(lf.node.shape, lf.node.dtype) for lf in step.leaves if lf.role in READ_BACK]
    if big:
        r.readback([max(big)])
    return r.book


class _Shaped:
    """A node-like (shape, dtype) of a Program value, for a dry-run stand-in."""

    def __init__(self, v):
        self.shape, self.dtype = v.shape, v.dtype
