"""The memory plan of adversarial (GAN) training: both step Programs and what stays resident between them.

Why this shape: a GAN run keeps both networks' weights and both optimizers' state on the device the
whole time and runs the discriminator and generator steps one after the other on one arena, sized once
for the larger step. So the peak the executor reaches is exact, not estimated:

    resident (both networks' weights and optimizer state)
  + the larger step's arena (its liveness plan)
  + the larger step's per-step inputs (real batch, scalars, Philox positions) and persistent buffers
  + every step Program's uniform parameter block (wgpu keeps one per Program)

The breakdown splits that sum into the usual categories, and `networks` says per network what it keeps
and what its step alone would need. A red plan is refused by the loop before any compute.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

import blake3

from ..dtypes import nbytes as nb
from .model import (CATEGORIES, GREEN_HEADROOM, Fix, Plan, _context, _device_warnings, _largest_green, _verdict,
                    _verdicts, device_note, step_parts, step_peak)
from ..program.adversarial import build_gan_steps
from ..program.liveness import arena_slots


@dataclass
class GANPlan(Plan):
    networks: dict = field(default_factory=dict)     # network -> params/state bytes, its step alone, dispatches
    deciding: dict = field(default_factory=dict)     # which step sets the arena and which the per-step inputs
    steps: dict = field(default=None, repr=False, compare=False)   # network -> TrainStep (not serialized)

    def to_json(self) -> dict:
        out = {}
        for f in fields(self):
            if f.name in ("step", "steps", "spec_obj"):
                continue
            v = getattr(self, f.name)
            out[f.name] = [asdict(x) for x in v] if f.name == "fixes" else v
        return out

    def table(self) -> str:
        lines = super().table().splitlines()
        mib = lambda n: f"{n / 2**20:10.2f} MiB"  # noqa: E731
        extra = ["  networks (kept on the device for the whole run; each step trains one, the other is frozen)"]
        for net, d in self.networks.items():
            extra.append(f"    {net:14} weights {mib(d['parameter_bytes'])}  optimizer state {mib(d['optimizer_bytes'])}"
                         f"  its step alone {mib(d['step_peak_bytes'])}, {d['dispatches']} kernels")
        extra.append(f"  the arena is sized by the {self.deciding.get('arena')} step; per-step inputs by the "
                     f"{self.deciding.get('inputs')} step")
        at = 4 + len(CATEGORIES) + len(self.extras)      # after the breakdown and its "incl." lines
        return "\n".join(lines[:at] + extra + lines[at:])


def gan_peak(steps: dict, impl) -> tuple[int, dict, dict, dict, dict]:
    """(peak, breakdown, extras, per-network summary, deciding steps) of a GAN's two step Programs."""
    parts = {net: step_parts(st, impl) for net, st in steps.items()}
    d = parts["discriminator"]
    params = d["leaf"]["parameter"]              # the discriminator step binds both networks' weights
    state = {net: parts[net]["leaf"]["optimizer_state"] for net in parts}
    arena_net = max(parts, key=lambda n: parts[n]["arena"])
    input_net = max(parts, key=lambda n: parts[n]["inputs"])
    a, i = parts[arena_net], parts[input_net]
    uniform = sum(p["uniform"] for p in parts.values())
    bd = {k: 0 for k in CATEGORIES}
    bd["parameters"] = params
    bd["optimizer_state"] = sum(state.values())
    for role, v in a["arena_roles"].items():
        bd[role] += v
    arena = sum(impl.arena_bytes(x) for x in arena_slots([st.program.arena for st in steps.values()]) if x)
    bd["workspace"] += arena - sum(a["arena_roles"].values())     # placement slack of the arena (its buffers)
    bd["data"] = i["leaf"]["data"]
    bd["workspace"] += i["leaf"]["scalar"] + i["persistent"] + uniform
    scratch: dict = {}                           # launchers' scratch buffers: one per name, the larger need
    for p in parts.values():
        for k, v in p["scratch"].items():
            scratch[k] = max(scratch.get(k, 0), v)
    bd["workspace"] += sum(scratch.values())
    extras = {"uniform_params": uniform} if uniform else {}
    nets = {}
    for net, st in steps.items():
        own = sum(impl.alloc_bytes(nb(lf.node.shape, lf.node.dtype)) for lf in st.leaves
                  if lf.role == "parameter" and lf.name in set(st.param_names))
        nets[net] = {"parameter_bytes": own, "optimizer_bytes": state[net],
                     "step_peak_bytes": step_peak(st, impl)[0], "dispatches": len(st.program.steps),
                     "program_hash": st.program.hash, "arena_bytes": parts[net]["arena"]}
    return sum(bd.values()), bd, extras, nets, {"arena": arena_net, "inputs": input_net}


def plan_gan(spec, device=None, memory: int | None = None, batch_size: int | None = None, tier: str | None = None,
             fixes: bool = True) -> GANPlan:
    """Plan both step Programs of a GAN spec on `device`: verdict, exact peak, breakdown, batch-size fix."""
    dev, capacity, source, bs, t = _context(spec, device, memory, batch_size, tier)
    impl = dev.impl

    def at(b: int):
        steps = build_gan_steps(spec, b, dev.backend, t)
        return (steps,) + gan_peak(steps, impl)

    steps, peak, bd, ex, nets, deciding = at(bs)
    warnings = _device_warnings(dev, t, [s.program for s in steps.values()])
    mem_verdict, verdict = _verdicts(peak, capacity, warnings)
    h = blake3.blake3(json.dumps({k: s.program.hash for k, s in steps.items()}, sort_keys=True).encode()).hexdigest()
    out = GANPlan(verdict, peak, capacity, source, bd, [], warnings, bs, dev.name, dev.backend, dev.adapter_type, t,
                  spec.name, spec.hash, h, sum(len(s.program.steps) for s in steps.values()), ex, None,
                  {"kind": "gan", "loss": spec.recipe.get("loss"), "noise": spec.recipe.get("noise")},
                  networks=nets, deciding=deciding, steps=steps)
    out.device_note = device_note(dev)
    if fixes and mem_verdict != "green":
        out.fixes = _batch_fix(at, capacity, bs, peak, "green", nets)
    return out


def _batch_fix(at, capacity: int, bs: int, peak: int, overall: str, nets: dict) -> list[Fix]:
    lo_peak = at(1)[1]
    if _verdict(lo_peak, capacity) == "red":
        fixed = sum(2 * n["parameter_bytes"] + n["optimizer_bytes"] for n in nets.values())
        return [Fix("batch_size", f"no batch size fits: even batch 1 needs {lo_peak} bytes; both networks' weights, "
                                  f"their gradients and optimizer state alone take about {fixed} of the {capacity} "
                                  "available", lo_peak, "red", {"batch_size": None})]
    if _verdict(lo_peak, capacity) == "green":
        good, good_peak = _largest_green(at, capacity, bs, peak, lo_peak)
        return [Fix("batch_size", f"batch size {good} (the largest with {100 - int(100 * GREEN_HEADROOM)}% "
                                  "headroom)", good_peak, overall, {"batch_size": good})]
    return [Fix("batch_size", "batch size 1 still leaves little headroom", lo_peak, _verdict(lo_peak, capacity),
                {"batch_size": 1})]
