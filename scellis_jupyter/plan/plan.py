"""The memory plan: green / yellow / red from the training step's own allocation plan, with fixes.

Why not an estimate: the peak is the sum of what the executor will allocate for one step (bound
leaves, the liveness-planned arena, outputs, the uniform parameter block), read off the compiled
step Program; every fix is a re-plan of a changed Program, never a rule of thumb.
"""
from __future__ import annotations

import json

from ..errors import PlanError, ScellisError
from ..program.evaluation import eval_programs
from ..spec import Spec
from .adversarial import plan_gan
from .model import (CATEGORIES, GREEN_HEADROOM, LEAF_CATEGORY, Fix, Plan, _context, _device_warnings,  # noqa: F401
                    _largest_green, _StandIn, _verdict, _verdicts, device_note, step_parts, step_peak)
from .whole_run import replay_run


# a leaf's role -> its breakdown category (other roles, e.g. per-step scalars, count as workspace)


def plan(spec, device=None, memory: int | None = None, batch_size: int | None = None, tier: str | None = None,
         fixes: bool = True, options=None, evaluation=None, data: dict | None = None) -> Plan:
    """Plan a training run of `spec` on `device`: verdict, peak, breakdown and fixes, before any compute.

    The peak is the whole run's: the step, its loss readback, the evaluation Programs the run builds
    and the checkpoint readback (plan.whole_run). options: a `StepOptions` (checkpointing, precision,
    shard, relay); default from the spec's recipe. evaluation: what the run evaluates, as
    {"parts": [rows per evaluated part], "in_loop": evaluates between steps}; `False` plans the step
    alone; default from the spec (its metrics and split), at full batches (a Run passes its split's sizes,
    so its partial last batches are planned too). data: in-memory parts ({"train": (X, y), "val": ...,
    "test": ...}) the spec trains on.
    """
    from ..program.training import StepOptions, build_train_step
    spec = Spec.of(spec, data)
    if getattr(spec, "kind", "supervised") == "gan":
        if options is not None:
            raise PlanError("step options (checkpointing, precision, shard, relay) do not apply to a GAN spec",
                            where="sc.plan(options=...)", hint="plan it without options")
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
                st = build_train_step(spec, b, dev.program_backend, t, options=_replace(o, relay=(k, o.relay[1])))
                peak, bd, ex = step_peak(st, impl)
                if worst is None or peak > worst[1]:
                    worst = (st, peak, bd, ex)
            return worst
        st = build_train_step(spec, b, dev.program_backend, t, options=o)
        peak, bd, ex = run_peak(spec, st, impl, dev.backend, t, ev)
        return st, peak, bd, ex

    ev = _evaluation_of(spec, evaluation)
    st, peak, bd, ex = at(bs)
    warnings = _device_warnings(dev, t, [st.program]) + _wire_notes(dev, st)
    mem_verdict, verdict = _verdicts(peak, capacity, warnings)
    out = Plan(verdict, peak, capacity, source, bd, [], warnings, bs, dev.name, dev.backend, dev.adapter_type, t,
               spec.name, spec.hash, st.program.hash, len(st.program.steps), ex, st, opts.describe(),
               evaluation=ev, spec_obj=spec, device_note=device_note(dev), implementation=dev.via)
    if spec.recipe.get("default_metrics"):
        out.notes.append(f"metrics: {', '.join(spec.recipe['metrics'])}, the default for a classification recipe "
                         "(set [recipe] metrics = [...] to choose, [] for none)")
    if opts.checkpointing == "activations" and opts.relay[1] == 1:
        note, cost = _recompute_cost(st, at(bs, _replace(opts, checkpointing="none")))
        out.notes.append(note)
        out.options["recompute"] = cost
    if fixes and mem_verdict != "green":
        def replan(changes: dict) -> int:
            from ..spec import Spec
            from ..spec.edit import apply_changes
            changed = Spec.from_text(apply_changes(spec.text, changes), source=f"{spec.name} with a fix",
                                     base_dir=spec.base_dir)
            return plan(changed, dev, memory=memory, batch_size=batch_size, tier=tier, fixes=False,
                        options=None if options is None else _replace(options, **_options_of(changes)),
                        evaluation=evaluation).peak_bytes
        out.fixes = _fixes(out, at, capacity, bs, peak, "green", opts, dev, spec, replan)
    return out


