"""A spec's [model] as a graph of layers: names resolved, ordered, shapes inferred, parameters declared.

Why before compute: a wrong `in`, a cycle or a shape conflict is reported at the spec's line:col while
the user is still editing the cell, and the planner gets every parameter's shape from here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import dtypes as dt
from ..errors import GraphError, ScellisError, ShapeError, did_you_mean
from ..graph.node import Node, scope
from .layers import LAYERS, Layer, LayerCtx, ParamDecl, check_attrs
from .locate import Locator
from .schema import NAME_RE, Checker, SpecError

INPUT_NAMES = ("x", "input")
_INPUT = -1   # dependency index of the model input


@dataclass(frozen=True)
class NodeSpec:
    """One entry of [model] nodes; `inputs` None means 'the previous node' (or the model input)."""

    index: int
    op: str
    attrs: dict
    name: str | None = None
    inputs: tuple[str, ...] | None = None
    line: int = field(default=0, compare=False)
    col: int = field(default=0, compare=False)
    positions: dict = field(default_factory=dict, compare=False, repr=False)  # "op", "name", ("in", j) -> (l, c)

    @property
    def key(self) -> str:
        """Its name, else 'index.op': the prefix of its parameter names."""
        return self.name or f"{self.index}.{self.op}"

    def to_dict(self) -> dict:
        d: dict[str, Any] = {}
        if self.name:
            d["name"] = self.name
        d["op"] = self.op
        if self.inputs is not None:
            d["in"] = list(self.inputs)
        d.update({k: list(v) if isinstance(v, tuple) else v for k, v in self.attrs.items()})
        return d


@dataclass(frozen=True)
class ModelSpec:
    nodes: tuple[NodeSpec, ...]
    output: str | None = None
    input: dict | None = None          # {"shape": tuple, "dtype": str} when declared
    source: str = "<spec>"
    output_pos: tuple[int, int] | None = field(default=None, compare=False, repr=False)
    pretrained: Any = None             # spec.pretrained.Pretrained: where initial weights come from

    @classmethod
    def from_list(cls, nodes: list[dict], output: str | None = None, input: dict | None = None) -> "ModelSpec":
        """Build from Python dicts (the spec's node syntax); attrs are validated, defaults filled."""
        ck = Checker(Locator(""), "<python>")
        out = []
        for i, d in enumerate(nodes):
            op = d.get("op")
            if op not in LAYERS:
                raise SpecError(f"node {i}: unknown op {op!r}", where=f"node {i}",
                                hint=did_you_mean(str(op), LAYERS) or f"known ops: {', '.join(LAYERS)}")
            attrs = check_attrs(LAYERS[op], d, ("model", "nodes", i), ck)
            if ck.diags:
                raise SpecError.from_diagnostics(ck.diags)
            ins, name = d.get("in"), d.get("name")
            if name is not None and not (isinstance(name, str) and NAME_RE.match(name)):
                raise SpecError(f"node {i}: name {name!r} must start with a letter or '_' and use letters, digits, "
                                "'_' or '-'", where=f"node {i}")
            if ins is not None and not (isinstance(ins, str) or (isinstance(ins, (list, tuple)) and ins
                                                                and all(isinstance(r, str) for r in ins))):
                raise SpecError(f"node {i}: 'in' must be a node name or a list of names, got {ins!r}",
                                where=f"node {i}")
            ins = (ins,) if isinstance(ins, str) else tuple(ins) if ins is not None else None
            out.append(NodeSpec(i, op, attrs, name, ins))
        return cls(tuple(out), output, input)

    def where(self, node: NodeSpec | None = None, part: Any = None) -> str:
        """'source:line:col' of a node (or of one of its parts: 'op', 'name', ('in', j)); else 'node KEY'."""
        if node is None:
            pos = self.output_pos
            return f"{self.source}:{pos[0]}:{pos[1]}" if pos else self.source
        pos = node.positions.get(part) if part is not None else None
        if pos is None and node.line:
            pos = (node.line, node.col)
        return f"{self.source}:{pos[0]}:{pos[1]}" if pos else f"node {node.key!r}"

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"nodes": [n.to_dict() for n in self.nodes]}
        if self.output is not None:
            d["output"] = self.output
        if self.input is not None:
            d["input"] = {"shape": list(self.input["shape"]), "dtype": self.input["dtype"]}
        if self.pretrained is not None:
            d["pretrained"] = self.pretrained.to_dict()
        return d


