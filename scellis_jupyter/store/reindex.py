"""The index as a cache of the objects: read what the objects say, compare it with the index, rebuild it.

Why: the objects are immutable, hashed and written before anything names them; the index (SQLite, WAL)
is the fast, mutable view. A lost or rolled-back WAL, a deleted index.sqlite or a hand edit must never
lose a run, so every run record carries its id, state, version and the version it supersedes, and every
checkpoint manifest its run, step, epoch and parent: enough to rebuild the index from the objects alone.

Three things live here: `file_problems` (what the index files themselves show before SQLite opens them:
junk after the database, a WAL whose header checksum fails or that was cut short of the frames its shared
memory says were committed, a WAL the shared memory file names but that is gone), `compare` (the objects
against the index, both ways: a run or a checkpoint the objects hold and the index lacks is lost; an index
row the objects contradict is damage) and `rebuild` (a new index from the objects; the old one is moved to
quarantine/, never deleted).
Writes killed between an object and its row leave at most one unnamed version per run, which is not
reported: only what no crash of a writer can explain is.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from .checkpoint import FORMAT
from .index import Index
from .objects import HASH_LEN
from .runs import STATES

INDEX = "index.sqlite"
QUARANTINE = "quarantine"
FIX = "scellis fsck --rebuild-index"
INDEX_KINDS = ("index-damaged", "lost-run", "lost-checkpoint", "index-contradicts", "lost-object-row")
_WAL_MAGIC = (0x377F0682, 0x377F0683)


def fix_hint(root: str | os.PathLike) -> str:
    return f"rebuild the index from the objects: `{FIX} --store {root}` (nothing in the objects is lost)"


# ---- the index files, before SQLite opens them --------------------------------------------------------
def _wal_checksum(data: bytes, big: bool, s0: int = 0, s1: int = 0) -> tuple[int, int]:
    n = len(data) // 4
    words = struct.unpack((">" if big else "<") + f"{n}I", data[:n * 4])
    for i in range(0, n, 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def file_problems(root: str | os.PathLike) -> list[tuple[str, str, str]]:
    """(kind, subject, detail) for what index.sqlite and its WAL show on disk. Call it before any connection
    opens the index: SQLite silently ignores (and the next writer overwrites) a WAL whose checksum fails."""
    root = Path(root)
    db, wal, shm = root / INDEX, root / f"{INDEX}-wal", root / f"{INDEX}-shm"
    out: list[tuple[str, str, str]] = []
    try:
        with open(db, "rb") as f:
            head = f.read(100)
        size = db.stat().st_size
    except OSError:
        return out
    if len(head) == 100 and head.startswith(b"SQLite format 3\x00"):
        page = struct.unpack(">H", head[16:18])[0]
        page = 65536 if page == 1 else page
        pages, counter, valid_for = (struct.unpack(">I", head[o:o + 4])[0] for o in (28, 24, 92))
        if pages and counter == valid_for and size > pages * page:
            out.append(("index-damaged", "index", f"{size - pages * page} bytes after the end of the database "
                        f"({pages} pages of {page} bytes): junk was appended to {INDEX}"))
        elif size % page:
            out.append(("index-damaged", "index", f"{INDEX} is {size} bytes, not a whole number of {page}-byte pages"))
    elif size:
        out.append(("index-damaged", "index", f"{INDEX} does not start with SQLite's header"))
    try:
        wsize = wal.stat().st_size
    except OSError:
        wsize = None
    if wsize is None:
        frames = _shm_frames(shm)
        if frames:
            out.append(("index-damaged", "index", f"the WAL is gone: {shm.name} says {frames} frame(s) of committed "
                        f"transactions were in {wal.name}"))
        return out
    if 0 < wsize < 32:
        out.append(("index-damaged", "index", f"{wal.name} is {wsize} bytes, shorter than its 32-byte header"))
        return out
    if wsize == 0:
        return out
    with open(wal, "rb") as f:
        wh = f.read(32)
    magic, _version, page = struct.unpack(">III", wh[:12])
    if magic not in _WAL_MAGIC:
        out.append(("index-damaged", "index", f"{wal.name} has no WAL header (magic {magic:#x}): its transactions "
                    "are ignored by SQLite"))
        return out
    if _wal_checksum(wh[:24], magic & 1) != struct.unpack(">II", wh[24:32]):
        out.append(("index-damaged", "index", f"the checksum of {wal.name}'s header fails: SQLite ignores its "
                    f"{(wsize - 32) // (24 + page) if page else 0} frame(s) of transactions"))
    elif page and (wsize - 32) % (24 + page):
        # A writer appends a frame's header and its page in two writes, so a writer killed between them leaves
        # a WAL that ends mid-frame too; SQLite drops that uncommitted tail. Truncation shows as fewer whole
        # frames than the shared memory says were committed.
        whole, committed = (wsize - 32) // (24 + page), _shm_frames(shm)
        if whole < committed:
            out.append(("index-damaged", "index", f"{wal.name} ends mid-frame ({wsize} bytes) and holds {whole} "
                        f"whole frame(s) where {shm.name} names {committed} committed: it was truncated"))
    return out


def keep_wal(root: str | os.PathLike) -> str:
    """Copy the index's WAL and shared-memory files to quarantine/wal-<time>/ (before SQLite opens a damaged
    WAL and its next writer overwrites it), so what it held is never silently dropped; returns where."""
    root = Path(root)
    present = [p for p in (root / f"{INDEX}-wal", root / f"{INDEX}-shm") if p.exists()]
    if not present:
        return ""
    dest = _fresh(root / QUARANTINE / time.strftime("wal-%Y%m%d-%H%M%S", time.gmtime()))
    for p in present:
        shutil.copy2(p, dest / p.name)
    return str(dest.relative_to(root))


def _fresh(dest: Path) -> Path:
    base, n = dest, 1
    while dest.exists():
        dest, n = base.with_name(f"{base.name}.{n}"), n + 1
    dest.mkdir(parents=True)
    return dest


def _shm_frames(shm: Path) -> int:
    """The last valid WAL frame the shared-memory index names (0 if none, or no such file)."""
    try:
        with open(shm, "rb") as f:
            h = f.read(96)
    except OSError:
        return 0
    if len(h) < 96 or h[:48] != h[48:96] or not h[12]:          # two equal copies, isInit
        return 0
    return struct.unpack("=I", h[16:20])[0]


# ---- what the objects say ------------------------------------------------------------------------------
@dataclass
class ObjectScan:
    """Every intact object file, with the run records and checkpoint manifests parsed."""

    files: dict[str, int] = field(default_factory=dict)               # hash -> size (intact files only)
    mtimes: dict[str, float] = field(default_factory=dict)
    records: dict[str, list[tuple[str, dict]]] = field(default_factory=dict)   # run id -> [(hash, record)]
    manifests: dict[str, dict] = field(default_factory=dict)           # hash -> manifest
    texts: set[str] = field(default_factory=set)                       # JSON and UTF-8 text objects

    def newest(self, run_id: str) -> tuple[str, dict]:
        return max(self.records[run_id], key=lambda hd: _order(hd[1]))

    def listed(self) -> dict[str, tuple[str, dict]]:
        """checkpoint hash -> (run id, entry) for every checkpoint some version of a run record lists."""
        out = {}
        for run_id, versions in self.records.items():
            for _, d in sorted(versions, key=lambda hd: _order(hd[1])):
                for c in d.get("checkpoints") or []:
                    if isinstance(c, dict) and isinstance(c.get("hash"), str):
                        out[c["hash"]] = (run_id, c)
        return out


def _order(d: dict) -> tuple:
    v = d.get("version")
    return (v if isinstance(v, int) else -1, d.get("updated") or 0.0)


def is_record(d: Any) -> bool:
    return (isinstance(d, dict) and isinstance(d.get("id"), str) and d.get("state") in STATES
            and "engine_version" in d and isinstance(d.get("checkpoints", []), list))


def is_manifest(d: Any) -> bool:
    return isinstance(d, dict) and d.get("format") == FORMAT and isinstance(d.get("step"), int)


def registered(d: dict) -> bool:
    """Whether record `d` can only have been written after its run's index row: anything but the first
    version (a writer killed between a run's first record and its row leaves that one unnamed) and but a
    launcher's reservation (withdrawn, row and all, when its child never started)."""
    v = d.get("version")
    if (d.get("extra") or {}).get("starting"):       # a reservation never adopted (its release drops the row)
        return False
    return bool((isinstance(v, int) and v > 0) or d.get("state") != "running" or d.get("checkpoints"))


def scan(root: str | os.PathLike, *, rehash: bool = True, skip: set[str] = frozenset()) -> ObjectScan:
    """Read every object file (re-hashing it with `rehash`; files in `skip` are left out as known bad)."""
    out = ObjectScan()
    objects = Path(root) / "objects"
    for shard in sorted(objects.iterdir()) if objects.is_dir() else []:
        if len(shard.name) != 2 or not shard.is_dir():
            continue
        for f in sorted(shard.iterdir()):
            h = shard.name + f.name
            if f.name.startswith(".tmp-") or len(h) != HASH_LEN or h in skip:
                continue
            try:
                st = f.stat()
                with open(f, "rb") as fh:
                    first = fh.read(2)
                    if not rehash and first != b'{"':
                        data = first
                    else:
                        data = first + fh.read()
            except OSError:
                continue
            if rehash and blake3.blake3(data).hexdigest() != h:
                continue
            out.files[h], out.mtimes[h] = st.st_size, st.st_mtime
            if first == b'{"':
                try:
                    d = json.loads(data)
                except ValueError:
                    continue
                out.texts.add(h)
                if is_manifest(d):
                    out.manifests[h] = d
                elif is_record(d):
                    out.records.setdefault(d["id"], []).append((h, d))
            elif rehash:
                try:
                    data.decode("utf-8")
                    out.texts.add(h)
                except UnicodeDecodeError:
                    pass
    return out


# ---- the objects against the index ---------------------------------------------------------------------
def _step(d: dict) -> str:
    cks = d.get("checkpoints") or []
    return f"step {cks[-1].get('step')}" if cks and isinstance(cks[-1], dict) else "no checkpoint"


def compare(index: Index, objs: ObjectScan, read_json=None) -> list[tuple[str, str, str]]:
    """(kind, subject, detail) for every disagreement between the objects and the index. Read the objects
    first, then the index (as here): what a concurrent writer adds meanwhile is then in the index too."""
    out: list[tuple[str, str, str]] = []
    c = index.conn()
    own = not c.in_transaction
    try:
        if own:
            c.execute("BEGIN")                      # one snapshot of every table (WAL readers see one state)
        try:
            rows = {r["id"]: r for r in index.runs()}
            ck_rows = {r["hash"] for r in index.checkpoints()}
            obj_rows = {r["hash"] for r in index.objects()}
            refs = index.refs()
        finally:
            if own and c.in_transaction:
                c.execute("COMMIT")
    except sqlite3.Error as e:
        raise index._error(e, "read the index") from None
    by_hash = {h: d for versions in objs.records.values() for h, d in versions}
    manifest_runs = {m.get("run") for m in objs.manifests.values() if isinstance(m.get("run"), str)}
    for run_id in sorted(objs.records):
        h, d = objs.newest(run_id)
        row = rows.get(run_id)
        if row is None:
            if any(registered(x) for _, x in objs.records[run_id]) or run_id in manifest_runs:
                out.append(("lost-run", f"run {run_id}", f"the objects hold {len(objs.records[run_id])} version(s) "
                            f"of its record (newest: {d.get('state')}, {_step(d)}) and the index has no row for it"))
            continue
        cur = by_hash.get(row["record"])
        if cur is None and row["record"] and read_json is not None:
            cur = read_json(row["record"])
        if not is_record(cur):
            continue                                  # a missing or corrupt record: fsck's own check names it
        v_cur, v_new = cur.get("version"), d.get("version")
        if isinstance(v_cur, int) and isinstance(v_new, int) and v_new >= v_cur + 2:
            out.append(("lost-run", f"run {run_id}", f"the index is behind its objects: it names record version "
                        f"{v_cur} ({cur.get('state')}, {_step(cur)}), the objects hold version {v_new} "
                        f"({d.get('state')}, {_step(d)})"))
    for run_id, row in sorted(rows.items()):
        cur = by_hash.get(row["record"])
        if cur is None and row["record"] and read_json is not None:
            cur = read_json(row["record"])
        if not is_record(cur):
            continue
        if cur["id"] != run_id:
            out.append(("index-contradicts", f"run {run_id}", f"its row names record {row['record'][:12]}, which "
                        f"is a record of run {cur['id']}"))
            continue
        if cur["state"] != row["state"]:
            out.append(("index-contradicts", f"run {run_id}", f"its row says {row['state']}, the record it names "
                        f"({row['record'][:12]}) says {cur['state']}"))
    listed = objs.listed()
    lost: dict[str, list[str]] = {}
    unlisted: dict[str, list[str]] = {}
    for h, m in objs.manifests.items():
        if h in ck_rows:
            continue
        if h in listed:                                 # a record lists it: its row was committed before
            lost.setdefault(listed[h][0], []).append(h)
        elif isinstance(m.get("run"), str) and m["run"] in rows:
            unlisted.setdefault(m["run"], []).append(h)
    for run, hs in sorted(unlisted.items()):
        if len(hs) > 1:                                 # one is a save killed before its row; more are lost
            lost.setdefault(run, []).extend(hs)
    for run, hs in sorted(lost.items()):
        steps = sorted(objs.manifests[h].get("step") for h in hs)
        out.append(("lost-checkpoint", f"run {run}", f"{len(hs)} stored checkpoint(s) of the run (steps "
                    f"{steps[0]}..{steps[-1]}) have no index row"))
    # every object an index row or an indexed checkpoint names was registered before that row was written:
    # one without its object row is a row lost (and gc, which reads kinds from rows, would misjudge it)
    named = {r["hash"]: f"ref {r['name']}" for r in refs}
    for r in rows.values():
        named.update({h: f"run {r['id']}" for h in (r["record"], r["last_checkpoint"]) if h})
    for h in ck_rows:
        named[h] = "a checkpoint row"
        m = objs.manifests.get(h) or {}
        named.update({m[k]: f"checkpoint {h[:12]}" for k in ("weights", "optimizer_state")
                      if isinstance(m.get(k), str)})
    lacking = sorted(h for h in named if h in objs.files and h not in obj_rows)
    if lacking:
        out.append(("lost-object-row", "index", f"{len(lacking)} stored object(s) named by the index have no object "
                    f"row (first {lacking[0][:12]}, named by {named[lacking[0]]})"))
    return out


# ---- a new index from the objects ----------------------------------------------------------------------
@dataclass
class Rebuilt:
    runs: int = 0
    checkpoints: int = 0
    objects: int = 0
    refs: int = 0
    old_index: str = ""                   # where the old index files went (quarantine/...), "" if none
    not_rebuilt: list[str] = field(default_factory=list)

    def summary(self) -> str:
        s = (f"index rebuilt from the objects: {self.runs} run(s), {self.checkpoints} checkpoint(s), "
             f"{self.objects} object(s), {self.refs} ref(s) and pin(s) kept")
        if self.old_index:
            s += f"; the old index is in {self.old_index}"
        return s

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "checkpoints": self.checkpoints, "objects": self.objects, "refs": self.refs,
                "old_index": self.old_index, "not_rebuilt": self.not_rebuilt}


