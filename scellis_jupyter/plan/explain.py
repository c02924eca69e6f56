"""The stage explorer's data: one training step of a spec through every stage, each linked to the next.

    explain(spec, device=None, batch_size=None) -> dict
        spec     the text, name and hash
        graph    nodes (op, output shape, parameters) and edges (spec.edit.graph_info)
        program  the step's schedule after fusion: one row per scheduled value (op, layer, phase forward /
                 backward / update, shape, the graph node it was built for, its launches, or the position of
                 the batch dispatch it runs in)
        launches every dispatch the device's launchers make for the step, in order, each with its kernel, the
                 schedule positions it runs for (first..step: a multi-tensor batch dispatches once at its
                 last member) and its bindings (which buffer, byte range, and the value or leaf there)
        kernels  one entry per distinct pipeline: its key and the WGSL text the device's compiler gets
        plan     the arena: each value's offset, size and lifetime over the schedule, the live peak and its
                 step, the arena's bytes, the whole run's peak and verdict

Why here: the plan stage may read the backends (the arena's sizes are the backend's), and the WGSL comes
from the same launchers the executor runs (WgpuBackend.launches: the launchers run dry, so no GPU call), so
what the explorer shows is what training compiles, not a description of it. Without a WebGPU adapter the
Program and Plan are the reference backend's, and `kernels` is empty (a note says why).
"""
from __future__ import annotations

from ..errors import PlanError
from ..spec import Spec
from ..spec.edit import graph_info
from .model import _StandIn
from .plan import plan as make_plan

UPDATE_SCOPES = ("optimizer", "guard", "clip")


def phase_of(scope: str) -> str:
    """forward, backward or update: the part of the training step a scheduled value belongs to."""
    head = scope.split("/")[0].split(".")[0]
    if head in UPDATE_SCOPES:
        return "update"
    return "backward" if scope.endswith("/bwd") else "forward"


def node_of(scope: str, ids: list[str]) -> str | None:
    """The graph node a scope was built in: the longest node id that is the scope's layer or a prefix of it;
    "loss" for the loss and its gradient, "optimizer" for the update (with its finite-gradient guard)."""
    layer = scope[:-4] if scope.endswith("/bwd") else scope
    best = None
    for i in ids:
        if (layer == i or layer.startswith(i + ".") or layer.startswith(i + "/")) and (best is None or len(i) > len(best)):
            best = i
    if best is None:
        head = layer.split("/")[0].split(".")[0]
        best = "optimizer" if head in UPDATE_SCOPES else "loss" if head == "loss" else None
    return best


def _device(device):
    """The device whose kernels are shown: the one asked for; else the default device when it runs WGSL, else a
    WebGPU adapter where there is one (the WGSL is the point; taken without announcing it as the device training
    runs on), else the default device, with a note."""
    from ..backends.device import device as get, devices
    if device is not None:
        return get(device), None
    d = get()
    if hasattr(d.impl, "launches"):
        return d, None
    adapters = devices()[:-1]                # the last is the numpy reference
    if adapters:                             # no GPU among them (a GPU would be the default): the first
        a = adapters[0]
        return a, (f"training here runs on {d.backend}:{d.name} (the default device); shown: the same step on "
                   f"{a.backend}:{a.name}, with the WGSL its compiler gets")
    return d, "no WebGPU adapter here: the step is the reference backend's, without WGSL"


