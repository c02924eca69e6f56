"""ProfileView in a real JupyterLab (Debian's Chromium): `sc.profile(spec)` shows one step's dispatches as an
icicle; hovering a block says its time and share, clicking a layer zooms into it (the table beside follows),
"whole step" zooms out; it follows the dark theme and stays within a narrow notebook. Screenshots go to
tests/browser/artifacts/profile-*.png."""
import re

import nbformat
import pytest

import lab_notebook as notebook
from fixtures.notebooks import run_notebook
from test_lab import _dark_and_narrow, _lab_page, _open, _wait

pytestmark = pytest.mark.slow

SETUP = '''
import scellis_jupyter as sc
SPEC = """
name = "profile-lab"
[data]
dataset = "synthetic_classification"
n_rows = 512
n_features = 64
n_classes = 4
[model]
nodes = [{ name = "fc1", op = "linear", out = 256 }, { name = "act1", op = "relu" },
         { name = "fc2", op = "linear", out = 128 }, { name = "act2", op = "relu" },
         { name = "head", op = "linear", out = 4 }]
[recipe]
optimizer = { name = "adamw", lr = 1e-3 }
batch_size = 128
determinism = "debug"
"""
try:                         # GPU timestamps where the adapter grants them (llvmpipe does), else the host clock
    dev = "wgpu" if "timestamp-query" in sc.device("wgpu").features else "reference"
except sc.ScellisError:
    dev = "reference"
view = sc.profile(SPEC, device=dev, steps=2, warmup=2)
view
'''
CHECK = 'print("dispatches", len(view.timeline), "on", view.info["device"])'


