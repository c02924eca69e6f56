"""Static HTML/SVG pieces for the widgets' kernel-free form: self-contained (no script, no network), with
JupyterLab's theme variables and plain fallbacks, so the same markup reads in Lab (light or dark), in
nbconvert HTML and on a repository host."""
from __future__ import annotations

import math
from html import escape

import numpy as np

FG = "var(--jp-ui-font-color1, #222)"
FG2 = "var(--jp-ui-font-color2, #666)"
BORDER = "var(--jp-border-color2, #ddd)"
VERDICT = {"green": "#2e7d32", "yellow": "#e65100", "red": "#c62828"}
RUN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, i = float(n), 0
    while abs(v) >= 1024 and i < len(units) - 1:
        v, i = v / 1024, i + 1
    return f"{int(v)} B" if i == 0 else f"{v:.2f} {units[i]}" if v < 10 else f"{v:.1f} {units[i]}"


def box(inner: str, cls: str, accent: str | None = None) -> str:
    left = f"border-left:4px solid {accent};" if accent else ""
    return (f'<div class="scellis-static {cls}" style="font-family:var(--jp-ui-font-family,system-ui,sans-serif);'
            f"font-size:13px;color:{FG};border:1px solid {BORDER};{left}border-radius:4px;padding:8px 10px;"
            f'max-width:100%;box-sizing:border-box;overflow-x:auto">{inner}</div>')


def badge(text: str, color: str, data: dict | None = None) -> str:
    """A coloured pill; `data` adds data-* attributes (what tests and scrapers of a saved notebook read)."""
    attrs = "".join(f' data-{k}="{escape(str(v))}"' for k, v in (data or {}).items())
    return (f'<span{attrs} style="display:inline-block;padding:1px 8px;border-radius:10px;font-weight:700;color:#fff;'
            f'background:{color}">{escape(text)}</span>')


def decimate(x: np.ndarray, y: np.ndarray, max_points: int = 1200) -> tuple[np.ndarray, np.ndarray]:
    """At most ~max_points, keeping each bucket's min and max (a spike stays visible in the static curve)."""
    n = len(x)
    if n <= max_points:
        return x, y
    buckets = max_points // 2
    edges = np.linspace(0, n, buckets + 1).astype(int)
    keep = []
    for a, b in zip(edges[:-1], edges[1:]):
        if b <= a:
            continue
        seg = y[a:b]
        fin = np.isfinite(seg)
        if not fin.any():
            keep.append(a)
            continue
        idx = np.flatnonzero(fin)
        lo, hi = a + idx[np.argmin(seg[idx])], a + idx[np.argmax(seg[idx])]
        keep += sorted({int(lo), int(hi)})
    keep = np.asarray(keep)
    return x[keep], y[keep]


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / n for i in range(n + 1)]


