"""The loss conformance suite over every registered entry, user entries included.

Why one suite: a user loss loaded from a folder or a notebook cell must pass exactly what the built-ins
pass (a finite scalar and gradient, reductions that agree, the declared target read, f64 kept, f16
reduced in f32, purity), and a failing one is refused with the failed check named.
"""
from __future__ import annotations


import numpy as np
import pytest

from scellis_jupyter import catalog
from scellis_jupyter.catalog.losses import Target, TargetError, loss_value, make_loss

from fixtures import entry_source

LOSSES = [e["name"] for e in catalog.list("loss")]


def test_every_builtin_loss_is_there():
    assert {"mse", "l1", "smooth_l1", "huber", "bce_with_logits", "cross_entropy", "nll", "kl_div", "focal",
            "info_nce", "triplet_margin", "cosine_embedding", "margin_ranking", "poisson_nll",
            "multi_margin", "bce"} <= set(LOSSES)


@pytest.mark.parametrize("name", LOSSES)
def test_conformance(name):
    assert catalog.check_entry(catalog.get("loss", name)) == []


@pytest.mark.parametrize("name,out,kind,shape,dtype", [
    ("cross_entropy", (3, 10), "class", (3,), "i32"), ("mse", (4,), "real", (4,), "f32"),
    ("bce_with_logits", (1,), "prob", (1,), "f32"), ("triplet_margin", (3, 8), "none", (), None),
    ("info_nce", (2, 8), "none", (), None), ("cosine_embedding", (2, 8), "sign", (), "f32"),
    ("margin_ranking", (2,), "sign", (), "f32"), ("poisson_nll", (5,), "count", (5,), "f32"),
    ("kl_div", (6,), "dist", (6,), "f32"), ("multi_margin", (4,), "class", (), "i32"),
])
def test_declared_targets(name, out, kind, shape, dtype):
    t = make_loss(name).target(out)
    assert (t.kind, t.shape, t.dtype) == (kind, shape, dtype)


@pytest.mark.parametrize("name,out", [("triplet_margin", (2, 8)), ("info_nce", (8,)), ("cosine_embedding", (3, 4)),
                                      ("margin_ranking", (3,)), ("cross_entropy", ())])
def test_outputs_a_loss_cannot_read_are_refused_clearly(name, out):
    with pytest.raises(catalog.CatalogError) as e:
        make_loss(name).target(out)
    assert name in str(e.value) and "needs a model output" in str(e.value)


def test_hyperparameters_are_checked_with_did_you_mean():
    with pytest.raises(catalog.CatalogError) as e:
        make_loss({"name": "cross_entropy", "label_smothing": 0.1})
    assert "did you mean 'label_smoothing'" in str(e.value)
    with pytest.raises(catalog.CatalogError) as e:
        make_loss({"name": "cross_entropy", "label_smoothing": 1.5})
    assert "out of range [0, 1]" in str(e.value)
    with pytest.raises(catalog.CatalogError) as e:
        make_loss("hubber")
    assert "did you mean 'huber'" in str(e.value)
    with pytest.raises(catalog.CatalogError, match="alpha applies to mode"):
        make_loss({"name": "focal", "alpha": 0.25})


@pytest.mark.parametrize("kind,bad,msg", [
    (Target("class", (), classes=3), np.array([0, 3]), "not integers in [0, 3)"),
    (Target("class", (), classes=3, ignore_index=-100), np.array([0, -1]), "not integers in [0, 3) or -100"),
    (Target("sign", ()), np.array([1, 0]), "not +1 or -1"),
    (Target("prob", (1,)), np.array([[0.5], [1.5]]), "not in [0, 1]"),
    (Target("count", (2,)), np.array([[1, -1.0]]), "not >= 0"),
    (Target("dist", (2,)), np.array([[0.5, 0.4]]), "sum to"),
    (Target("real", (2,)), np.zeros((2, 3)), "do not fit"),
])
def test_targets_are_checked_on_the_host(kind, bad, msg):
    with pytest.raises(TargetError) as e:
        kind.check(bad)
    assert msg in str(e.value)
    ok = kind.example(np.random.default_rng(0), 4)
    assert kind.check(ok).shape == (4,) + kind.shape


def test_sign_targets_hint_at_mapping_zero_one_labels():
    with pytest.raises(TargetError) as e:
        Target("sign", ()).check(np.array([0, 1, 1]))
    assert "2*y - 1" in e.value.diagnostic.hint


# ---- user entries ----------------------------------------------------------------------------------------