def _options_of(changes: dict) -> dict:
    """StepOptions fields a spec change sets (for a plan made with explicit options)."""
    from ..program.training import _peft_items
    out = {}
    if "recipe.precision" in changes:
        out["precision"] = changes["recipe.precision"]
    if "recipe.checkpointing" in changes:
        out["checkpointing"] = changes["recipe.checkpointing"]
    if "recipe.peft" in changes:
        out["peft"] = _peft_items(changes["recipe.peft"])
    if "data.placement" in changes:
        out["data"] = changes["data.placement"]
    return out


def _evaluation_of(spec, evaluation):
    """{"parts": [rows] or None (full batches only), "in_loop": bool}, or None when the run evaluates nothing.

    A Run evaluates its val and test parts at the end when it has metrics or a test part, and its val
    part between steps when it has metrics."""
    if evaluation is False:
        return None
    if evaluation is not None:
        return {"parts": list(evaluation.get("parts") or []) or None, "in_loop": bool(evaluation.get("in_loop"))}
    from ..data.split import DEFAULT_FRACTIONS
    fr = dict((spec.data or {}).get("split") or DEFAULT_FRACTIONS)
    metrics = bool(spec.recipe.get("metrics"))
    if not (metrics or fr.get("test", 0) > 0) or not (fr.get("val", 0) > 0 or fr.get("test", 0) > 0):
        return None
    return {"parts": None, "in_loop": metrics and fr.get("val", 0) > 0}


def run_peak(spec, st, impl, backend: str, tier: str, ev) -> tuple[int, dict, dict]:
    """(peak, breakdown, extras) of a whole run of step `st`: the step's own breakdown, plus what
    evaluation ("evaluation") and a readback's staging buffer ("readback") add at the run's worst moment."""
    peak, bd, ex = step_peak(st, impl)
    evals = eval_programs(spec, st, backend, tier, ev) if ev is not None else []
    book = replay_run(st, impl, evals, ev is not None and ev["in_loop"])
    if book.peak < peak:     # the replay counts what the step counts; it cannot be below it
        raise PlanError(f"the run's replay ({book.peak} bytes) is below its step's peak ({peak}): an engine bug",
                        where="plan.whole_run")
    if book.peak > peak:
        staged = book.at_peak.get("readback", 0)
        more = book.peak - peak - staged        # evaluation's inputs, outputs, blocks and arena growth
        bd["readback"] += staged
        if more >= 0:
            bd["evaluation"] += more
        else:                                   # the step's outputs were released by then
            bd["workspace"] += more
        ex["step_peak"] = peak
    if evals:
        ex["evaluation_batches"] = [e.batch_size for e in evals]
    if hasattr(impl, "host_temporaries_bound"):     # the numpy path: what the host may hold beyond the plan
        ex["host temporaries bound"] = max(impl.host_temporaries_bound(p)
                                           for p in [st.program] + [e.program for e in evals])
    return book.peak, bd, ex


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


