"""Find the shipped WGSL sources: inside the installed package, else the source tree's kernels/."""
from __future__ import annotations

from pathlib import Path

from .errors import KernelError

_HERE = Path(__file__).resolve().parent
_DIRS = (_HERE / "kernels", _HERE.parent / "kernels")


def kernel_source(name: str) -> str:
    """The text of kernels/<name>.wgsl."""
    for d in _DIRS:
        p = d / f"{name}.wgsl"
        if p.is_file():
            return p.read_text()
    raise KernelError(f"WGSL source {name}.wgsl not found", where=" or ".join(str(d) for d in _DIRS),
                      hint="reinstall the package: the wheel ships kernels/ inside scellis_jupyter/")
