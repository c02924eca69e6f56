"""The install-time bundling (hatch_build.py): a clear error without npm, and a wheel built from a fresh
checkout (no node_modules, no static/) that carries the widgets' bundles."""
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hook():
    spec = importlib.util.spec_from_file_location("scellis_hatch_build", ROOT / "hatch_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_npm_is_a_clear_error(monkeypatch):
    hb = _hook()
    monkeypatch.setattr(hb, "bundles_current", lambda: False)
    monkeypatch.setattr(hb.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"need Node.js and npm, which were not found on PATH"):
        hb.build_js()


def test_bundles_are_current_after_the_install():
    assert _hook().bundles_current(), "scellis_jupyter/static/ is older than js/: reinstall (pip install -e .)"


@pytest.mark.slow
def test_fresh_checkout_builds_a_wheel_with_the_bundles(tmp_path):
    if shutil.which("npm") is None:
        pytest.fail("npm is needed to build the package")
    src = tmp_path / "src"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(src)], check=True, timeout=120)
    assert not (src / "scellis_jupyter" / "static").exists() and not (src / "js" / "node_modules").exists()
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "w"), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    whl, = (tmp_path / "w").glob("*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    for w in ("plan_view", "loss_curve", "run_panel", "graph_view", "catalog_browser", "lr_finder_view", "heatmap_view"):
        assert f"scellis_jupyter/static/{w}.js" in names
    assert "scellis_jupyter/static/elk-worker.min.js" in names
    assert not any("node_modules" in n for n in names)
