"""Static HTML/SVG pieces for the widgets' kernel-free form: self-contained (no script, no network), with
JupyterLab's theme variables and plain fallbacks, so the same markup reads in Lab (light or dark), in
nbconvert HTML and on a repository host."""
from __future__ import annotations

import math
import re
from html import escape

import numpy as np

FG = "var(--jp-ui-font-color1, #222)"
FG2 = "var(--jp-ui-font-color2, #666)"
BORDER = "var(--jp-border-color2, #ddd)"
VERDICT = {"green": "#2e7d32", "yellow": "#e65100", "red": "#c62828"}
RUN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
# how a chart's series are told apart (js/src/lib/chart.js says the same): one hue per metric, one dash per
# split, and runs by a shade of the metric's hue and a line width
METRIC_COLORS = RUN_COLORS
SPLIT_DASH: dict[str, list[int] | None] = {"train": None, "val": [6, 4], "test": [2, 3]}
_SHADES = [0, -0.35, 0.35, -0.6, 0.55]
_WIDTHS = [1.5, 2.5]


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


def split_of(name: str) -> tuple[str, str]:
    """(metric, split) of a series name: "val_loss" -> ("loss", "val"), "loss" -> ("loss", "train")."""
    m = re.match(r"^(train|val|valid|validation|test)_(.+)$", name)
    if not m:
        return name, "train"
    return m.group(2), "train" if m.group(1) == "train" else "test" if m.group(1) == "test" else "val"


def shade(color: str, f: float) -> str:
    """`color` (#rrggbb) mixed towards black (f < 0) or white (f > 0) by |f|."""
    t, a = (0 if f < 0 else 255), abs(f)
    return "#" + "".join(f"{round(v + a * (t - v)):02x}" for v in (int(color[i:i + 2], 16) for i in (1, 3, 5)))


def series_styles(keys: list[tuple[str, str]]) -> list[dict]:
    """How each (run, name) of one chart is drawn: {color, dash, width, label}; metrics get their hue and runs
    their shade and width by order of first appearance."""
    metrics = list(dict.fromkeys(split_of(n)[0] for _, n in keys))
    runs = list(dict.fromkeys(r for r, _ in keys))
    out = []
    for r, n in keys:
        metric, split = split_of(n)
        k = runs.index(r)
        out.append({"color": shade(METRIC_COLORS[metrics.index(metric) % len(METRIC_COLORS)], _SHADES[k % len(_SHADES)]),
                    "dash": SPLIT_DASH[split], "width": _WIDTHS[k % len(_WIDTHS)] if len(runs) > 1 else _WIDTHS[0],
                    "label": f"{r}: {n}" if len(runs) > 1 else n})
    return out


def y_range(lo: float, hi: float) -> tuple[float, float]:
    """A linear range over [lo, hi] with 5% headroom; a flat series gets a narrow band around its value."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0, 1.0
    if hi - lo <= 1e-12 * max(1.0, abs(hi)):
        pad = max(abs(hi) * 0.05, 1e-3)
        return lo - pad, hi + pad
    pad = 0.05 * (hi - lo)
    return lo - pad, hi + pad


def log_range(lo: float, hi: float) -> tuple[int, int]:
    """The enclosing decades (as exponents) of positive [lo, hi]; one decade at least."""
    if not (lo > 0 and hi > 0):
        return -1, 1
    a, b = math.floor(math.log10(lo) + 1e-6), math.ceil(math.log10(hi) - 1e-6)
    return a, max(b, a + 1)


def log_height(lo: float, hi: float, base: int = 200, cap: int = 480) -> int:
    """A log-y chart's height: at least `base`, ~32 px per decade (capped), as js/src/lib/chart.js logHeight."""
    a, b = log_range(lo, hi)
    return min(cap, max(base, 100 + 32 * (b - a)))


