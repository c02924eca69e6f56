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


# ---- registry ---------------------------------------------------------------------------------------
# name -> (declare arguments, run); the run function's docstring is the subcommand's help line.
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "device": (_args_device, cmd_device),
    "plan": (_args_plan, cmd_plan),
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
