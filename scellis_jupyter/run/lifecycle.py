"""The run lifecycle as a user drives it: train, resume, list and follow runs, from a notebook or the CLI.

Why one driver: `scellis train`, `sc.train` and a detached child all run the same loop around a `Run`:
readable progress (or a callback), a progress-event file in the store that any other process can follow
(`scellis wait`, a notebook handle), and a clean interrupt (SIGINT or SIGTERM: checkpoint at the next
step boundary, record `interrupted`) instead of a half-applied step. The store is found by one rule
everywhere: an explicit path, else `$SCELLIS_STORE`, else `.scellis/` in the current directory.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from ..spec import Spec
from ..errors import ScellisError, WaitTimeout
from .run import Run, RunError
from .detach import launch
from .gan import GANRun
from .records import (FINAL_STATES, Events, current_state, exit_code, follow, format_event, open_store,  # noqa: F401
                      read_events, report_every, resolve_any, result_of_record, runs, summary_lines)
from ..store.runs import new_run_id
from ..store.runs import get_run, mark_resumed
from .run import spec_of_checkpoint
from ..store.runs import newest_good_checkpoint, resolve_run
from ..store.runs import reserve_run
from ..store.runs import release_run

# states after which a run's process does no more work (an interrupted run waits for `resume`)


# ---- the store ----------------------------------------------------------------------------------------


# ---- progress events ----------------------------------------------------------------------------------


# ---- the driver -----------------------------------------------------------------------------------------
class _Signals:
    """SIGINT/SIGTERM set a flag the loop checks between steps; a second SIGINT raises KeyboardInterrupt."""

    def __init__(self):
        self.reason: str | None = None
        self._old: dict = {}

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._old[sig] = signal.signal(sig, self._handle)
                except (ValueError, OSError):
                    pass
        return self

    def _handle(self, signum, frame) -> None:
        if self.reason is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.reason = f"stopped by {signal.Signals(signum).name}"

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            try:
                signal.signal(sig, old)
            except (ValueError, OSError):
                pass


def silence(stream) -> None:
    """Point `stream`'s file descriptor at /dev/null: its reader left (`| head`), and neither later prints
    nor the interpreter's flush at exit should raise BrokenPipeError again. A stream without a descriptor
    (a notebook's) is left alone."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _printer(stream=None) -> Callable[[dict], None]:
    def show(ev: dict) -> None:
        line = format_event(ev)
        if line is not None:
            try:
                print(line, file=stream or sys.stdout, flush=True)
            except BrokenPipeError:         # the reader left: the run goes on, its lines go nowhere
                silence(stream or sys.stdout)
    return show


def drive(run: Run, *, progress: bool | Callable[[dict], None] = True) -> dict:
    """Run `run` to its end (or a signal), reporting progress; returns `run.result()`.

    progress: True prints lines on stdout, a callable receives each event dict, False is silent. Events
    also go to the store's event file when the run has a store, so other processes can follow.
    """
    show = _printer() if progress is True else progress if callable(progress) else None
    events = Events(run.store, run.run_id) if run.store is not None and run.run_id else None
    per_epoch = len(run.loader)
    every = report_every(run.total_steps, per_epoch)
    dev = run.device

    def emit(ev: dict) -> None:
        ev.setdefault("run", run.run_id)
        ev.setdefault("t", time.time())
        if events is not None:
            events.write(ev)
        if show is not None:
            show(ev)

    p = run.plan
    emit({"event": "start", "step": run.step, "total_steps": run.total_steps, "steps_per_epoch": per_epoch,
          "device": f"{dev.backend}:{dev.name}", "tier": run.tier, "plan": p.verdict, "peak_bytes": p.peak_bytes,
          "capacity_bytes": p.capacity_bytes})
    last = time.monotonic()
    it = iter(run)
    with _Signals() as sig:
        try:
            for s in it:
                now = time.monotonic()
                if getattr(s, "metrics", None) or s.step % every == 0 or s.step >= run.total_steps or now - last > 10.0:
                    last = now
                    ev = {"event": "step", "step": s.step, "total_steps": run.total_steps, "epoch": s.epoch,
                          "skipped": run.skipped}
                    if hasattr(s, "d_loss"):      # a GAN round: both networks' losses and rates
                        ev.update(d_loss=s.d_loss, g_loss=s.g_loss, lr_d=s.lr_d, lr_g=s.lr_g)
                    else:
                        ev.update(loss=s.loss, lr=s.lr, metrics=s.metrics)
                    emit(ev)
                if sig.reason is not None and run.step < run.total_steps:
                    run.interrupt(sig.reason)
                    emit({"event": "interrupt", "step": run.step, "reason": sig.reason})
                    break
        except BaseException:
            emit({"event": "end", "state": run.state, "step": run.step})
            raise
        finally:
            it.close()
    result = run.result()
    emit({"event": "end", "state": run.state, "step": run.step, "weights_hash": result["weights_hash"],
          "final_checkpoint": result["final_checkpoint"]})
    return result


# ---- train / resume -------------------------------------------------------------------------------------
_DETACH_KW = ("device", "steps", "epochs", "checkpoint_every", "eval_every", "memory", "tier", "max_skipped",
              "weights", "weights_mapping")


def train(spec, *, store=None, detach: bool = False, progress: bool | Callable[[dict], None] = True,
          run_id: str | None = None, data: dict | None = None, **kw):
    """Train `spec` (a Spec, spec text or a spec file) to its end and return the finished `Run`.

    Keywords are Run's (device, steps, epochs, checkpoint_every, eval_every, memory, tier, ...). The run
    is recorded in `store` (default: $SCELLIS_STORE, else ./.scellis). detach=True starts it in its own
    process and returns a `Detached` handle at once (`.wait()`, `.state`, `.result()`, `.follow(cb)`).
    A red plan raises the refusal (the run is recorded `refused`) before any compute. `data` gives
    in-memory parts: {"train": (X, y), "val": (X_val, y_val), "test": ...} (or a DataFrame per part, with
    [data] target naming the label column).
    """
    spec = Spec.of(spec, data)
    st = open_store(store)
    if detach and spec.memory is not None:
        raise RunError("a detached run cannot take in-memory data: its process does not share this one's memory",
                       where="train(detach=True, data=...)",
                       hint="train in a kernel thread (%scellis train NAME) or save the arrays to a .npz file")
    if detach:
        return launch(st, {"kind": "train", "spec": _spec_job(spec), "spec_hash": spec.hash,
                           "kwargs": _detach_kwargs(kw)}, run_id=run_id)
    run_id = run_id or new_run_id()
    with _reserved(st, run_id):            # listed at once, before the data loads and the step compiles
        run = run_class(spec)(spec, store=st, run_id=run_id, **kw)
    drive(run, progress=progress)
    return run


def run_class(spec) -> type:
    """The loop a spec trains with: `GANRun` for kind = "gan", else `Run`."""
    if getattr(spec, "kind", "supervised") == "gan":
        return GANRun
    return Run


def resume(ref: str, *, store=None, spec=None, steps: int | None = None, detach: bool = False,
           progress: bool | Callable[[dict], None] = True, run_id: str | None = None, **kw):
    """Continue from a checkpoint (hash, unique prefix, ref, or a run id: its last good checkpoint).

    Returns the finished `Run` (or a `Detached` handle with detach=True). `steps` is the total to reach
    (default: the original run's target when it stopped short of it, else the schedule's horizon); the
    device, tier and checkpoint cadence default to the original run's. `spec` (optional) must be the
    checkpoint's spec: another one is refused with the diff of the two texts.
    """
    st = open_store(store, create=False)
    if detach:
        ck, _ = _resume_target(st, ref)
        if spec is not None:                # refuse a mismatch here, not in the child
            spec = Spec.of(spec)
            if _spec_hash_of(st, ck) != spec.hash:
                st.keep_spec_text(spec.hash, spec.text)          # for the diff
                st.check_spec(st.load_checkpoint(ck), spec.hash)
        job = {"kind": "resume", "ref": ref, "checkpoint": ck, "spec": _spec_job(spec) if spec is not None else None,
               "kwargs": _detach_kwargs(dict(kw, steps=steps))}
        return launch(st, job, run_id=run_id)
    run = prepare_resume(ref, store=st, spec=spec, steps=steps, run_id=run_id, **kw)
    drive(run, progress=progress)
    return run


def prepare_resume(ref: str, *, store=None, spec=None, steps: int | None = None, run_id: str | None = None,
                   **kw) -> Run:
    """The Run that `resume` drives (not started): iterate it yourself for step-by-step control.

    The new run is in the index (reserved, then adopted by the Run) as soon as its checkpoint is found,
    before the spec is analysed, the dataset loaded and the step compiled: `scellis runs` lists it at once.
    """
    st = open_store(store, create=False)
    ck_hash, origin = _resume_target(st, ref)
    run_id = run_id or new_run_id()
    # resumed_from: a run killed while still starting up is resumed from there too, never a dead end
    with _reserved(st, run_id, resumed_from=ck_hash, resumed_from_run=origin):
        return _prepare_resume(st, ck_hash, origin, spec=spec, steps=steps, run_id=run_id, ref=ref, **kw)


class _reserved:
    """Reserve `run_id` for this process for the duration of a Run's start-up; withdraw the reservation if
    the start-up fails before the Run took it up (bad input stays an error, not a listed run)."""

    def __init__(self, st, run_id: str, **extra):
        self.st, self.run_id = st, run_id
        self.mine = reserve_run(st, run_id, pid=os.getpid(), extra={k: v for k, v in extra.items() if v})

    def __enter__(self) -> "_reserved":
        return self

    def __exit__(self, et, e, tb) -> None:
        if et is not None and self.mine:
            try:
                release_run(self.st, self.run_id, os.getpid())
            except ScellisError:
                pass                       # a read-only or full store: the reservation reads gone later


def _prepare_resume(st, ck_hash: str, origin: str | None, *, spec=None, steps: int | None = None,
                    run_id: str | None = None, ref: str | None = None, **kw) -> Run:
    if spec is None:
        spec, ck, _ = spec_of_checkpoint(st, ck_hash)
    else:
        spec = Spec.of(spec)
        ck = st.load_checkpoint(ck_hash)
    ex = ck.extra or {}
    rec = get_run(st, origin) if origin else None
    seen = set()
    while rec is not None and (rec.extra or {}).get("starting") and rec.id not in seen:
        seen.add(rec.id)                # killed while starting up: its target and cadence are its origin's
        up = (rec.extra or {}).get("resumed_from_run")
        rec = get_run(st, up) if up and st.index.run(up) is not None else None
    rex = (rec.extra or {}) if rec is not None else {}
    given, target = steps is not None, None   # a refusal points at what the user gave: --steps, or only the run
    if steps is None:
        target = rex.get("target_steps")
        steps = int(target) if target and int(target) > ck.step else ex.get("horizon")
    if steps is not None and int(steps) <= ck.step:
        # without --steps, a run that reached its own target is told so, not the recipe's horizon
        upto = (f"step {steps}" if given or not target else f"the run's target ({int(target)} steps)")
        raise RunError(f"checkpoint {ck.hash[:12]} is already at step {ck.step}; nothing to resume up to {upto}",
                       where="resume --steps" if given else f"resume {ref or ck.hash[:12]}",
                       hint=f"ask for more steps, e.g. --steps {2 * ck.step}")
    kw = {k: v for k, v in kw.items() if v is not None}
    kw.setdefault("device", ex.get("device"))
    kw.setdefault("tier", ex.get("tier"))
    if rex.get("checkpoint_every"):
        kw.setdefault("checkpoint_every", rex["checkpoint_every"])
    run = run_class(spec)(spec, store=st, resume=ck.hash, steps=steps, run_id=run_id, **kw)
    if run._handle is not None:
        run._handle.update(extra=dict(run._handle.record.extra, resumed_from_run=origin))
        if origin:
            mark_resumed(st, origin, run.run_id)
    return run


def _resume_target(st, ref: str) -> tuple[str, str | None]:
    """(checkpoint hash, the run it belongs to) for a checkpoint reference or a run id."""
    origin = None
    if isinstance(ref, str) and ref.startswith("run-") and st.index.ref(ref) is None:
        origin = resolve_run(st, ref)
        rec = get_run(st, origin)
        if rec.state == "running":
            raise RunError(f"run {origin} is still running (pid {rec.pid} on {rec.host})", where=f"run {origin}",
                           hint=f"wait for it (scellis wait {origin}), or resume from one of its checkpoints "
                                "by hash to branch off")
        h, skipped = newest_good_checkpoint(st, rec)
        for sk in skipped:          # the README promises "its last good checkpoint": say which were passed over
            print(f"scellis: skipped checkpoint {sk['hash'][:12]} of run {origin} (step {sk['step']}): "
                  f"{sk['problem']}", file=sys.stderr)
        if h is None:
            if not skipped:
                h = st.resolve_checkpoint(origin)          # none at all: its own clear error
            raise RunError(f"none of the {len(skipped)} checkpoints of run {origin} verifies", where=f"run {origin}",
                           code="store-corrupt", skipped=skipped,
                           hint="restore the store from a copy, or start the run again")
        if skipped:
            print(f"scellis: resuming run {origin} from checkpoint {h[:12]}, its newest that verifies",
                  file=sys.stderr)
    else:
        h = st.resolve_checkpoint(ref)
        row = st.index.checkpoint(h)
        origin = row["run"] if row is not None else None
    return h, origin


def _spec_hash_of(st, ck_hash: str) -> str | None:
    row = st.index.checkpoint(ck_hash)
    return row["spec_hash"] if row is not None else None


def _spec_job(spec) -> dict:
    return {"text": spec.text, "source": spec.source, "base_dir": spec.base_dir}


def _detach_kwargs(kw: dict) -> dict:
    """Run keywords a child process can receive as JSON (a Device goes by name, weights by file path)."""
    out = {}
    for k, v in kw.items():
        if v is None:
            continue
        if k not in _DETACH_KW:
            raise RunError(f"{k}= cannot be passed to a detached run", where=f"train(detach=True, {k}=...)",
                           hint=f"detached runs take {', '.join(_DETACH_KW)}")
        if k == "device" and not isinstance(v, str):
            v = "reference" if v.backend == "reference" else v.name
        if k == "weights":
            if not isinstance(v, (str, os.PathLike)):
                raise RunError("a detached run takes pretrained weights as a .safetensors path",
                               where="train(detach=True, weights=...)", hint="save them with safetensors first")
            v = str(Path(v).resolve())
        out[k] = v
    return out


# ---- results from records (runs of other processes) ---------------------------------------------------


__all__ = ["train", "resume", "prepare_resume", "runs", "drive", "follow", "open_store", "result_of_record",
           "format_event", "summary_lines", "read_events", "Events", "WaitTimeout", "exit_code"]
