"""Hatch build hook: bundle the widgets' JavaScript (js/) into scellis_jupyter/static/ at install time.

Why at install time: the bundles are build outputs (never committed); `pip install .` and `pip install -e .`
both run this hook, so a fresh checkout with node and npm gets working widgets. It installs the JS
dependencies from package-lock.json (`npm ci`, or `npm install` without a lock) unless node_modules is
already current, then runs esbuild (js/build.mjs). Bundles newer than every source are reused.
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
WIDGETS = ("plan_view", "loss_curve", "run_panel", "graph_view", "catalog_browser", "lr_finder_view", "heatmap_view",
           "round_monitor", "profile_view")


def _sources() -> list[Path]:
    return [p for p in [JS / "package.json", JS / "package-lock.json", JS / "build.mjs", *(JS / "src").rglob("*")]
            if p.is_file()]


def _outputs() -> list[Path]:
    return [STATIC / f"{w}.js" for w in WIDGETS] + [STATIC / "elk-worker.min.js"]


def bundles_current() -> bool:
    outs = _outputs()
    if not all(p.exists() for p in outs):
        return False
    return min(p.stat().st_mtime for p in outs) >= max(p.stat().st_mtime for p in _sources())


def _run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, cwd=JS, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"scellis-jupyter build: `{' '.join(cmd)}` failed in js/ (exit {r.returncode}):\n"
                           f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}")


def build_js() -> None:
    if bundles_current():
        return
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        raise RuntimeError(
            "scellis-jupyter build: the Jupyter widgets are bundled from js/ at install time and need Node.js "
            "and npm, which were not found on PATH. Install them (Debian: `apt-get install -y nodejs npm`) "
            "and run the install again.")
    lock, marker = JS / "package-lock.json", JS / "node_modules" / ".package-lock.json"
    if not (marker.exists() and lock.exists() and marker.stat().st_mtime >= lock.stat().st_mtime):
        _run([npm, "ci", "--no-audit", "--no-fund"] if lock.exists() else [npm, "install", "--no-audit", "--no-fund"])
    _run([node, "build.mjs", str(STATIC)])


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name not in ("wheel", "editable") and os.environ.get("SCELLIS_JS_IN_SDIST") is None:
            return                      # an sdist ships js/ sources; its wheel build bundles them
        build_js()
        # static/ is gitignored (a build output), so it must be named to land in the wheel
        build_data.setdefault("artifacts", []).append("scellis_jupyter/static/*")