def user_source(name):
    """A user's log-cosh regression loss, written against the public API only (tests/fixtures/entries)."""
    return entry_source("user_logcosh", name=name)


def _works_like_a_builtin(name, origin):
    entry = catalog.get("loss", name)
    assert entry.origin == origin
    assert catalog.check_entry(entry) == []
    listed = {e["name"]: e for e in catalog.list("loss")}
    assert listed[name]["params"]["scale"]["range"] == "(0, inf)"
    import scellis_jupyter as sc
    from scellis_jupyter.executor.executor import realize
    from scellis_jupyter.tensor import tensor
    ref = sc.device("reference")
    d = np.array([[0.3, -2.0], [1.5, 0.1]])
    ls = make_loss({"name": name, "scale": 1.0})
    v = loss_value(ls, tensor(d, dtype="f64", device=ref).node, tensor(np.zeros_like(d), dtype="f64", device=ref).node)
    np.testing.assert_allclose(realize([v], ref.impl)[0].numpy(), np.mean(np.log(np.cosh(d))), rtol=1e-12)


def test_user_loss_from_a_folder(tmp_path, clean_registry):
    (tmp_path / "losses").mkdir()
    f = tmp_path / "losses" / "logcosh.py"
    f.write_text(user_source("logcosh_folder"))
    loaded = catalog.load_folder(tmp_path, check=True)
    assert [e.name for e in loaded] == ["logcosh_folder"]
    _works_like_a_builtin("logcosh_folder", str(f.resolve()))


def test_user_loss_from_source(clean_registry):
    loaded = catalog.load_source(user_source("logcosh_cell"), "cell-3", check=True)
    assert [e.name for e in loaded] == ["logcosh_cell"]
    _works_like_a_builtin("logcosh_cell", "<cell:cell-3>")


class _Base:
    def __init__(self, reduction="mean"):
        self.reduction = reduction

    def target(self, out_shape):
        return Target("real", out_shape)


class _NoTarget:
    reduction = "mean"

    def __call__(self, pred, y):
        from scellis_jupyter.graph import functional as F
        return F.mean(pred)


class _NonFinite(_Base):
    def __call__(self, pred, y):
        from scellis_jupyter.graph import functional as F
        return F.div(F.sum_(pred), 0.0)


class _NotScalar(_Base):
    def __call__(self, pred, y):
        from scellis_jupyter.graph import functional as F
        return F.sub(pred, F.cast(y, pred.dtype))


class _IgnoresTarget(_Base):
    def __call__(self, pred, y):
        from scellis_jupyter.graph import functional as F
        return F.mean(F.mul(pred, pred))


class _AlwaysF32(_Base):
    def __call__(self, pred, y):
        from scellis_jupyter.graph import functional as F
        d = F.sub(F.cast(pred, "f32"), F.cast(y, "f32"))
        return F.mean(F.mul(d, d))


class _Impure(_Base):
    calls = 0

    def __call__(self, pred, y):
        from scellis_jupyter.graph import functional as F
        type(self).calls += 1
        d = F.sub(pred, F.cast(y, pred.dtype))
        return F.mul(F.mean(F.mul(d, d)), float(type(self).calls))


class _SumIsWrong(_Base):
    def __call__(self, pred, y):
        from scellis_jupyter.graph import functional as F
        d = F.sub(pred, F.cast(y, pred.dtype))
        per = F.mul(d, d)
        if self.reduction == "none":
            return per
        return F.mean(per)                   # 'sum' ignored


class _BadRefusal(_Base):
    def target(self, out_shape):
        raise KeyError("boom")

    def __call__(self, pred, y):
        return pred


RED = {"reduction": catalog.Param(str, "mean", choices=("mean", "sum", "none"))}


@pytest.mark.parametrize("cls,check,params", [
    (_NoTarget, "interface", {}),
    (_NonFinite, "finite", RED),
    (_NotScalar, "scalar", RED),
    (_IgnoresTarget, "target-read", RED),
    (_AlwaysF32, "precision", RED),
    (_Impure, "pure", RED),
    (_SumIsWrong, "reduction", RED),
    (_BadRefusal, "target-declaration", RED),
    (_IgnoresTarget, "reduction", {}),
])
def test_failing_user_losses_are_refused_with_the_check_named(cls, check, params, clean_registry):
    with pytest.raises(catalog.CatalogError) as e:
        catalog.register("loss", "failing_user_loss", cls, "a broken loss", params, check=True)
    assert check in " ".join(e.value.diagnostic.details["failed"]), e.value.diagnostic.details["failed"]
    with pytest.raises(catalog.CatalogError):
        catalog.get("loss", "failing_user_loss")
