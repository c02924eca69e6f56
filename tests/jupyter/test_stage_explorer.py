"""`%scellis explain NAME` / `model.explain()` / `sc.explain(spec)`: the StageExplorer widget gets the step's
stages (forward, backward and update kernels with their WGSL, the arena over the schedule), its static form
shows them without a kernel, and a bad name or option is the one-line diagnostic, never a traceback."""
from __future__ import annotations

import re

from IPython.core.error import UsageError

import scellis_jupyter as sc
from scellis_jupyter.jupyter.widgets import StageExplorer

from fixtures.devices import WG

MODEL = """%%scellis mlp --quiet
[data]
dataset = "synthetic_classification"
n_rows = 96
n_features = 12
n_classes = 3
[model]
nodes = [{ name = "fc1", op = "linear", out = 16 }, { name = "act1", op = "relu" },
         { name = "head", op = "linear", out = 3 }]
[recipe]
optimizer = { name = "sgd", lr = 0.1 }
batch_size = 16
"""

DIAGNOSTIC = re.compile(r"^error\[[a-z-]+\] at [^:]+: .+")


def _one_line(c) -> str:
    assert isinstance(c.error, UsageError), (c.error, c.stdout, c.stderr)
    assert "Traceback" not in c.stdout + c.stderr
    msg = str(c.error)
    assert DIAGNOSTIC.match(msg), msg
    return msg


def test_explain_of_an_unknown_name_is_the_diagnostic(cell):
    msg = _one_line(cell("%scellis explain nosuchname"))
    assert msg.startswith("error[magic-unknown-model] at %scellis: no model named 'nosuchname'"), msg
    assert cell(MODEL).error is None
    msg = _one_line(cell("%scellis explain mlpp"))
    assert "mlp" in msg                                   # did you mean
    assert "must be at least 1" in _one_line(cell("%scellis explain mlp --batch-size 0"))
    assert "explain" in cell("%scellis explain --help").text


def test_explain_shows_the_widget_and_its_static_form(cell, ip):
    assert cell(MODEL).error is None
    dev = "wgpu" if WG is not None else "reference"
    c = cell(f"%scellis explain mlp --device {dev}")
    assert c.error is None, c.error
    assert any("application/vnd.jupyter.widget-view+json" in o for o in c.outputs)
    static = [o for o in c.outputs if "scellis-explain" in o.get("text/html", "")]
    assert len(static) == 1
    text, html = static[0]["text/plain"], static[0]["text/html"]
    assert "stages of mlp's training step" in text and re.search(r"forward \d+, backward \d+, update \d+", text)
    for part in ("Spec", "Graph", "Program:", "Plan: arena", 'data-node="fc1"', "live peak"):
        assert part in html, part
    w = ip.user_ns["mlp"].explain(device=dev)
    assert isinstance(w, StageExplorer)
    d = w.data
    assert {r["phase"] for r in d["program"]["steps"]} == {"forward", "backward", "update"}
    if dev == "wgpu":
        assert d["kernels"] and all(k["wgsl"] for k in d["kernels"])
        assert html.count("<details data-kernel=") == len(d["kernels"])
        assert "@compute" in html and "Kernels: " in html
    # the handle's and the Python API's data agree
    assert sc.explain(ip.user_ns["mlp"], device=dev).data["program"]["hash"] == d["program"]["hash"]


def test_explain_on_the_reference_device_says_there_is_no_wgsl(cell):
    assert cell(MODEL).error is None
    c = cell("%scellis explain mlp --device reference")
    assert c.error is None
    assert "not WGSL" in c.text and "Kernels: 0" in c.html


def test_the_widget_refuses_data_that_is_not_stages():
    try:
        StageExplorer({"program": {}})
    except sc.WidgetError as e:
        assert DIAGNOSTIC.match(str(e)) and "sc.explain" in str(e)
    else:
        raise AssertionError("no WidgetError")


def test_by_default_the_wgsl_comes_from_an_adapter_and_the_note_says_so(cell, ip):
    """The kernel here trains on the reference device (SCELLIS_DEVICE=reference): the explorer still shows the
    WGSL, from the WebGPU adapter, and says which device training uses."""
    assert cell(MODEL).error is None
    d = ip.user_ns["mlp"].explain().data
    if WG is None:
        assert d["device"]["backend"] == "reference" and not d["kernels"]
    else:
        assert d["device"]["backend"] == "wgpu" and d["kernels"]
        assert d["device"]["note"].startswith("training here runs on reference:")
