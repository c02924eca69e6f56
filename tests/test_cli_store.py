"""`scellis runs / show / gc` through `scellis_jupyter.cli.main`: JSON fields, the table, store selection
(--store > $SCELLIS_STORE > ./.scellis), exit 0, and exit 2 with a diagnostic (no traceback) for bad input.
Tolerance: none (exact fields and states).
"""
import json
import os
import sqlite3
import time

import numpy as np
import pytest

from scellis_jupyter.cli import main
from scellis_jupyter.store import Store


def _ckpt(store, step, parent=None):
    return store.save_checkpoint(weights={"w": np.full(100, step, np.float32)}, optimizer_state={},
                                 rng_state={"seed": 0, "positions": {}}, epoch=0, step=step, metrics_history={},
                                 spec_hash="spec", parent=parent)


@pytest.fixture
def populated(tmp_path):
    """A store with one finished run (3 checkpoints) and one run of a host that went silent."""
    s = Store.open(tmp_path / "st")
    done = s.start_run(spec_hash="spec", tier="debug")
    parent = None
    for step in (1, 2, 3):
        parent = _ckpt(s, step, parent)
        done.checkpoint(parent, step, 0)
    done.finish(metrics={"loss": 0.5})
    lost = s.start_run(spec_hash="spec")
    h = _ckpt(s, 7)
    lost.checkpoint(h, 7, 0)
    c = sqlite3.connect(s.root / "index.sqlite")
    c.execute("UPDATE runs SET host = 'gone-host', heartbeat = ? WHERE id = ?", (time.time() - 3600, lost.id))
    c.commit()
    for lease in (s.root / "leases").glob("*.json"):       # the silent host's writer lease: an hour stale
        lease.write_text(json.dumps(dict(json.loads(lease.read_text()), host="gone-host")))
        os.utime(lease, (time.time() - 3600, time.time() - 3600))
    return s, done.id, lost.id, parent, h


def test_runs_json(populated, capsys):
    s, done, lost, final, lost_ck = populated
    assert main(["runs", "--store", str(s.root), "--json"]) == 0
    rows = {r["run"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {done, lost}
    for r in rows.values():
        assert {"run", "state", "last_checkpoint", "created", "updated"} <= set(r)
    assert rows[done]["state"] == "finished" and rows[done]["last_checkpoint"] == final
    assert rows[lost]["state"] == "interrupted" and rows[lost]["last_checkpoint"] == lost_ck
    assert rows[lost]["last_step"] == 7 and lost in rows[lost]["resume"]


def test_runs_table_and_env(populated, capsys, monkeypatch, tmp_path):
    s, done, lost, final, _ = populated
    monkeypatch.setenv("SCELLIS_STORE", str(s.root))
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    header, *lines = out.splitlines()
    assert header.split()[:3] == ["RUN", "STATE", "LAST"]
    by_id = {l.split()[0]: l.split() for l in lines if l.startswith("run-") and ":" not in l.split()[0]}
    assert by_id[done][1] == "finished" and by_id[done][2] == final[:12]
    assert by_id[lost][1] == "interrupted"
    monkeypatch.delenv("SCELLIS_STORE")
    monkeypatch.chdir(tmp_path)
    Store.open()                                             # ./.scellis, empty
    assert main(["runs", "--json"]) == 0 and json.loads(capsys.readouterr().out) == []
    assert (tmp_path / ".scellis" / "index.sqlite").exists()


def test_show(populated, capsys):
    s, done, lost, final, _ = populated
    assert main(["show", done[:-1], "--store", str(s.root), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["id"] == done and d["state"] == "finished" and d["tier"] == "debug" and d["metrics"] == {"loss": 0.5}
    assert [c["step"] for c in d["checkpoints"]] == [1, 2, 3] and d["last_checkpoint"] == final
    assert main(["show", lost, "--store", str(s.root)]) == 0
    out = capsys.readouterr().out
    assert "interrupted" in out and "resume" in out and lost in out


def test_gc(populated, capsys):
    s, done, lost, final, lost_ck = populated
    assert main(["gc", "--store", str(s.root), "--json"]) == 0          # default grace spares young objects
    assert json.loads(capsys.readouterr().out)["freed_objects"] == []
    assert main(["gc", "--store", str(s.root), "--grace", "0", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert len(rep["removed_checkpoints"]) == 2 and rep["freed_bytes"] > 0
    assert s.load_checkpoint(final).step == 3 and s.load_checkpoint(lost_ck).step == 7
    assert main(["gc", "--store", str(s.root), "--grace", "0"]) == 0
    assert capsys.readouterr().out.startswith("freed 0 objects")


def test_bad_input_exits_2(populated, capsys, tmp_path):
    s, done, *_ = populated
    assert main(["show", done[:-1] + "x", "--store", str(s.root)]) == 2
    err = capsys.readouterr().err
    assert "error[run-unknown]" in err and done in err and "Traceback" not in err
    assert main(["runs", "--store", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "error[store-missing]" in err and "--store" in err
    assert not (tmp_path / "nowhere").exists()                            # listing never creates a store
    assert main(["gc", "--store", str(tmp_path / "nowhere")]) == 2
    assert main(["gc", "--store", str(s.root), "--grace", "-1"]) == 2       # argparse's errors: one format too
    assert "error[usage] at scellis gc: argument --grace: '-1' is not a number of seconds" in capsys.readouterr().err
    assert main(["show"]) == 2
    assert "error[usage] at scellis show: the following arguments are required: RUN" in capsys.readouterr().err


def test_runs_with_an_unreadable_record_lists_the_rest_and_fsck_repair_fixes_it(populated, capsys):
    s, done, lost, final, lost_ck = populated
    s.list_runs()                                            # settle `lost` first (its record is final now)
    rec = s.index.run(done)["record"]
    (s.root / "objects" / rec[:2] / rec[2:]).write_bytes(b"garbage")
    assert main(["runs", "--store", str(s.root), "--json"]) == 1           # 1: listed, some records unreadable
    out, err = capsys.readouterr()
    assert [r["run"] for r in json.loads(out)] == [lost]
    assert f"error[store-corrupt] at run {done}:" in err and "fsck --repair" in err
    assert main(["runs", "--store", str(s.root)]) == 1
    out, err = capsys.readouterr()
    assert lost in out and done not in out and done in err
    assert main(["fsck", "--store", str(s.root), "--repair"]) == 0
    assert "record rebuilt" in capsys.readouterr().out
    assert main(["runs", "--store", str(s.root), "--json"]) == 0
    out, err = capsys.readouterr()
    rows = {r["run"]: r for r in json.loads(out)}
    assert set(rows) == {done, lost} and err == ""
    assert rows[done]["state"] == "finished" and rows[done]["last_checkpoint"] == final
    assert main(["fsck", "--store", str(s.root)]) == 0
