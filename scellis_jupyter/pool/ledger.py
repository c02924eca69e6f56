"""Receipts for accepted work: an append-only, hash-chained, Ed25519-signed ledger in SQLite.

Why a chain and a signature: each receipt's BLAKE3 hash covers its body, which names the previous
receipt's hash, so an edit, deletion, insertion or reordering breaks the chain; the signature (the pool
owner's key) stops someone re-chaining edited rows. A signed head (count, last hash) catches a truncated
tail. The key that signs lives in the user's key store, never beside the ledger, and its public key and the
chain's head are pinned there (`keys`): `verify` checks against the pin (or a key the user names), never
against the public key the file carries, so a re-signed, re-keyed or emptied ledger is refused.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import blake3
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import LedgerError
from . import keys

GENESIS = "0" * 64
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS receipts (seq INTEGER PRIMARY KEY, body TEXT NOT NULL, hash TEXT NOT NULL,
                                     signature BLOB NOT NULL);
CREATE TRIGGER IF NOT EXISTS receipts_no_update BEFORE UPDATE ON receipts
  BEGIN SELECT RAISE(ABORT, 'receipts are append-only'); END;
CREATE TRIGGER IF NOT EXISTS receipts_no_delete BEFORE DELETE ON receipts
  BEGIN SELECT RAISE(ABORT, 'receipts are append-only'); END;
"""
FIELDS = ("seq", "job", "shard", "peer", "result", "method", "work_units", "prev", "minted")


@dataclass(frozen=True)
class Receipt:
    seq: int
    job: str
    shard: str
    peer: str
    result: str
    method: str
    work_units: int
    prev: str
    minted: float
    hash: str
    signature: bytes


def _body(d: dict) -> str:
    return json.dumps({k: d[k] for k in FIELDS}, sort_keys=True, separators=(",", ":"))


def _head_text(count: int, last: str) -> bytes:
    return f"scellis-ledger-head:{count}:{last}".encode()


