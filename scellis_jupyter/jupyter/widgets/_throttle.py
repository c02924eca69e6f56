"""Kernel-side throttling of widget updates: the first few go at once, then at most one per interval.

Why in the kernel: a fast run makes thousands of steps a second; sending each would flood the websocket
and the browser. The last call is never lost: a pending one fires when its interval is over.
"""
from __future__ import annotations

import threading
import time
from typing import Callable


class Throttle:
    def __init__(self, fn: Callable[[], None], interval: float = 0.2, immediate: int = 3,
                 clock: Callable[[], float] = time.monotonic):
        self.fn, self.interval, self.immediate, self.clock = fn, interval, immediate, clock
        self.calls = 0
        self.fired = 0
        self._last = -float("inf")
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.calls += 1
            wait = self.interval - (self.clock() - self._last)
            if self.calls <= self.immediate or wait <= 0:
                self._cancel()
                now = True
            else:
                now = False
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._fire)
                    self._timer.daemon = True
                    self._timer.start()
        if now:
            self._fire()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
            self._last = self.clock()
            self.fired += 1
        self.fn()

    def flush(self) -> None:
        """Run a pending call now (a run ended: its last points go out without waiting)."""
        with self._lock:
            pending = self._timer is not None
            self._cancel()
        if pending:
            self._fire()
