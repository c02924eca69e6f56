"""The matmul's causal bands (matmul.py BAND_TILES / BAND_KEND / BAND_KBEG, used by the score attention path)
against numpy in float64: every loop form (plain, prefetching, double-buffered tiles), square and ragged
causal offsets (Lk - Lq = 0, > 0, < 0), a K-split, and chunks under a small binding limit (each chunk's
band offset depends on where it starts). BAND_TILES is checked on the entries it must compute (the rest it
may leave unwritten); the two k bands on every entry, with A zero where causality zeroes it, and
bit-identical to the product without the band (skipping exact zeros changes no sum).

Tolerance: rtol 1e-5 / atol 1e-5 (f32 sums of at most ~330 products of unit normals).
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

SCRIPT = r"""
import itertools, sys
from types import SimpleNamespace
import numpy as np
import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu.kernels import attention_scores as A
from scellis_jupyter.backends.wgpu.kernels.matmul import BAND_KBEG, BAND_KEND, BAND_TILES
be = sc.device("wgpu").impl
lq, lk, d, nb = (int(a) for a in sys.argv[1:5])
tier, ids = sys.argv[5], itertools.count()
coff = lk - lq
r = np.random.default_rng(lq * 7 + lk)
allow = np.tril(np.ones((lq, lk), bool), k=coff)


def run(a, b, shape, ta=False, tb=False, band=(0, 0)):
    sa, sb = be.from_numpy(a, "f32"), be.from_numpy(b, "f32")
    c = be.alloc_storage(shape, "f32", int(np.prod(shape)) * 4)
    be.write(c, np.full(shape, np.nan, np.float32))
    prog = SimpleNamespace(hash=f"band-test-{next(ids)}", tier=tier)   # launches run inside a program
    be.begin(prog)
    A._mm(be, sa, sb, c, ta=ta, tb=tb, band=band)
    be.end(prog)
    be.flush()
    return be.to_numpy(c)


q = r.standard_normal((nb, lq, d)).astype(np.float32)
k = r.standard_normal((nb, lk, d)).astype(np.float32)
s = run(q, k, (nb, lq, lk), tb=True, band=(BAND_TILES, coff))
want = q.astype(np.float64) @ np.swapaxes(k, -1, -2)
m = np.broadcast_to(allow, s.shape)
np.testing.assert_allclose(s[m], want[m], rtol=1e-5, atol=1e-5)
p = np.where(allow, r.standard_normal((nb, lq, lk)), 0).astype(np.float32)
v = r.standard_normal((nb, lk, d)).astype(np.float32)
got = run(p, v, (nb, lq, d), band=(BAND_KEND, coff))
np.testing.assert_allclose(got, p.astype(np.float64) @ v, rtol=1e-5, atol=1e-5)
assert np.array_equal(got, run(p, v, (nb, lq, d)))
g = r.standard_normal((nb, lq, d)).astype(np.float32)
got = run(p, g, (nb, lk, d), ta=True, band=(BAND_KBEG, coff))
np.testing.assert_allclose(got, np.swapaxes(p, -1, -2).astype(np.float64) @ g, rtol=1e-5, atol=1e-5)
assert np.array_equal(got, run(p, g, (nb, lk, d), ta=True))
print("BAND-OK", sorted({key.split(":")[1] for key in be._pipelines if key.startswith("matmul:")}),
      any(key.startswith("matmul_ksplit") for key in be._pipelines))
"""

CASES = {  # lq, lk, d, heads, tier, environment
    "square-default": (300, 300, 24, 2, "debug", {}),
    "lq<lk-prefetch": (200, 330, 16, 2, "debug", {"SCELLIS_MATMUL_TUNE": "big_p"}),
    "lq>lk-double-buffered": (330, 200, 16, 2, "debug", {"SCELLIS_MATMUL_TUNE": "big_db"}),
    "square-plain-mid": (150, 150, 8, 2, "debug", {"SCELLIS_MATMUL_TUNE": "mid"}),
    "ksplit": (520, 520, 8, 1, "prod", {"SCELLIS_MATMUL_TUNE": "mid_pf:4"}),
    "chunks-small-binding": (300, 280, 20, 2, "debug", {"SCELLIS_MAX_BINDING_BYTES": str(64 * 1024)}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_band_products_match_numpy(name):
    lq, lk, d, nb, tier, extra = CASES[name]
    env = dict(os.environ, **extra, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(lq), str(lk), str(d), str(nb), tier], env=env,
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert "BAND-OK" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
    if "SCELLIS_MATMUL_TUNE" in extra:
        assert f"'{extra['SCELLIS_MATMUL_TUNE'].split(':')[0]}'" in r.stdout, r.stdout
    assert r.stdout.strip().endswith(str(name == "ksplit")), r.stdout     # the K-split ran, and only there
