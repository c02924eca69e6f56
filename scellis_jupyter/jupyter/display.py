"""What a cell shows: plans, graphs, runs and run records, as live widgets when they are installed and as
static HTML/SVG + text otherwise.

Why both: the widgets (`scellis_jupyter.jupyter.widgets`, anywidget) need a kernel and a front-end; a
notebook viewed without one (nbconvert, a repository host, a kernel-less reader) shows the static forms,
which every widget also emits. The static forms here are complete on their own: the verdict in colour and
words, the breakdown against capacity, the fixes, the graph's nodes, the final curve as inline SVG.
A run made in a notebook also leaves an `application/vnd.scellis.run+json` output (the run record pin that
`scellis verify NOTEBOOK.ipynb` checks), beside its text form.
"""
from __future__ import annotations

import html
import json
import threading
import time
from typing import Any, Callable

import numpy as np

from .._version import __version__
from ..run.records import fmt_value

RUN_MIME = "application/vnd.scellis.run+json"
PIN_FORMAT = "scellis.run/1"
VERDICT_COLOUR = {"green": "#1a7f37", "yellow": "#9a6700", "red": "#cf222e"}
VERDICT_WORDS = {"green": "fits", "yellow": "fits, with a warning", "red": "does not fit: refused before any compute"}
CATEGORY_COLOUR = {"parameters": "#4c78a8", "gradients": "#f58518", "optimizer_state": "#54a24b",
                   "activations": "#e45756", "workspace": "#72b7b2", "master_weights": "#b279a2",
                   "data": "#ff9da6", "buffers": "#9d755d", "evaluation": "#bcbd22",
                   "readback": "#bab0ac"}


def widgets():
    """FRONT_B's widget module, or None where it is not installed (then the static forms are shown)."""
    try:
        from . import widgets as w         # optional: the anywidget classes (and their JS bundle)
    except ImportError:
        return None
    return w


class Static:
    """A static output: `_repr_mimebundle_` with text/plain and text/html (and a run pin when given)."""

    def __init__(self, text: str, html_: str, extra: dict | None = None):
        self.text, self.html, self.extra = text, html_, dict(extra or {})

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text, "text/html": self.html, **self.extra}

    def __repr__(self) -> str:
        return self.text


def _mib(n) -> str:
    return f"{(n or 0) / 2**20:.2f} MiB"


def _box(inner: str, title: str = "") -> str:
    head = f'<div style="font-weight:600;margin-bottom:4px">{html.escape(title)}</div>' if title else ""
    return ('<div class="scellis-static" style="font-family:var(--jp-ui-font-family,sans-serif);font-size:13px;'
            'color:var(--jp-ui-font-color1,#1f2328);border:1px solid var(--jp-border-color2,#d0d7de);'
            f'border-radius:6px;padding:8px 10px;max-width:100%;overflow-x:auto">{head}{inner}</div>')


