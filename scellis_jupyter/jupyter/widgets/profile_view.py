"""ProfileView: one training step's dispatches as a flame-style (icicle) timeline, beside its top kernels.

Why a timeline and not only the table: the table says which kernels cost the most over the step; the
timeline says where in the step they run (which layer, forward or backward, the optimizer) and how the
time of one layer splits into ops and kernels. x is GPU time (wgpu timestamps; the host clock on the
reference path) laid end to end in dispatch order; rows are layer, op, kernel, dispatch, each block the
run of consecutive dispatches sharing that label. The live view (js/src/profile_view.js) adds hover
details and click-to-zoom; the static form below draws the same blocks as positioned <div>s with a
`title` each (no script), so nbconvert and repository hosts show it too.
"""
from __future__ import annotations

from html import escape
from typing import Any

import traitlets as t

from ._base import ScellisWidget, WidgetError, bundle
from ._static import BORDER, FG2, box

LEVELS = ("layer", "op", "kernel", "dispatch")
# mid-lightness colours that read under dark text in Lab's light and dark themes alike
PALETTE = ["#8fb8de", "#f4b183", "#a9d18e", "#f7a1a1", "#c5a3e0", "#ffd966", "#9fd8d2", "#e2b0c9", "#c9c0a6",
           "#b4c7e7"]
ROW_PX = 22
HEAD_KEYS = ("spec", "run", "device", "method", "steps", "batch_size", "step_ms", "kernel_ms", "dispatches",
             "last_step_ms", "timeline_ms", "loop_step_ms")


def color_of(label: str) -> str:
    """A stable colour per label (js/src/lib/flame.js hashes the same way: FNV-1a over UTF-16 code units)."""
    h, b = 0x811C9DC5, label.encode("utf-16-le")
    for k in range(0, len(b), 2):
        h ^= b[k] | (b[k + 1] << 8)
        h = (h * 0x01000193) & 0xFFFFFFFF
    return PALETTE[h % len(PALETTE)]


def scope_label(s: str) -> str:
    return s or "(other)"


def result_of(shape: str) -> str:
    """The result part of a dispatch's shape text: "f32[8,4] f32[4,6] -> f32[8,6]" gives "f32[8,6]"."""
    return shape.rsplit(" -> ", 1)[-1]


def icicle(timeline: list[dict]) -> list[dict]:
    """The blocks of the icicle: per level (0 layer, 1 op, 2 kernel, 3 dispatch, labelled by its result's
    shape), each maximal run of consecutive dispatches with the same labels down to that level, as {level, label, i0, i1, x0, x1, us}
    (x in microseconds from the step's first dispatch, dispatches i0..i1-1)."""
    xs = [0.0]
    for d in timeline:
        xs.append(xs[-1] + max(0.0, float(d["us"])))
    keys = [(scope_label(d["scope"]), d["op"], d["kernel"]) for d in timeline]
    out: list[dict] = []
    for level in range(4):
        i = 0
        while i < len(timeline):
            j = i + 1
            if level < 3:
                while j < len(timeline) and keys[j][:level + 1] == keys[i][:level + 1]:
                    j += 1
            label = keys[i][level] if level < 3 else result_of(timeline[i]["shape"])
            out.append({"level": level, "label": label, "i0": i, "i1": j, "x0": xs[i], "x1": xs[j],
                        "us": xs[j] - xs[i]})
            i = j
    return out


def top_rows(timeline: list[dict], n: int) -> list[dict]:
    """The step's (kernel, shape) pairs by time: {kernel, op, shape, calls, us, share}."""
    by: dict[tuple, dict] = {}
    for d in timeline:
        r = by.setdefault((d["kernel"], d["shape"]), {"kernel": d["kernel"], "op": d["op"], "shape": d["shape"],
                                                       "calls": 0, "us": 0.0})
        r["calls"] += 1
        r["us"] += float(d["us"])
    total = sum(r["us"] for r in by.values()) or 1.0
    rows = sorted(by.values(), key=lambda r: -r["us"])[:n]
    for r in rows:
        r["share"] = r["us"] / total
    return rows


def fmt_us(us: float) -> str:
    return f"{us / 1e3:.2f} ms" if us >= 1e3 else f"{us:.1f} µs"


