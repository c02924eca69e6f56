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


def test_mixed_dtypes_across_windows_come_back_exactly_and_independent(monkeypatch):
    """Storages of every dtype, odd sizes and scalars, read through a window smaller than several of them (so
    pieces of one storage fall in different round trips): values exact, each result its own writable array."""
    from scellis_jupyter.backends.wgpu import runtime
    monkeypatch.setattr(runtime, "STAGING_MAX", 1024)
    be = WG.fresh_impl()
    rng = np.random.default_rng(1)
    want = [rng.standard_normal(3001).astype(np.float16),           # 6002 bytes: odd count, padded to 4
            rng.standard_normal((7, 5)).astype(np.float32),
            np.array(2.5, np.float32),                               # a scalar
            rng.integers(-9, 9, size=257).astype(np.int32),
            rng.integers(0, 1 << 31, size=3).astype(np.uint32),
            rng.random(1001) > 0.5,
            np.zeros((0, 4), np.float32)]
    dtypes = ["f16", "f32", "f32", "i32", "u32", "bool", "f32"]
    stores = [be.from_numpy(a, d) for a, d in zip(want, dtypes)]
    got = be.read_many(stores)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w)
        assert g.flags.writeable
    again = be.read_many(stores)
    got[1][0, 0] = 99.0
    assert again[1][0, 0] == want[1][0, 0] and be.read_many([stores[1]])[0][0, 0] == want[1][0, 0]


def test_a_large_read_holds_about_one_host_copy():
    """The host memory a read allocates is about the result's size (it held three or four copies at once)."""
    import tracemalloc
    be = WG.fresh_impl()
    a = np.arange(2_000_000, dtype=np.float32)                      # 8 MB
    s = be.from_numpy(a, "f32")
    be.read_many([s])                                               # warm: pipelines, staging paths
    tracemalloc.start()
    try:
        got = be.read_many([s])[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(got, a)
    assert peak < 1.25 * a.nbytes, peak


def test_uploads_make_no_host_copy_and_come_back_exactly():
    """from_numpy, from_numpy_many and write hand whole-word arrays to the queue as they are (it copies them);
    an odd-sized f16 array is padded to a word. Values come back exactly."""
    import tracemalloc
    be = WG.fresh_impl()
    a = np.arange(2_000_000, dtype=np.float32)                      # 8 MB
    rev = a[::-1].copy()
    be.read_many([be.from_numpy(a[:64], "f32")])                    # warm
    tracemalloc.start()
    try:
        s = be.from_numpy(a, "f32")
        many = be.from_numpy_many([(a[:262144], "f32"), (a[262144:524288], "f32")])   # 1 MB each, packed
        be.write(s, rev)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 0.1 * a.nbytes, peak                               # no host copy of any of them
    odd = np.arange(7, dtype=np.float16)
    got = be.read_many([s, *many, be.from_numpy(odd, "f16")])
    assert np.array_equal(got[0], rev) and np.array_equal(got[1], a[:262144])
    assert np.array_equal(got[2], a[262144:524288]) and np.array_equal(got[3], odd)
