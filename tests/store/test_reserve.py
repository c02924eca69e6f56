"""A detached run is in the index the moment its id is known (`reserve_run`), and its child adopts that row
(`start_run` with the same id, from the reserved pid); anyone else reusing the id is refused. A reservation
whose process lives is never settled as gone, however long it takes to start (no heartbeat yet); one whose
process died reads `interrupted`."""
import os
import subprocess
import sys
import time

import pytest

from scellis_jupyter.store import Store, StoreError, get_run, list_runs, start_run
from scellis_jupyter.store.runs import reserve_run, reserved_for


def test_reserve_then_adopt(tmp_path):
    s = Store.open(tmp_path / "s")
    assert reserve_run(s, "run-x", pid=os.getpid(), spec_hash="spec", extra={"detached": True})
    (rec,) = list_runs(s)
    assert rec.id == "run-x" and rec.state == "running" and rec.extra["starting"] and rec.pid == os.getpid()
    assert reserved_for(s, s.index.run("run-x"), os.getpid()) and not reserved_for(s, s.index.run("run-x"), 1)
    assert not reserve_run(s, "run-x", pid=os.getpid())                    # already there: nothing to do
    h = start_run(s, id="run-x", spec_hash="spec", extra={"detached": True})   # the child takes it up
    assert h.id == "run-x" and "starting" not in h.record.extra and h.record.created == rec.created
    assert not reserved_for(s, s.index.run("run-x"))
    with pytest.raises(StoreError, match="already exists"):
        start_run(s, id="run-x")                                           # adopted: the id is taken
    h.finish()
    assert get_run(s, "run-x").state == "finished"


def test_a_reservation_of_a_live_process_is_not_settled_and_of_a_dead_one_is(tmp_path):
    s = Store.open(tmp_path / "s")
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reserve_run(s, "run-slow", pid=p.pid)
        with pytest.raises(StoreError, match="already exists"):
            start_run(s, id="run-slow")                                    # not this process's reservation
        assert get_run(s, "run-slow", timeout=0.0).state == "running"       # stale heartbeat, live process
    finally:
        p.kill()
        p.wait()
    assert get_run(s, "run-slow", timeout=0.0).state == "interrupted"
    assert get_run(s, "run-slow").resume_hint == "it saved no checkpoint: start it again"
