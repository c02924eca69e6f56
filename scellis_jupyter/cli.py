"""The `scellis` command line.

One function per subcommand (`cmd_<name>(args) -> exit code`) plus one that declares its arguments
(`_args_<name>(parser)`); `COMMANDS` lists them. A ScellisError prints its diagnostic on stderr and exits
2 (3 for a refused plan), without a traceback; argparse's own complaints (unknown flag, bad value,
missing argument) come out in the same diagnostic format, with a did-you-mean where one is close.

Exit codes: 0 ok / finished / verified; 1 a run failed (diverged, NaN storm, an error mid-run: its record is
printed, as JSON with --json) or was interrupted, verify found differences, fsck found problems (left
unrepaired), or `runs` found run records it cannot read (named on stderr; the rest is listed); 2 bad input; 3 refused (red plan); 124 `wait --timeout` ran out; 130 interrupted in the
foreground; 141 stdout's reader went away (`| head`).
"""
from __future__ import annotations

import datetime
import re
import argparse
import difflib
import json
import math
import sys
import textwrap
from typing import Callable

from . import settings
from ._version import __version__
from .backends.device import ensure_xdg_runtime_dir
from .errors import (EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED,
                     EXIT_TIMEOUT, LedgerError, ScellisError, UsageError, did_you_mean)
from .backends.device import device
from .spec.schema import parse_bytes
from .plan import plan
from .spec import Spec
from .store import Store
from .store.fsck import fsck
from .store.store import default_path
from .run.lifecycle import exit_code, summary_lines
from .store.runs import new_run_id
from .run.lifecycle import result_of_record
from .run import lifecycle
from .run.detach import Detached, current_state, resolve_any
from .run.verify import verify
from . import catalog
from .run.lifecycle import silence
from .jupyter.records import verify_notebook



class _Parser(argparse.ArgumentParser):
    """argparse, except that its errors are raised as diagnostics in the project's one format."""

    def error(self, message: str):
        hint = ""
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            hint = did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
        sub = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is not None and not hint:
            hint = f"commands: {', '.join(sub.choices)};"
        raise UsageError(message, where=self.prog, hint=" ".join(filter(None, [hint, f"see `{self.prog} --help`"])))


# ---- scellis device -----------------------------------------------------------------------------------
def _args_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None,
                   help="wgpu, reference, or part of an adapter name (default: $SCELLIS_DEVICE, else the best)")
    p.add_argument("--json", action="store_true", help="print the device as one JSON object")


def cmd_device(args) -> int:
    """Show the device runs would use, and why it was chosen."""
    d = device(args.device)
    info = d.to_json()
    if args.json:
        info["settings"] = settings.in_effect()
        print(json.dumps(info, indent=2, default=str))
        return EXIT_OK
    for k in ("backend", "name", "adapter_type", "memory_bytes", "memory_source", "choice"):
        v = info[k]
        if k == "memory_bytes":
            v = f"{v} ({v / 2**30:.1f} GiB)"
        print(f"{k:14} {v}")
    feats = textwrap.wrap(", ".join(info["features"]) or "-", 100, break_on_hyphens=False)
    print(f"{'features':14} " + "\n".ljust(16).join(feats))
    limits = {k: v for k, v in info["limits"].items() if v is not None}
    print(f"{'limits':14}" + ("" if limits else " -"))
    width = max((len(k) for k in limits), default=0)
    for k in sorted(limits):
        print(f"  {k:{width}} {limits[k]}")
    lines = settings.report()
    print("settings" + ("" if lines else " " * 7 + "- (all defaults; `scellis settings` lists them)"))
    for line in lines:
        print(line)
    return EXIT_OK


