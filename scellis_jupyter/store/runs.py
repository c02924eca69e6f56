"""Run records: what ran, on what, from which spec and data, with which checkpoints and result.

Why records are objects and the index only points at the latest one: a record is immutable and
hashable (a notebook can carry its hash and `scellis verify` can recheck it), while the index row is the
mutable "where is this run now" (state, heartbeat, pid, host). A run whose process is gone (same host:
its pid is dead; any host: its heartbeat is older than a timeout) is persisted as `interrupted` with its
last good checkpoint the first time anyone lists it, so a dead run is never shown as `running`.
A falsely suspected run (alive, just slow to beat) turns back to `running` on its next heartbeat.
"""
from __future__ import annotations

import json
import dataclasses
import difflib
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..errors import Diagnostic, ScellisError, did_you_mean
from .errors import CorruptObject, StoreError
from .checkpoint import load_checkpoint
from .objects import load_json

if TYPE_CHECKING:
    from .store import Store

STATES = ("running", "finished", "failed", "interrupted", "refused")
TERMINAL = ("finished", "failed", "refused")
DEFAULT_TIMEOUT = 30.0


@dataclass
class RunRecord:
    """One version of a run's record (stored as a canonical JSON object)."""

    id: str
    state: str
    spec_hash: str | None = None
    program_hash: str | None = None
    dataset_hash: str | None = None
    split_hash: str | None = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)   # [{"hash", "step", "epoch"}]
    engine_version: str = ""
    device: Any = None
    tier: str | None = None
    plan: Any = None
    predicted_peak_bytes: int | None = None
    measured_peak_bytes: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    updated: float = 0.0
    host: str = ""
    pid: int | None = None
    resume_from: str | None = None                # set when interrupted: the last checkpoint that verifies
    version: int = 0                              # 0 for a run's first record, +1 for each later one
    previous: str | None = None                   # the record version this one supersedes (None for the first)
    # read-time information from the index, not part of the stored record
    record_hash: str | None = field(default=None, compare=False, repr=False)
    heartbeat: float | None = field(default=None, compare=False, repr=False)

    @property
    def last_checkpoint(self) -> str | None:
        """Where this run can be continued from: the newest checkpoint that verifies once it was settled,
        else its newest checkpoint, else (a resumed run that saved none of its own yet) the checkpoint it
        started from, so a resumed run killed early is never a dead end."""
        if self.resume_from:
            return self.resume_from
        if self.checkpoints:
            return self.checkpoints[-1]["hash"]
        return (self.extra or {}).get("resumed_from")

    def last_checkpoint_step(self, store=None) -> int | None:
        """The step of the last good checkpoint: from the record, else (a checkpoint saved just before the
        process died, not yet in the record) from the store's index."""
        h = self.last_checkpoint
        step = next((c["step"] for c in reversed(self.checkpoints) if c["hash"] == h), None)
        if step is None and h and store is not None:
            row = store.index.checkpoint(h)
            step = row["step"] if row is not None else None
        return step

    @property
    def resumed_by(self) -> str | None:
        """The run that continued this one (`scellis resume`), if any."""
        return (self.extra or {}).get("resumed_by")

    @property
    def resume_hint(self) -> str:
        if self.state != "interrupted":
            return ""
        if self.resumed_by:
            return f"resumed as {self.resumed_by}"
        if self.last_checkpoint:
            return f"resume it from checkpoint {self.last_checkpoint[:12]} with `scellis resume {self.id}`"
        return "it saved no checkpoint: start it again"

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("record_hash"), d.pop("heartbeat")
        return d

    @classmethod
    def from_json(cls, d: Any, *, where: str = "") -> "RunRecord":
        names = {f.name for f in dataclasses.fields(cls)} - {"record_hash", "heartbeat"}
        if not isinstance(d, dict) or "id" not in d or d.get("state") not in STATES:
            raise CorruptObject("object is not a run record", where=where)
        return cls(**{k: v for k, v in d.items() if k in names})


_SETTABLE = {f.name for f in dataclasses.fields(RunRecord)} - {
    "id", "state", "checkpoints", "created", "updated", "host", "pid", "resume_from", "record_hash", "heartbeat",
    "error", "version", "previous"}


