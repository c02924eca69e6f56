"""The `browser` device in a real JupyterLab tab: the kernel's engine trains the quickstart's digits spec on the
page's WebGPU (Chromium's SwiftShader adapter here), through the GpuDevice widget's comm. `%scellis device browser`
waits for the page on the cell's own thread (the replies go to a kernel subshell), the run trains in the
background, and its test accuracy is checked against the same spec on the reference path in the same kernel."""
import json
import re

import nbformat
import pytest

from conftest import CHROMIUM
from test_lab import _lab_page, _open, _wait

pytestmark = pytest.mark.slow
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
WEBGPU_ARGS = ["--no-sandbox", "--enable-unsafe-webgpu", "--enable-features=Vulkan", "--disable-dev-shm-usage",
               "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
               "--no-first-run"]
STEPS = 60

COMPARE = f'''import json
from scellis_jupyter.run.run import Run
ref = Run(digits.spec, device="reference", steps={STEPS}, store=None)
ref_losses = [float(s.loss) for s in ref]
rec = digits.run
got = rec.result
print("RESULT " + json.dumps({{"device": rec.device_label, "state": rec.state,
      "acc": got["metrics"].get("test_accuracy"), "ref_acc": ref.result()["metrics"].get("test_accuracy"),
      "steps": got["steps"], "ref_last": ref_losses[-1]}}))'''


def _notebook(nb_dir):
    src = nbformat.read(ROOT / "notebooks/quickstart.ipynb", 4)
    cells = [c.source for c in src.cells]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(s) for s in
                ("%load_ext scellis_jupyter\nimport scellis_jupyter as sc", cells[2], cells[3],
                 "%scellis device browser", f"%scellis train digits --steps {STEPS} --checkpoint-every 30",
                 "%scellis wait digits", COMPARE)]
    path = nb_dir / "browser_device.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def webgpu_chromium():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=WEBGPU_ARGS, headless=True)
        yield b
        b.close()


def test_digits_trains_on_the_tab_gpu(lab, webgpu_chromium, artifacts, run_cell):
    url, nb_dir = lab
    path = _notebook(nb_dir)
    with _lab_page(webgpu_chromium, artifacts, "browser-device-failure.png", 2400) as (page, errors):
        _open(page, url, path.name)
        cells = page.locator(".jp-Notebook .jp-Cell")
        _wait(lambda: cells.count() >= 7, 60, what="the notebook's cells")
        for i in range(4):
            run_cell(page, i, timeout=120)
        dev_text = cells.nth(3).locator(".jp-OutputArea").inner_text()
        assert "browser" in dev_text and "swiftshader" in dev_text, dev_text
        run_cell(page, 4, timeout=120)
        # the curve grows while the run trains on the page
        pts = lambda: int(page.locator("[data-points]").first.get_attribute("data-points") or 0)
        _wait(lambda: pts() >= 5, 120, what="the loss curve to grow")
        run_cell(page, 5, timeout=300)
        run_cell(page, 6, timeout=180)
        out = cells.nth(6).locator(".jp-OutputArea").inner_text()
        m = re.search(r"RESULT (\{.*\})", out)
        assert m, out
        r = json.loads(m.group(1))
        assert r["state"] == "finished" and r["steps"] == STEPS and "browser" in r["device"], r
        assert r["acc"] == pytest.approx(r["ref_acc"], abs=0.02), r
        assert not errors, errors
