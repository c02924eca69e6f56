"""LRFinderView: loss against learning rate (log axis) from the range test, the suggestion marked, and a
button that writes it into the spec through `on_apply(lr) -> new cell text`."""
from __future__ import annotations

import math
from html import escape
from typing import Callable

import numpy as np
import traitlets as t

from ._base import ScellisWidget, bundle, error_text
from ._static import FG2, box, line_chart


def _clean(xs) -> list:
    return [float(x) if x is not None and math.isfinite(float(x)) else None for x in xs]


class LRFinderView(ScellisWidget):
    _esm, _css = bundle("lr_finder_view")
    lrs = t.List().tag(sync=True)
    losses = t.List().tag(sync=True)
    suggested = t.Float(None, allow_none=True).tag(sync=True)
    can_apply = t.Bool(False).tag(sync=True)
    error = t.Unicode("").tag(sync=True)
    _last_write = t.Dict().tag(sync=True)        # the view's last cell write: {status, text, n}

    def __init__(self, lrs: np.ndarray, losses: np.ndarray, suggested: float | None, *,
                 on_apply: Callable[[float], str | None] | None = None):
        lrs, losses = np.asarray(lrs, float), np.asarray(losses, float)
        if lrs.shape != losses.shape or lrs.ndim != 1:
            raise ValueError(f"lrs and losses must be 1-D of one length, got {lrs.shape} and {losses.shape}")
        super().__init__(lrs=_clean(lrs), losses=_clean(losses),
                         suggested=None if suggested is None else float(suggested), can_apply=on_apply is not None)
        self.on_apply = on_apply
        self.cell_texts: list[str] = []

    def apply(self) -> str | None:
        if self.on_apply is None or self.suggested is None:
            raise ValueError("nothing to apply (no on_apply, or no suggestion)")
        text = self.on_apply(self.suggested)
        if text is not None:
            self.cell_texts.append(text)
        return text

    def _on_apply(self, content, buffers) -> None:
        text = None
        try:
            text = self.apply()
            self.error = ""
        except Exception as e:
            self.error = error_text(e)
        self.send({"type": "applied", "token": content.get("token"), "text": text})

    def _static_text(self) -> str:
        s = f"{self.suggested:.3g}" if self.suggested is not None else "none"
        return f"LRFinderView: {len(self.lrs)} points, suggested lr {s}"

    def _static_html(self) -> str:
        x = np.array([v if v is not None else np.nan for v in self.lrs], float)
        y = np.array([v if v is not None else np.nan for v in self.losses], float)
        positive = bool(np.all(y[np.isfinite(y)] > 0))
        chart = line_chart([{"label": "loss", "x": x, "y": y, "color": "#1f77b4"}], log_x=True, log_y=positive,
                           vline=self.suggested,
                           xlabel="learning rate (log)", title="LR range test")
        s = f"suggested lr {self.suggested:.3g}" if self.suggested is not None else "no suggestion (too few points)"
        return box(f'<div><b>LR range test</b> <span style="color:{FG2}">{escape(s)}</span></div>{chart}',
                   "scellis-lrfinder")
