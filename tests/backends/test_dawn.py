"""The kernels on the second WebGPU implementation: Dawn (Chrome's WebGPU, shader compiler Tint) over the SwiftShader
Vulkan driver that Debian's `chromium` ships (the README's test command installs it).

Every kernel family's test module under tests/backends/wgpu runs again, all in one process, with SCELLIS_WEBGPU=dawn
and SwiftShader as the only Vulkan driver, so each WGSL kernel is compiled by Tint and checked against the numpy
reference there, as it is on wgpu-native over llvmpipe in the main run (tests/fixtures/dawn.py runs them beside the
rest of the suite; these tests, last in the session, report each module). A whole training run (the quickstart)
trains, checkpoints and reports on Dawn. SwiftShader has no `shader-f16`: the f16 halves of those modules skip
there (tests/backends/wgpu/conftest.py says so per test) and run on llvmpipe. Modules that test wgpu-native's own
paths or no kernel stay on wgpu-native (fixtures.dawn.NATIVE_ONLY). In a full run a few of the slowest llvmpipe
modules run on wgpu-native in the same background stream (fixtures.dawn.BACKGROUND_NATIVE), reported here too.
"""
import os
import subprocess
import sys

import pytest

from fixtures import dawn

pytestmark = pytest.mark.slow
needs_dawn = pytest.mark.skipif(not dawn.available() and not os.environ.get("CI"),
                                reason="no SwiftShader ICD (Debian's chromium ships it): Dawn has no adapter here")


@needs_dawn
def test_every_kernel_module_is_either_run_on_dawn_or_named_native_only():
    mods = dawn.kernel_modules()
    assert dawn.NATIVE_ONLY <= set(mods), dawn.NATIVE_ONLY - set(mods)
    assert sorted(dawn.dawn_modules()) == sorted(set(mods) - dawn.NATIVE_ONLY)
    assert len(dawn.dawn_modules()) >= 35


@needs_dawn
@pytest.mark.parametrize("module", dawn.dawn_modules())
def test_kernel_module_passes_on_dawn(module):
    _passed(module, "dawn", "on Dawn (SwiftShader)")


@pytest.mark.parametrize("module", dawn.BACKGROUND_NATIVE)
def test_kernel_module_passes_in_the_background_on_llvmpipe(module):
    _passed(module, "native", f"on wgpu-native (llvmpipe) {dawn.BACKGROUND_NATIVE[module] or ''}")


def _passed(module: str, impl: str, where: str) -> None:
    run = dawn.runner() or dawn.start([module] if impl == "dawn" else [], [module] if impl == "native" else [])
    rc, out, secs = run.wait(module, timeout=dawn.GROUP_TIMEOUT_S * 2, impl=impl)
    assert rc == 0, f"{module} {where} (its group took {secs:.0f} s):\n{out[-12000:]}"


@needs_dawn
def test_the_quickstart_trains_on_dawn(tmp_path):
    """A whole run on Dawn: plan, train, evaluate, checkpoint; the plan's peak is the measured one."""
    r = subprocess.run([sys.executable, "-m", "scellis_jupyter.quickstart", "--store", str(tmp_path / "st"),
                        "--epochs", "3"], cwd=tmp_path, env=dawn.env(SCELLIS_DEVICE="wgpu"), capture_output=True,
                       text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "SwiftShader" in out and "via dawn" in out, out[-4000:]
    line = next(ln for ln in out.splitlines() if ln.startswith("finished"))
    acc = float(line.split("test accuracy")[1].split(",")[0])
    assert acc > 0.8, line
    mem = next(ln for ln in out.splitlines() if ln.startswith("memory:"))
    measured, planned = (int(w) for w in mem.replace(",", " ").split() if w.isdigit())
    assert measured == planned, mem
