"""The widgets in a real JupyterLab, in Debian's Chromium: run every cell, then check the plan's verdict, the
curve growing while a real run trains, the stop button stopping it, a fix changing the plan and the cell's
text, resume and the finished-run notification, saved widget state after a reload, light and dark themes,
a narrow notebook, and the static form from a file:// page with no network."""
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

import lab_notebook as notebook

pytestmark = pytest.mark.slow


def _wait(pred, timeout=60.0, every=0.2, what="condition"):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _saved(path: Path) -> dict:
    """The notebook as saved, or {} while JupyterLab is still writing it (the file is rewritten on save, so a
    read can find it empty or cut short)."""
    try:
        return json.loads(path.read_text())
    except (ValueError, OSError):
        return {}


def _widget_state(path: Path) -> dict:
    """The widget states saved in the notebook at `path` ({} while none is, or while it is being written)."""
    st = _saved(path).get("metadata", {}).get("widgets", {})
    return st.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})


def _open(page, url, name):
    page.goto(f"{url}/lab/tree/{name}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # the first Shift+Enter can be lost before the kernel is ready: wait for the status bar to say Idle
    page.wait_for_function("() => /Idle/.test(document.querySelector('.jp-StatusBar-Component, #jp-main-statusbar')"
                           "?.textContent || '') || document.querySelector('[data-status=\"idle\"]')", timeout=60_000)


def _run_all(page, n, run_cell):
    cells = page.locator(".jp-Notebook .jp-Cell")
    _wait(lambda: cells.count() >= n, 60, what=f"{n} cells to render")      # they attach progressively
    for i in range(n):
        run_cell(page, i, timeout=120)


def _attr(page, sel, name):
    return page.locator(sel).first.get_attribute(f"data-{name}")


def _theme(page, dark: bool):
    page.click("text=Settings >> nth=0")
    page.hover("text=Theme")
    page.click(f"text={'JupyterLab Dark' if dark else 'JupyterLab Light'}")
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{'false' if dark else 'true'}'",
                           timeout=20_000)
    time.sleep(0.8)


@contextmanager
def _lab_page(browser, artifacts: Path, failure: str, height: int) -> Iterator[tuple[object, list[str]]]:
    """(page, its JavaScript errors so far) in a fresh 1280 px wide context; a failing test leaves a screenshot
    of the page in artifacts/`failure`, and the context is closed either way."""
    ctx = browser.new_context(viewport={"width": 1280, "height": height})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield page, errors
    except BaseException:
        page.screenshot(path=str(artifacts / failure))
        raise
    finally:
        ctx.close()


def _dark_and_narrow(page, box, artifacts: Path, name: str) -> None:
    """A widget follows the dark theme (its text colour changes; artifacts/`name`-dark.png) and, with the file
    browser closed and the window 420 px wide, its box stays within its output area. Leaves the page light and
    narrow."""
    light = box.evaluate("e => getComputedStyle(e).color")
    _theme(page, dark=True)
    dark = box.evaluate("e => getComputedStyle(e).color")
    assert light != dark, "the view did not follow the dark theme"
    box.screenshot(path=str(artifacts / f"{name}-dark.png"))
    _theme(page, dark=False)
    page.keyboard.press("Escape")
    page.keyboard.press("Control+b")                 # the file browser away: the notebook gets the width
    page.set_viewport_size({"width": 420, "height": page.viewport_size["height"]})
    time.sleep(1.0)
    over = box.evaluate("e => e.getBoundingClientRect().right - "
                        "e.closest('.jp-OutputArea-output').getBoundingClientRect().right")
    assert over <= 2, over


def _shots(page, artifacts, tag):
    """One screenshot per widget cell's output (JupyterLab scrolls inside its own panel, so a full-page shot
    shows only the top of the notebook)."""
    outs = page.locator(".jp-Notebook .jp-Cell .jp-OutputArea")
    for i, name in ((1, "plan"), (2, "run"), (3, "others")):
        o = outs.nth(i)
        o.scroll_into_view_if_needed()
        time.sleep(0.3)
        o.screenshot(path=str(artifacts / f"lab-{tag}-{name}.png"))


def _cell_text(page, i):
    return page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".cm-content").inner_text()


def test_widgets_in_jupyterlab(lab, chromium_browser, artifacts, run_cell):
    with _lab_page(chromium_browser, artifacts, "failure.png", 2400) as (page, errors):
        _drive(lab, page, errors, artifacts, run_cell)


