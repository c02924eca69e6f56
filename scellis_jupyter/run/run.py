"""The training loop as a program you read: `for step in sc.Run(spec): ...`.

Why a generator of step results: data-dependent decisions (skip a bad batch, drop the LR on a plateau,
stop) belong to user code, so the Run only does one planned step per iteration and reports it. Everything
a step depends on is explicit state here (weights and optimizer state on the device, the Philox
positions of every sub-stream, the loader's place, the schedule, the loss scale), which is exactly what a
checkpoint holds, so a resumed run continues bit for bit.

Non-finite steps. Under fp32 a non-finite loss on finite inputs is divergence: the run stops at that step
with a `RunError` (code run-diverged) naming it, records `failed` and keeps its last good checkpoint (a
checkpoint is never written from non-finite weights). A batch whose own inputs are not finite (a poisoned
example) is skipped instead, as are steps whose gradients alone overflow. Under mixed precision non-finite
steps are expected (the f16 loss or gradients overflowed at the current loss scale): they are skipped and
the scale backs off, by design. Either way, `max_skipped_steps` skipped steps in a row (a NaN storm) fail
the run (code run-nan-storm).
"""
from __future__ import annotations

import os
import blake3
from safetensors.numpy import load_file
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import numpy as np

from .. import dtypes as dt
from ..spec import Spec
from ..errors import DeviceGone, RunError, ScellisError
from ..store import Store
from ..data.memory import MemoryData
from ..rng.generator import Generator
from ..backends.device import Device, device as pick
from ..plan.plan import plan as make_plan
from ..data import Batches
from ..data import load_dataset, split
from ..catalog import initial_state, make
from .weights import init_params
from ..data.augment import loader_options
from ..spec.pretrained import pretrained_overrides
from ..catalog.schedulers import Schedule
from ..rng.generator import base_words
from ..executor.executor import execute
from ..program.evaluation import build_eval_program
from ..store.objects import tensors_bytes
from ..store import save_checkpoint
from ..store import Checkpoint, check_spec
from ..store import HeartbeatThread, start_run
from ..errors import did_you_mean
from ..data.memory import Standardized
from .surgery import encode_stored, insert_adapters
from .pins import data_files, file_hashes
from ..data.split import Split, split_hash

