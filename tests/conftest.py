import os

import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
os.environ.setdefault("SCELLIS_DEVICE", "reference")
# signing keys and ledger pins go to a key store of this session, never the user's ~/.config/scellis/keys
os.environ.setdefault("SCELLIS_KEY_DIR", __import__("tempfile").mkdtemp(prefix="scellis-keys-"))

# ---- wgpu tests without an adapter: loud locally, a failure in CI ------------------------------------------
# Tests of the wgpu backend skip when this machine has no adapter, with a reason starting "no wgpu"
# (fixtures.devices.needs_wgpu: `skipif(WG is None and not CI, reason="no wgpu adapter")`, or
# `pytest.skip(f"no wgpu device: {e}")`).
# Locally that must not pass unnoticed, so the session summary says how many did not run; with CI set, a
# missing adapter is a failure, whichever way the test skipped.
_NO_WGPU = ("no wgpu adapter", "no wgpu device")
_wgpu_skipped: list[str] = []


def _skip_reason(report) -> str:
    lr = report.longrepr
    return str(lr[2]) if isinstance(lr, tuple) and len(lr) == 3 else str(lr or "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or not any(r in _skip_reason(report) for r in _NO_WGPU):
        return
    if os.environ.get("CI"):
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid}: {_skip_reason(report)} - with CI set, a missing wgpu adapter is a "
                           "failure (install Mesa's llvmpipe: the README's test command does)")
    elif report.when in ("setup", "call"):
        _wgpu_skipped.append(item.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _wgpu_skipped:
        return
    tr = terminalreporter
    tr.section("wgpu NOT TESTED", sep="!", red=True, bold=True)
    tr.write_line(f"{len(_wgpu_skipped)} wgpu test(s) were SKIPPED: this machine has no wgpu adapter, so the "
                  "wgpu backend was not exercised.", red=True, bold=True)
    tr.write_line("Install a Vulkan driver (Mesa's llvmpipe: apt-get install mesa-vulkan-drivers libvulkan1) or "
                  "set CI=1 to make a missing adapter fail. First skipped:", red=True)
    for nodeid in _wgpu_skipped[:5]:
        tr.write_line(f"  {nodeid}")


@pytest.fixture
def ref():
    """The numpy reference device (supports f64, which the PyTorch comparisons use)."""
    import scellis_jupyter as sc
    return sc.device("reference")


@pytest.fixture
def run_python():
    """Run `python -c code` (or `python -m mod args` with module=...) in a fresh process; for process-global state.

    Returns the CompletedProcess (text); env entries given as keyword arguments override os.environ,
    a value of None removes the variable.
    """
    import subprocess
    import sys

    def run(code: str | None = None, *args: str, module: str | None = None, **env):
        e = dict(os.environ)
        for k, v in env.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = str(v)
        argv = [sys.executable] + (["-m", module] if module else ["-c", code]) + list(args)
        return subprocess.run(argv, capture_output=True, text=True, env=e, timeout=300)
    return run


@pytest.fixture
def clean_registry():
    """Whatever a test registers in the catalog is forgotten afterwards."""
    from scellis_jupyter.catalog import registry
    saved = {k: dict(v) for k, v in registry._REG.items()}
    yield
    for k, v in saved.items():
        registry._REG[k].clear()
        registry._REG[k].update(v)


# ---- the kernel modules on Dawn (tests/fixtures/dawn.py): started when collection ends, awaited at the end ----
_BACKGROUND = "tests/backends/test_dawn.py::test_kernel_module_passes_"
_ON_DAWN, _ON_LLVMPIPE = "on_dawn", "in_the_background_on_llvmpipe"      # test_dawn.py's two report tests


def _background(items, kind: str) -> set:
    return {it.callspec.params["module"] for it in items
            if it.nodeid.startswith(_BACKGROUND + kind) and hasattr(it, "callspec")}


def pytest_collection_modifyitems(session, config, items):
    """The background results are awaited last, so the modules have run beside the rest of the suite by then; a
    module that runs on wgpu-native in the background (fixtures.dawn.BACKGROUND_NATIVE) leaves the session."""
    moved = _background(items, _ON_LLVMPIPE)
    if moved:
        gone = [it for it in items if it.nodeid.startswith("tests/backends/wgpu/")
                and it.nodeid.split("::")[0].rsplit("/", 1)[-1] in moved]
        if gone:
            config.hook.pytest_deselected(items=gone)
            items[:] = [it for it in items if it not in gone]
    dawn = [it for it in items if it.nodeid.startswith("tests/backends/test_dawn.py")]
    if dawn and len(dawn) < len(items):
        items[:] = [it for it in items if it not in dawn] + dawn


def pytest_collection_finish(session):
    wanted, native = _background(session.items, _ON_DAWN), _background(session.items, _ON_LLVMPIPE)
    if not wanted and not native:
        return
    from fixtures import dawn
    dawn.start([m for m in dawn.dawn_modules() if m in wanted] if dawn.available() else [],
               [m for m in dawn.BACKGROUND_NATIVE if m in native])