# ---- plans -----------------------------------------------------------------------------------------------
def plan_html(p) -> str:
    """Verdict (colour and words; yellow says why), a stacked bar of the breakdown against capacity, the
    breakdown table, warnings and fixes."""
    from ..plan.plan import CATEGORIES
    col = VERDICT_COLOUR.get(p.verdict, "#57606a")
    pct = 100 * p.peak_bytes / max(p.capacity_bytes, 1)
    words = VERDICT_WORDS.get(p.verdict, p.verdict)
    if p.verdict == "yellow" and p.warnings:
        words += ": " + p.warnings[0]
    elif p.verdict == "yellow":
        words += f": the peak uses {pct:.0f}% of capacity (green is at most 80%)"
    head = (f'<div><span data-verdict="{p.verdict}" style="background:{col};color:white;border-radius:4px;'
            f'padding:1px 8px;font-weight:700">{p.verdict.upper()}</span> '
            f'<span>{html.escape(words)}</span></div>'
            f'<div style="margin:4px 0">peak <b>{_mib(p.peak_bytes)}</b> of {_mib(p.capacity_bytes)} '
            f'({html.escape(p.capacity_source)}) = {pct:.1f}% &middot; batch {p.batch_size} &middot; '
            f'{html.escape(p.backend)}:{html.escape(p.device)} ({html.escape(p.adapter_type)}) &middot; tier {p.tier}</div>'
            + (f'<div class="scellis-device">device: {html.escape(p.device_note)}</div>' if p.device_note else ""))
    scale = max(p.capacity_bytes, p.peak_bytes, 1)
    segs = []
    for k in CATEGORIES:
        v = p.breakdown.get(k, 0)
        if v:
            segs.append(f'<div title="{k}: {_mib(v)}" style="width:{100 * v / scale:.3f}%;background:'
                        f'{CATEGORY_COLOUR[k]}"></div>')
    cap = 100 * p.capacity_bytes / scale
    marker = (f'<div class="scellis-capacity" data-capacity="{cap / 100:.4f}" title="capacity {_mib(p.capacity_bytes)}" '
              f'style="position:absolute;top:0;bottom:0;left:calc({min(cap, 100):.3f}% - 2px);width:2px;'
              'background:var(--jp-ui-font-color0,#000)"></div>')
    bar = ('<div style="position:relative;height:16px;background:var(--jp-layout-color2,#eaeef2);border-radius:3px;'
           f'display:flex;overflow:hidden;margin:6px 0">{"".join(segs)}{marker}</div>'
           + (f'<div style="font-size:11px">capacity at {cap:.0f}% of the bar</div>' if cap < 100 else ""))
    rows = "".join(f'<tr><td><span style="display:inline-block;width:10px;height:10px;background:{CATEGORY_COLOUR[k]}">'
                   f'</span> {k}</td><td style="text-align:right">{_mib(p.breakdown.get(k, 0))}</td>'
                   f'<td style="text-align:right">{100 * p.breakdown.get(k, 0) / max(p.peak_bytes, 1):.1f}%</td></tr>'
                   for k in CATEGORIES if p.breakdown.get(k, 0))
    table = f'<table style="border-collapse:collapse;font-size:12px">{rows}</table>'
    notes = "".join(f"<div>note: {html.escape(n)}</div>" for n in p.notes)
    warns = "".join(f'<div style="color:{VERDICT_COLOUR["yellow"]}">warning: {html.escape(w)}</div>' for w in p.warnings)
    fixes = ""
    if p.fixes:
        items = "".join(
            f'<li data-fix="{i}"><code>{html.escape(f.kind)}</code> {html.escape(f.description)}'
            + (f' &rarr; peak {_mib(f.peak_bytes)} (<span style="color:{VERDICT_COLOUR.get(f.verdict, "")}">'
               f'{f.verdict}</span>)' if f.peak_bytes is not None else "") + "</li>"
            for i, f in enumerate(p.fixes))
        fixes = f'<div style="margin-top:4px">fixes (apply: <code>model.apply_fix(i)</code>)<ol start="0">{items}</ol></div>'
    return _box(head + bar + table + notes + warns + fixes, f"plan for {p.spec}")


def plan_output(p, on_fix: Callable | None = None):
    """The PlanView widget, or the static form."""
    w = widgets()
    if w is not None:
        return w.PlanView(p, on_fix=on_fix)
    return Static(p.table(), plan_html(p))


# ---- graphs ----------------------------------------------------------------------------------------------
def graph_text(info: dict) -> str:
    lines = [f"input {info['input']['shape']}"]
    for n in info["nodes"]:
        lines.append(f"  {n['id']:<14} {n['op']:<14} {str(n['shape']):<18} {n['params']:>10,} params")
    lines.append(f"  {sum(n['params'] for n in info['nodes']):,} parameters in {len(info['nodes'])} nodes")
    return "\n".join(lines)


def graph_html(info: dict) -> str:
    rows = "".join(
        f'<tr data-node="{html.escape(n["id"])}"><td><code>{html.escape(n["id"])}</code></td><td>{html.escape(n["op"])}</td>'
        f'<td>{n["shape"]}</td><td style="text-align:right">{n["params"]:,}</td>'
        f'<td style="font-size:11px">{html.escape(", ".join(f"{k}={v}" for k, v in n["attrs"].items()))}</td></tr>'
        for n in info["nodes"])
    total = sum(n["params"] for n in info["nodes"])
    return _box(f'<div>input {info["input"]["shape"]} &middot; {total:,} parameters</div>'
                '<table style="border-collapse:collapse;font-size:12px"><tr><th>node</th><th>op</th><th>shape</th>'
                f'<th>params</th><th>attrs</th></tr>{rows}</table>', "graph")