@dataclass
class ModelGraph:
    """The resolved graph: topological order, per-node shapes and the parameters it needs."""

    spec: ModelSpec
    input_shape: tuple
    input_dtype: str
    order: list[int]                    # node indices, inputs before users
    deps: dict[int, list[int]]          # node index -> its input node indices (-1 = model input)
    shapes: dict[str, tuple]            # node key -> per-example output shape
    dtypes: dict[str, str]
    params: list[ParamDecl]             # every node's, in declaration order, names prefixed by the node key
    output: int                         # index of the output node
    node_params: dict[str, list[ParamDecl]] = field(default_factory=dict)

    @property
    def output_shape(self) -> tuple:
        return self.shapes[self.spec.nodes[self.output].key]

    @property
    def output_dtype(self) -> str:
        return self.dtypes[self.spec.nodes[self.output].key]

    @property
    def param_count(self) -> int:
        return sum(math.prod(p.shape) for p in self.params)

    def param_bytes(self, dtype: str = "f32") -> int:
        return self.param_count * dt.ITEMSIZE[dt.canon(dtype)]

    @property
    def param_shapes(self) -> dict[str, tuple]:
        return {p.name: p.shape for p in self.params}

    def summary(self) -> str:
        """One line per node: key, op, output shape, parameter count."""
        rows = [("node", "op", "shape", "params")]
        per = {k: sum(math.prod(p.shape) for p in ps) for k, ps in self.node_params.items()}
        rows.append(("x", "input", str(list(self.input_shape)), "0"))
        for i in self.order:
            n = self.spec.nodes[i]
            rows.append((n.key, n.op, str(list(self.shapes[n.key])), f"{per[n.key]:,}"))
        widths = [max(len(r[c]) for r in rows) for c in range(4)]
        lines = ["  ".join(r[c].ljust(widths[c]) for c in range(4)).rstrip() for r in rows]
        lines.append(f"total: {self.param_count:,} parameters")
        return "\n".join(lines)

    def forward(self, x: Node, params: dict[str, Node], training: bool = False,
                gen_factory: Callable[[str], Any] | None = None) -> Node:
        """The output node for a batch `x` (batch first); `params` maps every declared name to a Node."""
        if tuple(x.shape[1:]) != tuple(self.input_shape) or not x.shape:
            raise ShapeError(f"model input must be [batch, {', '.join(map(str, self.input_shape))}], got "
                             f"{list(x.shape)}", where="model input")
        if x.dtype != self.input_dtype:
            raise GraphError(f"model input must be {self.input_dtype}, got {x.dtype}", where="model input")
        missing = [p.name for p in self.params if p.name not in params]
        if missing:
            raise GraphError(f"{len(missing)} parameter(s) missing: {', '.join(missing[:5])}"
                             + (" ..." if len(missing) > 5 else ""), where="model.forward")
        for p in self.params:
            if tuple(params[p.name].shape) != tuple(p.shape):
                raise ShapeError(f"parameter {p.name!r} must have shape {list(p.shape)}, got "
                                 f"{list(params[p.name].shape)}", where="model.forward")
        needed = self._needed()
        vals: dict[int, Node] = {_INPUT: x}
        for i in self.order:
            if i in needed:
                vals[i] = self.node_forward(i, [vals[d] for d in self.deps[i]], params, training, gen_factory)
        return vals[self.output]

    def node_forward(self, i: int, inputs: list[Node], params: dict[str, Node], training: bool = False,
                     gen_factory: Callable[[str], Any] | None = None, hooks: dict | None = None) -> Node:
        """One node's output from its input nodes (the training step replays nodes to recompute them).

        The layer sees every entry of `params` under its prefix (adapters add some); `hooks` maps a node
        key to fn(inputs, local params, forward) for adapters that change what a layer computes.
        """
        n = self.spec.nodes[i]
        prefix = n.key + "."
        local = {p.name[len(prefix):]: params[p.name] for p in self.node_params[n.key]}
        if len(params) > len(self.params):
            local.update({k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)})
        ctx = LayerCtx(training=training, node=n.key, gen_factory=gen_factory)

        def run(ins, loc):
            return LAYERS[n.op].forward(ins, loc, n.attrs, ctx)
        hook = (hooks or {}).get(n.key)
        with scope(n.key):
            return hook(inputs, local, run) if hook is not None else run(inputs, local)

    @property
    def needed(self) -> list[int]:
        """The nodes the output depends on, in topological order."""
        need = self._needed()
        return [i for i in self.order if i in need]

    def _needed(self) -> set[int]:
        seen: set[int] = set()
        stack = [self.output]
        while stack:
            i = stack.pop()
            if i in seen or i == _INPUT:
                continue
            seen.add(i)
            stack.extend(self.deps[i])
        return seen


