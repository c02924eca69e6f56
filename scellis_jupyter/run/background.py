"""`BackgroundRun`: a `Run` stepped in a thread of this process, so a notebook cell returns at once.

Why a thread and not a detached process: a notebook's data lives in the kernel (arrays, DataFrames), and
the widgets follow events in the same process without polling a file. The loop is the public `for step in
run` loop; stop / pause / resume / checkpoint-now are requests the thread honours between steps, so no
step is ever half applied. Events are plain JSON-able dicts, kept so a late subscriber (a widget created
after training began) replays them. If the kernel dies, the heartbeat stops and the record reads
`interrupted` (store/runs.py); a kernel shut down cleanly interrupts the run itself (checkpoint, record).
"""
from __future__ import annotations

import traceback
import sys
import atexit
import threading
import time
import weakref
from typing import Callable

from ..errors import DeviceGone, ScellisError
from .records import Events
from .run import RunError
from ..errors import WaitTimeout

STATES = ("starting", "running", "paused", "finished", "failed", "interrupted", "refused")
ENDED = ("finished", "failed", "interrupted", "refused")
_LIVE: "weakref.WeakSet[BackgroundRun]" = weakref.WeakSet()


class BackgroundRun:
    """Train `run` (a constructed `sc.Run`) in a daemon thread; `name` is the notebook's model handle."""

    def __init__(self, run, name: str = "", *, start: bool = True):
        self._run = run
        self.name = name or run.spec.name
        self.run_id: str = run.run_id or ""
        self.state = "starting"
        self.step = int(run.step)
        self.total_steps: int | None = int(run.total_steps)
        dev = run.device
        self.device_label = f"{dev.backend}:{dev.name}" + (f" via {dev.via}" if getattr(dev, 'via', '') else "") + (" (CPU, not a GPU)" if _on_cpu(dev) else "")
        self.tier: str = run.tier
        self.started = time.time()
        self.error = None                       # the Diagnostic of a failed run
        self.result: dict | None = None
        self._events: list[dict] = []
        self._subs: list[Callable[[dict], None]] = []
        self._lock = threading.RLock()
        self._go = threading.Event()            # set: not paused
        self._go.set()
        self._stop_req: str | None = None
        self._ck_req = False
        self._done = threading.Event()
        self._file = Events(run.store, run.run_id) if run.store is not None and run.run_id else None
        self._thread = threading.Thread(target=self._main, name=f"scellis-run-{self.name}", daemon=True)
        _LIVE.add(self)
        if start:
            self.start()

    # ---- events ----------------------------------------------------------------------------------------
    def subscribe(self, cb: Callable[[dict], None]) -> Callable[[], None]:
        """Call `cb(event)` for every past event, then for each new one (from the training thread)."""
        with self._lock:
            past = list(self._events)
            self._subs.append(cb)
        for ev in past:
            _call(cb, ev)

        def unsubscribe() -> None:
            with self._lock:
                if cb in self._subs:
                    self._subs.remove(cb)
        return unsubscribe

    @property
    def events(self) -> list[dict]:
        with self._lock:
            return list(self._events)

    def _emit(self, ev: dict) -> None:
        with self._lock:
            self._events.append(ev)
            subs = list(self._subs)
        if self._file is not None:               # the same progress file `scellis wait` follows
            self._file.write(dict(ev, event=ev["kind"], run=self.run_id, t=ev.get("time", time.time())))
        for cb in subs:
            _call(cb, ev)

    def _set_state(self, state: str, reason: str = "") -> None:
        self.state = state
        self._emit({"kind": "state", "state": state, "reason": reason, "step": self.step, "time": time.time()})

    # ---- control (any thread) --------------------------------------------------------------------------
    def _require_live(self, action: str) -> None:
        if self.state in ENDED:
            raise RunError(f"run {self.run_id} ({self.name}) is {self.state}; there is nothing to {action}",
                           where=f"run {self.run_id}", code="run-ended",
                           hint=f"resume it: %scellis resume {self.name}" if self.state == "interrupted"
                           else f"start a new one: %scellis train {self.name}")

    def stop(self) -> None:
        """Checkpoint at the next step boundary and record the run `interrupted` (resumable)."""
        self._require_live("stop")
        self._stop_req = "stopped from the notebook"
        self._go.set()

    def pause(self) -> None:
        """Hold the loop after the current step (the run stays `paused`, its record `running`)."""
        self._require_live("pause")
        self._go.clear()

    def resume(self) -> None:
        """Continue a paused run."""
        self._require_live("resume")
        self._go.set()

    def checkpoint_now(self) -> None:
        """Save a checkpoint after the current step."""
        self._require_live("checkpoint")
        self._ck_req = True
        if self.state == "paused":
            self._go.set()
            self._ck_then_pause = True

    def wait(self, timeout: float | None = None):
        """Block until the run ends; returns its RunRecord (or the result dict without a store)."""
        if not self._done.wait(timeout):
            raise WaitTimeout(f"run {self.run_id} is still {self.state} after {timeout:g} s",
                              where=f"run {self.run_id}", hint="wait longer, or stop it")
        st = self._run.store
        if st is not None and self.run_id:
            return st.get_run(self.run_id)
        return self.result

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def run(self):
        """The underlying `sc.Run` (weights, predict, evaluate once it ended)."""
        return self._run

    # ---- the thread ------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def _main(self) -> None:
        run = self._run
        every = max(1, (run.total_steps or 1) // 500)        # at most ~500 step events (widgets batch them)
        n_ck = len(run.checkpoints)
        self._set_state("running")
        it = iter(run)
        try:
            for s in it:
                self.step = s.step
                metrics = getattr(s, "metrics", None)
                if s.step % every == 0 or s.step >= run.total_steps or metrics or getattr(s, "skipped", False):
                    self._emit(_step_event(s))
                if metrics:
                    self._emit({"kind": "eval", "step": s.step, "metrics": _val_metrics(s.metrics)})
                if self._ck_req and s.step < run.total_steps:
                    self._ck_req = False
                    run.checkpoint()
                n_ck = self._new_checkpoints(n_ck)
                if self._stop_req is None and not self._go.is_set() and s.step < run.total_steps:
                    self._set_state("paused", "paused from the notebook")
                    while not self._go.wait(0.2):
                        gone = _device_gone(run)
                        if gone:             # its device went while paused: what it held there is lost
                            it.throw(DeviceGone(gone, where=f"run {self.run_id}",
                                                hint="the run's last checkpoint resumes it, here or on any other "
                                                     "device"))
                    if self._stop_req is None:
                        self._set_state("running", "resumed")
                    if self._ck_req:
                        self._ck_req = False
                        run.checkpoint()
                        n_ck = self._new_checkpoints(n_ck)
                        if getattr(self, "_ck_then_pause", False):
                            self._ck_then_pause = False
                            self._go.clear()
                if self._stop_req is not None and s.step < run.total_steps:
                    run.interrupt(self._stop_req)
                    n_ck = self._new_checkpoints(n_ck)
                    break
        except DeviceGone as e:                  # left interrupted at its last checkpoint (Run._recorded)
            self.error = e.diagnostic
            self._end(run, "interrupted", e.diagnostic.format())
            return
        except ScellisError as e:
            self.error = e.diagnostic
            self._end(run, "failed", e.diagnostic.format())
            return
        except BaseException as e:               # noqa: BLE001 - reported as the run's failure, never lost
            self.error = {"code": "internal", "message": f"{type(e).__name__}: {e}"}
            self._end(run, "failed", f"{type(e).__name__}: {e}")
            return
        finally:
            try:
                it.close()
            except BaseException:                # noqa: BLE001
                pass
        self._new_checkpoints(n_ck)
        self._end(run, run.state, self._stop_req or "")

    def _new_checkpoints(self, n: int) -> int:
        cks = self._run.checkpoints
        for h in cks[n:]:
            self._emit({"kind": "checkpoint", "step": self._run.step, "hash": h})
        return len(cks)

    def _end(self, run, state: str, reason: str) -> None:
        try:
            self.result = run.result()
        except BaseException:                    # noqa: BLE001 - a failed run may have no readable weights
            self.result = {"run": self.run_id, "state": state}
        if state == "finished" and getattr(run, "metric_names", None):
            self._emit({"kind": "eval", "step": run.step, "metrics": {
                k: v for k, v in (getattr(run, "final_metrics", {}) or {}).items() if isinstance(v, (int, float))}})
        self.step = int(run.step)
        self._set_state(state, reason)
        self._done.set()

    def _shutdown(self, timeout: float = 20.0) -> None:
        """At interpreter exit (a kernel shut down or restarted): interrupt with a checkpoint, if still going."""
        if self.state in ENDED or not self._thread.is_alive():
            return
        self._stop_req = "the kernel shut down"
        self._go.set()
        self._done.wait(timeout)

    def __repr__(self) -> str:
        return f"<BackgroundRun {self.name} {self.run_id} {self.state} step {self.step}/{self.total_steps}>"


def _step_event(s) -> dict:
    """A step result as an event; a GAN round reports the generator's loss as `loss`, with both networks'."""
    if hasattr(s, "d_loss"):
        return {"kind": "step", "step": s.step, "loss": s.g_loss, "d_loss": s.d_loss, "g_loss": s.g_loss,
                "lr": s.lr_g, "skipped": bool(getattr(s, "skipped", False)), "time": time.time()}
    return {"kind": "step", "step": s.step, "loss": s.loss, "lr": s.lr, "skipped": bool(s.skipped), "time": time.time()}


def _val_metrics(m: dict) -> dict:
    """Validation metrics under the names the curve shows (val_loss, val_accuracy, ...)."""
    return {(k if k.startswith(("val_", "test_")) else f"val_{k}"): v for k, v in m.items()
            if isinstance(v, (int, float))}


def _device_gone(run) -> str:
    g = getattr(getattr(run, "device", None), "gone", None)
    try:
        return g() if callable(g) else ""
    except Exception:                            # noqa: BLE001 - asking must not end a paused run
        return ""


def _on_cpu(dev) -> bool:
    return dev.backend == "reference" or str(getattr(dev, "adapter_type", "")).lower() in ("cpu", "cpu-emulated")


def _call(cb, ev) -> None:
    try:
        cb(ev)
    except Exception:                            # noqa: BLE001 - a broken display must not stop training
        print("scellis: an event subscriber failed:", file=sys.stderr)
        traceback.print_exc(limit=2)


@atexit.register
def _interrupt_live_runs() -> None:
    for br in list(_LIVE):
        br._shutdown()


__all__ = ["BackgroundRun", "STATES", "ENDED"]
