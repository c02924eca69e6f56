"""The SQLite index: schema and WAL mode (read back with the stdlib sqlite3 module, not our code), schema
versioning (a newer schema is refused), one connection per thread, concurrent processes, a damaged
index file. Tolerance: none (row sets compared exactly).
"""
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

from scellis_jupyter.store import Store, StoreError
from scellis_jupyter.store.index import SCHEMA_VERSION


def _raw(store):
    return sqlite3.connect(store.root / "index.sqlite")


def test_schema_and_wal(tmp_path):
    s = Store.open(tmp_path / "s")
    c = _raw(s)
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"meta", "objects", "refs", "checkpoints", "runs"} <= tables
    cols = {r[1] for r in c.execute("PRAGMA table_info(runs)")}
    assert {"id", "state", "spec_hash", "created", "updated", "heartbeat", "pid", "host", "record"} <= cols
    assert {r[1] for r in c.execute("PRAGMA table_info(checkpoints)")} >= {"hash", "run", "step", "epoch", "parent",
                                                                           "created"}
    assert {r[1] for r in c.execute("PRAGMA table_info(objects)")} >= {"hash", "kind", "size", "created"}
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    h = s.put_bytes(b"abc", kind="dataset")
    assert c.execute("SELECT kind, size FROM objects WHERE hash = ?", (h,)).fetchone() == ("dataset", 3)
    Store.open(tmp_path / "s")                              # reopening keeps everything
    assert s.index.object(h)["kind"] == "dataset"


def test_newer_schema_refused(tmp_path):
    s = Store.open(tmp_path / "s")
    c = _raw(s)
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    c.commit()
    c.close()
    with pytest.raises(StoreError) as e:
        Store.open(tmp_path / "s")
    d = e.value.diagnostic
    assert d.code == "store-schema" and str(SCHEMA_VERSION + 1) in d.message and "upgrade" in d.hint


def test_damaged_index_refused(tmp_path):
    root = tmp_path / "s"
    (root / "objects").mkdir(parents=True)
    (root / "index.sqlite").write_bytes(b"this is not a database, just some bytes" * 100)
    with pytest.raises(StoreError) as e:
        Store.open(root)
    assert e.value.diagnostic.code == "store-corrupt"


def test_kept_kind_wins(tmp_path):
    s = Store.open(tmp_path / "s")
    a = s.put_bytes(b"same bytes", kind="checkpoint-weights")
    s.put_bytes(b"same bytes", kind="dataset")
    assert s.index.object(a)["kind"] == "dataset"
    b = s.put_bytes(b"other", kind="dataset")
    s.put_bytes(b"other", kind="checkpoint-weights")
    assert s.index.object(b)["kind"] == "dataset"


def test_refs(tmp_path):
    s = Store.open(tmp_path / "s")
    h = s.put_bytes(b"x")
    s.set_ref("best", h[:8])
    s.pin("nb/intro", h)
    assert s.ref("best") == h and s.pins() == {"nb/intro": h} and s.ref("nope") is None
    s.unpin("nb/intro")
    assert s.pins() == {}
    with pytest.raises(StoreError) as e:
        s.unpin("nb/intro")
    assert e.value.diagnostic.code == "store-unknown"
    with pytest.raises(StoreError):
        s.pin("abcdef12", h)                                # a name that looks like a hash


def test_one_connection_per_thread(tmp_path):
    s = Store.open(tmp_path / "s")
    conns, errors = [], []

    def work(k):
        try:
            conns.append(id(s.index.conn()))
            for i in range(50):
                s.put_bytes(f"t{k}-{i}".encode())
        except Exception as e:                              # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == [] and len(set(conns)) == 4
    assert len(s.index.objects()) == 200 and len(list(s.objects)) == 200


def test_concurrent_processes(tmp_path):
    root = tmp_path / "s"
    Store.open(root)
    code = textwrap.dedent(f"""
        import sys
        from scellis_jupyter.store import Store
        s = Store.open({str(root)!r})
        for i in range(100):
            s.put_bytes(f"{{sys.argv[1]}}-{{i}}".encode())
            if i % 10 == 0:
                s.set_ref(f"{{sys.argv[1]}}-ref", s.put_bytes(b"shared"))
        run = s.start_run(spec_hash="x")
        run.finish()
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, n]) for n in ("p", "q", "r")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    s = Store.open(root)
    n_records = len(s.index.objects("run-record"))
    assert len(s.index.objects("blob")) == 301 and n_records == 6      # start + finish record per run
    assert {r["name"] for r in s.index.refs()} == {"p-ref", "q-ref", "r-ref"}
    assert sorted(r.state for r in s.list_runs()) == ["finished"] * 3
    assert _raw(s).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
