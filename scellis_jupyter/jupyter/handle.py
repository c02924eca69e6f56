"""`Model`: what `%%scellis NAME` binds to NAME: the cell's spec, its plan, and the runs trained from it.

Why a handle and not the bare Spec: a notebook works on one model over many cells (plan, fix, train,
wait, predict), and the handle remembers the cell's text (so a fix or a graph edit rewrites it), the
namespace its data comes from, and the background run in progress (so a second `train` is refused).
The same object works from Python: `mlp.train(steps=50)`, `mlp.run.wait()`, `mlp.predict(X)`.

In a kernel, a mistake in a handle method shows as the magics' one-line diagnostic, never a traceback, and
stays its own class (`except DataError` catches it).
"""
from __future__ import annotations

import dataclasses
import functools
import tomllib
import types
from typing import Any, Callable, TypeVar

from ..errors import ScellisError
from ..plan.plan import Plan, plan as make_plan
from ..run.background import ENDED, BackgroundRun
from ..run.run import Run, RunError
from ..spec import Spec
from ..spec.edit import apply_edit, apply_fix, graph_info
from . import display
from .parse import MagicError, cell_diagnostic


F = TypeVar("F", bound=Callable[..., Any])


def _one_line(fn: F) -> F:
    """A handle method whose ScellisError shows in a kernel as the one-line diagnostic, as a magic's does.

    IPython renders an exception through its `_render_traceback_` when it has one (ipykernel too); set on
    the instance, it changes nothing else: the error keeps its class, and %tb still has the traceback.
    """
    @functools.wraps(fn)
    def method(*args, **kw):
        try:
            return fn(*args, **kw)
        except ScellisError as e:
            e._render_traceback_ = str(e).splitlines
            raise
    return method  # type: ignore[return-value]


