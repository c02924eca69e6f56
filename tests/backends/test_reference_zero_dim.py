"""0-d tensors on the reference backend: an upload keeps shape (), so the compiled replay (a Program's third
run, reusing the cached Program) writes 0-d results straight into their () windows like dispatch does.

Regression: from_numpy took its shape from np.ascontiguousarray, which turns a 0-d array into shape (1,); the
op-by-op path hid it (every result is reshaped), but the replay's `ufunc(..., out=window)` refused to
broadcast (1,) into (), so a test passed or failed depending on how often earlier tests ran its Program.
Oracle: numpy float64 on the same inputs (tolerance: exact, a single f64 multiply)."""
import numpy as np

import scellis_jupyter as sc
from scellis_jupyter.backends.reference import REPLAY_AFTER


def test_upload_keeps_zero_dim_shape(ref):
    x = sc.tensor(np.asarray(1.5), dtype="f64", device=ref)
    assert x.node.storage.shape == ()
    assert x.numpy().shape == ()


def test_zero_dim_product_replayed(ref):
    rng = np.random.default_rng(7)
    for _ in range(REPLAY_AFTER + 2):           # op by op, then from the compiled replay
        a, b = rng.standard_normal(2)
        out = (sc.tensor(np.asarray(a), dtype="f64", device=ref) * sc.tensor(np.asarray(b), dtype="f64", device=ref)).numpy()
        assert out.shape == ()
        assert out == a * b
