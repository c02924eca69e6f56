"""Conformance of regularizer entries: one real training step with the regularizer on check models."""
from __future__ import annotations

import builtins
import contextlib

import numpy as np

from ..catalog import registry
from ..catalog.registry import Entry, checker
from ..errors import ScellisError
from ..executor.executor import run_numpy
from ..program.training import build_train_step
from ..rng.generator import Generator
from ..spec import Spec
from .common import _device


@contextlib.contextmanager
def _provisional(entry: Entry):
    """The entry registered under its name while it is checked (register() checks before it adds), so a
    spec can name it; whatever was there before comes back afterwards."""
    with registry._LOCK:
        reg = registry._REG[entry.kind]
        old = reg.get(entry.name)
        reg[entry.name] = entry
    try:
        yield
    finally:
        with registry._LOCK:
            if old is None:
                reg.pop(entry.name, None)
            else:
                reg[entry.name] = old


_CHECK_SPECS = {
    "image-classifier": """
[model]
input = {{ shape = [1, 6, 5], dtype = "f32" }}
nodes = [
  {{ op = "flatten" }},
  {{ name = "fc1", op = "linear", out = 7 }},
  {{ op = "relu" }},
  {{ name = "fc2", op = "linear", out = 3 }},
]
[recipe]
loss = "cross_entropy"
optimizer = {{ name = "sgd", lr = 0.1 }}
batch_size = 4
regularizers = [{reg}]
""",
    "regressor": """
[model]
input = {{ shape = [5], dtype = "f32" }}
nodes = [
  {{ name = "fc1", op = "linear", out = 6 }},
  {{ op = "tanh" }},
  {{ name = "fc2", op = "linear", out = 2 }},
]
[recipe]
loss = "mse"
optimizer = {{ name = "adam", lr = 0.01 }}
batch_size = 4
regularizers = [{reg}]
""",
}


def _feeds(step, rng, draws: dict) -> dict:
    """Synthetic inputs for one step: the declared examples, drawn regularizer inputs, random rest."""
    ex = step.info.get("examples", {})
    out = {}
    for leaf in step.leaves:
        n = leaf.node
        if leaf.name in draws:
            out[leaf.name] = draws[leaf.name]
        elif leaf.name in ex:
            out[leaf.name] = ex[leaf.name](rng)
        elif leaf.name == "lr":
            out[leaf.name] = np.float32(0.05)
        elif leaf.name == "step":
            out[leaf.name] = np.float32(1)
        elif leaf.name.startswith("rng:"):
            out[leaf.name] = np.zeros(2, np.uint32)
        elif leaf.role == "optimizer_state":        # the optimizers' start (Adam's v must not be negative)
            out[leaf.name] = np.zeros(n.shape, np.float32)
        else:
            out[leaf.name] = (rng.standard_normal(n.shape) * 0.3).astype(np.float32)
    return out


@checker("regularizer")
def check_regularizer(entry: Entry) -> builtins.list[str]:
    """apply() on small models; declared inputs drawn replayably from the augment stream; one training
    step finite on the reference device; declared buffers initialized, carried and of their shapes;
    the step's result depends only on its inputs."""
    with _provisional(entry):
        return _check_regularizer(entry)


