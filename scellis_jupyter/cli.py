"""The `scellis` command line.

One function per subcommand (`cmd_<name>(args) -> exit code`) plus one that declares its arguments
(`_args_<name>(parser)`); `COMMANDS` lists them, so plan/train/resume/runs/verify/catalog/gc are added
the same way. A ScellisError prints its diagnostic on stderr and exits 2, without a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
from typing import Callable

from . import __version__
from .errors import ScellisError

EXIT_OK, EXIT_ERROR, EXIT_REFUSED = 0, 2, 3


# ---- scellis device -----------------------------------------------------------------------------------
def _args_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None,
                   help="wgpu, reference, or part of an adapter name (default: $SCELLIS_DEVICE, else the best)")
    p.add_argument("--json", action="store_true", help="print the device as one JSON object")


def cmd_device(args) -> int:
    """Show the device runs would use, and why it was chosen."""
    from .backends.device import device
    d = device(args.device)
    info = d.to_json()
    if args.json:
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
    return EXIT_OK


# ---- scellis plan -------------------------------------------------------------------------------------
def _size(text: str) -> int:
    from .spec.schema import parse_bytes
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
    from .plan import plan
    from .spec import Spec
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
    from .store import Store
    return Store.open(args.store, create=False)


def _when(t: float | None) -> str:
    import datetime
    if t is None:
        return ""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


def _run_summary(rec) -> dict:
    step = next((c["step"] for c in reversed(rec.checkpoints) if c["hash"] == rec.last_checkpoint), None)
    return {"run": rec.id, "state": rec.state, "last_checkpoint": rec.last_checkpoint, "last_step": step,
            "created": _when(rec.created), "updated": _when(rec.updated), "heartbeat": _when(rec.heartbeat),
            "spec_hash": rec.spec_hash, "tier": rec.tier, "host": rec.host, "pid": rec.pid,
            "record": rec.record_hash, "error": rec.error, "resume": rec.resume_hint or None}


def _args_runs(p: argparse.ArgumentParser) -> None:
    _args_store(p)


def cmd_runs(args) -> int:
    """List the runs of a store (a run whose process died shows as interrupted, with its last checkpoint)."""
    rows = [_run_summary(r) for r in _open_store(args).list_runs()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("no runs")
        return EXIT_OK
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
    return EXIT_OK


def _args_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
    _args_store(p)


def cmd_show(args) -> int:
    """Show one run's record: state, spec, device, tier, peaks, metrics and checkpoints."""
    rec = _open_store(args).get_run(args.run_id)
    if args.json:
        d = rec.to_json()
        d.update(record=rec.record_hash, heartbeat=rec.heartbeat, last_checkpoint=rec.last_checkpoint)
        print(json.dumps(d, indent=2, default=str))
        return EXIT_OK
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
        print(f"  step {c['step']:<8} epoch {c['epoch']:<5} {c['hash']}")
    return EXIT_OK


def _nonnegative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return v


def _args_gc(p: argparse.ArgumentParser) -> None:
    _args_store(p)
    p.add_argument("--keep-final", action=argparse.BooleanOptionalAction, default=True,
                   help="keep each run's final checkpoint (default: yes)")
    p.add_argument("--grace", type=_nonnegative, default=60.0, metavar="SECONDS",
                   help="keep objects younger than this, a concurrent writer may not have named them yet (60)")


def cmd_gc(args) -> int:
    """Delete intermediate checkpoints nothing refers to (final checkpoints, pins and records stay)."""
    report = _open_store(args).gc(keep_final=args.keep_final, grace_s=args.grace)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(f"freed {len(report.freed_objects)} objects ({report.freed_bytes} bytes), "
              f"{len(report.removed_checkpoints)} checkpoints, {report.removed_temp_files} temp files; "
              f"kept {report.kept_objects} objects")
    return EXIT_OK


# ---- registry ---------------------------------------------------------------------------------------
# name -> (declare arguments, run); the run function's docstring is the subcommand's help line.
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "device": (_args_device, cmd_device),
    "plan": (_args_plan, cmd_plan),
    "runs": (_args_runs, cmd_runs),
    "show": (_args_show, cmd_show),
    "gc": (_args_gc, cmd_gc),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scellis", description="Scellis for Jupyter: plan, train, checkpoint and "
                                "reproduce models on any GPU through WebGPU.")
    p.add_argument("--version", action="version", version=f"scellis-jupyter {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, (declare, run) in COMMANDS.items():
        doc = (run.__doc__ or "").strip().splitlines()
        sp = sub.add_parser(name, help=doc[0] if doc else None, description=doc[0] if doc else None)
        declare(sp)
        sp.set_defaults(run=run)
    return p


def ensure_xdg_runtime_dir() -> None:
    """Mesa's Vulkan driver warns on stderr when XDG_RUNTIME_DIR is unset: give it a private directory.

    Entry points call this before the first adapter enumeration; the library itself leaves the
    environment alone.
    """
    if os.environ.get("XDG_RUNTIME_DIR"):
        return
    path = os.path.join(tempfile.gettempdir(), f"scellis-xdg-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            path = tempfile.mkdtemp(prefix="scellis-xdg-")   # someone else's directory: use a fresh one
    except OSError:
        path = tempfile.mkdtemp(prefix="scellis-xdg-")
    os.environ["XDG_RUNTIME_DIR"] = path


def main(argv: list[str] | None = None) -> int:
    ensure_xdg_runtime_dir()
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except ScellisError as e:
        print(e.diagnostic.format(), file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