def graph_output(info: dict, on_edit: Callable | None = None):
    w = widgets()
    if w is not None:
        return w.GraphView(info, on_edit=on_edit)
    return Static(graph_text(info), graph_html(info))


# ---- curves ----------------------------------------------------------------------------------------------
def curve_svg(series: dict, *, width: int = 420, height: int = 160, log: bool | None = None,
              skipped: list | None = None) -> str:
    """Series {name: (steps, values)} as an inline SVG line chart (log y when the values span > 2 decades)."""
    pts = {k: (np.asarray(s, float), np.asarray(v, float)) for k, (s, v) in series.items() if len(s)}
    if not pts:
        return '<svg width="0" height="0"></svg>'
    allv = np.concatenate([v[np.isfinite(v)] for _, v in pts.values()] or [np.zeros(1)])
    alls = np.concatenate([s for s, _ in pts.values()])
    if log is None:
        pos = allv[allv > 0]
        log = bool(pos.size and pos.size == allv.size and pos.max() / max(pos.min(), 1e-300) > 100)
    f = (lambda v: np.log10(np.maximum(v, 1e-300))) if log else (lambda v: v)  # noqa: E731
    lo, hi = (float(f(allv).min()), float(f(allv).max())) if allv.size else (0.0, 1.0)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    s0, s1 = float(alls.min()), float(alls.max())
    s1 = s1 if s1 > s0 else s0 + 1
    pad = 34
    X = lambda s: pad + (s - s0) / (s1 - s0) * (width - pad - 6)  # noqa: E731
    Y = lambda v: 6 + (hi - f(v)) / (hi - lo) * (height - 24)  # noqa: E731
    colours = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#72b7b2"]
    lines, legend = [], []
    for i, (k, (s, v)) in enumerate(pts.items()):
        ok = np.isfinite(v)
        if len(s) > 2000:                                   # thin for the static form
            keep = np.unique(np.linspace(0, len(s) - 1, 2000).astype(int))
            s, v, ok = s[keep], v[keep], ok[keep]
        d = " ".join(f"{X(a):.1f},{Y(b):.1f}" for a, b in zip(s[ok], v[ok]))
        c = colours[i % len(colours)]
        lines.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{d}" data-series="{html.escape(k)}"/>')
        legend.append(f'<tspan fill="{c}">&#9632; {html.escape(k)}</tspan> ')
    marks = "".join(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{height - 18}" y2="{height - 12}" stroke="#cf222e"/>'
                    for t in (skipped or []))
    fmt = (lambda v: f"1e{v:.0f}" if log else f"{v:.3g}")  # noqa: E731
    axis = (f'<text x="2" y="12" font-size="10">{fmt(hi)}</text><text x="2" y="{height - 18}" font-size="10">{fmt(lo)}</text>'
            f'<text x="{pad}" y="{height - 2}" font-size="10">step {s0:.0f}</text>'
            f'<text x="{width - 60}" y="{height - 2}" font-size="10">{s1:.0f}</text>')
    return (f'<svg class="scellis-curve" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 14}" '
            f'viewBox="0 0 {width} {height + 14}" style="max-width:100%"><rect x="{pad}" y="6" width="{width - pad - 6}" '
            f'height="{height - 24}" fill="none" stroke="#d0d7de"/>{"".join(lines)}{marks}{axis}'
            f'<text x="{pad}" y="{height + 10}" font-size="10">{"".join(legend)}{"(log)" if log else ""}</text></svg>')