# ---- scellis settings ---------------------------------------------------------------------------------
def _args_settings(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print every setting as one JSON object")
    p.add_argument("--markdown", action="store_true", help="print the table of docs/settings.md")


def cmd_settings(args) -> int:
    """List the SCELLIS_* environment settings: what each does, and its value here."""
    if args.markdown:
        print(settings.render(), end="")
        return EXIT_OK
    shown, stray = settings.in_effect(), settings.unknown()
    if args.json:
        print(json.dumps({"settings": {k: {"kind": s.kind, "default": s.default, "value": shown.get(k),
                                           "group": s.group, "doc": s.doc} for k, s in settings.SETTINGS.items()},
                          "unknown": stray}, indent=2))
        return EXIT_OK
    width = max(map(len, settings.SETTINGS))
    for g, title in settings.GROUPS.items():
        print(title.split(" (")[0])
        for k, s in settings.SETTINGS.items():
            if s.group == g:
                value = f"= {shown[k]}" if k in shown else "  unset" + (
                    "" if s.default is None else f" (default {settings.describe_default(s)})")
                print(f"  {k:{width}} {value}")
    for k in stray:
        print(f"unknown: {k}")
    return EXIT_OK


# ---- scellis plan -------------------------------------------------------------------------------------
def _size(text: str) -> int:
    n = parse_bytes(text)
    if n is None or n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive size (bytes, or e.g. 8GiB, 512MB)")
    return n


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return n


def _args_plan(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="spec file (TOML)")
    p.add_argument("--device", default=None, help="wgpu, reference, or part of an adapter name")
    p.add_argument("--memory", type=_size, default=None, help="declared capacity (bytes, or e.g. 8GiB)")
    p.add_argument("--batch-size", type=_positive, default=None)
    p.add_argument("--json", action="store_true", help="print the Plan's fields as one JSON object")


def cmd_plan(args) -> int:
    """Plan a spec's training step: green / yellow / red with the peak, its breakdown and fixes."""
    spec = Spec.from_file(args.spec)
    p = plan(spec, device=args.device, memory=args.memory, batch_size=args.batch_size)
    if args.json:
        print(json.dumps(p.to_json(), indent=2, default=str))
    else:
        print(p.table())
    if p.verdict == "red":
        print(p.refusal().diagnostic.format(), file=sys.stderr)
        return EXIT_REFUSED
    return EXIT_OK


# ---- scellis runs / show / gc (the store) ----------------------------------------------------------------
def _args_store(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, metavar="DIR",
                   help="store directory (default: $SCELLIS_STORE, else ./.scellis)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _open_store(args):
    return Store.open(args.store, create=False)


def _when(t: float | None) -> str:
    if t is None:
        return ""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


def _run_summary(rec, store=None) -> dict:
    return {"run": rec.id, "state": rec.state, "last_checkpoint": rec.last_checkpoint,
            "last_step": rec.last_checkpoint_step(store),
            "created": _when(rec.created), "updated": _when(rec.updated), "heartbeat": _when(rec.heartbeat),
            "spec_hash": rec.spec_hash, "tier": rec.tier, "host": rec.host, "pid": rec.pid,
            "record": rec.record_hash, "error": rec.error, "resume": rec.resume_hint or None,
            "resumed_by": rec.resumed_by}


def _index_damage(store) -> list:
    """Print (stderr) how the store's index is damaged or disagrees with the objects, each naming the fix;
    `runs` and `show` still answer from it, with exit 1, never a silent 0."""
    diags = store.index_diagnostics()
    for d in diags:
        print(d.format(), file=sys.stderr)
    return diags


def _args_runs(p: argparse.ArgumentParser) -> None:
    _args_store(p)


def cmd_runs(args) -> int:
    """List the runs of a store (a run whose process died shows as interrupted, with its last checkpoint).

    A run whose record object is missing or corrupt is named on stderr (one diagnostic each) and the
    others are listed; the exit code is then 1, as `fsck` exits when it finds damage."""
    store = _open_store(args)
    damage = _index_damage(store)
    runs = store.list_runs()
    rows = [_run_summary(r, store) for r in runs]
    rc = EXIT_FAILED if runs.unreadable or damage else EXIT_OK
    for d in runs.diagnostics():
        print(d.format(), file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return rc
    if not rows:
        print("no runs" if not runs.unreadable else "no readable runs")
        return rc
    table = [("RUN", "STATE", "LAST CHECKPOINT", "STEP", "CREATED", "UPDATED")]
    for r in rows:
        table.append((r["run"], r["state"], (r["last_checkpoint"] or "-")[:12],
                      "-" if r["last_step"] is None else str(r["last_step"]), r["created"], r["updated"]))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for r in rows:
        if r["resume"]:
            print(f"{r['run']}: {r['resume']}")
    return rc


def _args_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
    _args_store(p)


def cmd_show(args) -> int:
    """Show one run's record: state, spec, device, tier, peaks, metrics and checkpoints."""
    store = _open_store(args)
    damage = _index_damage(store)
    rc = EXIT_FAILED if damage else EXIT_OK
    rec = store.get_run(args.run_id)
    if args.json:
        d = {"run": rec.id, **rec.to_json()}
        d.update(record=rec.record_hash, heartbeat=rec.heartbeat, last_checkpoint=rec.last_checkpoint)
        print(json.dumps(d, indent=2, default=str))
        return rc
    summary = _run_summary(rec)
    for k in ("run", "state", "created", "updated", "heartbeat", "host", "pid", "spec_hash", "tier",
              "last_checkpoint", "record"):
        print(f"{k:16} {'' if summary[k] is None else summary[k]}")
    for k in ("program_hash", "dataset_hash", "split_hash", "engine_version", "device", "predicted_peak_bytes",
              "measured_peak_bytes"):
        v = getattr(rec, k)
        if v not in (None, ""):
            print(f"{k:16} {v}")
    for k in ("metrics", "timings", "error"):
        v = getattr(rec, k)
        if v:
            print(f"{k:16} {json.dumps(v, default=str)}")
    if rec.resume_hint:
        print(f"{'resume':16} {rec.resume_hint}")
    print(f"checkpoints      {len(rec.checkpoints)}")
    for c in rec.checkpoints:
        # 1-based, as training's progress lines count (the record keeps the 0-based epoch index)
        print(f"  step {c['step']:<8} epoch {c['epoch'] + 1:<5} {c['hash']}")
    return rc


def _nonnegative_float(text: str, what: str = "a number") -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what} >= 0")
    return v


def _tolerance(text: str) -> float:
    """A relative error: finite (an infinite one would let verify pass anything) and >= 0."""
    v = _nonnegative_float(text, "a relative error")
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite relative error >= 0")
    return v


def _nonnegative(text: str) -> float:
    return _nonnegative_float(text, "a number of seconds")


def _args_gc(p: argparse.ArgumentParser) -> None:
    _args_store(p)
    p.add_argument("--keep-final", action=argparse.BooleanOptionalAction, default=True,
                   help="keep each run's final checkpoint (default: yes)")
    p.add_argument("--grace", type=_nonnegative, default=60.0, metavar="SECONDS",
                   help="keep objects younger than this, a concurrent writer may not have named them yet (60); "
                   "whatever it says, objects younger than the oldest live writer's lease stay")


def cmd_gc(args) -> int:
    """Delete intermediate checkpoints nothing refers to (final checkpoints, pins and records stay)."""
    report = _open_store(args).gc(keep_final=args.keep_final, grace_s=args.grace)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(f"freed {len(report.freed_objects)} objects ({report.freed_bytes} bytes), "
              f"{len(report.removed_checkpoints)} checkpoints, {report.removed_temp_files} temp files; "
              f"kept {report.kept_objects} objects"
              + (f", {report.kept_for_lease} of them younger than the oldest live writer's lease "
                 f"({report.live_leases} live)" if report.kept_for_lease else ""))
    return EXIT_OK


def _args_fsck(p: argparse.ArgumentParser) -> None:
    _args_store(p)
    p.add_argument("--repair", action="store_true",
                   help="drop index rows that name nothing, move bad objects to <store>/quarantine/ (deletes nothing); "
                   "an index that is damaged or disagrees with the objects is rebuilt from them")
    p.add_argument("--rebuild-index", action="store_true",
                   help="rebuild index.sqlite from the objects (run records and checkpoint manifests); the old "
                   "index goes to <store>/quarantine/")


def cmd_fsck(args) -> int:
    """Check a store: re-hash every object, SQLite's integrity check, index against files, load every checkpoint."""
    report = fsck(default_path(args.store), repair=args.repair, rebuild_index=args.rebuild_index)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print("\n".join(report.lines()))
    return EXIT_OK if not report.unrepaired else EXIT_FAILED


def _args_ledger(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["verify"], help="verify: re-check every receipt's hash, chain and signature")
    p.add_argument("path", nargs="?", default=None, metavar="PATH",
                   help="the ledger file (default: <store>/ledger.sqlite)")
    p.add_argument("--key", default=None, metavar="KEY",
                   help="the signer's Ed25519 public key (64 hex characters, or a PEM file) "
                        "(default: the key pinned for this ledger in your key store)")
    _args_store(p)


def cmd_ledger(args) -> int:
    """Check a pool's receipt ledger against its pinned signer and head: edits, deletions, insertions,
    reordering, re-signing and truncation are reported (exit 1); a ledger that cannot be read is exit 2."""
    from pathlib import Path
    from .pool.keys import load_public
    from .pool.ledger import Ledger
    from .store.store import default_path
    path = Path(args.path) if args.path else Path(default_path(args.store)) / "ledger.sqlite"
    pub = load_public(args.key) if args.key else None
    led = Ledger(path, readonly=True)
    try:
        report = led.verify(public_key=pub)
    except LedgerError as e:
        print(e.diagnostic.format(), file=sys.stderr)
        return EXIT_FAILED
    finally:
        led.close()
    print(json.dumps({"path": str(path), **report}) if args.json else
          f"{path}: {report['receipts']} receipts, {report['work_units']} work units, chain and signatures "
          f"verified against key {report['public_key']}")
    return EXIT_OK


# ---- scellis train / resume / wait (the run lifecycle) ------------------------------------------------------
def _args_run_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, metavar="DIR",
                   help="store directory (default: $SCELLIS_STORE, else ./.scellis)")
    p.add_argument("--steps", type=_positive, default=None, metavar="N",
                   help="stop after N optimizer steps in all (the schedule still follows the recipe)")
    p.add_argument("--checkpoint-every", type=_positive, default=None, metavar="K",
                   help="checkpoint every K steps (always at the end)")
    p.add_argument("--device", default=None, help="wgpu, reference, or part of an adapter name")
    p.add_argument("--json", action="store_true", help="print one JSON object (the run's result) on stdout")
    p.add_argument("--detach", action="store_true",
                   help="train in a background process that outlives this one; prints the run id at once")


def _args_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="spec file (TOML)")
    _args_run_common(p)
    p.add_argument("--epochs", type=_positive, default=None, metavar="N", help="epochs (overrides the recipe)")
    p.add_argument("--memory", type=_size, default=None, metavar="BYTES",
                   help="declared capacity (bytes, or e.g. 8GiB): a plan above it is refused")
    p.add_argument("--tier", default=None, help="determinism tier: debug, prod or fast (default: the recipe's)")


