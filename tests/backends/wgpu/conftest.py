"""Fixtures the wgpu kernel tests share: the subgroup / fallback switch, the Philox multiply switch and the
one-read (ROW_REG) switch.

Most test modules take `WG` and the skip mark `needs_wgpu` from fixtures.devices (a few call sc.device("wgpu")
themselves); sc.device caches, so these fixtures see the same device (and the module's skip mark runs before
them when there is no adapter).
"""
import pytest

import scellis_jupyter as sc


@pytest.fixture(params=[True, False], ids=["subgroups", "fallback"])
def path(request: pytest.FixtureRequest):
    """Run the test on the kernels' subgroup path and again on the fallback; yields whether subgroups are on.

    An adapter without the `subgroup` feature skips the subgroup half; subgroups are switched back on after."""
    be = sc.device("wgpu").impl
    if request.param and "subgroup" not in be.features:
        pytest.skip("this adapter does not grant `subgroup`")
    be.use_subgroups(request.param)
    yield request.param
    be.use_subgroups(True)


@pytest.fixture(params=[True, False], ids=["int64", "mul32"])
def mul64(request: pytest.FixtureRequest):
    """Run the test with the Philox draws' 64-bit multiplies (`shader-int64`) and again with the 32-bit
    emulation (kernels/common.wgsl ph_mulhilo); yields which, and asserts every drawing pipeline built was
    that one. An adapter without `shader-int64` skips the first half; the device's default comes back after."""
    be = sc.device("wgpu").impl
    if request.param and "shader-int64" not in be.features:
        pytest.skip("this adapter does not grant `shader-int64`")
    before = set(be._pipelines)
    be.use_int64(request.param)
    yield request.param
    drawing = [k for k in set(be._pipelines) - before if k.startswith("philox") or ":drop=True" in k]
    assert all(f":i64={request.param}" in k for k in drawing), drawing
    be.use_int64(True)


@pytest.fixture
def row_reg_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-read path is off by default (SCELLIS_ROW_REG, softmax.row_reg); its tests switch it on
    (`pytest.mark.usefixtures("row_reg_on")`)."""
    monkeypatch.setenv("SCELLIS_ROW_REG", "on")


# ---- adapters without `shader-f16` (SwiftShader under Dawn): f16 halves of tests skip, loudly ------------------
_NO_F16 = ("f16 needs the adapter feature 'shader-f16'", "extension 'f16' is not allowed")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that stopped because this adapter has no f16 (an f16 tensor refused, or `enable f16;` refused by the
    compiler) is reported skipped with that reason, only when the adapter really lacks `shader-f16`: the same tests
    run their f16 halves on adapters that have it (llvmpipe, GPUs)."""
    outcome = yield
    rep = outcome.get_result()
    if call.excinfo is None or rep.when != "call" or not rep.failed:
        return
    from fixtures.devices import WG
    if WG is None or "shader-f16" in WG.impl.features:
        return
    text = str(call.excinfo.value)
    if any(s in text for s in _NO_F16):
        rep.outcome = "skipped"
        rep.longrepr = (str(item.path), item.location[1] or 0, "Skipped: this adapter lacks shader-f16")
