"""WGSL templates from kernels/: `{{NAME}}` placeholders filled at compile time (tiles, dtypes, exprs)."""
from __future__ import annotations

import functools
import re

from ...errors import KernelError

WGSL_TYPE = {"f32": "f32", "f16": "f16", "i32": "i32", "u32": "u32", "bool": "u32"}


@functools.lru_cache(maxsize=None)
def _source(name: str) -> str:
    from .kernels_path import kernel_source
    return kernel_source(name)


def render(name: str, **subs) -> str:
    """The kernel family `name` with every {{KEY}} replaced; a leftover placeholder is an error."""
    src = _source(name)
    for k, v in subs.items():
        src = src.replace("{{" + k + "}}", str(v))
    left = re.findall(r"\{\{(\w+)\}\}", src)
    if left:
        raise KernelError(f"template {name}.wgsl has unfilled placeholders {sorted(set(left))}")
    return src


def enable_f16(*dtypes) -> str:
    return "enable f16;" if any(d == "f16" for d in dtypes) else ""