def _run_kwargs(args, *names: str) -> dict:
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def _print_detached(h, args) -> int:
    if args.json:
        print(json.dumps(h.to_json()))
    else:
        s = f" --store {h.store.root}" if args.store else ""
        print(h.id)
        print(f"  started in the background (pid {h.pid}); output: {h.log}", file=sys.stderr)
        print(f"  follow: scellis wait {h.id}{s}", file=sys.stderr)
    return EXIT_OK


def _finish(run, args, store) -> int:
    r = run.result()
    if args.json:
        print(json.dumps(r, default=str))
    else:
        print("\n".join(summary_lines(r, str(store.root))))
    return exit_code(run.state)


def _refused(e: ScellisError, run_id: str, args) -> int:
    print(e.diagnostic.format(), file=sys.stderr)
    if args.json:
        print(json.dumps({"run": run_id, "state": "refused", "error": e.diagnostic.to_json()}, default=str))
    return EXIT_REFUSED


def _foreground(start, args, store) -> int:
    """Run `start(run_id)` (train or resume to the end) under a fresh run id; a red plan is reported as a
    refusal of that run (exit 3), a finished run by its summary or JSON result."""
    run_id = new_run_id()
    try:
        run = start(run_id)
    except ScellisError as e:
        if e.diagnostic.code == "plan-red":
            return _refused(e, run_id, args)
        row = store.index.run(run_id)
        if row is None or row["state"] != "failed":      # bad input before the run registered: exit 2
            raise
        return _failed(e, run_id, args, store)
    return _finish(run, args, store)


