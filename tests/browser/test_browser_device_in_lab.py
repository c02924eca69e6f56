"""The `browser` device in a real JupyterLab tab: the kernel's engine trains the quickstart's digits spec on the
page's WebGPU (Chromium's SwiftShader adapter here), through the GpuDevice widget's comm. `%scellis device browser`
waits for the page on the cell's own thread (the replies go to a kernel subshell); the run trains in the
background and its curve grows; a hidden tab is said in the run panel; the wake lock waits for the user's tick; a reload of the tab leaves the run
`interrupted` at its last checkpoint, never `running`; the restored run panel's one-click "Resume run" continues it
on the reloaded page, `%scellis resume` after a stop finishes it, and its test accuracy matches the same spec trained
on the reference path in the same kernel."""
import json
import re
import time
from pathlib import Path

import nbformat
import pytest

from fixtures.lab import CHROMIUM
from test_lab import _lab_page, _open, _wait

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
WEBGPU_ARGS = ["--no-sandbox", "--enable-unsafe-webgpu", "--enable-features=Vulkan", "--disable-dev-shm-usage",
               "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
               "--no-first-run"]
STEPS = 400             # long enough to be reloaded mid-run (about 5 steps/s here), short enough for an event a step
RESUME_TO = 10          # steps past the interruption's checkpoint

STATE = '''import json
r = digits.run
print("STATE " + json.dumps({"state": r.state, "step": r.run.step, "checkpoints": len(r.run.checkpoints),
                             "device": r.device_label, "error": str(r.error or "")}))'''

COMPARE = '''from scellis_jupyter.run.run import Run
from scellis_jupyter.run.lifecycle import prepare_resume
r = digits.run
ref = Run(digits.spec, device="reference", steps=r.result["steps"], store=None)
for _ in ref:
    pass
# the checkpoint the tab made before its reload, resumed on the reference path beside the tab's own continuation
first, again = digits.runs[-3], digits.runs[-2]
tab = {e["step"]: e["loss"] for e in again.events if e["kind"] == "step"}
more = prepare_resume(again.run.resumed_from, store=first.run.store, device="reference",
                      steps=min(tab) + 4)
cont = {s.step: float(s.loss) for s in more}
print("RESULT " + json.dumps({"state": r.state, "device": r.device_label, "steps": r.result["steps"],
      "acc": r.result["metrics"].get("test_accuracy"), "ref_acc": ref.result()["metrics"].get("test_accuracy"),
      "resumed_from_tab": again.run.resumed_from == first.run.checkpoints[-1], "ref_device": str(more.device),
      "continued": sorted(k for k in cont if k in tab), "max_diff": max(abs(cont[k] - tab[k]) for k in cont if k in tab)}))'''


def _notebook(nb_dir):
    src = nbformat.read(ROOT / "notebooks/quickstart.ipynb", 4)
    cells = [c.source for c in src.cells]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(s) for s in
                ("%load_ext scellis_jupyter\nimport scellis_jupyter as sc", cells[2], cells[3],
                 "%scellis device browser", "%scellis plan digits", f"%scellis train digits --steps {STEPS} --checkpoint-every 5",
                 STATE, "RESUME", "%scellis wait digits", COMPARE)]
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


def _printed(cell, tag):
    out = cell.locator(".jp-OutputArea").inner_text()
    m = re.search(tag + r" (\{.*\})", out)
    assert m, out
    return json.loads(m.group(1))


