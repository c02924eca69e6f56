"""A notebook with five widgets, executed headless and saved with widget state, stays under 1 MB; every widget
output is followed by its static text/html form of the final state, and nbconvert's HTML (which renders the
widget view, not a text/html beside it, once the state is saved) still carries each static form."""
import base64
from pathlib import Path

import nbformat
import pytest

from scellis_jupyter.jupyter.widgets._series import unpack

from fixtures.notebooks import ROOT, run_notebook

ADAPTER = (Path(__file__).resolve().parent / "run_thread.py").read_text()
SPEC = (ROOT / "benchmarks/specs/mlp.toml").read_text().replace("batch_size = 64", 'batch_size = 64\nmetrics = ["accuracy"]')


@pytest.mark.slow
def test_five_widgets_saved_with_state_stay_under_a_megabyte(tmp_path):
    cells = [
        "import numpy as np, scellis_jupyter as sc\n" + ADAPTER
        + "\nfrom scellis_jupyter.jupyter.widgets import PlanView, LossCurve, RunPanel, GraphView, LRFinderView",
        f'SPEC = """{SPEC}"""\nPlanView(sc.plan(sc.Spec.from_text(SPEC), device="reference"))',
        # a real run, followed live, plus a long loaded history (100k steps) overlaid
        'run = ThreadRun(SPEC, steps=120, name="live", device="reference")\ncurve = LossCurve(title="runs")\n'
        'curve.follow(run)\npanel = RunPanel(run)\ndisplay(panel, curve)\nrun.start().wait(120)\n'
        'n = 100_000\ncurve.add("history", "loss", np.arange(1, n + 1), 2 / np.sqrt(np.arange(1, n + 1)))\n'
        'import time; time.sleep(0.5)',
        'GraphView({"nodes": [{"id": "a", "op": "linear", "shape": [8, 4], "params": 36, "attrs": {"out": 4}},'
        ' {"id": "b", "op": "relu", "shape": [8, 4], "params": 0, "attrs": {}}], "edges": [["a", "b"]],'
        ' "input": {"shape": [8, 8]}})',
        "lrs = np.logspace(-5, 0, 80)\nLRFinderView(lrs, 2 - np.exp(-(np.log10(lrs) + 2) ** 2), 3e-3)",
    ]
    nb = run_notebook(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), timeout=300)
    path = tmp_path / "five.ipynb"
    nbformat.write(nb, path)
    size = path.stat().st_size
    assert size < 1_000_000, size
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    ours = {k: v for k, v in state.items() if v["state"].get("_anywidget_id", "").startswith("scellis_jupyter")}
    names = sorted(v["state"]["_anywidget_id"].rsplit(".", 1)[1] for v in ours.values())
    assert names == ["GraphView", "LRFinderView", "LossCurve", "PlanView", "RunPanel"]
    curve, = [v for v in ours.values() if v["state"]["_anywidget_id"].endswith("LossCurve")]
    buf, = [b for b in curve.get("buffers", []) if b["path"] == ["_packed"]]
    series = {(r, n): s for r, n, s, _, _ in unpack(base64.b64decode(buf["data"]))}
    assert series[("live", "loss")].tolist() == list(range(1, 121))       # the finished run, whole
    assert 1000 < len(series[("history", "loss")]) <= 5000               # the long history, decimated
    panel, = [v for v in ours.values() if v["state"]["_anywidget_id"].endswith("RunPanel")]
    assert panel["state"]["state"] == "finished" and panel["state"]["step"] == 120
    outs = [o for c in nb.cells for o in c.outputs if o.get("output_type") == "display_data"]
    view = "application/vnd.jupyter.widget-view+json"
    ours_views = [i for i, o in enumerate(outs) if view in o["data"] and o["data"][view]["model_id"] in ours]
    assert len(ours_views) == 5
    for i in ours_views:                            # each live view, then its static twin
        twin = outs[i + 1]["data"]
        assert view not in twin and 'data-scellis-static="' in twin["text/html"]
        sid = twin["text/html"].split('data-scellis-static="')[1].split('"')[0]
        assert ours[outs[i]["data"][view]["model_id"]]["state"]["_static_id"] == sid
    htmls = [o["data"]["text/html"] for o in outs if "text/html" in o["data"]]
    assert len(htmls) == 5 and any("finished" in h and "step 120 / 120" in h for h in htmls)

    from nbconvert import HTMLExporter
    page, _ = HTMLExporter().from_notebook_node(nb)
    assert page.count('<script type="application/vnd.jupyter.widget-view+json">') == 5
    assert page.count('class="scellis-fallback"') == 5          # the static forms, outside any script
    assert 'data-verdict="' in page and "<polyline" in page and "step 120 / 120" in page
    print(f"five widgets saved with state: {size} bytes")