def test_profile_view_hovers_zooms_and_fits(lab, chromium_browser, artifacts, run_cell):
    url, nb_dir = lab
    notebook.write_cells(nb_dir / "profile.ipynb", SETUP, CHECK)
    with _lab_page(chromium_browser, artifacts, "profile-failure.png", 1400) as (page, errors):
        _open(page, url, "profile.ipynb")
        run_cell(page, 0, timeout=180)
        page.wait_for_selector(".sc-prof .sc-blk", timeout=60_000)
        cell = run_cell(page, 1, timeout=60)
        m = re.search(r"dispatches (\d+) on (\S+)", cell.locator(".jp-OutputArea").inner_text())
        assert m, cell.locator(".jp-OutputArea").inner_text()
        host = page.locator("[data-dispatches]").first
        assert int(host.get_attribute("data-dispatches")) == int(m.group(1))     # the view drew the kernel's step
        box = page.locator(".sc-prof").first
        # the live view hides its static twin (the kernel-free form right after it)
        assert page.locator("[data-scellis-static]").count() >= 1
        assert not page.locator("[data-scellis-static]").first.is_visible()
        layers = box.locator(".sc-blk[data-level='0']")
        labels = [layers.nth(i).get_attribute("data-label") for i in range(layers.count())]
        assert {"fc1", "fc2", "head", "loss", "head/bwd", "fc1/bwd", "optimizer"} <= set(labels), labels
        assert "profile of profile-lab" in box.inner_text() and "top kernels of the step" in box.inner_text()
        assert re.search(r"ms timed step \([0-9.]+ ms untimed, as the loop runs it\)", box.inner_text())
        # hover the widest backward layer block of two dispatches or more: its time and share (the block of
        # the most dispatches can be a sliver under its neighbour when its kernels are quick)
        widths = [float(layers.nth(i).evaluate("e => parseFloat(e.style.width)")) for i in range(layers.count())]
        starts = [int(layers.nth(i).get_attribute("data-i0")) for i in range(layers.count())]
        count = [b - a for a, b in zip(starts, starts[1:] + [int(m.group(1))])]
        k = max((i for i in range(len(labels)) if labels[i].endswith("/bwd") and count[i] >= 2),
                key=lambda i: (widths[i], count[i]))
        name = labels[k]
        bwd = layers.nth(k)
        bwd.hover()
        tip = box.locator(".sc-tip")
        _wait(lambda: tip.is_visible() and tip.get_attribute("data-hover") == name, 10, what="the tooltip")
        text = tip.inner_text()
        assert text.startswith(f"layer {name}") and "% of the step's kernels" in text and "dispatch" in text, text
        box.screenshot(path=str(artifacts / "profile-hover.png"))
        # click: zoom into that layer; only it stays on the top row, the table is its own
        bwd.click()
        _wait(lambda: host.get_attribute("data-zoom") == f"layer:{name}", 10, what="the zoom")
        top = box.locator(".sc-blk[data-level='0']")
        assert top.count() == 1 and top.first.get_attribute("data-label") == name
        assert top.first.evaluate("e => e.style.width") == "100%"
        assert f"top kernels in {name}" in box.inner_text()
        leaves = box.locator(".sc-blk[data-level='3']")
        # its dispatches on the bottom row (those under 0.15% of the view are not drawn)
        assert count[k] >= 2 and 1 <= leaves.count() <= count[k], (count[k], leaves.count())
        # the widest dispatch (the first can be a sliver its neighbour covers when its kernel is quick)
        lw = [float(leaves.nth(i).evaluate("e => parseFloat(e.style.width)")) for i in range(leaves.count())]
        leaves.nth(max(range(len(lw)), key=lambda i: lw[i])).hover()
        _wait(lambda: tip.is_visible() and "->" in tip.inner_text(), 10, what="a dispatch's tooltip")
        assert name in tip.inner_text()
        # the tooltip stays inside the widget's box (which clips what overflows it)
        assert tip.evaluate("e => e.getBoundingClientRect().bottom") <= \
            box.evaluate("e => e.getBoundingClientRect().bottom") + 1
        box.screenshot(path=str(artifacts / "profile-zoomed.png"))
        box.locator(".sc-crumb", has_text="whole step").click()
        _wait(lambda: host.get_attribute("data-zoom") == "", 10, what="the zoom-out")
        assert box.locator(".sc-blk[data-level='0']").count() == len(labels)
        page.mouse.move(0, 0)
        _dark_and_narrow(page, box, artifacts, "profile")
        flame = box.locator(".sc-flame").first
        assert flame.evaluate("e => e.getBoundingClientRect().right") <= \
            box.evaluate("e => e.getBoundingClientRect().right") + 1
        box.screenshot(path=str(artifacts / "profile-narrow.png"))
        assert not [e for e in errors if "scellis" in e.lower() or "sc-" in e], errors


def test_profile_static_form_shows_in_nbconvert_html_offline(chromium_browser, artifacts, tmp_path):
    """Executed headless with widget state saved, exported by nbconvert, opened from file:// with the network
    off: the widget view cannot load (its manager comes from a CDN), the static icicle and table show."""
    from nbconvert import HTMLExporter
    code = SETUP.replace('dev = "wgpu" if', 'dev = "reference" if False and').replace("steps=2, warmup=2",
                                                                                   "steps=1, warmup=1")
    nb = run_notebook(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), timeout=300)
    body, _ = HTMLExporter().from_notebook_node(nb)
    assert "data-scellis-static" in body and "layer fc1/bwd: " in body, body[:3000]
    path = tmp_path / "profile.html"
    path.write_text(body)
    ctx = chromium_browser.new_context(viewport={"width": 1100, "height": 900}, offline=True)
    page = ctx.new_page()
    try:
        page.goto(path.as_uri())
        static = page.locator(".scellis-profile").first
        static.wait_for(state="visible", timeout=30_000)
        assert "kernel (shape)" in static.inner_text() and "rows: layer, op, kernel, dispatch" in static.inner_text()
        titles = static.locator("[title^='layer ']")
        assert titles.count() >= 5
        # the blocks are laid out (positioned, given a width), not a bare list of text
        w = titles.first.evaluate("e => e.getBoundingClientRect().width")
        assert w > 2
        static.screenshot(path=str(artifacts / "profile-static-offline.png"))
    finally:
        ctx.close()
