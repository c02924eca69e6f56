"""The receipt ledger: every edit, deletion, insertion and reordering is detected; `scellis ledger verify`."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import blake3
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import scellis_jupyter as sc
from scellis_jupyter import settings
from scellis_jupyter.pool import Job, Ledger, Pool

ROOT = str(Path(sc.__file__).resolve().parent.parent)


def cube(x):
    return x ** 3


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "ledger.sqlite"
    led = Ledger(path)
    for i in range(5):
        led.mint(job="j" * 64, shard=f"{i:064d}", peer=f"tcp://peer{i % 2}", result=f"{i:064x}",
                 method="reference", work_units=100 + i)
    led.close()
    return path


def tamper(path: Path, *sql: str) -> None:
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER receipts_no_update")
    db.execute("DROP TRIGGER receipts_no_delete")
    for q in sql:
        db.execute(q)
    db.commit()
    db.close()


def verify(path):
    led = Ledger(path, readonly=True)
    try:
        return led.verify()
    finally:
        led.close()


def test_pool_mints_one_receipt_per_accepted_shard(tmp_path):
    work = lambda x: 7 * x + 1                                  # noqa: E731 - the job's declared cost model
    with Pool(workers=2, processes=False, ledger=tmp_path / "l.sqlite") as p:
        r = p.run(Job(cube, inputs={"items": [1, 2, 3, 4]}, verify="reference", work=work))
        rep = p.ledger.verify()
        workers = set(p.workers())
    assert r.value == [1, 8, 27, 64] and rep["receipts"] == 4
    assert rep["work_units"] == sum(work(x) for x in [1, 2, 3, 4])
    assert [x.method for x in r.receipts] == ["reference"] * 4
    assert [x.result for x in r.receipts] == [sc.pool.content_hash(v) for v in r.value]
    assert {x.peer for x in r.receipts} == workers              # round-robin over both workers
    assert all(x.job == r.job for x in r.receipts)
    assert r.receipts[1].prev == r.receipts[0].hash


def test_intact_ledger_verifies(ledger):
    assert verify(ledger)["receipts"] == 5 and verify(ledger)["work_units"] == sum(range(100, 105))


def test_the_ledger_refuses_updates_and_deletes_through_sqlite(ledger):
    db = sqlite3.connect(ledger)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("UPDATE receipts SET body = body WHERE seq = 1")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("DELETE FROM receipts WHERE seq = 1")


def _body(path, seq):
    return sqlite3.connect(path).execute("SELECT body FROM receipts WHERE seq = ?", (seq,)).fetchone()[0]


@pytest.mark.parametrize("attack,match", [
    ("edit", "does not match its hash"),
    ("edit-rehash", "signature"),
    ("delete-middle", "sequence|chain"),
    ("delete-last", "signed head"),
    ("insert", "sequence|chain|signature"),
    ("reorder", "sequence|chain"),
])
def test_tampering_is_detected(ledger, attack, match):
    b3 = _body(ledger, 3)
    if attack == "edit":
        tamper(ledger, "UPDATE receipts SET body = replace(body, '\"work_units\":102', '\"work_units\":9999') WHERE seq = 3")
    elif attack == "edit-rehash":                   # a forger recomputes the hash but has no key
        new = b3.replace('"work_units":102', '"work_units":9999')
        tamper(ledger, f"UPDATE receipts SET body = '{new}', hash = '{blake3.blake3(new.encode()).hexdigest()}' WHERE seq = 3")
    elif attack == "delete-middle":
        tamper(ledger, "DELETE FROM receipts WHERE seq = 3")
    elif attack == "delete-last":
        tamper(ledger, "DELETE FROM receipts WHERE seq = 5")
    elif attack == "insert":
        tamper(ledger, "INSERT INTO receipts SELECT 6, body, hash, signature FROM receipts WHERE seq = 2")
    elif attack == "reorder":
        tamper(ledger, "UPDATE receipts SET seq = -3 WHERE seq = 3", "UPDATE receipts SET seq = 3 WHERE seq = 4",
               "UPDATE receipts SET seq = 4 WHERE seq = -3")
    with pytest.raises(sc.LedgerError, match=match) as e:
        verify(ledger)
    assert e.value.diagnostic.code == "ledger"


def test_an_out_of_sequence_receipt_names_both_numbers(ledger):
    """It read 'receipt 2 is out of sequence (expected 2)' when the row was in place but held another body."""
    tamper(ledger, "UPDATE receipts SET seq = -2 WHERE seq = 2", "UPDATE receipts SET seq = 2 WHERE seq = 3",
           "UPDATE receipts SET seq = 3 WHERE seq = -2",          # rows renumbered, bodies (seq inside) kept
           "CREATE TABLE t AS SELECT * FROM receipts ORDER BY seq", "DELETE FROM receipts",
           "INSERT INTO receipts SELECT * FROM t", "DROP TABLE t")   # and stored in the new order
    with pytest.raises(sc.LedgerError) as e:
        verify(ledger)
    msg = e.value.diagnostic.message
    assert msg.startswith("receipt 2 is out of sequence: its signed body says receipt 3 "), msg
    assert "(expected 2)" not in msg
    db = sqlite3.connect(ledger)                                      # a gap: receipt 3 where 2 belongs
    db.execute("DELETE FROM receipts WHERE seq = 2")
    db.commit()
    db.close()
    with pytest.raises(sc.LedgerError) as e:
        verify(ledger)
    msg = e.value.diagnostic.message
    assert msg.startswith("receipt 3 is out of sequence: it stands where receipt 2 belongs"), msg


def test_a_ledger_signed_by_another_users_key_is_refused_when_pinned(ledger, tmp_path, monkeypatch):
    pinned = Ledger(ledger, readonly=True).public_key
    other = tmp_path / "other" / "other.sqlite"
    other.parent.mkdir()
    monkeypatch.setenv("SCELLIS_KEY_DIR", str(tmp_path / "someone-elses-keys"))
    Ledger(other).close()
    assert Ledger(other, readonly=True).verify()["receipts"] == 0           # against its own user's pin
    with pytest.raises(sc.LedgerError, match="signed by key [0-9a-f]{64}, expected [0-9a-f]{64}"):
        Ledger(other, readonly=True).verify(public_key=pinned)


# ---- forgeries (issue 36, item 7): whoever can write the file must not be able to re-sign it ------------------
def _raw(key) -> str:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def resign(path: Path, key: Ed25519PrivateKey, *sql: str) -> None:
    """The forger's tool: edit, then re-chain and re-sign every receipt and the head with `key`, and store
    `key`'s public key in the file."""
    tamper(path, *sql)
    db = sqlite3.connect(path)
    prev, rows = "0" * 64, db.execute("SELECT seq, body FROM receipts ORDER BY seq").fetchall()
    db.execute("DELETE FROM receipts")
    for i, (_, body) in enumerate(rows, start=1):
        d = dict(json.loads(body), seq=i, prev=prev)
        body = json.dumps(d, sort_keys=True, separators=(",", ":"))
        h = blake3.blake3(body.encode()).hexdigest()
        db.execute("INSERT INTO receipts VALUES (?, ?, ?, ?)", (i, body, h, key.sign(h.encode())))
        prev = h
    n = len(rows)
    db.execute("UPDATE meta SET value = ? WHERE key = 'public_key'", (_raw(key),))
    sig = key.sign(f"scellis-ledger-head:{n}:{prev}".encode()).hex()
    db.execute("UPDATE meta SET value = ? WHERE key = 'head'", (json.dumps([n, prev, sig]),))
    db.commit()
    db.close()


