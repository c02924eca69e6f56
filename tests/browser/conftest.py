"""JupyterLab on 127.0.0.1 with every state folder temporary (and the news check off), and Debian's Chromium
driven by Playwright for Python. Screenshots go to tests/browser/artifacts/ (gitignored)."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
LABEXTENSIONS = ROOT / "scellis_jupyter" / "labextensions"
CHROMIUM = os.environ.get("SCELLIS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"]
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyter-widgets/jupyterlab-manager/plugin.jupyterlab-settings": {"saveState": True},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base URL, notebook folder): a JupyterLab server whose kernels import this checkout, and whose front end
    loads this checkout's lab extension (scellis_jupyter/labextensions/, built by the install) before any
    installed copy."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: the README's test command installs Debian's chromium")
    base = tmp_path_factory.mktemp("lab")
    nb_dir = base / "notebooks"
    nb_dir.mkdir()
    env = dict(os.environ)
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                     ("IPYTHONDIR", "ipython"), ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")):
        (base / sub).mkdir()
        env[var] = str(base / sub)
    for rel, value in SETTINGS.items():
        p = base / "settings" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(value))
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SCELLIS_DEVICE"] = "reference"
    env.setdefault("XDG_RUNTIME_DIR", str(base / "runtime"))
    port = _free_port()
    log = open(base / "lab.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}",
                             "--ip=127.0.0.1", "--IdentityProvider.token=", "--ServerApp.password=",
                             "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={nb_dir}",
                             "--LabApp.news_url=", "--ServerApp.open_browser=False",
                             f"--LabApp.extra_labextensions_path={LABEXTENSIONS}"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=nb_dir)
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=2)
            break
        except Exception:
            if proc.poll() is not None or time.time() - t0 > 90:
                proc.kill()
                raise RuntimeError("JupyterLab did not start:\n" + (base / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
    yield url, nb_dir
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
    shutil.copy(base / "lab.log", ARTIFACTS / "lab.log") if ARTIFACTS.exists() else None


@pytest.fixture(scope="module")
def chromium_browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def run_cell(page, i: int, wait: bool = True, timeout: float = 180):
    """Run cell `i` (Shift+Enter on it) and, with `wait`, until its prompt says `[n]:`; returns its locator.

    A Shift+Enter sent while the kernel is still starting can be lost: each try waits 20 s for the prompt to
    turn `[*]:` or `[n]:`, and the keypress is sent again (three tries) if it did not. JupyterLab sometimes asks
    "Select Kernel" for a notebook whose session is not up yet: the notebook's own kernel is accepted."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(i)
    prompt = cell.locator(".jp-InputArea-prompt")
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")

    def accept_kernel_dialog() -> None:
        if dialog.count():
            dialog.locator("button", has_text="Select").first.click()
            dialog.wait_for(state="detached", timeout=10_000)

    def until(pattern: str, seconds: float, what: str) -> None:
        t0 = time.time()
        while time.time() - t0 < seconds:
            if re.match(pattern, prompt.inner_text().strip()):
                return
            accept_kernel_dialog()
            time.sleep(0.2)
        raise AssertionError(f"timed out after {seconds}s waiting for {what}")
    for attempt in range(3):
        accept_kernel_dialog()
        prompt.click()
        page.keyboard.press("Shift+Enter")
        try:
            until(r"\[[\d*]+\]", 20, f"cell {i} to start")
            break
        except AssertionError:
            if attempt == 2:
                raise
    if wait:
        until(r"\[\d+\]", timeout, f"cell {i} to run")
    return cell


@pytest.fixture(name="run_cell")
def run_cell_fixture():
    """The one "run a cell, retrying a lost Shift+Enter" helper both browser tests use."""
    return run_cell
