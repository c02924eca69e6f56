"""The memory plan: green / yellow / red from the training step's own allocation plan, with fixes.

Why not an estimate: the peak is the sum of what the executor will allocate for one step (bound
leaves, the liveness-planned arena, outputs, the uniform parameter block), read off the compiled
step Program; every fix is a re-plan of a changed Program, never a rule of thumb.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from .. import determinism
from ..errors import ScellisError

GREEN_HEADROOM = 0.80         # green: the peak uses at most 80% of capacity
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "workspace", "master_weights", "data",
              "buffers")


class PlanError(ScellisError):
    code = "plan"


@dataclass
class Fix:
    kind: str
    description: str
    peak_bytes: int | None
    verdict: str | None
    settings: dict = field(default_factory=dict)


@dataclass
class Plan:
    verdict: str
    peak_bytes: int
    capacity_bytes: int
    capacity_source: str
    breakdown: dict
    fixes: list
    warnings: list
    batch_size: int
    device: str
    backend: str
    adapter_type: str
    tier: str
    spec: str
    spec_hash: str
    program_hash: str
    dispatches: int
    extras: dict = field(default_factory=dict)   # named bytes inside the breakdown (uniform block, staging)
    step: object = field(default=None, repr=False, compare=False)
    options: dict = field(default_factory=dict)  # the step options planned (checkpointing, precision, ...)
    notes: list = field(default_factory=list)    # what a chosen setting costs (e.g. checkpointing's recompute)

    @property
    def fits(self) -> bool:
        return self.verdict != "red"

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("step", None)
        return d

    def table(self) -> str:
        mib = lambda n: f"{n / 2**20:10.2f} MiB"  # noqa: E731
        lines = [f"plan for {self.spec!r} on {self.backend}:{self.device} ({self.adapter_type}), batch {self.batch_size},"
                 f" tier {self.tier}",
                 f"  verdict   {self.verdict.upper()}",
                 f"  peak      {mib(self.peak_bytes)}   of capacity {mib(self.capacity_bytes)} ({self.capacity_source})"
                 f"  = {100 * self.peak_bytes / max(self.capacity_bytes, 1):.1f}%",
                 "  breakdown"]
        for k in CATEGORIES:
            lines.append(f"    {k:16} {mib(self.breakdown.get(k, 0))}")
        for k, v in self.extras.items():
            lines.append(f"      incl. {k:18} {v} B")
        for n in self.notes:
            lines.append(f"  note: {n}")
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        for f in self.fixes:
            peak = f" -> peak {mib(f.peak_bytes)} ({f.verdict})" if f.peak_bytes is not None else ""
            lines.append(f"  fix [{f.kind}] {f.description}{peak}")
        return "\n".join(lines)

    def refusal(self) -> PlanError:
        """The red verdict as an error in the product's one diagnostic format."""
        hint = "; ".join(f.description for f in self.fixes[:3]) or "use a device with more memory"
        return PlanError(f"the plan needs {self.peak_bytes} bytes but {self.device} has {self.capacity_bytes} "
                         f"({self.capacity_source}); refused before any compute", where=f"plan for {self.spec!r}",
                         hint=hint, code="plan-red", peak_bytes=self.peak_bytes, capacity_bytes=self.capacity_bytes)


def _spec_of(spec, data=None):
    """A Spec from a Spec, spec text, or a spec file (a str path or a PathLike); `data` binds in-memory parts
    ({"train": (X, y), ...}) to it."""
    import os
    from ..spec import Spec
    if data is not None:
        if isinstance(spec, Spec):
            return spec.with_data(data)
        if isinstance(spec, str) and ("\n" in spec or "=" in spec):
            return Spec.from_text(spec, data=data)
        return Spec.from_file(spec, data=data)
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, os.PathLike):
        return Spec.from_file(spec)
    if isinstance(spec, str):
        if "\n" in spec or "=" in spec:
            return Spec.from_text(spec)
        return Spec.from_file(spec)
    raise PlanError(f"sc.plan needs a Spec, spec text or a spec file path, got {type(spec).__name__}")


