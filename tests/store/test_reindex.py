"""The index is a cache of the objects (issue 36, items 1, 2 and 5): a lost, rolled-back or hand-edited index
is found by comparing it with the run records and checkpoint manifests, `runs`/`show` say so (exit 1, the fix
named), `fsck --rebuild-index` (and `--repair`) rebuilds it from the objects alone, a store whose index is
gone refuses to start a fresh one over its objects, and gc collects nothing while the index disagrees.
The WAL cases use a child killed with SIGKILL (its WAL and shared memory are left as a crash leaves them).
Tolerance: none (run ids, states, steps and checkpoint counts compared exactly).
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from scellis_jupyter import cli
from scellis_jupyter.store import Store, StoreError
from scellis_jupyter.store.fsck import fsck
from scellis_jupyter.store.reindex import file_problems

STEPS = 10
_CHILD = textwrap.dedent("""
    import os, sys
    import numpy as np
    from scellis_jupyter.store import Store
    s = Store.open(sys.argv[1])
    s.keep_spec_text("spec", 'name = "x"\\n')
    h = s.start_run(spec_hash="spec")
    parent = None
    for step in range(1, %d + 1):
        parent = s.save_checkpoint(weights={"w": np.full(4, step, np.float32)}, optimizer_state={},
                                   rng_state={"seed": 0, "positions": {}}, epoch=0, step=step,
                                   metrics_history={}, spec_hash="spec", parent=parent, run=h.id)
        h.checkpoint(parent, step, 0)
        if step == 3:                      # the first steps reach the database file, the rest stay in the WAL
            s.index.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(h.id, flush=True)
    os.kill(os.getpid(), 9)
""" % STEPS)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A store whose writer was killed (SIGKILL) after 10 checkpoints, 7 of them only in the WAL."""
    root = tmp_path_factory.mktemp("killed") / "store"
    p = subprocess.run([sys.executable, "-c", _CHILD, str(root)], capture_output=True, text=True, timeout=60,
                       cwd=os.getcwd())
    assert p.returncode == -9, p.stderr
    assert (root / "index.sqlite-wal").stat().st_size > 0
    return root, p.stdout.strip()


@pytest.fixture
def crashed(killed, tmp_path):
    root, run = killed
    dst = tmp_path / "store"
    shutil.copytree(root, dst)
    return dst, run


def _kinds(r):
    return sorted({p.kind for p in r.problems})


