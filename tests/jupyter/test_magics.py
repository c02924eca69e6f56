"""The magics in a real IPython shell (InteractiveShell): cells, subcommands, background training, mistakes.

Each mistake must come out as IPython's UsageError (no traceback) with the shared diagnostic text; a spec
mistake must point at the cell's own line (the %%scellis line is line 1) and column.
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest
from IPython.core.error import UsageError

from scellis_jupyter.jupyter.display import RUN_MIME

DATA = """
from sklearn.datasets import load_digits
X, y = load_digits(return_X_y=True)
X_tr, y_tr, X_va, y_va = X[:1400], y[:1400], X[1400:], y[1400:]
"""

MLP = """%%scellis mlp
[data]
train = "X_tr, y_tr"
val = "X_va, y_va"
standardize = true
[model]
nodes = [{ name = "hidden", op = "linear", out = 32 }, { op = "relu" }, { name = "logits", op = "linear", out = 10 }]
[recipe]
batch_size = 32
metrics = ["accuracy"]
optimizer = { name = "adam", lr = 0.01 }
"""


def _usage(c) -> str:
    assert isinstance(c.error, UsageError), (c.error, c.stdout, c.stderr)
    assert "Traceback" not in c.stdout + c.stderr
    return str(c.error)


def _cell_line(msg: str, code: str) -> tuple[str, int]:
    m = re.search(r"line (\d+), column (\d+)", msg)
    assert m, msg
    line, col = int(m.group(1)), int(m.group(2))
    return code.split("\n")[line - 1], col


def test_load_and_unload_the_extension(ip, cell):
    c = cell("%scellis --help")
    assert c.error is None and "train" in c.text and "%%scellis NAME" in c.text
    ip.run_line_magic("unload_ext", "scellis_jupyter")
    c = cell("%scellis --help")
    assert c.error is not None and "not found" in str(c.error)
    ip.run_line_magic("load_ext", "scellis_jupyter")
    assert cell("%scellis device").error is None


def test_device_shows_the_settings_in_effect(cell, monkeypatch):
    monkeypatch.setenv("SCELLIS_FUSION", "off")
    monkeypatch.setenv("SCELLIS_FUSON", "1")
    c = cell("%scellis device")
    assert c.error is None, c.error
    assert "SCELLIS_FUSION = off" in c.text
    assert "SCELLIS_FUSON (did you mean SCELLIS_FUSION?): not a setting scellis reads" in c.text


def test_a_spec_cell_binds_a_model_and_shows_graph_and_plan(ip, cell):
    cell(DATA)
    c = cell(MLP)
    assert c.error is None, c.error
    m = ip.user_ns["mlp"]
    assert type(m).__name__ == "Model" and m.spec.name == "mlp"
    assert m.spec.dataset.n_rows == 1797 and m.spec.input["shape"] == (64,)
    assert 'data-node="hidden"' in c.html
    assert "2,410 parameters" in c.html                   # 64*32+32 + 32*10+10
    assert 'data-verdict="green"' in c.html and "the CPU (numpy reference path)" in c.html   # fits; the device line
    assert "PlanView GREEN" in c.text and "GraphView: 3 nodes" in c.text   # the widgets' own text forms


@pytest.mark.parametrize("body, token, words", [
    ('[data]\ntrain = "X_tr, y_tr"\n[model]\nnodes = [{ op = "linaer", out = 3 }]\n', '"linaer"', "did you mean 'linear'"),
    ('[data]\ntrain = "X_tr, y_tr"\n[model]\nnodes = [{ op = "linear", out = 3 }]\n[recipe]\nbatch_size = "x"\n',
     '"x"', "batch_size"),
    ('[data]\ntrain = "X_trn, y_tr"\n[model]\nnodes = [{ op = "linear", out = 10 }]\n', '"X_trn', "not defined"),
    ('[data]\ntrain = "X_tr, y_tr"\n[model]\nnodes = [{ op = "linear", out = 7 }]\n', "7", "10 classes"),
    ('[data]\ntrain = "X_tr, y_tr"\n[model\nnodes = []\n', "[model", "TOML syntax"),
])
def test_spec_mistakes_point_at_the_cells_own_line(cell, body, token, words):
    cell(DATA)
    code = "%%scellis bad\n" + body
    c = cell(code)
    msg = _usage(c)
    assert words in msg
    line, col = _cell_line(msg, code)
    assert token in line, (msg, line)
    assert msg.count("^") == 1


def test_unknown_subcommand_lists_the_valid_ones(cell):
    msg = _usage(cell("%scellis trian mlp"))
    assert "unknown subcommand 'trian'" in msg and "did you mean 'train'" in msg
    for sub in ("plan", "train", "wait", "resume", "stop", "runs", "show", "device", "catalog", "verify", "profile",
                "lr-find"):
        assert sub in msg


def test_bad_options_and_unknown_models(cell):
    assert "not an integer" in _usage(cell("%scellis train mlp --steps zero"))
    assert "unrecognized arguments: --stpes" in _usage(cell("%scellis train mlp --stpes 3"))
    cell(DATA)
    cell(MLP)
    msg = _usage(cell("%scellis plan mpl"))
    assert "no model named 'mpl'" in msg and "did you mean 'mlp'" in msg
    assert "is not a size" in _usage(cell("%scellis plan mlp --memory lots"))


def test_help_of_every_subcommand(cell):
    c = cell("%scellis train --help")
    assert c.error is None and "--steps" in c.text and "--checkpoint-every" in c.text
    c = cell("%scellis lr-find -h")
    assert "--min-lr" in c.text


def test_train_returns_at_once_then_wait_shows_the_record_with_its_pin(ip, cell):
    cell(DATA)
    cell(MLP)
    t0 = time.perf_counter()
    c = cell("%scellis train mlp --steps 400 --checkpoint-every 100")
    took = time.perf_counter() - t0
    assert c.error is None, c.error
    br = ip.user_ns["mlp"].run
    assert br.state in ("starting", "running") and br.step < 400, (br, took)   # returned before training ended
    assert 'data-state="' in c.html and "CPU, not a GPU" in c.html             # the static run panel
    msg = _usage(cell("%scellis train mlp --steps 10"))                         # a second train is refused
    assert "already training" in msg and "%scellis wait mlp" in msg
    assert cell("x = 1 + 1").error is None                                      # other cells keep working
    c = cell("%scellis wait mlp")
    assert c.error is None and br.state == "finished" and br.step == 400
    found = c.mime(RUN_MIME)                    # the record, and the run panel's final update (same pin)
    assert found and all(p == found[-1] for p in found)
    pin = found[-1]
    rec = br.run.store.get_run(br.run_id)
    assert pin["run"] == br.run_id and pin["spec_hash"] == rec.spec_hash == br.run.spec.hash
    assert pin["data"]["dataset_hash"] == rec.dataset_hash and pin["data"]["memory"]["parts"]["train"]["rows"] == 1400
    assert pin["checkpoints"] == [k["hash"] for k in rec.checkpoints] and len(pin["checkpoints"]) == 4
    assert pin["tier"] == "debug" and pin["device"]["backend"] == "reference" and pin["steps"] == 400
    assert pin["metrics"]["val_accuracy"] > 0.8
    assert "<svg" in c.html and f"finished {br.run_id}" in c.text
    steps = [e for e in br.events if e["kind"] == "step"]
    assert steps[-1]["step"] == 400 and all(np.isfinite(e["loss"]) for e in steps)
    assert any(e["kind"] == "checkpoint" for e in br.events)
    acc = (ip.user_ns["mlp"].predict(ip.user_ns["X_va"]).argmax(1) == ip.user_ns["y_va"]).mean()
    assert acc == pytest.approx(pin["metrics"]["val_accuracy"], abs=1e-9)
    c = cell("%scellis verify mlp")
    assert c.error is None and "verified" in c.text and "bit-identical" in c.text


def test_stop_then_resume_continues_and_finished_runs_refuse_actions(ip, cell):
    cell(DATA)
    cell(MLP)
    cell("%scellis train mlp --steps 2000")
    br = ip.user_ns["mlp"].run
    while br.step < 5:
        time.sleep(0.05)
    c = cell("%scellis stop mlp")
    assert c.error is None and "interrupted" in c.text
    br.wait(60)
    assert br.state == "interrupted" and 5 <= br.step < 2000
    rec = br.run.store.get_run(br.run_id)
    assert rec.state == "interrupted" and rec.last_checkpoint
    msg = _usage(cell("%scellis stop mlp"))
    assert "is interrupted; there is nothing to stop" in msg and "%scellis resume mlp" in msg
    stopped_at = br.step
    target = stopped_at + 20              # from wherever the stop landed (a loaded machine runs on further)
    c = cell(f"%scellis resume mlp --steps {target} --wait")
    nb = ip.user_ns["mlp"].run
    assert c.error is None and nb is not br and nb.state == "finished" and nb.step == target
    assert nb.run.resumed_from == rec.last_checkpoint
    msg = _usage(cell("%scellis stop mlp"))
    assert "is finished" in msg
    msg = _usage(cell("%scellis resume mlp"))
    assert "nothing left to resume" in msg


def test_a_paused_run_whose_device_goes_is_interrupted_at_once(ip, cell, monkeypatch):
    """A paused run does not step, so no request meets its gone device (a browser tab closed or reloaded meanwhile):
    the pause itself notices, and the run ends `interrupted` at its last checkpoint, not paused with a record that
    says running."""
    cell(DATA)
    cell(MLP)
    cell("%scellis train mlp --steps 3000 --checkpoint-every 5")
    br = ip.user_ns["mlp"].run
    deadline = time.time() + 30
    while not any(e["kind"] == "checkpoint" for e in br.events) and time.time() < deadline:
        time.sleep(0.02)
    br.pause()
    deadline = time.time() + 30
    while br.state != "paused" and time.time() < deadline:
        time.sleep(0.02)
    assert br.state == "paused"
    why = []
    monkeypatch.setattr(br.run.device, "gone", lambda: why[0] if why else "")
    time.sleep(0.5)
    assert br.state == "paused"                     # a device that is there: still paused
    why.append("the notebook's page that held this device is gone (closed or reloaded)")
    br.wait(30)
    assert br.state == "interrupted" and "device-gone" in str(br.error) and "closed or reloaded" in str(br.error)
    rec = br.run.store.get_run(br.run_id)
    assert rec.state == "interrupted" and rec.last_checkpoint
    c = cell("%scellis runs")
    line = next(ln for ln in c.text.splitlines() if br.run_id in ln)
    assert c.error is None and "interrupted" in line, c.text


def test_pause_and_checkpoint_now(ip, cell):
    cell(DATA)
    cell(MLP)
    cell("%scellis train mlp --steps 3000")
    br = ip.user_ns["mlp"].run
    br.pause()
    deadline = time.time() + 30
    while br.state != "paused" and time.time() < deadline:
        time.sleep(0.02)
    at = br.step
    time.sleep(0.3)
    assert br.state == "paused" and br.step == at
    br.checkpoint_now()
    deadline = time.time() + 30
    while not any(e["kind"] == "checkpoint" for e in br.events) and time.time() < deadline:
        time.sleep(0.02)
    ck = [e for e in br.events if e["kind"] == "checkpoint"]
    assert ck and br.run.store.load_checkpoint(ck[0]["hash"]).step in (at, at + 1)
    time.sleep(0.2)
    assert br.state == "paused"                     # a checkpoint does not unpause
    br.resume()
    deadline = time.time() + 30
    while br.step <= at + 2 and time.time() < deadline:
        time.sleep(0.02)
    assert br.step > at + 2
    seen = []
    unsub = br.subscribe(seen.append)               # a late subscriber replays the past
    assert seen[:len(br.events[:3])] == br.events[:3]
    unsub()
    br.stop()
    br.wait(60)


def test_wait_on_a_model_without_runs_and_refused_plan(ip, cell):
    cell(DATA)
    cell(MLP)
    assert "has no run to wait for" in _usage(cell("%scellis wait mlp"))
    c = cell("%scellis plan mlp --memory 20000")
    assert c.error is None and 'data-verdict="red"' in c.html and "Fixes:" in c.html
    msg = _usage(cell("%scellis train mlp --memory 20000 --steps 3"))
    assert "refused before any compute" in msg


def test_user_optimizer_from_a_catalog_cell_matches_the_builtin(ip, cell):
    c = cell('''%%scellis catalog optimizer cell_sgd
from scellis_jupyter.catalog import Param, optimizer
from scellis_jupyter.graph import functional as F

@optimizer("cell_sgd", summary="plain SGD, written in a cell", params={"lr": Param(float, 0.1, lo=0.0)})
class CellSGD:
    def __init__(self, lr=0.1):
        self.lr = lr
    def state(self, shape, dtype):
        return []
    def update(self, p, g, state, step, lr):
        x = F.cast(p, "f32")
        return F.cast(F.sub(x, F.mul(F.cast(lr, "f32"), F.cast(g, "f32"))), p.dtype), {}
''')
    assert c.error is None, c.error
    assert "cell_sgd" in c.text
    cell(DATA)
    for name, opt in (("a", "cell_sgd"), ("b", "sgd")):
        cell(MLP.replace("%%scellis mlp", f"%%scellis {name}").replace('name = "adam", lr = 0.01',
                                                                       f'name = "{opt}", lr = 0.05'))
        assert cell(f"%scellis train {name} --steps 20 --wait").error is None
    wa, wb = ip.user_ns["a"].run.run.weights(), ip.user_ns["b"].run.run.weights()
    for k in wb:
        np.testing.assert_allclose(wa[k], wb[k], rtol=1e-6, atol=1e-7)
    msg = _usage(cell("%%scellis catalog optimizr x\npass\n"))
    assert "unknown catalog kind 'optimizr'" in msg and "did you mean 'optimizer'" in msg
    msg = _usage(cell("%%scellis catalog loss nothing_here\nx = 1\n"))
    assert "registered no loss" in msg


def test_a_catalog_cell_that_exits_is_a_diagnostic_naming_the_cell_line(ip, cell):
    code = "%%scellis catalog optimizer x\nimport sys\n\nsys.exit(3)\n"
    msg = _usage(cell(code))                      # SystemExit does not escape the magic
    assert msg.startswith("error[catalog] at cell x, line 4:") and "SystemExit: 3" in msg, msg
    assert "sys.exit(3)" in msg                   # the line itself, as a spec mistake shows it
    msg = _usage(cell("%%scellis catalog optimizer y\nx = 1\nraise RuntimeError('no')\n"))
    assert msg.startswith("error[catalog] at cell y, line 3:") and "RuntimeError: no" in msg, msg


def test_profile_lr_find_runs_show_catalog(ip, cell):
    cell(DATA)
    cell(MLP)
    c = cell("%scellis profile mlp")
    assert c.error is None and "dispatches" in c.text and "matmul" in c.text and "GPU timestamps" in c.text
    disp = int(re.search(r"(\d+) dispatches", c.text).group(1))
    assert disp == len(ip.user_ns["mlp"].plan().step.program.steps)
    assert "% of step" in c.text and "timing: " in c.text          # measured too: a few steps, kernel by kernel
    c = cell("%scellis lr-find mlp --steps 40 --min-lr 1e-5 --max-lr 1")
    assert c.error is None and "suggested lr" in c.text
    res = ip.user_ns["mlp"].lr_find_result
    assert len(res.lrs) <= 40 and 1e-5 <= res.suggestion <= 1
    cell("%scellis train mlp --steps 5 --wait")
    c = cell("%scellis runs")
    assert ip.user_ns["mlp"].run.run_id in c.text and "finished" in c.text
    c = cell(f"%scellis show {ip.user_ns['mlp'].run.run_id}")
    assert c.mime(RUN_MIME)[0]["run"] == ip.user_ns["mlp"].run.run_id
    c = cell("%scellis catalog optimizer")
    assert "adamw" in c.text and "sgd" in c.text
    assert "unknown catalog kind" in _usage(cell("%scellis catalog optimiser"))


def test_widgets_get_the_objects_and_callbacks_when_installed(ip, cell, monkeypatch):
    """With a widgets module importable, display.py hands it the Plan and callbacks that really work."""
    import sys
    import types
    got = {}

    class Rec:
        def __init__(self, kind):
            self.kind = kind

        def __call__(self, *a, **kw):
            got[self.kind] = (a, kw)
            return types.SimpleNamespace(_repr_mimebundle_=lambda **k: {"text/plain": self.kind},
                                         follow=lambda *a, **kw: got.setdefault("follow", (a, kw)))

    mod = types.ModuleType("scellis_jupyter.jupyter.widgets")
    for k in ("PlanView", "GraphView", "RunPanel", "LossCurve", "CatalogBrowser", "LRFinderView"):
        setattr(mod, k, Rec(k))
    monkeypatch.setitem(sys.modules, "scellis_jupyter.jupyter.widgets", mod)
    import scellis_jupyter.jupyter as pkg
    monkeypatch.setattr(pkg, "widgets", mod, raising=False)
    cell(DATA)
    assert cell(MLP).error is None
    (plan,), kw = got["PlanView"]
    assert plan.verdict == "green" and callable(kw["on_fix"])
    (info,), kw = got["GraphView"]
    assert [n["id"] for n in info["nodes"]] == ["hidden", "1.relu", "logits"]
    new_info, text = kw["on_edit"]({"action": "set", "node": "hidden", "key": "out", "value": 48})
    assert new_info["nodes"][0]["shape"] == [48] and text.startswith("%%scellis mlp\n") and "out = 48" in text
    assert ip.user_ns["mlp"].spec.graph.param_count == 64 * 48 + 48 + 48 * 10 + 10
    cap = int(ip.user_ns["mlp"].plan(batch_size=8).peak_bytes) + 1     # batch 8 fits (yellow), 32 does not
    cell(f"%scellis plan mlp --memory {cap}")
    (plan,), kw = got["PlanView"]
    assert plan.verdict == "red"
    i = next(j for j, f in enumerate(plan.fixes) if f.kind == "batch_size")
    new_plan, text = kw["on_fix"](i)
    assert new_plan.peak_bytes < plan.peak_bytes and new_plan.verdict != "red"
    assert text is None                      # a `%scellis plan` line's own cell is not the spec's cell
    assert f"batch_size = {plan.fixes[i].settings['batch_size']}" in ip.user_ns["mlp"].cell_text()
    assert ip.user_ns["mlp"].spec.recipe["batch_size"] == plan.fixes[i].settings["batch_size"]
    assert cell(MLP).error is None        # the cell's own spec again (32 hidden units): its capacity likewise
    cap = int(ip.user_ns["mlp"].plan(batch_size=8).peak_bytes) + 1
    cell(MLP.replace("%%scellis mlp", f"%%scellis mlp --memory {cap}"))     # the cell planned at that capacity
    (plan,), kw = got["PlanView"]
    assert plan.verdict == "red"
    i = next(j for j, f in enumerate(plan.fixes) if f.kind == "batch_size")
    new_plan, text = kw["on_fix"](i)
    assert new_plan.verdict != "red" and text.startswith(f"%%scellis mlp --memory {cap}\n")
    assert f"batch_size = {plan.fixes[i].settings['batch_size']}" in text
    cell("%scellis train mlp --steps 5 --wait")
    assert "RunPanel" in got and got["follow"][0][0] is ip.user_ns["mlp"].run


def test_real_widgets_show_and_the_panel_keeps_the_pin(ip, cell):
    """With the widgets installed, each magic shows the live widget and, as the next output, its static form
    (text/plain + text/html, marked for the view to hide); a run's panel's static output carries the run's
    pin once it ends (so a notebook saved without `wait` keeps it)."""
    view = "application/vnd.jupyter.widget-view+json"

    def pairs(c):
        """(widget kind, its static twin) for every widget output: the static one comes right after it."""
        out = []
        for i, o in enumerate(c.outputs):
            if view in o:
                twin = c.outputs[i + 1]
                assert view not in twin and 'data-scellis-static="' in twin["text/html"], twin.keys()
                out.append((o["text/plain"].split()[0], twin))
        return out
    cell(DATA)
    c = cell(MLP)
    assert [k for k, _ in pairs(c)] == ["GraphView", "PlanView"]
    assert all(tw["text/plain"].split(":")[0].split()[0] == k for k, tw in pairs(c))
    c = cell("%scellis train mlp --steps 5 --wait")
    assert c.error is None, c.error
    run_id = ip.user_ns["mlp"].run.run_id
    statics = [o for o in c.outputs if view not in o and o.get("text/plain", "").startswith("RunPanel")]
    assert any(o.get(RUN_MIME, {}).get("run") == run_id and o[RUN_MIME]["state"] == "finished" for o in statics)
    assert "LossCurve" in [k for k, _ in pairs(c)]
    c = cell("%scellis catalog optimizer")
    (k, twin), = pairs(c)
    assert k == "CatalogBrowser" and "adamw" in twin["text/plain"]
    c = cell("%scellis lr-find mlp --steps 20")
    assert [k for k, _ in pairs(c)] == ["LRFinderView"]


def test_one_click_resume_in_the_panel_is_followed_by_the_curve(ip, cell):
    """The RunPanel's resume button (on_resume = the handle's resume) rebinds the panel; the LossCurve shown
    beside it follows the resumed run too, and the panel's pin becomes the resumed run's."""
    import scellis_jupyter.jupyter.display as show
    shown = []
    cell(DATA)
    cell(MLP)
    m = ip.user_ns["mlp"]
    br = m.train(steps=3000)
    panel, curve = show.show_training(br, shown.append, on_resume=m.resume)
    while br.step < 5:
        time.sleep(0.02)
    assert panel.act("stop") is None
    br.wait(60)
    assert br.state == "interrupted" and panel.state == "interrupted"
    assert panel.act("resume_run") is None
    nb = m.run
    assert nb is not br and panel.run is nb
    nb.wait(120)
    assert nb.state == "finished" and panel.state == "finished"
    arrays = curve.store.arrays()
    steps = arrays[(nb.run_id, "loss")][0]
    assert len(steps) > 0 and steps[-1] == 3000 and arrays[(br.run_id, "loss")][0][-1] < 3000
    assert panel.extra_mime[RUN_MIME]["run"] == nb.run_id and panel.extra_mime[RUN_MIME]["state"] == "finished"


def test_model_cells_say_the_cpu_banner_and_the_tier_note_once(ip, cell, monkeypatch):
    """On a machine without a GPU adapter, three model cells (one asking for the reference device by name) say
    the not-a-GPU banner and the default-tier note once between them, and the tier note is a whole sentence."""
    import importlib
    dev = importlib.import_module("scellis_jupyter.backends.device")
    det = importlib.import_module("scellis_jupyter.determinism")
    monkeypatch.setattr(dev, "_CACHE", {"all": [dev._reference()]})      # no wgpu adapter: auto takes the CPU
    monkeypatch.setitem(det._state, "told", False)
    monkeypatch.delenv("SCELLIS_DEVICE", raising=False)
    cell(DATA)
    notes = []
    for code in (MLP, MLP.replace("%%scellis mlp", "%%scellis other"),
                 MLP.replace("%%scellis mlp", "%%scellis named") + '[plan]\ndevice = "reference"\n'):
        c = cell(code)
        assert c.error is None, c.error
        notes += [o["text/plain"] for o in c.outputs if "scellis-note" in o.get("text/html", "")]
    banners = [n for n in notes if "NOT a GPU" in n]
    tiers = [n for n in notes if "no determinism tier named" in n]
    assert len(banners) == 1 and len(tiers) == 1, notes
    assert not tiers[0].rstrip().endswith("..."), tiers[0]
    assert 'determinism = "prod"' in tiers[0] and "--tier" in tiers[0] and "sc.set_tier" in tiers[0], tiers[0]


def test_the_not_a_gpu_banner_is_a_note_in_a_notebook_and_stderr_after_unload(ip, cell, monkeypatch, capsys):
    """In a kernel, stderr renders as a red error box; the CPU-path banner is information, so with the extension
    loaded it is a displayed note (text/plain + neutral text/html), and back on stderr once unloaded."""
    import importlib
    dev = importlib.import_module("scellis_jupyter.backends.device")
    det = importlib.import_module("scellis_jupyter.determinism")
    monkeypatch.setattr(dev, "_CACHE", {})                   # the banner is said once per pick: pick afresh
    monkeypatch.setitem(det._state, "told", False)           # and the default-tier note once per process
    cell(DATA)
    c = cell(MLP)
    assert c.error is None, c.error
    assert "NOT a GPU" not in c.stderr and "no determinism tier named" not in c.stderr
    notes = [o for o in c.outputs if "scellis-note" in o.get("text/html", "")]
    texts = [o["text/plain"] for o in notes]
    assert any("NOT a GPU (as asked)" in t for t in texts) and any("no determinism tier named" in t for t in texts)
    assert all("#cf222e" not in o["text/html"] for o in notes)          # neutral, not the error red
    ip.run_line_magic("unload_ext", "scellis_jupyter")
    monkeypatch.setattr(dev, "_CACHE", {})
    dev.device()
    assert "NOT a GPU (as asked)" in capsys.readouterr().err           # a script or the CLI: stderr
    ip.run_line_magic("load_ext", "scellis_jupyter")


def test_a_dataframe_without_the_target_column_points_at_the_cells_line(cell):
    cell("import pandas as pd\ndf = pd.DataFrame({'a': [1.0, 2.0, 3.0], 'b': [0.5, 0.1, 0.2], 'labels': [0, 1, 0]})")
    code = ('%%scellis frame\n[data]\ntrain = "df"\ntarget = "label"\n[model]\nnodes = [{ op = "linear", out = 2 }]\n'
            '[recipe]\nbatch_size = 2\n')
    msg = _usage(cell(code))
    assert "has no column 'label'" in msg and "did you mean 'labels'" in msg
    line, _ = _cell_line(msg, code)
    assert line.split("=")[0].strip() in ("train", "target"), (msg, line)


def test_widget_and_magic_actions_on_a_failed_run_are_refused_with_the_reason(ip, cell):
    """A run that dies (sgd at lr 100 diverges: the engine fails it, run-diverged): the panel refuses every
    button with the reason and the magics refuse stop; nothing is sent to the dead run."""
    import scellis_jupyter.jupyter.display as show
    cell(DATA)
    assert cell(MLP.replace("%%scellis mlp", "%%scellis boom").replace(
        '{ name = "adam", lr = 0.01 }', '{ name = "sgd", lr = 100 }')).error is None
    c = cell("%scellis train boom --steps 500 --wait")
    m = ip.user_ns["boom"]
    assert m.run.state == "failed", (m.run.state, c.error)
    panel, _curve = show.show_training(m.run, lambda w: None, on_resume=m.resume)
    assert panel.state == "failed"
    for action in ("stop", "pause", "resume", "checkpoint"):
        got = panel.act(action)                     # and why it ended, in one line
        assert got.startswith(f"the run is failed: nothing to {action} (it ended: error[") and "\n" not in got, got
        assert "diverged" in got, got
    assert panel.act("resume_run") == "only an interrupted run can be resumed from here"
    assert panel.notice == "only an interrupted run can be resumed from here" and panel.run is m.run
    msg = _usage(cell("%scellis stop boom"))
    assert "is failed" in msg


def test_runs_and_show_say_the_index_is_damaged(ip, cell, tmp_path):
    """Issue 36 item 5: an index row the objects contradict is said before `%scellis runs`/`show` answer."""
    import sqlite3
    from scellis_jupyter.store import Store
    s = Store.open(tmp_path / "store")
    h = s.start_run(spec_hash="spec")
    h.finish()
    c = cell("%scellis runs")
    assert h.id in c.text and "index-damaged" not in c.text
    with sqlite3.connect(s.root / "index.sqlite") as db:
        db.execute("UPDATE runs SET state = 'failed'")
    for c in (cell("%scellis runs"), cell(f"%scellis show {h.id}")):
        assert "error[index-damaged]" in c.text and "fsck --rebuild-index" in c.text and "says finished" in c.text
