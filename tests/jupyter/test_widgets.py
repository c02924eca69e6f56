"""The widgets' kernel side: series packing, throttling, follow() from a real run, fixes, refusals, and the
static text/html forms (what a notebook without a kernel shows)."""
import re
import time

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.jupyter.widgets import (CatalogBrowser, GraphView, HeatmapView, LossCurve, LRFinderView,
                                             PlanView, RunPanel, WidgetError)
from scellis_jupyter.jupyter.widgets._series import SeriesStore, pack, unpack
from scellis_jupyter.jupyter.widgets._throttle import Throttle
from scellis_jupyter.jupyter.widgets.run_panel import device_note, refusal

from run_thread import ThreadRun

MLP = "benchmarks/specs/mlp.toml"
SPEC = open(MLP).read().replace("batch_size = 64", 'batch_size = 64\nmetrics = ["accuracy"]')


def _capture(w):
    sent = []
    w.send = lambda content, buffers=None: sent.append((content, buffers))
    return sent


def test_pack_round_trip_and_chunks_carry_only_new_points():
    st = SeriesStore()
    st.extend("a", "loss", np.arange(1, 6), np.array([5, 4, np.nan, 2, 1.0]), skipped=np.array([0, 0, 1, 0, 0], bool))
    snap = unpack(st.snapshot())
    (run, name, steps, vals, sk), = snap
    assert (run, name) == ("a", "loss") and steps.tolist() == [1, 2, 3, 4, 5] and sk.tolist() == [3]
    assert np.isnan(vals[2]) and vals[4] == 1.0
    assert unpack(st.pending())[0][2].tolist() == [1, 2, 3, 4, 5]      # a snapshot sends no chunk
    assert st.pending() is None
    st.append("a", "loss", 6, 0.5)
    st.append("b", "lr", 1, 1e-3)
    chunk = unpack(st.pending())
    assert [(r, n, s.tolist()) for r, n, s, _, _ in chunk] == [("a", "loss", [6]), ("b", "lr", [1])]
    assert chunk[1][3][0] == np.float32(1e-3)
    assert st.pending() is None
    # padding: every header length mod 4 decodes
    for k in range(4):
        b = pack([("r" * (k + 1), "loss", np.array([1]), np.array([2.0]), np.array([], int))])
        assert unpack(b)[0][0] == "r" * (k + 1)


def test_throttle_first_immediate_then_about_five_a_second_and_last_kept():
    fired = []
    th = Throttle(lambda: fired.append(time.monotonic()), interval=0.2, immediate=3)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.0:
        th()
        time.sleep(0.002)
    assert fired[:3] and fired[2] - t0 < 0.05              # the first three at once
    th.flush()
    n = len(fired)
    assert 3 + 3 <= n <= 3 + 7, n                           # ~5/s over one second (plus the flush)
    gaps = np.diff(fired[3:-1])
    assert (gaps >= 0.19).all(), gaps
    time.sleep(0.3)
    assert len(fired) == n                                   # nothing left pending after a flush


def test_loss_curve_follows_a_real_run_in_chunks(tmp_path):
    curve = LossCurve(title="digits")
    sent = _capture(curve)
    run = ThreadRun(SPEC, steps=60, name="mlp", device="reference")
    curve.follow(run)
    t0 = time.time()
    run.start().wait(120)
    dt = time.time() - t0
    assert run.state == "finished"
    curve.flush()
    arrays = curve.store.arrays()
    steps, loss, _ = arrays[("mlp", "loss")]
    assert steps.tolist() == list(range(1, 61))
    np.testing.assert_allclose(loss, run.run.loss_history, rtol=1e-6)    # float32 in the buffers
    assert ("mlp", "lr") in arrays and ("mlp", "val_accuracy") in arrays and ("mlp", "val_loss") in arrays
    chunks = [unpack(b[0]) for c, b in sent if c["type"] == "append"]
    assert 1 <= len(chunks) <= 3 + 5 * dt + 2, (len(chunks), dt)          # throttled, not one per step
    got = np.concatenate([s for ch in chunks for r, n, s, _, _ in ch if n == "loss"])
    assert got.tolist() == list(range(1, 61))                             # chunks, in order, lose nothing
    assert unpack(curve._packed)[0][2].size >= 60                        # the final snapshot has it all
    text = curve.static_bundle()[0]["text/plain"]
    assert "mlp: loss: 60 points, last step 60" in text


