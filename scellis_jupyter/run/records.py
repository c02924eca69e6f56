"""Run records as the front-ends read them: the store to open, the events file, progress and summary lines,
a record's result, following a run to its end, exit codes.

Why apart from the lifecycle: detached runs, verify, the CLI and the notebook read records without starting
anything, and the lifecycle (which starts runs, also detached ones) stands on this.
"""
from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

from ..errors import ScellisError, WaitTimeout
from ..store import Store
from ..store.runs import get_run, pid_alive
from ..store.runs import resolve_run


FINAL_STATES = ("finished", "failed", "refused", "interrupted")


def open_store(store=None, *, create: bool = True):
    """The store by the one rule (Store, path, or None: $SCELLIS_STORE, else ./.scellis)."""
    if isinstance(store, Store):
        return store
    return Store.open(store, create=create)


def runs(store=None) -> list:
    """Every run in the store (oldest first) as RunRecords; a run whose process died reads `interrupted`.
    Runs whose record cannot be read are named in the result's `.unreadable` (id, record, code, problem)."""
    return open_store(store, create=False).list_runs()


class Events:
    """Append-only JSON lines `<store>/logs/<run>.events.jsonl`: what followers in other processes read.

    Progress is a convenience, never a reason to stop training: a write that fails (full disk) turns the
    event file off with one warning.
    """

    def __init__(self, store, run_id: str):
        self.path = store.log_path(run_id, "events.jsonl")
        self._ok = True

    def write(self, ev: dict) -> None:
        if not self._ok:
            return
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(ev, default=_json_default) + "\n")
        except OSError as e:
            self._ok = False
            print(f"scellis: progress events off ({self.path}: {e.strerror or e})", file=sys.stderr)


