"""Conformance of PEFT entries: the adaptation applies to check models and one real training step runs."""
from __future__ import annotations

import numpy as np

from ..backends.device import device
from ..catalog.peft import Adaptation, StoredAs, count
from ..catalog.registry import checker
from ..errors import ScellisError
from ..executor.executor import run_numpy
from ..program.training import StepOptions, build_train_step
from ..spec.layers import ParamDecl
from ..spec.spec import Spec

_CHECK_SPECS = {
    "mlp": """
name = "peft_check_mlp"
[data]
dataset = "digits"
[model]
nodes = [{ op = "linear", out = 8 }, { op = "relu" }, { op = "linear", out = 10 }]
[recipe]
optimizer = { name = "sgd", lr = 0.1 }
batch_size = 2
determinism = "debug"
""",
    "transformer": """
name = "peft_check_tf"
[data]
dataset = "pydoc_topics"
seq_len = 6
[model]
nodes = [
  { op = "embedding", vocab = 96, dim = 8 },
  { op = "positional_embedding", max_len = 6 },
  { op = "transformer_block", heads = 2, causal = true, mlp_ratio = 2.0 },
  { op = "linear", out = 96 },
]
[recipe]
optimizer = { name = "sgd", lr = 0.1 }
batch_size = 2
determinism = "debug"
""",
}


def _check_graphs():
    return {k: Spec.from_text(t) for k, t in _CHECK_SPECS.items()}


def _structure(adapt, graph) -> list[str]:
    """Every field of the Adaptation refers to what exists, under the right names."""
    base = {p.name: p for p in graph.params}
    keys = {graph.spec.nodes[i].key for i in graph.order}
    bad = []
    if not isinstance(adapt, Adaptation):
        return [f"returns-adaptation: apply() returned {type(adapt).__name__}, not an Adaptation"]
    if set(adapt.trainable) - set(base):
        bad.append(f"trainable-known: {sorted(set(adapt.trainable) - set(base))[:3]} are not model params")
    seen = set()
    for p in adapt.new_params:
        if not isinstance(p, ParamDecl):
            bad.append(f"new-params: {p!r} is not a ParamDecl")
            continue
        if p.name in base or p.name in seen:
            bad.append(f"new-params: {p.name!r} collides with another parameter")
        if not any(p.name.startswith(k + ".") for k in keys):
            bad.append(f"new-params-prefix: {p.name!r} is not under a node prefix '<node key>.', "
                       "so no layer or hook would see it")
        seen.add(p.name)
    for field_name, d, ok in (("transforms", adapt.transforms, set(base)), ("stored", adapt.stored, set(base)),
                              ("node_hooks", adapt.node_hooks, keys)):
        extra = set(d) - ok
        if extra:
            bad.append(f"{field_name}-known: {sorted(extra)[:3]} are not "
                       f"{'node keys' if field_name == 'node_hooks' else 'model params'}")
    for n, s in adapt.stored.items():
        if not isinstance(s, StoredAs):
            bad.append(f"stored: {n!r} is not a StoredAs")
        elif n in adapt.trainable:
            bad.append(f"stored-frozen: {n!r} is stored in {s.fmt} but marked trainable")
    f = adapt.info.get("factor")
    if not isinstance(f, (int, float)) or not 0.0 < f <= 1.0:
        bad.append(f"info-factor: info['factor'] must be the trainable fraction in (0, 1], got {f!r}")
    else:
        tr, total = count(graph, adapt)
        if abs(f - tr / total) > 1e-9:
            bad.append(f"info-factor: info['factor'] = {f} but trainable/total counts give {tr / total}")
    return bad


@checker("peft")
def check_peft(entry) -> list[str]:
    """make() with defaults; apply() on an MLP and a small causal transformer gives a consistent Adaptation;
    one SGD training step built from it runs on the reference device with a finite loss and finite
    adapter updates, and the frozen parameters are no outputs of the step."""
    try:
        obj = entry.make()
    except Exception as e:
        return [f"instantiate: make() with default hyperparameters raised {type(e).__name__}: {e}"]
    if not callable(getattr(obj, "apply", None)):
        return ["interface: no apply(graph) method"]
    failed: list[str] = []
    ref = device("reference")
    applied = 0
    for what, spec in _check_graphs().items():
        at = f" ({what} model)"
        try:
            adapt = obj.apply(spec.graph)
        except ScellisError:
            continue                     # a clear refusal: the method does not apply to this model
        except Exception as e:
            failed.append(f"apply-runs: apply() raised {type(e).__name__}: {e} (a refusal must be a "
                          f"CatalogError with a hint){at}")
            continue
        applied += 1
        bad = _structure(adapt, spec.graph)
        if bad:
            failed += [b + at for b in bad]
            continue

        class _Fixed(StepOptions):     # hand the already-applied Adaptation to the builder
            def adaptation(self, graph, _a=adapt):
                return _a
        try:
            step = build_train_step(spec, 2, "reference", "debug", options=_Fixed(peft=(("method", entry.name),)))
        except Exception as e:
            failed.append(f"step-builds: build_train_step raised {type(e).__name__}: {e}{at}")
            continue
        trainable = set(adapt.trainable) | {p.name for p in adapt.new_params}
        outs = {o[len("param:"):] for o in step.outputs if o.startswith("param:")}
        if outs - trainable:
            failed.append(f"frozen-not-updated: the step updates frozen params {sorted(outs - trainable)[:3]}{at}")
        rng = np.random.default_rng(0)
        feeds = {}
        for leaf in step.leaves:
            n = leaf.node
            if n.dtype == "i32":
                feeds[leaf.name] = rng.integers(0, int(step.info.get("classes") or 10), n.shape)
            elif n.dtype == "i8":
                feeds[leaf.name] = rng.integers(-128, 128, n.shape)
            elif leaf.name.endswith(".absmax"):
                feeds[leaf.name] = np.abs(rng.standard_normal(n.shape)) * 0.1
            else:
                feeds[leaf.name] = rng.standard_normal(n.shape) * 0.1 if n.shape else 1.0
        try:
            res = run_numpy(step, feeds, ref.impl)
        except Exception as e:
            failed.append(f"step-runs: the step raised {type(e).__name__}: {e}{at}")
            continue
        nonfinite = [k for k, v in res.items() if np.asarray(v).dtype.kind == "f" and not np.all(np.isfinite(v))]
        if nonfinite:
            failed.append(f"finite: non-finite outputs {nonfinite[:3]}{at}")
    if not applied and not failed:
        failed.append(f"applies: apply() refused every check model ({', '.join(_CHECK_SPECS)})")
    return failed
