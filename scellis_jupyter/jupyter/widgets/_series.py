"""Curve series kept in the kernel and packed for the browser as one binary buffer.

Format (js/src/lib/pack.js reads it): u32 header length H, H bytes of JSON {"series": [{run, name, n, k}]},
zero padding to a multiple of 4, then per series u32 steps[n], f32 values[n], u32 skipped[k]. The whole
store packs into a snapshot (decimated for the `_packed` trait a saved notebook keeps, whole for a view that
asks); the points added since the last chunk pack the same way into an appended chunk.
"""
from __future__ import annotations

import json
import struct
import threading
from array import array

import numpy as np

from ._static import decimate


class _Series:
    __slots__ = ("steps", "values", "skipped", "sent", "sent_skipped")

    def __init__(self):
        self.steps, self.values, self.skipped = array("I"), array("f"), array("I")
        self.sent = self.sent_skipped = 0


def pack(items: list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray]]) -> bytes:
    header = json.dumps({"series": [{"run": r, "name": n, "n": int(len(s)), "k": int(len(k))}
                                    for r, n, s, _, k in items]}).encode()
    head = struct.pack("<I", len(header)) + header
    head += b"\0" * (-len(head) % 4)
    parts = [head]
    for _, _, s, v, k in items:
        parts += [np.asarray(s, "<u4").tobytes(), np.asarray(v, "<f4").tobytes(), np.asarray(k, "<u4").tobytes()]
    return b"".join(parts)


def unpack(buf: bytes) -> list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray]]:
    (h,) = struct.unpack_from("<I", buf, 0)
    header = json.loads(buf[4:4 + h])
    o = 4 + h + (-(4 + h) % 4)
    out = []
    for s in header["series"]:
        n, k = s["n"], s.get("k", 0)
        steps = np.frombuffer(buf, "<u4", n, o); o += 4 * n
        vals = np.frombuffer(buf, "<f4", n, o); o += 4 * n
        sk = np.frombuffer(buf, "<u4", k, o); o += 4 * k
        out.append((s["run"], s["name"], steps, vals, sk))
    return out


class SeriesStore:
    """Every (run, series name) -> steps, values, skipped steps; thread-safe (a run thread appends)."""

    def __init__(self):
        self._s: dict[tuple[str, str], _Series] = {}
        self._lock = threading.Lock()

    def _get(self, run: str, name: str) -> _Series:
        key = (str(run), str(name))
        if key not in self._s:
            self._s[key] = _Series()
        return self._s[key]

    def append(self, run: str, name: str, step: int, value: float, skipped: bool = False) -> None:
        with self._lock:
            s = self._get(run, name)
            s.steps.append(int(step))
            s.values.append(float(value))
            if skipped:
                s.skipped.append(int(step))

    def extend(self, run: str, name: str, steps, values, skipped=None) -> None:
        steps = np.asarray(steps)
        values = np.asarray(values, dtype=np.float64)
        if steps.ndim != 1 or steps.shape != values.shape:
            raise ValueError(f"steps and values must be 1-D of one length, got {steps.shape} and {values.shape}")
        with self._lock:
            s = self._get(run, name)
            s.steps.extend(steps.astype("<u4").tolist())
            s.values.extend(values.astype("<f4").tolist())
            if skipped is not None:
                sk = np.asarray(skipped)
                sk = steps[sk] if sk.dtype == bool else sk
                s.skipped.extend(np.asarray(sk).astype("<u4").tolist())

    def snapshot(self, max_points: int | None = None, *, mark_sent: bool = False) -> bytes:
        """Everything, packed (each series decimated to ~max_points when given, skipped steps kept).

        `mark_sent`: the snapshot goes to the browser as its whole store, so later chunks start after it; done
        under the same lock, a point appended by the run thread meanwhile is in one of the two, never both."""
        with self._lock:
            items = []
            for (r, n), s in self._s.items():
                steps, vals = np.array(s.steps, "<u4"), np.array(s.values, "<f4")
                if max_points is not None:
                    steps, vals = decimate(steps, vals, max_points)
                items.append((r, n, steps, vals, np.array(s.skipped, "<u4")))
                if mark_sent:
                    s.sent, s.sent_skipped = len(s.steps), len(s.skipped)
            return pack(items)

    def pending(self) -> bytes | None:
        """The points added since the last chunk (or snapshot sent with mark_sent), packed (None when there are none)."""
        with self._lock:
            items = []
            for (r, n), s in self._s.items():
                if len(s.steps) == s.sent and len(s.skipped) == s.sent_skipped:
                    continue
                items.append((r, n, np.array(s.steps[s.sent:], "<u4"), np.array(s.values[s.sent:], "<f4"),
                              np.array(s.skipped[s.sent_skipped:], "<u4")))
                s.sent, s.sent_skipped = len(s.steps), len(s.skipped)
            return pack(items) if items else None

    def arrays(self) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        with self._lock:
            return {k: (np.array(s.steps, dtype=np.int64), np.array(s.values, dtype=np.float64),
                        np.array(s.skipped, dtype=np.int64)) for k, s in self._s.items()}

    def __len__(self) -> int:
        with self._lock:
            return sum(len(s.steps) for s in self._s.values())
