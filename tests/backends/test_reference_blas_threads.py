"""The reference path's products give the same bits whatever BLAS thread count the process started with
(a Dask worker gets OPENBLAS_NUM_THREADS=1, a notebook kernel every core), in threads started later too.
OpenBLAS 0.3.31 gives different bits for a 64x128 @ 128x128 product at 1 and at 2 threads."""
import json

CODE = """
import hashlib, json, threading, numpy as np, scellis_jupyter as sc
dev = sc.device("reference")
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 128)).astype(np.float32)
b = rng.standard_normal((128, 128)).astype(np.float32)
def product():
    return hashlib.sha256((sc.tensor(a, device=dev) @ sc.tensor(b, device=dev)).numpy().tobytes()).hexdigest()
out = {"main": product()}
t = threading.Thread(target=lambda: out.__setitem__("thread", product()))
t.start(); t.join()
print(json.dumps(out))
"""


def test_a_product_is_bit_identical_at_any_starting_blas_thread_count(run_python):
    got = []
    for n in ("1", "2"):
        r = run_python(CODE, OPENBLAS_NUM_THREADS=n, OMP_NUM_THREADS=n)
        assert r.returncode == 0, r.stderr
        got.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert got[0]["main"] == got[0]["thread"] == got[1]["main"] == got[1]["thread"], got
