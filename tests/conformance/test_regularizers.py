"""The regularizer conformance suite over every registered entry, user entries included.

A regularizer must apply to at least one of the check models (refusing the others clearly), draw its
step inputs from the augment stream replayably and in the declared shapes, declare and initialize its
buffers, and give one finite, deterministic training step. User entries (folder, cell) pass the same
checks and are refused with the failing check named.
"""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from scellis_jupyter import catalog
from scellis_jupyter.catalog.regularizers import Buffer, Regularization, StepInput

REGULARIZERS = [e["name"] for e in catalog.list("regularizer")]


def test_every_builtin_regularizer_is_there():
    assert {"mixup", "cutmix", "label_smoothing", "weight_decay", "spectral_norm"} <= set(REGULARIZERS)


@pytest.mark.parametrize("name", REGULARIZERS)
def test_conformance(name):
    assert catalog.check_entry(catalog.get("regularizer", name)) == []


USER_REG = '''
"""A user's L1 weight penalty (its subgradient added before the optimizer), public API only."""
from scellis_jupyter.catalog import Param, regularizer
from scellis_jupyter.catalog.regularizers import Regularization
from scellis_jupyter.graph import functional as F


@regularizer("{name}", summary="L1 penalty on weights", params={{"strength": Param(float, 1e-3, lo=0.0)}})
class L1Penalty:
    def __init__(self, strength=1e-3):
        self.strength = strength

    def apply(self, ctx):
        weights = {{p.name for p in ctx.graph.params if p.role == "weight"}}

        def hook(name, g, w):
            return F.add(g, F.mul(F.sign(F.cast(w, g.dtype)), self.strength)) if name in weights else g
        return Regularization(grad_hook=hook)
'''


def test_user_regularizer_from_a_folder_and_a_cell(tmp_path, clean_registry):
    (tmp_path / "regularizers").mkdir()
    (tmp_path / "regularizers" / "l1.py").write_text(textwrap.dedent(USER_REG.format(name="l1_folder")))
    assert [e.name for e in catalog.load_folder(tmp_path, check=True)] == ["l1_folder"]
    assert [e.name for e in catalog.load_source(textwrap.dedent(USER_REG.format(name="l1_cell")), "c1",
                                                check=True)] == ["l1_cell"]
    for name in ("l1_folder", "l1_cell"):
        assert catalog.check_entry(catalog.get("regularizer", name)) == []


# ---- broken user entries, each refused with its check named ------------------------------------------
class _Base:
    def __init__(self):
        pass


class _NoApply(_Base):
    pass


class _Crashes(_Base):
    def apply(self, ctx):
        raise KeyError("boom")


class _HostRandom(_Base):
    """Draws from numpy's global generator instead of the stream: a resumed run would not replay it."""

    def apply(self, ctx):
        def draw(stream):
            stream.bits(1)
            return {"noise": np.random.standard_normal(()).astype(np.float32)}
        return Regularization(inputs=[StepInput("noise", (), "f32")], draw=draw)


class _WrongShape(_Base):
    def apply(self, ctx):
        return Regularization(inputs=[StepInput("perm", (ctx.batch,), "i32")],
                              draw=lambda s: {"perm": s.permutation(ctx.batch + 1).astype(np.int32)})


class _NotFromTheStream(_Base):
    def apply(self, ctx):
        return Regularization(inputs=[StepInput("lam", (), "f32")], draw=lambda s: {"lam": np.float32(0.5)})


class _NonFinite(_Base):
    def apply(self, ctx):
        from scellis_jupyter.graph import functional as F
        return Regularization(grad_hook=lambda n, g, w: F.div(g, 0.0))


class _BufferWithoutInit(_Base):
    def apply(self, ctx):
        p = [q for q in ctx.graph.params if q.role == "weight"][0]
        return Regularization(buffers=[Buffer(p.name, "s", (p.shape[0],))],
                              transforms={p.name: lambda w, b, training: (w, {"s": b["s"]})})


class _RefusesAll(_Base):
    def apply(self, ctx):
        raise catalog.CatalogError("never applies")


@pytest.mark.parametrize("cls,check", [
    (_NoApply, "interface"), (_Crashes, "apply-runs"), (_HostRandom, "replayable"), (_WrongShape, "draws"),
    (_NotFromTheStream, "draws"), (_NonFinite, "finite"), (_BufferWithoutInit, "buffers"), (_RefusesAll, "applies"),
])
def test_failing_user_regularizers_are_refused_with_the_check_named(cls, check, clean_registry):
    with pytest.raises(catalog.CatalogError) as e:
        catalog.register("regularizer", "failing_user_reg", cls, "a broken regularizer", {}, check=True)
    assert check in " ".join(e.value.diagnostic.details["failed"]), e.value.diagnostic.details["failed"]
    with pytest.raises(catalog.CatalogError):
        catalog.get("regularizer", "failing_user_reg")