def test_loss_curve_marks_skipped_steps_and_draws_static_svg():
    c = LossCurve()
    v = np.array([3.0, 2.0, np.inf, 1.5, np.nan, 1.0])
    c.add("r", "loss", np.arange(1, 7), v, skipped=~np.isfinite(v))
    html = c.static_bundle()[0]["text/html"]
    assert "<svg" in html and "polyline" in html and "<script" not in html
    assert html.count('stroke="#d32f2f" stroke-width="2"') == 2                 # two skipped-step ticks
    assert "2 skipped" in c._static_text()
    with pytest.raises(ValueError):
        c.add("r", "loss", np.arange(3), np.arange(4))


def test_a_100k_point_curve_saves_decimated_and_syncs_whole():
    c = LossCurve()
    sent = _capture(c)
    n = 100_000
    steps = np.arange(1, n + 1)
    vals = 1 / np.sqrt(steps)
    vals[54_321] = 50.0                                          # a spike must survive decimation
    c.add("r", "loss", steps, vals, skipped=steps == 77_777)
    html = c._static_html()
    assert len(html) < 80_000 and "<svg" in html                # the static chart is decimated too
    (_, _, s_steps, s_vals, s_skip), = unpack(c._packed)
    assert len(c._packed) < 5000 * 8 + 500 and len(s_steps) <= 5000   # the saved state stays small
    assert s_vals.max() == 50.0 and s_steps[0] == 1 and s_skip.tolist() == [77_777]
    c._on_sync({}, [])                                          # a view opened: every point, once
    kinds = [m["type"] for m, _ in sent]
    assert kinds == ["snapshot"]
    full = unpack(sent[0][1][0])[0]
    assert full[2].tolist() == steps.tolist() and 8 * n < len(sent[0][1][0]) < 8 * n + 200
    c.append("r", "loss", n + 1, 0.001)
    c._push.flush()
    c._send_pending()
    assert unpack(sent[-1][1][0])[0][2].tolist() == [n + 1]     # later chunks carry only the new point


def test_a_view_sync_while_the_run_appends_sends_each_point_once():
    """The browser's store is the last snapshot plus the chunks after it. The run thread appends at any
    moment, here each time a message goes out (as it may while a view syncs): that store must still hold
    every step exactly once (a point in both a snapshot and a later chunk was the lab test's failure)."""
    c = LossCurve()
    sent = []
    nxt = iter(range(4, 100))

    def send(content, buffers=None):
        sent.append((content, buffers))
        c.store.append("r", "loss", next(nxt), 0.5)             # the run thread, mid-sync
    c.send = send
    c.add("r", "loss", np.arange(1, 4), np.array([3.0, 2.0, 1.0]))
    c.append("r", "loss", 100, 0.1)                             # pending when the view opens
    c._on_sync({}, [])
    c._on_sync({}, [])                                          # a second view (another tab)
    c._send_pending()
    c.send = lambda content, buffers=None: sent.append((content, buffers))     # the run has ended
    c._send_pending()
    browser: list[int] = []
    for msg, bufs in sent:
        steps = [int(x) for x in unpack(bufs[0])[0][2]]
        browser = steps if msg["type"] == "snapshot" else browser + steps
    assert browser == c.store.arrays()[("r", "loss")][0].tolist()              # each point once, in order

def test_plan_view_fix_replans_and_returns_cell_text():
    memory = 240_000      # batch 64 peaks at 259.7 kB on the reference device, batch 32 at 204.9 kB
    p = sc.plan(sc.Spec.from_text(SPEC), device="reference", memory=memory)
    assert p.verdict == "red"
    i = next(k for k, f in enumerate(p.fixes) if f.kind == "batch_size" and f.settings.get("batch_size"))
    texts = []

    def on_fix(k):
        f = view.current.fixes[k]
        text = re.sub(r"batch_size = \d+", f"batch_size = {f.settings['batch_size']}", SPEC)
        texts.append(text)
        return sc.plan(sc.Spec.from_text(text), device="reference", memory=memory), text
    view = PlanView(p, on_fix=on_fix)
    before = view._static_text()
    assert view.plan["verdict"] == "red" and "Does not fit" in before
    sent = _capture(view)
    view._on_fix({"index": i, "token": "t1"}, [])
    assert sent == [({"type": "fixed", "token": "t1", "text": texts[0]}, None)]
    assert view.plan["verdict"] in ("green", "yellow") and view.plan["batch_size"] < 64
    assert view.cell_texts == texts and view.error == ""
    html = view.static_bundle()[0]["text/html"]
    assert "Fits" in html and "<svg" in html
    # a bad index is shown in the widget as a diagnostic, not raised into the kernel
    view._on_fix({"index": 99, "token": "t2"}, [])
    assert "fix 99 does not exist" in view.error and sent[-1][0]["text"] is None