class Model:
    """A spec from a cell (text, name, namespace), planned and trainable in the background.

    `model.run` is the latest run (a BackgroundRun: state, step, wait(), result()); after it ends,
    `model.evaluate(part)` and `model.predict(X)` use its weights (X may be a DataFrame: its target column
    is dropped, and the training rows' standardization applied).
    """

    def __init__(self, name: str, text: str, namespace: dict | None = None, *, store=None, header: str | None = None):
        self.name = name
        self.header = header                  # the cell's magic line as written (kept when a fix rewrites it)
        self.namespace = namespace if namespace is not None else {}
        self.store = store
        self.runs: list[BackgroundRun] = []
        self._plans: dict = {}
        self.text = ""
        self.spec: Spec = self._parse(text)
        self.text = text

    # ---- the spec ---------------------------------------------------------------------------------------
    @property
    def source(self) -> str:
        return f"<cell {self.name}>"

    def _parse(self, text: str) -> Spec:
        diags = Spec.check(text, source=self.source, namespace=self.namespace)
        if diags:
            moved = [cell_diagnostic(d, self.source, self.name, text) for d in diags]
            first = moved[0]
            err = MagicError(first.message, where=first.where, hint=first.hint, code=first.code,
                             diagnostics=[d.to_json() for d in moved])
            if len(moved) > 1:
                extra = "\n".join(d.format() for d in moved[1:])
                err.args = (err.args[0] + f"\n({len(moved) - 1} more)\n" + extra,)
            raise err
        spec = Spec.from_text(text, source=self.source, namespace=self.namespace)
        if "name" not in tomllib.loads(text):       # an unnamed spec takes the handle's name
            spec = dataclasses.replace(spec, name=self.name)
        return spec

    @_one_line
    def set_text(self, text: str) -> Spec:
        """Re-parse the model from new cell text (a fix or graph edit); the old spec stays on error."""
        spec = self._parse(text)
        self.spec, self.text, self._plans = spec, text, {}
        return spec

    def graph_info(self) -> dict:
        return graph_info(self.spec)

    def cell_text(self) -> str:
        """The full cell (magic line and spec), as a fix or edit writes it back."""
        return f"{self.header or '%%scellis ' + self.name}\n{self.text}"

    # ---- planning ---------------------------------------------------------------------------------------
    @_one_line
    def plan(self, *, memory: int | None = None, batch_size: int | None = None, device=None) -> Plan:
        from ..backends.device import default_name
        # a plan naming no device is the default's: another default (%scellis device NAME) plans anew
        key = (memory, batch_size, device if device is not None else ("default", default_name()))
        if key not in self._plans:
            self._plans[key] = make_plan(self.spec, device, memory=memory, batch_size=batch_size)
        return self._plans[key]

    @_one_line
    def apply_fix(self, i: int, *, memory: int | None = None) -> tuple[Plan, str]:
        """Apply the plan's fix number `i` to the spec text and re-plan (the PlanView's on_fix)."""
        p = self.plan(memory=memory)
        if not 0 <= i < len(p.fixes):
            raise MagicError(f"the plan has no fix {i}", where=f"plan for {self.name}",
                             hint=f"fixes are numbered 0..{len(p.fixes) - 1}" if p.fixes else "this plan has no fixes")
        self.set_text(apply_fix(self.text, p.fixes[i]))
        return self.plan(memory=memory), self.cell_text()

    @_one_line
    def edit(self, e: dict) -> tuple[dict, str]:
        """Apply a graph edit to the spec text and rebuild (the GraphView's on_edit)."""
        self.set_text(apply_edit(self.text, e))
        return self.graph_info(), self.cell_text()

    @_one_line
    def explain_data(self, *, batch_size: int | None = None, device=None) -> dict:
        """The stages of this model's training step (plan.explain.explain): what `explain()` draws."""
        from ..plan.explain import explain
        return explain(self.spec, batch_size=batch_size, device=device)

    @_one_line
    def explain(self, *, batch_size: int | None = None, device=None):
        """The stage explorer (as `%scellis explain NAME`): spec, graph, the step's kernels forward / backward /
        update, the arena plan over them and each kernel's WGSL, clickable from one to the next."""
        return display.explain_output(self.explain_data(batch_size=batch_size, device=device))

    # ---- training ---------------------------------------------------------------------------------------
    @property
    def run(self) -> BackgroundRun | None:
        """The latest run of this model (None before the first `train`)."""
        return self.runs[-1] if self.runs else None

    def _refuse_if_training(self) -> None:
        r = self.run
        if r is not None and r.state not in ENDED:
            raise MagicError(f"{self.name} is already training (run {r.run_id}, {r.state} at step {r.step}/"
                             f"{r.total_steps})", where=f"model {self.name}", code="magic-busy",
                             hint=f"wait for it (%scellis wait {self.name}) or stop it (%scellis stop {self.name})")

    @_one_line
    def train(self, *, steps: int | None = None, store=None, **kw) -> BackgroundRun:
        """Start a run of this model in a kernel thread; returns its BackgroundRun at once."""
        self._refuse_if_training()
        if self.spec.memory is not None:      # the kernel's data as it is now (a cell may have changed it)
            self.spec = self._parse(self.text)
        from ..run.lifecycle import run_class
        st = self._store(store)
        run = run_class(self.spec)(self.spec, store=st, steps=steps, **{k: v for k, v in kw.items() if v is not None})
        br = BackgroundRun(run, self.name)
        self.runs.append(br)
        return br

    @_one_line
    def resume(self, *, steps: int | None = None, store=None, ref: str | None = None) -> BackgroundRun:
        """Continue this model's last interrupted run (or checkpoint/run `ref`) in the background."""
        from ..run.lifecycle import prepare_resume
        self._refuse_if_training()
        if ref is None and self.run is None:      # a fresh kernel: this spec's last interrupted run in the store
            ref = self._interrupted_in_store(store)
        if ref is None:
            r = self.run
            if r is None:
                raise MagicError(f"{self.name} has no run to resume", where=f"model {self.name}",
                                 hint=f"train it first: %scellis train {self.name}")
            if r.state == "finished" and steps is None:
                raise MagicError(f"run {r.run_id} finished; there is nothing left to resume", where=f"run {r.run_id}",
                                 code="run-ended", hint=f"ask for more steps: %scellis resume {self.name} --steps "
                                 f"{2 * r.step}")
            ref = r.run_id
        st = self._store(store)
        run = prepare_resume(ref, store=st, spec=self.spec, steps=steps)
        br = BackgroundRun(run, self.name)
        self.runs.append(br)
        return br

    def _interrupted_in_store(self, store) -> str | None:
        from ..run.lifecycle import open_store
        try:
            recs = open_store(store if store is not None else self.store, create=False).list_runs()
        except ScellisError:
            return None
        mine = [r for r in recs if r.spec_hash == self.spec.hash and r.state == "interrupted" and r.last_checkpoint
                and not (r.extra or {}).get("resumed_by")]
        return mine[-1].id if mine else None

    def _store(self, store):
        from ..run.lifecycle import open_store
        return open_store(store if store is not None else self.store)

    @_one_line
    def predict(self, x, **kw) -> Any:
        """The last run's output for the rows of `x` (an array, or a DataFrame with or without its target)."""
        return self._last_run().predict(x, **kw)

    @_one_line
    def evaluate(self, part: str | None = None, **kw) -> dict:
        """Loss and metrics of the last run's weights on `part`; by default on every held-out part the split has
        (val and test, whichever were given or cut; train if neither), each key named by its part."""
        run = self._last_run()
        if part is not None:
            return run.evaluate(part, record=False, **kw)
        parts = [p for p in ("val", "test") if p in run.split.parts] or ["train"]
        out: dict = {}
        for p in parts:                     # Run.evaluate leaves val's keys bare; here every key says its part
            out.update({k if p != "val" else f"val_{k}": v for k, v in run.evaluate(p, record=False, **kw).items()})
        return out

    def _last_run(self) -> Run:
        r = self.run
        if r is None:
            raise RunError(f"{self.name} has not been trained", where=f"model {self.name}",
                           hint=f"%scellis train {self.name}")
        if r.state not in ENDED:
            raise RunError(f"{self.name} is still training (step {r.step}/{r.total_steps})", where=f"model {self.name}",
                           hint=f"%scellis wait {self.name} first")
        return r.run

    def __repr__(self) -> str:
        return f"<scellis model {self.name}: {self.spec!r}" + (f", last run {self.run!r}>" if self.run else ">")

    def _repr_mimebundle_(self, include=None, exclude=None):
        info = self.graph_info()
        try:
            p = self.plan()
            return {"text/plain": display.graph_text(info) + "\n" + p.table(),
                    "text/html": display.graph_html(info) + display.plan_html(p)}
        except ScellisError as e:
            return {"text/plain": display.graph_text(info) + "\n" + e.diagnostic.format(),
                    "text/html": display.graph_html(info)}