def _drive(lab, page, errors, artifacts, run_cell):
    url, nb_dir = lab
    notebook.write(nb_dir / "widgets.ipynb")
    page.context.grant_permissions(["notifications"], origin=url)
    _open(page, url, "widgets.ipynb")
    _run_all(page, len(nbformat.read(nb_dir / "widgets.ipynb", 4).cells), run_cell)
    plan, curve, panel = "[data-verdict]", ".sc-curve", "[data-state]"

    # the plan widget's verdict (a device of 240 kB refuses batch 64)
    page.wait_for_selector(plan, timeout=90_000)
    assert _attr(page, plan, "verdict") == "red"
    assert "Does not fit" in page.locator(".sc-plan .sc-words").inner_text()
    # every widget's static twin (the output after it, kept for kernel-free viewers) is hidden by its live view
    _wait(lambda: page.locator(".sc-w").count() >= 7, 30, what="the seven live views")
    twins = page.locator("[data-scellis-static]")
    _wait(lambda: twins.count() == 7, 30, what="seven static twins")
    assert not any(twins.nth(k).is_visible() for k in range(7))
    assert page.locator(".jp-OutputArea-child:has([data-scellis-static])").first.is_hidden()

    # the curve grows while the run trains
    page.wait_for_function("() => Number(document.querySelector('.sc-curve')?.parentElement?.dataset.points || "
                           "document.querySelector('[data-points]')?.dataset.points || 0) >= 5", timeout=60_000)
    pts = lambda: int(page.locator("[data-points]").first.get_attribute("data-points"))  # noqa: E731
    a = pts()
    time.sleep(1.5)
    b = pts()
    assert b > a, (a, b)
    assert _attr(page, panel, "state") == "running"
    # hover shows values in the legend; the log toggle redraws the loss panel on a log axis
    over = page.locator(".sc-curve .u-over").first
    over.scroll_into_view_if_needed()
    legend = page.locator(".sc-curve .u-legend").first

    def hovered():
        over.hover(position={"x": 200, "y": 60})
        over.hover(position={"x": 220, "y": 70})
        return re.search(r"loss\W*\d+\.\d+", legend.inner_text())
    try:
        _wait(hovered, 15, every=0.3, what="a hover value in the legend")
    except AssertionError:
        raise AssertionError(f"no hover value in the legend: {legend.inner_text()!r}") from None
    page.locator(".sc-curve button", has_text="log y").click()
    _wait(lambda: _attr(page, "[data-points]", "log-y") == "true", 10, what="the log scale")
    _shots(page, artifacts, "light-running")

    # the stop button stops that run: the state turns interrupted and the curve stops growing
    page.click("[data-action=stop]")
    _wait(lambda: _attr(page, panel, "state") == "interrupted", 30, what="the run to be interrupted")
    # every step the engine ran is on the curve, once (the last chunk is flushed when the run ends, and may
    # land just after the state), and then it stops growing
    try:
        _wait(lambda: pts() == int(_attr(page, panel, "step")), 10, what="the curve to hold every step once")
    except AssertionError:
        raise AssertionError(f"the curve holds {pts()} points, the panel says step {_attr(page, panel, 'step')}") from None
    stopped = pts()
    time.sleep(1.0)
    assert pts() == stopped
    assert page.locator("[data-action=stop]").first.is_disabled()
    assert "nothing to stop" in page.locator("[data-action=stop]").first.get_attribute("title")

    # a fix button changes the plan and the cell's text
    before = _cell_text(page, 1)
    assert "batch_size = 64" in before
    page.click(".sc-fix[data-fix='0']")
    _wait(lambda: _attr(page, plan, "verdict") != "red", 60, what="the plan to change")
    assert _attr(page, plan, "verdict") in ("yellow", "green")
    _wait(lambda: _attr(page, plan, "cell-write"), 30, what="the fix's reply")
    assert _attr(page, plan, "cell-write") == "cell", "the fix's cell text was not written into the cell"
    after = _cell_text(page, 1)
    assert "batch_size = 64" not in after and re.search(r"batch_size = \d+", after)

    # one-click resume of the interrupted run; it finishes, and the browser notifies
    page.click("[data-role=notify]")
    _wait(lambda: _attr(page, panel, "notify-permission") == "granted", 10, what="notification permission")
    page.click("[data-action=resume_run]")
    _wait(lambda: _attr(page, panel, "state") == "finished", 90, what="the resumed run to finish")
    _wait(lambda: _attr(page, panel, "notified") == "finished", 10, what="the notification")
    assert page.locator("[data-action=stop]").first.is_disabled()
    assert page.locator(".sc-curve .u-legend").count() >= 1
    # the ELK layout arrived from the kernel
    _wait(lambda: page.locator("[data-layout]").first.get_attribute("data-layout") == "elk", 30, what="the ELK layout")
    # a node's attr edited in the graph goes through on_edit, and the returned text lands in the cell
    page.locator(".sc-graph [data-node=linear_0]").click()
    page.locator(".sc-editor input[data-attr=out]").fill("256")
    page.locator(".sc-editor button", has_text="set").click()
    _wait(lambda: "# edited: linear_0.out = 256" in _cell_text(page, 3), 30, what="the graph edit in the cell")
    page.locator(".sc-graph [data-node=linear_0]").click()
    assert page.locator(".sc-editor input[data-attr=out]").input_value() == "256"
    # the catalog shows an entry's params with their ranges and its origin
    page.locator("[data-entry=adamw]").click()
    detail = page.locator(".sc-cat-detail").inner_text()
    assert "weight_decay" in detail and "[0, inf)" in detail and "origin:" in detail
    _shots(page, artifacts, "light")

    _theme(page, dark=True)
    _shots(page, artifacts, "dark")
    _theme(page, dark=False)

    # narrow notebook: the widgets stay within their output area
    page.keyboard.press("Escape")
    page.keyboard.press("Control+b")                 # the file browser away: the notebook gets the width
    page.set_viewport_size({"width": 520, "height": 2400})
    time.sleep(1.0)
    _shots(page, artifacts, "narrow")
    over = page.evaluate("() => [...document.querySelectorAll('.sc-w')].map(e => [e.className, e.getBoundingClientRect()"
                         ".right - e.closest('.jp-OutputArea-output').getBoundingClientRect().right])")
    assert all(d <= 2 for _, d in over), over
    page.set_viewport_size({"width": 1280, "height": 2400})

    # save (widget state included), shut the kernel down, reload: the saved state shows
    page.keyboard.press("Control+s")
    state = _wait(lambda: _widget_state(nb_dir / "widgets.ipynb"), 20, what="the notebook saved with widget state")
    assert len(state) >= 7
    assert (nb_dir / "widgets.ipynb").stat().st_size < 1_000_000
    page.click("text=Kernel >> nth=0")
    page.click("text=Shut Down Kernel")
    time.sleep(1.5)
    page.reload()
    page.wait_for_selector(plan, timeout=60_000)
    assert _attr(page, plan, "verdict") in ("yellow", "green")
    page.wait_for_selector("[data-points]", timeout=30_000)
    _wait(lambda: int(page.locator("[data-points]").first.get_attribute("data-points")) >= stopped, 20,
          what="the saved curve")
    assert _attr(page, panel, "state") == "finished"
    # the panel's saved state carries the last measured speed: no "– steps/s" after the reload
    rate = page.locator(".sc-run .sc-rate").first.inner_text()
    assert re.fullmatch(r"\d+(\.\d+)? steps/s", rate), rate
    assert page.locator(".sc-run .sc-eta").first.inner_text() == "done"
    assert not any(page.locator("[data-scellis-static]").nth(k).is_visible() for k in range(7))
    _shots(page, artifacts, "reloaded")
    assert not [e for e in errors if "scellis" in e.lower() or "sc-" in e], errors