def _check_regularizer(entry: Entry) -> builtins.list[str]:
    try:
        entry.make()
    except Exception as e:
        return [f"instantiate: make() with default hyperparameters raised {type(e).__name__}: {e}"]
    if not callable(getattr(entry.make(), "apply", None)):
        return ["interface: a regularizer instance needs apply(ctx) -> Regularization"]
    failed: builtins.list[str] = []
    applied = 0
    impl = _device("reference").impl
    for model, text in _CHECK_SPECS.items():
        at = f" ({model})"
        try:
            spec = Spec.from_text(text.format(reg=f'{{ name = "{entry.name}" }}'), source=f"<check {model}>")
            step = build_train_step(spec, 4, "reference", "debug")
        except ScellisError:
            continue                             # a clear refusal: this regularizer does not fit that model
        except Exception as e:
            failed.append(f"apply-runs: building a step raised {type(e).__name__}: {e} (a refusal must be a "
                          f"CatalogError){at}")
            continue
        applied += 1
        reg = step.info["regularization"]
        names = {l.name: l.node for l in step.leaves}
        for si in reg.inputs:
            if si.name not in names:
                failed.append(f"inputs: declared input {si.name!r} is not read by the step{at}")
        gen = Generator(7)
        gen.positions["augment"] = 1000
        d1 = reg.draw(gen.stream("augment")) if reg.draw else {}
        moved = gen.positions["augment"] - 1000
        gen.positions["augment"] = 1000
        d2 = reg.draw(gen.stream("augment")) if reg.draw else {}
        d3 = reg.draw(gen.stream("augment")) if reg.draw else {}
        want = {si.name: si for si in reg.inputs}
        if set(d1) != set(want):
            failed.append(f"draws: draw() returned {sorted(d1)}, declared {sorted(want)}{at}")
            continue
        bad = [k for k, v in d1.items() if tuple(np.shape(v)) != tuple(want[k].shape)
               or np.asarray(v).dtype != np.dtype({"f32": np.float32, "i32": np.int32}.get(want[k].dtype, "f4"))]
        if bad:
            failed.append(f"draws: {bad} do not have the declared shape and dtype{at}")
            continue
        if want and moved <= 0:
            failed.append(f"draws: draw() did not take words from the augment stream{at}")
        if any(not np.array_equal(d1[k], d2[k]) for k in d1):
            failed.append(f"replayable: the same stream position drew different inputs (draw only from the "
                          f"stream){at}")
        if want and all(np.array_equal(d1[k], d3[k]) for k in d1) and any(np.size(v) > 1 for v in d1.values()):
            failed.append(f"draws: the next step drew the same inputs again{at}")
        bufs = {b.leaf: b for b in reg.buffers}
        for b in reg.buffers:
            leaf = names.get(b.leaf)
            if leaf is None or tuple(leaf.shape) != tuple(b.shape):
                failed.append(f"buffers: {b.leaf!r} is not a step input of shape {b.shape}{at}")
        if bufs:
            if reg.init_buffers is None:
                failed.append(f"buffers: buffers declared but no init_buffers{at}")
                continue
            w0 = {p.name: np.random.default_rng(1).standard_normal(p.shape).astype(np.float32)
                  for p in spec.graph.params}
            init = reg.init_buffers(w0, Generator(3).stream("init"))
            if set(init) != set(bufs) or any(tuple(np.shape(init[k])) != bufs[k].shape for k in bufs):
                failed.append(f"buffers: init_buffers() gave {sorted(init)}, declared {sorted(bufs)}{at}")
                continue
            if any(f"state:{k}" not in step.outputs for k in bufs):
                failed.append(f"buffers: the step does not output the new value of every buffer{at}")
        rng = np.random.default_rng(0)
        feeds = _feeds(step, rng, d1)
        for k in bufs:
            feeds[k] = init[k]
        try:
            out = run_numpy(step, feeds, impl)
            again = run_numpy(step, {k: np.array(v, copy=True) for k, v in feeds.items()}, impl)
        except Exception as e:
            failed.append(f"step-runs: one training step raised {type(e).__name__}: {e}{at}")
            continue
        nonfinite = [k for k, v in out.items() if np.asarray(v).dtype.kind == "f" and not np.all(np.isfinite(v))]
        if nonfinite:
            failed.append(f"finite: non-finite {', '.join(nonfinite[:4])} after one step{at}")
        if any(not np.array_equal(out[k], again[k]) for k in out):
            failed.append(f"pure: the same step inputs gave different outputs{at}")
    if not applied and not failed:
        failed.append(f"applies: apply() refused every check model ({', '.join(_CHECK_SPECS)})")
    return failed
