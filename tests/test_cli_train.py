"""`scellis train / resume` as a user runs them, each in a new process (`python -m scellis_jupyter.cli`).

Exact resume: `train --steps 2N` against `train --steps N` then `resume RUN --steps 2N`, compared bit for
bit (weights hash, every loss, every weight array) on the reference device and on wgpu (llvmpipe).
Bad input: a refused plan (exit 3, recorded), spec and data errors (exit 2, file:line[:col]), unknown or
foreign checkpoints, and a read-only or full store (simulated EROFS/ENOSPC in the child process, as
tests/store does at the object layer): a clear diagnostic, no traceback, and a store that still
verifies object by object and resumes.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.store import Store

from fixtures import spec_text
from fixtures.devices import needs_wgpu

ROOT = str(Path(sc.__file__).resolve().parent.parent)

SPEC = spec_text("digits_mlp_small")
N = 12          # mid-epoch (22 batches per epoch); 2N crosses the epoch end and its evaluation


def cli(*args: str, code: str | None = None, env: dict | None = None, timeout: float = 300):
    """Run the CLI (or `code` with argv) in a fresh process on the checked-out package."""
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    e.setdefault("SCELLIS_DEVICE", "reference")
    e.update(env or {})
    argv = [sys.executable] + (["-c", code] if code else ["-m", "scellis_jupyter.cli"]) + list(args)
    return subprocess.run(argv, capture_output=True, text=True, env=e, timeout=timeout)


def ok_json(r) -> dict:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)                       # exactly one JSON object on stdout


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    (d / "mlp.toml").write_text(SPEC)
    return d / "mlp.toml"


@pytest.fixture(scope="module")
def whole(spec_file, tmp_path_factory):
    """One uninterrupted run of 2N steps on the reference device: (its result, its store)."""
    store = tmp_path_factory.mktemp("whole") / "st"
    return ok_json(cli("train", str(spec_file), "--store", str(store), "--steps", str(2 * N), "--json")), store


def test_train_json_result(whole):
    r, store = whole
    assert {"run", "state", "steps", "final_checkpoint", "weights_hash", "metrics", "loss_history",
            "measured_peak_bytes", "predicted_peak_bytes", "device", "tier"} <= set(r)
    assert r["state"] == "finished" and r["steps"] == 2 * N == len(r["loss_history"])
    assert r["device"]["backend"] == "reference" and r["tier"] == "debug"
    assert {"val_accuracy", "test_accuracy", "test_loss"} <= set(r["metrics"])      # test metrics included
    assert r["metrics"]["loss"] == r["loss_history"][-1]
    assert r["measured_peak_bytes"] == r["predicted_peak_bytes"] > 0
    st = Store.open(store, create=False)
    ck = st.load_checkpoint(r["final_checkpoint"])
    assert ck.step == 2 * N and ck.extra["loss_history"] == r["loss_history"]
    rec = st.get_run(r["run"])
    assert rec.state == "finished" and rec.last_checkpoint == r["final_checkpoint"]


def test_train_readable_progress(spec_file, tmp_path):
    r = cli("train", str(spec_file), "--store", str(tmp_path / "st"), "--steps", "30")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("run run-") and "30 steps (22 per epoch)" in lines[0] and "plan " in lines[0]
    steps = [int(l.split()[1].split("/")[0]) for l in lines if l.startswith("step ")]
    assert steps == [3, 6, 9, 12, 15, 18, 21, 22, 24, 27, 30]      # every 3 steps, plus the epoch's evaluation
    assert "val accuracy" in next(l for l in lines if l.startswith("step 22/30"))
    assert any(l.startswith("finished run-") for l in lines)
    assert any("test_accuracy" in l for l in lines) and any(l.strip().startswith("verify: scellis verify")
                                                                 for l in lines)



def test_progress_lines_and_show_count_epochs_alike(spec_file, tmp_path):
    """Training's last progress line and `show`'s line for the final checkpoint name the same epoch (1-based:
    step 24 of 22-step epochs is in epoch 2)."""
    import re
    store = tmp_path / "st"
    out = cli("train", str(spec_file), "--store", str(store), "--steps", "24")
    assert out.returncode == 0, out.stderr
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("step ")][-1]
    trained = int(re.search(r"epoch (\d+)", last).group(1))
    run = re.search(r"(run-[0-9]{8}-[0-9]{6}-[0-9a-f]+)", out.stdout).group(1)
    shown = cli("show", run, "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    assert int(re.search(r"step 24 +epoch (\d+)", shown.stdout).group(1)) == trained == 2, (last, shown.stdout)


def test_resuming_a_finished_run_without_steps_names_what_was_typed(spec_file, tmp_path):
    """A run that went to its spec's end, resumed with no --steps: the refusal points at `resume RUN` (not at a
    --steps the user never gave), and its hint says how to continue the run."""
    store = tmp_path / "st"
    r = ok_json(cli("train", str(spec_file), "--store", str(store), "--epochs", "1", "--json"))
    out = cli("resume", r["run"], "--store", str(store))
    assert out.returncode == 2, out.stdout + out.stderr
    first = out.stderr.strip().splitlines()[0]
    assert first.startswith(f"error[run] at resume {r['run']}:") and "--steps" not in first, first
    assert f"--steps {2 * r['steps']}" in out.stderr
    assert "Traceback" not in out.stderr

@pytest.mark.parametrize("device", ["reference", pytest.param("wgpu", marks=needs_wgpu)])
def test_exact_resume_in_new_processes(spec_file, whole, tmp_path, device):
    if device == "reference":
        full = whole[0]
    else:
        full = ok_json(cli("train", str(spec_file), "--store", str(tmp_path / "w"), "--steps", str(2 * N),
                           "--json", "--device", device))
    st = tmp_path / "st"
    half = ok_json(cli("train", str(spec_file), "--store", str(st), "--steps", str(N), "--json", "--device", device))
    assert half["steps"] == N and half["loss_history"] == full["loss_history"][:N]
    rest = ok_json(cli("resume", half["run"], "--store", str(st), "--steps", str(2 * N), "--json"))
    assert rest["device"]["backend"] == device                # the run's own device, without being told
    assert rest["steps"] == 2 * N and rest["run"] != half["run"]
    assert rest["loss_history"] == full["loss_history"]       # == on floats: bit for bit
    assert rest["weights_hash"] == full["weights_hash"]
    a = Store.open(st, create=False).load_checkpoint(rest["final_checkpoint"])
    b = Store.open(whole[1] if device == "reference" else tmp_path / "w", create=False).load_checkpoint(
        full["final_checkpoint"])
    assert sorted(a.weights) == sorted(b.weights)
    for k in a.weights:
        assert np.array_equal(a.weights[k], b.weights[k]), k
    for p in a.optimizer_state:
        for s in a.optimizer_state[p]:
            assert np.array_equal(a.optimizer_state[p][s], b.optimizer_state[p][s]), (p, s)
    runs = {r["run"]: r for r in json.loads(cli("runs", "--store", str(st), "--json").stdout)}
    assert runs[half["run"]]["resumed_by"] == rest["run"]


def test_red_plan_is_refused_before_compute(spec_file, tmp_path):
    r = cli("train", str(spec_file), "--store", str(tmp_path / "st"), "--memory", "1000", "--json")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "error[plan-red]" in r.stderr and "1000" in r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "refused" and out["error"]["code"] == "plan-red"
    runs = json.loads(cli("runs", "--store", str(tmp_path / "st"), "--json").stdout)
    assert [(x["run"], x["state"], x["last_checkpoint"]) for x in runs] == [(out["run"], "refused", None)]
    rec = json.loads(cli("show", out["run"], "--store", str(tmp_path / "st"), "--json").stdout)
    assert rec["checkpoints"] == [] and rec["measured_peak_bytes"] is None and rec["plan"]["verdict"] == "red"


def test_bad_spec_and_data_exit_2_naming_file_and_line(tmp_path):
    typo = tmp_path / "typo.toml"
    typo.write_text(SPEC.replace("batch_size = 64", "batch_sise = 64"))
    r = cli("train", str(typo), "--store", str(tmp_path / "st"))
    line = SPEC.splitlines().index("batch_size = 64") + 1
    assert r.returncode == 2 and f"{typo}:{line}:1" in r.stderr and "batch_size" in r.stderr
    missing = tmp_path / "missing.toml"
    missing.write_text(SPEC.replace('dataset = "digits"', 'dataset = "nowhere.csv"\ntarget = "y"'))
    r = cli("train", str(missing), "--store", str(tmp_path / "st"))
    line = SPEC.splitlines().index('dataset = "digits"') + 1
    assert r.returncode == 2 and f"{missing}:{line}:11" in r.stderr and "nowhere.csv" in r.stderr
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b,y\n" + "".join(f"{i},{'oops' if i == 7 else i % 3},{i % 2}\n" for i in range(40)))
    bad = tmp_path / "bad.toml"
    bad.write_text(SPEC.replace('dataset = "digits"', 'dataset = "rows.csv"\ntarget = "y"')
                   .replace("out = 10", "out = 2").replace("batch_size = 64", "batch_size = 4"))
    r = cli("train", str(bad), "--store", str(tmp_path / "st"))
    assert r.returncode == 2, r.stderr
    assert f"{csv}:9" in r.stderr and "'b'" in r.stderr and "oops" in r.stderr and "Traceback" not in r.stderr
    assert "error[spec]" in cli("train", str(tmp_path / "none.toml")).stderr


def test_unknown_checkpoint_suggests_close_prefix(whole):
    r, store = whole
    h = r["final_checkpoint"]
    wrong = h[:7] + ("0" if h[7] != "0" else "1") + h[8:14]
    out = cli("resume", wrong, "--store", str(store))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"error[store-unknown]" in out.stderr and f"no checkpoint {wrong!r}" in out.stderr
    assert "did you mean" in out.stderr and h[:12] in out.stderr
    out = cli("resume", r["run"][:-1] + "x", "--store", str(store))
    assert out.returncode == 2 and "error[run-unknown]" in out.stderr and r["run"] in out.stderr
    weights = Store.open(store, create=False).load_checkpoint(h).weights_hash     # an object, not a checkpoint
    out = cli("resume", weights[:16], "--store", str(store))
    assert out.returncode == 2 and "not a checkpoint" in out.stderr


def test_checkpoint_of_another_spec_is_refused_with_diff(whole, tmp_path):
    r, store = whole
    other = tmp_path / "other.toml"
    other.write_text(SPEC.replace("lr = 3e-3", "lr = 1e-2"))
    out = cli("resume", r["final_checkpoint"][:12], "--store", str(store), "--spec", str(other), "--steps", "30")
    assert out.returncode == 2 and "error[spec-mismatch]" in out.stderr and "Traceback" not in out.stderr
    assert '-optimizer = { name = "adamw", lr = 3e-3, weight_decay = 0.01 }' in out.stderr.splitlines()
    assert '+optimizer = { name = "adamw", lr = 1e-2, weight_decay = 0.01 }' in out.stderr.splitlines()
    same = tmp_path / "same.toml"                      # comments and layout do not change the spec's hash
    same.write_text("# the same experiment\n" + SPEC)
    got = ok_json(cli("resume", r["final_checkpoint"][:12], "--store", str(store), "--spec", str(same),
                      "--steps", str(2 * N + 2), "--json"))
    assert got["steps"] == 2 * N + 2 and got["loss_history"][:2 * N] == r["loss_history"]


# a child that sees a full disk (ENOSPC) or a read-only file system (EROFS) where the store writes objects
FAULTY = r'''
import errno, os, sys, tempfile
kind, after = sys.argv[1], int(sys.argv[2])
count = [0]
real_replace, real_mkstemp = os.replace, tempfile.mkstemp
def replace(src, dst, *a, **k):
    if kind == "full" and os.sep + "objects" + os.sep in str(dst):
        count[0] += 1
        if count[0] > after:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real_replace(src, dst, *a, **k)
def mkstemp(*a, **k):
    if kind == "readonly":
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    return real_mkstemp(*a, **k)
os.replace, tempfile.mkstemp = replace, mkstemp
from scellis_jupyter.cli import main
sys.exit(main(sys.argv[3:]))
'''


def test_full_disk_mid_run_is_a_clear_error_and_the_store_resumes(spec_file, whole, tmp_path):
    st = tmp_path / "st"
    r = cli("full", "8", "train", str(spec_file), "--store", str(st), "--steps", str(2 * N),
            "--checkpoint-every", "3", code=FAULTY)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "error[store-full]" in r.stderr and "no space left" in r.stderr and "scellis gc" in r.stderr
    store = Store.open(st, create=False)
    assert store.verify() == {} and store.objects.temp_files() == []        # every object re-hashes, no debris
    (run,) = json.loads(cli("runs", "--store", str(st), "--json").stdout)
    assert run["state"] == "interrupted" and run["last_step"] == 3             # its process is gone
    got = ok_json(cli("resume", run["run"], "--store", str(st), "--steps", str(2 * N), "--json"))
    assert got["loss_history"] == whole[0]["loss_history"] and got["weights_hash"] == whole[0]["weights_hash"]


def test_read_only_store_is_a_clear_error_and_changes_nothing(spec_file, whole, tmp_path):
    st = tmp_path / "copy"
    # fold the index's write-ahead log into the database first: the -wal/-shm files come and go as this
    # process's own connections to the store close, so copying them races with garbage collection
    con = sqlite3.connect(whole[1] / "index.sqlite")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    shutil.copytree(whole[1], st, ignore=shutil.ignore_patterns("index.sqlite-wal", "index.sqlite-shm"))
    files = lambda: sorted(p.name for p in (st / "objects").rglob("*") if p.is_file())  # noqa: E731
    before, runs = files(), [x.id for x in Store.open(st, create=False).list_runs()]
    r = cli("readonly", "0", "train", str(spec_file), "--store", str(st), "--steps", "2", code=FAULTY)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "error[store-readonly]" in r.stderr and "read-only file system" in r.stderr and "--store" in r.stderr
    assert files() == before
    store = Store.open(st, create=False)
    assert store.verify() == {} and [x.id for x in store.list_runs()] == runs and whole[0]["run"] in runs
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    r = cli("train", str(spec_file), "--store", str(blocker / "st"), "--steps", "2")   # a real OS refusal
    assert r.returncode == 2 and "cannot create the store" in r.stderr and "Traceback" not in r.stderr


GAN = """
name = "gan-ring-cli"
[data]
dataset = "synthetic_ring"
n_rows = 400
[model.generator]
input = { shape = [4] }
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { op = "linear", out = 2 }]
[model.discriminator]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { op = "dropout", p = 0.2 }, { op = "linear", out = 1 }]
[recipe]
kind = "gan"
optimizer = { name = "adam", lr = 2e-3, betas = [0.5, 0.999] }
batch_size = 32
steps = 12
seed = 0
determinism = "debug"
"""


def test_gan_spec_trains_resumes_and_verifies_through_the_cli(tmp_path):
    f = tmp_path / "gan.toml"
    f.write_text(GAN)
    full = ok_json(cli("train", str(f), "--store", str(tmp_path / "w"), "--json"))
    assert full["kind"] == "gan" and full["state"] == "finished" and full["steps"] == 12
    st = str(tmp_path / "st")
    half = ok_json(cli("train", str(f), "--store", st, "--steps", "5", "--json"))
    rest = ok_json(cli("resume", half["run"], "--store", st, "--json"))
    assert rest["steps"] == 12 and rest["loss_history"] == full["loss_history"]
    assert rest["weights_hash"] == full["weights_hash"]
    text = cli("train", str(f), "--store", st, "--steps", "2")
    assert text.returncode == 0 and "d_loss" in text.stdout and "g_loss" in text.stdout, text.stdout
    v = ok_json(cli("verify", full["run"], "--store", str(tmp_path / "w"), "--json"))
    assert v["ok"] is True and v["mode"] == "exact" and not v["differences"], v
