"""LR schedules: `Schedule` binds a scheduler entry to a run, plus the scheduler conformance checks.

Why a binding object: an entry's `lr(step, base_lr, total_steps)` is a pure function (only
reduce_on_plateau keeps state, and says so through `observe` / `state_dict`), so the training loop, the
live curve and a resumed run all ask the same question and get the same answer. `Schedule` holds the two
run-level facts (base_lr, total_steps), validates steps, and saves / restores the entry's state so a
resumed run continues the schedule exactly. The unit of `step` is the optimizer step (0 = the first).
"""
from __future__ import annotations

import builtins
import math
import numbers
from typing import Any

from .registry import CatalogError, make

__all__ = ["Schedule", "need_total_steps"]


def need_total_steps(entry: str, own: int | None, total_steps: int | None, param: str = "total_steps") -> int:
    """`own` (the entry's hyperparameter) if set, else the run's total_steps, else a CatalogError.

    For entries whose shape depends on the run length (cosine, linear, one_cycle, ...): None in their
    Param means "take it from the run", and a run without a known length must be told, not crash.
    """
    n = own if own is not None else total_steps
    if n is None:
        raise CatalogError(f"scheduler {entry!r} needs the run's total number of optimizer steps",
                           where=f"scheduler {entry}",
                           hint=f"give {param}=... to the scheduler, or total_steps to the run / Schedule")
    return int(n)


def _is_stateful(obj: Any) -> bool:
    return callable(getattr(obj, "observe", None))


class Schedule:
    """A scheduler entry bound to (base_lr, total_steps): `.at(step)`, `.observe`, exact resume.

    `scheduler` is an entry instance, or a registered name (then `hyper`, a dict because entries have
    their own `total_steps`, goes to `catalog.make`).
    """

    def __init__(self, scheduler: Any, base_lr: float, total_steps: int | None = None,
                 hyper: dict | None = None):
        if isinstance(scheduler, str):
            scheduler = make("scheduler", scheduler, **(hyper or {}))
        elif hyper:
            raise CatalogError(f"hyperparameters {sorted(hyper)} given with a scheduler instance",
                               where="Schedule", hint="pass them to catalog.make, or give the name as a string")
        if not callable(getattr(scheduler, "lr", None)):
            raise CatalogError(f"{type(scheduler).__name__} is not a scheduler (no lr(step, base_lr, total_steps))",
                               where="Schedule", hint="use catalog.make('scheduler', name, ...)")
        if isinstance(base_lr, bool) or not isinstance(base_lr, numbers.Real) or not math.isfinite(base_lr) \
                or base_lr < 0:
            raise CatalogError(f"base_lr={base_lr!r} must be a finite number >= 0", where="Schedule",
                               hint="the optimizer's learning rate, e.g. 3e-4")
        if total_steps is not None and (isinstance(total_steps, bool)
                                        or not isinstance(total_steps, numbers.Integral) or total_steps < 1):
            raise CatalogError(f"total_steps={total_steps!r} must be a positive int or None", where="Schedule",
                               hint="the number of optimizer steps of the run; None when it is not known")
        self.scheduler = scheduler
        self.base_lr = float(base_lr)
        self.total_steps = None if total_steps is None else int(total_steps)

    @property
    def stateful(self) -> bool:
        return _is_stateful(self.scheduler)

    def _where(self) -> str:
        return f"scheduler {type(self.scheduler).__name__}"

    def _step(self, step: Any) -> int:
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise CatalogError(f"step={step!r} must be an int >= 0 (0 is the first optimizer step)",
                               where=self._where())
        return int(step)

    def at(self, step: int) -> float:
        """The LR for optimizer step `step`; a non-finite or negative value from the entry is refused."""
        v = self.scheduler.lr(self._step(step), self.base_lr, self.total_steps)
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise CatalogError(f"lr({step}) returned {v!r}, not a number", where=self._where()) from None
        if not math.isfinite(x) or x < 0:
            raise CatalogError(f"lr({step}) = {x!r} is not a finite number >= 0", where=self._where(),
                               hint="check the scheduler's hyperparameters")
        return x

    __call__ = at

    def values(self, n: int, start: int = 0) -> builtins.list[float]:
        """LRs of steps start .. start+n-1 (a curve to plot; does not change state)."""
        return [self.at(t) for t in range(self._step(start), self._step(start) + self._step(n))]

    def observe(self, value: float, step: int) -> None:
        """A validation metric measured after optimizer step `step`; a no-op for stateless entries."""
        if self.stateful:
            self.scheduler.observe(float(value), self._step(step))

    def state_dict(self) -> dict:
        """JSON-able: the binding and the entry's own state (None for stateless entries)."""
        sd = getattr(self.scheduler, "state_dict", None)
        return {"scheduler": type(self.scheduler).__name__, "base_lr": self.base_lr,
                "total_steps": self.total_steps, "state": sd() if callable(sd) else None}

    def load_state_dict(self, d: dict) -> None:
        """Restore what `state_dict` saved, so the following values are exactly those of the saved run."""
        if not isinstance(d, dict) or not {"scheduler", "base_lr", "total_steps", "state"} <= set(d):
            raise CatalogError("not a Schedule state_dict", where="Schedule.load_state_dict",
                               hint="pass what Schedule.state_dict() returned")
        if d["scheduler"] != type(self.scheduler).__name__:
            raise CatalogError(f"state was saved from scheduler {d['scheduler']}, this is "
                               f"{type(self.scheduler).__name__}", where="Schedule.load_state_dict",
                               hint="resume with the same scheduler the run was saved with")
        self.base_lr, self.total_steps = float(d["base_lr"]), d["total_steps"]
        if d["state"] is not None:
            load = getattr(self.scheduler, "load_state_dict", None)
            if not callable(load):
                raise CatalogError(f"{type(self.scheduler).__name__} has no load_state_dict for its saved state",
                                   where="Schedule.load_state_dict")
            load(d["state"])

    def __repr__(self) -> str:
        return f"Schedule({type(self.scheduler).__name__}, base_lr={self.base_lr:g}, total_steps={self.total_steps})"


# a validation curve that improves, then plateaus, then improves again: exercises every branch of a
# plateau rule without assuming its thresholds


