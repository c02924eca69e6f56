"""`fsck`: every kind of store damage is found, `--repair` fixes what it can without deleting data, and a
repaired store checks clean. Also the CLI: exit 1 with a table, --json, --repair."""
import json
import os
import secrets
import sqlite3

import numpy as np
import pytest

from scellis_jupyter import cli
from scellis_jupyter.store import Store
from scellis_jupyter.store.fsck import KINDS, fsck


def _ck(s, step, run=None, parent=None):
    return s.save_checkpoint(weights={"w": np.full(4, step, np.float32)},
                             optimizer_state={"w": {"m": np.full(4, -step, np.float32)}},
                             rng_state={"seed": 1, "positions": {"data": step}}, epoch=0, step=step,
                             metrics_history={"loss": [[step, 1.0 / step]]}, spec_hash="spec", parent=parent, run=run)


@pytest.fixture
def store(tmp_path):
    """A store with one finished run of three checkpoints, its spec text and a pin."""
    s = Store.open(tmp_path / "store")
    s.keep_spec_text("spec", 'name = "x"\n')
    h = s.start_run(spec_hash="spec", tier="debug")
    parent = None
    for step in (1, 2, 3):
        parent = _ck(s, step, run=h.id, parent=parent)
        h.checkpoint(parent, step, 0)
    h.finish()
    s.pin("first", s.index.checkpoints(h.id)[0]["hash"])
    s.run_id = h.id
    return s


def kinds(report):
    return sorted(p.kind for p in report.problems)


