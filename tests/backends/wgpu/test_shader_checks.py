"""SCELLIS_WGPU_SHADER_CHECKS: kernels compiled without naga's index clamps and loop counters (wgpu-native's
trusted shader modules) compute what the checked ones compute, bit for bit: a tiny causal language model
trained through sc.train (matmuls of ragged shapes, attention, layer norm, cross-entropy, AdamW) gives the
same losses, and ragged matmuls and a causal attention's forward and gradients (the score path) the same
bits, each mode in its own process. The mode is read when the device opens; a bad value is refused naming
the variable.
"""
from __future__ import annotations

import json

import pytest

from fixtures import spec_text
from fixtures.devices import needs_wgpu

pytestmark = needs_wgpu

CODE = r"""
import json, sys, tempfile
import numpy as np, scellis_jupyter as sc
from scellis_jupyter.graph import functional as F
wg = sc.device("wgpu")
r = np.random.default_rng(5)
mm = []
for m, k, n in ((1, 1, 1), (37, 53, 29), (130, 9, 131), (257, 300, 65)):
    a = r.standard_normal((m, k)).astype(np.float32); b = r.standard_normal((k, n)).astype(np.float32)
    got = sc.Tensor(F.matmul(sc.tensor(a, device=wg).node, sc.tensor(b, device=wg).node), wg).numpy()
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(got - want).max() <= 1e-5 * np.sqrt(k) * np.abs(want).max(), (m, k, n)
    mm.append(got.tobytes().hex())
q, k, v, g = (r.standard_normal((2, 3, 37, 16)).astype(np.float32) for _ in range(4))
ts = [sc.tensor(x, device=wg, requires_grad=True) for x in (q, k, v)]
o = sc.ops.attention(*ts, causal=True)
o.backward(sc.tensor(g, device=wg))
attn = [x.tobytes().hex() for x in [o.numpy()] + [t.grad.numpy() for t in ts]]
spec = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    run = sc.train(spec, store=d, device="wgpu", progress=False)
    losses = [float(x).hex() for x in run.loss_history]
print("RESULT", json.dumps({"checks": wg.impl.shader_checks, "mm": mm, "losses": losses, "attn": attn,
                            "score_rows": sum(k.startswith("attention_scores:") for k in wg.impl._pipelines),
                            "modes": [wg.impl.checks_for(k)
                                      for k in ("matmul", "softmax", "matmul_ksplit", "attention_scores")]}))
"""

TINY = spec_text("tiny_lm", steps=3, seed=4)


def _result(run_python, mode):
    r = run_python(CODE, TINY, SCELLIS_DEVICE="wgpu", SCELLIS_WGPU_SHADER_CHECKS=mode)
    lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    assert lines, r.stdout[-2000:] + r.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_unchecked_kernels_give_the_checked_bits(run_python):
    naga, none, auto = _result(run_python, "naga"), _result(run_python, "none"), _result(run_python, None)
    assert naga["checks"] == "naga" and none["checks"] == "none" and auto["checks"] == "auto"
    assert naga["modes"] == ["naga"] * 4 and none["modes"] == ["none"] * 4
    # llvmpipe is a Vulkan adapter: the matmul and attention's score-path row kernels alone unchecked
    assert auto["modes"] == ["none", "naga", "naga", "none"]
    assert auto["score_rows"] > 0          # the attention above ran those row kernels
    assert none["attn"] == naga["attn"] == auto["attn"]
    assert len(naga["losses"]) == 3
    assert none["mm"] == naga["mm"] == auto["mm"]
    assert none["losses"] == naga["losses"] == auto["losses"]


def test_auto_leaves_the_checks_out_of_the_trusted_kernels_on_vulkan_only():
    from scellis_jupyter.backends.wgpu.shaders import TRUSTED, mode_for
    assert TRUSTED == {"matmul", "attention_scores"}
    assert mode_for("auto", "matmul", "Vulkan") == mode_for("auto", "attention_scores", "Vulkan") == "none"
    for kernel, backend in (("matmul", "Metal"), ("matmul", "D3D12"), ("matmul", ""), ("softmax", "Vulkan"),
                            ("matmul_ksplit", "Vulkan"), ("attention_scores", "Metal"), ("flash_fwd", "Vulkan")):
        assert mode_for("auto", kernel, backend) == "naga", (kernel, backend)
    for policy in ("naga", "bounds", "loops", "none"):
        assert mode_for(policy, "matmul", "Vulkan") == mode_for(policy, "softmax", "Metal") == policy


def test_pipelines_compile_under_their_kernels_checks(monkeypatch):
    """The device compiles each pipeline with the checks its kernel name resolves to (wgpu-native's trusted entry
    point for `none`)."""
    from fixtures.devices import WG
    seen = []
    real = WG.impl.webgpu.create_module
    monkeypatch.setattr(WG.impl.webgpu, "create_module", lambda dev, code, mode="naga", label="": (
        seen.append(mode), real(dev, code, mode, label))[1])
    monkeypatch.setattr(WG.impl, "shader_checks", "auto")
    monkeypatch.setattr(WG.impl, "backend_type", "Vulkan")
    src = "@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n@compute @workgroup_size(1) fn main() { x[0] = 1.0; }"
    WG.impl.pipeline("matmul:probe-auto", src)
    WG.impl.pipeline("softmax:probe-auto", src)
    monkeypatch.setattr(WG.impl, "backend_type", "Metal")
    WG.impl.pipeline("matmul:probe-auto-metal", src)
    assert seen == ["none", "naga", "naga"]


@pytest.mark.parametrize("mode", ["bounds", "loops"])
def test_each_check_alone_compiles_and_runs(run_python, mode):
    got = _result(run_python, mode)
    assert got["checks"] == mode and len(got["losses"]) == 3


def test_bad_mode_is_refused_when_the_device_opens(run_python):
    r = run_python("import scellis_jupyter as sc\ntry:\n    sc.device('wgpu').impl\nexcept sc.ScellisError as e:\n"
                   "    print('ERR', type(e).__name__, e)\n", SCELLIS_WGPU_SHADER_CHECKS="fast")
    assert "ERR SettingError" in r.stdout and "SCELLIS_WGPU_SHADER_CHECKS='fast'" in r.stdout, r.stdout + r.stderr
    assert "naga" in r.stdout and "none" in r.stdout


@pytest.mark.parametrize("mode", ["naga", "none"])
def test_a_kernel_that_does_not_compile_is_a_kernel_error_in_every_mode(monkeypatch, mode):
    import scellis_jupyter as sc
    from fixtures.devices import WG
    monkeypatch.setattr(WG.impl, "shader_checks", mode)
    with pytest.raises(sc.KernelError, match="'broken' failed to compile") as e:
        WG.impl.pipeline(f"broken:{mode}", "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }")
    assert e.value.diagnostic.where == f"device {WG.impl.label}"
    assert f"broken:{mode}" not in WG.impl._pipelines