def explain(spec, *, device=None, batch_size: int | None = None, data: dict | None = None) -> dict:
    """Every stage of `spec`'s training step on `device` (see the module's docstring)."""
    spec = Spec.of(spec, data)
    if getattr(spec, "kind", "supervised") == "gan":
        raise PlanError("the stage explorer shows a supervised training step; a GAN spec has two",
                        where=f"explain {spec.name}", hint="sc.plan(spec) shows both steps' memory")
    dev, note = _device(device)
    p = make_plan(spec, dev, batch_size=batch_size, fixes=False)
    st = p.step
    prog = st.program
    info = graph_info(spec)
    ids = [n["id"] for n in info.get("nodes", [])]
    leaf_names = {v: lf.name for v, lf in zip(prog.leaves, st.leaves)}
    leaf_roles = {v: lf.role for v, lf in zip(prog.leaves, st.leaves)}

    launches, kernels = [], []
    impl = dev.impl
    if hasattr(impl, "launches"):
        launches = impl.launches(prog, [_StandIn(lf.node) for lf in st.leaves])
    elif note is None:
        note = f"{dev.backend} runs numpy, not WGSL: no kernels to show (device=\"wgpu\" shows them)"
    key_index: dict[str, int] = {}
    for ln in launches:
        k = ln.pop("key")
        if k not in key_index:
            key_index[k] = len(kernels)
            kernels.append({"key": k, "name": ln["kernel"], "wgsl": ln["wgsl"], "launches": 0})
        ln.pop("wgsl")
        ln["k"] = key_index[k]
        kernels[key_index[k]]["launches"] += 1

    arena = prog.arena
    step_of = {v: pos for pos, v in enumerate(prog.steps)}
    persistent = list(prog.persistent)

    def lies_at(b: dict, first: int, pos: int) -> dict:
        """What a binding of a launch for schedule positions `first`..`pos` holds: a value (arena or output) or a
        leaf."""
        kind, _, idx = b["buffer"].partition(":")
        if kind == "leaf":
            v = prog.leaves[int(idx)]
            return {"leaf": leaf_names.get(v), "role": leaf_roles.get(v)}
        if kind == "persistent":
            return {"value": persistent[int(idx)]}
        if kind in ("arena", "arena2"):
            off = b["offset"] + (arena.split if kind == "arena2" else 0)
            for v, o in arena.offsets.items():
                s, e = arena.lifetimes.get(v, (0, -1))
                if o <= off < o + arena.sizes.get(v, 0) and s <= pos and first <= e:
                    return {"value": v}
        return {}

    by_step: dict[int, list[int]] = {}
    for i, ln in enumerate(launches):
        by_step.setdefault(ln["step"], []).append(i)
        # a multi-tensor batch (program/batching.py) dispatches at its last member, for members first..last
        batch = prog.values[prog.steps[ln["step"]]].attrs.get("batch")
        ln["first"] = ln["step"] - batch[0] if batch and batch[0] == batch[1] - 1 else ln["step"]
        for b in ln["bindings"]:
            b.update(lies_at(b, ln["first"], ln["step"]))

    rows = []
    for pos, v in enumerate(prog.steps):
        val = prog.values[v]
        rows.append({"pos": pos, "value": v, "op": val.op, "scope": val.scope, "phase": phase_of(val.scope),
                     "node": node_of(val.scope, ids), "shape": _shape(val.shape), "dtype": _dtype(val.dtype),
                     "nbytes": int(val.nbytes), "inputs": [int(i) for i in val.inputs],
                     "role": st.roles.get(v, "workspace"), "launches": by_step.get(pos, []), "batched_into": None})
    for ln in launches:                  # a batch's earlier members run in its last member's dispatch
        for q in range(ln["first"], ln["step"]):
            rows[q]["batched_into"] = ln["step"]

    values = []
    for v, off in sorted(arena.offsets.items(), key=lambda kv: (kv[1], kv[0])):
        s, e = arena.lifetimes.get(v, (None, None))
        val = prog.values[v]
        values.append({"value": v, "offset": int(off), "size": int(arena.sizes.get(v, 0)), "start": s, "end": e,
                       "op": val.op, "scope": val.scope, "role": st.roles.get(v, "workspace"),
                       "made_at": step_of.get(v)})
    leaves = [{"value": int(v), "name": lf.name, "role": lf.role, "shape": _shape(lf.node.shape),
               "dtype": _dtype(lf.node.dtype)} for v, lf in zip(prog.leaves, st.leaves)]
    return {
        "spec": {"name": spec.name, "hash": spec.hash, "text": spec.text or ""},
        "device": {"backend": dev.backend, "name": dev.name, "via": getattr(dev, "via", None), "note": note},
        "graph": info,
        "program": {"hash": prog.hash, "backend": prog.backend, "tier": prog.tier, "batch_size": st.batch_size,
                    "steps": rows, "leaves": leaves, "outputs": list(st.outputs)},
        "launches": launches,
        "kernels": kernels,
        "plan": {"verdict": p.verdict, "peak_bytes": int(p.peak_bytes), "capacity_bytes": int(p.capacity_bytes or 0),
                 "breakdown": {k: int(x) for k, x in p.breakdown.items()}, "arena_bytes": int(arena.arena_bytes),
                 "split": int(arena.split), "live_peak_bytes": int(arena.live_peak_bytes),
                 "live_peak_step": arena.live_peak_step, "values": values},
    }


def _shape(shape) -> list:
    if isinstance(shape, tuple) and shape and isinstance(shape[0], tuple):       # a multi-output value
        return [list(s) for s in shape]
    return [int(d) for d in shape]


def _dtype(dtype) -> str:
    return ",".join(str(d) for d in dtype) if isinstance(dtype, tuple) else str(dtype)


__all__ = ["explain", "phase_of", "node_of"]
