"""Elementwise and fused kernel texts are written only when the device has no pipeline for their key (the key
names the body, vector layout and dtypes), so launches outside a recorded replay (first steps, profiled and
index-checked steps, a batch's dry run) build no text. Checked: a warm launch builds no snippet, a device
without the pipelines (a fresh one) writes texts whose pipelines give the same bits, two bodies sharing a
vector layout get two pipelines, and results stay those of float64 numpy (rtol 1e-5, f32)."""
import numpy as np

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import elementwise as E
from scellis_jupyter.backends.wgpu.kernels import fused as FU
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, launch_keys, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(17)


def _graph(dev, a, b, half=0.5):
    x, y = sc.tensor(a, device=dev).node, sc.tensor(b, device=dev).node
    return F.mul(F.gelu(F.add(x, y)), F.sub(F.exp(F.mul(x, F.scalar(half))), y))    # a fused chain


def _want(a, b, half=0.5):
    from math import erf
    x, y = a.astype(np.float64), b.astype(np.float64)
    s = x + y
    gelu = 0.5 * s * (1 + np.vectorize(erf)(s / np.sqrt(2)))
    return gelu * (np.exp(half * x) - y)


def _run(dev, n, half=0.5):
    a, b = R.standard_normal(n).astype(np.float32), R.standard_normal(n).astype(np.float32)
    got = sc.Tensor(_graph(dev, a, b, half), dev).numpy()
    np.testing.assert_allclose(got, _want(a, b, half), rtol=1e-5, atol=1e-6)
    return a, b, got


def test_warm_launches_build_no_text_and_a_fresh_device_writes_the_same_kernels(monkeypatch):
    monkeypatch.setenv("SCELLIS_CHECK_INDICES", "1")           # every run through the launchers, none replayed
    launched = launch_keys(monkeypatch)
    for n in (4096, 1001):                      # a vec4 chunk and a scalar (odd) one
        _run(WG, n)
    keys = {k for k in launched if k.startswith(("elementwise_vec:fused", "fused:"))}
    assert any(k.startswith("elementwise_vec:") for k in keys) and any(k.startswith("fused:") for k in keys)
    # launches outside a replay (index checks on) with the pipelines built: no text is written
    built = []
    real = E.snippet
    monkeypatch.setattr(E, "snippet", lambda *a, **k: (built.append(a[:2]), real(*a, **k))[1])
    monkeypatch.setattr(FU, "snippet", lambda *a, **k: (built.append(a[:2]), real(*a, **k))[1])
    outs = [_run(WG, n) for n in (4096, 1001)]
    assert not [x for x in built if x[0] in ("elementwise_vec", "fused", "ops")], built[:5]
    monkeypatch.setattr(E, "snippet", real)
    monkeypatch.setattr(FU, "snippet", real)
    # without those pipelines (forgotten, as on a fresh device) the texts are written again, to the same bits
    for k in keys:
        del WG.impl._pipelines[k]
    WG.impl.forget_programs()
    for a, b, got in outs:
        assert np.array_equal(sc.Tensor(_graph(WG, a, b), WG).numpy(), got)
    assert keys <= set(WG.impl._pipelines)


def test_two_bodies_with_one_vector_layout_get_two_pipelines(monkeypatch):
    monkeypatch.setenv("SCELLIS_CHECK_INDICES", "1")           # every run through the launchers, none replayed
    keys, vec = launch_keys(monkeypatch), {}
    for half in (0.5, 0.25):                     # the same ops and layout, another literal in the body
        keys.clear()
        _run(WG, 4096, half)
        vec[half] = {k for k in keys if k.startswith("elementwise_vec:fused")}
    assert vec[0.5] and vec[0.25] and not vec[0.5] & vec[0.25]


def test_a_group_with_unhashable_attrs_is_written_afresh():
    code = (("fill", (("value", [0.5]),), (), (4,), "f32"),)     # a list attr: not a cache key
    assert FU._scalar_body(code, (), "f32") == FU.body_of(code, [], "f32")
