"""Pretrained: a parameter's values from a .safetensors file, by name.

Which tensor: mapping[name] when the mapping names this parameter, else `key`, else the parameter's own
name, else the file's only tensor. Why refuse a shape mismatch instead of reshaping: a (out, in) weight
saved as (in, out) reshapes without complaint and trains to garbage; the error names both shapes and the
file. Draws nothing from the stream.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from scellis_jupyter.catalog import CatalogError, Param, initializer
from scellis_jupyter.errors import did_you_mean


@initializer("pretrained", summary="Values from a .safetensors file (key or name mapping)", params={
    "path": Param(str, None, doc="the .safetensors file"),
    "key": Param(str, None, doc="the tensor's name in the file (default: the parameter's name)"),
    "mapping": Param(dict, None, doc="our parameter name -> the file's tensor name"),
})
class Pretrained:
    random = False

    def __init__(self, path=None, key=None, mapping=None):
        self.path, self.key, self.mapping = path, key, dict(mapping or {})

    def _tensor_name(self, names: list[str], name: str) -> str:
        if name in self.mapping:
            want, how = self.mapping[name], f"mapping[{name!r}]"
        elif self.key is not None:
            want, how = self.key, "key"
        elif name in names:
            return name
        elif len(names) == 1:
            return names[0]
        else:
            raise CatalogError(f"{self.path} has no tensor named {name!r} (it has {len(names)} tensors)",
                               where=f"initializer pretrained ({name or 'param'})",
                               hint=did_you_mean(name, names) or "give key=... or mapping={ours: theirs}")
        if want not in names:
            raise CatalogError(f"{self.path} has no tensor {want!r} (from {how})",
                               where=f"initializer pretrained ({name or 'param'})",
                               hint=did_you_mean(str(want), names) or f"its tensors: {', '.join(sorted(names)[:10])}")
        return want

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        where = f"initializer pretrained ({name or 'param'})"
        if self.path is None:
            raise CatalogError("pretrained needs path=... (a .safetensors file)", where=where)
        p = Path(self.path).expanduser()
        if not p.is_file():
            raise CatalogError(f"no such file: {p}", where=where, hint="path names a .safetensors file")
        from safetensors import SafetensorError, safe_open
        try:
            with safe_open(str(p), framework="numpy") as f:
                t = self._tensor_name(list(f.keys()), name)
                a = f.get_tensor(t)
        except SafetensorError as e:
            raise CatalogError(f"{p} is not a readable .safetensors file: {e}", where=where) from e
        if tuple(a.shape) != tuple(shape):
            raise CatalogError(f"tensor {t!r} in {p} has shape {tuple(a.shape)}, the parameter {name!r} needs "
                               f"{tuple(shape)}", where=where,
                               hint="map the parameter to a tensor of its shape (mapping={ours: theirs})")
        if a.dtype.kind not in "fiu":
            raise CatalogError(f"tensor {t!r} in {p} has dtype {a.dtype}, not a number type", where=where)
        return np.ascontiguousarray(a.astype(np.float32))

    @staticmethod
    def check_hyper(shape: tuple, folder: Path) -> dict:
        """For the conformance checks: a file holding one tensor of this shape."""
        from safetensors.numpy import save_file
        f = Path(folder) / f"check_{'x'.join(map(str, shape)) or 'scalar'}.safetensors"
        save_file({"w": np.linspace(-1.0, 1.0, int(np.prod(shape))).astype(np.float32).reshape(shape)}, str(f))
        return {"path": str(f), "key": "w"}