def build_graph(model_spec: ModelSpec, input_shape, input_dtype: str = "f32") -> ModelGraph:
    """Resolve names, order the nodes, infer every shape and declare the parameters; SpecError on failure."""
    ms = model_spec
    input_shape = tuple(int(s) for s in input_shape)
    input_dtype = dt.canon(input_dtype)
    if not ms.nodes:
        raise SpecError("the model has no nodes", where=ms.where(), hint="add nodes = [ { op = ... }, ... ]")
    for n in ms.nodes:
        if n.op not in LAYERS:
            raise SpecError(f"unknown op {n.op!r}", where=ms.where(n, "op"),
                            hint=did_you_mean(n.op, LAYERS) or f"known ops: {', '.join(LAYERS)}", kind="unknown-op")
    by_name: dict[str, int] = {}
    for n in ms.nodes:
        if n.name is None:
            continue
        if n.name in INPUT_NAMES:
            raise SpecError(f"node name {n.name!r} is reserved for the model input", where=ms.where(n, "name"),
                            hint="pick another name", kind="reserved-name")
        if n.name in by_name:
            first = ms.nodes[by_name[n.name]]
            raise SpecError(f"duplicate node name {n.name!r}", where=ms.where(n, "name"),
                            hint=f"first defined at {ms.where(first, 'name')}; names must be unique",
                            kind="duplicate-name")
        by_name[n.name] = n.index
    for n in ms.nodes:  # index.op keys of unnamed nodes also resolve (they name the parameters)
        by_name.setdefault(n.key, n.index)

    deps: dict[int, list[int]] = {}
    for n in ms.nodes:
        if n.inputs is None:
            deps[n.index] = [n.index - 1 if n.index > 0 else _INPUT]
            continue
        ds = []
        for j, ref in enumerate(n.inputs):
            if ref in INPUT_NAMES:
                ds.append(_INPUT)
            elif ref in by_name:
                ds.append(by_name[ref])
            else:
                names = [m.name for m in ms.nodes if m.name] + ["x"]
                raise SpecError(f"node {n.key!r} takes input {ref!r}, but no node has that name",
                                where=ms.where(n, ("in", j)),
                                hint=did_you_mean(ref, names) or f"names: {', '.join(map(repr, names))}",
                                kind="unknown-name")
        deps[n.index] = ds

    order = _toposort(ms, deps)
    shapes: dict[str, tuple] = {}
    dtypes: dict[str, str] = {}
    params: list[ParamDecl] = []
    own: dict[int, list[ParamDecl]] = {}

    def shape_of(d: int) -> tuple:
        return input_shape if d == _INPUT else shapes[ms.nodes[d].key]

    def dtype_of(d: int) -> str:
        return input_dtype if d == _INPUT else dtypes[ms.nodes[d].key]

    for i in order:
        n = ms.nodes[i]
        layer: Layer = LAYERS[n.op]
        ins = deps[i]
        lo, hi = layer.arity
        if len(ins) < lo or (hi is not None and len(ins) > hi):
            want = f"{lo}" if lo == hi else f"at least {lo}" if hi is None else f"{lo} to {hi}"
            raise SpecError(f"node {n.key!r} (op {n.op!r}) takes {want} input(s), got {len(ins)}",
                            where=ms.where(n), hint='name them with in = ["a", "b"]' if lo > 1 else
                            "give it one input", kind="arity")
        in_shapes = [shape_of(d) for d in ins]
        in_dtypes = [dtype_of(d) for d in ins]
        try:
            shape, dtype = layer.infer(in_shapes, in_dtypes, n.attrs)
            decls = layer.params(in_shapes, n.attrs)
        except ScellisError as e:
            desc = ", ".join(f"{_ref_name(ms, d)} {list(s)}:{t}" for d, s, t in zip(ins, in_shapes, in_dtypes))
            label = "input" if len(ins) == 1 else "inputs"
            raise SpecError(f"node {n.key!r} (op {n.op!r}, {label} {desc}): {e.diagnostic.message}",
                            where=ms.where(n), hint=e.diagnostic.hint, kind="shape",
                            input_shapes=[list(s) for s in in_shapes]) from None
        for s in shape:
            if s <= 0:
                raise SpecError(f"node {n.key!r} (op {n.op!r}) would produce an empty shape {list(shape)}",
                                where=ms.where(n), kind="shape")
        shapes[n.key], dtypes[n.key] = tuple(shape), dtype
        own[i] = [p.prefixed(n.key) for p in decls]
    for n in ms.nodes:
        params.extend(own[n.index])

    if ms.output is None:
        out = len(ms.nodes) - 1
    elif ms.output in by_name:
        out = by_name[ms.output]
    else:
        names = [m.name for m in ms.nodes if m.name]
        raise SpecError(f"output {ms.output!r} names no node", where=ms.where(),
                        hint=did_you_mean(ms.output, names) or f"names: {', '.join(map(repr, names)) or '(none)'}",
                        kind="unknown-name")
    return ModelGraph(ms, input_shape, input_dtype, order, deps, shapes, dtypes, params, out,
                      {ms.nodes[i].key: ps for i, ps in own.items()})


