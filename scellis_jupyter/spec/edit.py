"""Changes to a spec's text by key path, formatting and comments kept (tomlkit).

Why: a plan's fixes say what they change as {"recipe.precision": "mixed-f16"}; the notebook front-end
and the planner itself (which re-plans every fix from the changed text) apply them the same way.
"""
from __future__ import annotations

from typing import Any

import tomlkit

from .schema import SpecError


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
                raise SpecError(f"cannot set {path!r}: {h!r} is not a table", where=path)
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