def test_static_fallback_from_file_without_network(tmp_path, chromium_browser, artifacts):
    """The notebook executed headless and saved WITH widget state (nbconvert then renders each widget's view,
    whose manager JS comes from a CDN), converted to HTML: on a file:// page with every network request
    refused, the static twin outputs still show the plan's verdict and the final curve; the saved notebook,
    seven widgets and all, stays under 1 MB."""
    import nbclient
    from nbconvert import HTMLExporter
    nb_path = notebook.write(tmp_path / "static.ipynb")
    nb = nbformat.read(nb_path, 4)
    # the run cell: a short run that finishes inside the cell, so its output is the final state
    nb.cells[2].source = nb.cells[2].source.replace("steps=100_000", "steps=40").replace(
        'run.start()\nprint("training in the background")', "run.start().wait(120)\ncurve.flush()\nimport time; time.sleep(0.5)")
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", store_widget_state=True).execute()
    nbformat.write(nb, nb_path)
    assert nb_path.stat().st_size < 1_000_000, nb_path.stat().st_size
    assert len(nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]) >= 7
    html, _ = HTMLExporter().from_notebook_node(nb)
    assert html.count('<script type="application/vnd.jupyter.widget-view+json">') >= 7   # the views, as saved
    out = tmp_path / "static.html"
    out.write_text(html)
    ctx = chromium_browser.new_context(viewport={"width": 1100, "height": 1400}, offline=True)
    page = ctx.new_page()
    refused = []
    page.route(re.compile(r"^(?!file:).*"), lambda route: (refused.append(route.request.url), route.abort()))
    page.goto(out.as_uri())
    assert any("unpkg.com" in u or "cdn" in u for u in refused), refused   # the widget JS did not load
    verdict = page.locator(".scellis-plan .scellis-verdict").first
    assert verdict.is_visible() and "Does not fit" in verdict.inner_text()
    run = page.locator(".scellis-run").first
    assert run.is_visible() and "finished" in run.inner_text() and "step 40 / 40" in run.inner_text()
    assert re.search(r"\d+(\.\d+)? steps/s, done", run.inner_text()), run.inner_text()
    curve = page.locator(".scellis-curve").first
    assert curve.locator("polyline").count() >= 2 and "40 steps" in curve.inner_text()
    svg = curve.locator("svg").first
    assert svg.is_visible()
    box = svg.bounding_box()
    assert box and box["width"] > 200 and box["height"] > 50
    assert page.locator(".scellis-graph svg rect").count() == 5 and page.locator(".scellis-heatmap td").count() == 6
    assert page.locator(".scellis-fallback").count() == 7
    page.screenshot(path=str(artifacts / "static-offline.png"), full_page=True)
    ctx.close()