def _failed(e: ScellisError, run_id: str, args, store) -> int:
    """A registered run that failed (diverged, a NaN storm, a data or device error mid-run): the diagnostic
    on stderr, its record (state, reason, last checkpoint) on stdout, as JSON with --json; exit 1."""
    print(e.diagnostic.format(), file=sys.stderr)
    r = result_of_record(store.get_run(run_id), store)
    if args.json:
        print(json.dumps(r, default=str))
    else:
        print("\n".join(summary_lines(r, str(store.root))))
    return EXIT_FAILED


def cmd_train(args) -> int:
    """Train a spec: refuses a red plan before any compute, records the run and its checkpoints in the store."""
    spec = Spec.from_file(args.spec)
    store = lifecycle.open_store(args.store)
    kw = _run_kwargs(args, "device", "steps", "epochs", "checkpoint_every", "memory", "tier")
    if args.detach:
        return _print_detached(lifecycle.train(spec, store=store, detach=True, **kw), args)
    return _foreground(lambda rid: lifecycle.train(spec, store=store, run_id=rid, progress=not args.json, **kw),
                       args, store)


def _args_resume(p: argparse.ArgumentParser) -> None:
    p.add_argument("ref", metavar="CHECKPOINT_OR_RUN",
                   help="a checkpoint hash or unique prefix, a ref, or a run id (its last good checkpoint)")
    _args_run_common(p)
    p.add_argument("--spec", default=None, metavar="FILE",
                   help="the spec file to continue with (must be the checkpoint's; default: the stored one)")


