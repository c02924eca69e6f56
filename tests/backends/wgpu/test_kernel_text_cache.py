"""Elementwise and fused kernel texts are built once per (template, body, vector layout, dtypes) and reused by
launches outside a recorded replay (first steps, profiled and index-checked steps, a batch's dry run). Checked:
a launch whose text is cached builds no snippet, the cached text is the one a fresh build writes, and
results stay those of float64 numpy (rtol 1e-5, f32) with a cold and a warm cache."""
import numpy as np

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import elementwise as E
from scellis_jupyter.backends.wgpu.kernels import fused as FU
from scellis_jupyter.graph import functional as F

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
R = np.random.default_rng(17)


def _graph(a, b):
    x, y = sc.tensor(a, device=WG).node, sc.tensor(b, device=WG).node
    return F.mul(F.gelu(F.add(x, y)), F.sub(F.exp(F.mul(x, F.scalar(0.5))), y))    # a fused chain


def _want(a, b):
    from math import erf
    x, y = a.astype(np.float64), b.astype(np.float64)
    s = x + y
    gelu = 0.5 * s * (1 + np.vectorize(erf)(s / np.sqrt(2)))
    return gelu * (np.exp(0.5 * x) - y)


def test_cached_texts_are_built_once_and_equal_a_fresh_build(monkeypatch):
    E.SOURCES.clear()
    FU._cached_body.cache_clear()
    for n in (4096, 1001):                      # a vec4 chunk and a scalar (odd) one
        a, b = R.standard_normal(n).astype(np.float32), R.standard_normal(n).astype(np.float32)
        got = sc.Tensor(_graph(a, b), WG).numpy()
        np.testing.assert_allclose(got, _want(a, b), rtol=1e-5, atol=1e-6)
    first = dict(E.SOURCES)
    assert any(k[0] == "vec" for k in first) and any(k[0] == "strided" for k in first)
    # launches outside a replay (index checks on) with a warm cache: no text is built
    monkeypatch.setenv("SCELLIS_CHECK_INDICES", "1")
    built = []
    real = E.snippet
    monkeypatch.setattr(E, "snippet", lambda *a, **k: (built.append(a[:2]), real(*a, **k))[1])
    monkeypatch.setattr(FU, "snippet", lambda *a, **k: (built.append(a[:2]), real(*a, **k))[1])
    for n in (4096, 1001):
        a, b = R.standard_normal(n).astype(np.float32), R.standard_normal(n).astype(np.float32)
        got = sc.Tensor(_graph(a, b), WG).numpy()
        np.testing.assert_allclose(got, _want(a, b), rtol=1e-5, atol=1e-6)
    assert not [x for x in built if x[0] in ("elementwise_vec", "fused", "ops")], built[:5]
    assert E.SOURCES == first
    # a cold cache writes the same texts
    monkeypatch.setattr(E, "snippet", real)
    monkeypatch.setattr(FU, "snippet", real)
    E.SOURCES.clear()
    FU._cached_body.cache_clear()
    for n in (4096, 1001):
        a, b = R.standard_normal(n).astype(np.float32), R.standard_normal(n).astype(np.float32)
        sc.Tensor(_graph(a, b), WG).numpy()
    assert E.SOURCES == first


def test_a_group_with_unhashable_attrs_is_written_afresh():
    code = (("fill", (("value", [0.5]),), (), (4,), "f32"),)     # a list attr: not a cache key
    assert FU._scalar_body(code, (), "f32") == FU.body_of(code, [], "f32")


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(E, "SOURCES_MAX", 3)
    E.SOURCES.clear()
    for i in range(7):
        E._cached_source(("t", i), lambda i=i: f"text {i}")
        assert len(E.SOURCES) <= 3
    assert E._cached_source(("t", 6), lambda: "other") == "text 6"