class Ledger:
    """Open (or create) the ledger at `path`; `key` signs new receipts (default: the key store's `ledger` key)."""

    def __init__(self, path: str | os.PathLike, key: Ed25519PrivateKey | None = None, *, readonly: bool = False):
        self.path = Path(path)
        self._key = key
        if readonly and not self.path.is_file():
            raise LedgerError("no ledger file here", where=str(self.path), hint="give the path of a receipt ledger")
        try:
            if readonly:
                self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
                self.db.execute("SELECT count(*) FROM receipts").fetchone()
                if self._meta("public_key") is None:
                    raise sqlite3.DatabaseError("it has no public key")
                return
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise LedgerError(f"cannot open the ledger: {e}", where=str(self.path),
                              hint="give the path of a receipt ledger (SQLite)") from e
        pub = self._meta("public_key")
        mine = keys.public_hex(self.key)
        if pub is None:
            self.db.execute("INSERT INTO meta VALUES ('public_key', ?)", (mine,))
            self._set_head(0, GENESIS)
            keys.write_pin(self.path, mine, 0, GENESIS)
        elif pub != mine:
            raise LedgerError(f"this ledger is signed by key {pub}, not by yours ({mine})", where=str(self.path),
                              hint="append with the key that made it, or start a new ledger")

    @property
    def key(self) -> Ed25519PrivateKey:
        if self._key is None:
            keys.check_outside(self.path)
            self._key = keys.signing_key("ledger")
        return self._key

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set_head(self, count: int, last: str) -> None:
        sig = self.key.sign(_head_text(count, last)).hex()
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('head', ?)", (json.dumps([count, last, sig]),))

    @property
    def public_key(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(self._meta("public_key")))

    def mint(self, *, job: str, shard: str, peer: str, result: str, method: str, work_units: int) -> Receipt:
        """Append one receipt (in one transaction) chained to the last and signed."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.db.execute("SELECT seq, hash FROM receipts ORDER BY seq DESC LIMIT 1").fetchone()
            seq, prev = (row[0] + 1, row[1]) if row else (1, GENESIS)
            d = {"seq": seq, "job": job, "shard": shard, "peer": peer, "result": result, "method": method,
                 "work_units": int(work_units), "prev": prev, "minted": round(time.time(), 3)}
            body = _body(d)
            h = blake3.blake3(body.encode()).hexdigest()
            sig = self.key.sign(h.encode())
            self.db.execute("INSERT INTO receipts VALUES (?, ?, ?, ?)", (seq, body, h, sig))
            self._set_head(seq, h)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        keys.write_pin(self.path, keys.public_hex(self.key), seq, h)
        return Receipt(**d, hash=h, signature=sig)

    def receipts(self) -> list[Receipt]:
        out = []
        for _seq, body, h, sig in self.db.execute("SELECT seq, body, hash, signature FROM receipts ORDER BY seq"):
            out.append(Receipt(**json.loads(body), hash=h, signature=bytes(sig)))
        return out

    @property
    def pin(self) -> dict | None:
        """This ledger's pin in the key store (signer and head), or None where it was never pinned here."""
        return keys.read_pin(self.path)

    def head(self) -> dict:
        """The signer and chain head as a run record keeps them: {"public_key", "count", "head"}."""
        row = self.db.execute("SELECT seq, hash FROM receipts ORDER BY seq DESC LIMIT 1").fetchone()
        count, last = row if row else (0, GENESIS)
        return {"public_key": self._meta("public_key"), "count": int(count), "head": last}

    def verify(self, public_key: Ed25519PublicKey | None = None, heads: tuple | list = ()) -> dict:
        """Re-check every receipt against the pinned key (or `public_key`): body hash, chain, sequence,
        signature, the signed head, the pinned head (count and last hash), and each of `heads` (the heads
        run records kept: {"count", "head"}), so a truncation or rewrite behind a record is caught too.

        Returns {"receipts": n, "work_units": total, "head": hash, "public_key": hex}; raises LedgerError naming
        the first bad receipt, or the key found and the one expected.
        """
        where = str(self.path)
        pin = self.pin
        if public_key is None and pin is None:
            raise LedgerError("no key is pinned for this ledger in your key store, and none was named", where=where,
                              hint="name the signer's public key: scellis ledger verify PATH --key HEX (or a PEM file)")
        expected = keys.public_hex(public_key) if public_key is not None else pin["public_key"]
        found = self._meta("public_key")
        if found != expected:
            raise LedgerError(f"the ledger is signed by key {found}, expected {expected}", where=where,
                              hint="a ledger signed by any other key is refused; name the right key with --key "
                                   "only if you trust it")
        pub = Ed25519PublicKey.from_public_bytes(bytes.fromhex(expected))
        if pin is not None and pin["public_key"] != expected:
            pin = None                                 # a named key overrides this machine's pin and its head
        prev, n, work = GENESIS, 0, 0
        hashes = []
        rows = self.db.execute("SELECT seq, body, hash, signature FROM receipts ORDER BY rowid").fetchall()
        for i, (seq, body, h, sig) in enumerate(rows, start=1):
            try:
                d = json.loads(body)
            except ValueError:
                raise LedgerError(f"receipt {seq} is not readable", where=where, hint="the file was edited")
            if blake3.blake3(body.encode()).hexdigest() != h:
                raise LedgerError(f"receipt {seq}'s body does not match its hash (edited)", where=where,
                                  hint="the ledger was edited by hand; restore it from a copy", seq=seq)
            if seq != i:
                raise LedgerError(f"receipt {seq} is out of sequence: it stands where receipt {i} belongs "
                                  "(inserted, deleted or reordered)", where=where,
                                  hint="restore the ledger from a copy", seq=seq)
            if d.get("seq") != i:
                raise LedgerError(f"receipt {i} is out of sequence: its signed body says receipt {d.get('seq')} "
                                  "(inserted, deleted or reordered)", where=where,
                                  hint="restore the ledger from a copy", seq=seq)
            if d.get("prev") != prev:
                raise LedgerError(f"receipt {seq} does not chain to receipt {i - 1}", where=where,
                                  hint="a receipt was deleted, inserted or reordered", seq=seq)
            try:
                pub.verify(bytes(sig), h.encode())
            except InvalidSignature:
                raise LedgerError(f"receipt {seq}'s signature does not verify", where=where,
                                  hint="the receipt was re-made without the pool's key", seq=seq) from None
            prev, n, work = h, i, work + int(d["work_units"])
            hashes.append(h)
        head = self._meta("head")
        try:
            count, last, hsig = json.loads(head)
            pub.verify(bytes.fromhex(hsig), _head_text(count, last))
        except (TypeError, ValueError, InvalidSignature):
            raise LedgerError("the ledger's signed head is missing or forged", where=where,
                              hint="the file was edited by hand") from None
        if count != n or last != prev:
            raise LedgerError(f"the ledger holds {n} receipts but its signed head says {count}", where=where,
                              hint="receipts were deleted from (or added to) the end")
        keys.check_head(where, pin, hashes)
        for h in heads:
            keys.check_head(where, {"count": int(h["count"]), "head": str(h["head"])}, hashes,
                             kept="a run record")
        return {"receipts": n, "work_units": work, "head": prev, "public_key": expected}

    def close(self) -> None:
        self.db.close()