def _fixes(p: Plan, at, capacity: int, bs: int, peak: int, overall: str, opts, dev, spec, replan) -> list[Fix]:
    """Every fix that lowers the peak, each a re-plan of the changed run (never a rule of thumb), with its
    verdict and the spec change that makes it (`changes`). A fix that helps but does not fit alone is
    offered red; when no single one fits, the smallest combination that does is offered too.

    overall: the verdict a fix that fits with headroom gets (green: the device is not the verdict's question).
    replan(changes): the peak of the spec with `changes` applied to its text, planned for real.
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

    def offer(kind, text, pk, settings, changes=None, requires=None, why_not=None):
        if pk < peak:
            fixes.append(Fix(kind, text, pk, verdict_of(pk), settings, dict(changes or {}), requires))
        else:
            p.notes.append(f"considered {kind} ({text}): re-planned peak {pk} bytes, not below {peak}"
                           + (f"; {why_not}" if why_not else ""))

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
                                       "headroom)", good_peak, overall, {"batch_size": good},
                         {"recipe.batch_size": good}))
    elif bs != 1:                    # a fix equal to the current setting is no fix
        fixes.append(Fix("batch_size", "batch size 1 still leaves little headroom", lo_peak, _verdict(lo_peak, capacity),
                         {"batch_size": 1}, {"recipe.batch_size": 1}))
    else:
        p.notes.append("batch size 1 already: a smaller batch is not possible")
    base_flops = program_flops(p.step.program)
    if opts.checkpointing == "none" and opts.relay[1] == 1:
        # the recipe key recomputes segments of the default size; finer segments are a StepOptions setting
        st, pk, _, _ = at(bs, _replace(opts, checkpointing="activations"))
        finer = []
        n_nodes = len(p.step.info.get("stage_nodes", [])) or 1
        for seg in (1, 2):
            if seg < n_nodes:
                fpk = at(bs, _replace(opts, checkpointing="activations", segment=seg))[1]
                if fpk < pk:
                    finer.append(f"segment {seg}: peak {fpk} bytes via sc.plan(options=StepOptions("
                                 f"checkpointing='activations', segment={seg}))")
        extra = program_flops(st.program) / max(base_flops, 1) - 1
        rec = st.info.get("recompute", {})
        offer("checkpointing", f"activation checkpointing (recompute {rec.get('segments')} segments in the "
                               f"backward: +{100 * extra:.0f}% compute, "
                               f"+{len(st.program.steps) - len(p.step.program.steps)} kernels)"
                               + (f"; {'; '.join(finer)}" if finer else ""),
              pk, {"checkpointing": "activations", "segment": None, "extra_compute": round(extra, 4)},
              {"recipe.checkpointing": "activations"},
              why_not=f"activations take {p.breakdown['activations']} bytes at the peak")
    if opts.precision == "fp32" and _has_f16(dev):
        try:
            st, pk, _, _ = at(bs, _replace(opts, precision="mixed-f16"))
        except ScellisError as e:        # a combination the step builder cannot make yet: no fix, said why
            p.notes.append(f"considered precision mixed-f16: it cannot be planned with this recipe "
                           f"({e.diagnostic.code} at {e.diagnostic.where}: {e.diagnostic.message})")
            pk = None
        if pk is not None:
                offer("precision", "precision mixed-f16 (f16 weights and compute, f32 master weights and optimizer "
                               "state, dynamic loss scaling)", pk, {"precision": "mixed-f16"},
                  {"recipe.precision": "mixed-f16"},
                  why_not="the f32 master weights and f32 optimizer state stay, and f16 weights come on top")
    opt_cfg = dict(spec.recipe.get("optimizer") or {"name": "adamw"})
    for name, what in (("int8adam", "Int8Adam (Adam with 8-bit block-quantized moments)"),
                       ("adafactor", "Adafactor (factored second moment, no first moment)")):
        if str(opt_cfg.get("name", "")).lower() == name:
            continue
        new = {"name": name}
        if "lr" in opt_cfg:
            new["lr"] = opt_cfg["lr"]
        try:
            pk = replan({"recipe.optimizer": new})
        except ScellisError as e:
            p.notes.append(f"considered optimizer {name}: {e.diagnostic.message}")
            continue
        offer("optimizer", f"optimizer {what}: smaller state than {opt_cfg.get('name')}", pk, {"optimizer": new},
              {"recipe.optimizer": new})
    if opts.peft is None and p.step is not None:
        for method in ("lora", "qlora"):
            cfg = (("method", method), ("rank", 8))
            try:
                st, pk, _, _ = at(bs, _replace(opts, peft=cfg))
            except ScellisError:         # e.g. no linear weight to adapt
                break
            info = st.info.get("peft", {})
            what = "LoRA adapters" if method == "lora" else "QLoRA (NF4 base weights) with LoRA adapters"
            offer("adapters", f"{what}, rank 8, when fine-tuning a pretrained model ([model.pretrained]; from "
                              f"scratch it trains only the adapters): trains {100 * info.get('factor', 0):.2f}% of "
                              f"the {info.get('total_params', 0):,} parameters", pk,
                  {"peft": {"method": method, "rank": 8}, "factor": info.get("factor")},
                  {"recipe.peft": {"method": method, "rank": 8}})
    if opts.data == "device":
        st, pk, _, _ = at(bs, _replace(opts, data="stream"))
        offer("stream_data", f"stream the data (placement = \"stream\"): upload each batch instead of keeping all "
                             f"{held} dataset bytes on the device", pk, {"placement": "stream"},
              {"data.placement": "stream"})
    prev = peak
    for world in (2, 4, 8, 16):
        if opts.shard[1] != 1:
            break
        pk = _sharded_peak(at, bs, opts, world, p.step)
        if pk >= prev:
            break
        prev = pk
        fixes.append(Fix("shard_optimizer_state", f"shard optimizer state over a pool of {world} devices (each "
                                                  f"keeps and updates 1/{world} of it; gradients reduce-scattered, "
                                                  "weights all-gathered): the peak of the device holding the "
                                                  f"largest share. Needs a device pool: run_fix(Pool(workers={world}), "
                                                  "spec, fix) in scellis_jupyter.pool.sharding",
                         pk, verdict_of(pk), {"shard": world}, {}, "pool"))
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
        fixes.append(Fix("layer_relay", f"layer relay over a pool of {stages} devices (each holds a contiguous run "
                                        "of layers and passes activations on). Needs a device pool: "
                                        f"run_fix(Pool(workers={stages}), spec, fix) in scellis_jupyter.pool.sharding", pk, verdict_of(pk), {"relay": stages}, {}, "pool"))
        if _verdict(pk, capacity) == "green":
            break
    if not any(f.verdict != "red" and f.requires is None for f in fixes):
        combo = _combination([f for f in fixes if f.changes and f.requires is None and f.kind != "batch_size"],
                             replan, capacity)
        if combo is not None:
            parts, pk = combo
            merged = {k: v for f in parts for k, v in f.changes.items()}
            fixes.append(Fix("combined", " + ".join(f.description.split(" (")[0].split(":")[0] for f in parts)
                             + ", together", pk, verdict_of(pk), {"kinds": [f.kind for f in parts]}, merged))
    return fixes


def _combination(helpers: list, replan, capacity: int):
    """The fewest helping fixes whose changes together fit (each candidate re-planned), best savers first."""
    from itertools import combinations
    helpers = sorted(helpers, key=lambda f: f.peak_bytes)
    seen_kinds = []
    for n in (2, 3):
        for group in combinations(helpers, n):
            kinds = [f.kind for f in group]
            if len(set(kinds)) < n or sorted(kinds) in seen_kinds:    # one fix of each kind
                continue
            merged = {k: v for f in group for k, v in f.changes.items()}
            try:
                pk = replan(merged)
            except ScellisError:
                continue
            if _verdict(pk, capacity) != "red":
                return list(group), pk
    return None


def _sharded_peak(at, bs: int, opts, world: int, step) -> int:
    """The peak of the rank holding the largest share of parameters (the one that decides)."""
    from .. import dtypes as dt
    from ..program import partition
    sizes = {l.name: dt.nbytes(l.node.shape, "f32") for l in step.leaves if l.role == "parameter"}
    owner = partition.shard_owner(sizes, world)
    rank = partition.heaviest_rank(owner, sizes, world)
    return at(bs, _replace(opts, shard=(rank, world)))[1]


def plan_json(p: Plan) -> str:
    return json.dumps(p.to_json(), indent=2, default=str)


def wire_bytes(st) -> int:
    """Bytes a training step sends to its device beside the recorded commands: its batch (x, y or row ids)."""
    from .. import dtypes as dt
    return sum(dt.nbytes(tuple(leaf.node.shape), leaf.node.dtype) for leaf in st.leaves
               if leaf.name in ("x", "y", "batch_rows"))


def _wire_notes(dev, st) -> list[str]:
    """On the browser device: what crosses the wire each step, and that the capacity is a budget."""
    if getattr(dev, "implementation", "") != "browser":
        return []
    return [f"the browser device: each step sends {wire_bytes(st)} bytes (its batch; its row ids under [data] "
            "placement = \"device\", which uploads the dataset once) to the page, in one message with its commands; "
            "WebGPU reports no free memory, so the capacity is a declared budget"]

