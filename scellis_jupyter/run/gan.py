"""Adversarial (GAN) training as a loop you read: `for r in GANRun(spec): ...`, one round per iteration.

Why rounds you can steer: how many discriminator steps come per generator step, when to stop, when to
look at samples are the decisions GAN practice changes most, so they are user code. A round runs
`run.d_steps` discriminator steps (each on a fresh real batch) and then `run.g_steps` generator steps,
both set from the recipe and free to change between rounds, and yields a `GANStep` with both losses.

Everything a round depends on is explicit state here: both networks' weights and optimizer state (on the
device for the whole run, as the plan counted), the Philox positions of every sub-stream ("noise" for
the generator's input, "shuffle" for the real batches, "sample" for `sample()`), the loader's place,
both LR schedules and each network's update count; a checkpoint holds all of it, so a resumed run
continues bit for bit (tier debug). Store records, heartbeats and stop/interrupt handling are `Run`'s.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import numpy as np

from .. import dtypes as dt
from ..spec import Spec
from ..program.adversarial import NETWORKS, generate_program, leaf_name, network_optimizer, sample_program
from .run import Run, RunError
from ..rng.generator import Generator
from ..catalog.schedulers import Schedule
from ..data import Batches
from ..catalog import initial_state
from .weights import init_params
from ..executor.executor import execute
from ..rng.generator import base_words
from ..errors import did_you_mean
from ..program.liveness import arena_slots


@dataclass
class GANStep:
    step: int                   # rounds done after this one (1 = the first)
    epoch: int                  # full passes of the discriminator over the real training data
    d_loss: float               # mean discriminator loss over this round's discriminator steps
    g_loss: float               # mean generator loss over this round's generator steps
    d_real: float               # the discriminator's mean logit on real examples (last discriminator step)
    d_fake: float               # ... on generated examples (last generator step)
    lr_d: float
    lr_g: float
    d_steps: int                # discriminator steps this round ran
    g_steps: int
    skipped: int = 0            # updates not applied this round (non-finite gradients)
    batch_size: int = 0
    seconds: float = 0.0

    @property
    def lr(self) -> dict:
        return {"discriminator": self.lr_d, "generator": self.lr_g}

    def to_json(self) -> dict:
        return asdict(self)


class GANRun(Run):
    """Adversarial training of a spec with kind = "gan": plan (refusing red), data, both networks, rounds.

    Keywords as `Run`: `steps` (rounds this process runs; the recipe's `steps` is the schedule's horizon),
    `epochs`, `store`, `checkpoint_every` (rounds), `resume` (a checkpoint or run id in `store`), `memory`,
    `max_skipped`, `run_id`. Set `run.d_steps` / `run.g_steps` between rounds to change the balance.
    """

    def __init__(self, spec, *, device=None, store=None, tier: str | None = None, steps: int | None = None,
                 epochs: int | None = None, checkpoint_every: int | None = None, resume: str | None = None,
                 memory: int | None = None, max_skipped: int | None = None, run_id: str | None = None):
        self.spec = spec = Spec.of(spec)
        if spec.kind != "gan":
            raise RunError(f"spec {spec.name!r} trains one model (kind {spec.kind!r}), not a GAN",
                           where="GANRun", hint="train it with Run, or describe [model.generator] and "
                                                '[model.discriminator] with kind = "gan"')
        r = spec.recipe
        self._plan_or_refuse(device, store, max_skipped, run_id, memory=memory, tier=tier)
        self.steps = self.plan.steps                 # network -> TrainStep (the planned Programs)
        self.batch_size = self.plan.batch_size
        self.impl = self.device.fresh_impl()         # this run's allocations alone: its measured peak
        # one arena for both steps, sized once for the larger (the plan's arena term; a split arena's two buffers)
        first, second = arena_slots([st.program.arena for st in self.steps.values()])
        self.impl.arenas(first, second) if second else self.impl.arena(first)
        self.seed = int(r.get("seed") or 0)
        self.gen = Generator(self.seed)
        self._setup_data()
        self._setup_networks()
        rounds_per_epoch = max(1, len(self.loader) // int(r["d_steps"]))
        n_epochs = epochs if epochs is not None else int(r.get("epochs") or 1)
        rs = None if epochs is not None else r.get("steps")
        self.horizon = int(rs) if rs is not None else n_epochs * rounds_per_epoch
        self.total_steps = int(steps) if steps is not None else self.horizon
        if self.total_steps < 1:
            raise RunError("the run has no rounds", where="recipe", hint="set steps or epochs")
        self.checkpoint_every = checkpoint_every
        self.schedules = {}
        for net in NETWORKS:
            cfg = dict(r[net]["scheduler"] or {"name": "constant"})
            name = cfg.pop("name")
            lr = float((r[net]["optimizer"] or {}).get("lr", 1e-3))
            self.schedules[net] = Schedule(name, lr, self.horizon, cfg)
        self.d_steps, self.g_steps = int(r["d_steps"]), int(r["g_steps"])
        self.step = 0
        self.updates = {net: 0 for net in NETWORKS}    # steps each network's optimizer has taken
        self.skipped = 0
        self._skip_run = 0
        self.loss_history: list[list[float]] = []      # [d_loss, g_loss] per round
        self.metric_history: dict[str, list] = {}
        self.checkpoints: list[str] = []
        self.parent: str | None = None
        self.state = "created"
        self._stop_reason: str | None = None
        self.timings = {"steps_s": 0.0, "sample_s": 0.0}
        self.step_peak: int | None = None
        self._sampled = False
        self._progs: dict = {}
        self._batches = None
        self.eval_every = None
        # what the run record keeps so `resume` can rebuild this run from the store alone
        self._args = {"target_steps": self.total_steps, "epochs": epochs, "eval_every": None,
                      "checkpoint_every": checkpoint_every, "pretrained": False, "options": None}
        if resume is not None:
            self._resume(resume)
        if self.store is not None:
            self._start_record(run_id)

    # ---- setup -----------------------------------------------------------------------------------------
    def _setup_data(self) -> None:
        self._load_and_split(self.batch_size)
        self.loader = Batches(self.dataset, self.split["train"], self.batch_size, self.gen, shuffle=True,
                              drop_last=True)

    def _setup_networks(self) -> None:
        be = self.impl
        self.values: dict[str, Any] = {}
        self.optimizers = {net: network_optimizer(self.spec, net) for net in NETWORKS}
        for net in NETWORKS:                          # generator first, then discriminator: one init stream
            init = init_params(self.spec.graphs[net], self.gen)
            opt = self.optimizers[net]
            for name, a in init.items():
                self.values[leaf_name(net, name)] = be.from_numpy(a, "f32")
                state = initial_state(opt, a.shape, "f32")
                for d in opt.state(a.shape, "f32"):
                    self.values[f"{leaf_name(net, name)}.{d.name}"] = be.from_numpy(state[d.name], d.dtype)

    # ---- the loop --------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[GANStep]:
        return self._recorded(self._rounds(), "round")

    def _rounds(self) -> Iterator[GANStep]:
        while self.step < self.total_steps and self._stop_reason is None:
            yield self._round()

    def _next_batch(self) -> np.ndarray:
        while True:
            if self._batches is None:
                self._batches = iter(self.loader)
            try:
                return next(self._batches)[0]
            except StopIteration:                     # the loader has moved to the next epoch
                self._batches = None

    def _round(self) -> GANStep:
        t0 = time.perf_counter()
        for k, v in (("d_steps", self.d_steps), ("g_steps", self.g_steps)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise RunError(f"run.{k} = {v!r} must be an integer >= 0", where="GANRun")
        if self.d_steps + self.g_steps == 0:
            raise RunError("a round with d_steps = g_steps = 0 does nothing", where="GANRun",
                           hint="set run.d_steps or run.g_steps to at least 1")
        lr = {net: self.schedules[net].at(self.step) for net in NETWORKS}
        d_losses, g_losses, skipped = [], [], 0
        d_real = d_fake = math.nan
        for _ in range(int(self.d_steps)):
            got = self._step("discriminator", self._next_batch(), lr["discriminator"])
            d_losses.append(got["loss"])
            d_real = got["d_real"]
            skipped += not got["finite"]
        for _ in range(int(self.g_steps)):
            got = self._step("generator", None, lr["generator"])
            g_losses.append(got["loss"])
            d_fake = got["d_fake"]
            skipped += not got["finite"]
        self.step += 1
        d_loss = float(np.mean(d_losses)) if d_losses else math.nan
        g_loss = float(np.mean(g_losses)) if g_losses else math.nan
        self.loss_history.append([d_loss, g_loss])
        for name, v in (("d_loss", d_loss), ("g_loss", g_loss), ("d_real", d_real), ("d_fake", d_fake)):
            if math.isfinite(v):
                self._record(name, v)
        dt_s = time.perf_counter() - t0
        self.timings["steps_s"] += dt_s
        if self._handle is not None and self.checkpoint_every and self.step % self.checkpoint_every == 0 \
                and self.step < self.total_steps:
            self.checkpoint()
        return GANStep(self.step, self.loader.epoch, d_loss, g_loss, d_real, d_fake, lr["discriminator"],
                       lr["generator"], len(d_losses), len(g_losses), skipped, self.batch_size, dt_s)

    def _step(self, network: str, x, lr: float) -> dict:
        """One planned step of `network`: bind, execute, keep the donated updates, read the scalars."""
        st, be = self.steps[network], self.impl
        feeds = []
        for leaf in st.leaves:
            n, name = leaf.node, leaf.name
            if name in self.values:
                feeds.append(self.values[name])
                continue
            if name == "x":
                a = x
            elif name == "lr":
                a = lr
            elif name == "step":
                a = self.updates[network] + 1
            elif name.startswith("rng:"):
                a = base_words(self.gen.positions.get(name[4:], 0))
            else:
                raise RunError(f"the {network} step needs input {name!r}, which the loop does not provide",
                               where="GANRun")
            # uploaded fresh (not written in place): the plan holds one step's inputs at a time, not both
            feeds.append(be.from_numpy(np.asarray(a).astype(dt.to_numpy(n.dtype)).reshape(n.shape), n.dtype))
        outs = execute(st.program, feeds, be)
        del feeds
        for s, k in st.info["rng_advance"].items():     # the next step draws the next words
            self.gen.positions[s] = self.gen.positions.get(s, 0) + int(k)
        self.updates[network] += 1
        got = dict(zip(st.outputs, outs))
        for name, s in got.items():                      # donated: the same storages, kept by name
            kind, _, rest = name.partition(":")
            if kind in ("param", "state"):
                self.values[rest] = s
        names = [k for k in ("loss", "d_real", "d_fake", "finite") if k in got]
        res = dict(zip(names, be.read_many([got[k] for k in names])))        # one readback
        res = {k: bool(v) if k == "finite" else float(v) for k, v in res.items()}
        res.setdefault("finite", math.isfinite(res["loss"]))
        if not self._sampled:
            self.step_peak = int(be.peak)                # the planned steps' own peak (before any sampling)
        self._count_skip(res["finite"])
        return res

    # ---- samples ---------------------------------------------------------------------------------------
    def sample(self, n: int) -> np.ndarray:
        """`n` generated examples (generator in eval mode), noise from the Philox stream "sample" (its
        position is run state: checkpointed, and never shared with the training noise)."""
        n = _count(n, "sample")
        t0 = time.perf_counter()
        key = ("sample", n)
        if key not in self._progs:
            self._progs[key] = sample_program(self.spec, n, self.device.backend, self.tier)
        prog, order, adv = self._progs[key]
        self._sampled = True
        feeds = [self.values[k] if k in self.values else
                 self.impl.from_numpy(base_words(self.gen.positions.get(k[4:], 0)), "u32") for k in order]
        (out,) = execute(prog, feeds, self.impl)
        for s, k in adv.items():
            self.gen.positions[s] = self.gen.positions.get(s, 0) + int(k)
        self.timings["sample_s"] += time.perf_counter() - t0
        return np.array(self.impl.to_numpy(out))

    def generate(self, z) -> np.ndarray:
        """The generator's output (eval mode) for given noise `z` of shape [n, *noise shape]."""
        shape = tuple(self.spec.graphs["generator"].input_shape)
        z = np.asarray(z, dtype=np.float32)
        if z.ndim != len(shape) + 1 or tuple(z.shape[1:]) != shape or z.shape[0] < 1:
            raise RunError(f"noise must have shape [n, {', '.join(map(str, shape))}], got {list(z.shape)}",
                           where="GANRun.generate")
        key = ("generate", z.shape[0])
        if key not in self._progs:
            self._progs[key] = generate_program(self.spec, z.shape[0], self.device.backend, self.tier)
        prog, order = self._progs[key]
        self._sampled = True
        feeds = [self.values[k] if k != "z" else self.impl.from_numpy(z, "f32") for k in order]
        (out,) = execute(prog, feeds, self.impl)
        return np.array(self.impl.to_numpy(out))

    def evaluate(self, *a, **kw):
        raise RunError("a GAN run has no validation loss", where="GANRun.evaluate",
                       hint="draw run.sample(n) and compare it with the data (e.g. an MMD)")

    def predict(self, *a, **kw):
        raise RunError("a GAN run has two networks, not one model to predict with", where="GANRun.predict",
                       hint="run.generate(z) maps noise through the generator; run.sample(n) draws the noise too")

    # ---- state: weights, checkpoints, records ----------------------------------------------------------
    def weights(self, network: str | None = None) -> dict[str, np.ndarray]:
        """Both networks' weights by leaf name ('generator/0.linear.weight'), or one network's by its own
        parameter names."""
        if network is not None and network not in NETWORKS:
            raise RunError(f"no network {network!r}", where="GANRun.weights", hint=did_you_mean(network, NETWORKS))
        out = {}
        for net in NETWORKS if network is None else (network,):
            for p in self.spec.graphs[net].params:
                a = np.array(self.impl.to_numpy(self.values[leaf_name(net, p.name)]))
                out[p.name if network else leaf_name(net, p.name)] = a
        return out

    def optimizer_state(self) -> dict[str, dict[str, np.ndarray]]:
        out: dict[str, dict] = {}
        for net in NETWORKS:
            opt = self.optimizers[net]
            for p in self.spec.graphs[net].params:
                name = leaf_name(net, p.name)
                out[name] = {d.name: np.array(self.impl.to_numpy(self.values[f"{name}.{d.name}"]))
                             for d in opt.state(tuple(p.shape), "f32")}
        return out

    def checkpoint(self) -> str:
        """Both networks' weights and optimizer state, RNG positions, loader, schedules and counts: one checkpoint."""
        extra = {"kind": "gan", "loader": self.loader.state_dict(),
                 "schedules": {n: s.state_dict() for n, s in self.schedules.items()}, "updates": dict(self.updates),
                 "d_steps": int(self.d_steps), "g_steps": int(self.g_steps), "skipped": self.skipped,
                 "skip_run": self._skip_run, "loss_history": self.loss_history, "horizon": self.horizon,
                 "tier": self.tier, "device": self.device.backend,
                 "program_hashes": {n: st.program.hash for n, st in self.steps.items()},
                 "spec_source": self.spec.source, "base_dir": self.spec.base_dir}
        return self._save_checkpoint(extra, self.loader.epoch)

    def _resume(self, ref) -> None:
        ck = self._checkpoint_to_resume(ref)
        ex = ck.extra or {}
        if ex.get("kind") != "gan":
            raise RunError(f"checkpoint {ck.hash[:12]} is not a GAN checkpoint", where="GANRun(resume=...)")
        ost = ck.optimizer_state
        for name in list(self.values):
            if name in ck.weights:
                src = ck.weights[name]
            else:
                p, slot = name.rsplit(".", 1)
                if p not in ost or slot not in ost[p]:
                    raise RunError(f"checkpoint {ck.hash[:12]} has no {name!r}", where="resume")
                src = ost[p][slot]
            old = self.values[name]
            self.values[name] = self.impl.from_numpy(np.asarray(src).astype(dt.to_numpy(old.dtype)), old.dtype)
        g = Generator.from_state(ck.rng_state)
        self.gen.seed, self.gen.positions = g.seed, dict(g.positions)
        self.loader.load_state_dict(ex["loader"])
        for n, s in self.schedules.items():
            s.load_state_dict(ex["schedules"][n])
        self.updates = {n: int(v) for n, v in ex["updates"].items()}
        self.d_steps, self.g_steps = int(ex["d_steps"]), int(ex["g_steps"])
        self.skipped, self._skip_run = int(ex.get("skipped", 0)), int(ex.get("skip_run", 0))
        self.loss_history = [list(v) for v in ex.get("loss_history", [])]
        self.metric_history = {k: [list(p) for p in v] for k, v in (ck.metrics_history or {}).items()}
        self.step = int(ck.step)
        self.parent = self.resumed_from = ck.hash

    @property
    def epoch(self) -> int:
        """Full passes of the discriminator over the real training data (the loader's epoch)."""
        return self.loader.epoch

    def _final_fields(self) -> dict:
        fields = super()._final_fields()
        fields["extra"]["kind"] = "gan"
        return fields

    def _finish(self) -> None:
        last = self.loss_history[-1] if self.loss_history else [None, None]
        self.final_metrics = {"d_loss": last[0], "g_loss": last[1]}
        self.state = "finished"
        if self._handle is not None:
            self.checkpoint()
            self._stop_hb()
            self._handle.finish(**self._final_fields())

    def result(self) -> dict:
        return {"run": self.run_id, "state": self.state, "kind": "gan", "steps": self.step,
                "epochs": self.loader.epoch, "updates": dict(self.updates),
                "final_checkpoint": self.checkpoints[-1] if self.checkpoints else None,
                "weights_hash": self.weights_hash(), "metrics": getattr(self, "final_metrics", {}),
                "loss_history": [list(v) for v in self.loss_history], "skipped_steps": self.skipped,
                "stop_reason": self._stop_reason, "measured_peak_bytes": self.step_peak,
                "predicted_peak_bytes": int(self.plan.peak_bytes), "device": self._device_json(),
                "tier": self.tier, "spec_hash": self.spec.hash, "program_hash": self.plan.program_hash}


def _count(n, where: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise RunError(f"n = {n!r} must be an integer >= 1", where=f"GANRun.{where}")
    return int(n)
