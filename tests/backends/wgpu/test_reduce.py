"""reduce_sum / reduce_max on wgpu (workgroup tree, strided sub-boxes) vs the reference device.

Tolerances: f32 sums rtol/atol 1e-5 scaled by sqrt(R) (different summation order); f16 inputs sum in
f32 and round once, so within one f16 ulp (rtol 1e-3); max and integer sums are exact.
"""
import math

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F

from fixtures.devices import both


R = np.random.default_rng(7)

CASES = [
    ((3, 4, 5), (0, 2)), ((17, 3), None), ((6, 1100), (1,)), ((5,), (0,)), ((2, 3, 4, 5), (1, 3)),
    ((7, 1, 13), (0, 2)), ((2, 3, 5, 7, 11), (0, 2, 4)), ((31, 29), (0,)), ((1,), None), ((3, 2053), (1,)),
    ((4, 0, 3), (1,)), ((0, 5), (1,)), ((2, 3), ()), ((1, 1, 1), (0, 2)), ((257, 2), (0,)),
]


@pytest.mark.parametrize("shape,axes", CASES)
@pytest.mark.parametrize("dtype", ["f32", "f16", "i32"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_matches_reference(shape, axes, dtype, keepdims):
    if dtype == "i32":
        a = R.integers(-1000, 1000, shape).astype(np.int32)
    else:
        a = R.standard_normal(shape).astype(np.float16 if dtype == "f16" else np.float32)
    n_red = math.prod(shape[i] for i in (axes if axes is not None else range(len(shape))))
    g, r = both(lambda x: F.sum_(x, axes, keepdims), a)
    assert g.shape == r.shape and g.dtype == r.dtype
    tol = {"f32": 1e-5 * math.sqrt(max(n_red, 1)), "f16": 1e-3, "i32": 0}[dtype]
    np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=tol, atol=tol)
    if n_red and math.prod(shape):
        g, r = both(lambda x: F.max_(x, axes, keepdims), a)
        assert g.shape == r.shape and np.array_equal(g, r)


def test_reduce_deterministic_and_nan_max():
    a = R.standard_normal((9, 5000)).astype(np.float32)
    g1, _ = both(lambda x: F.sum_(x, 1), a)
    g2, _ = both(lambda x: F.sum_(x, 1), a)
    assert np.array_equal(g1, g2)
    a[3, 17] = np.nan
    g, r = both(lambda x: F.max_(x, 1), a)
    np.testing.assert_array_equal(g, r)
    assert np.isnan(g[3]) and not np.isnan(g[2])


# ---- splitting: tensors several times larger than a 4 MiB binding limit, in a subprocess ----------------
SPLIT_SCRIPT = r'''
import sys
import numpy as np
import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F

def cases():
    r = np.random.default_rng(12)
    a = r.standard_normal((3, 1048579)).astype(np.float32)      # 12 MiB, one row > 4 MiB
    b = r.standard_normal((1536, 2049)).astype(np.float32)      # 12 MiB matrix
    c = r.standard_normal((24, 1001, 131)).astype(np.float32)   # 12 MiB
    s = r.standard_normal((3000, 1000)).astype(np.float32)      # 12 MiB
    return {
        "sum_rows": (lambda x: F.sum_(x, 1), [a]),
        "max_rows": (lambda x: F.max_(x, 1), [a]),
        "sum_all": (lambda x: F.sum_(x), [a]),
        "sum_cols": (lambda x: F.sum_(x, 0), [b]),
        "sum_02": (lambda x: F.sum_(x, (0, 2)), [c]),
        "max_1": (lambda x: F.max_(x, 1), [c]),
        "softmax_1": (lambda x: F.softmax(x, 1), [s]),
        "log_softmax_0": (lambda x: F.log_softmax(x, 1), [s.reshape(3, 1000, 1000)[:, :, :1000].copy()]),
        "add": (lambda x, y: F.add(x, y), [b, b[::-1].copy()]),
        "permute": (lambda x: F.permute(x, (1, 0)), [b]),
        "to_i8": (lambda x: F.cast(F.mul(x, F.cast(x, "f32")), "i8"), [b * 60]),
    }

def run():
    dev = sc.device("wgpu")
    out = {}
    for name, (f, arrs) in cases().items():
        out[name] = sc.Tensor(f(*[sc.tensor(x, device=dev).node for x in arrs]), dev).numpy()
    g = sc.rng.Generator(3)
    g.positions["init"] = 2 ** 32 - 3
    out["uniform"] = sc.ops.uniform((1048583 * 3,), g, device=dev).numpy()
    return out, dev.impl.binding_limit

if __name__ == "__main__":
    out, lim = run()
    assert lim == 4194304, lim
    np.savez(sys.argv[1], **out)
'''


def test_split_matches_unsplit(tmp_path):
    import os
    import subprocess
    import sys
    script = tmp_path / "split_case.py"
    script.write_text(SPLIT_SCRIPT)
    import scellis_jupyter
    root = os.path.dirname(os.path.dirname(os.path.abspath(scellis_jupyter.__file__)))
    env = dict(os.environ, SCELLIS_MAX_BINDING_BYTES="4194304", SCELLIS_DEVICE="wgpu",
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "split.npz")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    split = np.load(tmp_path / "split.npz")
    ns: dict = {}
    exec(compile(SPLIT_SCRIPT, "split_case", "exec"), ns)
    whole, lim = ns["run"]()
    assert lim > 4194304 * 4       # the in-process device really is unsplit for these tensors
    for k, v in whole.items():
        w = split[k]
        assert w.shape == v.shape and w.dtype == v.dtype, k
        if k in ("sum_rows", "sum_all", "sum_cols", "sum_02"):   # partial sums combine in another order
            np.testing.assert_allclose(w, v, rtol=1e-4, atol=1e-3 if k != "sum_all" else 1e-1, err_msg=k)
        else:
            np.testing.assert_array_equal(w, v, err_msg=k)
