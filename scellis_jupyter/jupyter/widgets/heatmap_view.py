"""HeatmapView: a sweep's metric over two hyperparameters, filled cell by cell as the pool finishes runs."""
from __future__ import annotations

import math
from html import escape

import traitlets as t

from ._base import ScellisWidget, WidgetError, bundle
from ._static import FG2, box

VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"]


def ramp(f: float) -> str:
    """The viridis colour at f in [0, 1] (js/src/lib/colors.js interpolates the same stops)."""
    f = min(1.0, max(0.0, f)) * (len(VIRIDIS) - 1)
    i = min(len(VIRIDIS) - 2, int(f))
    a = [int(VIRIDIS[i][k:k + 2], 16) for k in (1, 3, 5)]
    b = [int(VIRIDIS[i + 1][k:k + 2], 16) for k in (1, 3, 5)]
    return "rgb(" + ",".join(str(round(u + (f - i) * (v - u))) for u, v in zip(a, b)) + ")"


class HeatmapView(ScellisWidget):
    _esm, _css = bundle("heatmap_view")
    x_name = t.Unicode().tag(sync=True)
    y_name = t.Unicode().tag(sync=True)
    x_values = t.List().tag(sync=True)
    y_values = t.List().tag(sync=True)
    metric = t.Unicode().tag(sync=True)
    values = t.List().tag(sync=True)

    def __init__(self, x_name: str, x_values: list, y_name: str, y_values: list, metric: str):
        xs, ys = [_jsonable(v) for v in x_values], [_jsonable(v) for v in y_values]
        super().__init__(x_name=x_name, y_name=y_name, x_values=xs, y_values=ys, metric=metric,
                         values=[[None] * len(xs) for _ in ys])

    def set_cell(self, i: int, j: int, value: float) -> None:
        """Row i (y_values[i]), column j (x_values[j]) gets `value` (a finished run's metric)."""
        if not (0 <= i < len(self.y_values) and 0 <= j < len(self.x_values)):
            raise WidgetError(f"cell ({i}, {j}) is outside the {len(self.y_values)}x{len(self.x_values)} grid",
                              where="HeatmapView.set_cell")
        v = float(value)
        rows = [list(r) for r in self.values]
        rows[i][j] = v if math.isfinite(v) else None
        self.values = rows           # reassigned: a List trait syncs only when replaced
        if all(c is not None for r in rows for c in r):
            self.refresh_static()

    def _static_text(self) -> str:
        lines = [f"HeatmapView {self.metric} by {self.y_name} x {self.x_name}"]
        for y, row in zip(self.y_values, self.values):
            lines.append(f"  {self.y_name}={y}: " + "  ".join("…" if v is None else f"{v:.4g}" for v in row))
        return "\n".join(lines)

    def _static_html(self) -> str:
        fin = [v for r in self.values for v in r if v is not None]
        lo, hi = (min(fin), max(fin)) if fin else (0.0, 1.0)
        head = "".join(f"<th>{escape(str(x))}</th>" for x in self.x_values)
        rows = []
        for y, row in zip(self.y_values, self.values):
            cells = []
            for v in row:
                if v is None:
                    cells.append(f"<td style='text-align:center;color:{FG2}'>…</td>")
                else:
                    f = (v - lo) / (hi - lo) if hi > lo else 0.5
                    cells.append(f"<td style='text-align:center;background:{ramp(f)};color:{'#000' if f > 0.6 else '#fff'}'>"
                                 f"{v:.4g}</td>")
            rows.append(f"<tr><th>{escape(str(y))}</th>{''.join(cells)}</tr>")
        table = (f"<table style='border-collapse:collapse'><tr><th style='color:{FG2}'>{escape(self.y_name)} \\ "
                 f"{escape(self.x_name)}</th>{head}</tr>{''.join(rows)}</table>")
        return box(f"<div style='font-weight:600'>{escape(self.metric)} by {escape(self.y_name)} × {escape(self.x_name)}</div>"
                   + table, "scellis-heatmap")


def _jsonable(v):
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)
