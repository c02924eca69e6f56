"""RunPanel: where a background run stands (progress, steps/s, ETA, device and tier) and its controls.

The panel drives a BackgroundRun-like object: `subscribe(cb)` for events, `stop/pause/resume/checkpoint_now`
for the buttons. An action the run's state does not allow is refused with the reason shown, never sent.
"""
from __future__ import annotations

import time
from collections import deque
from html import escape
from typing import Any, Callable

import traitlets as t

from ...run.records import fmt_value
from ._base import ScellisWidget, bundle, error_text
from ._static import FG2, badge, box
from ._throttle import Throttle

LIVE = ("starting", "running", "paused")
TERMINAL = ("finished", "failed", "interrupted", "refused")
STATE_COLORS = {"running": "#1976d2", "starting": "#1976d2", "paused": "#e65100", "finished": "#2e7d32",
                "failed": "#c62828", "refused": "#c62828", "interrupted": "#bf5b00"}


def device_note(label: str, tier: str) -> str:
    """The CPU path said plainly: the numpy reference is for checking results, not for speed."""
    low = label.lower()
    if "reference" in low or "numpy" in low:
        return "Running on the CPU (the numpy reference path): correct but slow; no GPU is in use."
    if "cpu" in low or "llvmpipe" in low or "software" in low:
        return "Running on a software (CPU) WebGPU adapter: no GPU is in use, expect CPU speed."
    return ""


def refusal(state: str, action: str, can_resume: bool) -> str | None:
    """Why `action` is not possible in `state` (None when it is); js/src/lib/run_actions.js says the same."""
    if action == "resume_run":
        if state == "interrupted":
            return None if can_resume else "no resume handler was given to this panel"
        return "only an interrupted run can be resumed from here"
    if state not in LIVE:
        return f"the run is {state or 'not started'}: nothing to {action}"
    if action == "pause" and state != "running":
        return f"the run is {state}"
    if action == "resume" and state != "paused":
        return "the run is not paused"
    return None


def format_duration(s: float | None) -> str:
    """Like js/src/lib/eta.js formatDuration: 42s, 3m 07s, 1h 05m."""
    if s is None or s != s or s in (float("inf"), float("-inf")):
        return "–"
    s = int(round(s))
    h, m, sec = s // 3600, (s % 3600) // 60, s % 60
    return f"{h}h {m:02d}m" if h else f"{m}m {sec:02d}s" if m else f"{sec}s"


class StepRate:
    """Steps per second over a sliding window of (time, step) samples, the rule js/src/lib/eta.js uses: the
    first steps compile kernels and are slow, so an average since the start would overstate the ETA."""

    def __init__(self, window: float = 10.0, max_samples: int = 256):
        self.window, self.samples = window, deque(maxlen=max_samples)

    def add(self, t: float, step: int) -> None:
        if self.samples and self.samples[-1][1] == step:
            return
        self.samples.append((t, step))
        while len(self.samples) > 2 and t - self.samples[1][0] > self.window:
            self.samples.popleft()

    def rate(self) -> float | None:
        if len(self.samples) < 2:
            return None
        t1, s1 = self.samples[-1]
        first = next((x for x in self.samples if t1 - x[0] <= self.window), self.samples[0])
        if first == self.samples[-1]:
            first = self.samples[-2]
        dt, ds = t1 - first[0], s1 - first[1]
        return ds / dt if dt > 0 and ds >= 0 else None


