"""The notebook the browser test drives: a plan with a fix, a real run streaming into a curve and a panel,
and the other widgets (graph, catalog, LR finder, heatmap) for the screenshots."""
from pathlib import Path

import nbformat

ADAPTER = (Path(__file__).resolve().parents[1] / "jupyter" / "run_thread.py").read_text()
SPEC = Path(__file__).resolve().parents[2].joinpath("benchmarks/specs/mlp.toml").read_text().replace(
    "batch_size = 64", 'batch_size = 64\nmetrics = ["accuracy"]')

SETUP = ADAPTER + '''
import re
import numpy as np
from scellis_jupyter.jupyter.widgets import (PlanView, LossCurve, RunPanel, GraphView, CatalogBrowser,
                                             LRFinderView, HeatmapView)
MEMORY = 240_000          # a device this small refuses batch 64 (peak 259.7 kB; batch 32: 204.9 kB): the plan is red, with a batch-size fix


def fixer(view_ref, cell_text):
    """on_fix for the plan cell: re-plan with the fix's batch size and rewrite the cell's own spec line."""
    state = {"text": cell_text}
    def on_fix(i):
        f = view_ref().current.fixes[i]
        state["text"] = re.sub(r"batch_size = \\d+", f"batch_size = {f.settings['batch_size']}", state["text"])
        spec = state["text"].split('"""')[1]
        return sc.plan(sc.Spec.from_text(spec), device="reference", memory=MEMORY), state["text"]
    return on_fix
print("setup done")
'''

PLAN = f'''SPEC = """{SPEC}"""
plan_view = PlanView(sc.plan(sc.Spec.from_text(SPEC), device="reference", memory=MEMORY),
                     on_fix=fixer(lambda: plan_view, In[len(In) - 1]))
plan_view'''

TRAIN = '''run = ThreadRun(SPEC, steps=100_000, name="digits-mlp", device="reference", delay=0.01)
curve = LossCurve(title="digits MLP (reference device)")
curve.follow(run)
panel = RunPanel(run, on_resume=lambda: _resumed())
def _resumed():
    global run2
    run2 = ThreadRun(SPEC, steps=25, name="digits-mlp (resumed)", device="reference")
    curve.follow(run2, key="resumed")
    return run2.start()
display(panel, curve)
run.start()
print("training in the background")'''

OTHERS = '''from scellis_jupyter.catalog import registry
from scellis_jupyter.run.lr_finder import lr_range_test
w = np.array([4.0, -3.0])
def step(lr):                       # a real range test on a small least-squares problem
    global w
    g = 2 * w * np.array([1.0, 10.0])
    w = w - lr * g
    return float(np.sum(np.array([1.0, 10.0]) * w * w))
res = lr_range_test(step, lr_min=1e-4, lr_max=1.0, num=60)
info = {"nodes": [{"id": "input", "op": "input", "shape": [64, 64], "params": 0, "attrs": {}},
                  {"id": "linear_0", "op": "linear", "shape": [64, 128], "params": 8320, "attrs": {"out": 128}},
                  {"id": "relu_1", "op": "relu", "shape": [64, 128], "params": 0, "attrs": {}},
                  {"id": "dropout_2", "op": "dropout", "shape": [64, 128], "params": 0, "attrs": {"p": 0.1}},
                  {"id": "logits", "op": "linear", "shape": [64, 10], "params": 1290, "attrs": {"out": 10}}],
        "edges": [["input", "linear_0"], ["linear_0", "relu_1"], ["relu_1", "dropout_2"], ["dropout_2", "logits"]],
        "input": {"shape": [64, 64]}}
def on_edit(e):                    # a stand-in for the spec edit: the attr changes, the cell text says so
    for n in info["nodes"]:
        if n["id"] == e.get("node") and e["action"] == "set":
            n["attrs"][e["key"]] = e["value"]
    return dict(info), In[len(In) - 1] + f"\\n# edited: {e['node']}.{e['key']} = {e['value']}"
heat = HeatmapView("lr", [1e-3, 3e-3, 1e-2], "batch_size", [32, 64], "val_accuracy")
for (i, j), v in {(0, 0): 0.91, (0, 1): 0.94, (1, 0): 0.96, (1, 2): 0.88}.items():
    heat.set_cell(i, j, v)
display(GraphView(info, on_edit=on_edit), CatalogBrowser(registry.list_entries("optimizer")),
        LRFinderView(res.lrs, res.losses, res.suggestion, on_apply=lambda lr: f"lr = {lr:.3g}"), heat)'''


def write_cells(path: Path, *sources: str) -> Path:
    """A notebook of these code cells at `path`, on the python3 kernel (so JupyterLab asks for no kernel)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    nbformat.write(nb, path)
    return path


def write(path: Path) -> Path:
    return write_cells(path, "import scellis_jupyter as sc\n" + SETUP, PLAN, TRAIN, OTHERS)
