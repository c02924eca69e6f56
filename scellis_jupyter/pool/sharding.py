"""Models bigger than one device, over a Pool's workers: sharded optimizer state and the layer relay.

Why these two: they are the planner's `requires="pool"` fixes ("shard optimizer state over N devices",
"layer relay over N devices"), each planned from the real per-device Program (program.partition), so a
pool of N workers with a declared per-device memory runs exactly what was planned:

- shard: rank r keeps and updates only the optimizer state of the parameters it owns; every rank runs the
  whole batch's forward and backward (the step builder's `shard=(r, N)` Program) and sends its updated
  parameters to the others (an all-gather, worker to worker). Equal to the single-device step bit for bit.
- relay: stage k holds a contiguous run of layers with their state; activations go forward stage to stage,
  the gradient with respect to each stage's input comes back, each stage updates its own layers. A stage
  before the last runs its Program twice per step (once for the activation it sends on, once with the
  gradient that came back): one micro-batch in flight, no pipelining.

Each step's Programs run on the reference backend (numpy) on a fresh allocator per task, so a worker reports
the peak it really allocated; the per-device plans are made for that backend.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as dt
from ..backends.device import device as pick
from ..errors import PoolError
from ..executor.executor import execute
from ..plan.model import _verdict, step_peak
from ..plan.plan import plan as make_plan
from ..program import partition
from ..program.options import StepOptions
from ..program.training import build_train_step
from ..spec import Spec
from .devices import engine, new_run_id, parse_devices, release, resolve
from .host import Host, own_only
from .parallel import cached

FIXES = {"shard_optimizer_state": "shard", "layer_relay": "relay"}


def _options(kind: str, index: int, count: int) -> StepOptions:
    return StepOptions(shard=(index, count)) if kind == "shard" else StepOptions(relay=(index, count))


def _step(spec: Spec, b: int, tier: str, kind: str, index: int, count: int, backend: str = "reference"):
    key = (kind, spec.hash, b, tier, index, count) + ((backend,) if backend != "reference" else ())
    return cached(key, lambda: build_train_step(spec, b, backend, tier, options=_options(kind, index, count)))


@dataclass
class PoolPlan:
    """The plan of a run spread over `count` devices of `capacity_bytes` each: one peak per device."""

    kind: str                      # "shard" | "relay"
    count: int
    capacity_bytes: int
    devices: list = field(default_factory=list)     # [{"device", "peak_bytes", "verdict", "params"}]
    single_peak_bytes: int = 0
    single_verdict: str = ""
    tier: str = "debug"

    @property
    def verdict(self) -> str:
        """The memory verdict of the pool: the worst device's (green, yellow or red)."""
        order = ("green", "yellow", "red")
        return max((d["verdict"] for d in self.devices), key=order.index)

    def table(self) -> str:
        what = "optimizer state sharded" if self.kind == "shard" else "layer relay"
        lines = [f"pool plan: {what} over {self.count} devices of {self.capacity_bytes / 2**20:.2f} MiB: {self.verdict}"
                 f" (one device: {self.single_peak_bytes / 2**20:.2f} MiB, {self.single_verdict})"]
        for d in self.devices:
            lines.append(f"  device {d['device']}: peak {d['peak_bytes'] / 2**20:.2f} MiB "
                         f"({100 * d['peak_bytes'] / self.capacity_bytes:.0f}%) {d['verdict']}, "
                         f"{len(d['params'])} parameters")
        return "\n".join(lines)


