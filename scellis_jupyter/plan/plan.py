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
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "workspace", "master_weights", "data")


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


def _spec_of(spec):
    from ..spec import Spec
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, str):
        if "\n" in spec or "=" in spec:
            return Spec.from_text(spec)
        return Spec.from_file(spec)
    raise PlanError(f"sc.plan needs a Spec, spec text or a spec file path, got {type(spec).__name__}")


def step_peak(step, impl) -> tuple[int, dict, dict]:
    """(peak bytes, breakdown, extras) of one training step Program on a backend (sizes by its own rules)."""
    from ..dtypes import nbytes as nb
    prog = step.program
    bd = {k: 0 for k in CATEGORIES}
    for leaf in step.leaves:
        size = impl.alloc_bytes(nb(leaf.node.shape, leaf.node.dtype))
        role = {"parameter": "parameters", "optimizer_state": "optimizer_state", "data": "data"}.get(leaf.role, "workspace")
        bd[role] += size
    # the arena at its worst step (from the liveness plan), split by what lives there
    arena = prog.arena
    arena_bytes = impl.arena_bytes(arena.arena_bytes)
    worst = arena.live_peak_step
    by_role = {"activations": 0, "gradients": 0, "workspace": 0}
    if worst is not None:
        for v, (s, e) in arena.lifetimes.items():
            if s <= worst <= e:
                by_role[step.roles.get(v, "workspace")] += arena.sizes[v]
    for k, v in by_role.items():
        bd[k] += v
    bd["workspace"] += arena_bytes - sum(by_role.values())      # placement slack of the arena
    extras = {}
    for p in prog.persistent:
        v = prog.values[p]
        bd["workspace"] += impl.alloc_bytes(v.nbytes)
    if hasattr(impl, "dry_param_bytes"):
        roots = [_StandIn(l.node) for l in step.leaves]
        ub = impl.dry_param_bytes(prog, roots)
        extras["uniform_params"] = ub
        bd["workspace"] += ub
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
         fixes: bool = True) -> Plan:
    """Plan one training step of `spec` on `device`: verdict, peak, breakdown and fixes, before any compute."""
    from ..backends.device import device as pick, Device
    from ..program.training import build_train_step
    spec = _spec_of(spec)
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
    impl = dev.impl

    def at(b: int):
        st = build_train_step(spec, b, dev.backend, t)
        peak, bd, ex = step_peak(st, impl)
        return st, peak, bd, ex

    st, peak, bd, ex = at(bs)
    warnings = []
    if dev.backend == "reference":
        warnings.append("reference device (numpy on the CPU): correct but slow; no GPU was chosen")
    elif not dev.is_gpu:
        warnings.append(f"{dev.adapter_type} adapter {dev.name!r}: not a GPU, runs are slow")
    if t == "fast":
        warnings.append("tier 'fast': results are reproducible only within tolerance")
    limit = getattr(impl, "binding_limit", None)
    if limit:
        big = [v for v in st.program.values if v.nbytes > limit]
        if big:
            warnings.append(f"{len(big)} tensors exceed the {limit}-byte storage binding limit and are split "
                            f"(largest {max(v.nbytes for v in big)} bytes)")
    device_warned = bool(warnings)
    mem_verdict = verdict = _verdict(peak, capacity)
    if verdict == "green" and warnings:
        verdict = "yellow"
    elif verdict == "yellow":
        warnings.insert(0, f"little headroom: the peak is {100 * peak / capacity:.0f}% of capacity")
    out = Plan(verdict, peak, capacity, source, bd, [], warnings, bs, dev.name, dev.backend, dev.adapter_type, t,
               spec.name, spec.hash, st.program.hash, len(st.program.steps), ex, st)
    if fixes and mem_verdict != "green":
        out.fixes = _fixes(out, at, capacity, bs, peak, "yellow" if device_warned else "green")
    return out


def _verdict(peak: int, capacity: int) -> str:
    if peak > capacity:
        return "red"
    return "green" if peak <= GREEN_HEADROOM * capacity else "yellow"


def _fixes(p: Plan, at, capacity: int, bs: int, peak: int, overall: str) -> list[Fix]:
    """overall: the verdict a fix that fits with headroom gets (yellow when the device itself warns)."""
    fixes: list[Fix] = []
    fixed = 2 * p.breakdown["parameters"] + p.breakdown["optimizer_state"]     # weights, their gradients, state
    lo_peak = at(1)[1]
    if _verdict(lo_peak, capacity) == "red":
        fixes.append(Fix("batch_size", f"no batch size fits: even batch 1 needs {lo_peak} bytes; parameters, their "
                                       f"gradients and optimizer state alone take about {fixed} of the {capacity} "
                                       "available. Pooling devices for data parallelism multiplies throughput but "
                                       "not one device's memory", lo_peak, "red", {"batch_size": None}))
        return fixes
    if _verdict(lo_peak, capacity) == "green":
        good, good_peak = _largest_green(at, capacity, bs, peak, lo_peak)
        fixes.append(Fix("batch_size", f"batch size {good} (the largest with {100 - int(100 * GREEN_HEADROOM)}% "
                                       "headroom)", good_peak, overall, {"batch_size": good}))
    else:
        fixes.append(Fix("batch_size", "batch size 1 still leaves little headroom", lo_peak, _verdict(lo_peak, capacity),
                         {"batch_size": 1}))
    return fixes


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
