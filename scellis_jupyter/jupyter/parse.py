"""Parsing of `%scellis` / `%%scellis` lines, apart from executing them (jupysql's split), so every option,
`--help` text and mistake is testable without a kernel.

    parse_line("train mlp --steps 200")       -> Command("train", Namespace(name="mlp", steps=200, ...))
    parse_cell_header("catalog optimizer my_opt") -> CellHeader("catalog", name="my_opt", kind="optimizer")

Mistakes raise `MagicError` (a ScellisError, so the same `error[code] at where: message` + hint text);
magics.py turns it into IPython's UsageError. Spec diagnostics from a cell are moved onto the cell's own
lines by `cell_diagnostic`: the `%%scellis NAME` line is line 1 of the cell, so spec line L is cell line L+1.
"""
from __future__ import annotations

import argparse
import math
import re
import shlex
from dataclasses import dataclass, field

from ..catalog.registry import KINDS
from ..errors import Diagnostic, MagicError, did_you_mean
from ..spec.schema import parse_bytes

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_LINES = 1            # the %%scellis line above the spec text in a cell


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing and exiting (a kernel must never sys.exit)."""

    def error(self, message: str):
        raise MagicError(message, where=f"%scellis {self.prog.split()[-1]}", code="magic-usage",
                         hint=f"%scellis {self.prog.split()[-1]} --help")

    def exit(self, status=0, message=None):
        raise MagicError(message or "bad arguments", where=f"%scellis {self.prog.split()[-1]}", code="magic-usage")


def _size(text: str) -> int:
    n = parse_bytes(text if not text.isdigit() else int(text))
    if n is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 8GiB or 512MiB")
    return int(n)


def _pos_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (Dask fails on nan or inf with a KeyError about time units)."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive, finite number of seconds")
    return v


def _grid_axis(text: str) -> tuple:
    """KEY=V1,V2,... -> (key, [values]): numbers where they parse, else strings."""
    key, eq, vals = text.partition("=")
    if not eq or not key or not vals:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=V1,V2,... (e.g. optimizer.lr=1e-3,1e-2)")

    def value(v: str):
        for kind in (int, float):
            try:
                return kind(v)
            except ValueError:
                pass
        return v
    return key.strip(), [value(v.strip()) for v in vals.split(",") if v.strip()]


def _name(p, help_="the model handle (the NAME of a %%scellis NAME cell) or a run id"):
    p.add_argument("name", help=help_)


def _store(p):
    p.add_argument("--store", help="the store folder (default: $SCELLIS_STORE, else ./.scellis)")


SUBCOMMANDS: dict[str, str] = {
    "plan": "the memory plan of a model: verdict, breakdown against capacity, fixes",
    "train": "train a model in the background (returns at once; a run panel and loss curve follow it)",
    "wait": "block until a model's run ends, then show its record",
    "resume": "continue an interrupted run from its last checkpoint, in the background",
    "stop": "stop a model's run at the next step (checkpointed, recorded interrupted, resumable)",
    "runs": "every run in the store",
    "show": "a model (graph and plan) or a run record",
    "device": "the device training would use",
    "catalog": "catalog entries (optimizers, losses, schedulers, ...) and their parameters",
    "verify": "re-execute a finished run on the reference path and compare with its record",
    "profile": "what one training step of a model runs: dispatches, memory, and measured time per kernel",
    "explain": "every stage of a model's training step: spec, graph, kernel schedule, arena plan, each kernel's WGSL",
    "lr-find": "the learning-rate range test: loss against learning rate, with a suggested value",
    "pool": "the Dask pool: workers, devices, memory, trust regime, dashboard link (--workers N starts one)",
    "sweep": "a two-key grid sweep of a model on the pool, drawn into a heatmap cell by cell as runs land",
}


def _build() -> dict[str, _Parser]:
    ps: dict[str, _Parser] = {}

    def new(sub: str) -> _Parser:
        p = _Parser(prog=f"%scellis {sub}", description=SUBCOMMANDS[sub], add_help=True)
        ps[sub] = p
        return p

    p = new("plan")
    _name(p, "the model handle")
    p.add_argument("--memory", type=_size, help="plan against this capacity (e.g. 8GiB) instead of the device's")
    p.add_argument("--batch-size", type=_pos_int)
    p.add_argument("--device", help="reference, wgpu, or an adapter name")
    p.add_argument("--json", action="store_true", help="the plan as JSON")

    p = new("train")
    _name(p, "the model handle")
    p.add_argument("--steps", type=_pos_int, help="optimizer steps to run (default: the recipe's epochs)")
    p.add_argument("--epochs", type=_pos_int)
    p.add_argument("--checkpoint-every", type=_pos_int, metavar="K")
    p.add_argument("--eval-every", type=_pos_int, metavar="K")
    p.add_argument("--device", help="reference, wgpu, or an adapter name")
    p.add_argument("--tier", choices=("debug", "prod", "fast"))
    p.add_argument("--memory", type=_size)
    p.add_argument("--wait", action="store_true", help="block until the run ends (as %%scellis wait)")
    _store(p)

    p = new("wait")
    _name(p)
    p.add_argument("--timeout", type=float, help="seconds to wait at most")

    p = new("resume")
    _name(p)
    p.add_argument("--steps", type=_pos_int, help="the step to reach (default: the run's target)")
    p.add_argument("--wait", action="store_true")
    _store(p)

    for sub in ("stop",):
        p = new(sub)
        _name(p, "the model handle")

    p = new("runs")
    _store(p)
    p.add_argument("--json", action="store_true")

    p = new("show")
    _name(p)
    p.add_argument("--json", action="store_true")
    _store(p)

    p = new("device")
    p.add_argument("name", nargs="?", help="use this device from now on in this kernel: auto, wgpu, reference, "
                                           "browser (the GPU of this notebook's page), or part of an adapter's name")
    p.add_argument("--json", action="store_true")

    p = new("catalog")
    p.add_argument("kind", nargs="?", help="optimizer, loss, scheduler, metric, peft, initializer, regularizer")
    p.add_argument("entry", nargs="?", help="one entry's name")
    p.add_argument("--json", action="store_true")

    p = new("verify")
    _name(p)
    p.add_argument("--tolerance", type=float, help="relative error allowed instead of the tier's rule")
    _store(p)

    p = new("profile")
    _name(p, "the model handle")
    p.add_argument("--batch-size", type=_pos_int)
    p.add_argument("--top", type=_pos_int, default=12, help="dispatches to list (the most expensive first)")
    p.add_argument("--steps", type=_pos_int, default=3, help="training steps timed kernel by kernel (3)")
    p.add_argument("--device", help="where to time them (default: the best device)")
    p.add_argument("--static", action="store_true", help="only the plan's view (dispatches, memory): time nothing")

    p = new("explain")
    _name(p, "the model handle")
    p.add_argument("--batch-size", type=_pos_int)
    p.add_argument("--device", help="whose kernels to show (default: the WebGPU adapter, else the best device)")

    p = new("lr-find")
    _name(p, "the model handle")
    p.add_argument("--steps", type=_pos_int, default=100, help="steps of the range test")
    p.add_argument("--min-lr", type=float, default=1e-7)
    p.add_argument("--max-lr", type=float, default=10.0)
    p.add_argument("--device")

    p = new("pool")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--workers", type=_pos_int, metavar="N", help="start a local pool of N worker processes")
    how.add_argument("--address", help="join a running Dask cluster (tcp://host:8786)")
    how.add_argument("--close", action="store_true", help="close the pool this notebook started")
    p.add_argument("--threads", action="store_true", help="with --workers: in-process workers (threads)")
    p.add_argument("--trust", choices=("own", "consortium", "open"), help="the pool's trust regime")
    p.add_argument("--timeout", type=_seconds, default=10.0, help="seconds to wait for --address to answer")
    p.add_argument("--name", default="pool", help="the notebook variable the pool is bound to (default: pool)")
    p.add_argument("--json", action="store_true")

    p = new("sweep")
    _name(p, "the model handle")
    p.add_argument("--grid", action="append", type=_grid_axis, required=True, metavar="KEY=V1,V2",
                   help="one axis of the grid (give two): a recipe key and its values")
    p.add_argument("--metric", help="the cell value drawn (default: val_ plus the recipe's first metric)")
    p.add_argument("--steps", type=_pos_int, default=20, help="steps each cell trains")
    p.add_argument("--verify", choices=("none", "reference", "spot", "quorum"), default="none")
    p.add_argument("--pool", default="pool", help="the notebook variable holding the pool (default: pool)")
    return ps


PARSERS = _build()


@dataclass
class Command:
    sub: str
    args: argparse.Namespace | None = None
    help: str | None = None                  # set for --help / help: the text to show instead of running

    def __getattr__(self, k):                # cmd.steps == cmd.args.steps
        if k in ("sub", "args", "help"):
            raise AttributeError(k)
        return getattr(self.args, k)


def usage() -> str:
    w = max(len(k) for k in SUBCOMMANDS)
    lines = ["%scellis SUBCOMMAND [options]   (%scellis SUBCOMMAND --help for its options)", ""]
    lines += [f"  {k:<{w}}  {v}" for k, v in SUBCOMMANDS.items()]
    lines += ["", "%%scellis NAME                    a cell holding a spec (TOML): binds NAME, shows graph and plan",
              "%%scellis catalog KIND NAME       a cell holding Python: registers a user catalog entry"]
    return "\n".join(lines)


def split_words(line: str) -> list[str]:
    """shlex words of a magic line (quotes removed, unlike IPython's parse_argstring)."""
    try:
        return shlex.split(line, comments=False, posix=True)
    except ValueError as e:
        raise MagicError(f"cannot split the line: {e}", where="%scellis", code="magic-usage",
                         hint="close the quote") from None


def parse_line(line: str) -> Command:
    """A `%scellis ...` line -> Command (sub, parsed args) or Command with help text."""
    words = split_words(line)
    if not words or words[0] in ("help", "-h", "--help"):
        if len(words) > 1 and words[1] in PARSERS:
            return Command(words[1], help=PARSERS[words[1]].format_help())
        return Command("help", help=usage())
    sub, rest = words[0], words[1:]
    if sub not in PARSERS:
        raise MagicError(f"unknown subcommand {sub!r}", where="%scellis", code="magic-unknown",
                         hint=(did_you_mean(sub, PARSERS) + " " if did_you_mean(sub, PARSERS) else "")
                         + f"subcommands: {', '.join(PARSERS)}")
    p = PARSERS[sub]
    if "-h" in rest or "--help" in rest:
        return Command(sub, help=p.format_help())
    args = p.parse_args(rest)
    if getattr(args, "name", None) is not None and not _name_ok(args.name):
        raise MagicError(f"{args.name!r} is not a model handle or run id", where=f"%scellis {sub}",
                         code="magic-usage", hint="a Python identifier (the NAME of a %%scellis NAME cell) or run-...")
    return Command(sub, args)


def _name_ok(name: str) -> bool:
    return bool(IDENT.match(name)) or name.startswith("run-") or bool(re.match(r"^[0-9a-f]{6,64}$", name))


@dataclass
class CellHeader:
    mode: str                                 # "spec" or "catalog"
    name: str
    kind: str | None = None                   # catalog kind
    options: dict = field(default_factory=dict)


CELL_OPTIONS = ("--no-plan", "--no-graph", "--quiet", "--memory")


def parse_cell_header(line: str) -> CellHeader:
    """The words after `%%scellis`: `NAME [--no-plan] [--no-graph] [--memory SIZE]` or `catalog KIND NAME`."""
    words = split_words(line)
    if not words:
        raise MagicError("%%scellis needs a NAME to bind the model to", where="%%scellis line 1",
                         code="magic-usage", hint="%%scellis mlp   (then the spec's TOML below)")
    if words[0] == "catalog":
        if len(words) != 3:
            raise MagicError("%%scellis catalog needs a KIND and a NAME", where="%%scellis line 1",
                             code="magic-usage", hint="%%scellis catalog optimizer my_sgd   (then the Python source)")
        kind, name = words[1], words[2]
        if kind not in KINDS:
            raise MagicError(f"unknown catalog kind {kind!r}", where="%%scellis line 1", code="magic-unknown",
                             hint=(did_you_mean(kind, KINDS) + " " if did_you_mean(kind, KINDS) else "")
                             + f"kinds: {', '.join(KINDS)}")
        return CellHeader("catalog", name, kind)
    name, opts = words[0], words[1:]
    if not IDENT.match(name):
        raise MagicError(f"{name!r} is not a Python name to bind the model to", where="%%scellis line 1",
                         code="magic-usage", hint="use letters, digits and '_', starting with a letter")
    memory = None
    for j, o in enumerate(opts):               # --memory SIZE / --memory=SIZE: plan against that capacity
        if o == "--memory" or o.startswith("--memory="):
            val = o.split("=", 1)[1] if "=" in o else (opts[j + 1] if j + 1 < len(opts) else "")
            try:
                memory = _size(val)
            except argparse.ArgumentTypeError as e:
                raise MagicError(str(e), where="%%scellis line 1", code="magic-usage",
                                 hint="%%scellis mlp --memory 200KB") from None
            opts = opts[:j] + opts[j + (1 if "=" in o else 2):]
            break
    bad = [o for o in opts if o not in CELL_OPTIONS]
    if bad:
        raise MagicError(f"unknown option {bad[0]!r} for a %%scellis cell", where="%%scellis line 1",
                         code="magic-usage", hint=(did_you_mean(bad[0], CELL_OPTIONS) + " "
                                                   if did_you_mean(bad[0], CELL_OPTIONS) else "")
                         + f"options: {', '.join(CELL_OPTIONS)}")
    options = {o.lstrip("-").replace("-", "_"): True for o in opts}
    if memory is not None:
        options["memory"] = memory
    return CellHeader("spec", name, None, options)


_WHERE = re.compile(r"^(?P<src>.*?):(?P<line>\d+)(?::(?P<col>\d+))?$")


def cell_diagnostic(d: Diagnostic, source: str, cell_name: str, body: str) -> Diagnostic:
    """A spec (or catalog cell) diagnostic at 'source:L[:C]' moved onto the cell's own lines ('cell NAME,
    line L+1[, column C]'), with the line itself and a caret under the column, so the user finds it."""
    m = _WHERE.match(d.where or "")
    if not m or m.group("src") != source:
        return d
    line = int(m.group("line"))
    col = int(m.group("col")) if m.group("col") else None
    lines = body.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    where = f"cell {cell_name}, line {line + HEADER_LINES}" + (f", column {col}" if col else "")
    msg = d.message
    if text.strip():
        msg += f"\n  {line + HEADER_LINES:>4} | {text}"
        if col:
            msg += f"\n       | {' ' * (col - 1)}^"
    details = dict(d.details, cell_line=line + HEADER_LINES)
    if col:
        details["column"] = col
    return Diagnostic(d.code, msg, where, d.hint, details)


__all__ = ["parse_line", "parse_cell_header", "cell_diagnostic", "Command", "CellHeader", "MagicError", "SUBCOMMANDS",
           "PARSERS", "usage", "HEADER_LINES"]
