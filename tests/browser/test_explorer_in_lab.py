"""The stage explorer in a real JupyterLab (Debian's Chromium): `%scellis explain mlp` after a `%%scellis mlp`
cell draws the graph, the schedule by forward / backward / update and the arena; clicking a node lists its
kernels and lights its steps, clicking a kernel shows its bindings and its WGSL source (the text the kernel
sent: what the device compiles). Screenshots go to tests/browser/artifacts/explain-*.png."""
import re

import pytest

import lab_notebook as notebook
from test_lab import _dark_and_narrow, _lab_page, _open, _wait

pytestmark = pytest.mark.slow

MODEL = """%%scellis mlp --quiet
[data]
dataset = "synthetic_classification"
n_rows = 128
n_features = 20
n_classes = 4
[model]
nodes = [{ name = "fc1", op = "linear", out = 32 }, { name = "act1", op = "relu" },
         { name = "head", op = "linear", out = 4 }]
[recipe]
optimizer = { name = "adamw", lr = 1e-3 }
batch_size = 32
"""
CHECK = '''w = mlp.explain()
d = w.data
fc1 = [d["kernels"][d["launches"][i]["k"]]["name"] for r in d["program"]["steps"] if r["node"] == "fc1"
       for i in r["launches"]]
mm = next(i for r in d["program"]["steps"] if r["node"] == "fc1" for i in r["launches"]
          if d["kernels"][d["launches"][i]["k"]]["name"] == "matmul")
print("launches", len(d["launches"]), "fc1", len(fc1), "backend", d["device"]["backend"], "matmul", mm,
      "lines", d["kernels"][d["launches"][mm]["k"]]["wgsl"].count("\\n"))'''


def test_explain_links_graph_program_plan_and_wgsl(lab, chromium_browser, artifacts, run_cell):
    url, nb_dir = lab
    notebook.write_cells(nb_dir / "explain.ipynb", "%load_ext scellis_jupyter", MODEL, "%scellis explain mlp", CHECK)
    with _lab_page(chromium_browser, artifacts, "explain-failure.png", 1300) as (page, errors):
        _open(page, url, "explain.ipynb")
        for i in range(4):
            run_cell(page, i, timeout=120)
        out = page.locator(".jp-Notebook .jp-Cell").nth(3).locator(".jp-OutputArea").inner_text()
        m = re.search(r"launches (\d+) fc1 (\d+) backend (\w+) matmul (\d+) lines (\d+)", out)
        assert m and m.group(3) == "wgpu", out
        box = page.locator(".sc-x").first
        box.wait_for(state="visible", timeout=60_000)     # the widget manager can be slow on a loaded machine
        host = page.locator("[data-launches]").first
        assert int(host.get_attribute("data-launches")) == int(m.group(1))
        # the live view hides its static twin
        assert not page.locator("[data-scellis-static]").first.is_visible()
        text = box.inner_text()
        for part in ("Stages of mlp's training step", "Graph", "Program", "Plan · arena", "live peak"):
            assert part in text, part
        assert box.locator(".sc-x-phase").all_inner_texts() and \
            [t.split(" ")[0] for t in box.locator(".sc-x-phase").all_inner_texts()] == ["forward", "backward", "update"]
        box.screenshot(path=str(artifacts / "explain-start.png"))

        # a node: its kernels (forward and backward), its steps lit, its values lit in the arena
        box.locator(".sc-x-node[data-node='fc1']").click()
        _wait(lambda: host.get_attribute("data-node") == "fc1", 30, what="the node selection")
        detail = box.locator(".sc-x-detail")
        chips = detail.locator(".sc-x-kern")
        assert chips.count() == int(m.group(2)) >= 2
        assert "Node fc1" in detail.inner_text() and "forward" in detail.inner_text() and "backward" in detail.inner_text()
        assert box.locator(".sc-x-step.sc-x-on").count() >= 2
        assert box.locator(".sc-x-val.sc-x-lit").count() >= 1
        box.screenshot(path=str(artifacts / "explain-node.png"))

        # a kernel: its bindings and its WGSL source
        matmul = detail.locator(".sc-x-kern[data-kernel='matmul']").first
        launch = matmul.get_attribute("data-launch")
        matmul.click()
        _wait(lambda: host.get_attribute("data-launch") == launch, 30, what="the kernel selection")
        assert host.get_attribute("data-kernel") == "matmul"
        wgsl = box.locator("pre.sc-x-wgsl")
        src = wgsl.inner_text()
        assert "@compute" in src and "fn main" in src and "var<storage" in src, src[:400]
        binds = detail.locator(".sc-x-binds tr")
        assert binds.count() >= 4                                   # a header and three operands at least
        assert "fc1.weight (parameter)" in detail.inner_text()
        assert box.locator(".sc-x-step.sc-x-cur").count() == 1
        assert box.locator(".sc-x-val.sc-x-lit").count() >= 1
        box.screenshot(path=str(artifacts / "explain-kernel.png"))

        # the source shown is the kernel's text (what the device compiles), line for line
        assert launch == m.group(4)
        assert abs(src.count("\n") - int(m.group(5))) <= 1, (src.count("\n"), m.group(5))
        # an update kernel: one dispatch for a batch of the optimizer's steps
        box.locator(".sc-x-node[data-node='optimizer']").click()
        _wait(lambda: host.get_attribute("data-node") == "optimizer", 30, what="the optimizer's selection")
        detail.locator(".sc-x-kern").last.click()
        _wait(lambda: "update" in detail.inner_text() and "@compute" in box.locator("pre.sc-x-wgsl").inner_text(), 30,
              what="an update kernel")
        assert box.locator(".sc-x-step.sc-x-cur").count() >= 1
        _dark_and_narrow(page, box, artifacts, "explain")
        box.screenshot(path=str(artifacts / "explain-narrow.png"))
        assert not [e for e in errors if "scellis" in e.lower() or "sc-" in e], errors


def test_static_form_shows_offline_in_nbconvert_html(chromium_browser, artifacts, tmp_path):
    """The explorer's static output, exported by nbconvert and opened from file:// with the network off: the
    graph, the schedule by phase, the arena chart and each kernel's WGSL (folded) show without a kernel."""
    import nbformat
    from nbconvert import HTMLExporter

    import scellis_jupyter as sc
    w = sc.explain(MODEL.split("\n", 1)[1], device="wgpu")
    data, md = w.static_bundle()
    cell = nbformat.v4.new_code_cell("%scellis explain mlp")
    cell.outputs = [nbformat.v4.new_output("display_data", data=data, metadata=md)]
    body, _ = HTMLExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[cell]))
    path = tmp_path / "explain.html"
    path.write_text(body)
    ctx = chromium_browser.new_context(viewport={"width": 1100, "height": 1400}, offline=True)
    page = ctx.new_page()
    try:
        page.goto(path.as_uri())
        static = page.locator(".scellis-explain").first
        static.wait_for(state="visible", timeout=30_000)
        text = static.inner_text()
        for part in ("Graph", "forward (", "backward (", "update (", "Plan: arena", "Kernels: "):
            assert part in text, part
        assert static.locator("tr[data-node='fc1']").count() == 1
        assert static.locator("svg rect[data-value]").count() == len(w.data["plan"]["values"])
        kern = static.locator("details[data-kernel='matmul']").first
        kern.locator("summary").click()
        assert "@compute" in kern.locator("pre").inner_text()
        static.screenshot(path=str(artifacts / "explain-static-offline.png"))
    finally:
        ctx.close()
