"""The grad_mean reducer (data-parallel gradients): its one-pass leaf and finish give the bits of the plain
float64 forms (n * float64(g), then (sum / N) rounded to float32) over the same pairwise tree, and the result is
the batch-mean gradient of float64 arithmetic within float32 rounding (rtol 1e-6)."""
import numpy as np

from scellis_jupyter.pool.pool import _local_reduce    # the pairwise order the workers reduce in


def _plain_tree(leaves):
    level = [{"n": x["n"], "g": {k: x["n"] * np.asarray(v, np.float64) for k, v in x["grads"].items()}}
             for x in leaves]
    while len(level) > 1:
        nxt = [{"n": a["n"] + b["n"], "g": {k: a["g"][k] + b["g"][k] for k in a["g"]}}
               for a, b in zip(level[0::2], level[1::2])]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return {k: (v / level[0]["n"]).astype(np.float32) for k, v in level[0]["g"].items()}


def test_one_pass_forms_give_the_plain_forms_bits_and_the_batch_mean():
    rng = np.random.default_rng(7)
    sizes = [5, 3, 8, 1, 6]
    leaves = [{"n": n, "loss": float(rng.random()),
               "grads": {"w": (rng.standard_normal((17, 9)) * 10.0 ** rng.integers(-3, 4)).astype(np.float32),
                         "b": rng.standard_normal(9).astype(np.float32), "s": np.float32(rng.standard_normal())}}
              for n in sizes]
    got = _local_reduce("grad_mean", dict(enumerate(leaves)))
    want = _plain_tree(leaves)
    for k in ("w", "b", "s"):
        assert got["grads"][k].dtype == np.float32 and np.shape(got["grads"][k]) == np.shape(want[k])
        assert np.array_equal(np.asarray(got["grads"][k]).view(np.int32), np.asarray(want[k]).view(np.int32)), k
        exact = sum(x["n"] * np.asarray(x["grads"][k], np.float64) for x in leaves) / sum(sizes)
        np.testing.assert_allclose(got["grads"][k], exact, rtol=1e-6, atol=1e-30)
    assert got["n"] == sum(sizes)
    assert np.isclose(got["loss"], sum(x["n"] * x["loss"] for x in leaves) / sum(sizes), rtol=1e-15)


def _module():
    import sys

    from scellis_jupyter.catalog import get
    return sys.modules[type(get("reducer", "grad_mean").make()).__module__]


def test_chunked_threads_give_the_same_bits(monkeypatch):
    """Pieces of CHUNK elements on threads (a small CHUNK here, so a 1000-element gradient takes 143 pieces and a
    ragged last one) give the bits of the plain forms, for 1 to 5 slices (a lone slice is widened in finish)."""
    mod = _module()
    monkeypatch.setattr(mod, "CHUNK", 7)
    rng = np.random.default_rng(3)
    for count in (1, 2, 3, 5):
        leaves = [{"n": int(n), "loss": float(rng.random()),
                   "grads": {"w": (rng.standard_normal((40, 25)) * 1e3).astype(np.float32),
                             "s": np.float32(rng.standard_normal())}} for n in rng.integers(1, 9, count)]
        got = _local_reduce("grad_mean", dict(enumerate(leaves)))
        want = _plain_tree(leaves)
        for k in ("w", "s"):
            assert np.array_equal(np.asarray(got["grads"][k]).view(np.int32), np.asarray(want[k]).view(np.int32)), (count, k)
    assert mod._POOL, "the pieces ran on the thread pool"


def test_slices_that_disagree_are_refused():
    import pytest
    r = _module().GradMean()
    a = r.leaf(0, {"n": 2, "loss": 1.0, "grads": {"w": np.zeros((3, 4), np.float32)}})
    b = r.leaf(1, {"n": 2, "loss": 1.0, "grads": {"w": np.zeros((4, 4), np.float32)}})
    c = r.leaf(2, {"n": 2, "loss": 1.0, "grads": {"v": np.zeros((3, 4), np.float32)}})
    with pytest.raises(ValueError, match="shape of 'w'"):
        r.combine(a, b)
    with pytest.raises(ValueError, match="disagree on the parameters"):
        r.combine(a, c)