def test_plan_view_yellow_says_why_and_the_cpu_path_is_the_device_line_not_a_warning():
    p = sc.plan(MLP, device="reference")
    assert p.verdict == "green" and p.warnings == []              # it fits: green, on the CPU too
    view = PlanView(p)
    assert view._static_text().startswith("PlanView GREEN: Fits: ")
    html = view.static_bundle()[0]["text/html"]
    assert p.device_note in view._static_text() and p.device_note in html and "not a GPU" in p.device_note
    tight = sc.plan(MLP, device="reference", memory=int(p.peak_bytes / 0.9))
    assert tight.verdict == "yellow"
    words = PlanView(tight)._static_text()
    assert "Fits, with a warning: little headroom" in words


def test_run_panel_refuses_actions_on_a_finished_run_and_says_why():
    run = ThreadRun(SPEC, steps=5, name="tiny", device="reference")
    panel = RunPanel(run)
    run.start().wait(60)
    time.sleep(0.05)
    assert panel.state == "finished" and panel.step == 5
    assert panel.act("stop") == "the run is finished: nothing to stop"
    assert panel.notice == "the run is finished: nothing to stop"
    assert panel.act("resume_run") == "only an interrupted run can be resumed from here"
    assert "CPU" in panel.device_note and "reference" in panel.device_label
    assert "RunPanel tiny: finished, step 5 / 5 (100%)" in panel._static_text()


def test_run_panel_stop_interrupts_and_resume_rebinds(tmp_path):
    run = ThreadRun(SPEC, steps=100_000, name="long", device="reference", store=tmp_path / "store")
    made = []

    def on_resume():
        made.append(ThreadRun(SPEC, steps=3, name="again", device="reference").start())
        return made[-1]
    panel = RunPanel(run, on_resume=on_resume)
    run.start()
    t0 = time.time()
    while panel.step < 3 and time.time() - t0 < 60:
        time.sleep(0.05)
    assert panel.act("pause") is None and panel.state == "paused"
    assert panel.act("pause") == "the run is paused"
    assert panel.act("checkpoint") is None                     # saved at the next step boundary
    assert panel.act("resume") is None
    _ck = lambda: [e for e in run._events if e["kind"] == "checkpoint"]  # noqa: E731
    t0 = time.time()
    while not _ck() and time.time() - t0 < 30:
        time.sleep(0.05)
    assert len(_ck()) == 1 and _ck()[0]["hash"] in run.run.checkpoints
    assert panel.act("stop") is None
    run.wait(30)
    time.sleep(0.1)
    assert panel.state == "interrupted" and run.run.state == "interrupted" and run.step < 100_000
    assert panel.act("resume_run") is None and panel.name == "again"
    made[0].wait(60)
    time.sleep(0.1)
    assert panel.state == "finished"
    assert refusal("interrupted", "resume_run", False) == "no resume handler was given to this panel"
    assert device_note("wgpu:NVIDIA RTX (discrete-gpu)", "debug") == ""


