"""The catalog: optimizers, losses, schedulers, PEFT methods, metrics, ... as content, in one registry.

Built-in entries (`catalog/<kind-plural>/*.py` in the repo, `scellis_jupyter/catalog_entries` in a wheel)
and user entries (`load_folder`, `load_source` for a notebook cell, or the decorators in any module) go
through the same `register`, so the engine cannot tell them apart. Usage::

    from scellis_jupyter.catalog import optimizer, Param, StateDecl

    @optimizer("mysgd", summary="plain SGD", params={"lr": Param(float, 1e-2, lo=0.0, lo_open=True)})
    class MySGD: ...

    catalog.make("optimizer", "adamw", lr=3e-4)
"""
from __future__ import annotations

from .registry import (CHECKS, FOLDERS, KINDS, CatalogError, Entry, Param, StateDecl, aggregation,
                       builtin_folder, check_entry, checker, get, initial_state, initializer,
                       list_entries, load_builtin, load_file, load_folder, load_source, loss, make, make_entry,
                       metric, optimizer, partitioner, peft, reducer, register, regularizer, scheduler,
                       state_bytes, unregister)
from .registry import list  # noqa: A004 - catalog.list(kind) is the public name

__all__ = ["KINDS", "FOLDERS", "CHECKS", "CatalogError", "Entry", "Param", "StateDecl", "register", "unregister",
           "get", "list", "list_entries", "make", "make_entry", "load_builtin", "load_folder", "load_file",
           "load_source", "builtin_folder", "check_entry", "checker", "initial_state", "state_bytes",
           "optimizer", "loss", "scheduler", "peft", "metric", "initializer", "regularizer",
           "aggregation", "partitioner", "reducer", "Schedule"]

# the kinds' contract modules (their conformance checks live in scellis_jupyter.conformance)
from . import initializers, losses, metrics, peft, regularizers, schedulers  # noqa: E402,F401
from . import aggregations  # noqa: E402,F401
# importing the submodule `peft` (the Adaptation contract) bound its name here: the decorator keeps it;
# `from scellis_jupyter.catalog.peft import Adaptation` still finds the module
from .registry import peft  # noqa: E402,F811
from .schedulers import Schedule  # noqa: E402