class _Fixed:
    """A schedule that answers one learning rate (the LR range test sets it before each step)."""

    def __init__(self):
        self.lr = 0.0

    def at(self, step: int) -> float:
        return self.lr

    def observe(self, *a) -> None:
        pass


def lr_find(model: Model, *, steps: int = 100, lr_min: float = 1e-7, lr_max: float = 10.0, device=None):
    """The LR range test on the model's training step (weights drawn fresh; nothing recorded)."""
    from ..run.lr_finder import lr_range_test
    run = Run(model.spec, device=device, steps=steps)
    sched = run.schedule = _Fixed()

    def batches():
        while True:
            yield from run.loader

    it = batches()

    def step_fn(lr: float) -> float:
        sched.lr = lr
        x, y = next(it)
        return run._one_step(x, y).loss

    return lr_range_test(step_fn, lr_min, lr_max, steps)


def profile(model: Model, *, batch_size: int | None = None, top: int = 12) -> dict:
    """What one training step dispatches, grouped by op (count, estimated FLOPs, output bytes), with the plan."""
    from ..program.cost import program_flops
    p = model.plan(batch_size=batch_size)
    prog = p.step.program
    ops: dict[str, dict] = {}
    for s in prog.steps:
        v = prog.values[s]
        o = ops.setdefault(v.op, {"op": v.op, "dispatches": 0, "flops": 0, "out_bytes": 0})
        o["dispatches"] += 1
        o["flops"] += program_flops(types.SimpleNamespace(steps=[s], values=prog.values))
        o["out_bytes"] += int(getattr(v, "nbytes", 0) or 0)
    rows = sorted(ops.values(), key=lambda r: -r["flops"])
    total = sum(r["flops"] for r in rows) or 1
    for r in rows:
        r["flops_share"] = r["flops"] / total
    return {"plan": p, "dispatches": len(prog.steps), "flops": total, "ops": rows[:top], "ops_total": len(rows),
            "note": "estimated from the step Program (FLOPs per op, bytes per output); the measured time per "
                    "kernel follows (GPU timestamps on wgpu, the host clock on the reference path)"}


def profile_text(prof: dict) -> str:
    p = prof["plan"]
    lines = [f"profile of one training step: {prof['dispatches']} dispatches, ~{prof['flops']:.3g} FLOPs, batch "
             f"{p.batch_size} on {p.backend}:{p.device}, tier {p.tier}",
             f"  {'op':<22}{'dispatches':>11}{'FLOPs':>12}{'share':>8}{'out bytes':>12}"]
    for r in prof["ops"]:
        lines.append(f"  {r['op']:<22}{r['dispatches']:>11}{r['flops']:>12.3g}{100 * r['flops_share']:>7.1f}%"
                     f"{r['out_bytes']:>12}")
    if prof["ops_total"] > len(prof["ops"]):
        lines.append(f"  ... {prof['ops_total'] - len(prof['ops'])} more ops")
    lines.append("memory (the plan's breakdown):")
    for k, v in p.breakdown.items():
        if v:
            lines.append(f"  {k:<18}{v:>14} B")
    lines.append("note: " + prof["note"])
    return "\n".join(lines)


def measured_profile(model: Model, *, steps: int = 3, device=None, top: int = 12) -> dict:
    """Time `steps` training steps of the model's spec kernel by kernel (run.profile.profile_spec)."""
    from ..run.profile import profile_spec
    return profile_spec(model.spec, device=device, steps=steps, top=top)


__all__ = ["Model", "lr_find", "measured_profile", "profile", "profile_text"]