def _old_rows(db: Path) -> tuple[dict[str, list], str]:
    """Rows of the old index worth keeping (refs, object kinds, run liveness), or why none could be read."""
    if not db.exists():
        return {}, "the index was missing"
    try:
        c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        try:
            c.row_factory = sqlite3.Row
            return {t: c.execute(f"SELECT * FROM {t}").fetchall() for t in ("refs", "objects", "runs")}, ""
        finally:
            c.close()
    except sqlite3.Error as e:
        return {}, f"the old index cannot be read ({e})"


def rebuild(root: str | os.PathLike, objs: ObjectScan | None = None, index: Index | None = None) -> Rebuilt:
    """Write a new index.sqlite from the objects (`objs`, else a fresh re-hashing scan); the old index files
    go to quarantine/index-<time>/. Refs and pins live only in the index: they are kept from the old index
    when it can be read, and named as lost when not. Run it while nothing writes to the store."""
    root = Path(root)
    objs = objs if objs is not None else scan(root)
    rep = Rebuilt()
    db = root / INDEX
    if index is not None:
        index.close()
    old, why = _old_rows(db)
    if why:
        rep.not_rebuilt.append(f"refs and pins (names such as 'best', notebook pins, spec texts by spec hash) "
                               f"live only in the index and {why}: none were kept")
    old_kind = {r["hash"]: r["kind"] for r in old.get("objects", [])}
    old_run = {r["id"]: r for r in old.get("runs", [])}
    tmp = root / f"{INDEX}.rebuild"
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    new = Index(tmp, store=str(root))
    listed = objs.listed()
    kinds: dict[str, str] = {}
    for h, m in objs.manifests.items():
        kinds[h] = "checkpoint"
        for key, kind in (("weights", "checkpoint-weights"), ("optimizer_state", "checkpoint-optimizer")):
            if isinstance(m.get(key), str) and m[key] in objs.files:
                kinds.setdefault(m[key], kind)
    for versions in objs.records.values():
        for h, _ in versions:
            kinds[h] = "run-record"
    runs = []
    manifest_runs = {m.get("run") for m in objs.manifests.values()}
    for run_id in sorted(objs.records):
        h, d = objs.newest(run_id)
        if not (any(registered(x) for _, x in objs.records[run_id]) or run_id in manifest_runs or run_id in old_run):
            rep.not_rebuilt.append(f"run {run_id}: only its first record is stored (a start killed before the "
                                   "run was registered): not listed")
            continue
        if not isinstance(d.get("version"), int):
            rep.not_rebuilt.append(f"run {run_id}: its records carry no version (an older engine): the newest by "
                                   "time was taken")
        o = old_run.get(run_id)
        last = d.get("resume_from") or ((d.get("checkpoints") or [{}])[-1] or {}).get("hash") or \
            (d.get("extra") or {}).get("resumed_from")
        same = o is not None and o["record"] == h
        # proc_start "rebuilt": a pid now reused by another process never passes for the run's (a live writer
        # settled by mistake turns back to running on its next heartbeat)
        runs.append((run_id, d["state"], d.get("spec_hash"), float(d.get("created") or 0.0),
                     float(d.get("updated") or 0.0), o["heartbeat"] if same else d.get("updated"), d.get("pid"),
                     d.get("host") or "", o["proc_start"] if same else "rebuilt", h, last))
    cks = []
    for h, m in objs.manifests.items():
        run = m.get("run") if isinstance(m.get("run"), str) else (listed[h][0] if h in listed else None)
        if run is None:
            rep.not_rebuilt.append(f"checkpoint {h[:12]} (step {m.get('step')}): its manifest names no run and no "
                                   "record lists it: kept without a run")
        cks.append((h, run, int(m["step"]), int(m.get("epoch") or 0), m.get("parent"), m.get("spec_hash"),
                    float(m.get("created") or objs.mtimes.get(h, 0.0))))
    refs = [(r["name"], r["hash"], r["kind"], r["created"]) for r in old.get("refs", []) if r["hash"] in objs.files]
    lost_refs = [r["name"] for r in old.get("refs", []) if r["hash"] not in objs.files]
    if lost_refs:
        rep.not_rebuilt.append(f"{len(lost_refs)} ref(s) name objects that are not stored intact: dropped "
                               f"({', '.join(lost_refs[:5])})")
    with new.tx("rebuild the index") as c:
        c.executemany("INSERT INTO objects VALUES (?, ?, ?, ?)",
                      [(h, kinds.get(h) or old_kind.get(h) or ("text" if h in objs.texts else "blob"), size,
                        objs.mtimes.get(h, time.time())) for h, size in objs.files.items()])
        c.executemany("INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)", cks)
        c.executemany("INSERT INTO runs (id, state, spec_hash, created, updated, heartbeat, pid, host, proc_start, "
                      "record, last_checkpoint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", runs)
        c.executemany("INSERT OR REPLACE INTO refs VALUES (?, ?, ?, ?)", refs)
    new.conn().execute("PRAGMA journal_mode = DELETE")        # one self-contained file to rename (no WAL beside)
    new.close()
    rep.runs, rep.checkpoints, rep.objects, rep.refs = len(runs), len(cks), len(objs.files), len(refs)
    present = [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]
    if present:
        dest = _fresh(root / QUARANTINE / time.strftime("index-%Y%m%d-%H%M%S", time.gmtime()))
        for p in present:
            os.replace(p, dest / p.name)
        rep.old_index = str(dest.relative_to(root))
    os.replace(tmp, db)
    return rep
