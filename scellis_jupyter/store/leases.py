"""Writer leases: `<store>/leases/<host>-<pid>-<token>.json`, one file per process writing objects.

Why: between writing an object and naming it (an index row, a ref, a run record), a writer's object is
unreachable, and a gc with a short `--grace` would delete it (or the temp file it is still filling).
A writer registers a lease when it starts writing and removes it when done; gc never deletes anything
younger than the start of the oldest live lease, whatever its grace. A lease is dead (ignored, and
removed by gc) when its process is gone (same host) or when it was not refreshed (the file's mtime)
for longer than its expiry, so a writer killed mid-write never blocks gc for good.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any, Callable

from .errors import os_error
from .runs import _proc_start, pid_alive

LEASES = "leases"
DEFAULT_EXPIRY = 600.0        # seconds without a refresh after which a lease of another host is dead
_REFRESH_EVERY = 1.0


class Lease:
    """One writer's lease; `release()` (or leaving the `with` block) ends it, `refresh()` keeps it alive."""

    def __init__(self, root: str | os.PathLike, *, expiry: float = DEFAULT_EXPIRY,
                 on_release: Callable[["Lease"], None] | None = None):
        self.root, self._on_release = Path(root), on_release
        self.started = time.time()
        self.pid, self.host, self.expiry = os.getpid(), socket.gethostname(), float(expiry)
        d = self.root / LEASES
        self.path = d / f"{self.host}-{self.pid}-{secrets.token_hex(4)}.json"
        body = json.dumps({"pid": self.pid, "host": self.host, "proc_start": _proc_start(self.pid),
                           "started": self.started, "expiry": self.expiry}).encode()
        try:
            d.mkdir(exist_ok=True)
            self.path.write_bytes(body)
        except OSError as e:
            raise os_error(e, action=f"register a writer lease in {d}", where=f"store {self.root}") from None
        self._refreshed = time.monotonic()

    def refresh(self) -> None:
        """Mark the lease as still in use (at most once a second touches the file)."""
        if time.monotonic() - self._refreshed < _REFRESH_EVERY:
            return
        try:
            os.utime(self.path)
        except OSError:
            return
        self._refreshed = time.monotonic()

    def release(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass
        if self._on_release is not None:
            self._on_release(self)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def live_leases(root: str | os.PathLike, *, now: float | None = None, drop_dead: bool = False) -> list[dict]:
    """The live leases of the store at `root` (each its JSON plus "path"); dead ones are skipped, and
    removed with `drop_dead`. An unreadable lease file (a writer killed while creating it) counts as live
    until its mtime is older than the default expiry: gc errs on the side of keeping."""
    d = Path(root) / LEASES
    now = time.time() if now is None else now
    out = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            mtime = p.stat().st_mtime
        except OSError:
            continue
        try:
            lease = json.loads(p.read_bytes())
            started, expiry = float(lease["started"]), float(lease.get("expiry", DEFAULT_EXPIRY))
        except (OSError, ValueError, KeyError, TypeError):
            lease, started, expiry = {}, mtime, DEFAULT_EXPIRY
        dead = now - mtime > expiry
        if not dead and lease and lease.get("host") == socket.gethostname():
            dead = not pid_alive(lease.get("pid"), lease.get("proc_start"))
        if dead:
            if drop_dead:
                try:
                    p.unlink()
                except OSError:
                    pass
            continue
        out.append(dict(lease, started=started, path=str(p)))
    return out


def oldest_live_start(root: str | os.PathLike, **kw: Any) -> float | None:
    """When the oldest live lease began (gc keeps everything newer), or None when no writer holds one."""
    return min((lease["started"] for lease in live_leases(root, **kw)), default=None)
