"""The evaluation Program: the model in eval mode on the weights the training step trains.

Why here and not in the run: the planner plans a run's evaluation beside its step (its arena, inputs,
outputs and readback are part of the run's peak), so both the run and the plan build it from the step
with this one function and get the very same Program.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..graph import functional as F
from .schedule import Program, compile_program
from .training import TrainStep, forward_adapted, loss_node


@dataclass
class EvalProgram:
    program: Program
    order: list[str]          # leaf names in the Program's leaf order: "x", "y", or a step leaf's name
    outputs: list[str]        # "pred", then "loss" when built with the loss
    batch_size: int


def build_eval_program(spec, step: TrainStep, batch_size: int, backend: str, tier: str,
                       with_loss: bool = True, adaptation=None) -> EvalProgram:
    """The model's output (in f32) for a batch of `batch_size`, and the mean eval loss when `with_loss`.

    Weights go through the regularizers' eval transforms (spectral norm with its stored u, v, no power
    iteration) and the adapters (`adaptation`, default: the step options'), exactly as the step uses them.
    """
    inp, target = spec.input, step.info.get("target")
    b = int(batch_size)
    mixed = step.options.precision == "mixed-f16"
    adapt = adaptation if adaptation is not None else step.options.adaptation(spec.graph)
    x = F.placeholder((b,) + tuple(inp["shape"]), inp["dtype"], "x")
    y = (F.placeholder((b,) + tuple(target.shape), target.dtype, "y")
         if with_loss and target is not None and target.kind != "none" else None)
    params = {l.name: F.placeholder(l.node.shape, l.node.dtype, l.name) for l in step.leaves
              if l.role in ("parameter", "buffer")}
    buffers = {l.name for l in step.leaves if l.role == "buffer"}
    weights = {k: v for k, v in params.items() if k not in buffers}
    reg = step.info.get("regularization")
    for pname, fn in (reg.transforms.items() if reg is not None else ()):
        if pname in weights:
            mine = {bd.slot: params[bd.leaf] for bd in reg.buffers if bd.param == pname}
            weights[pname] = fn(weights[pname], mine, False)[0]
    xin = F.cast(x, "f16") if mixed and x.dtype == "f32" else x
    pred = forward_adapted(spec.graph, xin, weights, adapt)
    outs = [F.cast(pred, "f32") if pred.dtype == "f16" else pred]
    names = ["pred"]
    if with_loss:
        outs.append(loss_node(step.info["eval_loss"], pred, y))
        names.append("loss")
    prog, leaves = compile_program(outs, backend, tier)
    by_id = {id(v): k for k, v in params.items()}
    order = ["x" if ln is x else "y" if ln is y else by_id[id(ln)] for ln in leaves]
    return EvalProgram(prog, order, names, b)


def eval_batches(part_sizes, batch_size: int) -> list[int]:
    """The distinct batch sizes an evaluation of parts with these sizes runs, in the order it first
    runs them (full batches of `batch_size`, then each part's remainder)."""
    out: list[int] = []
    for n in part_sizes:
        for b in ([batch_size] if n >= batch_size else []) + ([n % batch_size] if n % batch_size else []):
            if b not in out:
                out.append(b)
    return out


_EVALS: dict = {}


def eval_programs(spec, st, backend: str, tier: str, ev) -> list:
    """The run's evaluation Programs for step `st` (built by program.evaluation, as the run builds them)."""
    b = st.batch_size
    sizes = eval_batches(ev["parts"], b) if ev["parts"] else [b]
    out = []
    for n in sizes:
        key = (spec.hash, st.program.hash, n)
        e = _EVALS.get(key)
        if e is None:
            if len(_EVALS) > 256:
                _EVALS.clear()
            e = _EVALS[key] = build_eval_program(spec, st, n, backend, tier)
        out.append(e)
    return out
