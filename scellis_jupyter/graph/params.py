"""What a model parameter is before it has values: name, shape, initializer, fans and role.

Why in graph: layers (spec), adapters (catalog's PEFT contract) and the initializers all speak of the same
declarations, and they sit below the spec.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParamDecl:
    """A parameter a layer needs; `name` is local to the layer until the model prefixes it."""

    name: str
    shape: tuple
    init: str
    fan_in: int
    fan_out: int
    role: str                       # weight | bias | norm | embedding

    def prefixed(self, prefix: str) -> "ParamDecl":
        return ParamDecl(f"{prefix}.{self.name}", self.shape, self.init, self.fan_in, self.fan_out, self.role)
