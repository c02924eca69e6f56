"""Detached runs: training in its own process that outlives the notebook or terminal that started it.

Why a child process in its own session with stdio to a log file in the store: closing the terminal,
restarting the kernel or losing the SSH connection must not stop a long run, and everything it does
(record, heartbeats, checkpoints, progress events, output) lands in the store, where any later process
finds it: `scellis wait RUN`, `scellis runs`, or the `Detached` handle's `.wait()` / `.follow(cb)`.
The child is told its run id up front, so the caller can print it at once; until the child registers
the run, a launch file (`<store>/logs/<run>.launch.json`) names the process, and a child that fails
before registering records the run as `failed` itself.

    python -c "<child_main>" <store>/logs/<run>.job.json                     (what `launch` starts)
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from ..backends.device import ensure_xdg_runtime_dir
from .records import FINAL_STATES, current_state, follow, launch_info, open_store, resolve_any, result_of_record
from ..store.runs import _proc_start, new_run_id, reserve_run
from ..store.objects import atomic_write
from ..store import StoreError
from ..store.runs import get_run
from ..store.errors import os_error


# `-c` rather than `-m scellis_jupyter.run.child`: the package imports this module, and runpy warns then
_CHILD = "import sys; from scellis_jupyter.run.child import child_main; sys.exit(child_main(sys.argv[1]))"


def launch(store, job: dict, run_id: str | None = None) -> "Detached":
    """Start `job` ({"kind": "train"|"resume", ...}) in a new session; returns its handle immediately."""
    run_id = run_id or new_run_id()
    if store.index.run(run_id) is not None:
        raise StoreError(f"run {run_id} already exists", where=f"store {store.root}", code="bad-argument")
    job = dict(job, run_id=run_id, store=str(Path(store.root).resolve()))
    job_path = store.log_path(run_id, "job.json")
    log_path = store.log_path(run_id, "log")
    _write_json(job_path, job, store)
    env = dict(os.environ)
    pkg_root = str(Path(__file__).resolve().parent.parent.parent)       # the same package copy in the child
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if not env.get("XDG_RUNTIME_DIR"):
        ensure_xdg_runtime_dir()
        env["XDG_RUNTIME_DIR"] = os.environ["XDG_RUNTIME_DIR"]
    argv = [sys.executable, "-c", _CHILD, str(job_path)]
    try:
        with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
            proc = subprocess.Popen(argv, stdin=devnull, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    cwd=os.getcwd(), start_new_session=True, close_fds=True)
    except OSError as e:
        raise os_error(e, action="start the detached run", where=f"store {store.root}") from None
    launch_info = {"run": run_id, "pid": proc.pid, "proc_start": _proc_start(proc.pid), "host": socket.gethostname(),
                   "log": str(log_path), "started": time.time(), "argv": argv}
    _write_json(store.log_path(run_id, "launch.json"), launch_info, store)
    # in the index before the id is printed: `scellis runs` shows it at once (the child adopts the row)
    spec = job.get("spec") or {}
    reserve_run(store, run_id, pid=proc.pid, spec_hash=job.get("spec_hash"),
                extra={"detached": True, "kind": job["kind"], "log": str(log_path),
                       **({"resume_ref": job["ref"]} if job.get("ref") else {}),
                       **({"resumed_from": job["checkpoint"]} if job.get("checkpoint") else {}),
                       **({"spec_source": spec["source"]} if spec.get("source") else {})})
    return Detached(store, run_id, pid=proc.pid, log=log_path, popen=proc)


def _write_json(path: Path, obj: dict, store) -> None:
    atomic_write(path, json.dumps(obj, indent=1).encode("utf-8"), where=f"store {store.root}",
                 action=f"write {path.name}")


class Detached:
    """A run training in its own process: `.state`, `.wait(timeout)`, `.result()`, `.follow(cb)`, `.on_done(cb)`.

    Everything is read from the store, so a handle can also be made later, in another process:
    `Detached.attach(run_id, store)`.
    """

    def __init__(self, store, run_id: str, *, pid: int | None = None, log: str | os.PathLike | None = None,
                 popen: subprocess.Popen | None = None):
        self.store, self.id, self.pid = store, run_id, pid
        self.log = Path(log) if log is not None else Path(store.root) / "logs" / f"{run_id}.log"
        self._popen = popen

    @classmethod
    def attach(cls, run_id: str, store=None) -> "Detached":
        st = open_store(store, create=False)
        rid = resolve_any(st, run_id)
        info = launch_info(st, rid) or {}
        return cls(st, rid, pid=info.get("pid"), log=info.get("log"))

    @property
    def run_id(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"<Detached run {self.id} ({self.state}), pid {self.pid}, log {self.log}>"

    def to_json(self) -> dict:
        return {"run": self.id, "state": self.state, "pid": self.pid, "log": str(self.log)}

    @property
    def state(self) -> str:
        """starting | running | finished | failed | interrupted | refused (a killed process reads interrupted)."""
        if self._popen is not None:
            self._popen.poll()                  # reap our own child, so its death is seen at once
        return current_state(self.store, self.id)[0]

    def done(self) -> bool:
        return self.state in FINAL_STATES

    def wait(self, timeout: float | None = None, poll: float = 0.25) -> str:
        """Block until the run reaches a final state (returned); WaitTimeout after `timeout` seconds."""
        for ev in self.events(timeout=timeout, poll=poll):
            if ev.get("event") == "done":
                return ev["state"]
        return self.state

    def result(self, timeout: float | None = None) -> dict:
        """The run's summary (as `Run.result()`), once it is final: waits up to `timeout` seconds."""
        self.wait(timeout)
        if self.store.index.run(self.id) is None:
            return {"run": self.id, "state": "failed", "error": {"message": "the process died before registering "
                    "the run", "log": self.log_tail()}}
        return result_of_record(get_run(self.store, self.id), self.store)

    def events(self, timeout: float | None = None, poll: float = 0.25) -> Iterator[dict]:
        """Progress events as they come (start, step, ..., then {"event": "done", "state", "result"})."""
        for ev in follow(self.store, self.id, timeout=timeout, poll=poll):
            if self._popen is not None:
                self._popen.poll()
            yield ev

    def follow(self, callback: Callable[[dict], None], poll: float = 0.5) -> threading.Thread:
        """Call `callback(event)` for each progress event from a background thread (the cell returns at once)."""
        def loop():
            for ev in self.events(poll=poll):
                callback(ev)
        t = threading.Thread(target=loop, name=f"scellis-follow-{self.id}", daemon=True)
        t.start()
        return t

    def on_done(self, callback: Callable[["Detached"], None], poll: float = 0.5) -> threading.Thread:
        """Call `callback(handle)` once, from a background thread, when the run reaches a final state."""
        def loop():
            self.wait(poll=poll)
            callback(self)
        t = threading.Thread(target=loop, name=f"scellis-done-{self.id}", daemon=True)
        t.start()
        return t

    def interrupt(self) -> None:
        """Ask the run to stop cleanly: it checkpoints at the next step boundary and records `interrupted`."""
        if self.pid and self.state in ("starting", "running"):
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
