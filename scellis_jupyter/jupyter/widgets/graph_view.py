"""GraphView: the model graph (elkjs layout), each node with op, output shape and parameter count; editing
a node's attrs or adding/removing a node calls `on_edit(edit)`, which returns the new graph info and the new
cell text (written into the widget's own cell).

Why the layout engine is sent on request: ELK is 1.6 MB, and saved widget state repeats a widget's module
per instance; the view asks the kernel for it once per page and the computed layout is kept in `_layout`,
so a saved notebook re-opens with its layout and no engine.
"""
from __future__ import annotations

import copy
from html import escape
from typing import Callable

import traitlets as t

from ._base import STATIC, ScellisWidget, WidgetError, bundle, error_text
from ._static import BORDER, FG, FG2, box

NODE_W, NODE_H = 170, 58
ACTIONS = ("set", "add", "remove")


def check_edit(edit: dict, info: dict) -> None:
    ids = {n["id"] for n in info.get("nodes", [])}
    a = edit.get("action")
    if a not in ACTIONS:
        raise WidgetError(f"unknown graph edit {a!r}", where="GraphView", hint=f"one of {', '.join(ACTIONS)}")
    node = edit.get("after") if a == "add" else edit.get("node")
    if node not in ids:
        raise WidgetError(f"no node {node!r} in the graph", where="GraphView")
    if a == "set" and not isinstance(edit.get("key"), str):
        raise WidgetError("a set edit needs a key", where="GraphView")
    if a == "add" and not (isinstance(edit.get("op"), str) and edit["op"]):
        raise WidgetError("an add edit needs an op", where="GraphView")


def layered(info: dict) -> dict[str, tuple[int, int]]:
    """Longest-path layers from the sources (the static form's layout; js/src/lib/layout.js does the same)."""
    nodes = [n["id"] for n in info.get("nodes", [])]
    preds = {i: [] for i in nodes}
    for s, d in info.get("edges", []):
        if d in preds and s in preds:
            preds[d].append(s)
    depth: dict[str, int] = {}

    def visit(i, seen=()):
        if i in depth:
            return depth[i]
        if i in seen:
            return 0
        d = max([visit(p, (*seen, i)) for p in preds[i]], default=-1) + 1
        depth[i] = d
        return d

    rows: dict[int, int] = {}
    pos = {}
    for i in nodes:
        d = visit(i)
        k = rows.get(d, 0)
        rows[d] = k + 1
        pos[i] = (12 + k * (NODE_W + 24), 12 + d * (NODE_H + 28))
    return pos


def fmt_count(n: int | None) -> str:
    if not n:
        return "no params"
    return f"{n / 1e6:.2f}M params" if n >= 1e6 else f"{n / 1e3:.1f}k params" if n >= 1e3 else f"{n} params"


class GraphView(ScellisWidget):
    _esm, _css = bundle("graph_view")
    info = t.Dict().tag(sync=True)
    can_edit = t.Bool(False).tag(sync=True)
    _layout = t.Dict().tag(sync=True)
    _last_write = t.Dict().tag(sync=True)        # the view's last cell write: {status, text, n}
    _edit_error = t.Unicode("").tag(sync=True)

    def __init__(self, info: dict, *, on_edit: Callable[[dict], tuple[dict, str | None]] | None = None):
        super().__init__(info=info, can_edit=on_edit is not None)
        self.on_edit = on_edit
        self.cell_texts: list[str] = []

    def edit(self, edit: dict) -> str | None:
        """What the editor's buttons do: check, call on_edit, show the new graph; returns the cell text."""
        if self.on_edit is None:
            raise WidgetError("this GraphView was made without on_edit", where="GraphView")
        check_edit(edit, self.info)
        info, text = self.on_edit(edit)
        # a copy, always sent: an on_edit that changed the dict in place would compare equal and not sync
        self.info = copy.deepcopy(info)
        self.send_state("info")
        if text is not None:
            self.cell_texts.append(text)
        return text

    def _on_edit(self, content, buffers) -> None:
        text, err = None, ""
        try:
            text = self.edit(dict(content.get("edit") or {}))
        except Exception as e:
            err = error_text(e)
        self._edit_error = err
        self.send({"type": "edited", "token": content.get("token"), "text": text, "error": err})
        if not err:
            self.refresh_static()

    def _on_elk(self, content, buffers) -> None:
        path = STATIC / "elk-worker.min.js"
        if path.exists():
            self.send({"type": "elk"}, [path.read_bytes()])

    # ---- static form --------------------------------------------------------------------------------
    def _static_text(self) -> str:
        lines = [f"GraphView: {len(self.info.get('nodes', []))} nodes"]
        for n in self.info.get("nodes", []):
            lines.append(f"  {n['id']:12} {n['op']:12} {n.get('shape')}  {fmt_count(n.get('params'))}")
        return "\n".join(lines)

    def _static_html(self) -> str:
        info = self.info
        saved = self._layout.get("pos") if isinstance(self._layout, dict) else None
        ids = [n["id"] for n in info.get("nodes", [])]
        pos = ({i: (saved[i]["x"], saved[i]["y"]) for i in ids} if saved and all(i in saved for i in ids)
               else layered(info))
        w = max([x for x, _ in pos.values()], default=0) + NODE_W + 12
        h = max([y for _, y in pos.values()], default=0) + NODE_H + 12
        parts = []
        for s, d in info.get("edges", []):
            if s in pos and d in pos:
                x1, y1 = pos[s][0] + NODE_W / 2, pos[s][1] + NODE_H
                x2, y2 = pos[d][0] + NODE_W / 2, pos[d][1]
                parts.append(f'<path d="M{x1},{y1} C{x1},{(y1 + y2) / 2} {x2},{(y1 + y2) / 2} {x2},{y2}" fill="none" '
                             f'stroke="{FG2}" stroke-width="1.5"/>')
        for n in info.get("nodes", []):
            x, y = pos[n["id"]]
            title = n["op"] if n["id"] == n["op"] else f"{n['id']}: {n['op']}"
            parts.append(f'<g data-node="{escape(n["id"])}"><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="5" fill="var(--jp-layout-color2,#f6f6f6)" '
                         f'stroke="{BORDER}"/><text x="{x + 6}" y="{y + 16}" font-size="11" font-weight="600" fill="{FG}">'
                         f'{escape(title[:26])}</text><text x="{x + 6}" y="{y + 32}" font-size="10" fill="{FG2}">'
                         f'{escape(str(n.get("shape")))}</text><text x="{x + 6}" y="{y + 47}" font-size="10" fill="{FG2}">'
                         f'{fmt_count(n.get("params"))}</text></g>')
        total = sum(n.get("params") or 0 for n in info.get("nodes", []))
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" style="max-width:100%;display:block" '
               f'role="img" aria-label="model graph">{"".join(parts)}</svg>')
        head = (f'<div style="font-weight:600">Model graph <span style="color:{FG2};font-weight:400">{len(ids)} nodes · '
                f'{total:,} parameters · input {escape(str((info.get("input") or {}).get("shape")))}</span></div>')
        return box(head + svg, "scellis-graph")