def cmd_resume(args) -> int:
    """Continue a run from a checkpoint or a run id (an interrupted run: from its last good checkpoint)."""
    store = lifecycle.open_store(args.store, create=False)
    spec = Spec.from_file(args.spec) if args.spec else None
    kw = _run_kwargs(args, "device", "checkpoint_every")
    if args.detach:
        return _print_detached(lifecycle.resume(args.ref, store=store, spec=spec, steps=args.steps, detach=True,
                                                **kw), args)
    return _foreground(lambda rid: lifecycle.resume(args.ref, store=store, spec=spec, steps=args.steps, run_id=rid,
                                                    progress=not args.json, **kw), args, store)


def _args_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
    p.add_argument("--store", default=None, metavar="DIR",
                   help="store directory (default: $SCELLIS_STORE, else ./.scellis)")
    p.add_argument("--timeout", type=_nonnegative, default=None, metavar="SECONDS",
                   help="give up after this long (exit 124); default: wait as long as it runs")
    p.add_argument("--json", action="store_true", help="print only the final result as one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress lines, only the final summary")


def cmd_wait(args) -> int:
    """Follow a run's progress until it ends; exits 0 finished, 1 failed or interrupted, 3 refused."""
    store = lifecycle.open_store(args.store, create=False)
    run_id = resolve_any(store, args.run_id)
    show = not (args.json or args.quiet)
    done = None
    try:
        for ev in lifecycle.follow(store, run_id, timeout=args.timeout):
            if ev.get("event") == "done":
                done = ev
            elif show:
                line = lifecycle.format_event(ev)
                if line is not None:
                    print(line, flush=True)
    except lifecycle.WaitTimeout as e:
        print(e.diagnostic.format(), file=sys.stderr)
        if args.json:
            print(json.dumps({"run": run_id, "state": current_state(store, run_id)[0], "timed_out": True}))
        return EXIT_TIMEOUT
    r = done["result"]
    if store.index.run(run_id) is None:           # died before it registered: show why from its log
        tail = Detached.attach(run_id, store).log_tail()
        r = dict(r, error={"message": "the process ended before it registered the run", "log": tail})
        if not args.json:
            print(f"failed {run_id}: the process ended before it registered the run; its output:\n{tail}")
    if args.json:
        print(json.dumps(r, default=str))
    elif store.index.run(run_id) is not None:
        print("\n".join(lifecycle.summary_lines(r, str(store.root) if args.store else None)))
    return lifecycle.exit_code(done["state"])