def series_of(result: dict, metric_history: dict | None = None) -> dict:
    """Curves of a run: the training loss per step, and the recorded validation metrics."""
    out = {}
    lh = result.get("loss_history") or []
    if lh and isinstance(lh[0], dict):           # a GAN round: both networks' losses
        for k in lh[0]:
            out[k] = (np.arange(1, len(lh) + 1), np.asarray([float(e.get(k, np.nan)) for e in lh]))
    elif lh and np.ndim(lh[0]) == 1:
        a = np.asarray(lh, float)
        names = ("d_loss", "g_loss") if a.shape[1] == 2 else tuple(f"loss{i}" for i in range(a.shape[1]))
        for i, k in enumerate(names):
            out[k] = (np.arange(1, len(a) + 1), a[:, i])
    elif lh:
        out["loss"] = (np.arange(1, len(lh) + 1), np.asarray(lh, float))
    for k, pts in (metric_history or {}).items():
        if k != "loss" and pts:
            a = np.asarray(pts, float)
            out[k] = (a[:, 0], a[:, 1])
    return out


# ---- runs ------------------------------------------------------------------------------------------------
STATE_COLOUR = {"running": "#0969da", "starting": "#0969da", "paused": "#9a6700", "finished": "#1a7f37",
                "failed": "#cf222e", "interrupted": "#9a6700", "refused": "#cf222e"}


def run_panel_html(br) -> str:
    """The RunPanel's static form: state, progress with steps/s and ETA, device and tier, the last loss."""
    total = br.total_steps or 0
    frac = min(1.0, br.step / total) if total else 0.0
    el = max(time.time() - br.started, 1e-9)
    steps = [e for e in br.events if e["kind"] == "step"]
    rate = br.step / el if br.step else 0.0
    eta = (total - br.step) / rate if rate and total and br.state in ("running", "paused") else None
    col = STATE_COLOUR.get(br.state, "#57606a")
    last = f" &middot; loss {fmt_value(steps[-1]['loss'])}" if steps else ""
    eta_t = f" &middot; ETA {eta:.0f} s" if eta is not None else ""
    resume = (f'<div>resume: <code>%scellis resume {html.escape(br.name)}</code></div>'
              if br.state == "interrupted" else "")
    err = ""
    if br.state == "failed" and br.error is not None:
        msg = br.error.format() if hasattr(br.error, "format") else str(br.error)
        err = f'<pre style="color:{STATE_COLOUR["failed"]};white-space:pre-wrap">{html.escape(msg)}</pre>'
    inner = (f'<div><span data-state="{br.state}" style="color:{col};font-weight:700">{br.state}</span> '
             f'run <code>{html.escape(br.run_id)}</code> ({html.escape(br.name)})</div>'
             f'<div style="height:8px;background:var(--jp-layout-color2,#eaeef2);border-radius:4px;margin:4px 0">'
             f'<div style="width:{100 * frac:.1f}%;height:8px;background:{col};border-radius:4px"></div></div>'
             f'<div>step {br.step}/{total or "?"} &middot; {rate:.1f} steps/s{eta_t}{last}</div>'
             f'<div>{html.escape(br.device_label)} &middot; tier {html.escape(br.tier)}</div>{resume}{err}')
    return _box(inner, "run")


def run_panel_text(br) -> str:
    return f"run {br.run_id} ({br.name}): {br.state}, step {br.step}/{br.total_steps} on {br.device_label}, tier {br.tier}"


def bg_curve_series(br) -> tuple[dict, list]:
    steps = [e for e in br.events if e["kind"] == "step"]
    series = {}
    if steps:
        series["loss"] = ([e["step"] for e in steps], [e["loss"] for e in steps])
    for e in br.events:
        if e["kind"] == "eval":
            for k, v in e["metrics"].items():
                s = series.setdefault(k, ([], []))
                s[0].append(e["step"])
                s[1].append(v)
    return series, [e["step"] for e in steps if e.get("skipped")]


def training_static(br) -> Static:
    series, skipped = bg_curve_series(br)
    return Static(run_panel_text(br), run_panel_html(br) + curve_svg(series, skipped=skipped))


def _pin_of(br) -> dict | None:
    """The pin of a run that has ended, or None where it has no record (refused before any compute)."""
    st = br.run.store
    if st is None or not br.run_id:
        return None
    try:
        return run_pin(st.get_run(br.run_id), st)
    except Exception:                                   # noqa: BLE001 - the panel still updates without it
        return None


