"""No dead end after a kill (issue 12 item 3).

- A run resumed from a good checkpoint and killed (kill -9) before its own first checkpoint can be resumed
  again: from the checkpoint it started from, bit for bit as an uninterrupted run, while its parent says
  "resumed as" it and it says "resumed as" its own continuation.
- The index never names an object that is not there: every object's file is written before its row (a
  failure in between leaves an unnamed file, which gc removes), gc drops rows before files, and rows left
  dangling by a store damaged otherwise are dropped when the store is opened; `scellis resume <prefix>` of a
  checkpoint that was never written suggests no unrelated hashes.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scellis_jupyter as sc
from scellis_jupyter.store import Store, StoreError
from scellis_jupyter.store.objects import hash_bytes
from scellis_jupyter.store.runs import pid_alive

ROOT = str(Path(sc.__file__).resolve().parent.parent)
SPEC = """
name = "digits-dead-ends"
[data]
dataset = "digits"
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { op = "dropout", p = 0.1 }, { op = "linear", out = 10 }]
[recipe]
optimizer = { name = "adamw", lr = 3e-3 }
steps = 30
batch_size = 64
determinism = "debug"
"""
# resume a run in this process, register it, then wait to be killed (before any checkpoint of its own)
HANG = """
import sys, time
from scellis_jupyter.run import prepare_resume
run = prepare_resume(sys.argv[1], store=sys.argv[2], checkpoint_every=1000)
print(run.run_id, flush=True)
time.sleep(600)
"""


def env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
                SCELLIS_DEVICE="reference")


def cli(*args: str):
    return subprocess.run([sys.executable, "-m", "scellis_jupyter.cli", *args], capture_output=True, text=True,
                          env=env(), timeout=300)


def test_a_resumed_run_killed_before_its_own_checkpoint_resumes_from_where_it_started(tmp_path):
    st = tmp_path / "st"
    first = sc.Run(SPEC, store=st, device="reference")
    steps = iter(first)
    while next(steps).step < 10:
        pass
    ck = first.interrupt("stopped by the test")                 # the parent: interrupted at a good checkpoint
    steps.close()
    assert ck is not None
    p = subprocess.Popen([sys.executable, "-c", HANG, first.run_id, str(st)], stdout=subprocess.PIPE, text=True,
                         env=env())
    try:
        child = p.stdout.readline().strip()
        assert child.startswith("run-"), "the resuming child did not register"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    t0 = time.monotonic()
    while pid_alive(p.pid) and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    runs = {r["run"]: r for r in json.loads(cli("runs", "--store", str(st), "--json").stdout)}
    assert runs[first.run_id]["resume"] == f"resumed as {child}"
    killed = runs[child]
    assert killed["state"] == "interrupted" and killed["last_checkpoint"] == ck and killed["last_step"] == 10
    assert killed["resume"] == f"resume it from checkpoint {ck[:12]} with `scellis resume {child}`"
    r = cli("resume", child, "--store", str(st), "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    whole = sc.train(SPEC, steps=30, device="reference", progress=False, store=tmp_path / "whole")
    assert got["state"] == "finished" and got["steps"] == 30
    assert got["loss_history"] == whole.loss_history and got["weights_hash"] == whole.weights_hash()
    runs = {r["run"]: r for r in json.loads(cli("runs", "--store", str(st), "--json").stdout)}
    assert runs[first.run_id]["resume"] == f"resumed as {child}"          # the parent's word is unchanged
    assert runs[child]["resume"] == f"resumed as {got['run']}"


def test_the_object_file_comes_before_its_index_row(tmp_path, monkeypatch):
    s = Store.open(tmp_path / "s")
    data = b"written, then the process dies before its row"
    h = hash_bytes(data)

    def killed(*a, **k):
        raise StoreError("simulated kill between the file and the row", code="store-io")
    monkeypatch.setattr(s.index, "add_object", killed)
    with pytest.raises(StoreError):
        s.put_bytes(data, kind="checkpoint")
    monkeypatch.undo()
    assert s.objects.exists(h) and s.index.object(h) is None     # an unnamed file, never a row naming nothing
    old = time.time() - 3600
    os.utime(s.objects.path(h), (old, old))
    report = s.gc(grace_s=60)
    assert h in report.freed_objects and not s.objects.exists(h)
    fresh = s.objects.write(b"a writer that has not added its row yet")
    s.gc(grace_s=60)
    assert s.objects.exists(fresh)                                 # young unnamed files stay (grace)


def test_dangling_rows_are_dropped_on_open_and_never_suggested(tmp_path):
    st = tmp_path / "st"
    run = sc.train(SPEC, store=st, steps=4, checkpoint_every=2, device="reference", progress=False)
    s = Store.open(st)
    ghost = hash_bytes(b"a checkpoint manifest that was never written")
    s.index.add_object(ghost, "checkpoint", 123)                 # as an older engine killed mid-write left it
    s.index.add_checkpoint(ghost, run=run.run_id, step=6, epoch=0, parent=run.checkpoints[-1],
                           spec_hash=run.spec.hash, created=time.time())
    again = Store.open(st)
    assert again.dropped_rows == [ghost]
    assert again.index.object(ghost) is None and again.index.checkpoint(ghost) is None
    assert {r["hash"] for r in again.index.checkpoints()} == set(run.checkpoints)
    r = cli("resume", ghost[:12], "--store", str(st))
    assert r.returncode == 2 and "Traceback" not in r.stderr and f"no checkpoint {ghost[:12]!r}" in r.stderr
    assert "did you mean" not in r.stderr and not any(c[:12] in r.stderr for c in run.checkpoints)
    typo = run.checkpoints[-1][:12]
    typo = typo[:6] + ("0" if typo[6] != "0" else "1") + typo[7:]
    r = cli("resume", typo, "--store", str(st))                  # a typo still gets its suggestion
    assert r.returncode == 2 and f"did you mean {run.checkpoints[-1][:12]}" in r.stderr


def test_resume_falls_back_to_the_newest_checkpoint_that_verifies_and_says_which_it_skipped(tmp_path):
    st = tmp_path / "st"
    run = sc.train(SPEC, store=st, steps=12, checkpoint_every=4, device="reference", progress=False)
    s = Store.open(st)
    steps = {h: s.load_checkpoint(h).step for h in run.checkpoints}
    last, before = run.checkpoints[-1], run.checkpoints[-2]
    assert (steps[last], steps[before]) == (12, 8)
    w = s.objects.path(s.load_checkpoint(last).weights_hash)    # flip one byte of its weights
    data = bytearray(w.read_bytes())
    data[len(data) // 2] ^= 0x40
    w.write_bytes(bytes(data))
    r = cli("resume", run.run_id, "--store", str(st), "--steps", "20", "--json")
    assert r.returncode == 0, r.stderr
    assert f"skipped checkpoint {last[:12]} of run {run.run_id} (step 12)" in r.stderr and "corrupt" in r.stderr
    assert f"from checkpoint {before[:12]}, its newest that verifies" in r.stderr
    got = json.loads(r.stdout)
    whole = sc.train(SPEC, steps=20, device="reference", progress=False, store=tmp_path / "whole")
    assert got["steps"] == 20 and Store.open(st).get_run(got["run"]).extra["resumed_from"] == before
    assert got["loss_history"] == whole.loss_history and got["weights_hash"] == whole.weights_hash()
    assert s.verify([s.load_checkpoint(before).weights_hash]) == {}
    # (the resumed run's own step-12 checkpoint rewrote the same weights object, which repaired it)
    for h in run.checkpoints:                                    # none verifies: a clear error, exit 2
        m = s.objects.path(h)
        m.write_bytes(m.read_bytes()[:-1])
    bad = cli("resume", run.run_id, "--store", str(st), "--steps", "20")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert f"none of the 3 checkpoints of run {run.run_id} verifies" in bad.stderr
