"""Conformance: one suite per catalog kind, run over built-in and user entries alike before they are used.

Why a stage of its own: the checks execute entries (build graphs, run them on a device), so they stand on
the engine; the catalog below them holds only the registry and the contracts an entry is written against.
"""
from __future__ import annotations

# each suite registers its checks with `catalog.checker` on import; the package root imports this package,
# so any entry loaded with check=True meets every suite
from . import initializers, losses, metrics, optimizers, peft, regularizers, schedulers  # noqa: F401
from . import aggregations  # noqa: F401
from .optimizers import apply_update

__all__ = ["apply_update"]
