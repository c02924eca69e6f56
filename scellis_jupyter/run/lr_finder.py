"""The LR range test (Smith 2017, "Cyclical Learning Rates", §3.3; popularised by fastai's lr_find).

Why: one short run with the LR growing every step shows where the loss starts to fall and where training
blows up; the LR where the smoothed loss falls fastest is a good starting LR (and the bounds of a
`cyclic` schedule). The finder only calls `step_fn(lr) -> loss`, so it works with any training step; the
caller resets the weights before (and after) the test. Losses are smoothed by a bias-corrected
exponential moving average, as fastai does, and the test stops once the smoothed loss exceeds
`diverge` times the best seen.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from xml.sax.saxutils import escape

import numpy as np

from ..errors import LRFinderError, did_you_mean

__all__ = ["lr_range_test", "LRFinderResult", "LRFinderError", "steepest_lr"]

MODES = ("exp", "linear")


def _finite(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x)


@dataclass
class LRFinderResult:
    """What the range test saw: one entry per step run, in order; `suggestion` may be None (too few points)."""

    lrs: list[float]
    losses: list[float]
    smoothed: list[float]
    suggestion: float | None
    stopped_early: bool
    reason: str                       # "diverged", "non-finite loss" or "completed"
    settings: dict = field(default_factory=dict)

    @property
    def best_lr(self) -> float | None:
        """The LR at the lowest smoothed loss (usually too high to train at: the suggestion is below it)."""
        fin = [(s, lr) for s, lr in zip(self.smoothed, self.lrs) if _finite(s)]
        return min(fin)[1] if fin else None

    def to_dict(self) -> dict:
        """Strict-JSON-able (non-finite losses become None)."""
        clean = lambda xs: [x if _finite(x) else None for x in xs]  # noqa: E731
        return {"lrs": list(self.lrs), "losses": clean(self.losses), "smoothed": clean(self.smoothed),
                "suggestion": self.suggestion, "best_lr": self.best_lr, "stopped_early": self.stopped_early,
                "reason": self.reason, "settings": dict(self.settings)}

    def plot(self, path: str | Path | None = None) -> str:
        """An SVG line chart (log LR axis, raw and smoothed loss, suggestion marked); written to path if given."""
        svg = _svg(self)
        if path is not None:
            Path(path).write_text(svg, encoding="utf-8")
        return svg

    def _repr_svg_(self) -> str:      # Jupyter shows the chart
        return self.plot()

    def __repr__(self) -> str:
        sug = "none" if self.suggestion is None else f"{self.suggestion:.3g}"
        return f"LRFinderResult({len(self.lrs)} steps, {self.reason}, suggestion={sug})"


def lr_range_test(step_fn: Callable[[float], float], lr_min: float = 1e-7, lr_max: float = 10.0, num: int = 100,
                  mode: str = "exp", smooth: float = 0.98, diverge: float = 4.0) -> LRFinderResult:
    """Run `step_fn(lr)` for num LRs from lr_min to lr_max (geometric for "exp", evenly spaced for "linear").

    Stops early when a loss is not finite or the smoothed loss exceeds diverge x the best smoothed loss.
    """
    _validate(step_fn, lr_min, lr_max, num, mode, smooth, diverge)
    if mode == "exp":
        grid = [lr_min * (lr_max / lr_min) ** (i / (num - 1)) for i in range(num)]
    else:
        grid = [lr_min + (lr_max - lr_min) * i / (num - 1) for i in range(num)]
    grid[-1] = float(lr_max)
    lrs, losses, smoothed = [], [], []
    avg, best, reason = 0.0, math.inf, "completed"
    for i, lr in enumerate(grid):
        raw = step_fn(lr)
        try:
            loss = float(raw)
        except (TypeError, ValueError):
            raise LRFinderError(f"step_fn({lr:.3g}) returned {type(raw).__name__}, not a loss",
                                where=f"lr_range_test step {i}",
                                hint="step_fn(lr) must run one training step and return its loss as a number") from None
        avg = smooth * avg + (1 - smooth) * loss
        s = avg / (1 - smooth ** (i + 1))            # bias correction: the average starts at 0
        lrs.append(float(lr))
        losses.append(loss)
        smoothed.append(s)
        if not math.isfinite(loss) or not math.isfinite(s):
            reason = "non-finite loss"
            break
        best = min(best, s)
        if s > best + (diverge - 1) * abs(best):     # diverge x best for positive losses
            reason = "diverged"
            break
    settings = {"lr_min": float(lr_min), "lr_max": float(lr_max), "num": int(num), "mode": mode,
                "smooth": float(smooth), "diverge": float(diverge)}
    return LRFinderResult(lrs, losses, smoothed, steepest_lr(lrs, smoothed), reason != "completed", reason,
                          settings)


def steepest_lr(lrs: list[float], smoothed: list[float]) -> float | None:
    """The LR where the smoothed loss falls fastest per decade of LR, before its minimum ("steep" rule).

    The first tenth of the points is skipped (the moving average is still settling there, as fastai skips
    them), and only points up to the minimum count, so the blow-up at the end cannot win. None when fewer
    than three points remain or the curve never falls.
    """
    n = 0
    while n < len(smoothed) and _finite(smoothed[n]):
        n += 1
    if n < 3:
        return None
    y = np.asarray(smoothed[:n], dtype=np.float64)
    x = np.log10(np.asarray(lrs[:n], dtype=np.float64))
    end = int(np.argmin(y)) + 1
    start = len(y) // 10
    if end - start < 3:
        start = 0
    if end - start < 3:
        return None
    slope = np.gradient(y[start:end], x[start:end])
    k = int(np.argmin(slope))
    return float(lrs[start + k]) if slope[k] < 0 else None


def _validate(step_fn, lr_min, lr_max, num, mode, smooth, diverge) -> None:
    def num_ok(v):
        return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    where = "lr_range_test"
    if not callable(step_fn):
        raise LRFinderError(f"step_fn must be callable, got {type(step_fn).__name__}", where=where,
                            hint="pass a function lr -> loss that runs one training step")
    if not num_ok(lr_min) or lr_min <= 0:
        raise LRFinderError(f"lr_min={lr_min!r} must be a finite number > 0", where=where,
                            hint="the LR axis is logarithmic; e.g. lr_min=1e-7")
    if not num_ok(lr_max) or lr_max <= lr_min:
        raise LRFinderError(f"lr_max={lr_max!r} must be finite and above lr_min={lr_min!r}", where=where,
                            hint="e.g. lr_max=10.0")
    if isinstance(num, bool) or not isinstance(num, int) or num < 3:
        raise LRFinderError(f"num={num!r} must be an int >= 3", where=where, hint="e.g. num=100")
    if mode not in MODES:
        raise LRFinderError(f"mode={mode!r} is not one of {', '.join(map(repr, MODES))}", where=where,
                            hint=did_you_mean(str(mode), MODES) or "use 'exp' (geometric LRs) or 'linear'")
    if not num_ok(smooth) or not 0 <= smooth < 1:
        raise LRFinderError(f"smooth={smooth!r} must be in [0, 1)", where=where,
                            hint="0 = no smoothing; fastai uses 0.98")
    if not num_ok(diverge) or diverge <= 1:
        raise LRFinderError(f"diverge={diverge!r} must be a number > 1", where=where, hint="e.g. diverge=4.0")


# ---- the chart ---------------------------------------------------------------------------------------
_W, _H, _L, _R, _T, _B = 560, 320, 64, 16, 28, 44


def _svg(r: LRFinderResult) -> str:
    """A small hand-written SVG: no plotting library, so it renders anywhere a notebook does."""
    pts = [(lr, lo, s) for lr, lo, s in zip(r.lrs, r.losses, r.smoothed)]
    fin = [s for _, _, s in pts if _finite(s)] + [lo for _, lo, _ in pts if _finite(lo)]
    x_lo = math.log10(min(r.lrs)) if r.lrs else -7.0
    x_hi = math.log10(max(r.lrs)) if r.lrs else 1.0
    if x_hi - x_lo < 1e-12:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    sm = [s for _, _, s in pts if _finite(s)]
    y_lo = min(fin) if fin else 0.0
    # the blow-up at the end would squash the curve: cap the axis at the start or diverge x best, clip above
    y_hi = min(max(sm), max(sm[0], r.settings.get("diverge", 4.0) * min(sm))) if sm else 1.0
    if y_hi - y_lo < 1e-12 * max(1.0, abs(y_hi)):
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    pw, ph = _W - _L - _R, _H - _T - _B

    def px(lr: float) -> float:
        return _L + (math.log10(lr) - x_lo) / (x_hi - x_lo) * pw

    def py(v: float) -> float:
        v = min(max(v, y_lo), y_hi)
        return _T + (y_hi - v) / (y_hi - y_lo) * ph

    def line(vals, color, width):
        xy = " ".join(f"{px(lr):.2f},{py(v):.2f}" for lr, v in vals if _finite(v))
        return f'<polyline fill="none" stroke="{color}" stroke-width="{width}" points="{xy}"/>' if xy else ""

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="white"/>',
           f'<text x="{_L}" y="16" font-size="13">{escape(f"LR range test ({r.reason})")}</text>',
           f'<rect x="{_L}" y="{_T}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>']
    for d in range(math.ceil(x_lo - 1e-9), math.floor(x_hi + 1e-9) + 1):
        x = _L + (d - x_lo) / (x_hi - x_lo) * pw
        out.append(f'<line x1="{x:.2f}" y1="{_T}" x2="{x:.2f}" y2="{_T + ph}" stroke="#eee"/>')
        out.append(f'<text x="{x:.2f}" y="{_T + ph + 16}" text-anchor="middle">1e{d}</text>')
    for i in range(5):
        v = y_lo + (y_hi - y_lo) * i / 4
        y = py(v)
        out.append(f'<line x1="{_L - 4}" y1="{y:.2f}" x2="{_L}" y2="{y:.2f}" stroke="#444"/>')
        out.append(f'<text x="{_L - 6}" y="{y + 4:.2f}" text-anchor="end">{escape(f"{v:.3g}")}</text>')
    out.append(f'<text x="{_L + pw / 2:.1f}" y="{_H - 8}" text-anchor="middle">learning rate (log scale)</text>')
    out.append(f'<text x="14" y="{_T + ph / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {_T + ph / 2:.1f})">loss</text>')
    out.append(line([(lr, lo) for lr, lo, _ in pts], "#bbbbbb", 1))
    out.append(line([(lr, s) for lr, _, s in pts], "#1f77b4", 2))
    if r.suggestion is not None:
        x = px(r.suggestion)
        out.append(f'<line x1="{x:.2f}" y1="{_T}" x2="{x:.2f}" y2="{_T + ph}" stroke="#d62728" '
                   f'stroke-dasharray="4 3"><title>suggested lr</title></line>')
        anchor = "start" if x < _L + pw * 0.7 else "end"
        dx = 4 if anchor == "start" else -4
        out.append(f'<text x="{x + dx:.2f}" y="{_T + 14}" fill="#d62728" text-anchor="{anchor}">'
                   f'{escape(f"suggested {r.suggestion:.3g}")}</text>')
    out.append("</svg>")
    return "\n".join(s for s in out if s) + "\n"