def test_a_saved_running_panel_whose_kernel_is_gone_says_so(lab, chromium_browser, artifacts, run_cell):
    """Saved while its run trained, then the kernel shut down and the page reloaded: the panel still reads
    `running` (the saved state), and a click on Stop reaches no kernel. The view waits for the kernel's answer
    and, none coming from an idle kernel, says the run is not reachable from here and disables its buttons."""
    url, nb_dir = lab
    path = notebook.write_cells(nb_dir / "orphan.ipynb", "import scellis_jupyter as sc\n" + notebook.SETUP,
                                f'SPEC = """{notebook.SPEC}"""\n'
                                'run = ThreadRun(SPEC, steps=100_000, name="orphan", device="reference", '
                                'delay=0.01)\ndisplay(RunPanel(run))\nrun.start()\nprint("training")')
    with _lab_page(chromium_browser, artifacts, "orphan-failure.png", 1400) as (page, _errors):
        _open(page, url, path.name + "?reset")         # a clean workspace: only this notebook's cells on the page
        _wait(lambda: page.locator(".jp-Notebook .jp-Cell").count() == 2, 60, what="the cells")
        run_cell(page, 0, timeout=120)
        run_cell(page, 1, timeout=120)
        _wait(lambda: _attr(page, "[data-state]", "state") == "running", 60, what="the run to train")
        page.keyboard.press("Escape")
        page.keyboard.press("Control+s")

        def saved_running():
            return any(v["state"].get("state") == "running" and v["state"].get("name") == "orphan"
                       for v in _widget_state(path).values())
        _wait(saved_running, 20, what="the notebook saved with the panel running")
        page.click("text=Kernel >> nth=0")
        page.click("text=Shut Down Kernel")
        time.sleep(1.5)
        page.reload()
        page.wait_for_selector(".sc-run", timeout=60_000)
        assert _attr(page, "[data-state]", "state") == "running"           # what was saved
        stop = page.locator(".sc-run [data-action=stop]").first
        assert stop.is_enabled()
        stop.click()
        _wait(lambda: _attr(page, "[data-state]", "state") != "running" or
              _attr(page, ".sc-run", "unreachable") == "true" or
              _attr(page, "[data-unreachable]", "unreachable") == "true", 60, what="the panel to notice no kernel")
        assert _attr(page, "[data-unreachable]", "unreachable") == "true"
        assert "No kernel answered" in page.locator(".sc-run .sc-notice").first.inner_text()
        assert stop.is_disabled() and "not reachable" in stop.get_attribute("title")
        page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea").screenshot(
            path=str(artifacts / "lab-orphan-panel.png"))