def read_events(path: str | os.PathLike, offset: int = 0) -> tuple[list[dict], int]:
    """The complete event lines after byte `offset`, and the offset after the last complete line."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    out = []
    for line in data[:end].splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue                          # a torn line from a killed writer: skip it
    return out, offset + end + 1


def _json_default(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def report_every(total_steps: int, steps_per_epoch: int) -> int:
    """Steps between progress lines: once per epoch, but at least ~10 lines for a short run."""
    return max(1, min(int(steps_per_epoch), math.ceil(total_steps / 10)))


def fmt_value(v: float) -> str:
    """A loss or metric for people: four decimals in the usual range, scientific notation for small or huge
    magnitudes (so a loss of 4.7e-7 never reads 0.0000), exact zero as 0. js/src/lib/eta.js fmtValue has
    the same rule."""
    v = float(v)
    if v == 0:
        return "0"
    if not math.isfinite(v) or 1e-3 <= abs(v) < 1e5:
        return f"{v:.4f}"
    return f"{v:.3e}"


def format_event(ev: dict) -> str | None:
    """One readable progress line for an event (None for events that print nothing)."""
    kind = ev.get("event")
    if kind == "start":
        at = f", from step {ev['step']}" if ev.get("step") else ""
        line = (f"run {ev['run']}: {ev['total_steps']} steps ({ev['steps_per_epoch']} per epoch{at}) on "
                f"{ev.get('device', '?')}, tier {ev.get('tier', '?')}")
        if ev.get("plan"):
            line += (f"; plan {ev['plan']}: peak {ev['peak_bytes']} bytes of {ev['capacity_bytes']} "
                     f"({100 * ev['peak_bytes'] / max(ev['capacity_bytes'], 1):.2g}%)")
        return line
    if kind == "step":
        width = len(str(ev.get("total_steps", ev["step"])))
        line = f"step {ev['step']:>{width}}/{ev.get('total_steps', '?')}  epoch {ev['epoch'] + 1:<3} "
        if "d_loss" in ev:
            line += (f"d_loss {fmt_value(ev['d_loss'])}  g_loss {fmt_value(ev['g_loss'])}  lr_d {ev['lr_d']:.2e}  "
                     f"lr_g {ev['lr_g']:.2e}")
        else:
            line += f"loss {fmt_value(ev['loss'])}  lr {ev['lr']:.2e}"
        if ev.get("skipped"):
            line += f"  skipped {ev['skipped']}"
        for k, v in (ev.get("metrics") or {}).items():       # validation metrics
            if isinstance(v, (int, float)):
                line += f"  val {k} {fmt_value(v)}"
        return line
    if kind == "interrupt":
        return f"interrupted at step {ev['step']}: {ev['reason']}"
    return None


def summary_lines(r: dict, store_root: str | None = None) -> list[str]:
    """The end-of-run summary (train, resume and wait print the same)."""
    dev = r.get("device") or {}
    where = f"{dev.get('backend', '?')}:{dev.get('name', '?')}" if isinstance(dev, dict) else str(dev)
    lines = [f"{r['state']} {r['run']}: {r.get('steps')} steps on {where}, tier {r.get('tier')}"]
    if r.get("stop_reason") and not (r["state"] == "failed" and r.get("error")):
        lines.append(f"  stopped: {r['stop_reason']}")
    if r.get("error") and r["state"] != "finished":
        e = r["error"]
        lines.append(f"  error: {e.get('message', e) if isinstance(e, dict) else e}")
    metrics = {k: v for k, v in (r.get("metrics") or {}).items() if isinstance(v, (int, float)) and v is not None}
    if metrics:
        lines.append("  " + "  ".join(f"{k} {fmt_value(v)}" for k, v in metrics.items()))
    if r.get("measured_peak_bytes") is not None:
        lines.append(f"  memory: measured peak {r['measured_peak_bytes']} bytes, "
                     f"planned {r.get('predicted_peak_bytes')}")
    ck = r.get("final_checkpoint") or r.get("last_checkpoint")
    if ck:
        good = " (the last good one)" if r["state"] == "failed" else ""
        lines.append(f"  checkpoint {ck}{good}" + (f" in {store_root}" if store_root else ""))
    if r.get("weights_hash"):
        lines.append(f"  weights {r['weights_hash']}")
    s = f" --store {store_root}" if store_root else ""
    if r["state"] == "interrupted":
        lines.append(f"  resume: scellis resume {r['run']}{s}")
    elif r["state"] == "finished":
        lines.append(f"  verify: scellis verify {r['run']}{s}")
    return lines


def result_of_record(rec, store=None) -> dict:
    """The same summary as `Run.result()`, read from a run record (any process, any time)."""
    ex = rec.extra or {}
    steps = ex.get("steps")
    if steps is None:                       # not finished: as far as its last checkpoint got
        steps = rec.last_checkpoint_step(store)
    return {"run": rec.id, "state": rec.state, "steps": steps, "target_steps": ex.get("target_steps"),
            "epochs": ex.get("epochs_done"),
            "final_checkpoint": rec.last_checkpoint if rec.state == "finished" else None,
            "last_checkpoint": rec.last_checkpoint, "weights_hash": ex.get("weights_hash"),
            "metrics": dict(rec.metrics or {}), "loss_history": list(ex.get("loss_history") or []),
            "skipped_steps": ex.get("skipped"), "stop_reason": ex.get("stop_reason"),
            "measured_peak_bytes": rec.measured_peak_bytes, "predicted_peak_bytes": rec.predicted_peak_bytes,
            "device": rec.device, "tier": rec.tier, "spec_hash": rec.spec_hash, "program_hash": rec.program_hash,
            "error": rec.error, "reason": (rec.error or {}).get("message") if rec.state != "finished" else None,
            "resumed_from": ex.get("resumed_from"), "resumed_by": ex.get("resumed_by")}


def follow(store, run_id: str, *, timeout: float | None = None, poll: float = 0.25,
           from_start: bool = True) -> Iterator[dict]:
    """Progress events of a run as they are written (any process), ending with
    {"event": "done", "state": ..., "result": {...}} once the run reaches a final state.

    Raises WaitTimeout when `timeout` seconds pass first. Works for detached runs that have not yet
    registered (their launch file names the process) and for runs that wrote no events at all.
    """
    st = open_store(store, create=False)
    run_id = resolve_any(st, run_id)
    path = st.root / "logs" / f"{run_id}.events.jsonl"
    offset = 0 if from_start else (path.stat().st_size if path.exists() else 0)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        evs, offset = read_events(path, offset)
        yield from evs
        state, rec = current_state(st, run_id)
        if state in FINAL_STATES:
            evs, offset = read_events(path, offset)
            yield from evs
            yield {"event": "done", "run": run_id, "state": state,
                   "result": result_of_record(rec, st) if rec is not None else {"run": run_id, "state": state}}
            return
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeout(f"run {run_id} is still {state} after {timeout:g} s", where=f"run {run_id}",
                              hint="wait longer (--timeout), or follow it again later", state=state)
        time.sleep(poll)


def exit_code(state: str) -> int:
    """The CLI's exit status for a run's final state: 0 finished, 3 refused, 1 otherwise."""
    return {"finished": 0, "refused": 3}.get(state, 1)


def launch_info(store, run_id: str) -> dict | None:
    try:
        return json.loads((Path(store.root) / "logs" / f"{run_id}.launch.json").read_text())
    except (OSError, ValueError):
        return None


def current_state(store, run_id: str):
    """(state, record or None): the index's word once the run registered, else the launched process's.

    "starting" while a launched child has not registered yet; "failed" if it died before registering.
    """
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
