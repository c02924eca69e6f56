"""Edits of a spec's TOML text: a plan Fix applied, a node's parameter set, a node added or removed.

Why text in, text out: in a notebook the cell's text is the spec, so a fix button or a graph edit must
change that text (keeping the user's comments and layout; tomlkit edits in place) and the cell is then
re-parsed like any other. `graph_info` is the model graph as the GraphView widget draws it.

    new = apply_fix(text, plan.fixes[0])
    new = apply_edit(text, {"action": "set", "node": "hidden", "key": "out", "value": 128})
"""
from __future__ import annotations

import math
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from ..errors import EditError, did_you_mean

# a Fix's settings key -> where it goes in the spec ((table, key); None: not a spec setting)
FIX_TARGETS = {"batch_size": ("recipe", "batch_size"), "checkpointing": ("recipe", "checkpointing"),
               "precision": ("recipe", "precision"), "peft": ("recipe", "peft"), "placement": ("data", "placement")}
FIX_IGNORED = ("segment", "factor", "extra_compute")    # what a fix reports about itself, not a setting
ACTIONS = ("set", "add", "remove")


def _doc(text: str):
    try:
        return tomlkit.parse(text)
    except TOMLKitError as e:
        raise EditError(f"the spec text is not valid TOML: {e}", where="spec", hint="fix the cell first") from None


def _table(doc, name: str):
    if name not in doc:
        doc[name] = tomlkit.table()
    return doc[name]


def _value(v: Any):
    if isinstance(v, dict):
        t = tomlkit.inline_table()
        t.update({k: _value(x) for k, x in v.items()})
        return t
    if isinstance(v, tuple):
        return list(v)
    return v


def apply_changes(text: str, changes: dict[str, Any]) -> str:
    """`text` with each dotted key path set to its value (a dict becomes an inline table; None removes the
    key); tables on the way are made when missing."""
    doc = tomlkit.parse(text)
    for path, value in changes.items():
        *heads, last = path.split(".")
        node = doc
        for h in heads:
            nxt = node.get(h)
            if nxt is None:
                nxt = tomlkit.table()
                node[h] = nxt
            if not hasattr(nxt, "get"):
                raise EditError(f"cannot set {path!r}: {h!r} is not a table", where=path)
            node = nxt
        if value is None:
            if last in node:
                del node[last]
            continue
        node[last] = _item(value)
    return tomlkit.dumps(doc)


def _item(value):
    if isinstance(value, dict):
        t = tomlkit.inline_table()
        for k, v in value.items():
            t[k] = _item(v)
        return t
    return value


def apply_fix(text: str, fix) -> str:
    """`text` with a plan Fix written into it: its `changes` (key path -> value) when it names them, else its
    settings (e.g. recipe.batch_size = 16). A fix that needs a pool of devices cannot be one spec's text."""
    if getattr(fix, "requires", None) == "pool":
        raise EditError(f"fix {getattr(fix, 'kind', 'fix')!r} needs several devices (a pool), not a spec change",
                        where=f"fix {getattr(fix, 'kind', 'fix')}", hint="pools of devices come with sc.pool; pick another fix")
    changes = getattr(fix, "changes", None) or (fix.get("changes") if isinstance(fix, dict) else None)
    if changes:
        return apply_changes(text, changes)
    settings = dict(getattr(fix, "settings", None) or (fix.get("settings") if isinstance(fix, dict) else {}) or {})
    kind = getattr(fix, "kind", None) or (fix.get("kind") if isinstance(fix, dict) else "fix")
    doc = _doc(text)
    applied = 0
    for k, v in settings.items():
        if k in FIX_IGNORED:
            continue
        if k not in FIX_TARGETS:
            raise EditError(f"fix {kind!r} ({k} = {v}) is not a setting of one spec: it needs several devices",
                            where=f"fix {kind}", hint="pools of devices come with sc.pool; pick another fix")
        if v is None:
            raise EditError(f"fix {kind!r} has no value to apply (no {k} fits)", where=f"fix {kind}",
                            hint="use a device with more memory, or another fix")
        table, key = FIX_TARGETS[k]
        _table(doc, table)[key] = _value(v)
        applied += 1
    if not applied:
        raise EditError(f"fix {kind!r} changes nothing in the spec", where=f"fix {kind}")
    return tomlkit.dumps(doc)


