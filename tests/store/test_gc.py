"""Garbage collection: intermediate checkpoints nobody refers to go (their sizes summed here from the
files on disk before gc), final checkpoints, pins, running runs, run records, specs and datasets stay,
young objects are spared, temp files of killed writers are removed. Tolerance: exact byte counts.
"""
import os
import time

import numpy as np
import pytest

from scellis_jupyter.store import Store


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "s")


def _ckpt(store, step, shared=None, parent=None, spec="spec"):
    w = {"w": np.full(1000, step, np.float32)}
    if shared is not None:
        w = {"w": shared}
    return store.save_checkpoint(weights=w, optimizer_state={"w": {"m": np.full(1000, -step, np.float32)}},
                                 rng_state={"seed": 1, "positions": {}}, epoch=0, step=step, metrics_history={},
                                 spec_hash=spec, parent=parent)


def _files(store, h):
    """The object files a checkpoint consists of, read off its manifest with the plain json/path API."""
    m = store.get_json(h)
    return {h, m["weights"], m["optimizer_state"]}


def _size(store, h):
    return (store.root / "objects" / h[:2] / h[2:]).stat().st_size


def _finished_run(store, n=3, **kw):
    run = store.start_run(spec_hash=kw.get("spec", "spec"))
    hs, parent = [], None
    for step in range(1, n + 1):
        parent = _ckpt(store, step, parent=parent, **kw)
        run.checkpoint(parent, step=step, epoch=0)
        hs.append(parent)
    run.finish()
    return run, hs


def test_intermediate_checkpoints_freed_final_kept(store):
    spec = store.put_text("lr = 0.1\n")
    data = store.put_bytes(b"dataset bytes", kind="dataset")
    blob = store.put_bytes(b"user blob")
    run, hs = _finished_run(store, spec=spec)
    doomed = set().union(*(_files(store, h) for h in hs[:-1])) - _files(store, hs[-1])
    expected_bytes = sum(_size(store, h) for h in doomed)
    # superseded run records are collectable too
    records = {r["hash"] for r in store.index.objects("run-record")}
    latest = store.get_run(run.id).record_hash
    expected_bytes += sum(_size(store, h) for h in records - {latest})
    doomed |= records - {latest}

    assert store.gc().freed_objects == []                  # default grace: everything is too young
    report = store.gc(grace_s=0)
    assert set(report.freed_objects) == doomed and report.freed_bytes == expected_bytes
    assert set(report.removed_checkpoints) == set(hs[:-1])
    for h in doomed:
        assert not store.has(h)
    assert store.load_checkpoint(hs[-1]).step == 3 and store.load_checkpoint(run.id).hash == hs[-1]
    assert store.get_run(run.id).state == "finished"
    assert store.get_text(spec) == "lr = 0.1\n" and store.has(data) and store.has(blob)
    assert store.verify() == {} and store.index.checkpoint(hs[0]) is None
    assert store.gc(grace_s=0).freed_objects == []         # idempotent


def test_shared_weights_survive(store):
    shared = np.arange(1000, dtype=np.float32)
    run = store.start_run(spec_hash="spec")
    a = _ckpt(store, 1, shared=shared)
    b = _ckpt(store, 2, shared=shared, parent=a)
    run.checkpoint(a, 1, 0)
    run.checkpoint(b, 2, 0)
    run.finish()
    store.gc(grace_s=0)
    assert not store.has(a)
    assert np.array_equal(store.load_checkpoint(b).weights["w"], shared)


def test_pins_and_refs_keep_checkpoints(store):
    run, hs = _finished_run(store, n=4)
    store.pin("notebook/intro", hs[0])
    store.set_ref("best", hs[1])
    store.gc(grace_s=0)
    for h in hs[:2] + hs[3:]:
        assert store.load_checkpoint(h)                     # verifies every object it names
    assert not store.has(hs[2])
    store.unpin("notebook/intro")
    store.gc(grace_s=0)
    assert not store.has(hs[0]) and store.has(hs[1])


def test_keep_final_false(store):
    run, hs = _finished_run(store, n=2)
    pinned_run, phs = _finished_run(store, n=2)
    store.pin("nb", pinned_run.id)                          # pins that run's record, and so its final checkpoint
    store.gc(keep_final=False, grace_s=0)
    assert not any(store.has(h) for h in hs)
    assert store.get_run(run.id).state == "finished"        # the record itself stays
    assert store.load_checkpoint(phs[-1]).step == 2 and not store.has(phs[0])


def _backdate(store, h, seconds):
    """Make checkpoint `h` (manifest and tensors) look written `seconds` ago, in its files and index rows."""
    then = time.time() - seconds
    for f in _files(store, h):
        os.utime(store.root / "objects" / f[:2] / f[2:], (then, then))
        with store.index.tx() as c:
            c.execute("UPDATE objects SET created = ? WHERE hash = ?", (then, f))


def test_running_run_keeps_its_checkpoints(store):
    orphan = _ckpt(store, 99)                               # saved by nobody's run, before the run began
    _backdate(store, orphan, 10)
    run = store.start_run(spec_hash="spec")
    a = _ckpt(store, 1)
    run.checkpoint(a, 1, 0)
    b = _ckpt(store, 2, parent=a)
    run.checkpoint(b, 2, 0)
    young = _ckpt(store, 98)            # unnamed, younger than the running run's writer lease: it may be the run's
    rep = store.gc(grace_s=0)
    assert store.load_checkpoint(a) and store.load_checkpoint(b) and not store.has(orphan)
    assert store.load_checkpoint(young) and rep.kept_for_lease >= 3 and rep.live_leases == 1   # + old records
    run.finish()                                            # the lease goes with the run
    rep = store.gc(grace_s=0)
    assert young in rep.freed_objects and rep.live_leases == 0, rep


def test_temp_files_removed(store):
    h = store.put_bytes(b"x")
    old = store.root / "objects" / h[:2] / ".tmp-killedwriter"
    young = store.root / "objects" / h[:2] / ".tmp-inprogress"
    old.write_bytes(b"half an object")
    young.write_bytes(b"being written")
    t = time.time() - 3600
    os.utime(old, (t, t))
    report = store.gc(grace_s=60)
    assert report.removed_temp_files == 1 and not old.exists() and young.exists()
    assert store.get_bytes(h) == b"x"
