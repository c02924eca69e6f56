"""Every kernel family runs under WebGPU's default limits (SCELLIS_WGPU_LIMITS=default), as a browser
would grant them: 16 KiB of workgroup memory, 256 invocations, 8 storage buffers per stage. Checked in a
fresh process against the numpy reference, on the shapes that press each limit hardest (attention tiles
sized from workgroup memory, 256-thread matmul/reduce/softmax workgroups, 8 bindings).

wgpu-native refuses too many invocations or bindings when it creates a pipeline, but (unlike a browser)
not too much workgroup memory, so the test adds up every compiled kernel's `var<workgroup>` arrays itself."""
from fixtures.devices import needs_wgpu

pytestmark = needs_wgpu

CODE = r"""
import numpy as np, scellis_jupyter as sc
from scellis_jupyter import ops
from scellis_jupyter.backends.wgpu.runtime import WEBGPU_DEFAULT_LIMITS
wg, ref = sc.device("wgpu"), sc.device("reference")
for k in ("max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
          "max-storage-buffers-per-shader-stage"):
    assert wg.impl.limits[k] == WEBGPU_DEFAULT_LIMITS[k], (k, wg.impl.limits[k])
SOURCES = {}
_pipeline = type(wg.impl).pipeline
def pipeline(self, key, source):
    SOURCES[key] = source() if callable(source) else source
    return _pipeline(self, key, SOURCES[key])
type(wg.impl).pipeline = pipeline
r = np.random.default_rng(0)

def both(f, *arrs, grad=False):
    out = []
    for dev in (wg, ref):
        ts = [sc.tensor(a, device=dev, requires_grad=grad) for a in arrs]
        y = f(*ts)
        res = [y.numpy()]
        if grad:
            y.sum().backward()
            res += [t.grad.numpy() if hasattr(t.grad, "numpy") else sc.Tensor(t.grad, dev).numpy() for t in ts]
        out.append(res)
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)   # f32, different summation orders

f32 = lambda *s: r.standard_normal(s).astype(np.float32)
mask = r.random((1, 1, 70, 70)) > 0.3
import os
for path in ("flash", "scores"):   # both attention paths (short f32 sequences take the score one by default)
    os.environ["SCELLIS_ATTENTION_PATH"] = path
    wg.impl.forget_programs()
    for d in (64, 256):  # flash tiles sized from 16 KiB of workgroup memory: 32 rows at d=64, 8 at d=256
        both(lambda q, k, v: ops.attention(q, k, v, causal=True, mask=sc.tensor(mask, device=q.device)),
             f32(1, 2, 70, d), f32(1, 2, 70, d), f32(1, 2, 70, d), grad=True)
del os.environ["SCELLIS_ATTENTION_PATH"]
both(lambda a, b: a @ b, f32(768, 520), f32(520, 768))           # the 128x128 tile (36 of them), 256 threads:
                                                                 # big_p, as big_db's 16.3 KiB is over the limit
both(lambda a: a.sum(1) + a.max(1), f32(3, 4100))                # 256-thread reduction rows
both(lambda a: ops.softmax(a, -1) + ops.log_softmax(a, -1), f32(3, 2000))
both(lambda a, b, c, d, e, f, g: (a * b + c - d) * e / (abs(f) + 1.0) + g,   # 7 inputs + out: 8 bindings
     *[f32(5, 33) for _ in range(7)])

import re
SIZE = {"f32": 4, "u32": 4, "i32": 4, "f16": 2}
decl = re.compile(r"var<workgroup>\s+\w+\s*:\s*array<\s*(?:vec([234])<)?(\w+)>?\s*,\s*(\d+)\s*>")
lim = WEBGPU_DEFAULT_LIMITS["max-compute-workgroup-storage-size"]
for key, src in SOURCES.items():
    used = sum(int(v or 1) * SIZE[t] * int(n) for v, t, n in decl.findall(src))
    assert used <= lim, f"kernel {key.split(':')[0]} declares {used} bytes of workgroup memory, over {lim}"
fams = {k.split(":")[0] for k in SOURCES}
assert {"attention_fwd", "attention_bwd", "attention_scores", "matmul", "reduce", "softmax", "fused"} <= fams, fams
print("DEFAULT-LIMITS-OK", len(SOURCES))
"""


def test_kernels_at_webgpu_default_limits(run_python):
    r = run_python(CODE, SCELLIS_WGPU_LIMITS="default", SCELLIS_DEVICE="wgpu")
    assert "DEFAULT-LIMITS-OK" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


def test_unknown_limits_mode_is_refused(run_python):
    r = run_python("import scellis_jupyter as sc\ntry:\n    sc.device('wgpu').impl\nexcept sc.ScellisError as e:\n"
                   "    print('ERR', e)\n", SCELLIS_WGPU_LIMITS="huge")
    assert "ERR" in r.stdout and "SCELLIS_WGPU_LIMITS='huge'" in r.stdout, r.stdout + r.stderr[-2000:]