# a leaf's role -> its breakdown category (other roles, e.g. per-step scalars, count as workspace)
LEAF_CATEGORY = {"parameter": "parameters", "optimizer_state": "optimizer_state", "data": "data",
                 "master_weights": "master_weights", "buffer": "buffers"}


def step_parts(step, impl) -> dict:
    """One step Program's allocations by the backend's own size rules: leaf bytes by role, the arena (and
    what lives in it at its worst step, by planner role), persistent buffers and the uniform block."""
    from ..dtypes import nbytes as nb
    leaf = {"parameter": 0, "optimizer_state": 0, "data": 0, "scalar": 0}
    for lf in step.leaves:
        leaf[lf.role] = leaf.get(lf.role, 0) + impl.alloc_bytes(nb(lf.node.shape, lf.node.dtype))
    prog = step.program
    persistent = sum(impl.alloc_bytes(prog.values[p].nbytes) for p in prog.persistent)
    uniform = None
    if hasattr(impl, "dry_param_bytes"):
        uniform = impl.dry_param_bytes(prog, [_StandIn(lf.node) for lf in step.leaves])
    arena = impl.arena_bytes(prog.arena.arena_bytes)
    by_role = {"activations": 0, "gradients": 0, "workspace": 0}
    worst = prog.arena.live_peak_step
    if worst is not None:
        for v, (s, e) in prog.arena.lifetimes.items():
            if s <= worst <= e:
                by_role[step.roles.get(v, "workspace")] += prog.arena.sizes[v]
    return {"leaf": leaf, "persistent": persistent, "uniform": uniform or 0, "has_uniform": uniform is not None,
            "arena": arena, "arena_roles": by_role, "inputs": leaf["data"] + leaf["scalar"] + persistent}


def step_peak(step, impl) -> tuple[int, dict, dict]:
    """(peak bytes, breakdown, extras) of one training step Program on a backend (sizes by its own rules)."""
    parts = step_parts(step, impl)
    bd = {k: 0 for k in CATEGORIES}
    for role, size in parts["leaf"].items():
        bd[LEAF_CATEGORY.get(role, "workspace")] += size
    for k, v in parts["arena_roles"].items():      # the arena at its worst step, split by what lives there
        bd[k] += v
    bd["workspace"] += parts["arena"] - sum(parts["arena_roles"].values())     # placement slack of the arena
    bd["workspace"] += parts["persistent"] + parts["uniform"]
    extras = {"uniform_params": parts["uniform"]} if parts["has_uniform"] else {}
    return sum(bd.values()), bd, extras


class _StandIn:
    """A storage-shaped stand-in for a leaf that has no data yet (each in its own buffer at offset 0)."""

    def __init__(self, node):
        from ..dtypes import nbytes as nb
        self.buffer = object()
        self.offset = 0
        self.shape = tuple(node.shape)
        self.dtype = node.dtype
        self.nbytes = nb(node.shape, node.dtype)


