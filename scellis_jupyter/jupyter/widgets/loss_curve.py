"""LossCurve: loss, metrics and learning rate per step, live while a run trains, several runs overlaid.

Why binary chunks: the series live in the kernel (a SeriesStore); new points go to the browser as packed
chunks (custom messages with one buffer), at most ~5 a second after the first three, and the whole store
goes out only when a view asks (a page reload), so a 100k-step curve never resends itself per update. The
`_packed` trait holds the curve decimated to SAVE_POINTS per series (min/max per bucket): what a notebook
saved with widget state keeps, so five widgets stay well under a megabyte.
"""
from __future__ import annotations

import math
import threading
import uuid
from html import escape
from typing import Any, Callable

import numpy as np
import traitlets as t

from ._base import ScellisWidget, bundle
from ._series import SeriesStore
from ._static import FG2, box, line_chart, series_styles
from ._throttle import Throttle

TERMINAL = ("finished", "failed", "interrupted", "refused")
SAVE_POINTS = 5000          # per series in the `_packed` trait (saved widget state); js/src/lib/store.js agrees


def group_of(name: str) -> str:
    """Which panel a series is drawn in (js/src/lib/pack.js groupOf says the same)."""
    return "lr" if name == "lr" else "loss" if "loss" in name else "metrics"


class LossCurve(ScellisWidget):
    _esm, _css = bundle("loss_curve")
    title = t.Unicode("").tag(sync=True)
    log_y = t.Bool(False).tag(sync=True)
    _packed = t.Bytes(b"").tag(sync=True)
    _uid = t.Unicode().tag(sync=True)           # the browser keeps one series store per uid

    def __init__(self, *, title: str = "", interval: float = 0.2, immediate: int = 3):
        super().__init__(title=title, _uid=uuid.uuid4().hex)
        self.store = SeriesStore()
        self._push = Throttle(self._send_pending, interval=interval, immediate=immediate)
        self._unsubs: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.sent_chunks = 0

    # ---- data in ----------------------------------------------------------------------------------------
    def add(self, run_key: str, series: str, steps: np.ndarray, values: np.ndarray,
            skipped: np.ndarray | None = None) -> None:
        """Append whole arrays (a finished run's history, a loaded record); `skipped`: a bool mask or steps."""
        self.store.extend(run_key, series, steps, values, skipped)
        self._snapshot()

    def append(self, run_key: str, series: str, step: int, value: float, skipped: bool = False) -> None:
        """One point, throttled to the browser (what follow() does per event)."""
        self.store.append(run_key, series, step, value, skipped)
        self._push()

    def follow(self, run: Any, key: str | None = None) -> Callable[[], None]:
        """Subscribe to a BackgroundRun-like run: step events -> loss and lr, eval events -> metrics; the
        whole curve is re-sent and the static form refreshed when the run ends. Returns unsubscribe."""
        k = str(key or getattr(run, "name", None) or getattr(run, "run_id", None) or f"run{len(self._unsubs)}")

        def on(ev: dict) -> None:
            kind = ev.get("kind")
            if kind == "step":
                loss = ev.get("loss")
                loss = float("nan") if loss is None else float(loss)
                skipped = bool(ev.get("skipped")) or not math.isfinite(loss)
                self.store.append(k, "loss", ev["step"], loss, skipped)
                if ev.get("lr") is not None:
                    self.store.append(k, "lr", ev["step"], float(ev["lr"]))
                self._push()
            elif kind == "eval":
                for name, v in (ev.get("metrics") or {}).items():
                    if v is not None:
                        self.store.append(k, name, ev["step"], float(v))
                self._push()
            elif kind == "state" and ev.get("state") in TERMINAL:
                self.flush()

        unsub = run.subscribe(on)
        self._unsubs.append(unsub)
        return unsub

    def flush(self) -> None:
        """Everything to the browser now and the static form refreshed (a run ended)."""
        self._push.flush()
        self._snapshot()
        self.refresh_static()

    def close(self) -> None:
        for u in self._unsubs:
            u()
        self._unsubs.clear()
        super().close()

    # ---- to the browser -----------------------------------------------------------------------------
    def _send_pending(self) -> None:
        with self._lock:
            self._send_chunk()

    def _send_chunk(self) -> None:
        chunk = self.store.pending()
        if chunk is not None:
            self.send({"type": "append"}, [chunk])
            self.sent_chunks += 1

    def _snapshot(self) -> None:
        """The decimated curve into `_packed`: what a notebook saved with widget state keeps."""
        with self._lock:
            self._packed = self.store.snapshot(SAVE_POINTS)

    def _on_sync(self, content, buffers) -> None:
        """A view opened (a page reload): every point as one snapshot, which replaces the browser's store; the
        pending points are in it, so the next chunk starts after it (each point reaches the browser once)."""
        with self._lock:
            self.send({"type": "snapshot"}, [self.store.snapshot(mark_sent=True)])

    # ---- static form --------------------------------------------------------------------------------
    def _groups(self) -> dict[str, list]:
        """Per panel, its series as line_chart wants them: one hue per metric, a dash per split, runs by shade
        and width (js/src/lib/chart.js seriesStyles)."""
        arrays = self.store.arrays()
        keys: dict[str, list] = {}
        for r, n in arrays:
            if len(arrays[(r, n)][0]):
                keys.setdefault(group_of(n), []).append((r, n))
        out: dict[str, list] = {}
        for g, ks in keys.items():
            for (r, n), st in zip(ks, series_styles(ks)):
                s, v, k = arrays[(r, n)]
                out.setdefault(g, []).append({"label": st["label"], "x": s, "y": v, "skipped": k, "color": st["color"],
                                              "dash": st["dash"], "width": st["width"], "name": n})
        return out

    def _static_text(self) -> str:
        lines = [f"LossCurve {self.title!r}".rstrip()]
        for (r, n), (s, v, k) in self.store.arrays().items():
            fin = v[np.isfinite(v)]
            last = f"{fin[-1]:.6g}" if len(fin) else "–"
            lines.append(f"  {r}: {n}: {len(s)} points, last step {int(s[-1]) if len(s) else '–'}, last {last}"
                         + (f", {len(k)} skipped" if len(k) else ""))
        return "\n".join(lines)

    def _static_html(self) -> str:
        groups = self._groups()
        steps = [float(x) for ss in groups.values() for s in ss for x in (s["x"][0], s["x"][-1])]
        span = (min(steps), max(steps)) if steps else None      # every panel spans the run's steps
        charts = []
        for g, label in (("loss", "Loss"), ("metrics", "Metrics"), ("lr", "Learning rate")):
            if g in groups:
                marks = [int(x) for s in groups[g] for x in s["skipped"]] if g == "loss" else []
                charts.append(line_chart(groups[g], title=label, log_y=self.log_y and g == "loss",
                                         height=140 if g == "lr" else 200, marks_x=marks, x_range=span))
        n = sum(len(s["x"]) for s in groups.get("loss", []) if s["name"] == "loss")
        head = (f'<div style="font-weight:600">{escape(self.title or "Training curves")} '
                f'<span style="color:{FG2};font-weight:400">{n} steps</span></div>')
        return box(head + ("".join(charts) or f'<div style="color:{FG2}">no points yet</div>'), "scellis-curve")
