"""Detached runs: `scellis train --detach` / `sc.train(spec, detach=True)` train in their own process, the
caller gets the run id at once, and anyone follows them through the store (`scellis wait`, the handle).

A detached run killed with kill -9 reads `interrupted` and `scellis resume RUN` continues it (on the
reference device and on wgpu, llvmpipe where no GPU is present); a clean
interrupt (SIGTERM through `.interrupt()`) checkpoints first. Each continuation is compared bit for bit
(== on every loss, the weights hash) with an uninterrupted run of the same length in this process.
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
from scellis_jupyter.store.runs import pid_alive
from scellis_jupyter.run.lifecycle import WaitTimeout, read_events

from fixtures import spec_text
from fixtures.devices import needs_wgpu

ROOT = str(Path(sc.__file__).resolve().parent.parent)

SHORT = spec_text("digits_tiny")
LONG = SHORT.replace("epochs = 2", "steps = 100000")      # runs until it is stopped


def cli(*args: str, timeout: float = 300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               SCELLIS_DEVICE="reference")
    return subprocess.run([sys.executable, "-m", "scellis_jupyter.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture(autouse=True)
def reap():
    """Pids of detached runs this test started: any still alive at the end (a failed test) are killed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _events_until(path: Path, pred, timeout: float = 120.0) -> list[dict]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        evs, _ = read_events(path)
        if any(pred(e) for e in evs):
            return evs
        time.sleep(0.05)
    raise AssertionError(f"no such event in {path} after {timeout} s")


def test_cli_detach_then_wait(tmp_path, reap):
    spec = tmp_path / "s.toml"
    spec.write_text(SHORT)
    st = tmp_path / "st"
    t0 = time.monotonic()
    r = cli("train", str(spec), "--store", str(st), "--steps", "30", "--detach", "--json")
    assert r.returncode == 0, r.stderr
    started = json.loads(r.stdout)
    reap.append(started["pid"])
    assert set(started) == {"run", "state", "pid", "log"} and started["state"] in ("starting", "running")
    (listed,) = json.loads(cli("runs", "--store", str(st), "--json").stdout)     # listed at once, not seconds later
    assert listed["run"] == started["run"] and listed["state"] == "running" and listed["pid"] == started["pid"]
    assert Path(started["log"]).parent == st / "logs"
    assert time.monotonic() - t0 < 60
    w = cli("wait", started["run"][:-2], "--store", str(st))           # a prefix is enough
    assert w.returncode == 0, w.stderr + w.stdout
    lines = w.stdout.splitlines()
    assert lines[0].startswith(f"run {started['run']}: 30 steps") and any(l.startswith("step 30/30") for l in lines)
    assert any(l.startswith(f"finished {started['run']}") for l in lines)
    got = json.loads(cli("wait", started["run"], "--store", str(st), "--json").stdout)
    here = sc.train(SHORT, steps=30, device="reference", progress=False, store=tmp_path / "here")
    assert got["state"] == "finished" and got["weights_hash"] == here.weights_hash()
    assert got["loss_history"] == here.loss_history
    log = Path(started["log"]).read_text()
    assert f"detached run {started['run']}" in log and "step 30/30" in log


