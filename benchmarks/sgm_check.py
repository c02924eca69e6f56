"""The real subgroup-matrix matmul and flash attention (Dawn, a GPU with matrix units) against float64 on the CPU,
before any timing (attention: forward and gradients on kernels/flash_sgm.wgsl, causal and not, head sizes 16-128):
    SCELLIS_WEBGPU=dawn python benchmarks/sgm_check.py      # prints SGM-CHECK ok | FAILED and the worst error"""
import os, sys, time, json
import numpy as np
import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F
sc.set_tier("prod")
d = sc.device("wgpu")
be = d.impl
print("device:", d, "|", d.choice)
print("features:", sorted(be.features), "configs:", d.subgroup_matrix_configs[:3])
from scellis_jupyter.backends.wgpu.kernels import matmul_sgm
print("usable configs:", matmul_sgm.configs(be))
_c = matmul_sgm.configs(be)
print("workgroup storage:", be.limits.get("max-compute-workgroup-storage-size"), "| tiles that fit:",
      [t for t in matmul_sgm.TILES if _c and matmul_sgm.fits(_c[0], t, be)])
rng = np.random.default_rng(0)
worst = 0.0
def check(name, got, want):
    global worst
    err = float(np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() + 1e-30))
    worst = max(worst, err)
    print(f"{name:40s} rel err {err:.2e}", flush=True)
def h(x): return x.astype(np.float16)
for (m, n, k) in [(37, 45, 70), (128, 128, 128), (200, 333, 129), (1024, 768, 512), (5, 3, 9)]:
    a = h(rng.standard_normal((m, k))); b = h(rng.standard_normal((k, n)))
    got = (sc.tensor(a, dtype="f16", device=d) @ sc.tensor(b, dtype="f16", device=d)).numpy()
    check(f"f16 {m}x{n}x{k}", got, a.astype(np.float64) @ b)
a = h(rng.standard_normal((3, 2, 65, 40))); b = h(rng.standard_normal((2, 40, 77)))
got = (sc.tensor(a, dtype="f16", device=d) @ sc.tensor(b, dtype="f16", device=d)).numpy()
check("f16 batched broadcast 3x2x65x40 @ 2x40x77", got, a.astype(np.float64) @ b)
a = h(rng.standard_normal((96, 130))); b = h(rng.standard_normal((70, 96)))
ta, tb = sc.tensor(a, dtype="f16", device=d), sc.tensor(b, dtype="f16", device=d)
got = (ta.T @ tb.T).numpy()
check("f16 transposed A^T B^T 130x70x96", got, a.T.astype(np.float64) @ b.T)
x = h(rng.standard_normal((300, 256))); w = h(rng.standard_normal((256, 384))); bias = h(rng.standard_normal((384,)))
tx, tw, tbias = (sc.tensor(v, dtype="f16", device=d) for v in (x, w, bias))
got = sc.ops.relu(tx @ tw + tbias).numpy()
ref = np.maximum(x.astype(np.float64) @ w + bias, 0)
check("f16 relu(x @ w + b) (epilogue)", got, ref)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from fixtures.attention import dense          # noqa: E402  (softmax attention and its gradients in float64)
os.environ["SCELLIS_ATTENTION_KERNEL"] = "sgm"  # the matrix-unit flash kernels (kernels/flash_sgm.wgsl; opt-in)
for (batch, lq, lk, dh, causal) in [((2, 3), 37, 45, 64, True), ((2,), 130, 130, 64, False), ((1, 2), 200, 77, 32, True),
                                    ((1,), 300, 300, 128, True), ((2,), 64, 64, 16, False)]:
    q, k, v, g = (h(rng.standard_normal(batch + s)) for s in ((lq, dh), (lk, dh), (lk, dh), (lq, dh)))
    ts = [sc.tensor(a, dtype="f16", device=d, requires_grad=True) for a in (q, k, v)]
    o = sc.ops.attention(*ts, causal=causal)
    o.backward(sc.tensor(g, dtype="f16", device=d))
    got = [o.numpy()] + [t.grad.numpy() for t in ts]
    for what, x, y in zip(("out", "dq", "dk", "dv"), got, dense(q, k, v, g, causal, None, 1 / np.sqrt(dh))):
        check(f"attention {what} {batch} {lq}x{lk} d{dh} causal={causal}", x, y)
keys = sorted({k.split(":")[0] + ":" + k.split(":")[1] for k in be._pipelines if k.startswith(("matmul", "flash"))})
print("matmul pipelines:", keys)
print("SGM-CHECK", "ok" if worst < 5e-3 else "FAILED", f"worst {worst:.2e}", flush=True)