def put_record(store: "Store", rec: RunRecord) -> str:
    """Store `rec` as the next version of its run's record (version and the hash it supersedes filled in),
    so the index can be rebuilt from the records alone (`scellis fsck --rebuild-index`); returns its hash."""
    if rec.record_hash:
        rec.version, rec.previous = (rec.version or 0) + 1, rec.record_hash
    return store.put_json(rec.to_json(), kind="run-record")


def new_run_id(now: float | None = None) -> str:
    """`run-YYYYMMDD-HHMMSS-xxxxxx` (UTC, plus 24 random bits so parallel starts never collide)."""
    t = time.gmtime(time.time() if now is None else now)
    return time.strftime("run-%Y%m%d-%H%M%S-", t) + secrets.token_hex(3)


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (Linux), to tell a reused pid from the original process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int | None, proc_start: str | None = None) -> bool:
    """Whether process `pid` of this host still runs (a zombie or a reused pid counts as gone)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass                                           # exists, owned by someone else
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
    except (OSError, IndexError):
        return True
    if proc_start is not None:
        now = _proc_start(pid)
        if now is not None and now != proc_start:
            return False
    return True


def _error_json(error: Any) -> dict[str, Any]:
    if isinstance(error, ScellisError):
        d = error.diagnostic.to_json()
        d["type"] = type(error).__name__
        return _jsonable(d)
    if isinstance(error, Diagnostic):
        return _jsonable(error.to_json())
    if isinstance(error, BaseException):
        return {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, dict):
        return _jsonable(error)
    return {"message": str(error)}


def _jsonable(d: dict) -> dict:
    return json.loads(json.dumps(d, default=str))


class RunHandle:
    """The live side of a run: owned by the process that trains; every change writes a new record."""

    def __init__(self, store: "Store", record: RunRecord, lease: Any = None):
        self.store, self.record, self._lock = store, record, threading.RLock()
        self._lease = lease            # the writer lease (store.leases) held until the run ends

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def state(self) -> str:
        return self.record.state

    def _write(self, **row: Any) -> None:
        """Store the current record as a new object and point the index row at it."""
        rec = self.record
        rec.updated = time.time()
        h = put_record(self.store, rec)
        rec.record_hash = h
        self.store.index.update_run(rec.id, state=rec.state, record=h, updated=rec.updated,
                                    last_checkpoint=rec.last_checkpoint, **row)

    def heartbeat(self) -> None:
        """Say "still alive" (pid, host, time); revives a run that a stale heartbeat made look interrupted."""
        with self._lock:
            now, pid = time.time(), os.getpid()
            beat = dict(heartbeat=now, pid=pid, host=socket.gethostname(), proc_start=_proc_start(pid))
            if self._lease is not None:
                self._lease.refresh()
            row = self.store.index.run(self.id)
            if row is not None and row["state"] == "interrupted" and self.record.state in ("running", "interrupted"):
                self.record.state, self.record.resume_from, self.record.error = "running", None, None
                self._write(**beat)
            else:
                self.store.index.update_run(self.id, **beat)
            self.record.heartbeat = now

    def checkpoint(self, hash: str, step: int, epoch: int) -> None:
        """Record that checkpoint `hash` (already saved) is this run's newest."""
        with self._lock:
            self._require_live("checkpoint")
            h = self.store.resolve(hash)
            self.record.checkpoints.append({"hash": h, "step": int(step), "epoch": int(epoch)})
            ck = self.store.index.checkpoint(h)
            self.store.index.add_checkpoint(h, run=self.id, step=int(step), epoch=int(epoch),
                                            parent=ck["parent"] if ck else None,
                                            spec_hash=ck["spec_hash"] if ck else self.record.spec_hash,
                                            created=ck["created"] if ck else time.time())
            self._revive()
            self._write(heartbeat=time.time())

    def update(self, **fields: Any) -> None:
        """Change record fields while running (e.g. metrics so far, measured peak)."""
        with self._lock:
            _set_fields(self.record, fields)
            self._revive()
            self._write(heartbeat=time.time())

    def finish(self, **fields: Any) -> RunRecord:
        return self._end("finished", fields)

    def fail(self, error: Any, **fields: Any) -> RunRecord:
        return self._end("failed", fields, error=_error_json(error))

    def refuse(self, diagnostic: Any) -> RunRecord:
        return self._end("refused", {}, error=_error_json(diagnostic))

    def interrupt(self, reason: str = "stopped by the user") -> RunRecord:
        return self._end("interrupted", {}, error={"code": "interrupted", "message": reason})

    def _end(self, state: str, fields: dict, error: dict | None = None) -> RunRecord:
        with self._lock:
            self._require_live(state)
            _set_fields(self.record, fields)
            self.record.state, self.record.error = state, error
            if state != "interrupted":
                self.record.resume_from = None
            self._write(heartbeat=time.time())
            if self._lease is not None:
                self._lease.release()
            return self.record

    def _revive(self) -> None:
        if self.record.state == "interrupted" or (self.store.index.run(self.id) or {"state": ""})["state"] == "interrupted":
            self.record.state, self.record.resume_from, self.record.error = "running", None, None

    def _require_live(self, action: str) -> None:
        row = self.store.index.run(self.id)
        state = row["state"] if row is not None else self.record.state
        if state in TERMINAL:
            raise StoreError(f"run {self.id} is already {state}; cannot {action} it", where=f"run {self.id}",
                             code="run-state", hint="start a new run (or resume from its last checkpoint)")

    def __enter__(self) -> "RunHandle":
        return self

    def __exit__(self, et, e, tb) -> None:
        if self.record.state in TERMINAL:
            return
        if e is None:
            self.finish()
        elif isinstance(e, KeyboardInterrupt):
            self.interrupt("KeyboardInterrupt")
        else:
            self.fail(e)


