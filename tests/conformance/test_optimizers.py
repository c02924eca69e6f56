"""The optimizer conformance suite over every registered entry, user entries included.

Why one suite: DESIGN.md says built-ins and user entries are indistinguishable, so a user optimizer
loaded from a folder or a notebook cell must pass exactly what the built-ins pass, and a failing one is
refused with the failed check named. The wgpu part runs each update graph in f32 on both backends.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scellis_jupyter import catalog
from scellis_jupyter.conformance import apply_update

from fixtures import entry_source

OPTIMIZERS = [e["name"] for e in catalog.list("optimizer")]


def test_every_builtin_optimizer_is_there():
    assert {"adam", "adamw", "sgd", "lamb", "adafactor", "lion", "sophia", "int8adam", "prodigy"} <= set(OPTIMIZERS)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_conformance(name):
    assert catalog.check_entry(catalog.get("optimizer", name)) == []


# ---- user entries ----------------------------------------------------------------------------------------


def user_source(name, buf_shape="shape"):
    """A user's SGD with momentum, written against the public API only (tests/fixtures/entries)."""
    return entry_source("user_sgd", name=name, buf_shape=buf_shape)


def _passes_like_a_builtin(name, origin):
    entry = catalog.get("optimizer", name)
    assert entry.origin == origin
    assert catalog.check_entry(entry) == []
    listed = {e["name"]: e for e in catalog.list("optimizer")}
    assert listed[name]["params"]["lr"] == {"type": "float", "default": 0.01, "range": "(0, inf)", "doc": ""}
    opt = catalog.make("optimizer", name, lr=0.5)
    p, s = apply_update(opt, np.ones(3), np.full(3, 2.0), {"buf": np.ones(3)}, 2, 0.5)
    np.testing.assert_allclose(s["buf"], 0.9 + 2.0)
    np.testing.assert_allclose(p, 1.0 - 0.5 * 2.9)
    return entry


def test_user_optimizer_from_a_folder(tmp_path, clean_registry):
    (tmp_path / "optimizers").mkdir()
    f = tmp_path / "optimizers" / "usersgd.py"
    f.write_text(user_source("usersgd_folder"))
    loaded = catalog.load_folder(tmp_path)
    assert [e.name for e in loaded] == ["usersgd_folder"]
    entry = _passes_like_a_builtin("usersgd_folder", str(f.resolve()))
    builtin = catalog.get("optimizer", "adamw")
    assert type(entry) is type(builtin) and entry.obj.__module__.startswith("scellis_catalog.")
    assert catalog.load_folder(tmp_path)[0].name == "usersgd_folder"    # loading again is idempotent


def test_user_optimizer_from_source(clean_registry):
    loaded = catalog.load_source(user_source("usersgd_cell"), "cell-7", check=True)
    assert [e.name for e in loaded] == ["usersgd_cell"]
    _passes_like_a_builtin("usersgd_cell", "<cell:cell-7>")


def test_user_optimizer_with_the_decorator_directly(clean_registry):
    from scellis_jupyter.catalog import Param, optimizer
    from scellis_jupyter.graph import functional as F

    @optimizer("inline_sgd", params={"lr": Param(float, 0.01, lo=0.0, lo_open=True)}, check=True)
    class InlineSGD:
        """Plain SGD registered from a test module."""

        def __init__(self, lr=0.01):
            self.lr = lr

        def state(self, shape, dtype):
            return []

        def update(self, p, g, state, step, lr):
            return F.sub(p, F.mul(F.cast(lr, p.dtype), g)), {}
    entry = catalog.get("optimizer", "inline_sgd")
    assert entry.obj is InlineSGD and entry.summary == "Plain SGD registered from a test module."
    assert entry.origin == str(Path(__file__).resolve())


