"""Find the shipped WGSL sources: inside the installed package, else the source tree's kernels/.

An installed wheel carries them as scellis_jupyter/kernels/ (hatch `force-include` in pyproject.toml);
an editable install or a plain checkout reads the top-level kernels/ directly.
"""
from __future__ import annotations

from pathlib import Path

from ...errors import KernelError, did_you_mean

_PKG = Path(__file__).resolve().parents[2]          # scellis_jupyter/
_DIRS = (_PKG / "kernels", _PKG.parent / "kernels")


def kernel_dirs() -> list[Path]:
    """The directories searched, in order, that exist."""
    return [d for d in _DIRS if d.is_dir()]


def kernel_source(name: str) -> str:
    """The text of kernels/<name>.wgsl (a template: `{{NAME}}` placeholders are filled at compile time)."""
    stem = name[:-5] if name.endswith(".wgsl") else name
    if not stem or "/" in stem or "\\" in stem or stem.startswith("."):
        raise KernelError(f"{name!r} is not a kernel family name", where="kernels_path",
                          hint="pass the file's stem, e.g. kernel_source('matmul') for kernels/matmul.wgsl")
    for d in _DIRS:
        p = d / f"{stem}.wgsl"
        if p.is_file():
            return p.read_text(encoding="utf-8")
    have = sorted({p.stem for d in kernel_dirs() for p in d.glob("*.wgsl")})
    hint = " ".join(filter(None, [did_you_mean(stem, have), f"known kernels: {', '.join(have) or 'none'};",
                                  "if this is an installed package, reinstall it: the wheel ships kernels/ "
                                  "inside scellis_jupyter/"]))
    raise KernelError(f"WGSL source {stem}.wgsl not found", where=" or ".join(str(d) for d in _DIRS),
                      hint=hint, file=f"{stem}.wgsl")
