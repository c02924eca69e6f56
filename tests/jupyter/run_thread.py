"""A small test adapter: a real `sc.Run` step loop in a thread, with the BackgroundRun face the widgets use
(subscribe / stop / pause / resume / checkpoint_now, and the contract's event dicts).

Not a fake: every step event is a step the engine ran. FRONT_A's BackgroundRun replaces this in the
notebooks; the browser test inlines this file's source into its notebook's first cell.
"""
import threading
import time

import scellis_jupyter as sc


class ThreadRun:
    def __init__(self, spec, *, steps, name="run", store=None, delay=0.0, **run_kw):
        self.run = sc.Run(spec, steps=steps, store=store, **run_kw)
        self.name, self.run_id = name, self.run.run_id or name
        self.state, self.step, self.total_steps = "starting", 0, steps
        d = self.run.device
        self.device_label = f"{d.backend}:{d.name} ({d.adapter_type})"
        self.tier, self.started = self.run.tier, time.time()
        self.delay = delay                       # seconds between steps (to watch a tiny model train)
        self._events, self._subs = [], []
        self._lock = threading.Lock()
        self._stop, self._go, self._ckpt = threading.Event(), threading.Event(), threading.Event()
        self._go.set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"scellis-{name}")

    def start(self):
        self._thread.start()
        return self

    def subscribe(self, cb):
        with self._lock:
            past = list(self._events)
            self._subs.append(cb)
        for ev in past:
            cb(ev)
        return lambda: self._subs.remove(cb) if cb in self._subs else None

    def _emit(self, ev):
        with self._lock:
            self._events.append(ev)
            subs = list(self._subs)
        for cb in subs:
            cb(ev)

    def _set_state(self, state, reason=""):
        self.state = state
        self._emit({"kind": "state", "state": state, "reason": reason})

    def _loop(self):
        it = iter(self.run)
        self._set_state("running")
        try:
            for r in it:
                self.step = r.step
                self._emit({"kind": "step", "step": r.step, "loss": r.loss, "lr": r.lr, "skipped": r.skipped,
                            "time": time.time()})
                if r.metrics:
                    self._emit({"kind": "eval", "step": r.step,
                                "metrics": {f"val_{k}": v for k, v in r.metrics.items()}})
                if self._ckpt.is_set() and self.run.store is not None:
                    self._ckpt.clear()
                    self._emit({"kind": "checkpoint", "step": r.step, "hash": self.run.checkpoint()})
                self._go.wait()
                if self._stop.is_set():
                    it.close()                   # the Run records itself interrupted (GeneratorExit)
                    self._set_state("interrupted", "stopped from the panel")
                    return
                if self.delay:
                    time.sleep(self.delay)
            self._set_state("finished", "")
        except Exception as e:                   # a failed run says why, like BackgroundRun
            self._set_state("failed", str(e))
        finally:
            self._done.set()

    def stop(self):
        self._stop.set()
        self._go.set()

    def pause(self):
        self._go.clear()
        self._set_state("paused")

    def resume(self):
        self._set_state("running")
        self._go.set()

    def checkpoint_now(self):
        self._ckpt.set()

    def wait(self, timeout=None):
        self._done.wait(timeout)
        return self.run
