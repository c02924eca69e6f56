"""The store's SQLite index (`<store>/index.sqlite`): objects, refs, checkpoints and runs.

Why SQLite: several processes (a notebook kernel, a training child, `scellis runs`) read and write the
index at once; SQLite in WAL mode gives them transactions, crash safety under kill -9 and concurrent
readers for free. Objects themselves live as files (see objects.py); the index only says what they are.
Each thread of each process gets its own connection (sqlite3 connections must not cross either).
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from .errors import CorruptObject, StoreError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS objects (
    hash TEXT PRIMARY KEY, kind TEXT NOT NULL, size INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS refs (
    name TEXT PRIMARY KEY, hash TEXT NOT NULL, kind TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (
    hash TEXT PRIMARY KEY, run TEXT, step INTEGER NOT NULL, epoch INTEGER NOT NULL, parent TEXT,
    spec_hash TEXT, created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS checkpoints_run ON checkpoints (run, step);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, state TEXT NOT NULL, spec_hash TEXT, created REAL NOT NULL, updated REAL NOT NULL,
    heartbeat REAL, pid INTEGER, host TEXT, proc_start TEXT, record TEXT, last_checkpoint TEXT);
"""

# Kinds of objects that gc may delete when nothing reaches them; every other kind (datasets, specs,
# user blobs) is kept forever. When one object has two kinds, the kept kind wins.
COLLECTABLE_KINDS = ("checkpoint", "checkpoint-weights", "checkpoint-optimizer", "run-record")


