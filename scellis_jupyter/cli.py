"""The `scellis` command line: `scellis device [--json]` now; plan/train/resume/runs/verify come later."""
from __future__ import annotations

import argparse
import json
import sys

from . import __version__
from .errors import ScellisError


def cmd_device(args) -> int:
    from .backends.device import device
    d = device(args.device)
    if args.json:
        print(json.dumps(d.to_json(), indent=2, default=str))
    else:
        for k in ("backend", "name", "adapter_type", "memory_bytes", "memory_source", "choice"):
            print(f"{k:14} {getattr(d, k)}")
        print(f"{'features':14} {', '.join(d.features) or '-'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scellis", description=__doc__)
    p.add_argument("--version", action="version", version=f"scellis-jupyter {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("device", help="show the device runs would use")
    d.add_argument("--device", default=None, help="wgpu, reference, or part of an adapter name")
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=cmd_device)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except ScellisError as e:
        print(e.diagnostic.format(), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