def pool_plan(spec, kind: str = "shard", count: int = 2, *, memory: int | None = None, data: dict | None = None,
              device=None) -> PoolPlan:
    """Plan `spec` spread over `count` devices of `memory` bytes each (kind "shard" or "relay"), per device.

    `kind` may also be a planner Fix (its `settings` say which and over how many). `device` (a name as
    pool/devices.py reads it, default the reference) is the kind of device each rank runs on."""
    if hasattr(kind, "settings"):
        fix = kind
        if fix.requires != "pool" or fix.kind not in FIXES:
            raise PoolError(f"fix {fix.kind!r} is not one a pool runs", where="pool_plan",
                            hint="pick a fix with requires='pool' (shard_optimizer_state or layer_relay)")
        kind = FIXES[fix.kind]
        count = int(fix.settings["shard" if kind == "shard" else "relay"])
    if kind not in ("shard", "relay"):
        raise PoolError(f"kind {kind!r} is not 'shard' or 'relay'", where="pool_plan")
    if count < 2:
        raise PoolError(f"spreading over {count} device(s) is no pool", where="pool_plan", hint="give count=2 or more")
    spec = Spec.of(spec, data)
    dev = resolve(device) if device not in (None, "reference") else pick("reference")
    single = make_plan(spec, dev, memory=memory, fixes=False)
    cap, tier, bs = single.capacity_bytes, single.tier, single.batch_size
    out = PoolPlan(kind, count, cap, single_peak_bytes=single.peak_bytes,
                   single_verdict=_verdict(single.peak_bytes, cap), tier=tier)
    impl = dev.impl
    for i in range(count):
        if kind == "shard":
            p = make_plan(spec, dev, memory=memory, options=_options(kind, i, count), fixes=False)
            peak, st = p.peak_bytes, p.step
            params = st.info["owned"]
        else:
            st = _step(spec, bs, tier, kind, i, count, dev.backend)
            peak = step_peak(st, impl)[0]
            params = st.param_names
        out.devices.append({"device": i, "peak_bytes": int(peak), "verdict": _verdict(peak, cap), "params": list(params)})
    return out


# ---- on a worker ------------------------------------------------------------------------------------------
def _run_step(st, feeds: dict) -> tuple[dict, int]:
    """Execute step `st` on fresh storages: (outputs by name as numpy, bytes this allocator peaked at)."""
    if any(l.name.startswith("rng:") for l in st.leaves):
        raise PoolError("a pooled step with dropout is not supported yet (its Philox positions are per stage)",
                        where="pool step", hint="drop the dropout layers, or train it with sc.Run")
    impl = pick("reference").fresh_impl()
    stor = [impl.from_numpy(np.asarray(feeds[l.name]).astype(dt.to_numpy(l.node.dtype)).reshape(l.node.shape),
                            l.node.dtype) for l in st.leaves]
    outs = execute(st.program, stor, impl)
    got = {n: np.array(impl.to_numpy(o)) for n, o in zip(st.outputs, outs)}
    return got, int(impl.peak)


def _updated(got: dict, params: dict, state: dict) -> tuple[dict, dict]:
    new_p = {k[6:]: v for k, v in got.items() if k.startswith("param:")}
    new_s = {k[6:]: v for k, v in got.items() if k.startswith("state:")}
    return {k: new_p.get(k, v) for k, v in params.items()}, {k: new_s.get(k, v) for k, v in state.items()}


def shard_step(spec: Spec, tier: str, rank: int, world: int, state: dict, owned: list, x, y, scalars: dict) -> dict:
    """Rank `rank`'s step: every rank's current parameters in, its own updated parameters and state out."""
    st = _step(spec, len(x), tier, "shard", rank, world)
    params = {k: v for part in owned for k, v in part.items()}
    got, peak = _run_step(st, {**params, **state, "x": x, "y": y, **scalars})
    mine = {n: params[n] for n in st.info["owned"]}
    new_p, new_s = _updated(got, mine, state)
    return {"loss": float(got["loss"]), "params": new_p, "state": new_s, "peak": peak}


def relay_stage(spec: Spec, tier: str, stage: int, stages: int, params: dict, state: dict, inp, y, grad_out,
                scalars: dict) -> dict:
    """Stage `stage` on its input (x, or the previous stage's activation) and, before the last stage, the
    gradient of its output (zeros on the forward pass): its output, input gradient, new parameters and state."""
    b = len(inp)
    st = _step(spec, b, tier, "relay", stage, stages)
    feeds = {**params, **state, **scalars, ("x" if stage == 0 else "act_in"): inp}
    if stage == stages - 1:
        feeds["y"] = y
    else:
        shape = next(l.node.shape for l in st.leaves if l.name == "grad_out")
        feeds["grad_out"] = np.zeros(shape, np.float32) if grad_out is None else grad_out
    got, peak = _run_step(st, feeds)
    new_p, new_s = _updated(got, params, state)
    return {"out": got.get("loss", got.get("act_out")), "grad_in": got.get("grad_in"), "params": new_p,
            "state": new_s, "peak": peak, "finite": bool(got.get("finite", True))}


def _pick(d: dict, key: str):
    return d[key]