def test_graph_view_edits_round_trip_and_bad_edits_say_so():
    info = {"nodes": [{"id": "fc1", "op": "linear", "shape": [64, 128], "params": 8320, "attrs": {"out": 128}},
                      {"id": "relu", "op": "relu", "shape": [64, 128], "params": 0, "attrs": {}},
                      {"id": "logits", "op": "linear", "shape": [64, 10], "params": 1290, "attrs": {"out": 10}}],
            "edges": [["fc1", "relu"], ["relu", "logits"]], "input": {"shape": [64, 64]}}
    seen = []

    def on_edit(e):
        seen.append(e)
        new = {**info, "nodes": [dict(n, attrs={**n["attrs"], e["key"]: e["value"]}) if n["id"] == e.get("node") else n
                                 for n in info["nodes"]]}
        return new, "new cell text"
    g = GraphView(info, on_edit=on_edit)
    sent = _capture(g)
    g._on_edit({"edit": {"action": "set", "node": "fc1", "key": "out", "value": 256}, "token": "k"}, [])
    assert seen == [{"action": "set", "node": "fc1", "key": "out", "value": 256}]
    assert g.info["nodes"][0]["attrs"]["out"] == 256 and sent[-1][0]["text"] == "new cell text"
    g._on_edit({"edit": {"action": "remove", "node": "nope"}, "token": "k"}, [])
    assert "no node 'nope'" in sent[-1][0]["error"] and len(seen) == 1
    g._on_elk({}, [])
    assert sent[-1][0] == {"type": "elk"} and len(sent[-1][1][0]) > 1_000_000    # ELK's worker, on request only
    html = g._static_html()
    assert html.count("<rect") == 3 and "8.3k params" in html and "<path" in html
    with pytest.raises(WidgetError):
        GraphView(info).edit({"action": "set", "node": "fc1", "key": "out", "value": 1})


def test_catalog_lr_finder_heatmap_static_forms():
    from scellis_jupyter.catalog import registry
    entries = registry.list_entries()
    cb = CatalogBrowser(entries)
    text = cb._static_text()
    assert "optimizer" in text and "adamw" in text
    html = cb._static_html()
    assert "lr: float" in html and ("(0, inf)" in html or "[0, inf)" in html)

    lrs = np.logspace(-5, 0, 40)
    losses = 2 - np.exp(-((np.log10(lrs) + 2.5) ** 2))
    applied = []
    v = LRFinderView(lrs, losses, 3e-3, on_apply=lambda lr: applied.append(lr) or f"lr = {lr}")
    sent = _capture(v)
    v._on_apply({"token": "z"}, [])
    assert applied == [3e-3] and sent[-1][0] == {"type": "applied", "token": "z", "text": "lr = 0.003"}
    assert "stroke-dasharray=\"5 4\"" in v._static_html() and "suggested lr 0.003" in v._static_text()

    h = HeatmapView("lr", [1e-3, 1e-2], "batch", [32, 64, 128], "val_accuracy")
    h.set_cell(0, 1, 0.9)
    h.set_cell(2, 0, 0.5)
    assert h.values == [[None, 0.9], [None, None], [0.5, None]]
    with pytest.raises(WidgetError):
        h.set_cell(3, 0, 1.0)
    html = h._static_html()
    assert "rgb(253,231,37)" in html and "rgb(68,1,84)" in html and html.count("…") == 4


def test_run_panel_keeps_the_last_steps_per_second_and_eta_in_its_state():
    """steps/s and ETA are synced traits (a reloaded page shows them without new samples): measured over the
    recent window, close to the wall-clock rate of the run, and kept when the run ends."""
    run = ThreadRun(SPEC, steps=200, name="timed", device="reference", delay=0.01)
    panel = RunPanel(run, interval=0.05)
    assert panel.steps_per_s is None and panel.eta_s is None
    run.start()
    while panel.step < 20:
        time.sleep(0.01)
    t0, s0 = time.time(), run.step
    time.sleep(1.0)
    t1, s1 = time.time(), run.step
    wall = (s1 - s0) / (t1 - t0)                     # independent: the run's step counter against the clock
    time.sleep(0.1)                                   # the throttled push lands
    r, left, at = panel.steps_per_s, panel.eta_s, panel.step
    assert r is not None and 0.5 * wall < r < 2.0 * wall, (r, wall)
    assert left == pytest.approx((200 - at) / r, rel=0.35), (left, at, r)
    assert panel.keys.count("steps_per_s") == 1 and panel.trait_metadata("eta_s", "sync")
    run.wait(120)
    time.sleep(0.1)
    assert panel.state == "finished" and panel.steps_per_s is not None and panel.eta_s == 0.0
    assert re.search(r"\d+(\.\d+)? steps/s, done", panel._static_text()), panel._static_text()


def test_run_panel_answers_every_button_so_a_view_without_an_answer_knows_its_kernel_is_gone():
    run = ThreadRun(SPEC, steps=3, name="acked", device="reference")
    panel = RunPanel(run)
    sent = _capture(panel)
    run.start().wait(60)
    time.sleep(0.05)
    panel._dispatch(panel, {"type": "action", "action": "stop"}, [])
    assert sent[-1][0] == {"type": "ack", "action": "stop", "refusal": "the run is finished: nothing to stop"}
