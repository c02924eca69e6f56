"""ProfileView (`sc.profile(spec_or_run)`): one measured step as an icicle timeline (layer, op, kernel,
dispatch over kernel time) with its top kernels; its static form draws the same blocks without a script, and
the Python layout (static form) and the JS layout (live view) agree block for block."""
import json
import re
import subprocess
from html import unescape
from pathlib import Path

import pytest

import scellis_jupyter as sc
from scellis_jupyter.jupyter.widgets import ProfileView, WidgetError
from scellis_jupyter.jupyter.widgets.profile_view import LEVELS, color_of, icicle, top_rows

ROOT = Path(__file__).resolve().parents[2]
SPEC = """
name = "view-mlp"
[data]
dataset = "synthetic_classification"
n_rows = 128
n_features = 12
n_classes = 3
[model]
nodes = [{ name = "fc1", op = "linear", out = 20 }, { name = "act", op = "relu" }, { name = "fc2", op = "linear", out = 3 }]
[recipe]
optimizer = { name = "adamw", lr = 1e-2 }
batch_size = 8
determinism = "debug"
"""


@pytest.fixture(scope="module")
def prof():
    return sc.profile_spec(SPEC, device="reference", steps=1, warmup=1, top=500)


def test_sc_profile_measures_a_spec_and_shows_its_last_step(prof):
    w = sc.profile(SPEC, device="reference", steps=1, warmup=1)
    assert isinstance(w, ProfileView)
    assert len(w.timeline) == prof["dispatches"]          # the same spec dispatches the same step
    assert [d["scope"] for d in w.timeline] == [d["scope"] for d in prof["timeline"]]
    assert {"fc1", "fc1/bwd", "fc2", "loss", "optimizer"} <= {d["scope"] for d in w.timeline}
    data, md = w.static_bundle()
    assert md["scellis"]["widget"] == "ProfileView" and w._static_id in data["text/html"]
    text = data["text/plain"]
    assert text.startswith("profile of view-mlp: 1 steps of batch 8 on reference:numpy")    # the kernel table
    assert f"profile of view-mlp on reference:numpy: one step, {len(w.timeline)} dispatches" in text
    assert "% of step" in text and "layers: " in text


def test_icicle_rows_tile_the_step_and_nest(prof):
    w = ProfileView(prof, top=5)
    blocks = icicle(w.timeline)
    total = sum(d["us"] for d in w.timeline)
    for level in range(len(LEVELS)):
        row = [b for b in blocks if b["level"] == level]
        assert row[0]["x0"] == 0 and row[-1]["x1"] == pytest.approx(total)
        assert all(a["x1"] == b["x0"] for a, b in zip(row, row[1:]))
        if level:                              # inside exactly one block of the row above
            up = [b for b in blocks if b["level"] == level - 1]
            assert all(sum(p["i0"] <= c["i0"] and c["i1"] <= p["i1"] for p in up) == 1 for c in row)
    assert len([b for b in blocks if b["level"] == 3]) == len(w.timeline)
    rows = top_rows(w.timeline, 1000)
    assert sum(r["us"] for r in rows) == pytest.approx(total) and sum(r["share"] for r in rows) == pytest.approx(1)
    assert len(top_rows(w.timeline, 5)) == 5


def test_static_form_draws_blocks_with_titles_and_no_script(prof):
    w = ProfileView(prof, top=6)
    html = w.static_bundle()[0]["text/html"]
    assert "<script" not in html
    titles = [unescape(t) for t in re.findall(r"title='([^']*)'", html)]
    assert any(t.startswith("layer fc1/bwd: ") for t in titles)
    big = max(prof["timeline"], key=lambda d: d["us"])
    assert any(t.startswith(f"{big['kernel']} ({big['op']}, ") and big["shape"] in t for t in titles)
    assert html.count("<tr>") == 1 + 6                       # the header and the top 6 (kernel, shape) rows
    text = w._static_text()
    assert "layers: " in text and "fc1/bwd" in text
    assert f"ms timed step ({prof['loop_step_ms']:.3f} ms untimed, as the loop runs it)" in text


def test_no_timed_kernel_and_bad_input_say_so(prof):
    empty = dict(prof, timeline=[], kernels=[], method="none: the adapter does not grant 'timestamp-query'")
    w = ProfileView(empty)
    assert "no kernel was timed" in w._static_text() and "no kernel was timed" in w._static_html()
    assert "does not grant 'timestamp-query'" in unescape(w._static_html())
    with pytest.raises(WidgetError, match="measured profile"):
        ProfileView({"kernels": []})
    with pytest.raises(WidgetError, match="top=0"):
        ProfileView(prof, top=0)
    with pytest.raises(sc.ProfileError, match="cannot profile a float"):
        sc.profile(1.5)


def test_python_and_js_layouts_agree(prof, node, tmp_path):
    w = ProfileView(prof)
    (tmp_path / "tl.json").write_text(json.dumps(w.timeline))
    labels = sorted({d["kernel"] for d in w.timeline} | {d["scope"] or "(other)" for d in w.timeline}) + ["fc1/bwd ∇"]
    script = (f"import {{ icicle, colorOf }} from {json.dumps(str(ROOT / 'js/src/lib/flame.js'))};"
              "import { readFileSync } from 'node:fs';"
              f"const tl = JSON.parse(readFileSync({json.dumps(str(tmp_path / 'tl.json'))}, 'utf8'));"
              f"const labels = {json.dumps(labels)};"
              "console.log(JSON.stringify({ blocks: icicle(tl).map(b => [b.level, b.label, b.i0, b.i1]),"
              " colors: labels.map(colorOf) }));")
    r = subprocess.run([*node[0], "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["blocks"] == [[b["level"], b["label"], b["i0"], b["i1"]] for b in icicle(w.timeline)]
    assert got["colors"] == [color_of(s) for s in labels]


def test_sc_profile_of_a_recorded_run_and_of_its_id(tmp_path):
    run = sc.train(SPEC, store=tmp_path / "st", device="reference", steps=2, progress=False)
    w = sc.profile(run, steps=1, warmup=1)
    assert w.info["run"] == run.run_id and w.info["device"].startswith("reference")
    assert f"(run {run.run_id})" in w._static_text()
    again = sc.profile(run.run_id[:14], store=tmp_path / "st", steps=1, warmup=1)
    assert again.info["run"] == run.run_id
    assert [d["scope"] for d in again.timeline] == [d["scope"] for d in w.timeline]