def _set_fields(rec: RunRecord, fields: dict) -> None:
    bad = set(fields) - _SETTABLE
    if bad:
        name = sorted(bad)[0]
        raise StoreError(f"{name!r} is not a run record field", where="run record", code="bad-argument",
                         hint=did_you_mean(name, _SETTABLE) or f"fields: {', '.join(sorted(_SETTABLE))}")
    for k, v in fields.items():
        setattr(rec, k, _jsonable({"v": v})["v"] if isinstance(v, (dict, list)) else v)


def start_run(store: "Store", **fields: Any) -> RunHandle:
    """Register a new run in state `running` (record object + index row with pid/host/heartbeat).

    A run reserved for this very process (`reserve_run`, by the launcher of a detached run) is adopted:
    its row gets the full record; any other existing id is refused.
    """
    now, pid = time.time(), os.getpid()
    fields = dict(fields)
    run_id = fields.pop("id", None) or new_run_id(now)
    row = store.index.run(run_id)
    adopt = row is not None and reserved_for(store, row, pid)
    if row is not None and not adopt:
        raise StoreError(f"run {run_id} already exists", where=f"store {store.root}", code="bad-argument")
    rec = RunRecord(id=run_id, state="running", engine_version=__version__, created=row["created"] if adopt else now,
                    updated=now, host=socket.gethostname(), pid=pid)
    _set_fields(rec, fields)
    rec.heartbeat = now
    if adopt:                      # the next version of the reservation's record, so the newest is this run's
        try:
            rec.version = int(store.get_json(row["record"]).get("version") or 0)
            rec.record_hash = row["record"]
        except (StoreError, AttributeError, TypeError, ValueError):
            pass
    lease = store.lease()          # a running run writes checkpoints before it names them: gc must wait
    try:
        h = put_record(store, rec)
        rec.record_hash = h
        if adopt:
            store.index.update_run(run_id, state="running", spec_hash=rec.spec_hash, updated=now, heartbeat=now,
                                   pid=pid, host=rec.host, proc_start=_proc_start(pid), record=h,
                                   last_checkpoint=None)
        else:
            store.index.insert_run(id=run_id, state="running", spec_hash=rec.spec_hash, created=now, updated=now,
                                   heartbeat=now, pid=pid, host=rec.host, proc_start=_proc_start(pid), record=h,
                                   last_checkpoint=None)
    except BaseException:
        lease.release()
        raise
    return RunHandle(store, rec, lease)


def reserve_run(store: "Store", run_id: str, *, pid: int, **fields: Any) -> bool:
    """Register run `run_id` for process `pid` of this host that is starting it (a detached child), so
    `scellis runs` lists it the moment its id is printed; the child's `start_run` adopts the row. The
    record says `extra.starting`; until adopted the run is never settled as gone while `pid` lives.
    Returns False when the child registered first (nothing to do)."""
    now = time.time()
    if store.index.run(run_id) is not None:
        return False
    rec = RunRecord(id=run_id, state="running", engine_version=__version__, created=now, updated=now,
                    host=socket.gethostname(), pid=pid)
    _set_fields(rec, fields)
    rec.extra = dict(rec.extra or {}, starting=True)
    h = put_record(store, rec)
    try:
        store.index.insert_run(id=run_id, state="running", spec_hash=rec.spec_hash, created=now, updated=now,
                               heartbeat=now, pid=pid, host=rec.host, proc_start=_proc_start(pid), record=h,
                               last_checkpoint=None)
    except StoreError:
        if store.index.run(run_id) is not None:      # the child was quicker
            return False
        raise
    return True


