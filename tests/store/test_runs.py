"""Run records: ids, states, heartbeat (index rows read back with the stdlib sqlite3 module), a child
process killed with SIGKILL shown as `interrupted` with its last checkpoint, heartbeat timeouts for runs
of another host, revival of a falsely suspected run, prefix lookup. Tolerance: heartbeat times only need
to increase; no other timing is asserted.
"""
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from scellis_jupyter.errors import Diagnostic, ShapeError
from scellis_jupyter.store import HeartbeatThread, Store, StoreError, get_run, list_runs, start_run

from fixtures.store import step_checkpoint


def _row(store, run_id):
    c = sqlite3.connect(store.root / "index.sqlite")
    c.row_factory = sqlite3.Row
    return c.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()


def _pretend_elsewhere(store, run_id, age):
    c = sqlite3.connect(store.root / "index.sqlite")
    c.execute("UPDATE runs SET host = 'some-other-host', heartbeat = ? WHERE id = ?", (time.time() - age, run_id))
    c.commit()


def test_start_and_finish(store):
    run = start_run(store, spec_hash="spec", tier="debug", device={"backend": "reference"}, predicted_peak_bytes=123)
    assert re.fullmatch(r"run-\d{8}-\d{6}-[0-9a-f]{6}", run.id)
    row = _row(store, run.id)
    assert (row["state"], row["pid"], row["host"]) == ("running", os.getpid(), socket.gethostname())
    assert store.get_json(row["record"])["state"] == "running"
    h1, h2 = step_checkpoint(store, 1), step_checkpoint(store, 2)
    run.checkpoint(h1, step=1, epoch=0)
    run.checkpoint(h2[:10], step=2, epoch=0)
    rec = run.finish(metrics={"loss": 0.25}, measured_peak_bytes=120)
    row = _row(store, run.id)
    stored = store.get_json(row["record"])
    assert row["state"] == stored["state"] == "finished" and row["last_checkpoint"] == h2
    assert [c["hash"] for c in stored["checkpoints"]] == [h1, h2]
    assert stored["metrics"] == {"loss": 0.25} and stored["measured_peak_bytes"] == 120
    assert stored["tier"] == "debug" and stored["predicted_peak_bytes"] == 123
    assert rec.last_checkpoint == h2 and store.index.checkpoint(h1)["run"] == run.id
    assert get_run(store, run.id).state == "finished"
    with pytest.raises(StoreError) as e:
        run.finish()
    assert e.value.diagnostic.code == "run-state"


def test_fail_refuse_and_context_manager(store):
    run = store.start_run(spec_hash="s")
    run.fail(ShapeError("shapes (2, 3) and (4,) do not match", where="matmul"))
    err = get_run(store, run.id).error
    assert err["code"] == "shape-mismatch" and err["where"] == "matmul" and err["type"] == "ShapeError"
    run = store.start_run(spec_hash="s")
    run.refuse(Diagnostic("plan-red", "needs 12 GiB, device has 8 GiB", hint="halve the batch"))
    rec = get_run(store, run.id)
    assert rec.state == "refused" and rec.error["hint"] == "halve the batch"
    with pytest.raises(ZeroDivisionError):
        with store.start_run(spec_hash="s") as run:
            1 / 0
    assert get_run(store, run.id).state == "failed" and get_run(store, run.id).error["type"] == "ZeroDivisionError"
    with store.start_run(spec_hash="s") as run:
        pass
    assert get_run(store, run.id).state == "finished"


def test_unknown_field(store):
    with pytest.raises(StoreError) as e:
        store.start_run(spec_hash="s", metric={"loss": 1})
    assert e.value.diagnostic.code == "bad-argument" and "metrics" in e.value.diagnostic.hint


def test_heartbeat_and_thread(store):
    run = store.start_run(spec_hash="s")
    b0 = _row(store, run.id)["heartbeat"]
    time.sleep(0.01)
    run.heartbeat()
    b1 = _row(store, run.id)["heartbeat"]
    assert b1 > b0
    with HeartbeatThread(run, every=0.05) as hb:
        deadline = time.time() + 5
        while _row(store, run.id)["heartbeat"] <= b1 and time.time() < deadline:
            time.sleep(0.02)
    assert _row(store, run.id)["heartbeat"] > b1 and hb.error is None and not hb.is_alive()
    assert [r.state for r in list_runs(store)] == ["running"]          # our own live process


