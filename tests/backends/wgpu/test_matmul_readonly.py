"""Matmul operands bound read-only (`var<storage, read>`) where no binding the dispatch writes shares their
buffer (matmul.py `_readonly`): the rule, the same bits as read_write, and whole training runs whose K-split
products (C in scratch) and eager products take the read-only kernels without a binding conflict."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import matmul as M

from fixtures import spec_text
from fixtures.devices import WG, launch_keys, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(5)


class _Buf:
    pass


def test_the_rule_is_both_or_neither(monkeypatch):
    a, b, c, e = _Buf(), _Buf(), _Buf(), _Buf()
    assert M._readonly(a, b, [c]) == (True, True)
    assert M._readonly(a, a, [c]) == (True, True)          # A and B may share one buffer
    assert M._readonly(c, b, [c]) == (False, False)        # A lies in C's buffer
    assert M._readonly(a, c, [c]) == (False, False)
    assert M._readonly(a, b, [c, e, b]) == (False, False)   # an epilogue input beside B
    monkeypatch.setenv("SCELLIS_MATMUL_READONLY", "off")
    assert M._readonly(a, b, [c]) == (False, False)


def _fresh(monkeypatch, readonly, tune="off"):
    monkeypatch.setenv("SCELLIS_MATMUL_READONLY", readonly)
    monkeypatch.setenv("SCELLIS_MATMUL_TUNE", tune)
    WG.impl.flush()
    WG.impl._records.clear()
    WG.impl._prog_params.clear()


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_read_only_operands_give_the_same_bits(dtype, monkeypatch):
    if dtype == "f16" and not WG.impl.has_f16:
        pytest.skip("adapter lacks shader-f16")
    a = R.standard_normal((130, 70)).astype(np.float32)
    b = R.standard_normal((70, 129)).astype(np.float32)
    got = {}
    for ro in ("on", "off"):
        _fresh(monkeypatch, ro)
        keys = launch_keys(monkeypatch)
        ta, tb = sc.tensor(a, device=WG).to(dtype), sc.tensor(b, device=WG).to(dtype)
        got[ro] = (ta @ tb).numpy()
        mm = [k for k in keys if k.startswith("matmul:")]
        assert mm and all(k.endswith("+roab") == (ro == "on") for k in mm), mm
    assert np.array_equal(got["on"], got["off"])
    npt = np.float32 if dtype == "f32" else np.float16
    want = a.astype(npt).astype(np.float64) @ b.astype(npt).astype(np.float64)
    np.testing.assert_allclose(got["on"].astype(np.float64), want, rtol=0, atol=1e-4 if dtype == "f32" else 0.05)


def test_split_products_read_their_operands_read_only(monkeypatch):
    """A K-split writes its partials into scratch, so both operands bind read-only even where C would share
    their buffer; the split's bits are those of read_write kernels."""
    a = R.standard_normal((70, 1030)).astype(np.float32)
    b = R.standard_normal((1030, 90)).astype(np.float32)
    got = {}
    with sc.tier("prod"):
        for ro in ("on", "off"):
            _fresh(monkeypatch, ro, tune="mid:4")
            keys = launch_keys(monkeypatch)
            got[ro] = (sc.tensor(a, device=WG) @ sc.tensor(b, device=WG)).numpy()
            assert ("matmul:mid:f32+roab" in keys) == (ro == "on"), keys
    assert np.array_equal(got["on"], got["off"])
    np.testing.assert_allclose(got["on"], a.astype(np.float64) @ b.astype(np.float64), rtol=0, atol=1e-4)


def test_training_runs_the_read_only_kernels_to_the_same_losses(monkeypatch, tmp_path):
    """tiny_lm at tier prod: its products whose output lies apart from both operands (the attention scores)
    take the read-only kernels, the rest share the arena with C and stay read_write; the losses are those of
    read_write kernels bit for bit, and wgpu raised no binding conflict."""
    spec = spec_text("tiny_lm", determinism="prod")
    losses, counts = {}, {}
    for ro in ("on", "off"):
        _fresh(monkeypatch, ro)
        keys = []
        orig = type(WG.impl).launch

        def launch(self, key, *rest, **kw):
            keys.append(key)
            return orig(self, key, *rest, **kw)
        monkeypatch.setattr(type(WG.impl), "launch", launch)   # the run opens its own backend
        run = sc.train(spec, store=tmp_path / ro, device=WG, progress=False)
        monkeypatch.setattr(type(WG.impl), "launch", orig)
        losses[ro] = np.array(run.loss_history, np.float64)
        counts[ro] = sum(k.startswith("matmul:") and k.endswith("+roab") for k in keys)
    assert counts["on"] > 0 and counts["off"] == 0, counts
    assert len(losses["on"]) == 4 and np.array_equal(losses["on"], losses["off"])
