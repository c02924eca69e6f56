"""RoundMonitorView: a federation's rounds live in the notebook (per-site progress, the metric per round,
the (eps, delta) spent against the budget), fed by the federation's listeners as each round lands.

Why a wrapper around `federated.monitor.RoundMonitor`: that class is the record (what a round reported) and
the kernel-free text/HTML/SVG form; this widget only re-publishes its state to the browser after every round
(one JSON trait, NaN as null: a site under DP sends no loss) and re-renders the static form, so a notebook
saved mid-training or after it shows the same numbers. `jupyter` may import `federated`, never the reverse.
"""
from __future__ import annotations

import math
import threading
from html import escape
from typing import Any

import traitlets as t

from ...federated.monitor import RoundMonitor
from ._base import ScellisWidget, WidgetError, bundle
from ._static import BORDER, FG2, fmt_ticks, nice_ticks, y_range


def _plain(v: Any) -> Any:
    """JSON-safe: non-finite floats (a site's unsent loss) become None, tuples lists, keys strings."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and callable(v.item):          # numpy scalars
        return _plain(v.item())
    return v


def rounds_svg(rounds: list[dict], metric: str, width: int = 360, height: int = 120) -> str:
    """The metric per round with a y axis of ticks (js/src/lib/rounds.js curve and round_monitor.js say the
    same); a single value gets a narrow band around it."""
    pad, left = 24, 44
    pts = [(r["round"], r["metric"]) for r in rounds if r.get("metric") is not None and math.isfinite(r["metric"])]
    axes = (f'<line x1="{left}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="{BORDER}"/>'
            f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{height - pad}" stroke="{BORDER}"/>')
    body = f'<text x="{left + 6}" y="{height / 2}" font-size="10" fill="{FG2}">no {escape(metric)} yet</text>'
    if pts:
        n = max(p[0] for p in pts)
        lo, hi = min(p[1] for p in pts), max(p[1] for p in pts)
        y0, y1 = (lo, hi) if hi > lo else y_range(lo, hi)

        def y(v: float) -> float:
            return height - pad - (v - y0) / (y1 - y0) * (height - 2 * pad)
        ticks = nice_ticks(y0, y1, 3)
        body = "".join(
            f'<line x1="{left - 4}" x2="{width - pad}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="{BORDER}" stroke-width="0.5"/>'
            f'<text class="scellis-ytick" x="{left - 6}" y="{y(v) + 3:.1f}" text-anchor="end" font-size="10" '
            f'fill="{FG2}">{label}</text>' for v, label in zip(ticks, fmt_ticks(ticks)))
        body += (f'<polyline fill="none" stroke="#2a6fdb" stroke-width="2" points="'
                 + " ".join(f"{left + (x - 1) / max(1, n - 1) * (width - left - pad):.1f},{y(v):.1f}" for x, v in pts)
                 + f'"/><text x="{left}" y="12" font-size="10" fill="{FG2}">{escape(metric)} {lo:.3f}..{hi:.3f}, '
                 f'last {pts[-1][1]:.4f}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img" aria-label="{escape(metric)} per round">{axes}{body}</svg>')


class RoundMonitorView(ScellisWidget):
    """`RoundMonitorView(fed, rounds=10)`, displayed before `fed.fit(...)`: it updates as each round lands.

    `rounds`: how many rounds are planned (the per-site progress bars fill towards it; without it they show
    rounds answered of rounds run). `metric`: the key of `fit(evaluate=...)`'s dict that the curve draws.
    """

    _esm, _css = bundle("round_monitor")
    state = t.Dict().tag(sync=True)
    metric = t.Unicode("accuracy").tag(sync=True)
    planned = t.Int(0).tag(sync=True)
    live = t.Dict().tag(sync=True)       # the round in flight: {"round", "waiting": [...], "done": [...]}

    def __init__(self, federation: Any, *, metric: str = "accuracy", rounds: int | None = None):
        if not hasattr(federation, "listeners") or not hasattr(federation, "rounds"):
            raise WidgetError(f"RoundMonitorView needs a Federation, not a {type(federation).__name__}",
                              where="RoundMonitorView", hint="give the scellis_jupyter.federated.Federation")
        if rounds is not None and int(rounds) < 0:
            raise WidgetError(f"rounds={rounds} is negative", where="RoundMonitorView(rounds=...)",
                              hint="give the number of rounds you will fit, or leave it out")
        self.monitor = RoundMonitor(federation, metric)
        super().__init__(metric=metric, planned=int(rounds or 0), state=_plain(self.monitor.state()))
        self.updates = 0
        self._live_lock = threading.Lock()
        federation.listeners.append(self._on_round)
        if hasattr(federation, "progress"):
            federation.progress.append(self._on_progress)

    def _on_progress(self, ev: dict) -> None:
        """A round started, or one site's task ended: the per-site state of the round in flight."""
        with self._live_lock:          # a fit may run in a background thread while a view syncs
            if ev.get("kind") == "round_start":
                self.live = {"round": int(ev["round"]), "waiting": [str(s) for s in ev["sites"]], "done": []}
            elif ev.get("kind") == "site_done" and self.live.get("round") == ev.get("round"):
                s = str(ev["site"])
                live = dict(self.live)
                live["waiting"] = [w for w in live["waiting"] if w != s]
                live["done"] = [*live["done"], s] if ev.get("status") == "finished" else live["done"]
                self.live = live

    def expect(self, rounds: int) -> None:
        """Say how many more rounds are coming (the progress bars' target grows by that many)."""
        self.planned = max(self.planned, len(self.monitor.fed.rounds)) + int(rounds)

    def _on_round(self, _result) -> None:
        self.updates += 1
        self.state = _plain(self.monitor.state())      # a new dict: a Dict trait syncs when replaced
        self.refresh_static()

    def _static_text(self) -> str:
        return repr(self.monitor)

    def _static_html(self) -> str:
        return self.monitor._repr_html_(chart=rounds_svg(self.state.get("rounds") or [], self.metric))
