"""PlanView: a memory plan's verdict, its breakdown against capacity, and its fixes as buttons.

A fix button calls `on_fix(i)`, which applies `plan.fixes[i]` to the spec and re-plans; the widget shows
the new plan at once and writes the returned cell text into its own notebook cell.
"""
from __future__ import annotations

import json
from html import escape
from typing import Callable

import traitlets as t

from ...plan.plan import CATEGORIES, Plan
from ._base import ScellisWidget, bundle, error_text
from ._static import VERDICT, FG2, BORDER, badge, box, fmt_bytes

COLORS = {"parameters": "#4e79a7", "gradients": "#f28e2b", "optimizer_state": "#e15759", "activations": "#76b7b2",
          "workspace": "#59a14f", "master_weights": "#edc948", "data": "#b07aa1", "buffers": "#9c755f",
          "evaluation": "#ff9da7", "readback": "#bab0ac"}


def plan_dict(plan: Plan) -> dict:
    """The plan's JSON-able fields (what the view draws)."""
    return json.loads(json.dumps(plan.to_json(), default=str))


def verdict_words(p: dict) -> str:
    """The same words js/src/lib/plan_words.js says: green fits, yellow fits and says why, red does not."""
    cap = p.get("capacity_bytes") or 0
    pct = f"{100 * p['peak_bytes'] / cap:.0f}" if cap else "?"
    of = f"peak {fmt_bytes(p['peak_bytes'])} of {fmt_bytes(cap)} ({pct}%)"
    if p["verdict"] == "green":
        return f"Fits: {of}."
    if p["verdict"] == "yellow":
        why = "; ".join(p.get("warnings") or []) or "little headroom"
        return f"Fits, with a warning: {why}. {of}."
    return (f"Does not fit: needs {fmt_bytes(p['peak_bytes'])}, the device has {fmt_bytes(cap)}"
            f" ({p.get('capacity_source') or 'capacity'}). Refused before any compute.")


def _after(f: dict) -> str:
    return f" → {fmt_bytes(f['peak_bytes'])} ({f['verdict']})" if f.get("peak_bytes") is not None else ""


