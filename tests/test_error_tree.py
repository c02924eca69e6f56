"""One exception tree: every error class the package defines lives in errors.py, is drawn in its docstring,
is exported from the package, and prints in the one diagnostic format."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import scellis_jupyter as sc
from scellis_jupyter import errors


def _package_modules():
    for info in pkgutil.walk_packages(sc.__path__, "scellis_jupyter."):
        yield importlib.import_module(info.name)


def test_every_error_class_is_defined_in_errors_py():
    elsewhere = sorted({f"{obj.__module__}.{obj.__qualname__}" for mod in _package_modules()
                        for _, obj in inspect.getmembers(mod, inspect.isclass)
                        if issubclass(obj, errors.ScellisError) and obj.__module__ != "scellis_jupyter.errors"})
    assert elsewhere == [], f"error classes outside errors.py: {elsewhere}"


ALL = [obj for _, obj in inspect.getmembers(errors, inspect.isclass) if issubclass(obj, errors.ScellisError)]


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_each_class_is_exported_drawn_and_formatted(cls):
    assert getattr(sc, cls.__name__) is cls, f"sc.{cls.__name__} is not exported"
    assert cls.__name__ in errors.__doc__, f"{cls.__name__} is missing from the tree in errors.py's docstring"
    e = cls("something is off", where="here", hint="do this")
    assert str(e).startswith(f"error[{cls.code}] at here: something is off")
    assert "hint: do this" in str(e)
    with pytest.raises(sc.ScellisError):
        raise e


def test_tree_parents():
    assert issubclass(sc.PlanRefused, sc.PlanError)
    assert issubclass(sc.CorruptObject, sc.StoreError)
    assert issubclass(sc.KernelError, sc.DeviceError)
    assert issubclass(sc.TargetError, sc.CatalogError)
    assert issubclass(sc.ShapeError, sc.GraphError) and issubclass(sc.ShapeError, ValueError)
    assert issubclass(sc.WaitTimeout, sc.RunError) and issubclass(sc.WaitTimeout, TimeoutError)


def test_a_red_plan_raises_plan_refused():
    p = sc.plan(Path(__file__).resolve().parents[1] / "benchmarks/specs/mlp.toml", device="reference", memory=1024)
    assert p.verdict == "red"
    err = p.refusal()
    assert isinstance(err, sc.PlanRefused) and err.diagnostic.code == "plan-red"