def plan(spec, device=None, memory: int | None = None, batch_size: int | None = None, tier: str | None = None,
         fixes: bool = True, options=None, data: dict | None = None) -> Plan:
    """Plan one training step of `spec` on `device`: verdict, peak, breakdown and fixes, before any compute.

    data: in-memory parts ({"train": (X, y), "val": ..., "test": ...}) the spec trains on.

    options: a `StepOptions` (checkpointing, precision, shard, relay); default from the spec's recipe.
    """
    from ..program.training import StepOptions, build_train_step
    spec = _spec_of(spec, data)
    if getattr(spec, "kind", "supervised") == "gan":
        if options is not None:
            raise PlanError("step options (checkpointing, precision, shard, relay) do not apply to a GAN spec",
                            where="sc.plan(options=...)", hint="plan it without options")
        from .adversarial import plan_gan
        return plan_gan(spec, device, memory=memory, batch_size=batch_size, tier=tier, fixes=fixes)
    opts = options if options is not None else StepOptions.from_spec(spec)
    dev, capacity, source, bs, t = _context(spec, device, memory, batch_size, tier)
    impl = dev.impl

    if opts.precision == "mixed-f16" and not _has_f16(dev):
        raise PlanError(f"precision 'mixed-f16' needs f16 compute, which {dev.name} lacks (no 'shader-f16')",
                        where="recipe.precision", hint="use precision = \"fp32\" on this device")

    def at(b: int, o=None):
        o = o or opts
        if o.relay[1] > 1:                  # every stage is its own device: the worst one decides
            worst = None
            for k in range(o.relay[1]):
                st = build_train_step(spec, b, dev.backend, t, options=_replace(o, relay=(k, o.relay[1])))
                peak, bd, ex = step_peak(st, impl)
                if worst is None or peak > worst[1]:
                    worst = (st, peak, bd, ex)
            return worst
        st = build_train_step(spec, b, dev.backend, t, options=o)
        peak, bd, ex = step_peak(st, impl)
        return st, peak, bd, ex

    st, peak, bd, ex = at(bs)
    warnings = _device_warnings(dev, t, [st.program])
    device_warned = bool(warnings)
    mem_verdict, verdict = _verdicts(peak, capacity, warnings)
    out = Plan(verdict, peak, capacity, source, bd, [], warnings, bs, dev.name, dev.backend, dev.adapter_type, t,
               spec.name, spec.hash, st.program.hash, len(st.program.steps), ex, st, opts.describe())
    if opts.checkpointing == "activations" and opts.relay[1] == 1:
        note, cost = _recompute_cost(st, at(bs, _replace(opts, checkpointing="none")))
        out.notes.append(note)
        out.options["recompute"] = cost
    if fixes and mem_verdict != "green":
        out.fixes = _fixes(out, at, capacity, bs, peak, "yellow" if device_warned else "green", opts, dev)
    return out


def _context(spec, device, memory, batch_size, tier):
    """(device, capacity bytes, capacity source, batch size, tier) of a plan request."""
    from ..backends.device import device as pick, Device
    dev = device if isinstance(device, Device) else pick(device or (spec.plan or {}).get("device"))
    mem = memory if memory is not None else (spec.plan or {}).get("memory")
    if mem is not None:
        if not isinstance(mem, int) or mem <= 0:
            raise PlanError(f"memory must be a positive number of bytes, got {mem!r}", where="memory")
        capacity, source = int(mem), "declared"
    else:
        capacity, source = int(dev.memory_bytes), dev.memory_source
    bs = int(batch_size if batch_size is not None else spec.recipe.get("batch_size", 32))
    t, _ = determinism.resolve(tier or spec.recipe.get("determinism"))
    return dev, capacity, source, bs, t


def _device_warnings(dev, t: str, programs) -> list[str]:
    warnings = []
    if dev.backend == "reference":
        warnings.append("reference device (numpy on the CPU): correct but slow; no GPU was chosen")
    elif not dev.is_gpu:
        warnings.append(f"{dev.adapter_type} adapter {dev.name!r}: not a GPU, runs are slow")
    if t == "fast":
        warnings.append("tier 'fast': results are reproducible only within tolerance")
    limit = getattr(dev.impl, "binding_limit", None)
    if limit:
        big = [v for p in programs for v in p.values if v.nbytes > limit]
        if big:
            warnings.append(f"{len(big)} tensors exceed the {limit}-byte storage binding limit and are split "
                            f"(largest {max(v.nbytes for v in big)} bytes)")
    return warnings


def _verdicts(peak: int, capacity: int, warnings: list) -> tuple[str, str]:
    """(memory verdict, overall verdict): green turns yellow when the device itself warns."""
    mem_verdict = verdict = _verdict(peak, capacity)
    if verdict == "green" and warnings:
        verdict = "yellow"
    elif verdict == "yellow":
        warnings.insert(0, f"little headroom: the peak is {100 * peak / capacity:.0f}% of capacity")
    return mem_verdict, verdict


def _recompute_cost(st, plain) -> tuple[str, dict]:
    """What recomputing activations costs and saves, against the same step without it (a re-plan)."""
    from ..program.cost import program_flops
    pst, ppeak = plain[0], plain[1]
    extra = program_flops(st.program) / max(program_flops(pst.program), 1) - 1
    kernels = len(st.program.steps) - len(pst.program.steps)
    segs = st.info.get("recompute", {}).get("segments")
    cost = {"segments": segs, "extra_compute": round(extra, 4), "extra_kernels": kernels, "peak_without": ppeak}
    return (f"activation checkpointing recomputes {segs} segments in the backward: +{100 * extra:.0f}% compute, "
            f"+{kernels} kernels; peak without it {ppeak / 2**20:.2f} MiB"), cost


