"""The examples in notebooks/ run headless with a small step budget and print (and store) what they claim.

Each script runs in a fresh process (`python notebooks/<name>.py`) on the reference device with
SCELLIS_EXAMPLE_STEPS set, its store in a temporary folder. Asserted: the plan is printed before the
training lines, the last line is a `result:` JSON record whose numbers agree with each other and with
the store (a finished run record, a loadable checkpoint of what was trained), and the measured peak is
the planned one. Whether the full budgets learn is asserted in tests/train/test_gan.py and
tests/train/test_workloads.py (same models and recipes, full length).
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


def run_example(name, steps, tmp_path):
    """`python notebooks/<name>` in a fresh process, as a user runs it."""
    env = dict(os.environ, SCELLIS_EXAMPLE_STEPS=str(steps), SCELLIS_DEVICE="reference",
               SCELLIS_STORE=str(tmp_path / "store"), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(NOTEBOOKS / name)], capture_output=True, text=True, env=env,
                       timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert out.index("verdict") < out.index("result:")                  # planned before it trains
    res = json.loads(out.strip().splitlines()[-1].removeprefix("result:"))
    assert res["measured_peak_bytes"] == res["planned_peak_bytes"] > 0
    from scellis_jupyter.store import Store, list_runs
    st = Store.open(res["store"])
    (rec,) = list_runs(st)
    assert rec.id == res["run"] and rec.state == "finished"
    return out, res, st.load_checkpoint(res["checkpoint"])


def test_every_example_is_a_percent_format_notebook():
    scripts = [p for p in NOTEBOOKS.glob("*.py") if p.name != "build.py"]     # build.py writes the .ipynb files
    names = sorted(p.name for p in scripts)
    assert names == ["char_transformer.py", "cnn_digits.py", "gan_ring.py"]
    for p in scripts:
        text = p.read_text()
        assert "format_name: percent" in text and text.count("# %% [markdown]") >= 3, p.name
        code = [c for c in re.split(r"^# %%.*$", text, flags=re.M)[1:] if c.strip()]
        assert len(code) >= 6, p.name
        assert "import scellis_jupyter as sc" in text and "SCELLIS_EXAMPLE_STEPS" in text
        assert not re.search(r"scellis_jupyter\.(program|plan|backends|graph|executor)", text), p.name


def test_gan_ring_example(tmp_path):
    out, res, ck = run_example("gan_ring.py", 30, tmp_path)
    assert res["rounds"] == 30 and ck.step == 30
    assert "networks (kept on the device" in out and "held-out data" in out and "round    30" in out
    assert 0 <= res["modes"] <= 8 and 0 <= res["on_mode"] <= 1
    assert res["baseline_modes"] <= 1 and res["baseline_mmd2"] > 0.5        # the untrained generator is off
    assert {k.split("/")[0] for k in ck.weights} == {"generator", "discriminator"}
    assert ck.rng_state["positions"]["noise"] == 30 * 2 * (2 * 128 * 8)     # D and G steps, Box-Muller pairs


def test_cnn_digits_example(tmp_path):
    out, res, ck = run_example("cnn_digits.py", 30, tmp_path)
    assert res["steps"] == 30 == ck.step and 0.0 <= res["test_accuracy"] <= 1.0
    assert "confusion matrix" in out and ck.weights["0.conv2d.weight"].shape == (16, 1, 3, 3)
    m = re.search(r"first test images, predicted: \[(.*)\]  true: \[(.*)\]", out)
    assert m and len(m.group(1).split(",")) == len(m.group(2).split(",")) == 12


def test_char_transformer_example(tmp_path):
    out, res, ck = run_example("char_transformer.py", 20, tmp_path)
    assert res["steps"] == 20 == ck.step
    assert 3.0 < res["unigram"] < 3.5 and res["bigram"] < res["unigram"]
    assert res["val_perplexity"] == pytest.approx(math.exp(res["val_loss"]), rel=1e-6)
    from scellis_jupyter.data.info import pydoc_vocab
    s = res["sample"]
    assert s.startswith("The ") and len(s) == 4 + 240 and set(s) <= set(pydoc_vocab())
    assert s in out                                                         # printed, not only recorded