def nice_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """Ticks at 1, 2, 2.5, 5 x 10^k covering [lo, hi], two at least, no two alike (js niceTicks says the same)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    lo, hi = min(lo, hi), max(lo, hi)
    if hi == lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    out, k = [], math.ceil(lo / step - 1e-9)
    while k * step <= hi + step * 1e-9:
        out.append(float(f"{k * step:.12g}"))
        k += 1
    return nice_ticks(lo, hi, 2 * n) if len(out) < 2 and n < 32 else out


def fmt_tick(v: float, digits: int = 3) -> str:
    """A short tick label (js/src/lib/ticks.js fmtTick): 0.003 -> 3e-3, 1.5, 2e5, 300."""
    if not math.isfinite(v):
        return ""
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e4 or a < 1e-2:
        m, e = f"{v:.{digits - 3}e}".split("e")
        return f"{m}e{int(e)}"
    return f"{float(f'{v:.{digits}g}'):.12g}"


def fmt_ticks(values: list[float]) -> list[str]:
    """Labels for a set of ticks with as many digits as distinct ticks need to read distinct (js fmtTicks)."""
    out = [fmt_tick(v) for v in values]
    distinct = len({v for v in values if math.isfinite(v)})
    d = 4
    while len({x for x in out if x}) < distinct and d <= 12:
        out, d = [fmt_tick(v, d) for v in values], d + 1
    return out


def line_chart(series: list[dict], *, width: int = 640, height: int = 200, title: str = "", log_x: bool = False,
               log_y: bool = False, marks_x: list[float] = (), vline: float | None = None, xlabel: str = "step",
               x_range: tuple[float, float] | None = None) -> str:
    """An SVG line chart: series dicts {label, x, y, color, dashed or dash (a dash array), width}; marks_x are
    red ticks at the bottom (skipped steps), vline a dashed marker (the suggested LR), x_range the x axis's
    span when it is shared (every panel spans the run's steps). Non-finite values are gaps. A log y axis spans
    whole decades and the chart grows with them (~32 px a decade)."""
    ml, mr, mt, mb = 58, 10, 22 if title else 8, 30
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
    x0, x1 = (float(tx(x_range[0])), float(tx(x_range[1]))) if x_range else (float(xcat.min()), float(xcat.max()))
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if log_y:                                     # ycat is log10 already: whole decades, and room for them
        a, b = log_range(10 ** float(ycat.min()), 10 ** float(ycat.max()))
        y0, y1 = float(a), float(b)
        height = max(height, log_height(10 ** a, 10 ** b))
    else:
        y0, y1 = y_range(float(ycat.min()), float(ycat.max()))
    pw, ph = width - ml - mr, height - mt - mb
    px = lambda v: ml + (v - x0) / (x1 - x0) * pw  # noqa: E731
    py = lambda v: mt + ph - (v - y0) / (y1 - y0) * ph  # noqa: E731
    parts = [f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="{BORDER}"/>']
    yt = [float(k) for k in range(int(y0), int(y1) + 1)] if log_y else nice_ticks(y0, y1)
    for v, label in zip(yt, fmt_ticks([10 ** v for v in yt] if log_y else yt)):
        parts.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="{BORDER}" stroke-width="0.5"/>'
                     f'<text x="{ml - 4}" y="{py(v) + 4:.1f}" text-anchor="end" font-size="10" fill="{FG2}">{label}</text>')
    xt = [float(k) for k in range(math.ceil(x0), math.floor(x1) + 1)] if log_x else nice_ticks(x0, x1)
    if log_x and len(xt) < 2:
        xt = nice_ticks(x0, x1)
    for v, label in zip(xt, fmt_ticks([10 ** v for v in xt] if log_x else xt)):
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
        da = s.get("dash") or ([6, 4] if s.get("dashed") else None)
        dash = f' stroke-dasharray="{" ".join(map(str, da))}"' if da else ""
        sw = s.get("width", 1.5)
        for seg in segs:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{s["color"]}"/>')
            else:
                parts.append(f'<polyline fill="none" stroke="{s["color"]}" stroke-width="{sw}"{dash} '
                             f'points="{" ".join(seg)}"/>')
        legend.append((s["label"], s["color"], da, sw))
    for m in marks_x:
        if x0 <= tx(m) <= x1:
            parts.append(f'<line x1="{px(tx(m)):.1f}" x2="{px(tx(m)):.1f}" y1="{mt + ph}" y2="{mt + ph - 10}" '
                         f'stroke="#d32f2f" stroke-width="2"/>')
    if vline is not None and vline > 0 and x0 <= tx(vline) <= x1:
        parts.append(f'<line x1="{px(tx(vline)):.1f}" x2="{px(tx(vline)):.1f}" y1="{mt}" y2="{mt + ph}" '
                     f'stroke="#d32f2f" stroke-dasharray="5 4" stroke-width="1.5"/>')
    lx = ml + 6
    for label, color, dash, sw in legend:
        da = f' stroke-dasharray="{" ".join(map(str, dash))}"' if dash else ""
        parts.append(f'<line x1="{lx}" x2="{lx + 16}" y1="{mt + 10}" y2="{mt + 10}" stroke="{color}" stroke-width="{sw + 0.5}"'
                     f'{da}/><text x="{lx + 20}" y="{mt + 14}" font-size="10" '
                     f'fill="{FG}">{escape(label)}</text>')
        lx += 30 + 6 * len(label)
    return _svg(width, height, title, "".join(parts))


def _svg(width: int, height: int, title: str, body: str) -> str:
    t = (f'<text x="6" y="15" font-size="12" font-weight="600" fill="{FG}">{escape(title)}</text>' if title else "")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
            f'style="max-width:{width}px;display:block" role="img" aria-label="{escape(title)}">{t}{body}</svg>')
