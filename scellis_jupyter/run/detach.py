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
from ..errors import EXIT_ERROR, EXIT_FAILED, EXIT_REFUSED, ScellisError


# `-c` rather than `-m scellis_jupyter.run.detach`: the package imports this module, and runpy warns then
_CHILD = "import sys; from scellis_jupyter.run.detach import child_main; sys.exit(child_main(sys.argv[1]))"


def launch(store, job: dict, run_id: str | None = None) -> "Detached":
    """Start `job` ({"kind": "train"|"resume", ...}) in a new session; returns its handle immediately."""
    from ..store.runs import _proc_start, new_run_id, reserve_run
    run_id = run_id or new_run_id()
    if store.index.run(run_id) is not None:
        from ..store import StoreError
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
        from ..store.errors import os_error
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
    from ..store.objects import atomic_write
    atomic_write(path, json.dumps(obj, indent=1).encode("utf-8"), where=f"store {store.root}",
                 action=f"write {path.name}")


def launch_info(store, run_id: str) -> dict | None:
    try:
        return json.loads((Path(store.root) / "logs" / f"{run_id}.launch.json").read_text())
    except (OSError, ValueError):
        return None


def current_state(store, run_id: str):
    """(state, record or None): the index's word once the run registered, else the launched process's.

    "starting" while a launched child has not registered yet; "failed" if it died before registering.
    """
    from ..store.runs import get_run, pid_alive
    if store.index.run(run_id) is not None:
        rec = get_run(store, run_id)
        if rec.state == "running" and (rec.extra or {}).get("starting"):
            return "starting", rec              # reserved by the launcher, not yet taken up by the child
        return rec.state, rec
    info = launch_info(store, run_id)
    if info is not None and info.get("host") == socket.gethostname() and \
            pid_alive(info.get("pid"), info.get("proc_start")):
        return "starting", None
    if store.index.run(run_id) is not None:          # registered between the two reads
        return current_state(store, run_id)
    return ("failed" if info is not None else "unknown"), None


def resolve_any(store, prefix: str) -> str:
    """A run id from an id or prefix: registered runs first, then launched ones not yet registered."""
    from ..store.runs import resolve_run
    try:
        return resolve_run(store, prefix)
    except ScellisError as e:
        if e.diagnostic.code != "run-unknown":
            raise
        logs = Path(store.root) / "logs"
        p = prefix if prefix.startswith("run-") else "run-" + prefix
        launched = sorted(f.name[:-len(".launch.json")] for f in logs.glob("*.launch.json")) if logs.is_dir() else []
        hits = [r for r in launched if r.startswith(p)]
        if len(hits) == 1:
            return hits[0]
        raise


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
        from .lifecycle import open_store
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
        from .lifecycle import FINAL_STATES
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
        from ..store.runs import get_run
        from .lifecycle import result_of_record
        if self.store.index.run(self.id) is None:
            return {"run": self.id, "state": "failed", "error": {"message": "the process died before registering "
                    "the run", "log": self.log_tail()}}
        return result_of_record(get_run(self.store, self.id), self.store)

    def events(self, timeout: float | None = None, poll: float = 0.25) -> Iterator[dict]:
        """Progress events as they come (start, step, ..., then {"event": "done", "state", "result"})."""
        from .lifecycle import follow
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


# ---- the child ------------------------------------------------------------------------------------------
def child_main(job_path: str) -> int:
    """Run a launched job; every outcome is recorded in the store under the job's run id."""
    from ..store import Store
    from .lifecycle import exit_code, resume, train
    ensure_xdg_runtime_dir()
    job = json.loads(Path(job_path).read_text())
    run_id, store = job["run_id"], Store.open(job["store"])
    print(f"scellis: detached run {run_id} (pid {os.getpid()}), job {job_path}", flush=True)
    spec = None
    try:
        if job.get("spec"):
            from ..spec import Spec
            s = job["spec"]
            spec = Spec.from_text(s["text"], source=s.get("source") or "<spec>", base_dir=s.get("base_dir"))
        kw = dict(job.get("kwargs") or {})
        if job["kind"] == "train":
            run = train(spec, store=store, run_id=run_id, **kw)
        else:
            run = resume(job["ref"], store=store, spec=spec, run_id=run_id, **kw)
        from .lifecycle import summary_lines
        print("\n".join(summary_lines(run.result(), str(store.root))), flush=True)
        return exit_code(run.state)
    except ScellisError as e:
        print(e.diagnostic.format(), flush=True)
        row = store.index.run(run_id)
        if row is not None and row["state"] == "failed":     # it ran and failed (diverged, ...): exit 1, as `train`
            return EXIT_FAILED
        _record_failure(store, run_id, e, spec)
        return EXIT_REFUSED if e.diagnostic.code == "plan-red" else EXIT_ERROR
    except KeyboardInterrupt:
        return 1
    except BaseException as e:
        import traceback
        traceback.print_exc()
        _record_failure(store, run_id, e, spec)
        return 1


def _record_failure(store, run_id: str, error: BaseException, spec) -> None:
    """A run that failed before it registered is still recorded, so whoever waits on it learns why."""
    from ..store.runs import reserved_for
    try:
        row = store.index.run(run_id)
        if row is None or reserved_for(store, row, os.getpid()):      # never registered, or only reserved
            from ..store import start_run
            start_run(store, id=run_id, spec_hash=spec.hash if spec is not None else None,
                      extra={"detached": True}).fail(error)
    except ScellisError as e:                      # a full or read-only store: the log says it all
        print(f"scellis: could not record the failure: {e.diagnostic.format()}", flush=True)