def release_run(store: "Store", run_id: str, pid: int) -> bool:
    """Withdraw a reservation of `pid` not yet adopted (the run never started: bad input before it could
    register), so no run is listed that never existed. An adopted run is never touched."""
    row = store.index.run(run_id)
    if row is None or not reserved_for(store, row, pid):
        return False
    return store.index.delete_reserved_run(run_id, pid, row["record"])


def reserved_for(store: "Store", row, pid: int | None = None) -> bool:
    """Whether index row `row` is a reservation (`reserve_run`) not yet adopted, for process `pid` if given."""
    if row["state"] not in ("running", "interrupted") or row["host"] != socket.gethostname():
        return False
    if pid is not None and row["pid"] != pid:
        return False
    try:
        return bool((store.get_json(row["record"]).get("extra") or {}).get("starting"))
    except (StoreError, AttributeError):
        return False


class HeartbeatThread(threading.Thread):
    """Beats for a run every `every` seconds in the background, so long steps never look like a dead run."""

    def __init__(self, handle: RunHandle, every: float = 2.0):
        super().__init__(name=f"scellis-heartbeat-{handle.id}", daemon=True)
        self.handle, self.every, self._stop_event = handle, float(every), threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while True:
            try:
                self.handle.heartbeat()
            except Exception as e:                      # keep beating; the last problem is kept for callers
                self.error = e
            if self._stop_event.wait(self.every):
                return

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()

    def __enter__(self) -> "HeartbeatThread":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ---- reading ------------------------------------------------------------------------------------------
def _load(store: "Store", row) -> RunRecord:
    h, where = row["record"], f"run {row['id']}"
    if not h:
        raise StoreError(f"run {row['id']} has no record object", where=where, code="store-missing")
    rec = RunRecord.from_json(load_json(store.objects.read(h), name=h, where=where), where=where)
    rec.state, rec.record_hash, rec.heartbeat = row["state"], row["record"], row["heartbeat"]
    return rec


def _is_gone(row, timeout: float, now: float, starting: bool = False) -> bool:
    if row["host"] == socket.gethostname():
        if not pid_alive(row["pid"], row["proc_start"]):
            return True
        if starting:                         # a detached child still importing and planning: alive is enough
            return False
    beat = row["heartbeat"] if row["heartbeat"] is not None else row["updated"]
    return now - beat > timeout


def _last_good(store: "Store", rec: RunRecord) -> str | None:
    """The newest checkpoint of the run that loads and verifies (record list and index rows together)."""
    return newest_good_checkpoint(store, rec)[0]


def newest_good_checkpoint(store: "Store", rec: RunRecord) -> tuple[str | None, list[dict[str, Any]]]:
    """(the newest of the run's checkpoints that loads and verifies, or None; the newer ones skipped as
    [{"hash", "step", "problem"}]). Candidates: the record's list, the index rows of the run (a checkpoint
    saved just before its process died), and the checkpoint a resumed run started from."""
    seen = {c["hash"]: c["step"] for c in rec.checkpoints}
    for r in store.index.checkpoints(rec.id):
        seen.setdefault(r["hash"], r["step"])
    start = (rec.extra or {}).get("resumed_from")        # a resumed run starts from another run's checkpoint
    if start and start not in seen:
        row = store.index.checkpoint(start)
        seen[start] = row["step"] if row is not None else -1
    if rec.resume_from and rec.resume_from not in seen:
        seen[rec.resume_from] = -1
    skipped = []
    for h in sorted(seen, key=lambda k: seen[k], reverse=True):
        try:
            load_checkpoint(store, h)
            return h, skipped
        except ScellisError as e:
            skipped.append({"hash": h, "step": seen[h], "problem": e.diagnostic.message})
    return None, skipped


