"""The seam between the wgpu backend and its two WebGPU implementations (backends/wgpu/webgpu.py): feature names,
`enable` directives, the choice between implementations, the refusals, and what names the implementation
(device JSON, Program cache key, compile errors). The kernels themselves run on both in
tests/backends/test_dawn.py."""
import importlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.wgpu import webgpu
from scellis_jupyter.backends.wgpu.runtime import program_key
from scellis_jupyter.errors import KernelError
from scellis_jupyter.graph import functional as F
from scellis_jupyter.program.schedule import compile_program

from fixtures.devices import WG, needs_wgpu

devmod = importlib.import_module("scellis_jupyter.backends.device")     # (the package exports a function of that name)
SWIFTSHADER = "/usr/lib/chromium/vk_swiftshader_icd.json"
needs_swiftshader = pytest.mark.skipif(not Path(SWIFTSHADER).exists() and not os.environ.get("CI"),
                                       reason="no SwiftShader ICD (Debian's chromium ships it)")
SUBGROUP_SRC = ("@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n@compute @workgroup_size(32)\n"
                "fn main(@builtin(subgroup_invocation_id) i: u32) { x[i] = subgroupAdd(1.0); }\n")


def test_feature_names_per_implementation():
    native, dawn = webgpu.load(webgpu.NATIVE), webgpu.load(webgpu.DAWN)
    assert native.feature("subgroup") == "subgroup" and dawn.feature("subgroup") == "subgroups"
    assert dawn.feature("subgroup-matrix") == "chromium-experimental-subgroup-matrix"
    assert native.feature("subgroup-matrix") is None and dawn.feature("shader-int64") is None
    assert dawn.engine_features({"subgroups", "shader-f16", "chromium-experimental-subgroup-matrix"}) == {
        "subgroup", "shader-f16", "subgroup-matrix"}


def test_tint_gets_the_subgroups_directive_naga_does_not():
    native, dawn = webgpu.load(webgpu.NATIVE), webgpu.load(webgpu.DAWN)
    assert dawn.prelude(SUBGROUP_SRC).startswith("enable subgroups;\n")
    assert native.prelude(SUBGROUP_SRC) == SUBGROUP_SRC
    plain = "@compute @workgroup_size(1) fn main() { let subgroups_seen = 1u; }"
    assert dawn.prelude(plain) == plain
    assert dawn.prelude("enable subgroups;\n" + SUBGROUP_SRC).count("enable subgroups;") == 1


def test_program_key_names_the_implementation():
    assert program_key("wgpu", "wgpu-native") == "wgpu" and program_key("wgpu", "dawn") == "wgpu+dawn"
    x = F.placeholder((3,), "f32", "x")
    a, _ = compile_program([F.relu(x)], "wgpu", "debug")
    b, _ = compile_program([F.relu(x)], "wgpu+dawn", "debug")
    assert a.hash != b.hash


def _fake(name, impl, kind="discrete"):
    return devmod.Device("wgpu", name, kind, {}, 1 << 30, "declared", implementation=impl,
                         implementation_version="1")


def test_auto_keeps_the_faster_implementation_of_one_adapter():
    n, d = _fake("GPU X", "wgpu-native"), _fake("GPU X", "dawn")
    other = _fake("GPU Y", "wgpu-native", "integrated")
    costs = {"wgpu-native": devmod.Cost(0.020, "probe"), "dawn": devmod.Cost(0.012, "cached")}
    got, why = devmod.choose([n, d, other], cost=lambda dev: costs[dev.implementation])
    assert got is d and "through dawn 1" in why and "12.0 ms" in why and "20.0 ms" in why
    costs["dawn"] = devmod.Cost(0.030, "probe")
    assert devmod.choose([n, d, other], cost=lambda dev: costs[dev.implementation])[0] is n
    # nothing measured: wgpu-native is kept, and the reason says it was not timed
    got, why = devmod.choose([n, d], cost=lambda dev: devmod.Cost(1.0, "model"))
    assert got is n and "not measured" in why


