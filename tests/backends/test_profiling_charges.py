"""profiling.exclusive_seconds: each timed pass is charged the time it adds to the GPU's timeline, so passes whose
beginning timestamps were written while earlier passes still ran are not counted twice."""
import numpy as np

from scellis_jupyter.backends.profiling import exclusive_seconds


def test_overlapping_nested_and_reordered_passes():
    ticks = [(0, 10), (2, 15), (20, 25), (21, 24), (30, 29), (31, 40)]
    got = [round(s * 1e9) for s in exclusive_seconds(ticks)]
    # (2, 15) overlaps the first: charged 10..15; (21, 24) lies inside (20, 25): 0; (30, 29) reads backwards: 0
    assert got == [10, 5, 5, 0, 0, 9]


def test_sequential_passes_keep_their_own_durations():
    ticks = [(0, 7), (7, 9), (12, 30)]
    assert [round(s * 1e9) for s in exclusive_seconds(ticks)] == [7, 2, 18]
    assert exclusive_seconds([]) == []


def test_charges_never_overlap_and_fit_the_span():
    r = np.random.default_rng(0)
    for _ in range(200):
        n = int(r.integers(1, 30))
        b = np.sort(r.integers(0, 1000, n))
        e = b + r.integers(-5, 200, n)
        ticks = list(zip(b.tolist(), e.tolist()))
        got = exclusive_seconds(ticks)
        assert len(got) == n and min(got) >= 0
        # the charged stretches, rebuilt: start at max(begin, latest end so far), disjoint and in order
        last, spans = None, []
        for (bb, ee), s in zip(ticks, got):
            start = bb if last is None else max(bb, last)
            if s > 0:
                spans.append((start, start + round(s * 1e9)))
                assert spans[-1][1] == ee
            last = ee if last is None else max(last, ee)
        assert all(x[1] <= y[0] for x, y in zip(spans, spans[1:]))
        assert round(sum(got) * 1e9) <= max(0, max(e.max(), b[0]) - b[0])
