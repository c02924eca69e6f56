"""Profiling on wgpu: each timestamped pass is tagged with the op, layer and shapes of the program value that
launched it, also when the program runs for the first time (recorded, then dispatched at its end: the tags
must follow each dispatch, not the last op launched), and timing off leaves the step's dispatch path as it was."""
import numpy as np
import pytest

import scellis_jupyter as sc

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu
needs_ts = pytest.mark.skipif(WG is None or "timestamp-query" not in WG.features,
                              reason="the adapter does not grant 'timestamp-query'")


@needs_ts
def test_a_first_run_programs_passes_carry_their_own_op_and_shapes(monkeypatch):
    monkeypatch.setenv("SCELLIS_EPILOGUE", "0")      # three dispatches of three ops (the epilogue would fold two)
    be = WG.impl
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    a, b = sc.tensor(a_np, device=WG), sc.tensor(b_np, device=WG)
    assert be.start_timing()
    got = sc.ops.softmax((a @ b) * 3.0, -1).numpy()
    timed = be.stop_timing()
    z = (a_np.astype(np.float64) @ b_np) * 3.0
    want = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)   # f32 on the GPU
    assert [t["op"] for t in timed] == ["matmul", "fused", "softmax"]
    assert timed[0]["ins"] == [[[16, 8], "f32"], [[8, 5], "f32"]] and timed[0]["out"] == [[[16, 5], "f32"]]
    assert all(t["out"] == [[[16, 5], "f32"]] for t in timed) and all(t["s"] >= 0 for t in timed)
    assert all(t["scope"] == "" for t in timed)             # eager ops are built outside any layer
    assert be._timing is None and be.stop_timing() == []


def test_without_timing_no_pass_is_tagged():
    be = WG.impl
    a = sc.tensor(np.ones((4, 4), np.float32), device=WG)
    be._tag = None
    (a @ a).numpy()
    assert be._tag is None and be._timing is None
