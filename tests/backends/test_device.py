"""Device selection: the reference device's fields, a declared memory size, unknown names refused."""
import json

import pytest

import scellis_jupyter as sc
from scellis_jupyter.errors import DeviceError

SHOW = "import json, scellis_jupyter as sc\nprint(json.dumps(sc.device().to_json(), default=str))"


def test_reference_fields(ref):
    assert ref.backend == "reference" and ref.name == "numpy" and ref.adapter_type == "reference"
    assert not ref.is_gpu
    assert ref.memory_bytes > 0 and ref.memory_source in ("system-ram", "declared")
    assert "reference" in ref.choice and "not a GPU" in ref.choice
    assert set(ref.to_json()) == {"backend", "name", "adapter_type", "memory_bytes", "memory_source", "limits",
                                  "features", "choice"}
    json.dumps(ref.to_json())
    assert sc.device("reference") is ref                    # one device object per name


def test_reference_is_always_listed_last():
    all_ = sc.devices()
    assert all_[-1].backend == "reference"
    assert all(d.backend == "wgpu" for d in all_[:-1])


def test_declared_memory(run_python):
    r = run_python(SHOW, SCELLIS_DEVICE="reference", SCELLIS_DEVICE_MEMORY="123456789")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["memory_bytes"], d["memory_source"]) == (123456789, "declared")
    r = run_python(SHOW, SCELLIS_DEVICE="reference", SCELLIS_DEVICE_MEMORY="8e9")
    assert json.loads(r.stdout)["memory_bytes"] == 8_000_000_000


def test_declared_memory_must_be_a_number(run_python):
    r = run_python(SHOW, SCELLIS_DEVICE="reference", SCELLIS_DEVICE_MEMORY="lots")
    assert r.returncode != 0 and "error[setting] at environment" in r.stderr and "SCELLIS_DEVICE_MEMORY" in r.stderr


def test_reference_announced_as_not_a_gpu(run_python):
    r = run_python(SHOW, SCELLIS_DEVICE="reference", SCELLIS_DEVICE_MEMORY=None)
    assert r.returncode == 0 and "NOT a GPU" in r.stderr
    assert json.loads(r.stdout)["memory_source"] == "system-ram"


def test_unknown_name():
    with pytest.raises(DeviceError) as e:
        sc.device("wgpux")
    msg = str(e.value)
    assert e.value.diagnostic.code == "device" and "'wgpux'" in msg and "available:" in msg and "reference" in msg


def test_unknown_name_without_wgpu(run_python):
    r = run_python("import scellis_jupyter as sc\ntry:\n    sc.device('wgpu')\nexcept sc.ScellisError as e:\n"
                   "    print(e)", SCELLIS_NO_WGPU="1", SCELLIS_DEVICE=None)
    assert r.returncode == 0, r.stderr
    assert "no device matches 'wgpu'" in r.stdout and "mesa-vulkan-drivers" in r.stdout


def test_no_wgpu_falls_back_loudly_to_reference(run_python):
    r = run_python(SHOW, SCELLIS_NO_WGPU="1", SCELLIS_DEVICE=None)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["backend"] == "reference" and "no GPU adapter found" in d["choice"]
    assert "NOT a GPU (no GPU adapter found)" in r.stderr


def test_importing_and_picking_a_device_prints_no_mesa_xdg_warning():
    """A notebook kernel or a script (not only the CLI) gets a private XDG_RUNTIME_DIR before the first
    adapter enumeration, so Mesa's 'XDG_RUNTIME_DIR is invalid or not set' never reaches the user."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    r = subprocess.run([sys.executable, "-c", "import scellis_jupyter as sc; print(sc.devices()[0].backend)"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "XDG_RUNTIME_DIR" not in r.stderr, r.stderr