def _ref_name(ms: ModelSpec, d: int) -> str:
    return "x" if d == _INPUT else repr(ms.nodes[d].key)


def _toposort(ms: ModelSpec, deps: dict[int, list[int]]) -> list[int]:
    """Inputs before users (declaration order otherwise); a cycle is a SpecError naming it."""
    state: dict[int, int] = {}   # 1 = on the stack, 2 = done
    order: list[int] = []
    for root in range(len(ms.nodes)):
        if state.get(root):
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path: list[int] = []
        while stack:
            i, k = stack.pop()
            if k == 0:
                state[i] = 1
                path.append(i)
            ds = [d for d in deps[i] if d != _INPUT]
            if k < len(ds):
                stack.append((i, k + 1))
                d = ds[k]
                if state.get(d) == 1:
                    cyc = path[path.index(d):] + [d]
                    first = min(cyc)
                    names = " -> ".join(repr(ms.nodes[c].key) for c in reversed(cyc))
                    raise SpecError(f"nodes form a cycle: {names}", where=ms.where(ms.nodes[first]),
                                    hint="every `in` must name a node that does not depend on this one",
                                    kind="cycle")
                if not state.get(d):
                    stack.append((d, 0))
                continue
            state[i] = 2
            path.pop()
            order.append(i)
    return order