# ---- on a worker bound to a wgpu device: state stays in its buffers (pool/devices.py) ---------------------
def _dev_execute(eng, st, feeds: dict) -> dict:
    """Run step `st` on the engine: leaves from its buffers, else uploaded from `feeds`; outputs by name."""
    if any(l.name.startswith("rng:") for l in st.leaves):
        raise PoolError("a pooled step with dropout is not supported yet (its Philox positions are per stage)",
                        where="pool step", hint="drop the dropout layers, or train it with sc.Run")
    leaves = [eng.put(f"in:{l.name}:{st.batch_size}", feeds[l.name], l.node.dtype, l.node.shape)
              if l.name in feeds else eng.values[l.name] for l in st.leaves]
    return dict(zip(st.outputs, execute(st.program, leaves, eng.impl)))


def dev_open(run: str, name: str, state: dict, host: dict | None = None) -> int:
    """On a worker: open its device for run `run`, upload the optimizer state it keeps there (sharded
    state), or keep `host` (a relay stage's weights and state) on the worker's host."""
    eng = engine(run, name)
    with eng.lock:
        for n, a in state.items():
            eng.values[n] = eng.impl.from_numpy(np.asarray(a, np.float32), "f32")
        eng.host = {k: np.asarray(v, np.float32) for k, v in (host or {}).items()}
    return 0


def dev_shard_step(run: str, spec: Spec, tier: str, rank: int, world: int, token: int, owned: list, x, y,
                   scalars: dict) -> dict:
    """shard_step on the worker's device: every rank's parameters uploaded, its optimizer state kept there;
    its own updated parameters come back to the host (they go to every other rank)."""
    eng = engine(run)
    with eng.lock:
        st = _step(spec, len(x), tier, "shard", rank, world, eng.impl.name)
        params = {k: v for part in owned for k, v in part.items()}
        got = _dev_execute(eng, st, {**params, "x": x, "y": y, **scalars})
        mine = list(st.info["owned"])
        names = ["loss"] + [f"param:{n}" for n in mine if f"param:{n}" in got]
        arr = dict(zip(names, eng.impl.read_many([got[k] for k in names])))
        for k, o in got.items():
            if k.startswith("state:"):
                eng.values[k[6:]] = o
        new_p = {n: np.array(arr.get(f"param:{n}", params[n])) for n in mine}
        return {"loss": float(arr["loss"]), "params": new_p, "state": token + 1, "peak": int(eng.impl.peak)}


def dev_relay_stage(run: str, spec: Spec, tier: str, stage: int, stages: int, token: int, inp, y, grad_out,
                    scalars: dict) -> dict:
    """relay_stage on the worker's device. A stage's Program updates its weights in place (donated) and a
    stage before the last runs twice a step, so its weights and state are kept on the worker's host and
    uploaded each run; the new ones wait (pending) until `dev_relay_commit` says every stage was finite."""
    eng = engine(run)
    with eng.lock:
        st = _step(spec, len(inp), tier, "relay", stage, stages, eng.impl.name)
        feeds = {**eng.host, **scalars, ("x" if stage == 0 else "act_in"): inp}
        if stage == stages - 1:
            feeds["y"] = y
        else:
            shape = next(l.node.shape for l in st.leaves if l.name == "grad_out")
            feeds["grad_out"] = np.zeros(shape, np.float32) if grad_out is None else grad_out
        got = _dev_execute(eng, st, feeds)
        names = [k for k in got if k in ("loss", "act_out", "grad_in", "finite") or k.partition(":")[0] in
                 ("param", "state")]
        arr = dict(zip(names, eng.impl.read_many([got[k] for k in names])))
        eng.pending = {k.partition(":")[2]: np.array(a) for k, a in arr.items() if k.partition(":")[0] in
                       ("param", "state")}
        return {"out": arr.get("loss", arr.get("act_out")), "grad_in": arr.get("grad_in"), "state": token + 1,
                "peak": int(eng.impl.peak), "finite": bool(arr.get("finite", True))}


def dev_relay_commit(run: str, token: int, ok: bool) -> int:
    eng = engine(run)
    with eng.lock:
        if ok:
            eng.host.update(eng.pending)
        eng.pending = {}
    return token + 1


def dev_read(run: str, token: int, names: list) -> dict:
    eng = engine(run)
    with eng.lock:
        return {n: np.array(eng.host[n]) for n in names} if eng.host else eng.read(list(names))