@pytest.mark.parametrize("device", ["reference", pytest.param("wgpu", marks=needs_wgpu)])
def test_kill_9_reads_interrupted_and_resume_continues_exactly(tmp_path, reap, device):
    spec = tmp_path / "long.toml"
    spec.write_text(LONG)
    st = tmp_path / "st"
    started = json.loads(cli("train", str(spec), "--store", str(st), "--checkpoint-every", "4", "--detach",
                             "--json", "--device", device).stdout)
    run, pid = started["run"], started["pid"]
    reap.append(pid)
    _events_until(st / "logs" / f"{run}.events.jsonl", lambda e: e.get("event") == "step" and e["step"] >= 22)
    w = cli("wait", run, "--store", str(st), "--timeout", "0.5", "--quiet")
    assert w.returncode == 124 and "error[wait-timeout]" in w.stderr and "still running" in w.stderr
    busy = cli("resume", run, "--store", str(st))                # not while it still trains
    assert busy.returncode == 2 and f"run {run} is still running (pid {pid}" in busy.stderr
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    while pid_alive(pid) and time.monotonic() - t0 < 30:
        time.sleep(0.05)
    rows = json.loads(cli("runs", "--store", str(st), "--json").stdout)
    (row,) = rows
    assert row["run"] == run and row["state"] == "interrupted" and row["last_step"] >= 20
    assert row["last_step"] % 4 == 0 and f"scellis resume {run}" in row["resume"]
    w = cli("wait", run, "--store", str(st))
    assert w.returncode == 1 and f"interrupted {run}" in w.stdout and f"scellis resume {run}" in w.stdout
    target = row["last_step"] + 6
    res = cli("resume", run, "--store", str(st), "--steps", str(target), "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    here = sc.train(LONG, steps=target, device=device, progress=False, store=tmp_path / "here")
    assert got["state"] == "finished" and got["steps"] == target and got["device"]["backend"] == device
    assert got["loss_history"] == here.loss_history and got["weights_hash"] == here.weights_hash()
    (old,) = [r for r in json.loads(cli("runs", "--store", str(st), "--json").stdout) if r["run"] == run]
    assert old["resumed_by"] == got["run"] and old["resume"] == f"resumed as {got['run']}"


def test_python_handle_follow_wait_result(tmp_path, reap):
    st = tmp_path / "st"
    h = sc.train(SHORT, store=st, detach=True, steps=30, device=sc.device("reference"))
    reap.append(h.pid)
    assert [r.id for r in sc.runs(st)] == [h.id]           # registered before train() returned the handle
    assert isinstance(h, sc.Detached) and h.state in ("starting", "running", "finished")
    seen, done = [], []
    follower = h.follow(seen.append, poll=0.1)
    h.on_done(done.append, poll=0.1)
    assert h.wait(timeout=120) == "finished"
    follower.join(10)
    t0 = time.monotonic()
    while not done and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert done == [h]
    kinds = [e["event"] for e in seen]
    assert kinds[0] == "start" and kinds[-1] == "done" and "step" in kinds
    assert [e["step"] for e in seen if e["event"] == "step"][-1] == 30
    r = h.result()
    here = sc.train(SHORT, steps=30, device="reference", progress=False, store=tmp_path / "here")
    assert r["state"] == "finished" and r["weights_hash"] == here.weights_hash()
    assert seen[-1]["result"]["weights_hash"] == r["weights_hash"]
    again = sc.Detached.attach(h.id[:-1], store=st)                    # from any process, later
    assert again.id == h.id and again.state == "finished" and again.pid == h.pid


def test_python_handle_interrupt_checkpoints_then_resume(tmp_path, reap):
    st = tmp_path / "st"
    h = sc.train(LONG, store=st, detach=True, device="reference", checkpoint_every=50)
    reap.append(h.pid)
    _events_until(st / "logs" / f"{h.id}.events.jsonl", lambda e: e.get("event") == "step" and e["step"] >= 10)
    with pytest.raises(WaitTimeout):
        h.wait(timeout=0.2)
    h.interrupt()                                                  # SIGTERM: stop at the next step boundary
    assert h.wait(timeout=60) == "interrupted"
    r = h.result()
    assert r["state"] == "interrupted" and r["steps"] > 10 and r["last_checkpoint"] is not None
    ck = sc.runs(st)[0]
    assert ck.error["message"] == "stopped by SIGTERM"
    step = r["steps"]                                              # the checkpoint is at the step it stopped on
    rest = sc.resume(h.id, store=st, steps=step + 5, progress=False)
    here = sc.train(LONG, steps=step + 5, device="reference", progress=False, store=tmp_path / "here")
    assert rest.loss_history == here.loss_history and rest.weights_hash() == here.weights_hash()
    assert r["weights_hash"] is not None and r["loss_history"] == here.loss_history[:step]


def test_a_child_that_fails_before_registering_is_recorded_failed(tmp_path, reap):
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b,y\n" + "".join(f"{i},{'oops' if i == 5 else i % 3},{i % 2}\n" for i in range(40)))
    spec = SHORT.replace('dataset = "digits"', f'dataset = "{csv}"\ntarget = "y"').replace("out = 10", "out = 2") \
        .replace("batch_size = 64", "batch_size = 4")
    h = sc.train(spec, store=tmp_path / "st", detach=True, device="reference")
    reap.append(h.pid)
    assert h.wait(timeout=120) == "failed"
    r = h.result()
    assert r["state"] == "failed" and f"{csv}:7" in r["error"]["where"] and "oops" in r["error"]["message"]
    w = cli("wait", h.id, "--store", str(tmp_path / "st"))
    assert w.returncode == 1 and "oops" in w.stdout