class ProfileView(ScellisWidget):
    """`sc.profile(spec_or_run)`: the last timed step of a measured profile (run.profile) as an icicle
    timeline with its top kernels. `ProfileView(prof)` shows a profile dict already measured."""

    _esm, _css = bundle("profile_view")
    info = t.Dict().tag(sync=True)          # the profile's header (spec, device, method, times)
    timeline = t.List().tag(sync=True)      # [{kernel, op, scope, shape, us}] in dispatch order
    top = t.Int(12).tag(sync=True)

    def __init__(self, prof: dict, *, top: int = 12):
        if not isinstance(prof, dict) or "timeline" not in prof or "method" not in prof:
            raise WidgetError("ProfileView needs a measured profile (sc.profile_spec / sc.profile_run)",
                              where="ProfileView", hint="sc.profile(spec_or_run) measures one and shows it")
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise WidgetError(f"top={top!r} must be an integer >= 1", where="ProfileView")
        tl = [{"kernel": str(d["kernel"]), "op": str(d["op"]), "scope": str(d.get("scope") or ""),
               "shape": str(d.get("shape") or ""), "us": float(d["us"])} for d in prof["timeline"]]
        super().__init__(info={k: prof.get(k) for k in HEAD_KEYS}, timeline=tl, top=top)
        from ...run.profile import profile_text
        self._table = profile_text(prof) if prof.get("kernels") is not None and "kernel_ms" in prof else ""

    @classmethod
    def of(cls, target: Any, *, top: int = 12, **kw) -> "ProfileView":
        """Measure `target` (a spec, a run, a run id; run.profile.profile_of) and show it."""
        from ...run.profile import profile_of
        return cls(profile_of(target, top=max(top, 12), **kw), top=top)

    # ---- the static form ----------------------------------------------------------------------------
    def _head(self) -> str:
        i = self.info
        return (f"profile of {i.get('spec')}" + (f" (run {i['run']})" if i.get("run") else "") +
                f" on {i.get('device')}: one step, {len(self.timeline)} dispatches, "
                f"{fmt_us(1e3 * float(i.get('timeline_ms') or 0))} of kernels in a "
                f"{float(i.get('last_step_ms') or 0):.3f} ms timed step" +
                (f" ({float(i['loop_step_ms']):.3f} ms untimed, as the loop runs it)" if i.get("loop_step_ms") else ""))

    def _static_text(self) -> str:
        """The whole profile's kernel table (all timed steps), then the drawn step's top (kernel, shape) rows
        and its time per layer."""
        lines = ([self._table] if self._table else []) + [self._head(), f"timing: {self.info.get('method')}"]
        if not self.timeline:
            lines.append("no kernel was timed")
            return "\n".join(lines)
        lines.append(f"  {'kernel':<20}{'calls':>6}{'time':>12}{'share':>8}   shape")
        for r in top_rows(self.timeline, self.top):
            lines.append(f"  {r['kernel']:<20}{r['calls']:>6}{fmt_us(r['us']):>12}{100 * r['share']:>7.1f}%   "
                         f"{r['shape']}")
        by: dict[str, float] = {}
        for d in self.timeline:
            by[scope_label(d["scope"])] = by.get(scope_label(d["scope"]), 0.0) + d["us"]
        lines.append("layers: " + ", ".join(f"{k} {fmt_us(v)}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])))
        return "\n".join(lines)

    def _static_html(self) -> str:
        head = (f"<div style='font-weight:600'>{escape(self._head())}</div>"
                f"<div style='color:{FG2};font-size:11px'>timing: {escape(str(self.info.get('method')))}</div>")
        if not self.timeline:
            return box(head + "<div>no kernel was timed</div>", "scellis-profile")
        total = sum(d["us"] for d in self.timeline) or 1.0
        rows_html: list[list[str]] = [[] for _ in LEVELS]
        for b in icicle(self.timeline):
            w = 100 * b["us"] / total
            if w < 0.25:                  # a few pixels or less: its parent row already shows its time
                continue
            d = self.timeline[b["i0"]]
            n = b["i1"] - b["i0"]
            if b["level"] == 3:
                tip = f"{d['kernel']} ({d['op']}, {scope_label(d['scope'])}) {d['shape']}: {fmt_us(b['us'])}"
            else:
                tip = (f"{LEVELS[b['level']]} {b['label']}: {fmt_us(b['us'])} ({w:.1f}% of the step's kernels), "
                       f"{n} dispatch{'es' if n != 1 else ''}")
            col = color_of(b["label"] if b["level"] < 3 else d["kernel"])
            rows_html[b["level"]].append(
                f"<div title='{escape(tip)}' style='position:absolute;left:{100 * b['x0'] / total:.2f}%;width:{w:.2f}%;"
                f"height:{ROW_PX - 1}px;background:{col};overflow:hidden;box-shadow:inset -1px 0 #0005'>"
                f"{escape(b['label']) if w > 5 else ''}</div>")
        rows = "".join(f"<div style='position:absolute;left:0;right:0;top:{k * ROW_PX}px;height:{ROW_PX}px;"
                       f"font-size:11px;line-height:{ROW_PX - 1}px;color:#111;white-space:nowrap'>{''.join(r)}</div>"
                       for k, r in enumerate(rows_html))
        flame = (f"<div style='flex:3 1 360px;min-width:0'><div style='position:relative;height:{4 * ROW_PX}px;"
                 f"border:1px solid {BORDER};overflow:hidden'>{rows}</div>"
                 f"<div style='color:{FG2};font-size:11px'>rows: layer, op, kernel, dispatch; x: kernel time "
                 f"({fmt_us(total)})</div></div>")
        rows = "".join(f"<tr><td style='font-family:monospace;text-align:left'>{escape(r['kernel'])}<div style='color:{FG2};"
                       f"font-size:10px;overflow-wrap:anywhere'>{escape(r['shape'])}</div></td>"
                       f"<td style='text-align:right;white-space:nowrap'>{fmt_us(r['us'])}</td>"
                       f"<td style='text-align:right'>{100 * r['share']:.1f}%</td></tr>"
                       for r in top_rows(self.timeline, self.top))
        table = (f"<div style='flex:2 1 240px;min-width:0'><table style='border-collapse:collapse;width:100%;"
                 f"font-size:12px'><tr><th style='text-align:left'>kernel (shape)</th><th>time</th><th>share</th></tr>"
                 f"{rows}</table></div>")
        return box(head + f"<div style='display:flex;flex-wrap:wrap;gap:8px 12px;margin-top:6px'>{flame}{table}</div>",
                   "scellis-profile")