@needs_wgpu
def test_device_json_and_banner_name_the_implementation():
    info = WG.to_json()
    assert info["implementation"]["name"] in webgpu.NAMES and info["implementation"]["version"]
    assert f"via {WG.implementation}" in str(WG)
    assert WG.impl.program_key == program_key("wgpu", WG.implementation)


@needs_wgpu
def test_a_kernel_that_fails_to_compile_names_implementation_kernel_and_line():
    src = ("@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n@compute @workgroup_size(1)\n"
           "fn main() {\n  x[0] = undefined_name;\n}\n")
    with pytest.raises(KernelError) as e:
        WG.impl.pipeline("broken_kernel:1", src)
    msg = e.value.diagnostic.message
    assert f"on {WG.implementation}" in msg and "'broken_kernel'" in msg
    assert "kernel line 4: `x[0] = undefined_name;`" in msg


def test_dawn_without_an_adapter_is_a_device_error_naming_what_auto_would_choose(run_python, tmp_path):
    """SCELLIS_WEBGPU=dawn where Dawn finds no adapter (an ICD list with no driver Dawn accepts)."""
    empty = tmp_path / "none.json"
    empty.write_text(json.dumps({"file_format_version": "1.0.0",
                                 "ICD": {"library_path": str(tmp_path / "nothing.so"), "api_version": "1.3.0"}}))
    r = run_python("import scellis_jupyter as sc\ntry:\n    sc.device()\nexcept sc.ScellisError as e:\n"
                   "    print('ERR', e)\n", SCELLIS_WEBGPU="dawn", SCELLIS_DEVICE=None, VK_ICD_FILENAMES=str(empty),
                   VK_DRIVER_FILES=str(empty))
    assert "ERR error[device]" in r.stdout, r.stdout + r.stderr
    assert "SCELLIS_WEBGPU=dawn, but dawn finds no adapter" in r.stdout
    assert "SCELLIS_WEBGPU=auto would choose the numpy reference" in r.stdout


def test_a_bad_implementation_name_is_a_setting_error(run_python):
    r = run_python("import scellis_jupyter as sc\ntry:\n    sc.device()\nexcept sc.ScellisError as e:\n"
                   "    print('ERR', e)\n", SCELLIS_WEBGPU="chrome", SCELLIS_DEVICE=None)
    assert "error[setting]" in r.stdout and "SCELLIS_WEBGPU" in r.stdout, r.stdout + r.stderr


@needs_swiftshader
def test_one_adapter_through_both_implementations(run_python):
    """SwiftShader is found by wgpu-native and by Dawn: listed once through each, each opens and computes."""
    code = ("import numpy as np, scellis_jupyter as sc, json\n"
            "import importlib; D = importlib.import_module('scellis_jupyter.backends.device')\n"
            "seen = [(d.name, d.implementation) for d in D.devices() if 'SwiftShader' in d.name]\n"
            "out = {}\n"
            "for impl in ('wgpu-native', 'dawn'):\n"
            "    d = [x for x in D.devices() if 'SwiftShader' in x.name and x.implementation == impl][0]\n"
            "    x = sc.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=d)\n"
            "    out[impl] = (x * x).sum().numpy().tolist()\n"
            "print('RESULT', json.dumps({'seen': seen, 'out': out}))\n")
    r = run_python(code, VK_ICD_FILENAMES=SWIFTSHADER, SCELLIS_DEVICE=None)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line, r.stdout + r.stderr
    got = json.loads(line[7:])
    assert sorted(i for _, i in got["seen"]) == ["dawn", "wgpu-native"]
    assert got["out"] == {"wgpu-native": 55.0, "dawn": 55.0}


def test_unaliased_inputs_are_copies(monkeypatch):
    """x * x and an in-place (donated) update bind one range twice; with the copy-apart rule on (Dawn's, forced
    here on whatever adapter runs the tests) the results are the same as without it."""
    if WG is None:
        pytest.skip("no wgpu adapter")
    be = WG.impl
    monkeypatch.setattr(be, "unalias", True)
    be.forget_programs()
    x = np.linspace(-2, 3, 37, dtype=np.float32)
    t = sc.tensor(x, device=WG)
    assert np.array_equal((t * t).numpy(), x * x)
    assert any(k.startswith("copy_words") for k in be._pipelines)
    be.forget_programs()