class PlanView(ScellisWidget):
    _esm, _css = bundle("plan_view")
    plan = t.Dict().tag(sync=True)
    can_fix = t.Bool(False).tag(sync=True)
    error = t.Unicode("").tag(sync=True)
    _last_write = t.Dict().tag(sync=True)        # the view's last cell write: {status, text, n}

    def __init__(self, plan: Plan, *, on_fix: Callable[[int], tuple[Plan, str | None]] | None = None):
        super().__init__(plan=plan_dict(plan), can_fix=on_fix is not None)
        self._plan = plan
        self.on_fix = on_fix
        self.cell_texts: list[str] = []      # every cell text a fix returned, in order

    @property
    def current(self) -> Plan:
        return self._plan

    def apply_fix(self, index: int) -> str | None:
        """What a fix button does (also callable from code): re-plan through on_fix, show the result.
        Call refresh_static() after it so a saved notebook's static form shows the new plan."""
        if self.on_fix is None:
            raise ValueError("this PlanView was made without on_fix")
        fixes = self._plan.fixes
        if not 0 <= index < len(fixes):
            raise IndexError(f"fix {index} does not exist (the plan has {len(fixes)})")
        new_plan, text = self.on_fix(index)
        self._plan = new_plan
        self.error = ""
        self.plan = plan_dict(new_plan)
        if text is not None:
            self.cell_texts.append(text)
        return text

    def _on_fix(self, content, buffers) -> None:
        text = None
        try:
            text = self.apply_fix(int(content.get("index", -1)))
        except Exception as e:          # shown in the widget, as the shared diagnostic
            self.error = error_text(e)
        # the reply first: the view that asked writes the cell, then the refreshed output re-creates views
        self.send({"type": "fixed", "token": content.get("token"), "text": text})
        self.refresh_static()

    # ---- static form ----------------------------------------------------------------------------------
    def _static_text(self) -> str:
        p = self.plan
        lines = [f"PlanView {p.get('verdict', '?').upper()}: {verdict_words(p)}"]
        if p.get("device_note"):
            lines.append(f"  device: {p['device_note']}")
        for k in CATEGORIES:
            if p["breakdown"].get(k):
                lines.append(f"  {k:16} {fmt_bytes(p['breakdown'][k])}")
        for i, f in enumerate(p.get("fixes") or []):
            lines.append(f"  fix {i} [{f['kind']}] {f['description']}")
        return "\n".join(lines)

    def _static_html(self) -> str:
        p = self.plan
        color = VERDICT.get(p.get("verdict"), "#888")
        cap, peak = p.get("capacity_bytes") or 0, p.get("peak_bytes") or 0
        scale = max(cap, peak, 1)
        w, hgt, x = 600, 18, 0.0
        rects, legend = [], []
        for k in CATEGORIES:
            v = p["breakdown"].get(k) or 0
            if v <= 0:
                continue
            rects.append(f'<rect x="{w * x / scale:.1f}" y="0" width="{max(w * v / scale, 0.5):.1f}" height="{hgt}" '
                         f'fill="{COLORS.get(k, "#888")}"><title>{k}: {fmt_bytes(v)}</title></rect>')
            legend.append(f'<span style="margin-right:10px;white-space:nowrap"><i style="display:inline-block;width:10px;'
                          f'height:10px;background:{COLORS.get(k, "#888")};margin-right:4px"></i>{k.replace("_", " ")} {fmt_bytes(v)}</span>')
            x += v
        capx = w * cap / scale
        # the bar spans the box, as the live view's does (js/src/plan_view.js): a bar capped at 600 px in a
        # wider box put a capacity marker at its right end near the middle of the box
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {hgt}" width="100%" height="{hgt}" '
               f'preserveAspectRatio="none" style="display:block;margin:6px 0 2px" role="img" '
               f'aria-label="memory breakdown">'
               f'<rect width="{w}" height="{hgt}" fill="{BORDER}"/>{"".join(rects)}'
               f'<rect class="scellis-capacity" data-capacity="{cap / scale:.4f}" x="{min(max(capx - 1, 0), w - 2):.1f}" '
               f'width="2" height="{hgt}" fill="var(--jp-ui-font-color0, #000)"><title>capacity {fmt_bytes(cap)}</title></rect></svg>')
        fixes = "".join(f'<li>[{escape(f["kind"])}] {escape(f["description"])}{_after(f)}</li>'
                        for f in p.get("fixes") or [])
        notes = "".join(f'<div style="color:{FG2};font-size:11px">note: {escape(n)}</div>' for n in p.get("notes") or [])
        if p.get("verdict") != "yellow":            # a yellow verdict's words already say its warnings
            notes += "".join(f'<div style="color:{FG2};font-size:11px">warning: {escape(w)}</div>'
                             for w in p.get("warnings") or [])
        device = (f'<div class="scellis-device" style="color:{FG2};font-size:12px">device: '
                  f'{escape(p["device_note"])}</div>' if p.get("device_note") else "")
        inner = (f'<div>{badge(p.get("verdict", "?").upper(), color, {"verdict": p.get("verdict", "?")})} <b>Plan for {escape(str(p.get("spec")))}</b> '
                 f'<span style="color:{FG2}">{escape(str(p.get("backend")))}:{escape(str(p.get("device")))} · batch '
                 f'{p.get("batch_size")} · tier {escape(str(p.get("tier")))}</span></div>'
                 f'<div class="scellis-verdict" style="margin:6px 0;font-weight:600;color:{color}">{escape(verdict_words(p))}</div>'
                 f'{device}{svg}<div style="font-size:11px">{"".join(legend)}<span>| capacity {fmt_bytes(cap)}</span></div>{notes}'
                 + (f'<div style="margin-top:6px">Fixes:<ul style="margin:2px 0">{fixes}</ul></div>' if fixes else ""))
        return box(inner, "scellis-plan", color)