# ---- scellis verify ------------------------------------------------------------------------------------
def _args_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it, or a NOTEBOOK.ipynb whose run "
                                                 "pins are checked against the store and re-executed")
    _args_store(p)
    p.add_argument("--device", default="reference",
                   help="where to re-execute (default: reference, the deterministic numpy path)")
    p.add_argument("--tolerance", type=_tolerance, default=None, metavar="REL",
                   help="relative error allowed per step: step t's loss within t times it, the final weights and "
                        "metrics within steps times it (default: the run's tier: debug on the same device bit for "
                        "bit, else determinism.TOLERANCE)")


def cmd_verify(args) -> int:
    """Re-execute a finished run from its pinned inputs and compare with its record (exit 1: it differs)."""
    if args.run_id.endswith(".ipynb"):
        nv = verify_notebook(args.run_id, store=_open_store(args) if args.store else None, device=args.device,
                             tolerance=args.tolerance)
        print(json.dumps(nv.to_json(), indent=2, default=str) if args.json else nv.table())
        return EXIT_OK if nv.ok else EXIT_FAILED
    v = verify(args.run_id, store=_open_store(args), device=args.device, tolerance=args.tolerance)
    if args.json:
        print(json.dumps(v.to_json(), indent=2, default=str))
    else:
        print("\n".join(v.lines()))
    return EXIT_OK if v.ok else EXIT_FAILED


# ---- scellis catalog ----------------------------------------------------------------------------------
def _args_catalog(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", nargs="?", default=None,
                   help="optimizer, loss, scheduler, peft, metric, initializer, ... (default: all kinds)")
    p.add_argument("--json", action="store_true", help="print a JSON list of entries")


def cmd_catalog(args) -> int:
    """List catalog entries (built-in and loaded user entries): name, summary and parameters with ranges."""
    kind = args.kind
    if kind is not None:
        plural = {v: k for k, v in catalog.FOLDERS.items()}
        kind = plural.get(kind, kind)
        if kind not in catalog.KINDS:
            raise catalog.CatalogError(f"unknown catalog kind {args.kind!r}", where="scellis catalog",
                                       hint=did_you_mean(args.kind, list(catalog.KINDS) + list(plural))
                                       or f"kinds are: {', '.join(catalog.KINDS)}")
    entries = catalog.list_entries(kind)
    if args.json:
        print(json.dumps(entries, indent=2, default=str))
        return EXIT_OK
    for k in ([kind] if kind else catalog.KINDS):
        mine = [e for e in entries if e["kind"] == k]
        if not mine:
            continue
        print(f"{k} ({len(mine)})")
        width = max(len(e["name"]) for e in mine)
        for e in mine:
            print(f"  {e['name']:{width}}  {e['summary']}")
            for name, d in e["params"].items():
                rng = f" in {d['range']}" if d["range"] and not d["range"].startswith(("one of", "each")) \
                    else f" {d['range']}" if d["range"] else ""
                print(f"  {'':{width}}    {name}: {d['type']} = {d['default']!r}{rng}")
    return EXIT_OK


# ---- scellis profile -----------------------------------------------------------------------------------
def _args_profile(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it (its own spec is profiled), "
                                                 "or a spec file")
    _args_store(p)
    p.add_argument("--device", default=None, help="where to profile (default: the run's device; for a spec "
                                                  "file: $SCELLIS_DEVICE, else the best)")
    p.add_argument("--steps", type=_positive, default=3, help="steps timed, after the warm-up (3)")
    p.add_argument("--warmup", type=_positive, default=2, help="steps run first, not timed (2)")
    p.add_argument("--top", type=_positive, default=12, help="kernels listed, the most time first (12)")
    p.add_argument("--by", choices=("kernel", "shape", "scope"), default="kernel",
                   help="rows per kernel (default), per kernel and operand shapes (which matmul), or per layer")


