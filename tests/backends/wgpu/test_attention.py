"""Attention forward on wgpu (backward is not enabled there yet) vs the reference path; a long sequence under a lowered limit."""
import os
import subprocess
import sys

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import ops

WG, REF = sc.device("wgpu"), sc.device("reference")
R = np.random.default_rng(6)


@pytest.mark.parametrize("causal,lq,lk,d,dv,use_mask", [(False, 5, 5, 8, 8, False), (True, 7, 11, 4, 3, False),
                                                        (False, 6, 9, 16, 5, True), (True, 13, 13, 7, 7, True)])
def test_matches_reference(causal, lq, lk, d, dv, use_mask):
    q, k, v = (R.standard_normal(s).astype(np.float32) for s in ((2, 3, lq, d), (2, 3, lk, d), (2, 3, lk, dv)))
    mask = R.random((lq, lk)) > 0.3
    mask[:, 0] = True  # every query row keeps at least one key (causal keeps key 0 too)
    res = []
    for dev in (WG, REF):
        ts = [sc.tensor(a, device=dev) for a in (q, k, v)]
        m = sc.tensor(mask, device=dev) if use_mask else None
        res.append([ops.attention(*ts, causal=causal, mask=m).numpy()])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)  # f32, online vs blocked softmax order


LONG = r"""
import numpy as np, scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.program import compile_program
wg, ref = sc.device("wgpu"), sc.device("reference")
L, D = 1100, 16
assert L * L * 4 > wg.impl.binding_limit == 4 * 2**20
r = np.random.default_rng(0)
q, k, v = (r.standard_normal((1, L, D)).astype(np.float32) for _ in range(3))
outs = []
for dev in (wg, ref):
    ts = [sc.tensor(a, device=dev) for a in (q, k, v)]
    o = ops.attention(*ts, causal=True)
    prog, _ = compile_program([o.node], dev.impl.name, "debug")
    assert max(val.nbytes for val in prog.values) < L * L * 4, "a score-matrix-sized value was planned"
    outs.append([o.numpy()])
for a, b in zip(*outs):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
print("LONG-OK")
"""


@pytest.mark.slow
def test_long_sequence_beyond_binding_limit():
    env = dict(os.environ, SCELLIS_MAX_BINDING_BYTES=str(4 * 2**20))
    r = subprocess.run([sys.executable, "-c", LONG], env=env, capture_output=True, text=True, timeout=900)
    assert "LONG-OK" in r.stdout, r.stderr[-3000:]


def test_backward_is_refused_not_wrong():
    ts = [sc.tensor(R.standard_normal((1, 4, 4)).astype(np.float32), device=WG, requires_grad=True) for _ in range(3)]
    with pytest.raises(sc.ScellisError, match="no wgpu kernel for op 'attention_bwd'"):
        ops.attention(*ts).sum().backward()