def _cli(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out, out.err


def _rebuilt_and_whole(capsys, root, run):
    rc, out, _ = _cli(capsys, "fsck", "--rebuild-index", "--store", str(root))
    assert rc == 0 and "index rebuilt from the objects: 1 run(s)" in out
    runs = Store.open(root).list_runs()
    assert [r.id for r in runs] == [run] and runs[0].state == "interrupted"
    assert [c["step"] for c in runs[0].checkpoints] == list(range(1, STEPS + 1))
    assert runs[0].last_checkpoint_step() == STEPS
    assert fsck(root).ok
    rc, out, err = _cli(capsys, "runs", "--store", str(root))
    assert rc == 0 and run in out and err == ""


def test_a_killed_store_is_clean(crashed, capsys):
    root, run = crashed
    assert file_problems(root) == []
    r = fsck(root)
    assert r.ok, r.problems
    assert [x.last_checkpoint_step() for x in Store.open(root).list_runs()] == [STEPS]


def test_deleted_wal_is_a_lost_run(crashed, capsys):
    root, run = crashed
    os.unlink(root / "index.sqlite-wal")
    r = fsck(root)
    assert "lost-run" in _kinds(r) and "index-damaged" in _kinds(r)       # the shm names the WAL that is gone
    lost = next(p for p in r.problems if p.kind == "lost-run")
    assert lost.subject == f"run {run}" and f"step {STEPS}" in lost.detail and "step 3" in lost.detail
    rc, out, _ = _cli(capsys, "fsck", "--store", str(root))
    assert rc == 1 and "scellis fsck --rebuild-index" in out
    rc, out, err = _cli(capsys, "runs", "--store", str(root))               # the WAL's evidence is gone now
    assert rc == 1 and "error[index-damaged]" in err and "lost-run" in err and "fsck --rebuild-index" in err
    rc, _, err = _cli(capsys, "show", run, "--store", str(root))
    assert rc == 1 and "fsck --rebuild-index" in err
    _rebuilt_and_whole(capsys, root, run)


def test_flipped_wal_header_is_damage(crashed, capsys):
    root, run = crashed
    wal = root / "index.sqlite-wal"
    b = bytearray(wal.read_bytes())
    b[17] ^= 0x01                                                          # a salt byte: the header checksum fails
    wal.write_bytes(bytes(b))
    assert [k for k, _, d in file_problems(root) if "checksum" in d] == ["index-damaged"]
    rc, _, err = _cli(capsys, "runs", "--store", str(root))
    assert rc == 1 and "checksum" in err and "lost-run" in err
    [kept] = (root / "quarantine").glob("wal-*")                        # never silently dropped
    assert (kept / "index.sqlite-wal").read_bytes() == bytes(b)
    r = fsck(root)                                                         # SQLite has dropped it: the objects tell
    assert {"lost-run"} <= set(_kinds(r))
    r = fsck(root, repair=True)
    assert not r.unrepaired and r.rebuilt is not None
    _rebuilt_and_whole(capsys, root, run)


def test_truncated_wal_is_damage(crashed, capsys):
    root, run = crashed
    wal = root / "index.sqlite-wal"
    os.truncate(wal, wal.stat().st_size // 2)
    r = fsck(root)
    assert not r.ok and "index-damaged" in _kinds(r)
    assert "lost-run" in _kinds(r)                                         # the index says an earlier step
    _rebuilt_and_whole(capsys, root, run)


def test_a_writer_killed_mid_frame_is_no_damage(crashed, capsys):
    """A writer writes a frame's header and its page in two writes: killed between them, the WAL ends
    mid-frame past its last commit. SQLite drops that tail; fsck must not call it damage."""
    root, run = crashed
    wal = root / "index.sqlite-wal"
    page = int.from_bytes(wal.read_bytes()[8:12], "big")
    assert (wal.stat().st_size - 32) % (24 + page) == 0
    with open(wal, "ab") as f:
        f.write(os.urandom(24))                                            # the next frame's header, no page
    assert file_problems(root) == []
    r = fsck(root)
    assert r.ok and r.problems == [], r.problems
    assert [x.last_checkpoint_step() for x in Store.open(root).list_runs()] == [STEPS]


@pytest.fixture
def finished(tmp_path):
    s = Store.open(tmp_path / "st")
    h = s.start_run(spec_hash="spec")
    parent = None
    for step in (1, 2, 3):
        parent = s.save_checkpoint(weights={"w": np.full(4, step, np.float32)}, optimizer_state={},
                                   rng_state={"seed": 0, "positions": {}}, epoch=0, step=step, metrics_history={},
                                   spec_hash="spec", parent=parent, run=h.id)
        h.checkpoint(parent, step, 0)
    h.finish()
    s.index.close()
    return s.root, h.id


def _sql(root, sql, args=()):
    c = sqlite3.connect(root / "index.sqlite")
    c.execute(sql, args)
    c.commit()
    c.close()


@pytest.mark.parametrize("edit,kinds", [
    ("UPDATE runs SET id = 'run-20000101-000000-abcdef'", {"lost-run", "index-contradicts"}),
    ("UPDATE runs SET state = 'failed'", {"index-contradicts"}),
    ("DELETE FROM checkpoints", {"lost-checkpoint"}),
])
def test_index_edits_the_objects_contradict(finished, capsys, edit, kinds):
    root, run = finished
    assert fsck(root).ok
    _sql(root, edit)
    r = fsck(root)
    assert kinds <= set(_kinds(r)), r.problems
    rc, _, err = _cli(capsys, "runs", "--store", str(root))
    assert rc == 1 and "fsck --rebuild-index" in err
    assert not fsck(root, repair=True).unrepaired
    runs = Store.open(root).list_runs()
    assert [(x.id, x.state, len(x.checkpoints)) for x in runs] == [(run, "finished", 3)]
    assert len(Store.open(root).index.checkpoints(run)) == 3 and fsck(root).ok


def test_junk_after_the_index_is_damage(finished, capsys):
    root, run = finished
    with open(root / "index.sqlite", "ab") as f:
        f.write(os.urandom(4096))
    r = fsck(root)
    assert "index-damaged" in _kinds(r) and "junk" in r.problems[0].detail
    for argv in (["runs"], ["show", run]):
        rc, out, err = _cli(capsys, *argv, "--store", str(root))
        assert rc == 1 and "junk" in err and "fsck --rebuild-index" in err and run in out
    assert not fsck(root, repair=True).unrepaired and fsck(root).ok
    assert _cli(capsys, "runs", "--store", str(root))[0] == 0


def test_deleted_index_refuses_a_fresh_one_and_is_rebuilt(finished, capsys):
    """Item 2: training again on a store whose index is gone must not start an empty index (and let gc
    delete the old run); the store refuses, names the fix, and the rebuilt index has the run."""
    root, run = finished
    files = sorted(p.name for p in (root / "objects").rglob("*") if p.is_file())
    for p in root.glob("index.sqlite*"):
        p.unlink()
    with pytest.raises(StoreError) as e:
        Store.open(root)
    assert e.value.diagnostic.code == "store-index" and "fsck --rebuild-index" in e.value.diagnostic.hint
    rc, _, err = _cli(capsys, "runs", "--store", str(root))
    assert rc == 2 and "error[store-index]" in err
    r = fsck(root)
    assert not r.ok and "index-damaged" in _kinds(r)
    rc, out, _ = _cli(capsys, "fsck", "--repair", "--store", str(root))
    assert rc == 0 and "not rebuilt: refs and pins" in out                 # what only the index held is named
    s = Store.open(root)
    assert [(x.id, x.state, x.last_checkpoint_step()) for x in s.list_runs()] == [(run, "finished", 3)]
    s.gc(grace_s=0)
    assert s.load_checkpoint(run).step == 3                                # the final checkpoint survives gc
    assert len(sorted(p.name for p in (root / "objects").rglob("*") if p.is_file())) < len(files)


def test_gc_collects_nothing_the_index_lacks(finished):
    root, run = finished
    before = sorted(p for p in (root / "objects").rglob("*") if p.is_file())
    _sql(root, "DELETE FROM runs")
    _sql(root, "DELETE FROM checkpoints")
    _sql(root, "DELETE FROM objects")
    s = Store.open(root)
    with pytest.raises(StoreError) as e:
        s.gc(grace_s=0)
    assert e.value.diagnostic.code == "store-index" and "lost-run" in e.value.diagnostic.message
    assert sorted(p for p in (root / "objects").rglob("*") if p.is_file()) == before


def test_an_old_store_is_rebuilt_and_what_cannot_be_is_named(tmp_path):
    """Records without version/previous and manifests without their run (written before this change)."""
    s = Store.open(tmp_path / "old")
    w = s.put_tensors({"w": np.ones(4, np.float32)}, kind="checkpoint-weights")
    o = s.put_tensors({}, kind="checkpoint-optimizer")
    cks = []
    for step in (1, 2):
        cks.append(s.put_json({"format": "scellis-checkpoint", "version": 1, "weights": w, "optimizer_state": o,
                               "optimizer_slots": {}, "rng_state": {"seed": 0, "positions": {}}, "epoch": 0,
                               "step": step, "metrics_history": {}, "spec_hash": "spec",
                               "parent": cks[-1] if cks else None, "engine_version": "0.1", "created": 1.0 + step,
                               "extra": {}}, kind="checkpoint"))
    base = {"id": "run-20250101-000000-aaaaaa", "spec_hash": "spec", "engine_version": "0.1", "created": 1.0,
            "host": "h", "pid": 1, "extra": {}}
    s.put_json(dict(base, state="running", checkpoints=[], updated=1.0), kind="run-record")
    s.put_json(dict(base, state="finished", updated=5.0,
                    checkpoints=[{"hash": cks[0], "step": 1, "epoch": 0}]), kind="run-record")
    s.index.close()
    r = fsck(s.root, rebuild_index=True)
    assert r.rebuilt.runs == 1 and r.rebuilt.checkpoints == 2
    named = " | ".join(r.rebuilt.not_rebuilt)
    assert "carry no version" in named and f"checkpoint {cks[1][:12]}" in named
    s = Store.open(s.root)
    [rec] = s.list_runs()
    assert rec.state == "finished" and rec.last_checkpoint == cks[0]
    assert s.index.checkpoint(cks[0])["run"] == rec.id and s.index.checkpoint(cks[1])["run"] is None


def test_records_and_manifests_carry_what_the_index_needs(finished):
    root, run = finished
    s = Store.open(root)
    rec = s.get_run(run)
    assert rec.version == 4 and rec.previous is not None              # start, 3 checkpoints, finish
    assert json.loads(s.objects.read(rec.previous))["version"] == 3
    m = s.get_json(rec.last_checkpoint)
    assert (m["run"], m["step"], m["epoch"]) == (run, 3, 0) and m["parent"] == rec.checkpoints[1]["hash"]


def test_a_withdrawn_reservation_is_no_lost_run(tmp_path):
    """A launcher's reservation, settled as interrupted and then withdrawn (its child never started), leaves
    records but no run: not a lost run, and a rebuild does not list it."""
    from scellis_jupyter.store.runs import release_run, reserve_run
    s = Store.open(tmp_path / "st")
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(p.stdout)                                                    # a process that is gone
    assert reserve_run(s, "run-20260101-000000-aaaaaa", pid=pid, spec_hash="spec")
    assert [r.state for r in s.list_runs()] == ["interrupted"]             # settled: a second record version
    assert release_run(s, "run-20260101-000000-aaaaaa", pid)
    assert fsck(s).ok and s.check_index() == []
    r = fsck(s, rebuild_index=True)
    assert r.rebuilt.runs == 0 and Store.open(s.root).list_runs() == []


def test_object_rows_deleted_are_found_and_gc_keeps_the_final_checkpoint(finished):
    root, run = finished
    _sql(root, "DELETE FROM objects")
    s = Store.open(root)
    assert "lost-object-row" in _kinds(fsck(s))
    with pytest.raises(StoreError):
        s.gc(grace_s=0)
    s.index.add_object(s.get_run(run).record_hash, "run-record", 1)   # even when gc's check passed, the closure
    assert {s.get_json(s.get_run(run).last_checkpoint)["weights"]} <= s._closure(s.get_run(run).last_checkpoint)
    assert not fsck(s, repair=True).unrepaired and fsck(s).ok
    s.gc(grace_s=0)
    assert Store.open(root).load_checkpoint(run).step == 3


def test_an_adopted_reservation_continues_its_record_chain(tmp_path):
    from scellis_jupyter.store.runs import reserve_run
    s = Store.open(tmp_path / "st")
    assert reserve_run(s, "run-20260101-000000-bbbbbb", pid=os.getpid(), spec_hash="spec")
    first = s.index.run("run-20260101-000000-bbbbbb")["record"]
    h = s.start_run(id="run-20260101-000000-bbbbbb", spec_hash="spec")
    assert (h.record.version, h.record.previous) == (1, first)
    h.finish()
    r = fsck(s, rebuild_index=True)
    assert r.rebuilt.runs == 1 and [x.state for x in Store.open(s.root).list_runs()] == ["finished"]