def dev_release(run: str) -> bool:
    return release(run)


# ---- on the client ----------------------------------------------------------------------------------------
class _PoolRun(Host):
    kind = ""

    def __init__(self, pool, spec, *, count: int = 2, memory: int | None = None, steps: int | None = None,
                 data: dict | None = None, device: str | None = None, devices: list | None = None):
        what = "a sharded run" if self.kind == "shard" else "a layer relay"
        own_only(pool, what)
        super().__init__(spec, what=what, steps=steps, data=data)
        self.pool, self.client = pool, pool.client
        workers = pool.workers()
        if len(workers) < count:
            raise PoolError(f"{what} over {count} devices needs {count} workers; the pool has {len(workers)}",
                            where=what, hint=f"sc.Pool(workers={count})")
        self.workers = workers[:count]
        self.count = count
        self.device_names = parse_devices(device, devices, count)
        self.on_device = self.device_names[0] != "reference"
        self.run_id = new_run_id()
        self.pool_plan = pool_plan(self.spec, self.kind, count, memory=memory, device=self.device_names[0])
        if self.pool_plan.verdict == "red":
            bad = [d for d in self.pool_plan.devices if d["verdict"] == "red"]
            raise PoolError(f"{what} over {count} devices is red: device {bad[0]['device']} needs "
                            f"{bad[0]['peak_bytes']} bytes of {self.pool_plan.capacity_bytes}", where=what,
                            hint="spread it over more devices")
        self.tier = self.pool_plan.tier
        self.memory = self.pool_plan.capacity_bytes
        self.measured_peaks = [0] * count
        self.skipped = 0

    def _peaks(self, results: list) -> None:
        for i, f in results:
            self.measured_peaks[i] = max(self.measured_peaks[i],
                                         self.client.submit(_pick, f, "peak", workers=[self.workers[i]]).result())

    def _put(self, i: int, value):
        return self.client.scatter([value], workers=[self.workers[i]], broadcast=False, hash=False)[0]   # one future

    def _local(self, i: int, fut, key: str):
        return self.client.submit(_pick, fut, key, workers=[self.workers[i]], pure=False)

    def train(self) -> list[float]:
        for _ in self:
            pass
        return list(self.loss_history)

    def _open(self, r: int, state: dict, host: dict | None = None):
        """The token future of rank r's engine, its device opened and `state` uploaded there."""
        return self.client.submit(dev_open, self.run_id, self.device_names[r], self._put(r, state),
                                  self._put(r, host) if host is not None else None, workers=[self.workers[r]],
                                  pure=False)

    def close(self) -> None:
        """Release the workers' device buffers of this run (a run on the reference backend holds none)."""
        if self.on_device:
            self.client.gather([self.client.submit(dev_release, self.run_id, workers=[w], pure=False)
                                for w in self.workers])

    def _record(self, loss: float, lr: float) -> dict:
        self.step += 1
        self.loss_history.append(loss)
        ev = {"kind": "step", "step": self.step, "loss": loss, "lr": lr}
        self.emit(ev)
        return ev


class ShardedRun(_PoolRun):
    """`spec` trained over `count` workers, each keeping 1/count of the optimizer state (ZeRO stage 1)."""

    kind = "shard"

    def __init__(self, pool, spec, **kw):
        super().__init__(pool, spec, **kw)
        owned = [d["params"] for d in self.pool_plan.devices]
        self.params = [self._put(r, {n: self.init[n] for n in owned[r]}) for r in range(self.count)]
        if self.on_device:                # each rank's optimizer state lives on its device; a token stands for it
            self.state = [self._open(r, self.state0(owned[r])) for r in range(self.count)]
            self.client.gather(self.state)
        else:
            self.state = [self._put(r, self.state0(owned[r])) for r in range(self.count)]

    def __iter__(self):
        for x, y in self.batches():
            s = self.step_feeds()
            fn, head = (dev_shard_step, (self.run_id,)) if self.on_device else (shard_step, ())
            res = [self.client.submit(fn, *head, self.spec, self.tier, r, self.count, self.state[r], self.params,
                                      x, y, s, workers=[self.workers[r]], pure=False) for r in range(self.count)]
            self.params = [self._local(r, f, "params") for r, f in enumerate(res)]
            self.state = [self._local(r, f, "state") for r, f in enumerate(res)]
            losses = [self.client.submit(_pick, f, "loss", workers=[self.workers[r]]).result()
                      for r, f in enumerate(res)]
            if len(set(losses)) != 1:
                raise PoolError(f"the ranks computed different losses {losses} for one batch", where="ShardedRun")
            self._peaks(list(enumerate(res)))
            yield self._record(losses[0], s["lr"])

    def weights(self) -> dict[str, np.ndarray]:
        return {k: v for f in self.params for k, v in f.result().items()}