def test_killed_child_is_interrupted_with_last_checkpoint(store):
    code = textwrap.dedent(f"""
        import time
        import numpy as np
        from scellis_jupyter.store import Store, HeartbeatThread
        s = Store.open({str(store.root)!r})
        run = s.start_run(spec_hash="spec")
        HeartbeatThread(run, every=0.2).start()
        for step in (1, 2):
            h = s.save_checkpoint(weights={{"w": np.full(1000, step, np.float32)}}, optimizer_state={{}},
                                  rng_state={{"seed": 0, "positions": {{"shuffle": step}}}}, epoch=0, step=step,
                                  metrics_history={{}}, spec_hash="spec", run=run.id)
            run.checkpoint(h, step=step, epoch=0)
        print(run.id, h, flush=True)
        time.sleep(120)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        run_id, last = p.stdout.readline().split()
        assert [r.state for r in list_runs(store)] == ["running"]       # alive: not touched
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    [rec] = list_runs(store)
    assert rec.id == run_id and rec.state == "interrupted" and rec.last_checkpoint == last
    assert run_id in rec.resume_hint and "gone" in rec.error["message"]
    row = _row(store, run_id)                                           # persisted, not just displayed
    assert row["state"] == "interrupted" and store.get_json(row["record"])["state"] == "interrupted"
    assert Store.open(store.root).get_run(run_id[:12]).state == "interrupted"
    assert store.load_checkpoint(run_id).rng_state == {"seed": 0, "positions": {"shuffle": 2}}


def test_heartbeat_timeout_other_host(store):
    run = store.start_run(spec_hash="s")
    _pretend_elsewhere(store, run.id, age=5)
    assert get_run(store, run.id, timeout=30).state == "running"        # fresh enough
    _pretend_elsewhere(store, run.id, age=100)
    rec = get_run(store, run.id, timeout=30)
    assert rec.state == "interrupted" and "heartbeat" in rec.error["message"]
    run.heartbeat()                                                     # it was alive after all
    assert get_run(store, run.id).state == "running"
    run.finish()
    assert get_run(store, run.id).state == "finished"


def test_last_good_checkpoint(store):
    """Interrupted runs resume from the newest checkpoint that verifies, even one saved but not yet recorded."""
    run = store.start_run(spec_hash="spec")
    a = step_checkpoint(store, 1)
    run.checkpoint(a, 1, 0)
    b = step_checkpoint(store, 2, run=run.id)                     # saved, then the process died before run.checkpoint
    c = step_checkpoint(store, 3, run=run.id)
    cw = store.load_checkpoint(c).weights_hash
    p = store.root / "objects" / cw[:2] / cw[2:]
    p.write_bytes(p.read_bytes()[:-4])                  # its weights got truncated
    _pretend_elsewhere(store, run.id, age=1000)
    rec = get_run(store, run.id)
    assert rec.state == "interrupted" and rec.last_checkpoint == b and rec.error["last_checkpoint"] == b


def test_run_prefix_and_suggestions(store):
    ids = [store.start_run(id=f"run-20260101-000000-{x}").id for x in ("aaaaaa", "aaaabb", "cccccc")]
    assert get_run(store, "run-20260101-000000-c").id == ids[2]
    assert get_run(store, "20260101-000000-aaaab").id == ids[1]        # "run-" may be left out
    with pytest.raises(StoreError) as e:
        get_run(store, "run-20260101-000000-aaaa")
    assert e.value.diagnostic.code == "store-ambiguous"
    with pytest.raises(StoreError) as e:
        get_run(store, "run-20260101-000000-cccccd")
    d = e.value.diagnostic
    assert d.code == "run-unknown" and ids[2] in d.hint
    with pytest.raises(StoreError) as e:
        store.start_run(id=ids[0])
    assert e.value.diagnostic.code == "bad-argument"


def test_mark_resumed_notes_the_successor_and_keeps_the_state(store):
    from scellis_jupyter.store.runs import mark_resumed
    a = start_run(store, spec_hash="spec")
    a.checkpoint(step_checkpoint(store, 4, run=a.id), 4, 0)
    a.interrupt("test")
    assert "scellis resume" in get_run(store, a.id).resume_hint
    b = start_run(store, spec_hash="spec")
    mark_resumed(store, a.id, b.id)
    rec = get_run(store, a.id)
    assert rec.state == "interrupted" and rec.resumed_by == b.id and rec.resume_hint == f"resumed as {b.id}"
    assert rec.last_checkpoint is not None
    mark_resumed(store, b.id, "run-x")                       # a running run is left alone
    assert get_run(store, b.id).resumed_by is None and _row(store, b.id)["state"] == "running"


def _damage_record(store, run_id, how):
    """Corrupt (overwrite bytes) or delete the object holding a run's current record."""
    h = _row(store, run_id)["record"]
    p = store.root / "objects" / h[:2] / h[2:]
    if how == "corrupt":
        p.write_bytes(b"not the record")
    else:
        p.unlink()
    return h


def test_list_runs_lists_what_reads_and_names_what_does_not(store):
    ids = []
    for _ in range(3):
        r = store.start_run(spec_hash="s")
        r.finish()
        ids.append(r.id)
    bad = _damage_record(store, ids[0], "corrupt")
    _damage_record(store, ids[2], "delete")
    runs = list_runs(store)
    assert [r.id for r in runs] == [ids[1]]
    named = {u["run"]: u for u in runs.unreadable}
    assert set(named) == {ids[0], ids[2]}
    assert named[ids[0]]["record"] == bad and named[ids[0]]["code"] == "store-corrupt"
    assert named[ids[2]]["code"] == "store-missing" and "missing" in named[ids[2]]["problem"]
    assert store.gc(grace_s=0) is not None                  # gc is not stopped by them either