def _flip(path):
    b = bytearray(path.read_bytes())
    b[len(b) // 2] ^= 0xFF
    path.write_bytes(bytes(b))


def test_clean_store_is_ok(store):
    r = fsck(store)
    assert r.ok and r.problems == []
    assert r.checked["checkpoints"] == 3 and r.checked["objects"] == len(list(store.objects))
    assert set(KINDS) >= {"corrupt-object", "missing-object", "broken-checkpoint"}


def test_corrupt_weights_are_found_and_quarantined(store):
    last = store.get_run(store.run_id).last_checkpoint
    w = store.get_json(last)["weights"]
    before = store.objects.path(w).read_bytes()
    _flip(store.objects.path(w))
    damaged = store.objects.path(w).read_bytes()
    r = fsck(store)
    assert not r.ok
    assert kinds(r) == ["broken-checkpoint", "corrupt-object", "dangling-last-checkpoint"]
    assert next(p for p in r.problems if p.kind == "corrupt-object").subject == w
    assert all(p.repaired == "" for p in r.problems)
    assert store.objects.path(w).read_bytes() == damaged           # a check alone changes nothing

    r = fsck(store, repair=True)
    assert not r.unrepaired, r.problems
    q = store.root / "quarantine"
    assert (q / w).read_bytes() == damaged and damaged != before    # moved, not deleted
    assert (q / last).is_file()                                     # the manifest that named it, too
    assert fsck(store).ok
    now = store.index.run(store.run_id)["last_checkpoint"]          # the index names the newest that loads
    assert now != last and store.load_checkpoint(now).step == 2
    assert store.index.object(w) is None and store.index.checkpoint(last) is None


def test_missing_object_and_dangling_rows(store):
    first = store.index.checkpoints(store.run_id)[0]["hash"]
    opt = store.get_json(first)["optimizer_state"]
    os.unlink(store.objects.path(opt))                              # gone from disk, still in the index
    ghost = secrets.token_hex(32)                                   # a row written, its object never (kill -9)
    store.index.add_checkpoint(ghost, run=store.run_id, step=4, epoch=0, parent=None, spec_hash="spec", created=1.0)
    r = fsck(store)
    assert kinds(r) == ["broken-checkpoint", "dangling-checkpoint", "dangling-ref", "missing-object"]
    assert next(p for p in r.problems if p.kind == "missing-object").subject == opt
    assert next(p for p in r.problems if p.kind == "dangling-checkpoint").subject == f"checkpoint {ghost}"
    assert next(p for p in r.problems if p.kind == "dangling-ref").subject == "ref first"   # the pin named `first`
    r = fsck(store, repair=True)
    assert not r.unrepaired
    assert store.index.checkpoint(ghost) is None and store.index.object(opt) is None
    assert fsck(store).ok


def test_unindexed_object_is_an_orphan_not_a_problem_and_repair_registers_it(store):
    """Files are written before their index rows, so a kill in between leaves an intact file nothing names:
    reported as an orphan, not a problem (the store is consistent); --repair registers it."""
    h = store.objects.write(b"bytes nobody indexed")
    r = fsck(store)
    assert r.ok and kinds(r) == [] and [o.subject for o in r.orphans] == [h]
    assert "1 intact unindexed object" in r.lines()[0] and r.to_json()["orphans"][0]["subject"] == h
    r = fsck(store, repair=True)
    assert r.orphans[0].repaired == "registered as blob"
    assert store.index.object(h)["kind"] == "blob" and fsck(store).ok


def test_malformed_checkpoint_manifest(store):
    h = store.put_json({"format": "scellis-checkpoint", "version": 1}, kind="checkpoint")
    r = fsck(store)
    assert kinds(r) == ["broken-checkpoint"] and "malformed" in r.problems[0].detail
    fsck(store, repair=True)
    assert (store.root / "quarantine" / h).is_file() and fsck(store).ok


def test_damaged_sqlite_index(store):
    with sqlite3.connect(store.root / "index.sqlite") as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.index.close()
    p = store.root / "index.sqlite"
    data = bytearray(p.read_bytes())
    data[4096:8192] = os.urandom(4096)                             # page 2 overwritten
    p.write_bytes(bytes(data))
    r = fsck(store.root)
    assert "index-damaged" in kinds(r)
    assert r.checked["objects"] > 0                                 # objects are still re-hashed
    r = fsck(store.root, repair=True)                               # rebuilt from the objects
    assert not r.unrepaired and r.rebuilt is not None and r.rebuilt.old_index.startswith("quarantine/index-")
    assert (store.root / r.rebuilt.old_index / "index.sqlite").read_bytes() == bytes(data)   # moved, not deleted
    runs = Store.open(store.root).list_runs()
    assert [x.id for x in runs] == [store.run_id] and runs[0].state == "finished" and len(runs[0].checkpoints) == 3
    assert fsck(store.root).ok


def test_no_store_is_an_error(tmp_path):
    from scellis_jupyter.store import StoreError
    with pytest.raises(StoreError):
        fsck(tmp_path / "none")


def test_cli_fsck(store, capsys):
    assert cli.main(["fsck", "--store", str(store.root)]) == 0
    assert capsys.readouterr().out.startswith("ok: store")
    _flip(store.objects.path(store.get_json(store.get_run(store.run_id).last_checkpoint)["weights"]))
    assert cli.main(["fsck", "--store", str(store.root)]) == 1
    out = capsys.readouterr().out
    assert "KIND" in out and "corrupt-object" in out and "fsck --repair" in out
    assert cli.main(["fsck", "--store", str(store.root), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is False and {p["kind"] for p in d["problems"]} >= {"corrupt-object"}
    assert cli.main(["fsck", "--store", str(store.root), "--repair"]) == 0
    assert "moved to quarantine/" in capsys.readouterr().out
    assert cli.main(["fsck", "--store", str(store.root)]) == 0



def test_lost_run_record_is_rebuilt_from_the_index_when_no_version_is_left(store):
    last = store.index.checkpoints(store.run_id)[-1]["hash"]
    for row in store.index.objects("run-record"):            # every version of the record is gone
        (store.root / "objects" / row["hash"][:2] / row["hash"][2:]).unlink()
    assert [u["run"] for u in store.list_runs().unreadable] == [store.run_id]
    r = fsck(store.root, repair=True)
    [p] = [p for p in r.problems if p.kind == "missing-run-record"]
    assert p.repaired.startswith("record rebuilt from the index")
    runs = Store.open(store.root).list_runs()
    assert not runs.unreadable and [x.id for x in runs] == [store.run_id]
    assert runs[0].state == "finished" and runs[0].last_checkpoint == last and len(runs[0].checkpoints) == 3
    assert "rebuilt" in runs[0].extra["rebuilt"] and fsck(store.root).ok