class _StaticFollower:
    """Keeps one display (by display id) up to date from the training thread, at most once a second, and
    once more at the end; the fallback for the RunPanel and LossCurve widgets."""

    def __init__(self, br, handle):
        self.br, self.handle, self._last = br, handle, 0.0
        self._lock = threading.Lock()
        self.unsubscribe = br.subscribe(self._on)

    def _on(self, ev: dict) -> None:
        now = time.monotonic()
        final = ev["kind"] == "state" and ev["state"] in ("finished", "failed", "interrupted", "refused")
        if not final and now - self._last < 1.0:
            return
        with self._lock:
            self._last = now
            out = training_static(self.br)
            p = _pin_of(self.br) if final else None         # the ended run's pin, saved with the notebook
            if p is not None:
                out.extra[RUN_MIME] = p
            self.handle.update(out)
        if final:
            self.unsubscribe()


def show_training(br, display: Callable, *, on_resume: Callable | None = None) -> list:
    """RunPanel and LossCurve widgets following `br`, or a static panel + curve kept up to date."""
    w = widgets()
    if w is not None:
        panel_ref: list = []

        def pin_of(run):                  # subscribed before the panel: its pin is set when the panel refreshes
            def pin(ev: dict) -> None:
                if ev["kind"] == "state" and ev["state"] in ("finished", "failed", "interrupted") and panel_ref:
                    p = _pin_of(run)
                    if p is not None:
                        panel_ref[0].extra_mime[RUN_MIME] = p
            return pin
        br.subscribe(pin_of(br))
        curve = w.LossCurve(title=f"{br.name} ({br.run_id})")

        def resumed():                    # the panel's one-click resume: the curve follows the new run too
            nb = on_resume()
            nb.subscribe(pin_of(nb))
            curve.follow(nb, key=nb.run_id)
            return nb
        panel = w.RunPanel(br, on_resume=resumed if on_resume is not None else None)
        panel_ref.append(panel)
        curve.follow(br, key=br.run_id)
        display(panel)
        display(curve)
        return [panel, curve]
    h = display(training_static(br), display_id=True)
    if h is not None:
        _StaticFollower(br, h)
    return [h]


# ---- run records as notebook outputs -------------------------------------------------------------------
def run_pin(rec, store) -> dict:
    """What a notebook keeps of a run: every hash verify checks, and where the store is."""
    ex = rec.extra or {}
    mem = ex.get("memory_data")
    return {"format": PIN_FORMAT, "run": rec.id, "state": rec.state, "spec_hash": rec.spec_hash,
            "spec_name": ex.get("spec_name"), "program_hash": rec.program_hash,
            "data": {"dataset_hash": rec.dataset_hash, "split_hash": rec.split_hash,
                     "files": ex.get("data_files") or [],
                     "memory": ({k: v for k, v in mem.items() if k != "labels"} if mem else None)},
            "checkpoints": [c["hash"] for c in rec.checkpoints], "final_checkpoint": rec.last_checkpoint,
            "weights_hash": ex.get("weights_hash"), "steps": ex.get("steps"),
            "metrics": {k: v for k, v in (rec.metrics or {}).items() if isinstance(v, (int, float))},
            "engine_version": __version__, "device": rec.device, "tier": rec.tier,
            "store": str(store.root.resolve()) if hasattr(store.root, "resolve") else str(store.root)}


def record_output(rec, store, result: dict | None = None) -> Static:
    """A run record: its summary lines, a static panel with the final curve, and the pin (RUN_MIME)."""
    from ..run.lifecycle import result_of_record, summary_lines
    r = result or result_of_record(rec, store)
    text = "\n".join(summary_lines(r, str(store.root)))
    pin = run_pin(rec, store)
    series = series_of(r, None)
    col = STATE_COLOUR.get(rec.state, "#57606a")
    metrics = "".join(f"<tr><td>{html.escape(k)}</td><td style='text-align:right'>{fmt_value(v)}</td></tr>"
                      for k, v in pin["metrics"].items())
    dev = rec.device or {}
    inner = (f'<div><span data-state="{rec.state}" style="color:{col};font-weight:700">{rec.state}</span> '
             f'run <code>{html.escape(rec.id)}</code> &middot; {r.get("steps")} steps on '
             f'{html.escape(str(dev.get("backend")))}:{html.escape(str(dev.get("name")))} &middot; tier {rec.tier}</div>'
             f'{curve_svg(series)}<table style="font-size:12px">{metrics}</table>'
             f'<div style="font-size:11px">spec {str(rec.spec_hash)[:12]} &middot; data {str(rec.dataset_hash)[:12]} '
             f'&middot; checkpoint {str(rec.last_checkpoint)[:12]} &middot; engine {__version__} &middot; '
             f'<code>scellis verify {html.escape(rec.id)}</code></div>')
    return Static(text, _box(inner, f"run record {rec.id}"), {RUN_MIME: pin})


