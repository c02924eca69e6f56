"""What a pooled training run keeps on the client: the split, the loader, the initial weights, the schedule.

Why borrowed from `sc.Run`: a data-parallel, sharded or relayed run must see exactly the batches, initial
weights and learning rates a single-device `sc.Run` of the same spec sees (same Philox streams, same
loader), so its loss can be compared with that run's; the split is Run's own code, not a copy. Options a
pooled run cannot honour yet are refused here, in one place, with the reason.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..catalog import initial_state, make
from ..catalog.schedulers import Schedule
from ..data import Batches
from ..data.augment import loader_options
from ..errors import PoolError
from ..program.options import StepOptions
from ..program.training import target_spec
from ..rng.generator import Generator
from ..run.run import Run
from ..run.weights import init_params
from ..spec import Spec
from ..spec.pretrained import pretrained_overrides

UNSUPPORTED = (("grad_accum_steps", "gradient accumulation"), ("regularizers", "regularizers"),
               ("ema", "an EMA of the weights"), ("swa_start", "SWA"), ("peft", "adapters"))


def own_only(pool, what: str) -> None:
    """Refuse a run that ships Python callables and weights to workers on a pool that is not the user's own."""
    trust = getattr(pool, "trust", "own")
    if trust != "own":
        raise PoolError(f"{what} ships Python code and the model's weights to the workers; this pool's trust "
                        f"regime is {trust!r}", where=what, hint="run it on your own devices: sc.Pool(workers=N)")


class Host:
    """The client side of a pooled run of `spec`: loader, initial weights and optimizer state, schedule."""

    _load_and_split = Run._load_and_split          # the very split a Run of this spec trains on
    _has = Run._has

    def __init__(self, spec, *, what: str, steps: int | None = None, data: dict | None = None):
        self.spec = spec = Spec.of(spec, data)
        r = spec.recipe
        if spec.kind == "gan":
            raise PoolError(f"{what} trains supervised specs; {spec.name!r} is a GAN", where=what)
        opts = StepOptions.from_spec(spec)
        bad = [why for key, why in UNSUPPORTED if r.get(key) not in (None, 1, [], {})]
        if opts.precision != "fp32":
            bad.append(f"precision {opts.precision}")
        if opts.data != "stream":
            bad.append('placement = "device"')
        if bad:
            raise PoolError(f"{what} does not support {', '.join(bad)} yet", where=f"spec {spec.name}",
                            hint="train it with sc.Run on one device, or drop those recipe keys")
        self._load_and_split()
        self.seed = int(r.get("seed") or 0)
        self.gen = Generator(self.seed)
        self.batch_size = int(r.get("batch_size", 32))
        if len(self.split["train"]) < self.batch_size:
            raise PoolError(f"the train split has {len(self.split['train'])} examples, fewer than one batch of "
                            f"{self.batch_size}", where="recipe.batch_size", hint="lower batch_size")
        self.loader = Batches(self.dataset, self.split["train"], self.batch_size, self.gen, shuffle=True,
                              drop_last=True, memory_budget=spec.data.get("memory_budget"),
                              **loader_options(r, self.dataset, self.split["train"], tuple(spec.input["shape"]),
                                               spec.input["dtype"]))
        self.init = init_params(spec.graph, self.gen, overrides=pretrained_overrides(spec))
        cfg = dict(r.get("optimizer") or {"name": "adamw"})
        self.opt_name = cfg.pop("name")
        self.opt_cfg = cfg
        self.optimizer = make("optimizer", self.opt_name, **cfg)
        n_epochs = int(r.get("epochs") or 1)
        self.horizon = int(r["steps"]) if r.get("steps") is not None else n_epochs * len(self.loader)
        self.total_steps = int(steps) if steps is not None else self.horizon
        sch = dict(r.get("scheduler") or {"name": "constant"})
        self.schedule = Schedule(sch.pop("name"), float(cfg.get("lr", 1e-3)), self.horizon, sch)
        self.target = target_spec(spec, spec.graph)
        self.step = 0
        self.loss_history: list[float] = []
        self._events: list[dict] = []
        self._subs: list[Callable[[dict], None]] = []

    def state0(self, names) -> dict[str, np.ndarray]:
        """The optimizer's initial state of parameters `names`, by step leaf name (`<param>.<slot>`)."""
        out = {}
        for n in names:
            for slot, a in initial_state(self.optimizer, tuple(np.shape(self.init[n])), "f32").items():
                out[f"{n}.{slot}"] = a
        return out

    def batches(self):
        """(x, y as the loss takes it) for every step this run takes, epoch after epoch, as a Run draws them."""
        while self.step < self.total_steps:
            for x, y in self.loader:
                if self.target.kind != "none":
                    y = self.target.check(y, where="a training batch")
                yield np.asarray(x), y
                if self.step >= self.total_steps:
                    return

    # ---- the event stream a LossCurve follows (the BackgroundRun subscribe interface) --------------------
    def subscribe(self, cb: Callable[[dict], None]) -> Callable[[], None]:
        """Call `cb(event)` for every past event, then for each new one; returns unsubscribe."""
        for ev in list(self._events):
            cb(ev)
        self._subs.append(cb)
        return lambda: self._subs.remove(cb) if cb in self._subs else None

    @property
    def events(self) -> list[dict]:
        return list(self._events)

    def emit(self, ev: dict) -> None:
        self._events.append(ev)
        for cb in list(self._subs):
            cb(ev)

    def step_feeds(self) -> dict[str, Any]:
        """The scalars of the next step: its learning rate and step count, as sc.Run feeds them."""
        return {"lr": float(self.schedule.at(self.step)), "step": float(self.step + 1)}