def _has_f16(dev) -> bool:
    return dev.backend == "reference" or bool(getattr(dev.impl, "has_f16", False))


def _replace(o, **kw):
    from dataclasses import replace
    return replace(o, **kw)


def _verdict(peak: int, capacity: int) -> str:
    if peak > capacity:
        return "red"
    return "green" if peak <= GREEN_HEADROOM * capacity else "yellow"


def _fixes(p: Plan, at, capacity: int, bs: int, peak: int, overall: str, opts, dev) -> list[Fix]:
    """Each fix is a re-plan of the changed step; only fixes that lower the peak are offered.

    overall: the verdict a fix that fits with headroom gets (yellow when the device itself warns).
    """
    from ..dtypes import nbytes as dt_nbytes
    from ..program.cost import program_flops
    fixes: list[Fix] = []
    fixed = 2 * p.breakdown["parameters"] + p.breakdown["optimizer_state"] + p.breakdown["master_weights"]
    # a device-resident dataset stays whatever the batch size (placement = "device")
    held = sum(dt_nbytes(l.node.shape, l.node.dtype) for l in p.step.leaves if l.name in ("data.x", "data.y"))
    lo_peak = at(1)[1]

    def verdict_of(pk: int) -> str:
        v = _verdict(pk, capacity)
        return overall if v == "green" else v

    if _verdict(lo_peak, capacity) == "red":
        what = ("parameters, their gradients and optimizer state" if not held else
                "parameters, their gradients, optimizer state and the device-resident dataset")
        fixes.append(Fix("batch_size", f"no batch size fits: even batch 1 needs {lo_peak} bytes; {what} alone take "
                                       f"about {fixed + held} of the {capacity} available. Pooling devices for data "
                                       "parallelism multiplies throughput but not one device's memory", lo_peak,
                         "red", {"batch_size": None}))
    elif _verdict(lo_peak, capacity) == "green":
        good, good_peak = _largest_green(at, capacity, bs, peak, lo_peak)
        fixes.append(Fix("batch_size", f"batch size {good} (the largest with {100 - int(100 * GREEN_HEADROOM)}% "
                                       "headroom)", good_peak, overall, {"batch_size": good}))
    else:
        fixes.append(Fix("batch_size", "batch size 1 still leaves little headroom", lo_peak, _verdict(lo_peak, capacity),
                         {"batch_size": 1}))
    base_flops = program_flops(p.step.program)
    if opts.checkpointing == "none" and opts.relay[1] == 1:
        best = None
        n_nodes = len(p.step.info.get("stage_nodes", [])) or 1
        for seg in sorted({1, 2, None}, key=lambda v: (v is None, v or 0)):
            if seg is not None and seg >= n_nodes:
                continue
            st, pk, _, _ = at(bs, _replace(opts, checkpointing="activations", segment=seg))
            if best is None or pk < best[1]:
                best = (st, pk, seg)
        if best is not None and best[1] < peak:
            st, pk, seg = best
            extra = program_flops(st.program) / max(base_flops, 1) - 1
            rec = st.info.get("recompute", {})
            fixes.append(Fix("checkpointing", f"activation checkpointing (recompute {rec.get('segments')} segments "
                                              f"in the backward: +{100 * extra:.0f}% compute, "
                                              f"+{len(st.program.steps) - len(p.step.program.steps)} kernels)",
                             pk, verdict_of(pk), {"checkpointing": "activations", "segment": seg,
                                                  "extra_compute": round(extra, 4)}))
    if opts.precision == "fp32" and _has_f16(dev):
        st, pk, _, _ = at(bs, _replace(opts, precision="mixed-f16"))
        if pk < peak:
            fixes.append(Fix("precision", "precision mixed-f16 (f16 weights and compute, f32 master weights and "
                                          "optimizer state, dynamic loss scaling)", pk, verdict_of(pk),
                             {"precision": "mixed-f16"}))
    if opts.peft is None and p.step is not None:
        for method in ("lora", "qlora"):
            cfg = (("method", method), ("rank", 8))
            try:
                st, pk, _, _ = at(bs, _replace(opts, peft=cfg))
            except ScellisError:         # e.g. no linear weight to adapt
                break
            if pk >= peak:
                continue
            info = st.info.get("peft", {})
            what = "LoRA adapters" if method == "lora" else "QLoRA (NF4 base weights) with LoRA adapters"
            fixes.append(Fix("adapters", f"{what}, rank 8: trains {100 * info.get('factor', 0):.2f}% of the "
                                         f"{info.get('total_params', 0):,} parameters", pk, verdict_of(pk),
                             {"peft": {"method": method, "rank": 8}, "factor": info.get("factor")}))
    if opts.data == "device":
        st, pk, _, _ = at(bs, _replace(opts, data="stream"))
        if pk < peak:
            fixes.append(Fix("stream_data", f"stream the data (placement = \"stream\"): upload each batch instead of "
                                            f"keeping all {held} dataset bytes on the device", pk, verdict_of(pk),
                             {"placement": "stream"}))
    prev = peak
    for world in (2, 4, 8):
        if opts.shard[1] != 1:
            break
        pk = _sharded_peak(at, bs, opts, world, p.step)
        if pk >= prev:
            break
        prev = pk
        fixes.append(Fix("shard_optimizer_state", f"shard optimizer state over {world} devices (each keeps and "
                                                  f"updates 1/{world} of it; gradients reduce-scattered, weights "
                                                  "all-gathered)", pk, verdict_of(pk), {"shard": world}))
        if _verdict(pk, capacity) == "green":
            break
    n_stages = len(p.step.info.get("stage_nodes", []))
    prev = peak
    for stages in (2, 4, 8):
        if opts.relay[1] != 1 or stages > n_stages:
            break
        try:
            st, pk, _, _ = at(bs, _replace(opts, relay=(0, stages)))
        except ScellisError:
            break
        if pk >= prev:
            break
        prev = pk
        fixes.append(Fix("layer_relay", f"layer relay over {stages} devices (each holds a contiguous run of layers "
                                        "and passes activations on)", pk, verdict_of(pk), {"relay": stages}))
        if _verdict(pk, capacity) == "green":
            break
    # only what helps: a fix that still does not fit is not offered (the batch-size line explains)
    return [f for f in fixes if f.kind == "batch_size" or f.verdict != "red"]