class RelayRun(_PoolRun):
    """`spec` trained as a relay over `count` workers: each holds a contiguous run of layers and their state."""

    kind = "relay"

    def __init__(self, pool, spec, **kw):
        super().__init__(pool, spec, **kw)
        self.stage_params = [d["params"] for d in self.pool_plan.devices]
        if self.on_device:                 # a token per stage stands for the weights and state its worker keeps
            self.state = [self._open(k, {}, {n: self.init[n] for n in ps} | self.state0(ps))
                          for k, ps in enumerate(self.stage_params)]
            self.params = list(self.state)
            self.client.gather(self.state)
        else:
            self.params = [self._put(k, {n: self.init[n] for n in ps}) for k, ps in enumerate(self.stage_params)]
            self.state = [self._put(k, self.state0(ps)) for k, ps in enumerate(self.stage_params)]
        self.layers = partition.relay_stages(self.spec.graph, self.count)

    def __iter__(self):
        S = self.count
        for x, y in self.batches():
            s = self.step_feeds()

            def stage(k, inp, grad_out, y=y, s=s):
                if self.on_device:           # the stage's token orders its tasks on the worker
                    f = self.client.submit(dev_relay_stage, self.run_id, self.spec, self.tier, k, S, self.state[k],
                                           inp, y if k == S - 1 else None, grad_out, s, workers=[self.workers[k]],
                                           pure=False)
                    self.state[k] = self._local(k, f, "state")
                    return f
                return self.client.submit(relay_stage, self.spec, self.tier, k, S, self.params[k], self.state[k], inp,
                                          y if k == S - 1 else None, grad_out, s, workers=[self.workers[k]], pure=False)

            acts, fwd = [None] * S, []
            inp = x
            for k in range(S - 1):                    # forward: each stage's activation goes on to the next
                f = stage(k, inp, None)
                fwd.append((k, f))
                inp = acts[k] = self._local(k, f, "out")
            last = stage(S - 1, inp, None)
            done = [(S - 1, last)]
            g = self._local(S - 1, last, "grad_in")
            for k in range(S - 2, -1, -1):            # backward: the input gradient comes back stage by stage
                f = stage(k, x if k == 0 else acts[k - 1], g)
                done.append((k, f))
                if k:
                    g = self._local(k, f, "grad_in")
            finite = [self.client.submit(_pick, f, "finite", workers=[self.workers[k]]).result() for k, f in done]
            if self.on_device:
                self.state = [self.client.submit(dev_relay_commit, self.run_id, self.state[k], all(finite),
                                                 workers=[self.workers[k]], pure=False) for k in range(S)]
                self.params = list(self.state)
                self.skipped += not all(finite)
            elif all(finite):          # one stage's non-finite gradients skip every stage's update, as on one device
                for k, f in done:
                    self.params[k] = self._local(k, f, "params")
                    self.state[k] = self._local(k, f, "state")
            else:
                self.skipped += 1
            loss = float(self.client.submit(_pick, last, "out", workers=[self.workers[-1]]).result())
            self._peaks(fwd + done)
            yield self._record(loss, s["lr"])

    def weights(self) -> dict[str, np.ndarray]:
        if self.on_device:
            return {k: v for i, ps in enumerate(self.stage_params) for k, v in self.client.submit(
                dev_read, self.run_id, self.state[i], ps, workers=[self.workers[i]], pure=False).result().items()}
        return {k: v for f in self.params for k, v in f.result().items()}


def run_fix(pool, spec, fix, *, memory: int | None = None, steps: int | None = None, data: dict | None = None):
    """The pooled run that carries out a planner Fix marked requires="pool" (shard or relay, over N workers)."""
    p = pool_plan(spec, fix, memory=memory, data=data)
    cls = ShardedRun if p.kind == "shard" else RelayRun
    return cls(pool, spec, count=p.count, memory=memory, steps=steps, data=data)