def _nodes(doc):
    model = doc.get("model")
    if model is None or "nodes" not in model:
        raise EditError("the spec has no [model] nodes to edit", where="[model]",
                        hint="networks of a GAN spec are edited in their own [model.<name>] tables")
    return model["nodes"]


def _node_keys(nodes) -> list[str]:
    return [str(n.get("name")) if n.get("name") else f"{i}.{n.get('op')}" for i, n in enumerate(nodes)]


def _index(nodes, node: str) -> int:
    keys = _node_keys(nodes)
    if node not in keys:
        raise EditError(f"the model has no node {node!r}", where="[model] nodes",
                        hint=did_you_mean(node, keys) or f"nodes: {', '.join(keys)}")
    return keys.index(node)


def _new_node(nodes, op: str, attrs: dict):
    item = {"op": op, **{k: v for k, v in (attrs or {}).items() if k != "op"}}
    if isinstance(nodes, tomlkit.items.AoT):
        t = tomlkit.table()
    else:
        t = tomlkit.inline_table()
    for k, v in item.items():
        t[k] = _value(v)
    return t


def apply_edit(text: str, edit: dict) -> str:
    """One graph edit (the GraphView's format) applied to the spec text:
    {"action": "set", "node": id, "key": k, "value": v} (value None removes the key),
    {"action": "add", "after": id or None (first), "op": str, "attrs": {}}, {"action": "remove", "node": id}."""
    action = edit.get("action")
    if action not in ACTIONS:
        raise EditError(f"unknown edit action {action!r}", where="graph edit",
                        hint=did_you_mean(str(action), ACTIONS) or f"actions: {', '.join(ACTIONS)}")
    doc = _doc(text)
    nodes = _nodes(doc)
    if action == "set":
        i = _index(nodes, edit["node"])
        key = edit.get("key")
        if not isinstance(key, str) or not key:
            raise EditError("a set edit needs a key", where=f"node {edit['node']}")
        if edit.get("value") is None:
            if key in nodes[i]:
                del nodes[i][key]
        else:
            nodes[i][key] = _value(edit["value"])
    elif action == "add":
        op = edit.get("op")
        if not isinstance(op, str):
            raise EditError("an add edit needs an op", where="graph edit", hint='{"action": "add", "op": "relu"}')
        after = edit.get("after")
        at = 0 if after is None else _index(nodes, after) + 1
        nodes.insert(at, _new_node(nodes, op, edit.get("attrs") or {}))
    else:
        i = _index(nodes, edit["node"])
        if len(nodes) == 1:
            raise EditError("the model's only node cannot be removed", where=f"node {edit['node']}")
        del nodes[i]
    return tomlkit.dumps(doc)


def graph_info(spec, network: str | None = None) -> dict:
    """{"nodes": [{id, op, shape, params, attrs}], "edges": [[src, dst]], "input": {"shape": [...]}} of the
    spec's model (`network` picks one of a GAN spec's networks, default the first)."""
    if getattr(spec, "models", None):
        graphs = spec.graphs
        network = network or next(iter(graphs))
        g = graphs[network]
    else:
        g = spec.graph
    nodes, edges = [], []
    for i in g.order:
        n = g.spec.nodes[i]
        params = sum(math.prod(p.shape) for p in g.node_params.get(n.key, []))
        nodes.append({"id": n.key, "op": n.op, "shape": [int(s) for s in g.shapes[n.key]], "params": int(params),
                      "attrs": {k: (list(v) if isinstance(v, tuple) else v) for k, v in n.attrs.items()}})
        for d in g.deps.get(i, []):
            edges.append(["input" if d < 0 else g.spec.nodes[d].key, n.key])
    return {"nodes": nodes, "edges": edges, "input": {"shape": [int(s) for s in g.input_shape],
                                                      "dtype": g.input_dtype}, "output": g.spec.nodes[g.output].key}


__all__ = ["apply_changes", "apply_fix", "apply_edit", "graph_info", "EditError", "FIX_TARGETS"]
