"""Philox-4x32-10 against the Random123 known-answer vectors; streams and state round-trip."""
import numpy as np

import scellis_jupyter as sc

KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


def test_known_answers():
    for ctr, key, want in KAT:
        assert sc.rng.philox4x32(ctr, key).tolist() == want


def test_streams_and_resume():
    g = sc.rng.Generator(7)
    a = g.stream("dropout").bits(10)
    state = g.state_dict()
    b = g.stream("dropout").bits(6)
    g2 = sc.rng.Generator.from_state(state)
    assert np.array_equal(g2.stream("dropout").bits(6), b)
    assert not np.array_equal(sc.rng.Generator(7).stream("init").bits(10), a)
    # position-addressed: one draw of 16 == two draws of 10 then 6
    assert np.array_equal(sc.rng.Generator(7).stream("dropout").bits(16), np.concatenate([a, b]))


def test_uniform_permutation():
    s = sc.rng.Generator(1).stream("shuffle")
    u = s.uniform((10000,))
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    p = s.permutation(100)
    assert sorted(p.tolist()) == list(range(100))


def test_known_answers_batched_and_via_stream_bits():
    ctr = np.array([k[0] for k in KAT], np.uint32)
    key = np.array([k[1] for k in KAT], np.uint32)
    assert sc.rng.philox4x32(ctr, key).tolist() == [k[2] for k in KAT]
    # stream word w is lane w % 4 of counter block (w // 4, 0, 0, 0): block 0 of key (0, 0) is the first vector
    assert sc.rng.stream_bits((0, 0), 0, 4).tolist() == KAT[0][2]
    assert sc.rng.stream_bits((0, 0), 2, 2).tolist() == KAT[0][2][2:]


def test_stream_independence():
    g = sc.rng.Generator(123)
    names = ["init", "dropout", "shuffle", "augment", "my-stream"]
    keys = {n: g.stream(n).key for n in names}
    assert len(set(keys.values())) == len(names)
    draws = {n: sc.rng.Generator(123).stream(n).bits(4096).astype(np.float64) for n in names}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert abs(np.corrcoef(draws[a], draws[b])[0, 1]) < 0.1          # 6 sigma at n=4096
            assert np.mean(draws[a] == draws[b]) < 0.01
    # drawing from one stream leaves the others where they were
    g.stream("dropout").bits(1000)
    assert g.positions == {"dropout": 1000}
    assert np.array_equal(g.stream("init").bits(4096).astype(np.float64), draws["init"])
    # seeds differ, including in their high 32 bits
    s = [sc.rng.Generator(seed).stream("init").bits(64) for seed in (0, 1, 2**32, 2**32 + 1)]
    assert len({x.tobytes() for x in s}) == 4


def test_state_dict_round_trip_through_json_continues_exactly():
    import json
    g = sc.rng.Generator(2024)
    g.stream("init").normal((7, 3))
    g.stream("shuffle").permutation(50)
    g.stream("dropout").uniform((13,))
    state = json.loads(json.dumps(g.state_dict()))
    assert state == {"seed": 2024, "positions": {"dropout": 13, "init": 42, "shuffle": 50}}
    h = sc.rng.Generator.from_state(state)
    for name, draw in [("init", lambda s: s.normal((5, 5))), ("dropout", lambda s: s.uniform((99,))),
                       ("shuffle", lambda s: s.permutation(17)), ("augment", lambda s: s.bits(9))]:
        assert np.array_equal(draw(g.stream(name)), draw(h.stream(name)))
    assert g.state_dict() == h.state_dict()


def test_uniform_range_and_resolution():
    edge = sc.rng.bits_to_uniform(np.array([0, 0xFF, 0x100, 0xFFFFFFFF], np.uint32))
    assert edge.dtype == np.float32
    assert edge.tolist() == [0.0, 0.0, 2.0 ** -24, 1.0 - 2.0 ** -24]               # never 1.0
    u = sc.rng.Generator(5).stream("augment").uniform((200_000,))
    assert u.dtype == np.float32 and u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size)
    hist = np.histogram(u, bins=20, range=(0, 1))[0]
    assert hist.min() > 0.95 * u.size / 20 and hist.max() < 1.05 * u.size / 20


def test_permutation_validity():
    g = sc.rng.Generator(9)
    for n in (0, 1, 2, 1000):
        p = g.permutation(n)
        assert p.dtype == np.int64 and np.array_equal(np.sort(p), np.arange(n))
    a, b = sc.rng.Generator(9).permutation(1000), sc.rng.Generator(10).permutation(1000)
    assert not np.array_equal(a, b)
    assert not np.array_equal(sc.rng.Generator(9).permutation(1000), g.permutation(1000))  # next draw differs
    # each element lands in each position about equally often
    firsts = np.array([sc.rng.Generator(s).permutation(4)[0] for s in range(4000)])
    assert np.all(np.abs(np.bincount(firsts, minlength=4) - 1000) < 5 * np.sqrt(1000 * 0.75))


def test_normal_statistics():
    from scipy import stats
    z = sc.rng.Generator(11).stream("init").normal((400_000,))
    assert z.dtype == np.float32 and np.isfinite(z).all()
    n = z.size
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.std() - 1.0) < 5 / np.sqrt(2 * n)
    assert abs(stats.skew(z)) < 5 * np.sqrt(6 / n) and abs(stats.kurtosis(z)) < 5 * np.sqrt(24 / n)
    assert stats.kstest(z, "norm").pvalue > 1e-4
    t = sc.ops.normal((64, 64), sc.rng.Generator(11), mean=3.0, std=0.5, device="reference").numpy()
    assert abs(t.mean() - 3.0) < 0.05 and abs(t.std() - 0.5) < 0.05