def note_output(text: str) -> Static:
    """A neutral note (the not-a-GPU banner in a notebook): the kernel shows stderr as a red error box, but
    this is information, not an error; the CLI keeps printing it to stderr."""
    return Static(text, '<div class="scellis-note" style="font-family:var(--jp-ui-font-family,sans-serif);'
                  'font-size:12px;color:var(--jp-ui-font-color2,#57606a);border-left:3px solid '
                  'var(--jp-brand-color1,#0969da);padding:2px 8px;margin:2px 0"><b>note</b> '
                  f'{html.escape(text)}</div>')


def json_output(obj: Any) -> Static:
    text = json.dumps(obj, indent=2, default=str)
    return Static(text, f"<pre>{html.escape(text)}</pre>", {"application/json": json.loads(text)})


def text_output(text: str) -> Static:
    return Static(text, f'<pre style="white-space:pre-wrap">{html.escape(text)}</pre>')


def profile_output(prof: dict):
    """A measured profile: the flame-style ProfileView where the widgets are installed (its static form
    carries the kernel table as text); else its table as text, a bar chart of the kernels' share as HTML."""
    w = widgets()
    if w is not None and "timeline" in prof:
        return w.ProfileView(prof)
    from ..run.profile import profile_html, profile_text
    return Static(profile_text(prof), profile_html(prof))


def explain_output(data: dict):
    """The stage explorer (plan.explain.explain's dict): the StageExplorer widget, else its static form."""
    w = widgets()
    if w is not None:
        return w.StageExplorer(data)
    from .explain import explain_html, explain_text
    return Static(explain_text(data), explain_html(data))


def lr_find_output(res: dict, on_apply: Callable | None = None):
    w = widgets()
    lrs, losses, sug = np.asarray(res["lrs"], float), np.asarray(res["losses"], float), res.get("suggested")
    if w is not None:
        return w.LRFinderView(lrs, losses, float(sug) if sug else float("nan"), on_apply=on_apply)
    svg = curve_svg({"loss": (np.log10(lrs), losses)}, log=False)
    text = f"lr-find: {len(lrs)} steps from {lrs.min():.2e} to {lrs.max():.2e}; suggested lr {sug:.3g}" if sug \
        else f"lr-find: {len(lrs)} steps; no suggestion (the loss never fell)"
    return Static(text, _box(f"<div>{html.escape(text)} (x axis: log10 lr)</div>{svg}", "learning-rate range test"))


def catalog_output(entries: list[dict]):
    w = widgets()
    if w is not None:
        return w.CatalogBrowser(entries)
    rows = "".join(f"<tr><td>{html.escape(e['kind'])}</td><td><code>{html.escape(e['name'])}</code></td>"
                   f"<td>{html.escape(e.get('summary') or '')}</td><td>{html.escape(str(e.get('origin') or ''))}</td></tr>"
                   for e in entries)
    text = "\n".join(f"{e['kind']:<12} {e['name']:<22} {e.get('summary') or ''}" for e in entries)
    return Static(text, _box(f'<table style="font-size:12px">{rows}</table>', f"catalog ({len(entries)} entries)"))


__all__ = ["RUN_MIME", "PIN_FORMAT", "Static", "plan_html", "plan_output", "graph_output", "graph_html", "curve_svg",
           "show_training", "record_output", "run_pin", "widgets", "json_output", "text_output", "lr_find_output",
           "catalog_output", "training_static", "note_output"]
