"""The metric conformance suite over every registered entry, user entries included.

Why one suite: a user metric from a notebook cell must pass what the built-ins pass (interface present,
3 uneven batches == one batch and merge of two halves == the whole to rtol 1e-12, state_dict round trip,
finite result, reset clears), and a broken one is refused by check=True with the failing check named.
Numerics of the built-ins are in tests/catalog/test_metrics_sklearn.py.
"""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from scellis_jupyter import catalog

METRICS = [e["name"] for e in catalog.list("metric")]
BUILTIN = {"accuracy", "f1", "precision", "recall", "confusion_matrix", "perplexity", "auroc", "auprc", "ece",
           "brier"}


def test_every_builtin_metric_is_there():
    assert BUILTIN <= set(METRICS)
    for e in catalog.list("metric"):
        assert e["summary"], f"{e['name']} has no summary"


@pytest.mark.parametrize("name", METRICS)
def test_conformance(name):
    assert catalog.check_entry(catalog.get("metric", name)) == []


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_declares_direction(name):
    m = catalog.make("metric", name)
    assert m.needs == "logits"
    assert m.higher_is_better is (name not in ("perplexity", "ece", "brier"))


# ---- user entries ----------------------------------------------------------------------------------------
USER_MEAN_MARGIN = '''
"""A user's metric: the mean margin of the target logit over the best other logit."""
import numpy as np
from scellis_jupyter.catalog import CatalogError, Param, metric


@metric("{name}", summary="mean target margin", params={{"scale": Param(float, 1.0, lo=0.0)}})
class MeanMargin:
    needs = "logits"
    higher_is_better = True

    def __init__(self, scale=1.0):
        self.scale = scale
        self.reset()

    def reset(self):
        self.total, self.n = 0.0, 0

    def update(self, pred, target):
        z, t = np.asarray(pred, float), np.asarray(target)
        if z.ndim != 2:
            raise CatalogError(f"needs (N, C) logits, got {{z.shape}}", where="metric {name}")
        zt = z[np.arange(len(t)), t]
        other = np.where(np.eye(z.shape[1], dtype=bool)[t], -np.inf, z).max(axis=1)
        {update}

    def compute(self):
        if not self.n:
            raise CatalogError("compute() before any update()", where="metric {name}")
        return self.scale * self.total / self.n

    def state_dict(self):
        return {{"total": np.array(self.total), "n": np.array(self.n)}}

    def load_state_dict(self, d):
        self.total, self.n = float(d["total"]), int(d["n"])

    def merge(self, other):
        self.total += other.total
        self.n += other.n
'''
GOOD = "self.total += float(np.sum(zt - other)); self.n += len(t)"
OVERWRITES = "self.total = float(np.sum(zt - other)); self.n = len(t)"


def user_source(name, update=GOOD):
    return textwrap.dedent(USER_MEAN_MARGIN.format(name=name, update=update))


def test_user_metric_from_source_passes(clean_registry):
    loaded = catalog.load_source(user_source("margin_cell"), "cell-3", check=True)
    assert [e.name for e in loaded] == ["margin_cell"]
    entry = catalog.get("metric", "margin_cell")
    assert entry.origin == "<cell:cell-3>" and catalog.check_entry(entry) == []
    m = catalog.make("metric", "margin_cell", scale=2.0)
    m.update(np.array([[3.0, 1.0], [0.0, 1.0]]), np.array([0, 0]))
    assert m.compute() == pytest.approx(2.0 * (2.0 - 1.0) / 2)


def test_metric_that_overwrites_is_refused(clean_registry):
    with pytest.raises(catalog.CatalogError) as e:
        catalog.load_source(user_source("margin_bad", OVERWRITES), "bad", check=True)
    assert "accumulate" in str(e.value) and "margin_bad" in str(e.value)
    assert any(f.startswith("accumulate") for f in e.value.diagnostic.details["failed"])
    assert "margin_bad" not in [x["name"] for x in catalog.list("metric")]
    catalog.load_source(user_source("margin_bad", OVERWRITES), "bad")       # without check it loads
    failed = catalog.check_entry(catalog.get("metric", "margin_bad"))
    assert any(f.startswith("accumulate") for f in failed)


class _Base:
    needs = "logits"
    higher_is_better = True

    def __init__(self):
        self.reset()

    def reset(self):
        self.s, self.n = 0.0, 0

    def update(self, pred, target):
        self.s += float(np.sum(np.asarray(pred)[np.arange(len(target)), target]))
        self.n += len(target)

    def compute(self):
        return self.s / self.n

    def state_dict(self):
        return {"s": np.array(self.s), "n": np.array(self.n)}

    def load_state_dict(self, d):
        self.s, self.n = float(d["s"]), int(d["n"])

    def merge(self, other):
        self.s += other.s
        self.n += other.n


class _NoMerge(_Base):
    merge = None


class _BadMerge(_Base):
    def merge(self, other):
        self.s, self.n = other.s, other.n


class _ListState(_Base):
    def state_dict(self):
        return {"s": [self.s], "n": [self.n]}

    def load_state_dict(self, d):
        self.s, self.n = float(d["s"][0]), int(d["n"][0])


class _ForgetsOnLoad(_Base):
    def load_state_dict(self, d):
        self.reset()


class _NoReset(_Base):
    def reset(self):
        if not hasattr(self, "s"):
            self.s, self.n = 0.0, 0


class _Infinite(_Base):
    def compute(self):
        return float("inf")


class _WrongNeeds(_Base):
    needs = "probs"


@pytest.mark.parametrize("cls,check", [
    (_NoMerge, "interface"),
    (_BadMerge, "merge"),
    (_ListState, "state-dict"),
    (_ForgetsOnLoad, "state-dict"),
    (_NoReset, "reset"),
    (_Infinite, "finite"),
    (_WrongNeeds, "interface"),
])
def test_failing_user_metrics_are_refused_with_the_check_named(cls, check, clean_registry):
    assert catalog.check_entry(catalog.register("metric", "base_ok", _Base, "fine")) == []
    with pytest.raises(catalog.CatalogError) as e:
        catalog.register("metric", "failing_user", cls, "a broken metric", check=True)
    assert check in " ".join(e.value.diagnostic.details["failed"])
    with pytest.raises(catalog.CatalogError):
        catalog.get("metric", "failing_user")
