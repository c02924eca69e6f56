"""What a plan is: the Plan and Fix records, the breakdown categories, verdicts and the step's own peak.

Why apart from the planner: the supervised and the GAN planner, the whole-run replay and the front-ends all
read these, and none of them needs the other planners.
"""
from __future__ import annotations

from dataclasses import fields
import json
from dataclasses import asdict, dataclass, field

from .. import determinism
from ..errors import PlanError, PlanRefused
from ..dtypes import nbytes as nb
from ..backends.device import device as pick, Device


GREEN_HEADROOM = 0.80         # green: the peak uses at most 80% of capacity


CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "workspace", "master_weights", "data",
              "buffers", "evaluation", "readback")


@dataclass
class Fix:
    """One way out of a red or tight plan: its re-planned peak and verdict, and what it changes.

    changes: spec key paths -> new values ({"recipe.precision": "mixed-f16"}), what the notebook front-end
    applies to the spec text (spec.edit.apply_changes); empty when no spec key expresses it yet.
    requires: what must exist first ("pool": a pool of devices), None when the spec change is enough."""
    kind: str
    description: str
    peak_bytes: int | None
    verdict: str | None
    settings: dict = field(default_factory=dict)
    changes: dict = field(default_factory=dict)
    requires: str | None = None


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
    evaluation: dict | None = None               # what the run evaluates, as planned: {"parts", "in_loop"}
    spec_obj: object = field(default=None, repr=False, compare=False)
    implementation: str = ""                     # the WebGPU implementation and version ("dawn 0.32.0.4"); "" on numpy
    device_note: str = ""                        # what the device is, plainly (the CPU path is said here)

    @property
    def fits(self) -> bool:
        return self.verdict != "red"

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("step", "spec_obj", "steps")}
        d["fixes"] = [asdict(f) for f in self.fixes]
        return json.loads(json.dumps(d, default=str))

    def table(self) -> str:
        mib = lambda n: f"{n / 2**20:10.2f} MiB"  # noqa: E731
        via = f" via {self.implementation}" if self.implementation else ""
        lines = [f"plan for {self.spec!r} on {self.backend}:{self.device}{via} ({self.adapter_type}), batch {self.batch_size},"
                 f" tier {self.tier}",
                 f"  verdict   {self.verdict.upper()}",
                 *([f"  device    {self.device_note}"] if self.device_note else []),
                 f"  peak      {mib(self.peak_bytes)}   of capacity {mib(self.capacity_bytes)} ({self.capacity_source})"
                 f"  = {100 * self.peak_bytes / max(self.capacity_bytes, 1):.1f}%",
                 "  breakdown"]
        for k in CATEGORIES:
            lines.append(f"    {k:16} {mib(self.breakdown.get(k, 0))}")
        for k, v in self.extras.items():
            if k == "host temporaries bound":
                lines.append(f"    host bound       the host holds at most {v} B more (numpy temporaries inside "
                             "kernels, freed before they return; not in the peak)")
            elif isinstance(v, int):
                lines.append(f"      incl. {k:18} {v} B")
        for n in self.notes:
            lines.append(f"  note: {n}")
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        for f in self.fixes:
            peak = f" -> peak {mib(f.peak_bytes)} ({f.verdict})" if f.peak_bytes is not None else ""
            change = ", ".join(f"{k} = {json.dumps(v)}" for k, v in f.changes.items())
            lines.append(f"  fix [{f.kind}] {f.description}{peak}" + (f"\n        change: {change}" if change else "")
                         + (f"\n        needs: a {f.requires} (not in the spec yet)" if f.requires else ""))
        return "\n".join(lines)

    def refusal(self) -> PlanRefused:
        """The red verdict as an error in the product's one diagnostic format."""
        fit = [f for f in self.fixes if f.verdict != "red"] + [f for f in self.fixes if f.verdict == "red"]
        hint = "; ".join(f.description for f in fit[:3]) or "use a device with more memory"
        return PlanRefused(f"the plan needs {self.peak_bytes} bytes but {self.device} has {self.capacity_bytes} "
                         f"({self.capacity_source}); refused before any compute", where=f"plan for {self.spec!r}",
                         hint=hint, peak_bytes=self.peak_bytes, capacity_bytes=self.capacity_bytes)