SPLIT = {"train": 0.8, "val": 0.1, "test": 0.1}
# dynamic loss scaling with torch.amp.GradScaler's defaults; the scale never backs off below SCALE_MIN
LOSS_SCALE = {"init": 2.0 ** 16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
SCALE_MIN = 2.0 ** -14
# per-step inputs the step only reads and that often keep their value (a constant lr, a loss scale between
# growths): rewritten only when the value changes
SAME_SCALARS = frozenset({"lr", "loss_scale", "ema_rate", "swa_rate"})


@dataclass
class StepResult:
    step: int                       # optimizer steps done after this one (1 = the first step)
    epoch: int
    loss: float
    lr: float
    loss_scale: float | None
    skipped: bool                   # the update was not applied (non-finite gradients)
    metrics: dict = field(default_factory=dict)     # validation metrics, on the steps that evaluate
    batch_size: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


class Run:
    """One training run of a spec on a device: plan (refusing red), data, weights, the step loop.

    `steps`/`epochs` override the recipe; `store` (a Store or a path) enables checkpoints and the run
    record (`store=True`: the default store, `$SCELLIS_STORE` else `./.scellis`); `checkpoint_every` saves
    every K steps (and at the end). `resume` is a checkpoint hash, prefix, ref or run id in `store` (or a
    loaded `Checkpoint`, which needs no store) to continue from. `data` gives in-memory parts
    ({"train": (X, y), "val": (Xv, yv), "test": df}); their bytes are hashed into (and kept in) the record.
    """

    def __init__(self, spec, *, device=None, store=None, tier: str | None = None, steps: int | None = None,
                 epochs: int | None = None, checkpoint_every: int | None = None, eval_every: int | None = None,
                 resume: str | None = None, memory: int | None = None, options=None, max_skipped: int | None = None,
                 run_id: str | None = None, weights=None, weights_mapping: dict | None = None, data: dict | None = None):
        self.spec = spec = Spec.of(spec, data)
        if spec.kind == "gan":
            raise RunError(f"spec {spec.name!r} trains two networks adversarially (kind \"gan\")", where="Run",
                           hint="train it with GANRun(spec)")
        r = spec.recipe
        self._load_and_split()
        evaluation = self._evaluation(steps, epochs, eval_every, options)
        self._plan_or_refuse(device, store, max_skipped, run_id, memory=memory, tier=tier, options=options,
                             evaluation=evaluation)
        self.step_prog = self.plan.step
        self.impl = self.device.fresh_impl()        # this run's allocations alone: its measured peak
        self._setup_data()
        self.seed = int(r.get("seed") or 0)
        self.gen = Generator(self.seed)
        self._init_weights = weights
        self._weights_mapping = weights_mapping
        self._setup_model()
        # the schedule's horizon comes from the recipe (or an epochs override); `steps` only says where this
        # process stops, so a run stopped early and resumed follows the very same schedule
        n_epochs = epochs if epochs is not None else int(r.get("epochs") or 1)
        rs = None if epochs is not None else r.get("steps")
        self.horizon = int(rs) if rs is not None else n_epochs * len(self.loader)
        self.total_steps = int(steps) if steps is not None else self.horizon
        if self.total_steps < 1 or self.horizon < 1:
            raise RunError("the run has no steps", where="recipe", hint="set steps or epochs")
        self.checkpoint_every = checkpoint_every
        self.eval_every = eval_every if eval_every is not None else r.get("eval_every") or len(self.loader)
        self._setup_schedule()
        self.step = 0
        self.epoch = 0
        self._batches: Iterator | None = None     # the loader's running iterator; `_draw` moves it on
        self._batch_epoch = 0                     # the epoch of the batch `_draw` last returned
        self._ahead: tuple | None = None          # the next step's batch, read while this one ran (`_read_ahead`)
        self.scaler = {**LOSS_SCALE, **(r.get("loss_scale") or {})}
        self.loss_scale = float(self.scaler["init"]) if self.mixed else None
        self.ema_decay = float(r.get("ema") or 0.0)
        self.swa_samples = 0
        self._good_steps = 0
        self.skipped = 0
        self._skip_run = 0
        self.loss_history: list[float] = []
        self.metric_history: dict[str, list] = {}
        self.checkpoints: list[str] = []
        self.parent: str | None = None
        self.state = "created"
        self._stop_reason: str | None = None
        self.timings = {"steps_s": 0.0, "eval_s": 0.0}
        # what the run record keeps so `verify` and `resume` can rebuild this run from the store alone
        self._args = {"target_steps": self.total_steps, "epochs": epochs, "eval_every": eval_every,
                      "checkpoint_every": checkpoint_every, "pretrained": weights is not None,
                      "options": self.step_prog.options.describe() if options is not None else None}
        if resume is not None:
            self._resume(resume)
        if self.store is not None:
            self._start_record(run_id)

    # ---- setup -----------------------------------------------------------------------------------------
    def _plan_or_refuse(self, device, store, max_skipped, run_id, **plan_kw) -> None:
        """Device, store, the NaN-storm bound and the plan; a red plan is recorded `refused` (with a store)
        and raised before any compute."""
        spec = self.spec
        self.device = device if isinstance(device, Device) else pick(device or (spec.plan or {}).get("device"))
        self.store = _open_store(store)
        # non-finite steps in a row before the run stops (NaN storm): the argument, else the recipe
        self.max_skipped = int(max_skipped if max_skipped is not None
                               else spec.recipe.get("max_skipped_steps") or 10)
        self._handle = self._hb = None
        self.plan = make_plan(spec, self.device, **plan_kw)
        if self.plan.verdict == "red":
            err = self.plan.refusal()
            if self.store is not None:
                self._start_record(run_id)
                self._handle.refuse(err.diagnostic.to_json())
            raise err
        self.tier = self.plan.tier

    def _setup_data(self) -> None:
        self.batch_size = self.step_prog.batch_size
        self._check_train(self.batch_size * self.step_prog.options.accum)
        self._Batches = Batches

    def _evaluation(self, steps, epochs, eval_every, options) -> dict:
        """What this run will evaluate, for the plan: rows per evaluated part (val, test) and whether a step
        runs after an evaluation (evaluations between steps)."""
        r = self.spec.recipe
        metrics = bool(r.get("metrics"))
        parts = [len(self.split[p]) for p in ("val", "test") if self._has(p)] if metrics or self._has("test") else []
        if not parts:
            return False
        bs = int(r.get("batch_size", 32))
        accum = options.accum if options is not None else int(r.get("grad_accum_steps") or 1)
        per_epoch = len(self.split["train"]) // max(1, bs * accum)
        every = eval_every if eval_every is not None else r.get("eval_every") or per_epoch
        rs = None if epochs is not None else r.get("steps")
        horizon = int(rs) if rs is not None else int(epochs if epochs is not None else r.get("epochs") or 1) * per_epoch
        total = int(steps) if steps is not None else horizon
        return {"parts": parts, "in_loop": metrics and self._has("val") and bool(every) and total > int(every)}

    def _load_and_split(self, batch_examples: int | None = None) -> None:
        """The spec's dataset and its (stratified for classification) split; refuses a train part smaller
        than one batch of `batch_examples`."""
        spec = self.spec
        seed = int(spec.recipe.get("seed") or 0)
        mem = spec.memory
        if mem is not None:                  # in-memory parts: the split is the given parts, unless only train
            self.dataset = mem.dataset()
            strat = self.dataset.task == "classification"
            if len(mem.parts) > 1:
                parts = mem.ranges()
                n = len(self.dataset)
                fr = {k: len(v) / n for k, v in parts.items()}
                self.split = Split(self.dataset.content_hash(), fr, seed, False, parts=parts,
                                   hash=split_hash(self.dataset.content_hash(), fr, seed, False, parts))
            else:
                self.split = split(self.dataset, dict(spec.data.get("split") or SPLIT), seed=seed, stratify=strat)
        else:
            self.dataset = load_dataset(None, spec.data, spec.base_dir)
            fractions = dict(spec.data.get("split") or SPLIT)
            strat = getattr(self.dataset, "task", "") == "classification"
            self.split = split(self.dataset, fractions, seed=seed, stratify=strat)
        self.standardizer = None
        if spec.data.get("standardize"):     # fitted on the training rows only; kept in the record
            self.dataset = Standardized(self.dataset, self.split["train"])
            self.standardizer = self.dataset.stats()
        if batch_examples is not None:
            self._check_train(batch_examples)

    def _check_train(self, batch_examples: int) -> None:
        if len(self.split["train"]) < batch_examples:
            raise RunError(f"the train split has {len(self.split['train'])} examples, fewer than one batch of "
                           f"{batch_examples}", where="recipe.batch_size", hint="lower batch_size")

    def _setup_model(self) -> None:
        st = self.step_prog
        self.mixed = st.options.precision == "mixed-f16"
        on_device = st.options.data == "device"
        self.loader = self._Batches(self.dataset, self.split["train"], self.batch_size * st.options.accum, self.gen,
                                    shuffle=True, drop_last=True, rows_only=on_device,
                                    memory_budget=None if on_device else self.spec.data.get("memory_budget"),
                                    **loader_options(self.spec.recipe, self.dataset, self.split["train"],
                                                     tuple(self.spec.input["shape"]), self.spec.input["dtype"]))
        self.target = st.info.get("target")           # what the loss declares it compares with (y's dtype, shape)
        self.regularization = st.info.get("regularization")
        init = init_params(self.spec.graph, self.gen, overrides=pretrained_overrides(self.spec))
        if self._init_weights is not None:     # pretrained weights replace the drawn ones, by name
            init.update(_pretrained(self._init_weights, self._weights_mapping, init))
        self.adaptation = st.options.adaptation(self.spec.graph)
        if self.adaptation is not None:
            init = encode_stored(insert_adapters(init, self.adaptation, self.gen), self.adaptation)
        opt_cfg = dict(self.spec.recipe.get("optimizer") or {"name": "adamw"})
        self.opt_name = opt_cfg.pop("name")
        self.base_lr = float(opt_cfg.get("lr", 1e-3))
        self.optimizer = make("optimizer", self.opt_name, **opt_cfg)
        be = self.impl
        self.values: dict[str, Any] = {}      # leaf name -> device storage (weights, masters, state)
        # leaves the step overwrites in place are uploaded together (per role), so a backend may pack
        # them into shared buffers for its multi-tensor update; any other leaf gets its own storage
        prog = st.program
        in_place = {prog.leaves.index(li) for li in prog.meta.get("donated", {}).values()}
        todo: dict[str, list] = {}

        def upload(i: int, leaf, a: np.ndarray, dtype: str) -> None:
            if i in in_place:
                todo.setdefault(leaf.role, []).append((leaf.name, a, dtype))
            else:
                self.values[leaf.name] = be.from_numpy(a, dtype)

        def flush_uploads() -> None:
            for items in todo.values():
                for (name, _, _), s in zip(items, be.from_numpy_many([(a, d) for _, a, d in items])):
                    self.values[name] = s
            todo.clear()
        for i, leaf in enumerate(st.leaves):
            n = leaf.node
            if leaf.role == "parameter":
                a = init[leaf.name]
                upload(i, leaf, a.astype(dt.to_numpy(n.dtype)), n.dtype)
            elif leaf.role == "master_weights":
                upload(i, leaf, init[leaf.name.removesuffix(".master")].astype(np.float32), "f32")
        flush_uploads()
        if on_device:
            self._upload_dataset()
        states = {}
        for i, leaf in enumerate(st.leaves):
            if leaf.role == "optimizer_state":
                pname, slot = leaf.name.rsplit(".", 1)
                if slot in ("ema", "swa"):          # weight averages start at the initial weights
                    upload(i, leaf, np.asarray(init[pname], np.float32), "f32")
                    continue
                if pname not in states:
                    states[pname] = initial_state(self.optimizer, tuple(np.shape(init[pname])), "f32")
                upload(i, leaf, states[pname][slot], leaf.node.dtype)
        flush_uploads()
        reg = self.regularization
        if reg is not None and reg.buffers:          # regularizer state (spectral norm's u, v) from the init stream
            got = reg.init_buffers({k: np.asarray(v) for k, v in init.items()}, self.gen.stream("init"))
            for leaf in st.leaves:
                if leaf.role == "buffer":
                    self.values[leaf.name] = be.from_numpy(np.asarray(got[leaf.name], np.float32), leaf.node.dtype)
        self._inputs: dict[str, Any] = {}     # per-step inputs (batch, lr, step, ...): storages reused
        self._scalar_bytes: dict[str, tuple] = {}    # SAME_SCALARS input -> (its storage, bytes last written)
        self._step_leaf = next((leaf for leaf in st.leaves if leaf.name == "step"), None)   # the read-ahead writes it
        self._eval_progs: dict[tuple, Any] = {}   # (batch, with loss) -> eval program
        self.step_peak: int | None = None
        self._evaluated = False

    def _upload_dataset(self) -> None:
        """placement = "device": every row once, in pieces of at most 64 MiB on the host, as the step's
        `data.x` / `data.y` leaves (the step gathers its batch from them by row id)."""
        be, ds = self.impl, self.dataset
        leaves = {l.name: l.node for l in self.step_prog.leaves if l.name in ("data.x", "data.y")}
        n = len(ds)
        for name, node in leaves.items():
            if node.shape[0] != n:
                raise RunError(f"the plan holds {node.shape[0]} dataset rows on the device but the dataset has {n}",
                               where="data.placement", hint="the dataset changed since the spec was read; re-plan")
        step = max(1, (64 << 20) // max(1, ds.example_nbytes))
        parts: dict[str, list] = {k: [] for k in leaves}
        for lo in range(0, n, step):
            xs, ys = ds.read(np.arange(lo, min(n, lo + step)))
            if "data.y" in leaves and self.target is not None:
                ys = self.target.check(ys, where=f"the dataset's rows {lo}..{min(n, lo + step) - 1}")
            for name, a in (("data.x", xs), ("data.y", ys)):
                if name in leaves:
                    parts[name].append(np.asarray(a).astype(dt.to_numpy(leaves[name].dtype)))
        for name, node in leaves.items():
            full = np.concatenate(parts[name]).reshape(node.shape)
            self.values[name] = be.from_numpy(full, node.dtype)

    def _setup_schedule(self) -> None:
        cfg = dict(self.spec.recipe.get("scheduler") or {"name": "constant"})
        name = cfg.pop("name")
        self.schedule = Schedule(name, self.base_lr, self.horizon, cfg)
        self.metric_names = list(self.spec.recipe.get("metrics") or [])

    # ---- the loop --------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[StepResult]:
        return self._recorded(self._steps(), "step")

    def _steps(self) -> Iterator[StepResult]:
        while self.step < self.total_steps and self._stop_reason is None:
            x, y, ready = self._take()
            yield self._one_step(x, y, ahead=True, ready=ready)

    def _draw(self) -> tuple:
        """The loader's next batch and its epoch (at an epoch's end, the next epoch's first batch)."""
        if self._batches is None:
            self._batches, self._batch_epoch = iter(self.loader), self.epoch
        try:
            x, y = next(self._batches)
        except StopIteration:
            self._batches, self._batch_epoch = iter(self.loader), self._batch_epoch + 1
            x, y = next(self._batches)
        return x, y, self._batch_epoch

    def _take(self) -> tuple:
        """This step's batch: the one read ahead during the last step, else the loader's next; its
        uploaded inputs ({name: storage}) when the read-ahead wrote them already."""
        if self._ahead is not None:
            x, y, epoch, ready, _ = self._ahead
            self._ahead = None
        else:
            (x, y, epoch), ready = self._draw(), {}
        self.epoch = epoch
        return x, y, ready

    def _read_ahead(self) -> None:
        """The next step's batch, read and uploaded while this step runs on the device (its commands are
        submitted first; a queued write lands after them), so the host's batch work overlaps the GPU's
        instead of following it; so is the next step's count (the `step` input an optimizer's bias correction
        reads). Only when a next step is due. The loader's place before the read
        and how far the read moved each sub-stream (shuffle, augment) are kept with it: a checkpoint taken
        meanwhile (`_place`) resumes at that batch, so the run goes on exactly as without the read-ahead."""
        if self._ahead is not None or self.step + 1 >= self.total_steps or self._stop_reason is not None:
            return
        flush = getattr(self.impl, "flush", None)
        if flush is not None:       # the step starts now, not at the batch's first upload (after the read)
            flush()
        place, before = self.loader.place(), dict(self.gen.positions)
        x, y, epoch = self._draw()
        moved = {s: p - before.get(s, 0) for s, p in self.gen.positions.items() if p != before.get(s, 0)}
        ready = self._upload_batch(x, y)
        if ready and self._step_leaf is not None and "step" not in self.values:   # the next step's count, now
            ready["step"] = self._step_input(self._step_leaf, self.step + 2)   # (queued after this step, its reader)
        self._ahead = (x, y, epoch, ready, (place, moved, set(before)))

    def _place(self) -> tuple[dict, dict]:
        """(loader state, generator state) to resume from: without the batch read ahead, if one is waiting
        (its draws taken back from the positions; draws made since, from other streams, stay)."""
        if self._ahead is None:
            return self.loader.state_dict(), self.gen.state_dict()
        place, moved, had = self._ahead[4]
        state = self.gen.state_dict()
        back = {s: p - moved.get(s, 0) for s, p in state["positions"].items()}
        state["positions"] = {s: p for s, p in back.items() if p or s in had}
        return self.loader.state_dict(place), state

    def _upload_batch(self, x, y, strict: bool = False) -> dict:
        """The batch's step inputs (x or its row ids, y as the loss declares it), written into the step's
        input storages. When y fails the loss's check: raise if `strict` (the step taking the batch), else
        {} (the read-ahead: the step that takes the batch reports it)."""
        st = self.step_prog
        if self.target is not None and self.target.kind != "none" and st.options.data != "device":
            try:
                y = self.target.check(y, where="Run: a training batch")
            except ScellisError:
                if strict:
                    raise
                return {}
        return {leaf.name: self._step_input(leaf, y if leaf.name == "y" else x) for leaf in st.leaves
                if leaf.name in ("x", "batch_rows", "y") and leaf.name not in self.values}

    def _step_input(self, leaf, a):
        """Step input `leaf` holding `a` (cast and shaped as the leaf takes it) in its storage."""
        n = leaf.node
        return self._input(leaf.name, np.asarray(a).astype(dt.to_numpy(n.dtype), copy=False).reshape(n.shape), n.dtype)

    def _recorded(self, results: Iterator, unit: str) -> Iterator:
        """The loop with its lifecycle: running, then finished (final checkpoint, test metrics), or
        interrupted (left early, Ctrl-C) or failed (an error), each written to the run record."""
        self.state = "running"
        try:
            yield from results
            self._finish()
        except GeneratorExit:
            self._interrupt(f"the loop was left before the last {unit}")
            raise
        except KeyboardInterrupt:
            self._interrupt("interrupted by the user")
            raise
        except DeviceGone as e:             # nothing on the device to checkpoint: the last checkpoint stands
            self._interrupt(f"the device went away: {e.diagnostic.message}")
            raise
        except BaseException as e:
            self._fail(e)
            raise

    def stop(self, reason: str = "stopped by user code") -> None:
        """End the run after the current step (it finishes normally: final checkpoint, test metrics)."""
        self._stop_reason = reason

    def _feeds(self, x, y, lr: float, ready: dict | None = None):
        st = self.step_prog
        adv = st.info.get("rng_advance", {})
        reg = self.regularization
        drawn = reg.draw(self.gen.stream("augment")) if reg is not None and reg.draw is not None else {}
        if not ready:
            if self._ahead is not None and self._ahead[3]:    # a step on another batch (a caller's own loop)
                self._ahead = self._ahead[:3] + ({},) + self._ahead[4:]    # overwrites the read-ahead's uploads
            ready = self._upload_batch(x, y, strict=True)
        leaves = []
        for leaf in st.leaves:
            name = leaf.name
            if name in self.values:
                leaves.append(self.values[name])
                continue
            if name in ready:                    # the batch (uploaded by the read-ahead or just now)
                leaves.append(ready[name])
                continue
            if name in drawn:                    # regularizer inputs (mixup's lam and permutation, ...)
                a = drawn[name]
            elif name == "lr":
                a = lr
            elif name == "step":
                a = self.step + 1
            elif name == "loss_scale":
                a = self.loss_scale
            elif name == "ema_rate":
                a = 1.0 - self.ema_decay
            elif name == "swa_rate":
                a = self._swa_rate()
            elif name.startswith("rng:"):
                a = base_words(self.gen.positions.get(name[4:], 0))
            else:
                raise RunError(f"the step needs input {name!r}, which the loop does not provide", where="Run")
            leaves.append(self._step_input(leaf, a))
        for s, k in adv.items():              # every step draws the next words of its streams
            self.gen.positions[s] = self.gen.positions.get(s, 0) + int(k)
        return leaves

    def _input(self, name: str, a: np.ndarray, dtype: str):
        """The storage of a per-step input, written over in place from the second step on: the step then
        binds the same buffers every time and replays its recorded dispatches (no new bind groups).
        A hyperparameter scalar (lr, loss scale, averaging rates) whose value is unchanged is not written
        again: the step only reads it, so its storage still holds that value (one upload less per step)."""
        held = self._inputs.get(name)
        if held is None or held.shape != a.shape or held.dtype != dtype:
            held = self._inputs[name] = self.impl.from_numpy(a, dtype)
            if name in SAME_SCALARS:
                self._scalar_bytes[name] = (held, a.tobytes())
        elif name in SAME_SCALARS:
            raw, last = a.tobytes(), self._scalar_bytes.get(name)
            if last is None or last[0] is not held or last[1] != raw:
                self.impl.write(held, a)
                self._scalar_bytes[name] = (held, raw)
        else:
            self.impl.write(held, a)
        return held

    def _swa_rate(self) -> float:
        """1/(n+1) on the steps that add a sample to the average (from swa_start, every swa_every), else 0."""
        r = self.spec.recipe
        start, every, t = int(r.get("swa_start") or 0), int(r.get("swa_every") or 1), self.step + 1
        if t < start or (t - start) % every:
            return 0.0
        self.swa_samples += 1
        return 1.0 / self.swa_samples

    def _one_step(self, x, y, ahead: bool = False, ready: dict | None = None) -> StepResult:
        """One step on batch (x, y); `ahead`: read the next batch while it runs (`_read_ahead`); `ready`:
        this batch's inputs as the read-ahead uploaded them."""
        t0 = time.perf_counter()
        st = self.step_prog
        lr = self.schedule.at(self.step)
        outs = execute(st.program, self._feeds(x, y, lr, ready), self.impl)
        if ahead:
            self._read_ahead()
        if self.step_peak is None:
            self.step_peak = int(self.impl.peak)        # the planned step's own peak (before its readback)
        got = dict(zip(st.outputs, outs))
        if "finite" in got:                   # one readback for both
            loss_a, fin_a = self.impl.read_many([got["loss"], got["finite"]])
            loss, finite = float(loss_a), bool(fin_a)
        else:
            loss = float(self.impl.to_numpy(got["loss"]))
            finite = math.isfinite(loss)
        for name, s in got.items():            # donated outputs are the same storages; others replace them
            kind, _, rest = name.partition(":")
            if kind == "param":
                self.values[rest] = s
            elif kind == "master":
                self.values[f"{rest}.master"] = s
            elif kind == "state":
                self.values[rest] = s
        scale = self.loss_scale
        if self.mixed:                          # dynamic loss scaling: grow after good steps, back off on a bad one
            if finite:
                self._good_steps += 1
                if self._good_steps >= self.scaler["growth_interval"]:
                    self.loss_scale, self._good_steps = self.loss_scale * self.scaler["growth_factor"], 0
            else:
                self.loss_scale = max(self.loss_scale * self.scaler["backoff_factor"], SCALE_MIN)
                self._good_steps = 0
        del outs, got                  # the step's outputs are released before any evaluation (as planned)
        self.step += 1
        self.loss_history.append(loss)
        self._record("loss", loss)
        if not self.mixed and not math.isfinite(loss) and not self._bad_inputs(x, y, st.options.data == "device"):
            raise self._diverged(f"the loss is {loss} at step {self.step} (its inputs are finite)")
        self._count_skip(finite)
        metrics = {}
        if self.metric_names and self.eval_every and self.step % self.eval_every == 0 and self._has("val"):
            metrics = self.evaluate("val")
            self.schedule.observe(metrics.get("loss", loss), self.step - 1)
        dt_s = time.perf_counter() - t0
        self.timings["steps_s"] += dt_s
        if self._handle is not None and self.checkpoint_every and self.step % self.checkpoint_every == 0 \
                and self.step < self.total_steps:
            self.checkpoint()
        return StepResult(self.step, self.epoch, loss, lr, scale, not finite, metrics, self.batch_size, dt_s)

    def _count_skip(self, finite: bool) -> None:
        """A step with non-finite gradients was skipped: count it; too many in a row (a NaN storm) fail the run."""
        if finite:
            self._skip_run = 0
            return
        self.skipped += 1
        self._skip_run += 1
        if self._skip_run >= self.max_skipped:
            reason = (f"{self._skip_run} steps in a row had non-finite gradients (NaN storm); "
                      f"{self.skipped} skipped in all")
            self._stop_reason = reason
            raise RunError(f"stopped at step {self.step}: {reason}", where=f"step {self.step}",
                           code="run-nan-storm", step=self.step, last_checkpoint=self._last_checkpoint(),
                           hint=self._diverged_hint("max_skipped_steps raises the bound"))

    def _bad_inputs(self, x, y, rows: bool = False) -> bool:
        """The batch's own inputs or targets are not finite (a poisoned example, not a diverged model)."""
        if rows:                                 # placement = "device": x holds row ids, read those rows back
            x, y = self.dataset.read(np.asarray(x).reshape(-1))
        for a in (x, y):
            a = np.asarray(a) if a is not None else None
            if a is not None and a.dtype.kind in "fc" and not np.isfinite(a).all():
                return True
        return False

    def _last_checkpoint(self) -> str | None:
        return self.checkpoints[-1] if self.checkpoints else self.parent

    def _diverged_hint(self, extra: str = "") -> str:
        ck = self._last_checkpoint()
        keep = (f"the last good checkpoint is {ck[:12]}" if ck else "no checkpoint was saved before it")
        return "; ".join(filter(None, ["lower the learning rate or clip gradients (clip_grad_norm)", extra, keep]))

    def _diverged(self, what: str) -> RunError:
        """The error that ends a diverged run: names the step and the last good checkpoint."""
        self._stop_reason = f"diverged: {what}"
        return RunError(f"the run diverged: {what}", where=f"step {self.step}", code="run-diverged",
                        step=self.step, last_checkpoint=self._last_checkpoint(), hint=self._diverged_hint())

    def _record(self, name: str, value: float) -> None:
        self.metric_history.setdefault(name, []).append([self.step, float(value)])

    # ---- evaluation ------------------------------------------------------------------------------------
    def _eval_program(self, b: int, with_loss: bool = True):
        """The model in eval mode for a batch of `b` (program.evaluation, the Program the plan planned):
        its output, and the mean loss when `with_loss`."""
        key = (b, with_loss)
        ev = self._eval_progs.get(key)
        if ev is None:
            ev = self._eval_progs[key] = build_eval_program(self.spec, self.step_prog, b, self.device.program_backend,
                                                            self.tier, with_loss=with_loss,
                                                            adaptation=self.adaptation)
        return ev.program, ev.order

    def _eval_feeds(self, prog, order: list, x, y, weights: str, where: str) -> list:
        """Storages for an eval program's leaves: x and y as read (shaped and typed as the program takes
        them; y checked against the loss's target), the chosen weights, the regularizer buffers."""
        feeds, buffers = [], self._buffer_names()
        for j, name in enumerate(order):
            leaf = prog.values[prog.leaves[j]]
            if name == "x":
                dtype = self.spec.input["dtype"]
                feeds.append(self.impl.from_numpy(np.asarray(x).astype(dt.to_numpy(dtype)).reshape(leaf.shape),
                                                  dtype))
            elif name == "y":                    # as the loss declares it (dtype and per-example shape)
                yv = self.target.check(y, where=where)
                feeds.append(self.impl.from_numpy(yv.reshape(leaf.shape), self.target.dtype))
            elif name in buffers:
                feeds.append(self.values[name])
            else:
                feeds.append(self.values[name if weights == "current" else f"{name}.{weights}"])
        return feeds

    @staticmethod
    def _check_weights_kind(weights: str, where: str) -> None:
        if weights not in ("current", "ema", "swa"):
            raise RunError(f"weights={weights!r} is not 'current', 'ema' or 'swa'", where=where)

    def predict(self, x, weights: str = "current") -> np.ndarray:
        """The model's output (eval mode: no dropout) for a batch `x` of examples shaped like the data's
        ([n, *input shape], or rows that reshape to it), with the current (or "ema"/"swa") weights.

        The plan covers the run's own evaluations; a prediction compiles a Program for its `n` rows that the
        plan did not (its arena is shared, its inputs and outputs come on top)."""
        self._check_weights_kind(weights, "Run.predict")
        inp = self.spec.input
        if hasattr(x, "columns") and hasattr(x, "to_numpy"):      # a DataFrame: the features, target dropped
            t = self.spec.data.get("target")
            x = (x.drop(columns=[t]) if t in x.columns else x).to_numpy()
        x = np.asarray(x)
        n = x.shape[0] if x.ndim else 0
        per = int(np.prod(inp["shape"]))
        if n < 1 or x.size != n * per:
            raise RunError(f"predict needs a batch of examples of shape {list(inp['shape'])}, got {list(x.shape)}",
                           where="Run.predict", hint="pass x[None] for a single example")
        if self.standardizer is not None:     # the training rows' mean and std, as the model was trained on
            x = self.dataset.transform(x)
        prog, order = self._eval_program(n, with_loss=False)
        self._evaluated = True
        (out,) = execute(prog, self._eval_feeds(prog, order, x, None, weights, "Run.predict"), self.impl)
        return np.array(self.impl.to_numpy(out))

    def evaluate(self, part: str = "val", record: bool = True, weights: str = "current") -> dict:
        """Metrics (and mean loss) of the current weights on a split part, accumulated over batches.

        record=False keeps it out of the metric history (the end-of-run evaluation: a run stopped early
        and resumed must have the same curve as one that never stopped).
        """
        t0 = time.perf_counter()
        self._evaluated = True
        self._check_weights_kind(weights, "Run.evaluate")
        if weights != "current" and not any(k.endswith("." + weights) for k in self.values):
            raise RunError(f"this run keeps no {weights} weights", where="Run.evaluate",
                           hint="set ema = 0.999 or swa_start = N in [recipe]")
        idx = self.split[part]
        metrics = {m: make("metric", m) for m in self.metric_names}
        total, count = 0.0, 0
        bs = self.batch_size
        for lo in range(0, len(idx), bs):
            sel = idx[lo:lo + bs]
            x, y = self.dataset.read(sel)
            prog, order = self._eval_program(len(sel))
            feeds = self._eval_feeds(prog, order, x, y, weights, f"Run.evaluate({part!r})")
            pred, loss_v = self.impl.read_many(execute(prog, feeds, self.impl))
            if not np.isfinite(pred).all() and not self._bad_inputs(x, None):
                raise self._diverged(f"the model's outputs on the {part} split are not finite after step "
                                     f"{self.step}")
            del feeds                     # this batch's x and y go before the next batch's come (as planned)
            total += float(loss_v) * len(sel)
            count += len(sel)
            for m in metrics.values():
                m.update(pred, np.asarray(y) if y is not None else None)
        out = {"loss": total / max(count, 1)}
        for k, m in metrics.items():
            v = m.compute()
            out[k] = float(v) if np.ndim(v) == 0 else np.asarray(v).tolist()
        for k, v in out.items():
            if record and isinstance(v, float):
                self._record(f"{part}_{k}", v)
        self.timings["eval_s"] += time.perf_counter() - t0
        return {f"{part}_{k}" if part != "val" else k: v for k, v in out.items()}

    # ---- state: weights, checkpoints, records ----------------------------------------------------------
    def weights(self) -> dict[str, np.ndarray]:
        """The current weights (master copies under mixed precision) as numpy, by parameter name."""
        out = {}
        for leaf in self.step_prog.leaves:
            if leaf.role == "parameter" and f"{leaf.name}.master" not in self.values:
                out[leaf.name] = np.array(self.impl.to_numpy(self.values[leaf.name]))
            elif leaf.role == "master_weights":
                out[leaf.name.removesuffix(".master")] = np.array(self.impl.to_numpy(self.values[leaf.name]))
        return out

    def averaged(self, kind: str = "ema") -> dict[str, np.ndarray]:
        """The EMA or SWA weights by parameter name (set `ema` / `swa_start` in [recipe])."""
        out = {k[:-len(kind) - 1]: np.array(self.impl.to_numpy(v)) for k, v in self.values.items()
               if k.endswith("." + kind)}
        if not out:
            raise RunError(f"this run keeps no {kind} weights", where="Run.averaged",
                           hint="set ema = 0.999 or swa_start = N in [recipe]")
        return out

    def _buffer_names(self) -> set:
        return {l.name for l in self.step_prog.leaves if l.role == "buffer"}

    def buffers(self) -> dict[str, np.ndarray]:
        """Regularizer state by leaf name (spectral norm's `<weight>.sn_u`, `.sn_v`); saved with the optimizer
        state in checkpoints."""
        return {n: np.array(self.impl.to_numpy(self.values[n])) for n in sorted(self._buffer_names())}

    def optimizer_state(self) -> dict[str, dict[str, np.ndarray]]:
        """Optimizer slots per parameter (and regularizer buffers, which checkpoints keep beside them)."""
        out: dict[str, dict] = {}
        for leaf in self.step_prog.leaves:
            if leaf.role in ("optimizer_state", "buffer"):
                p, slot = leaf.name.rsplit(".", 1)
                out.setdefault(p, {})[slot] = np.array(self.impl.to_numpy(self.values[leaf.name]))
        return out

    def weights_hash(self) -> str:
        return blake3.blake3(tensors_bytes(self.weights())).hexdigest()

    def checkpoint(self) -> str:
        """Save weights, optimizer state, RNG positions, loader/schedule state and history; returns its hash."""
        loader, rng = self._place()
        extra = {"loader": loader, "schedule": self.schedule.state_dict(),
                 "loss_scale": self.loss_scale, "good_steps": self._good_steps, "skipped": self.skipped,
                 "skip_run": self._skip_run, "swa_samples": self.swa_samples, "loss_history": self.loss_history, "horizon": self.horizon,
                 "tier": self.tier, "device": getattr(self.device, "selector", self.device.backend), "program_hash": self.step_prog.program.hash,
                 "options": self.step_prog.options.describe(), "spec_source": self.spec.source,
                 "base_dir": _abs(self.spec.base_dir), "eval_every": self.eval_every}
        if self.spec.memory is not None and self.store is not None:
            extra["memory_data"] = self._memory_ref()
        return self._save_checkpoint(extra, self.epoch, rng)

    def _save_checkpoint(self, extra: dict, epoch: int, rng_state: dict | None = None) -> str:
        """Weights, optimizer state, RNG positions, history and `extra` as one checkpoint, chained to the last
        one and recorded with the run; returns its hash."""
        if self.store is None:
            raise RunError("this run has no store to checkpoint into", where=f"{type(self).__name__}.checkpoint",
                           hint=f"sc.{type(self).__name__}(spec, store='.scellis') or --store DIR")
        weights = self.weights()
        bad = sorted(k for k, v in weights.items() if v.dtype.kind in "fc" and not np.isfinite(v).all())
        if bad:                                 # never a checkpoint of a diverged model: the last good one stays
            raise self._diverged(f"weight {bad[0]!r} is not finite after step {self.step}")
        h = save_checkpoint(self.store, weights=weights, optimizer_state=self.optimizer_state(),
                            rng_state=rng_state or self.gen.state_dict(), epoch=epoch, step=self.step,
                            metrics_history=self.metric_history, spec_hash=self.spec.hash, parent=self.parent,
                            extra=extra, run=self._handle.id if self._handle else None)
        self.parent = h
        self.checkpoints.append(h)
        if self._handle is not None:
            self._handle.checkpoint(h, self.step, epoch)
        return h

    def _checkpoint_to_resume(self, ref):
        """The checkpoint `ref` names (or is), refused with a diff when it was made from another spec."""
        if isinstance(ref, Checkpoint):
            if ref.spec_hash != self.spec.hash:
                check_spec(ref, self.spec.hash)
            return ref
        if self.store is None:
            raise RunError("resuming needs the store that holds the checkpoint", where=type(self).__name__,
                           hint="pass store=")
        ck = self.store.load_checkpoint(ref)
        self.store.keep_spec_text(self.spec.hash, self.spec.text)
        self.store.check_spec(ck, self.spec.hash)
        return ck

    def _resume(self, ref) -> None:
        ck = self._checkpoint_to_resume(ref)
        be = self.impl
        w, ost = ck.weights, ck.optimizer_state
        for leaf in self.step_prog.leaves:
            n = leaf.node
            if leaf.role == "parameter":
                src = w.get(leaf.name)
                if src is None:
                    raise RunError(f"checkpoint {ck.hash[:12]} has no weight {leaf.name!r}", where="resume")
                self.values[leaf.name] = be.from_numpy(np.asarray(src).astype(dt.to_numpy(n.dtype)), n.dtype)
            elif leaf.role == "master_weights":
                self.values[leaf.name] = be.from_numpy(np.asarray(w[leaf.name.removesuffix(".master")], np.float32),
                                                       "f32")
            elif leaf.role in ("optimizer_state", "buffer"):
                p, slot = leaf.name.rsplit(".", 1)
                self.values[leaf.name] = be.from_numpy(np.asarray(ost[p][slot]), n.dtype)
        g = Generator.from_state(ck.rng_state)
        self.gen.seed, self.gen.positions = g.seed, dict(g.positions)
        ex = ck.extra or {}
        # the checkpoint's schedule horizon and evaluation cadence win over the recipe's, unless overridden here
        if self._args["epochs"] is None and ex.get("horizon") and int(ex["horizon"]) != self.horizon:
            self.horizon = int(ex["horizon"])
            self._setup_schedule()
        if self._args["eval_every"] is None and ex.get("eval_every"):
            self.eval_every = int(ex["eval_every"])
        self.loader.load_state_dict(ex["loader"])
        self.schedule.load_state_dict(ex["schedule"])
        self.loss_scale, self._good_steps = ex.get("loss_scale"), int(ex.get("good_steps", 0))
        self.skipped, self._skip_run = int(ex.get("skipped", 0)), int(ex.get("skip_run", 0))
        self.swa_samples = int(ex.get("swa_samples", 0))
        self.loss_history = list(ex.get("loss_history", []))
        self.metric_history = {k: [list(p) for p in v] for k, v in (ck.metrics_history or {}).items()}
        self.step, self.epoch = int(ck.step), int(ck.epoch)
        self._batches, self._ahead = None, None
        self.parent = ck.hash
        self.resumed_from = ck.hash
        self._args["resumed_from"] = ck.hash

    def _start_record(self, run_id: str | None) -> None:
        p = self.plan
        fields = dict(spec_hash=self.spec.hash, program_hash=p.program_hash, device=self._device_json(),
                      tier=p.tier, plan=p.to_json(), predicted_peak_bytes=p.peak_bytes,
                      extra={"spec_name": self.spec.name, "spec_source": self.spec.source,
                             "base_dir": _abs(self.spec.base_dir)})
        if hasattr(self, "_args"):          # set up (not refused by its plan)
            fields.update(dataset_hash=self.dataset.content_hash(), split_hash=self.split.hash)
            fields["extra"].update(self._args, horizon=self.horizon, eval_every=self.eval_every,
                                   seed=self.seed, data_files=data_files(self.dataset))
            if self.spec.memory is not None:      # kernel data: its bytes kept, so verify/resume need no kernel
                fields["extra"]["memory_data"] = self._memory_ref()
            if self.standardizer is not None:
                fields["extra"]["standardize"] = self.standardizer
            pre = getattr(self.spec.model, "pretrained", None)
            if pre is not None:             # the weights file is an input too: pinned by its BLAKE3
                fields["extra"]["pretrained_files"] = file_hashes([pre.path])
        if run_id:
            fields["id"] = run_id
        self.store.keep_spec_text(self.spec.hash, self.spec.text)
        self._handle = start_run(self.store, **fields)
        if p.verdict != "red":
            self._hb = HeartbeatThread(self._handle, every=2.0)
            self._hb.start()

    def _memory_ref(self) -> dict:
        """The in-memory data as the record keeps it: part names, rows, hashes and the stored arrays' hash."""
        ref = getattr(self, "_memory_stored", None)
        if ref is None:
            mem = self.spec.memory
            ref = self._memory_stored = dict(mem.describe(), blake3=mem.content_hash(),
                                             tensors=self.store.put_tensors(mem.tensors(), kind="memory-data"),
                                             labels=dict(mem.labels))
        return ref

    def _device_json(self) -> dict:
        d = self.device
        out = {"backend": d.backend, "name": d.name, "adapter_type": d.adapter_type}
        if d.implementation:        # the WebGPU implementation (verify compares bit for bit only within one)
            out["implementation"] = {"name": d.implementation, "version": d.implementation_version}
        return out

    @property
    def run_id(self) -> str | None:
        return self._handle.id if self._handle else None

    def _final_fields(self) -> dict:
        extra = self._progress_extra()
        extra.update(spec_name=self.spec.name, epochs_done=self.epoch, stop_reason=self._stop_reason,
                     step_peak_bytes=self.step_peak)
        return dict(measured_peak_bytes=int(self.impl.peak), metrics=self.final_metrics,
                    timings=dict(self.timings), extra=extra)

    def _progress_extra(self) -> dict:
        """The record's extra with where the run stands (steps, skips, weights hash, loss curve)."""
        extra = dict(self._handle.record.extra if self._handle is not None else {})
        extra.update(steps=self.step, skipped=self.skipped, weights_hash=self.weights_hash(),
                     loss_history=self.loss_history)
        return extra

    def _finish(self) -> None:
        self.final_metrics = {"loss": self.loss_history[-1] if self.loss_history else None}
        if self.metric_names or self._has("test"):
            for part in ("val", "test"):       # prefixed, so the last training loss stays "loss"
                if self._has(part):
                    self.final_metrics.update({f"val_{k}" if part == "val" else k: v
                                               for k, v in self.evaluate(part, record=False).items()})
        self.state = "finished"
        if self._handle is not None:
            self.checkpoint()
            self._stop_hb()
            self._handle.finish(**self._final_fields())

    def _has(self, part: str) -> bool:
        """The split has a non-empty `part` (a spec may leave out val or test)."""
        return part in self.split.parts and len(self.split.parts[part]) > 0

    def interrupt(self, reason: str = "interrupted by the user") -> str | None:
        """Checkpoint now (between steps) and record the run as interrupted, so `resume` continues it exactly.

        Returns the checkpoint's hash (None without a store). Why not just stop(): a stopped run finishes
        (final evaluation, state finished); an interrupted one is meant to be continued.
        """
        h = None
        if self._handle is not None and self._handle.state == "running":
            h = self.checkpoint()
            self._handle.update(measured_peak_bytes=int(self.impl.peak), timings=dict(self.timings),
                                extra=self._progress_extra())
        self._interrupt(reason)
        return h

    def _stop_hb(self) -> None:
        if self._hb is not None:
            self._hb.stop()
            self._hb = None

    def _interrupt(self, reason: str) -> None:
        self.state = "interrupted"
        if self._handle is not None and self._handle.state == "running":
            self._stop_hb()
            self._handle.interrupt(reason)

    def _fail(self, e: BaseException) -> None:
        """Record the run failed with `e` and where it stood (steps, skips, loss curve, the reason)."""
        self.state = "failed"
        if self._handle is not None and self._handle.state == "running":
            self._stop_hb()
            extra = dict(self._handle.record.extra or {})
            reason = e.diagnostic.message if isinstance(e, ScellisError) else f"{type(e).__name__}: {e}"
            extra.update(steps=self.step, skipped=self.skipped, loss_history=list(self.loss_history),
                         stop_reason=self._stop_reason or reason)
            self._handle.fail(e, extra=extra)

    # ---- results ---------------------------------------------------------------------------------------
    def run_to_end(self) -> dict:
        for _ in self:
            pass
        return self.result()

    def result(self) -> dict:
        """The summary `scellis train --json` prints."""
        return {"run": self.run_id, "state": self.state, "steps": self.step, "epochs": self.epoch,
                "final_checkpoint": self.checkpoints[-1] if self.checkpoints else None,
                "last_checkpoint": self._last_checkpoint(),
                "weights_hash": self.weights_hash(), "metrics": getattr(self, "final_metrics", {}),
                "loss_history": list(self.loss_history), "skipped_steps": self.skipped,
                "stop_reason": self._stop_reason, "measured_peak_bytes": int(self.impl.peak),
                "peak_with_evaluation_bytes": int(self.impl.peak), "step_peak_bytes": self.step_peak,
                "predicted_step_peak_bytes": int(self.plan.extras.get("step_peak", self.plan.peak_bytes)),
                "predicted_peak_bytes": int(self.plan.peak_bytes), "device": self._device_json(),
                "tier": self.tier, "spec_hash": self.spec.hash, "program_hash": self.plan.program_hash}


def _pretrained(weights, mapping: dict | None, drawn: dict) -> dict:
    """Initial weights from a dict or a .safetensors path, renamed by `mapping` (ours -> theirs), shapes checked."""
    if isinstance(weights, (str, bytes)) or hasattr(weights, "__fspath__"):
        path = os.fspath(weights)
        if not os.path.exists(path):
            raise RunError(f"weights file {path!r} does not exist", where="Run(weights=...)")
        weights = load_file(path)
    out = {}
    mapping = mapping or {}
    for ours, theirs in ({k: mapping.get(k, k) for k in drawn}).items():
        if theirs not in weights:
            continue
        a = np.asarray(weights[theirs])
        if a.shape != tuple(drawn[ours].shape):
            raise RunError(f"weight {theirs!r} has shape {list(a.shape)} but parameter {ours!r} needs "
                           f"{list(drawn[ours].shape)}", where="Run(weights=...)")
        out[ours] = a.astype(np.float32)
    unknown = [k for k in mapping if k not in drawn]
    if unknown:
        raise RunError(f"weights_mapping names {unknown[0]!r}, which is not a parameter", where="Run(weights_mapping)",
                       hint=did_you_mean(unknown[0], list(drawn)))
    if not out:
        raise RunError("none of the given weights matches a parameter name", where="Run(weights=...)",
                       hint="pass weights_mapping={our name: their name}")
    return out


def _abs(path: str | None) -> str | None:
    """A spec's folder as an absolute path, so a stored spec finds its data from any working directory."""
    return os.path.abspath(path) if path is not None else None


def _open_store(store):
    """None: no store; True: the default one ($SCELLIS_STORE, else ./.scellis); a path or a Store."""
    if store is None or store is False:
        return None
    if store is True:
        return Store.open()
    return store if isinstance(store, Store) else Store.open(store)


def spec_of_checkpoint(store, ref: str):
    """The spec a checkpoint was made from, rebuilt from the text the store keeps."""
    st = _open_store(store)
    ck = st.load_checkpoint(ref)
    text = st.spec_text(ck.spec_hash)
    if text is None:
        raise RunError(f"the store has no spec text for checkpoint {ck.hash[:12]} (spec {ck.spec_hash[:12]})",
                       where=f"store {st.root}", hint="resume with the spec: sc.Run(spec, store=..., resume=ref)")
    ex = ck.extra or {}
    return Spec.from_text(text, source=ex.get("spec_source") or "<stored spec>", base_dir=ex.get("base_dir"),
                          data=stored_memory_data(st, ex.get("memory_data"))), ck, st


def stored_memory_data(store, ref: dict | None):
    """The in-memory parts a run trained on, from the arrays the store keeps (None when it had none)."""
    if not ref:
        return None
    return MemoryData.from_tensors(store.get_tensors(ref["tensors"]), ref.get("labels"), ref.get("classes"))
