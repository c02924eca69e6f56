"""Readbacks through a bounded staging buffer: a tensor larger than it is read in pieces, exactly."""
import numpy as np

from fixtures.devices import WG, needs_wgpu

pytestmark = needs_wgpu


def test_reads_larger_than_the_staging_window_come_back_exactly_and_map_only_the_window(monkeypatch):
    from scellis_jupyter.backends.wgpu import runtime
    monkeypatch.setattr(runtime, "STAGING_MAX", 4096)
    be = WG.fresh_impl()
    rng = np.random.default_rng(0)
    a = rng.standard_normal(10_001).astype(np.float32)        # 40,004 bytes: 10 windows and a remainder
    b = rng.integers(0, 1 << 30, size=7).astype(np.int32)
    sa, sb = be.from_numpy(a, "f32"), be.from_numpy(b, "i32")
    before = be.peak
    ra, rb = be.read_many([sa, sb])
    assert np.array_equal(ra, a) and np.array_equal(rb, b)
    assert be.peak - before == 4096 == be.staging_bytes([sa.nbytes, sb.nbytes])
    assert be.staging_bytes([8]) == 8