class RunPanel(ScellisWidget):
    _esm, _css = bundle("run_panel")
    name = t.Unicode("").tag(sync=True)
    run_id = t.Unicode("").tag(sync=True)
    state = t.Unicode("starting").tag(sync=True)
    reason = t.Unicode("").tag(sync=True)
    step = t.Int(0).tag(sync=True)
    total_steps = t.Int(None, allow_none=True).tag(sync=True)
    started = t.Float(0.0).tag(sync=True)
    last_time = t.Float(0.0).tag(sync=True)
    last_loss = t.Float(None, allow_none=True).tag(sync=True)
    # the last measured speed and time left, in the model so a reloaded (or saved) view shows them at once
    steps_per_s = t.Float(None, allow_none=True).tag(sync=True)
    eta_s = t.Float(None, allow_none=True).tag(sync=True)
    device_label = t.Unicode("").tag(sync=True)
    device_note = t.Unicode("").tag(sync=True)
    tier = t.Unicode("").tag(sync=True)
    can_resume = t.Bool(False).tag(sync=True)
    notice = t.Unicode("").tag(sync=True)
    _notified = t.Unicode("").tag(sync=True)      # the view's last browser notification (or its error)

    def __init__(self, run: Any, *, on_resume: Callable[[], Any] | None = None, interval: float = 0.2):
        super().__init__(can_resume=on_resume is not None)
        self.on_resume = on_resume
        self._pending: dict = {}
        self._rate = StepRate()
        self._push = Throttle(self._apply_pending, interval=interval, immediate=3)
        self._unsub: Callable[[], None] | None = None
        self.bind(run)

    def bind(self, run: Any) -> None:
        """Show (and control) `run`; a resumed run replaces the interrupted one in the same panel."""
        if self._unsub is not None:
            self._unsub()
        self.run = run
        label = str(getattr(run, "device_label", ""))
        tier = str(getattr(run, "tier", ""))
        self._set(name=str(getattr(run, "name", "") or ""), run_id=str(getattr(run, "run_id", "") or ""),
                       state=str(getattr(run, "state", "starting")), step=int(getattr(run, "step", 0) or 0),
                       total_steps=getattr(run, "total_steps", None), started=float(getattr(run, "started", 0) or 0),
                       device_label=label, device_note=device_note(label, tier), tier=tier, reason="", notice="",
                       steps_per_s=None, eta_s=None)
        self._rate = StepRate()
        self._unsub = run.subscribe(self._on_event)
        if "via browser" in label:                     # the page's GPU: a hidden tab is said here
            from .gpu_device import current
            tr = current()
            if tr is not None:
                base = self.device_note

                def page_note(note: str) -> None:
                    self.device_note = " ".join(filter(None, [base, note]))
                page_note(tr.note())
                unwatch, unsub = tr.watch(page_note), self._unsub
                self._unsub = lambda: (unwatch(), unsub())

    def _set(self, **kw) -> None:
        with self.hold_sync():
            for k, v in kw.items():
                setattr(self, k, v)

    def _on_event(self, ev: dict) -> None:
        kind = ev.get("kind")
        if kind == "step":
            now = float(ev.get("time") or time.time())
            self._pending.update(step=int(ev["step"]), last_time=now)
            self._rate.add(now, int(ev["step"]))
            r = self._rate.rate()
            if r is not None:
                self._pending["steps_per_s"] = r
                total = self.total_steps
                self._pending["eta_s"] = max(0, total - int(ev["step"])) / r if total and r > 0 else None
            if ev.get("loss") is not None:
                self._pending["last_loss"] = float(ev["loss"])
            self._push()
        elif kind == "state":
            self._push.flush()
            self._apply_pending()
            self._set(state=str(ev.get("state")), reason=str(ev.get("reason") or ""))
            if ev.get("state") in TERMINAL:
                step = getattr(self.run, "step", None)
                if isinstance(step, int):
                    self.step = step
                if ev.get("state") == "finished":
                    self.eta_s = 0.0
                self.refresh_static()

    def _apply_pending(self) -> None:
        p, self._pending = self._pending, {}
        if p:
            self._set(**p)

    # ---- the buttons --------------------------------------------------------------------------------
    def act(self, action: str) -> str | None:
        """Do what a button does; returns the refusal (also shown as the notice) or None when done."""
        why = refusal(self.state, action, self.on_resume is not None)
        if why is not None and action != "resume_run" and self.state in ("interrupted", "failed") and self.reason:
            why = f"{why} (it ended: {self.reason.splitlines()[0]})"     # e.g. the page that ran it went away
        if why is None:
            try:
                if action == "resume_run":
                    self.bind(self.on_resume())
                else:
                    {"stop": self.run.stop, "pause": self.run.pause, "resume": self.run.resume,
                     "checkpoint": self.run.checkpoint_now}[action]()
                if action == "pause":
                    self.state = "paused"
                elif action == "resume":
                    self.state = "running"
            except KeyError:
                why = f"unknown action {action!r}"
            except Exception as e:
                why = error_text(e)
        self.notice = why or ""
        return why

    def _on_action(self, content, buffers) -> None:
        """A button: done or refused, the view is answered (no answer tells it the kernel is gone)."""
        action = str(content.get("action"))
        why = self.act(action)
        self.send({"type": "ack", "action": action, "refusal": why})

    # ---- static form --------------------------------------------------------------------------------
    def _progress(self) -> str:
        total = f" / {self.total_steps}" if self.total_steps else ""
        pct = f" ({100 * self.step / self.total_steps:.0f}%)" if self.total_steps else ""
        return f"step {self.step}{total}{pct}"

    def _speed(self) -> str:
        """'12.3 steps/s, ETA 41s' from the last measurement ('' before there is one)."""
        if self.steps_per_s is None:
            return ""
        r = self.steps_per_s
        out = f"{r:.2f} steps/s" if r < 10 else f"{r:.0f} steps/s"
        if self.state == "finished":
            return out + ", done"
        live = self.state in ("running", "paused") and self.eta_s is not None
        return out + (f", ETA {format_duration(self.eta_s)}" if live else "")

    def _static_text(self) -> str:
        speed = f", {self._speed()}" if self._speed() else ""
        s = (f"RunPanel {self.name or self.run_id}: {self.state}, {self._progress()}{speed}, {self.device_label}, "
             f"tier {self.tier}")
        return s + (f"\n  {self.reason}" if self.reason else "") + (f"\n  {self.device_note}" if self.device_note else "")

    def _static_html(self) -> str:
        frac = min(1.0, self.step / self.total_steps) if self.total_steps else 0.0
        color = STATE_COLORS.get(self.state, "#888")
        inner = (f'<div>{badge(self.state, color, {"state": self.state})} <b>{escape(self.name or self.run_id or "run")}</b> '
                 f'<span style="color:{FG2}">{escape(self.device_label)} · tier {escape(self.tier)}</span></div>'
                 f'<div style="height:8px;background:var(--jp-layout-color2,#eee);border-radius:4px;margin:6px 0;overflow:hidden">'
                 f'<div style="height:8px;width:{100 * frac:.1f}%;background:{color}"></div></div>'
                 f'<div>{escape(self._progress())}'
                 + (f" · {escape(self._speed())}" if self._speed() else "")
                 + (f" · loss {fmt_value(self.last_loss)}" if self.last_loss is not None else "") + "</div>"
                 + (f'<div style="color:{FG2};font-size:11px">{escape(self.state)}: {escape(self.reason)}</div>' if self.reason else "")
                 + (f'<div style="color:{FG2};font-size:11px">{escape(self.device_note)}</div>' if self.device_note else ""))
        return box(inner, "scellis-run", color)