def test_every_receipt_resigned_under_a_swapped_public_key_is_refused(ledger):
    pinned = Ledger(ledger, readonly=True).public_key.public_bytes(serialization.Encoding.Raw,
                                                                  serialization.PublicFormat.Raw).hex()
    forger = Ed25519PrivateKey.generate()
    resign(ledger, forger, "UPDATE receipts SET body = replace(body, '\"work_units\":102', '\"work_units\":9999')")
    with pytest.raises(sc.LedgerError) as e:
        verify(ledger)
    assert e.value.diagnostic.message == f"the ledger is signed by key {_raw(forger)}, expected {pinned}"
    r = cli("ledger", "verify", str(ledger))
    assert r.returncode == 1 and r.stderr.startswith("error[ledger] at ") and _raw(forger) in r.stderr
    r = cli("ledger", "verify", str(ledger), "--key", _raw(forger))   # only a key the user names overrides
    assert r.returncode == 0, r.stderr


def test_no_key_sits_beside_the_ledger_and_one_found_there_forges_nothing(ledger):
    beside = sorted(p.name for p in ledger.parent.iterdir() if p != ledger)
    assert beside == [], beside                      # the signing key lives in the user's key store
    assert (settings.key_dir() / "ledger.key").stat().st_mode & 0o777 == 0o600
    assert ledger.parent.resolve() not in settings.key_dir().resolve().parents
    forger = Ed25519PrivateKey.generate()           # a key a forger leaves in the ledger's folder
    (ledger.parent / "ledger.sqlite.key").write_bytes(forger.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    resign(ledger, forger, "DELETE FROM receipts WHERE seq = 2")
    with pytest.raises(sc.LedgerError, match="signed by key .*, expected"):
        verify(ledger)
    with pytest.raises(sc.LedgerError, match="not by yours"):   # nor is it picked up to sign: appending is refused
        Ledger(ledger)


def test_a_key_store_inside_the_ledgers_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SCELLIS_KEY_DIR", str(tmp_path / "keys"))
    with pytest.raises(sc.LedgerError, match="inside the ledger's folder"):
        Ledger(tmp_path / "ledger.sqlite")


@pytest.mark.parametrize("signer", ["forger", "the pool's own key"])
def test_every_receipt_deleted_and_the_head_resigned_is_refused(ledger, signer):
    key = Ed25519PrivateKey.generate() if signer == "forger" else \
        serialization.load_pem_private_key((settings.key_dir() / "ledger.key").read_bytes(), password=None)
    resign(ledger, key, "DELETE FROM receipts")
    match = "signed by key" if signer == "forger" else "holds 0 receipts but its pin says 5"
    with pytest.raises(sc.LedgerError, match=match):
        verify(ledger)
    r = cli("ledger", "verify", str(ledger))
    assert r.returncode == 1 and "error[ledger]" in r.stderr


def test_a_rewritten_chain_under_the_pools_own_key_is_caught_by_the_pinned_head(ledger):
    key = serialization.load_pem_private_key((settings.key_dir() / "ledger.key").read_bytes(), password=None)
    resign(ledger, key, "UPDATE receipts SET body = replace(body, '\"work_units\":104', '\"work_units\":1')")
    with pytest.raises(sc.LedgerError, match="entry 5 is not the one its head names"):
        verify(ledger)


def test_the_pool_pins_the_signer_and_each_job_keeps_the_head(tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite"
    with Pool(processes=False, ledger=path) as p:
        r = p.run(Job(cube, inputs={"items": [1, 2, 3]}, verify="reference"))
        mine = p.ledger.head()["public_key"]
    assert r.ledger == {"public_key": mine, "count": 3, "head": r.receipts[-1].hash}
    with pytest.raises(sc.LedgerError, match=f"expected {'0' * 64}"):
        Pool(processes=False, ledger=path, ledger_key="0" * 64)          # the pool's configuration pins it
    Pool(processes=False, ledger=path, ledger_key=mine).close()
    # on a machine without this key store, the run record's head still catches a rewrite by the key's holder
    key = serialization.load_pem_private_key((settings.key_dir() / "ledger.key").read_bytes(), password=None)
    resign(path, key, "DELETE FROM receipts WHERE seq = 3")
    monkeypatch.setenv("SCELLIS_KEY_DIR", str(tmp_path.parent / (tmp_path.name + "-elsewhere")))
    led = Ledger(path, readonly=True)
    from scellis_jupyter.pool.keys import load_public
    assert led.verify(public_key=load_public(mine))["receipts"] == 2     # signer and chain alone: consistent
    with pytest.raises(sc.LedgerError, match="holds 2 receipts but a run record says 3"):
        led.verify(public_key=load_public(mine), heads=[r.ledger])
    led.close()


def test_without_a_pin_or_a_named_key_nothing_is_vouched_for(ledger, tmp_path, monkeypatch):
    pub = Ledger(ledger, readonly=True).public_key
    monkeypatch.setenv("SCELLIS_KEY_DIR", str(tmp_path.parent / (tmp_path.name + "-elsewhere")))
    with pytest.raises(sc.LedgerError, match="no key is pinned"):
        verify(ledger)
    led = Ledger(ledger, readonly=True)
    assert led.verify(public_key=pub)["receipts"] == 5
    led.close()


def cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "scellis_jupyter.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_ledger_verify(ledger, tmp_path):
    r = cli("ledger", "verify", str(ledger), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["receipts"] == 5
    tamper(ledger, "DELETE FROM receipts WHERE seq = 2")
    r = cli("ledger", "verify", str(ledger))                  # a failed verification: exit 1
    assert r.returncode == 1 and r.stderr.startswith("error[ledger] at ") and "hint:" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli("ledger", "verify", str(tmp_path / "nothing.sqlite"))
    assert r.returncode == 2 and "no ledger file" in r.stderr and not (tmp_path / "nothing.sqlite").exists()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_ledger_file_overwritten_by_hand_is_a_diagnostic(ledger, damage):
    raw = ledger.read_bytes()
    ledger.write_bytes({"garbage": b"not a database at all\n" * 50, "truncated": raw[: len(raw) // 3],
                        "empty": b""}[damage])
    with pytest.raises(sc.LedgerError) as e:
        verify(ledger)
    assert e.value.diagnostic.code == "ledger" and str(ledger) in e.value.diagnostic.where
    if damage == "garbage":                     # and the command line says so in the one format
        r = cli("ledger", "verify", str(ledger))
        assert r.returncode == 2 and r.stderr.startswith("error[ledger] at ") and "Traceback" not in r.stderr
