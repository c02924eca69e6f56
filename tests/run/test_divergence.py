"""Non-finite steps, each way they happen (issue 11 item 7, issue 12 item 2).

- fp32, finite inputs, non-finite loss (a diverged model, here SGD at lr 5 on a regression): the run stops at
  that step with RunError run-diverged naming it, records `failed` with that reason, and its last checkpoint
  is the last good one (finite weights; no checkpoint is ever written from non-finite weights).
- fp32, a poisoned batch (non-finite inputs): skipped, training goes on (tests/run/test_run.py).
- mixed-f16: non-finite gradients from too large a loss scale are skipped by design and the scale backs off
  (GradScaler's rule); only `max_skipped_steps` of them in a row (a NaN storm) fail the run.
- `[0, inf)` parameters refuse inf and NaN at plan time, pointing at the spec's line.
- The CLI: a failed run exits 1 and `--json` prints its record (state, reason, last checkpoint) for train
  and for resume.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.run.run import Run, RunError
from scellis_jupyter.store import Store

ROOT = str(Path(sc.__file__).resolve().parent.parent)

DIVERGING = """
name = "diverging-regression"
[data]
dataset = "synthetic_regression"
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { op = "linear", out = 1 }]
[recipe]
loss = "mse"
optimizer = { name = "sgd", lr = 5.0 }
batch_size = 32
epochs = 3
determinism = "debug"
"""

DIGITS = """
name = "digits-small"
[data]
dataset = "digits"
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { name = "logits", op = "linear", out = 10 }]
[recipe]
optimizer = { name = "adamw", lr = 3e-3 }
batch_size = 64
metrics = ["accuracy"]
determinism = "debug"
"""


def cli(*args: str, timeout: float = 300):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
             SCELLIS_DEVICE="reference")
    return subprocess.run([sys.executable, "-m", "scellis_jupyter.cli", *args], capture_output=True, text=True,
                          env=e, timeout=timeout)


def test_a_diverged_fp32_run_stops_at_the_first_non_finite_loss(tmp_path):
    st = Store.open(tmp_path / "st")
    run = Run(DIVERGING, device="reference", store=st, checkpoint_every=1)
    with pytest.raises(RunError) as e:
        for _ in run:
            pass
    d = e.value.diagnostic
    n = len(run.loss_history)                       # the step that diverged is the last one tried
    assert d.code == "run-diverged" and d.where == f"step {n}" and d.details["step"] == n
    assert all(math.isfinite(v) for v in run.loss_history[:-1]) and not math.isfinite(run.loss_history[-1])
    assert f"at step {n}" in d.message and "learning rate" in d.hint
    rec = st.get_run(run.run_id)
    assert rec.state == "failed" and rec.error["code"] == "run-diverged" and rec.error["details"]["step"] == n
    assert rec.extra["stop_reason"].startswith("diverged: the loss is") and rec.extra["steps"] == n
    # the last good checkpoint stays: the one before the diverged step, with finite weights
    assert rec.last_checkpoint == d.details["last_checkpoint"] == run.checkpoints[-1]
    ck = st.load_checkpoint(rec.last_checkpoint)
    assert ck.step < n and all(np.isfinite(w).all() for w in ck.weights.values())
    assert len(run.checkpoints) == ck.step                      # one per step before it, none after


@pytest.mark.parametrize("device", ["reference", "wgpu"])
def test_mixed_precision_skips_overflowing_steps_by_design_then_a_storm_fails(device):
    """On wgpu too: its shader compilers folded the old finiteness test (sum - sum == 0) to true, so no step was
    skipped there and the weights went to inf (program/update.py `all_finite` now reads the sum's bits)."""
    spec = DIGITS + 'precision = "mixed-f16"\nloss_scale = { init = 1e18 }\n'
    run = Run(spec + "max_skipped_steps = 100\n", device=device, steps=50)
    steps = list(run)                               # no run-diverged: overflow under a huge scale is expected
    skipped = [s.skipped for s in steps]
    k, first = sum(skipped), skipped.index(False)
    assert first > 10 and all(skipped[:first]) and not skipped[-1] and run.state == "finished"
    assert all(math.isfinite(s.loss) for s in steps)           # the f32 loss is fine; the f16 gradients are not
    assert run.loss_scale == 1e18 * 0.5 ** k                    # backoff 0.5 per skipped step, no growth yet
    storm = Run(spec, device=device, steps=50)                  # the default bound: 10 in a row
    with pytest.raises(RunError) as e:
        list(storm)
    assert e.value.diagnostic.code == "run-nan-storm" and "10 steps in a row" in e.value.diagnostic.message
    assert storm.state == "failed" and storm.skipped == 10


@pytest.mark.parametrize("name,line", [
    ('augment = [{ name = "gaussian_noise", std = inf }]', "std=inf"),
    ('loss = { name = "focal", gamma = inf }', "gamma=inf"),
    ('regularizers = [{ name = "mixup", alpha = inf }]', "alpha=inf"),
    ('augment = [{ name = "gaussian_noise", std = nan }]', "std=nan"),
])
def test_open_ranges_refuse_infinity_at_plan_time_pointing_at_the_line(tmp_path, name, line):
    f = tmp_path / "s.toml"
    f.write_text(DIGITS + name + "\n")
    r = cli("plan", str(f))
    lineno = (DIGITS + name).count("\n") + 1
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error[spec] at {f}:{lineno}:" in r.stderr and line in r.stderr and "not a finite number" in r.stderr


def test_cli_failed_runs_exit_1_and_print_their_record_as_json(tmp_path):
    f = tmp_path / "d.toml"
    f.write_text(DIVERGING)
    st = tmp_path / "st"
    r = cli("train", str(f), "--store", str(st), "--checkpoint-every", "1", "--json")
    assert r.returncode == 1 and "error[run-diverged] at step" in r.stderr and "Traceback" not in r.stderr
    got = json.loads(r.stdout)                     # exactly one JSON object on stdout
    assert got["state"] == "failed" and "diverged" in got["reason"] and got["error"]["code"] == "run-diverged"
    n = got["steps"]
    assert got["reason"] == f"the run diverged: the loss is {got['loss_history'][-1]} at step {n} (its inputs are finite)"
    store = Store.open(st, create=False)
    assert got["last_checkpoint"] == store.get_run(got["run"]).last_checkpoint
    assert store.load_checkpoint(got["last_checkpoint"]).step == n - 1
    # resuming its last good checkpoint replays the same divergence: the same answer, from resume
    again = cli("resume", got["run"], "--store", str(st), "--json")
    assert again.returncode == 1, again.stderr
    res = json.loads(again.stdout)
    assert res["state"] == "failed" and res["steps"] == n and res["loss_history"] == got["loss_history"]
    assert res["last_checkpoint"] == got["last_checkpoint"]      # it saved none of its own: where it started
    text = cli("train", str(f), "--store", str(st), "--checkpoint-every", "2")
    assert text.returncode == 1 and any(l.startswith("failed run-") for l in text.stdout.splitlines())
    assert "(the last good one)" in text.stdout


def test_cli_nan_storm_is_a_failed_run(tmp_path):
    x = np.full((120, 4), np.nan, np.float32)
    np.savez(tmp_path / "nan.npz", x=x, y=np.arange(120, dtype=np.int32) % 2)
    f = tmp_path / "s.toml"
    f.write_text(f'name = "storm"\n[data]\ndataset = "{tmp_path / "nan.npz"}"\n[model]\n'
                 'nodes = [{ op = "linear", out = 2 }]\n[recipe]\nbatch_size = 8\nepochs = 3\ndeterminism = "debug"\n')
    r = cli("train", str(f), "--store", str(tmp_path / "st"), "--json")
    assert r.returncode == 1 and "error[run-nan-storm]" in r.stderr
    got = json.loads(r.stdout)
    assert got["state"] == "failed" and "NaN storm" in got["reason"] and got["skipped_steps"] == 10