def line_chart(series: list[dict], *, width: int = 640, height: int = 200, title: str = "", log_x: bool = False,
               log_y: bool = False, marks_x: list[float] = (), vline: float | None = None, xlabel: str = "step") -> str:
    """An SVG line chart: series dicts {label, x, y, color, dashed}; marks_x are red ticks at the bottom
    (skipped steps), vline a dashed marker (the suggested LR). Non-finite values are gaps."""
    ml, mr, mt, mb = 58, 10, 22 if title else 8, 30
    pw, ph = width - ml - mr, height - mt - mb
    tx = (lambda v: np.log10(v)) if log_x else (lambda v: v)
    ty = (lambda v: np.log10(v)) if log_y else (lambda v: v)
    xs_all, ys_all = [], []
    for s in series:
        x, y = np.asarray(s["x"], float), np.asarray(s["y"], float)
        ok = np.isfinite(x) & np.isfinite(y) & ((x > 0) if log_x else True) & ((y > 0) if log_y else True)
        xs_all.append(tx(x[ok])); ys_all.append(ty(y[ok]))
    xcat = np.concatenate(xs_all) if xs_all else np.zeros(0)
    ycat = np.concatenate(ys_all) if ys_all else np.zeros(0)
    if not len(xcat):
        body = f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="{FG2}">no points yet</text>'
        return _svg(width, height, title, body)
    x0, x1 = float(xcat.min()), float(xcat.max())
    y0, y1 = float(ycat.min()), float(ycat.max())
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5 * (abs(y0) or 1), y1 + 0.5 * (abs(y1) or 1)
    px = lambda v: ml + (v - x0) / (x1 - x0) * pw  # noqa: E731
    py = lambda v: mt + ph - (v - y0) / (y1 - y0) * ph  # noqa: E731
    parts = [f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="{BORDER}"/>']
    for v in _ticks(y0, y1):
        label = f"{10 ** v:.3g}" if log_y else f"{v:.4g}"
        parts.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="{BORDER}" stroke-width="0.5"/>'
                     f'<text x="{ml - 4}" y="{py(v) + 4:.1f}" text-anchor="end" font-size="10" fill="{FG2}">{label}</text>')
    for v in _ticks(x0, x1):
        label = f"{10 ** v:.2g}" if log_x else f"{v:.0f}" if x1 - x0 >= 8 else f"{v:.3g}"
        parts.append(f'<text x="{px(v):.1f}" y="{mt + ph + 14}" text-anchor="middle" font-size="10" fill="{FG2}">{label}</text>')
    parts.append(f'<text x="{ml + pw / 2}" y="{height - 3}" text-anchor="middle" font-size="10" fill="{FG2}">'
                 f'{escape(xlabel)}</text>')
    legend = []
    for i, s in enumerate(series):
        x, y = np.asarray(s["x"], float), np.asarray(s["y"], float)
        x, y = decimate(x, y)
        segs, cur = [], []
        for a, b in zip(x, y):
            if np.isfinite(a) and np.isfinite(b) and (a > 0 or not log_x) and (b > 0 or not log_y):
                cur.append(f"{px(tx(a)):.1f},{py(ty(b)):.1f}")
            elif cur:
                segs.append(cur); cur = []
        if cur:
            segs.append(cur)
        dash = ' stroke-dasharray="6 4"' if s.get("dashed") else ""
        for seg in segs:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{s["color"]}"/>')
            else:
                parts.append(f'<polyline fill="none" stroke="{s["color"]}" stroke-width="1.5"{dash} '
                             f'points="{" ".join(seg)}"/>')
        legend.append((s["label"], s["color"], s.get("dashed")))
    for m in marks_x:
        if x0 <= tx(m) <= x1:
            parts.append(f'<line x1="{px(tx(m)):.1f}" x2="{px(tx(m)):.1f}" y1="{mt + ph}" y2="{mt + ph - 10}" '
                         f'stroke="#d32f2f" stroke-width="2"/>')
    if vline is not None and vline > 0 and x0 <= tx(vline) <= x1:
        parts.append(f'<line x1="{px(tx(vline)):.1f}" x2="{px(tx(vline)):.1f}" y1="{mt}" y2="{mt + ph}" '
                     f'stroke="#d32f2f" stroke-dasharray="5 4" stroke-width="1.5"/>')
    lx = ml + 6
    for label, color, dashed in legend:
        da = ' stroke-dasharray="4 3"' if dashed else ""
        parts.append(f'<line x1="{lx}" x2="{lx + 16}" y1="{mt + 10}" y2="{mt + 10}" stroke="{color}" stroke-width="2"'
                     f'{da}/><text x="{lx + 20}" y="{mt + 14}" font-size="10" '
                     f'fill="{FG}">{escape(label)}</text>')
        lx += 30 + 6 * len(label)
    return _svg(width, height, title, "".join(parts))


def _svg(width: int, height: int, title: str, body: str) -> str:
    t = (f'<text x="6" y="15" font-size="12" font-weight="600" fill="{FG}">{escape(title)}</text>' if title else "")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
            f'style="max-width:{width}px;display:block" role="img" aria-label="{escape(title)}">{t}{body}</svg>')
