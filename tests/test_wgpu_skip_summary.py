"""A machine without a wgpu adapter must not pass the wgpu tests unnoticed (tests/conftest.py hooks): the
session summary says loudly how many skipped; with CI set, each such skip is a failure."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

SKIPS = '''
import os, pytest
WG = None                                                # as on a machine without an adapter
@pytest.mark.skipif(WG is None and not os.environ.get("CI"), reason="no wgpu adapter")
def test_marked():
    assert WG is not None
def test_inline():
    pytest.skip("no wgpu device: no adapter found")
def test_other_skip():
    pytest.skip("needs something else")
'''


def _pytest(tmp_path, **env):
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skips.py").write_text(SKIPS)
    e = {k: v for k, v in os.environ.items() if k != "CI"}
    e.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, env=e, cwd=tmp_path, timeout=120)


def test_without_ci_the_summary_says_wgpu_was_not_tested(tmp_path):
    r = _pytest(tmp_path)
    assert r.returncode == 0, r.stdout
    assert "wgpu NOT TESTED" in r.stdout and "2 wgpu test(s) were SKIPPED" in r.stdout
    assert "test_skips.py::test_marked" in r.stdout and "test_skips.py::test_other_skip" not in r.stdout


def test_with_ci_a_missing_adapter_fails(tmp_path):
    r = _pytest(tmp_path, CI="1")
    assert r.returncode == 1 and "2 failed" in r.stdout and "1 skipped" in r.stdout, r.stdout
    assert "wgpu NOT TESTED" not in r.stdout