def test_wrong_state_shape_is_refused(clean_registry):
    with pytest.raises(catalog.CatalogError) as e:
        catalog.load_source(user_source("bad_shape", buf_shape="(3,)"), "bad", check=True)
    assert "state-shapes" in str(e.value) and "bad_shape" in str(e.value)
    assert e.value.diagnostic.code == "catalog"
    assert "bad_shape" not in [x["name"] for x in catalog.list("optimizer")]
    # without check it loads, and check_entry names the same failure
    catalog.load_source(user_source("bad_shape", buf_shape="(3,)"), "bad")
    failed = catalog.check_entry(catalog.get("optimizer", "bad_shape"))
    assert failed and all(f.startswith(("state-shapes", "update-shapes", "update-runs")) for f in failed)
    assert any(f.startswith("state-shapes") for f in failed)


class _NoUpdate:
    def __init__(self, lr=0.1):
        self.lr = lr

    def state(self, shape, dtype):
        return []


class _NonFinite(_NoUpdate):
    def update(self, p, g, state, step, lr):
        from scellis_jupyter.graph import functional as F
        return F.div(p, F.mul(g, 0.0)), {}


class _Impure(_NoUpdate):
    calls = 0

    def update(self, p, g, state, step, lr):
        from scellis_jupyter.graph import functional as F
        type(self).calls += 1
        return F.sub(p, F.mul(g, float(type(self).calls))), {}


class _BadDecl(_NoUpdate):
    def state(self, shape, dtype):
        return [("m", shape, "f32")]

    def update(self, p, g, state, step, lr):
        return p, {}


class _WrongDefault(_NonFinite):
    pass


@pytest.mark.parametrize("cls,check,params", [
    (_NoUpdate, "interface", {}),
    (_NonFinite, "finite", {}),
    (_Impure, "pure", {}),
    (_BadDecl, "state-declarations", {}),
    (_WrongDefault, "params-match-signature", {"lr": catalog.Param(float, 0.5, lo=0.0)}),
    (_NoUpdate, "param-defaults", {"lr": catalog.Param(float, 0.1, lo=1.0)}),
])
def test_failing_user_entries_are_refused_with_the_check_named(cls, check, params, clean_registry):
    with pytest.raises(catalog.CatalogError) as e:
        catalog.register("optimizer", "failing_user", cls, "a broken optimizer", params, check=True)
    assert check in str(e.value)
    assert check in " ".join(e.value.diagnostic.details["failed"])
    with pytest.raises(catalog.CatalogError):
        catalog.get("optimizer", "failing_user")


# ---- wgpu ----------------------------------------------------------------------------------------------
def _wgpu():
    import scellis_jupyter as sc
    try:
        return sc.device("wgpu")
    except Exception as e:  # no adapter on this machine
        pytest.skip(f"no wgpu device: {e}")


WGPU_CASES = list(OPTIMIZERS)


def test_int8adam_on_wgpu_without_fusion(monkeypatch):   # i8 casts stay out of fused groups; also unfused
    monkeypatch.setenv("SCELLIS_FUSION", "0")
    test_update_graph_on_wgpu_matches_reference("int8adam")


@pytest.mark.parametrize("name", WGPU_CASES)
def test_update_graph_on_wgpu_matches_reference(name):
    """f32 on both backends, three steps each from the same state: within 1e-5 of each array's scale."""
    wg = _wgpu()
    opt = catalog.make("optimizer", name)
    rng = np.random.default_rng(3)
    for shape in [(5, 3), (37,), (2, 3, 300)]:
        p = rng.standard_normal(shape).astype(np.float32)
        st = catalog.initial_state(opt, shape, "f32")
        for t in (1, 2, 3):
            g = rng.standard_normal(shape).astype(np.float32)
            pr, sr = apply_update(opt, p, g, st, t, 1e-2, device="reference")
            pw, sw = apply_update(opt, p, g, st, t, 1e-2, device=wg)
            _close_f32(pw, pr, f"{name} param {shape} step {t}")
            for k in sr:
                if sr[k].dtype == np.int8:   # a code may round the other way at a tie
                    assert np.max(np.abs(sw[k].astype(int) - sr[k].astype(int))) <= 1, f"{name} {k} step {t}"
                else:
                    _close_f32(sw[k], sr[k], f"{name} state {k} {shape} step {t}")
            p, st = pr, sr


def _close_f32(a, b, what):
    scale = float(np.max(np.abs(b))) if np.size(b) else 1.0
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * scale + 1e-30, err_msg=what)