def _settle(store: "Store", row, timeout: float) -> RunRecord:
    """The run's record, first persisting `interrupted` when its process is gone."""
    rec = _load(store, row)
    if row["state"] != "running" or not _is_gone(row, timeout, time.time(), bool((rec.extra or {}).get("starting"))):
        return rec
    rec.state = "interrupted"
    rec.resume_from = _last_good(store, rec)
    gone = (f"process {row['pid']} on {row['host']} is gone" if row["host"] == socket.gethostname()
            else f"no heartbeat from {row['host']} for more than {timeout:g} s")
    rec.error = {"code": "interrupted", "message": gone, "last_checkpoint": rec.resume_from}
    rec.updated = time.time()
    h = put_record(store, rec)
    # compare-and-set: a heartbeat that arrives meanwhile wins, and the run stays running
    if store.index.update_run(rec.id, expect_state="running", expect_heartbeat=row["heartbeat"], state="interrupted",
                              record=h, updated=rec.updated, last_checkpoint=rec.last_checkpoint):
        rec.record_hash = h
        return rec
    return _load(store, store.index.run(rec.id))


def mark_resumed(store: "Store", run_id: str, by: str) -> None:
    """Note on a run that is not running that run `by` continues it (a new record version; state unchanged)."""
    row = store.index.run(run_id)
    if row is None or row["state"] == "running":
        return
    rec = _load(store, row)
    rec.extra = dict(rec.extra or {}, resumed_by=by)
    rec.updated = time.time()
    h = put_record(store, rec)
    store.index.update_run(run_id, expect_state=row["state"], record=h, updated=rec.updated)


class RunList(list):
    """The runs whose records read (a list of RunRecord), plus `.unreadable`: one dict per run whose
    record cannot be read ({"run", "state", "record", "code", "problem"}), so one damaged record never
    hides every other run. `diagnostics()` gives them in the project's one format."""

    def __init__(self, records: list[RunRecord] = (), unreadable: list[dict[str, Any]] = ()):
        super().__init__(records)
        self.unreadable: list[dict[str, Any]] = list(unreadable)

    def diagnostics(self) -> list[Diagnostic]:
        return [Diagnostic(u["code"], f"the record {(u['record'] or '-')[:12]} of run {u['run']} cannot be read: "
                           f"{u['problem']}", where=f"run {u['run']}",
                           hint="`scellis fsck --repair` rebuilds it from the run's earlier record or its index "
                           "row; the other runs are listed") for u in self.unreadable]


def list_runs(store: "Store", *, timeout: float = DEFAULT_TIMEOUT) -> RunList:
    """Every run whose record reads, oldest first (runs whose process is gone are marked `interrupted`,
    persisted, first); runs whose record is missing or corrupt are named in `.unreadable`, not raised."""
    out = RunList()
    for row in store.index.runs():
        try:
            out.append(_settle(store, row, timeout))
        except StoreError as e:
            out.unreadable.append({"run": row["id"], "state": row["state"], "record": row["record"],
                                   "code": e.diagnostic.code, "problem": e.diagnostic.message.split("\n")[0]})
    return out


def resolve_run(store: "Store", prefix: str) -> str:
    """A run id from an id or unique prefix (with or without `run-`); unknown ones get suggestions."""
    ids = [r["id"] for r in store.index.runs()]
    if prefix in ids:
        return prefix
    p = prefix if prefix.startswith("run-") else "run-" + prefix
    matches = [i for i in ids if i.startswith(p)] or [i for i in ids if i.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    where = f"store {store.root}"
    if matches:
        raise StoreError(f"run prefix {prefix!r} is ambiguous: {len(matches)} runs match ({', '.join(matches[:5])})",
                         where=where, code="store-ambiguous", hint="give more of the run id", matches=matches)
    close = difflib.get_close_matches(p, ids, n=3, cutoff=0.8)
    if not close:                                   # else: the ids sharing the longest start with the prefix
        share = {i: len(os.path.commonprefix([i, p])) for i in ids}
        best = max(share.values(), default=0)
        close = [i for i in ids if share[i] == best][:3] if best > len("run-") else []
    hint = (("did you mean " + " or ".join(repr(c) for c in close) + "?") if close else
            ("`scellis runs` lists the runs" if ids else "this store has no runs yet"))
    raise StoreError(f"no run {prefix!r} in the store", where=where, code="run-unknown", hint=hint, suggestions=close)


def get_run(store: "Store", prefix: str, *, timeout: float = DEFAULT_TIMEOUT) -> RunRecord:
    """One run's latest record by id or unique prefix (dead runs are settled as in `list_runs`)."""
    return _settle(store, store.index.run(resolve_run(store, prefix)), timeout)