def test_digits_trains_on_the_tab_gpu_survives_a_reload(lab, webgpu_chromium, artifacts, run_cell):
    url, nb_dir = lab
    path = _notebook(nb_dir)
    with _lab_page(webgpu_chromium, artifacts, "browser-device-failure.png", 2400) as (page, errors):
        _open(page, url, path.name)
        cells = page.locator(".jp-Notebook .jp-Cell")
        _wait(lambda: cells.count() >= 10, 60, what="the notebook's cells")
        for i in range(4):
            run_cell(page, i, timeout=120)
        dev_text = cells.nth(3).locator(".jp-OutputArea").inner_text()
        assert "browser" in dev_text and "swiftshader" in dev_text, dev_text
        run_cell(page, 4, timeout=120)                   # the plan names the page's adapter and what a step sends
        plan_text = cells.nth(4).locator(".jp-OutputArea").inner_text()
        assert "browser google swiftshader" in plan_text and "each step sends" in plan_text, plan_text
        run_cell(page, 5, timeout=120)
        # the curve grows while the run trains on the page
        pts = lambda: int(page.locator("[data-points]").first.get_attribute("data-points") or 0)
        _wait(lambda: pts() >= 10, 120, what="the loss curve to grow")
        # the screen's wake lock is the user's call: the run panel says what a sleeping screen does until the box
        # on the GPU widget is ticked, then the page asks the browser for it (held, or the browser's refusal said)
        note = page.locator(".sc-run .sc-devnote").first
        _wait(lambda: "keep the screen awake" in note.inner_text(), 30, what="the run panel's wake-lock hint")
        cells.nth(3).locator("[data-role=keep-awake]").check()
        _wait(lambda: "tick" not in note.inner_text(), 30, what="the wake-lock hint to go once ticked")
        wake = cells.nth(3).locator(".sc-gpu-wake").get_attribute("data-wake")
        assert wake == "held" or "could not keep the screen awake" in note.inner_text(), (wake, note.inner_text())
        cells.nth(3).screenshot(path=str(artifacts / "browser-device-widget.png"))
        # a hidden tab is throttled: the run panel says so
        page.evaluate("() => { Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});"
                      " document.dispatchEvent(new Event('visibilitychange')); }")
        _wait(lambda: "tab is hidden" in note.inner_text(), 30, what="the run panel to say the tab is hidden")
        # saved first, as autosave would have (an unsaved tab reloads without its outputs, the panel among them)
        page.keyboard.press("Escape")
        page.keyboard.press("Control+s")
        _wait(lambda: "application/vnd.jupyter.widget-view+json" in path.read_text(), 20,
              what="the notebook to be saved with its widgets")
        page.reload()
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        # the kernel learns the page is gone when the reloaded page's widget says hello (seconds under load): the
        # state cell is run again, as a user would, until the run no longer says running
        seen = []

        def stopped_running() -> bool:
            run_cell(page, 6, timeout=60)
            seen.append(_printed(cells.nth(6), "STATE"))
            return seen[-1]["state"] != "running"
        _wait(stopped_running, 60, every=1.0, what="the run to stop saying running after the reload")
        s = seen[-1]
        assert s["state"] == "interrupted" and s["checkpoints"] >= 2 and "browser" in s["device"], s
        assert "device-gone" in s["error"], s
        # one click: the restored run panel's "Resume run" continues it from its last checkpoint on the reloaded
        # page's GPU; then its Stop leaves it interrupted again at a checkpoint
        panel = cells.nth(5).locator(".sc-run").first
        _wait(lambda: panel.locator("[data-action=resume_run]").is_visible(), 60, what="the restored panel's Resume run")
        panel.locator("[data-action=resume_run]").click()
        host = panel.locator("xpath=..")                  # the widget's element carries its state and step
        before = s
        _wait(lambda: host.get_attribute("data-state") == "running"
              and int(host.get_attribute("data-step") or 0) > (s["step"] // 5) * 5 + 6, 120,
              what="the resumed run to step on the reloaded page")
        assert "browser" in panel.locator(".sc-device").inner_text()
        panel.screenshot(path=str(artifacts / "browser-device-resumed.png"))
        panel.locator("[data-action=stop]").click()
        _wait(lambda: host.get_attribute("data-state") == "interrupted", 60, what="the resumed run to stop")
        run_cell(page, 6, timeout=60)
        s = _printed(cells.nth(6), "STATE")
        assert s["state"] == "interrupted" and "browser" in s["device"] and s["step"] > before["step"], s
        assert s["checkpoints"] >= 1 and not s["error"], s
        # and the typed resume finishes it a few steps on
        cells.nth(7).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+a")
        page.keyboard.type(f"%scellis resume digits --steps {(s['step'] // 5) * 5 + RESUME_TO}")
        run_cell(page, 7, timeout=120)
        run_cell(page, 8, timeout=300)
        run_cell(page, 9, timeout=180)
        r = _printed(cells.nth(9), "RESULT")
        assert r["state"] == "finished" and "browser" in r["device"], r
        assert r["acc"] == pytest.approx(r["ref_acc"], abs=0.03), r
        # the tab's checkpoint resumed on the reference path: the same steps' losses as the tab's own continuation
        assert r["resumed_from_tab"] and "reference" in r["ref_device"] and len(r["continued"]) == 5, r
        assert r["max_diff"] < 1e-3, r
