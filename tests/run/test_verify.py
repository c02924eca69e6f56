"""`scellis verify` / `sc.verify`: a finished run re-executed from the store on the reference path.

Debug runs on the reference device must match bit for bit (weights hash, every loss, metrics, measured
peak); prod runs and wgpu runs within the declared tolerance (determinism.TOLERANCE: prod 1e-5 relative).
Each check is shown to fail when its input is changed: an edited CSV (named), a deleted one, a corrupt
checkpoint, a record whose result differs, a loss off by more than the tolerance.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.cli import main
from scellis_jupyter.store import Store
from scellis_jupyter.run.verify import VerifyError

from fixtures.devices import WG


SPEC = """
name = "blobs"
[data]
dataset = "blobs.csv"
target = "y"
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { op = "dropout", p = 0.2 }, { op = "linear", out = 3 }]
[recipe]
optimizer = { name = "adamw", lr = 1e-2 }
epochs = 3
batch_size = 16
metrics = ["accuracy"]
determinism = "TIER"
"""


@pytest.fixture
def project(tmp_path):
    """A spec beside its CSV (150 rows, 3 Gaussian blobs in 4-D); returns (spec path, csv path, store path)."""
    rng = np.random.default_rng(3)
    y = np.repeat(np.arange(3), 50)
    x = rng.standard_normal((150, 4)) + 2.0 * np.eye(3, 4)[y]
    rows = "".join(",".join(f"{v:.5f}" for v in xi) + f",{yi}\n" for xi, yi in zip(x, y))
    (tmp_path / "blobs.csv").write_text("a,b,c,d,y\n" + rows)
    (tmp_path / "spec.toml").write_text(SPEC.replace("TIER", "debug"))
    return tmp_path / "spec.toml", tmp_path / "blobs.csv", tmp_path / "st"


def _tamper(store: Store, run_id: str, **extra) -> None:
    """Point the run at a record whose result fields differ (as if another engine had written it)."""
    rec = store.get_run(run_id)
    d = rec.to_json()
    d["extra"].update(extra)
    store.index.update_run(run_id, record=store.put_json(d, kind="run-record"))


def test_debug_run_verifies_bit_for_bit_and_each_change_is_caught(project, capsys):
    spec, csv, st = project
    run = sc.train(str(spec), store=st, device="reference", progress=False, checkpoint_every=5)
    v = sc.verify(run.run_id, store=st)
    assert v.ok and v.mode == "exact", v.lines()
    names = {c.name for c in v.checks}
    assert {"spec", "checkpoints", "dataset", "split", "program", "steps", "weights", "loss history", "metrics",
            "measured peak"} <= names
    assert v.rerun["weights_hash"] == run.weights_hash()
    assert main(["verify", run.run_id, "--store", str(st), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["differences"] == []

    store = Store.open(st)
    _tamper(store, run.run_id, weights_hash="0" * 64)           # a record whose result differs
    assert main(["verify", run.run_id, "--store", str(st)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("DOES NOT VERIFY") and "FAIL weights: hash" in out and "recorded 000000000000" in out
    _tamper(store, run.run_id, weights_hash=run.weights_hash())

    ck = store.get_run(run.run_id).checkpoints[1]["hash"]       # a flipped byte in an intermediate checkpoint
    m = store.get_json(ck)["weights"]
    p = st / "objects" / m[:2] / m[2:]
    b = bytearray(p.read_bytes())
    b[-3] ^= 0x40
    p.write_bytes(bytes(b))
    v = sc.verify(run.run_id, store=st)
    assert not v.ok and [c.name for c in v.differences] == ["checkpoints"]
    assert f"corrupt: {ck[:12]} (step 10)" in v.differences[0].detail


def test_a_changed_or_missing_csv_is_named(project, capsys):
    spec, csv, st = project
    run = sc.train(str(spec), store=st, device="reference", progress=False)
    lines = csv.read_text().splitlines(keepends=True)
    lines[40] = lines[40].replace(lines[40].split(",")[0], "9.99999", 1)   # one value of row 40
    csv.write_text("".join(lines))
    assert main(["verify", run.run_id, "--store", str(st)]) == 1
    out = capsys.readouterr().out
    (line,) = [l for l in out.splitlines() if "FAIL dataset" in l]
    assert f"{csv} changed" in line and "BLAKE3" in line
    assert "weights" not in out                                   # nothing re-executed on other data
    os.remove(csv)
    v = sc.verify(run.run_id, store=st)
    assert not v.ok and any(f"{csv} is gone" in c.detail for c in v.differences)
    assert any(f"{spec}:4:11" in c.detail for c in v.differences)    # the spec line naming the dataset


def test_a_resumed_run_verifies_from_its_start_checkpoint(project, monkeypatch):
    spec, csv, st = project
    monkeypatch.chdir(spec.parent)
    first = sc.train(Path(spec.name), store=st, device="reference", progress=False, steps=7)   # a relative path
    monkeypatch.chdir(spec.parent.parent)                        # the record finds the data from anywhere
    rest = sc.resume(first.run_id, store=st, steps=15, progress=False)
    v = sc.verify(rest.run_id, store=st)
    assert v.ok and v.rerun["steps"] == 15 and v.rerun["weights_hash"] == rest.weights_hash(), v.lines()


def test_prod_tier_is_compared_within_its_tolerance(project):
    spec, csv, st = project
    spec.write_text(SPEC.replace("TIER", "prod"))
    run = sc.train(str(spec), store=st, device="reference", progress=False)
    v = sc.verify(run.run_id, store=st)
    assert v.ok and v.mode == "tolerance" and v.tolerance == 1e-5, v.lines()
    store = Store.open(st)
    loss = list(run.loss_history)
    loss[3] *= 1 + 1e-7                                           # inside 1e-5
    _tamper(store, run.run_id, loss_history=loss)
    assert sc.verify(run.run_id, store=st).ok
    loss[3] *= 1 + 1e-4                                           # outside
    _tamper(store, run.run_id, loss_history=loss)
    v = sc.verify(run.run_id, store=st)
    assert [c.name for c in v.differences] == ["loss history"]


def test_the_printed_tolerance_is_the_one_checked(project, capsys):
    spec, csv, st = project
    spec.write_text(SPEC.replace("TIER", "prod"))
    run = sc.train(str(spec), store=st, device="reference", progress=False, steps=12)
    assert main(["verify", run.run_id, "--store", str(st)]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    v = sc.verify(run.run_id, store=st)
    (w,) = [c for c in v.checks if c.name == "weights"]
    checked = w.detail.split("(tolerance ")[1].split()[0]           # the bound the weights check applied
    assert checked == f"{12 * 1e-5:.3g}" and v.final_tolerance == pytest.approx(12 * 1e-5)
    assert f"within {checked} after 12 steps" in head and "t x 1e-05" in head, head
    assert "(tolerance 1e-05)" not in head
    (loss,) = [c for c in v.checks if c.name == "loss history"]
    step = int(loss.detail.split(" at step ")[1].split()[0])
    assert f"(allowed {step * 1e-5:.3g})" in loss.detail            # step t's loss: t x the per-step bound


@pytest.mark.skipif(WG is None and not os.environ.get("CI"), reason="no wgpu adapter")
def test_a_wgpu_run_verifies_on_the_reference_path_within_tolerance(project):
    spec, csv, st = project
    # the cross-device gap grows with the steps (measured here: the largest loss/metric error is ~6e-6 after
    # 6 steps, ~1.5e-5 after 12, ~3e-5 after 30): prod's 1e-5 per step, times the steps taken, holds it
    run = sc.train(str(spec), store=st, device=WG, progress=False, steps=30)
    v = sc.verify(run.run_id, store=st)
    assert v.ok and v.mode == "tolerance" and v.tolerance == 1e-5 and v.device.startswith("reference"), v.lines()
    assert "program" not in {c.name for c in v.checks}            # compiled for another backend
    (w,) = [c for c in v.checks if c.name == "weights"]
    assert w.detail.startswith("relative error ") and 0 < float(w.detail.split()[2]) <= 30 * 1e-5
    tight = sc.verify(run.run_id, store=st, tolerance=1e-8)      # not the same numbers: a tighter bound fails
    assert not tight.ok and {"weights", "loss history"} <= {c.name for c in tight.differences}


def test_unfinished_runs_are_bad_input(project, capsys):
    spec, csv, st = project
    with pytest.raises(sc.ScellisError):
        sc.train(str(spec), store=st, device="reference", progress=False, memory=1000)
    (refused,) = sc.runs(st)
    with pytest.raises(VerifyError) as e:
        sc.verify(refused.id, store=st)
    assert "refused" in e.value.diagnostic.message
    assert main(["verify", refused.id, "--store", str(st)]) == 2
    assert capsys.readouterr().err.startswith("error[verify] at run ")
    assert main(["verify", "run-none", "--store", str(st)]) == 2


def test_a_missing_final_checkpoint_does_not_verify(project, capsys):
    """gc never collects a run's final checkpoint, so its weights object gone is a failure, not 'collected'."""
    spec, csv, st = project
    run = sc.train(str(spec), store=st, device="reference", progress=False, checkpoint_every=5)
    store = Store.open(st)
    store.gc(grace_s=0)                                          # intermediates go: still verifies
    v = sc.verify(run.run_id, store=st)
    (ck,) = [c for c in v.checks if c.name == "checkpoints"]
    assert v.ok and "collected by gc" in ck.detail, v.lines()
    rec = store.get_run(run.run_id)
    final = rec.checkpoints[-1]
    m = store.get_json(final["hash"])["weights"]
    (st / "objects" / m[:2] / m[2:]).unlink()
    assert main(["verify", run.run_id, "--store", str(st)]) == 1
    out = capsys.readouterr().out
    (line,) = [l for l in out.splitlines() if "checkpoints:" in l]
    assert "FAIL" in line and f"final checkpoint {final['hash'][:12]} (step {final['step']})" in line, line
    assert f"{len(rec.checkpoints) - 1} collected by gc;" in line      # the final one is not counted as collected


@pytest.mark.parametrize("tol", ["inf", "1e309"])
def test_a_tolerance_that_is_not_finite_is_bad_input(project, capsys, tol):
    """An infinite tolerance would pass anything: the command line and the API refuse it before re-executing."""
    spec, csv, st = project
    run = sc.train(str(spec), store=st, device="reference", progress=False, steps=3)
    capsys.readouterr()
    assert main(["verify", run.run_id, "--store", str(st), "--tolerance", tol]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error[usage] at scellis verify: argument --tolerance:") and "finite" in err, err
    with pytest.raises(VerifyError) as e:
        sc.verify(run.run_id, store=st, tolerance=float(tol))
    assert "finite" in e.value.diagnostic.message and e.value.diagnostic.where == "verify"
    from scellis_jupyter.jupyter.records import verify_notebook
    with pytest.raises(VerifyError):                           # the notebook form: refused up front too
        verify_notebook(spec.parent / "none.ipynb", store=st, tolerance=float(tol))