LEAF_CATEGORY = {"parameter": "parameters", "optimizer_state": "optimizer_state", "data": "data",
                 "master_weights": "master_weights", "buffer": "buffers"}


def step_parts(step, impl) -> dict:
    """One step Program's allocations by the backend's own size rules: leaf bytes by role, the arena (and
    what lives in it at its worst step, by planner role), persistent buffers and the uniform block."""
    leaf = {"parameter": 0, "optimizer_state": 0, "data": 0, "scalar": 0}
    for lf in step.leaves:
        leaf[lf.role] = leaf.get(lf.role, 0) + impl.alloc_bytes(nb(lf.node.shape, lf.node.dtype))
    prog = step.program
    persistent = sum(impl.alloc_bytes(prog.values[p].nbytes) for p in prog.persistent)
    uniform, scratch = None, {}
    if hasattr(impl, "dry_run"):
        uniform, scratch = impl.dry_run(prog, [_StandIn(lf.node) for lf in step.leaves])
    arena = sum(impl.arena_bytes(part) for part in prog.arena.parts())     # two buffers for a split arena
    by_role = {"activations": 0, "gradients": 0, "workspace": 0}
    worst = prog.arena.live_peak_step
    if worst is not None:
        for v, (s, e) in prog.arena.lifetimes.items():
            if s <= worst <= e:
                by_role[step.roles.get(v, "workspace")] += prog.arena.sizes[v]
    return {"leaf": leaf, "persistent": persistent, "uniform": uniform or 0, "has_uniform": uniform is not None,
            "scratch": scratch, "arena": arena, "arena_roles": by_role,
            "inputs": leaf["data"] + leaf["scalar"] + persistent}


def step_peak(step, impl) -> tuple[int, dict, dict]:
    """(peak bytes, breakdown, extras) of one training step Program on a backend (sizes by its own rules)."""
    parts = step_parts(step, impl)
    bd = {k: 0 for k in CATEGORIES}
    for role, size in parts["leaf"].items():
        bd[LEAF_CATEGORY.get(role, "workspace")] += size
    for k, v in parts["arena_roles"].items():      # the arena at its worst step, split by what lives there
        bd[k] += v
    bd["workspace"] += parts["arena"] - sum(parts["arena_roles"].values())     # placement slack of the arena
    bd["workspace"] += parts["persistent"] + parts["uniform"] + sum(parts["scratch"].values())
    extras = {"uniform_params": parts["uniform"]} if parts["has_uniform"] else {}
    extras.update({f"scratch {k}": v for k, v in parts["scratch"].items()})
    return sum(bd.values()), bd, extras


class _StandIn:
    """A storage-shaped stand-in for a leaf that has no data yet (each in its own buffer at offset 0)."""

    def __init__(self, node):
        self.buffer = object()
        self.offset = 0
        self.shape = tuple(node.shape)
        self.dtype = node.dtype
        self.nbytes = nb(node.shape, node.dtype)


def _context(spec, device, memory, batch_size, tier):
    """(device, capacity bytes, capacity source, batch size, tier) of a plan request."""
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


def device_note(dev) -> str:
    """The plan's device line: what runs the step, said plainly. The CPU path is slow, but that is not a
    question of fit, so it is said here and never turns the verdict yellow."""
    if dev.backend == "reference":
        return "the CPU (numpy reference path), not a GPU: correct but slow"
    if not dev.is_gpu:
        return f"{dev.adapter_type} adapter {dev.name!r}, not a GPU: correct but slow"
    return f"{dev.adapter_type} GPU {dev.name!r}"


def _device_warnings(dev, t: str, programs) -> list[str]:
    """What the user should know about this run's numbers and kernels (none of it changes the verdict)."""
    warnings = []
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
    """(memory verdict, overall verdict), the same: the verdict answers "does it fit" and nothing else (a slow
    device is the device line's to say); a yellow one says why first among the warnings."""
    verdict = _verdict(peak, capacity)
    if verdict == "yellow":
        warnings.insert(0, f"little headroom: the peak is {100 * peak / capacity:.0f}% of capacity")
    return verdict, verdict


def _verdict(peak: int, capacity: int) -> str:
    if peak > capacity:
        return "red"
    return "green" if peak <= GREEN_HEADROOM * capacity else "yellow"


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