def _sharded_peak(at, bs: int, opts, world: int, step) -> int:
    """The peak of the rank holding the largest share of parameters (the one that decides)."""
    from .. import dtypes as dt
    from ..program import partition
    sizes = {l.name: dt.nbytes(l.node.shape, "f32") for l in step.leaves if l.role == "parameter"}
    owner = partition.shard_owner(sizes, world)
    rank = partition.heaviest_rank(owner, sizes, world)
    return at(bs, _replace(opts, shard=(rank, world)))[1]


def _largest_green(at, capacity: int, bs: int, peak: int, peak1: int) -> tuple[int, int]:
    """The largest green batch size: the peak is close to affine in the batch, so the slope between batch 1
    and `bs` predicts it; re-planning around the prediction makes the answer exact (a planned peak)."""
    target = int(GREEN_HEADROOM * capacity)
    slope = max((peak - peak1) / max(bs - 1, 1), 1.0)
    lo, hi = 1, max(2, int((target - peak1) / slope) + 2)
    # grow hi until it is not green, then bisect: only O(log) plans near the estimate
    while _verdict(at(hi)[1], capacity) == "green":
        lo, hi = hi, hi + max(1, hi // 8)
    if lo < hi // 2:
        guess = max(1, int(hi * 0.97))
        if guess > lo and _verdict(at(guess)[1], capacity) == "green":
            lo = guess
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _verdict(at(mid)[1], capacity) == "green":
            lo = mid
        else:
            hi = mid
    return lo, at(lo)[1]


def plan_json(p: Plan) -> str:
    return json.dumps(p.to_json(), indent=2, default=str)