def cmd_profile(args) -> int:
    """Time a few training steps kernel by kernel (GPU timestamps on wgpu, the host clock on the reference)."""
    import os
    from .run.profile import profile_run, profile_spec, profile_text
    kw = dict(steps=args.steps, warmup=args.warmup, top=args.top)
    if args.run_id.endswith(".toml") and os.path.isfile(args.run_id):
        prof = profile_spec(Spec.from_file(args.run_id), device=args.device, **kw)
    else:
        prof = profile_run(args.run_id, store=_open_store(args), device=args.device, **kw)
    print(json.dumps(prof, indent=2, default=str) if args.json else profile_text(prof, by=args.by))
    return EXIT_OK


# ---- registry ---------------------------------------------------------------------------------------
# name -> (declare arguments, run); the run function's docstring is the subcommand's help line.
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "device": (_args_device, cmd_device),
    "settings": (_args_settings, cmd_settings),
    "plan": (_args_plan, cmd_plan),
    "train": (_args_train, cmd_train),
    "resume": (_args_resume, cmd_resume),
    "wait": (_args_wait, cmd_wait),
    "runs": (_args_runs, cmd_runs),
    "show": (_args_show, cmd_show),
    "verify": (_args_verify, cmd_verify),
    "catalog": (_args_catalog, cmd_catalog),
    "gc": (_args_gc, cmd_gc),
    "fsck": (_args_fsck, cmd_fsck),
    "ledger": (_args_ledger, cmd_ledger),
    "profile": (_args_profile, cmd_profile),
}


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="scellis", description="Scellis for Jupyter: plan, train, checkpoint and "
                                "reproduce models on any GPU through WebGPU.")
    p.add_argument("--version", action="version", version=f"scellis-jupyter {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, (declare, run) in COMMANDS.items():
        doc = (run.__doc__ or "").strip().splitlines()
        sp = sub.add_parser(name, help=doc[0] if doc else None, description=doc[0] if doc else None)
        declare(sp)
        sp.set_defaults(run=run)
    return p


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = parser()
    args, extra = p.parse_known_args(argv)
    if extra:
        sub = next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)
        sp = sub.choices.get(args.cmd) if sub is not None else None
        opts = [o for a in (sp or p)._actions for o in a.option_strings]
        flag = next((x.split("=", 1)[0] for x in extra if x.startswith("-")), None)
        close = difflib.get_close_matches(flag, opts, n=1, cutoff=0.6) if flag else []
        hint = f"did you mean {close[0]!r}?" if close else ""
        prog = sp.prog if sp is not None else p.prog
        raise UsageError(f"unrecognized arguments: {' '.join(extra)}", where=prog,
                         hint=" ".join(filter(None, [hint, f"see `{prog} --help`"])))
    return args


def _reader_gone() -> int:
    """stdout's reader closed (`scellis catalog | head -1`): end quietly, as `cat` would.

    What is still buffered cannot be written, and the interpreter's own flush at exit would raise again
    ("Exception ignored ... BrokenPipeError"), so stdout is pointed at /dev/null first (the recipe of
    Python's signal documentation). Exit 141 (128 + SIGPIPE), what a shell reports for a writer whose
    reader left, so `set -o pipefail` scripts still see the output was cut short. (A training run whose
    progress reader leaves trains on: run.lifecycle silences its printer the same way.)
    """
    silence(sys.stdout)
    return EXIT_BROKEN_PIPE


def main(argv: list[str] | None = None) -> int:
    ensure_xdg_runtime_dir()
    try:
        args = _parse(argv)
        rc = args.run(args)
        sys.stdout.flush()              # inside the try: a closed pipe is reported here, not at exit
        return rc
    except BrokenPipeError:
        return _reader_gone()
    except ScellisError as e:
        # a spec with several mistakes reports each (in text order), in the one format
        for d in getattr(e, "diagnostics", None) or [e.diagnostic]:
            print(d.format(), file=sys.stderr)
        return EXIT_REFUSED if e.diagnostic.code == "plan-red" else EXIT_ERROR
    except KeyboardInterrupt:
        print("scellis: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