class Index:
    """Thin, typed access to the index tables; every method is one short transaction."""

    def __init__(self, path: str | os.PathLike, *, store: str = ""):
        self.path = Path(path)
        self.where = f"store {store or self.path.parent}"
        self._local = threading.local()
        self._init_schema()

    # ---- connections ------------------------------------------------------------------------------
    def conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None or self._local.pid != os.getpid():      # a forked child must not reuse its parent's
            try:
                c = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=True)
                c.row_factory = sqlite3.Row
                c.execute("PRAGMA busy_timeout = 30000")
                c.execute("PRAGMA journal_mode = WAL")
                c.execute("PRAGMA synchronous = FULL")
            except sqlite3.Error as e:
                raise self._error(e, "open the index") from None
            self._local.conn, self._local.pid = c, os.getpid()
        return c

    def close(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None and self._local.pid == os.getpid():
            c.close()
        self._local.conn = None

    @contextlib.contextmanager
    def tx(self, action: str = "update the index") -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE: take the write lock up front, so no deadlock on upgrade)."""
        c = self.conn()
        try:
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
        except sqlite3.Error as e:
            raise self._error(e, action) from None

    def query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self.conn().execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise self._error(e, "read the index") from None

    def _error(self, e: sqlite3.Error, action: str) -> StoreError:
        text = str(e)
        if "readonly" in text or "read-only" in text or "unable to open" in text:
            return StoreError(f"cannot {action}: the index is not writable ({text})", where=self.where,
                              code="store-readonly", hint="use a writable store directory (SCELLIS_STORE / --store)")
        if "full" in text:
            return StoreError(f"cannot {action}: no space left on the device ({text})", where=self.where,
                              code="store-full", hint="free disk space (e.g. `scellis gc`) or move the store")
        if "not a database" in text or "malformed" in text:
            return CorruptObject(f"cannot {action}: {self.path.name} is damaged ({text})", where=self.where,
                              hint="restore the store from a copy")
        return StoreError(f"cannot {action}: {text}", where=self.where, code="store-io")

    def _init_schema(self) -> None:
        with self.tx("create the index") as c:
            for stmt in filter(str.strip, _SCHEMA.split(";")):
                c.execute(stmt)
            row = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                c.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                found = SCHEMA_VERSION
            else:
                found = int(row[0])
        if found > SCHEMA_VERSION:
            raise StoreError(f"this store's index has schema version {found}, newer than this engine "
                             f"understands ({SCHEMA_VERSION})", where=self.where, code="store-schema",
                             hint="upgrade scellis-jupyter, or open a different store", found=found,
                             supported=SCHEMA_VERSION)
        self.schema_version = found

    # ---- objects ----------------------------------------------------------------------------------
    def add_object(self, h: str, kind: str, size: int) -> None:
        kept = ",".join(f"'{k}'" for k in COLLECTABLE_KINDS)
        with self.tx() as c:
            c.execute(f"""INSERT INTO objects VALUES (?, ?, ?, ?) ON CONFLICT(hash) DO UPDATE SET
                          kind = CASE WHEN objects.kind IN ({kept}) AND excluded.kind NOT IN ({kept})
                                      THEN excluded.kind ELSE objects.kind END""",
                      (h, kind, int(size), time.time()))

    def objects(self, kind: str | None = None) -> list[sqlite3.Row]:
        if kind is None:
            return self.query("SELECT * FROM objects ORDER BY created")
        return self.query("SELECT * FROM objects WHERE kind = ? ORDER BY created", (kind,))

    def object(self, h: str) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM objects WHERE hash = ?", (h,))
        return rows[0] if rows else None

    def remove_objects(self, hashes: list[str]) -> None:
        with self.tx() as c:
            c.executemany("DELETE FROM objects WHERE hash = ?", [(h,) for h in hashes])
            c.executemany("DELETE FROM checkpoints WHERE hash = ?", [(h,) for h in hashes])

    # ---- refs -------------------------------------------------------------------------------------
    def set_ref(self, name: str, h: str, kind: str = "ref") -> None:
        with self.tx() as c:
            c.execute("INSERT OR REPLACE INTO refs VALUES (?, ?, ?, ?)", (name, h, kind, time.time()))

    def delete_ref(self, name: str) -> bool:
        with self.tx() as c:
            return c.execute("DELETE FROM refs WHERE name = ?", (name,)).rowcount > 0

    def ref(self, name: str) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM refs WHERE name = ?", (name,))
        return rows[0] if rows else None

    def refs(self, kind: str | None = None) -> list[sqlite3.Row]:
        if kind is None:
            return self.query("SELECT * FROM refs ORDER BY name")
        return self.query("SELECT * FROM refs WHERE kind = ? ORDER BY name", (kind,))

    # ---- checkpoints ------------------------------------------------------------------------------
    def add_checkpoint(self, h: str, *, run: str | None, step: int, epoch: int, parent: str | None,
                       spec_hash: str | None, created: float) -> None:
        with self.tx() as c:
            c.execute("""INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(hash) DO UPDATE SET
                         run = COALESCE(excluded.run, checkpoints.run)""",
                      (h, run, int(step), int(epoch), parent, spec_hash, created))

    def checkpoints(self, run: str | None = None) -> list[sqlite3.Row]:
        if run is None:
            return self.query("SELECT * FROM checkpoints ORDER BY created")
        return self.query("SELECT * FROM checkpoints WHERE run = ? ORDER BY step, created", (run,))

    def checkpoint(self, h: str) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM checkpoints WHERE hash = ?", (h,))
        return rows[0] if rows else None

    # ---- runs -------------------------------------------------------------------------------------
    RUN_COLUMNS = ("id", "state", "spec_hash", "created", "updated", "heartbeat", "pid", "host", "proc_start",
                   "record", "last_checkpoint")

    def insert_run(self, **row: Any) -> None:
        cols = [k for k in self.RUN_COLUMNS if k in row]
        with self.tx() as c:
            c.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                      tuple(row[k] for k in cols))

    def delete_reserved_run(self, run_id: str, pid: int, record: str) -> bool:
        """Delete a run row only while it is still the given reservation (same pid and record object)."""
        with self.tx() as c:
            return c.execute("DELETE FROM runs WHERE id = ? AND pid = ? AND record = ?",
                             (run_id, pid, record)).rowcount > 0

    def update_run(self, run_id: str, *, expect_state: str | None = None, expect_heartbeat: float | None = None,
                   **row: Any) -> bool:
        """Update a run's row; with expect_*, only if it still has that state/heartbeat (compare-and-set)."""
        bad = set(row) - set(self.RUN_COLUMNS)
        if bad:
            raise ValueError(f"unknown run columns {sorted(bad)}")
        sets = ", ".join(f"{k} = ?" for k in row)
        sql, args = f"UPDATE runs SET {sets} WHERE id = ?", list(row.values()) + [run_id]
        if expect_state is not None:
            sql += " AND state = ?"
            args.append(expect_state)
        if expect_heartbeat is not None:
            sql += " AND heartbeat = ?"
            args.append(expect_heartbeat)
        with self.tx() as c:
            return c.execute(sql, args).rowcount > 0

    def run(self, run_id: str) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        return rows[0] if rows else None

    def runs(self) -> list[sqlite3.Row]:
        return self.query("SELECT * FROM runs ORDER BY created, id")
