"""JupyterLab on 127.0.0.1 with every state folder temporary (and the news check off), and Debian's Chromium
driven by Playwright for Python. Screenshots go to tests/browser/artifacts/ (gitignored)."""
import re
import shutil
import time
from pathlib import Path

import pytest

from fixtures.lab import CHROMIUM, lab_server

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"]


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
    with lab_server(base) as got:
        yield got
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
