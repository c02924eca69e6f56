"""`fsck`: check a whole store without re-running anything, and optionally repair what can be repaired.

Why: a store outlives crashes, full disks and hand edits; before a resume or a verify trusts it, one
command should say whether every object still hashes to its name, whether SQLite's own check passes,
whether the index and the files agree both ways, and whether every checkpoint loads with its tensors.
Repairs never lose data: a bad object is moved into `<store>/quarantine/` (never deleted), and only
index rows that name nothing are dropped. Run it while no training writes to the store.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import blake3

from .checkpoint import FORMAT, load_checkpoint
from .errors import StoreError
from .objects import HASH_LEN, hash_bytes
from .reindex import INDEX_KINDS, Rebuilt, compare, file_problems, fix_hint, rebuild, scan
from .runs import RunRecord, put_record
from .store import Store, default_path

QUARANTINE = "quarantine"
_HASH = re.compile(r"[0-9a-f]{64}")

# what each kind of problem is, and what --repair does about it
KINDS = {
    "index-damaged": "the index is missing or cannot be opened, SQLite's integrity check fails, junk follows the "
                     "database, or its WAL's checksum fails, is cut short of its committed frames or is gone "
                     "(repair: the index is rebuilt from the objects; the old one is moved to quarantine/)",
    "lost-run": "the objects hold a run the index lacks, or a newer state of it than the index names (a lost or "
                "rolled-back WAL, a deleted index) (repair: the index is rebuilt from the objects)",
    "lost-checkpoint": "stored checkpoints of a run that its record lists have no index row (repair: the index is "
                       "rebuilt from the objects)",
    "lost-object-row": "stored objects that index rows name (a ref, a run, a checkpoint and its tensors) have no "
                       "object row (repair: the index is rebuilt from the objects)",
    "index-contradicts": "an index row the objects contradict: a run row naming another run's record, or a state "
                         "its record does not say (repair: the index is rebuilt from the objects)",
    "corrupt-object": "the file's bytes do not hash to its name (repair: moved to quarantine/, its rows dropped)",
    "missing-object": "the index names an object with no file (repair: the row is dropped)",
    "unindexed-object": "an intact file the index does not know: a write killed between the file and its row "
                        "(not a problem: nothing names it; repair registers it, gc removes it). A run record or "
                        "checkpoint the index lacks is not one of these: it is a lost run or checkpoint",
    "dangling-checkpoint": "a checkpoint row names no stored checkpoint (repair: the row is dropped)",
    "broken-checkpoint": "a checkpoint does not load: a malformed manifest or missing/corrupt tensors "
                         "(repair: the manifest is moved to quarantine/, its rows dropped)",
    "dangling-ref": "a ref or pin names no object (repair: the ref is dropped)",
    "missing-run-record": "a run's current record object is gone or corrupt (repair: a new record from the run's "
                          "newest intact earlier record, else from its index rows; what only the lost one held is "
                          "gone, and the record says it was rebuilt)",
    "dangling-last-checkpoint": "a run's last checkpoint does not load (repair: the newest one that loads, or none)",
}


@dataclass
class Problem:
    kind: str
    subject: str                  # an object hash, "checkpoint <hash>", "ref <name>", "run <id>", "index"
    detail: str
    repaired: str = ""            # what --repair did; "" when nothing was done

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FsckReport:
    """What fsck found: `.problems` (each with what was repaired), `.ok` when there were none."""

    store: str
    problems: list[Problem] = field(default_factory=list)
    orphans: list[Problem] = field(default_factory=list)     # intact unindexed files: reported, not problems
    checked: dict[str, int] = field(default_factory=dict)
    repair: bool = False
    rebuilt: Rebuilt | None = None        # set when the index was rebuilt from the objects
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def unrepaired(self) -> list[Problem]:
        return [p for p in self.problems if not p.repaired]

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "ok": self.ok, "repair": self.repair, "checked": self.checked,
                "seconds": round(self.seconds, 3), "problems": [p.to_json() for p in self.problems],
                "orphans": [p.to_json() for p in self.orphans],
                "rebuilt": self.rebuilt.to_json() if self.rebuilt else None}

    def lines(self) -> list[str]:
        c = self.checked
        head = (f"{'ok' if self.ok else f'{len(self.problems)} problem(s)'}: store {self.store}: "
                f"{c.get('objects', 0)} objects re-hashed, {c.get('checkpoints', 0)} checkpoints loaded, "
                f"{c.get('index_rows', 0)} index rows checked")
        if self.orphans:
            said = ("registered" if self.repair else "harmless: --repair registers them, gc removes them" if self.ok
                    else "see the problems below")
            head += f"; {len(self.orphans)} intact unindexed object(s) from an interrupted write ({said})"
        if self.rebuilt is not None:
            head += "\n" + self.rebuilt.summary() + "".join(f"\n  not rebuilt: {x}" for x in self.rebuilt.not_rebuilt)
        if self.ok:
            return [head]
        rows = [("KIND", "SUBJECT", "DETAIL") + (("REPAIR",) if self.repair else ())]
        for p in self.problems:
            rows.append(tuple(_short(x) for x in (p.kind, p.subject, p.detail) +
                              ((p.repaired or "not repaired",) if self.repair else ())))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        out = [head] + ["  ".join([c.ljust(w) for c, w in zip(r[:-1], widths)] + [r[-1]]) for r in rows]
        if any(p.kind in INDEX_KINDS and not p.repaired for p in self.problems):
            out.append(f"the index is damaged or has lost runs: {fix_hint(self.store)}")
        if not self.repair:
            out.append("repair what can be repaired (nothing is deleted; bad objects go to quarantine/): "
                       f"scellis fsck --repair --store {self.store}")
        return out


def _short(text: str) -> str:
    """Full hashes as their first 12 digits, as `scellis runs` shows them (the JSON keeps them whole)."""
    return _HASH.sub(lambda m: m.group(0)[:12], text)


def _rehash(path: Path) -> str | None:
    h = blake3.blake3()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _quarantine(root: Path, src: Path, h: str) -> str:
    """Move `src` to <root>/quarantine/<hash> (a suffix when that name is taken); returns where it went."""
    q = root / QUARANTINE
    q.mkdir(exist_ok=True)
    dest, n = q / h, 1
    while dest.exists():
        dest, n = q / f"{h}.{n}", n + 1
    os.replace(src, dest)
    return str(dest.relative_to(root))


def _open(root: Path, store: Store | None, problems: list[Problem]) -> Store | None:
    """The store with a sound index (SQLite's integrity check first, read-only), else None (and why)."""
    path = root / "index.sqlite"
    if not path.exists():
        problems.append(Problem("index-damaged", "index", "index.sqlite is missing"))
        return None
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0) as c:
            rows = [r[0] for r in c.execute("PRAGMA integrity_check").fetchall()]
    except sqlite3.Error as e:
        problems.append(Problem("index-damaged", "index", f"SQLite cannot read index.sqlite: {e}"))
        return None
    if rows != ["ok"]:
        problems.append(Problem("index-damaged", "index", "PRAGMA integrity_check: " + "; ".join(rows[:5])))
        return None
    try:
        return store if store is not None else Store(root)
    except StoreError as e:
        problems.append(Problem("index-damaged", "index", e.diagnostic.message))
        return None


def _kind_of(data: bytes) -> str:
    try:
        m = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return "blob"
    return "checkpoint" if isinstance(m, dict) and m.get("format") == FORMAT else "json"


def _rebuild_record(st: Store, row, records: set[str]) -> str:
    """A new record for run `row` whose record object is lost, so `scellis runs` and resume work again:
    its newest intact earlier version (records are immutable versions), else one made from the index
    rows (state, spec, times, host, checkpoints). The index row's state wins; returns what was done."""
    base, src = None, None
    for h in records:
        try:
            d = st.get_json(h)
        except StoreError:
            continue
        if isinstance(d, dict) and d.get("id") == row["id"] and (base is None or d.get("updated", 0) > base.get("updated", 0)):
            base, src = d, h
    if base is not None:
        try:
            rec = RunRecord.from_json(base)
        except StoreError:
            base = None
    if base is None:
        rec = RunRecord(id=row["id"], state=row["state"], spec_hash=row["spec_hash"], created=row["created"],
                        host=row["host"] or "", pid=row["pid"])
        rec.checkpoints = [{"hash": c["hash"], "step": c["step"], "epoch": c["epoch"]}
                           for c in st.index.checkpoints(row["id"]) if st.has(c["hash"])]
    how = f"its earlier record {src[:12]}" if src else "the index"
    rec.state, rec.updated, rec.record_hash = row["state"], row["updated"], src
    rec.extra = dict(rec.extra or {}, rebuilt=f"record {row['record'][:12]} was lost; fsck rebuilt it from {how}")
    h = put_record(st, rec)
    st.index.update_run(row["id"], record=h)
    return f"record rebuilt from {how} as {h[:12]}"


def fsck(store: Store | str | os.PathLike | None = None, repair: bool = False,
         rebuild_index: bool = False) -> FsckReport:
    """Check every object, the index (both ways) and every checkpoint of `store`; with `repair`, fix what can
    be fixed without losing data (an index that is damaged or disagrees with the objects is rebuilt from
    them); with `rebuild_index`, rebuild it whatever it says. Returns the report; raises StoreError only when
    there is no store."""
    t0 = time.monotonic()
    root = store.root if isinstance(store, Store) else default_path(store)
    if not (root / "objects").is_dir() and not (root / "index.sqlite").exists():
        raise StoreError(f"no store at {root}", where=f"store {root}", code="store-missing",
                         hint="pass --store DIR or set $SCELLIS_STORE to the store of your runs")
    rep = FsckReport(str(root), repair=repair or rebuild_index)
    problems = rep.problems
    # the index files first: opening the index makes SQLite drop a WAL whose checksum fails
    seen = list(store.index_damage) if isinstance(store, Store) else []
    for kind, subject, detail in seen + [x for x in file_problems(root) if x not in seen]:
        problems.append(Problem(kind, subject, detail))
    st = _open(root, store if isinstance(store, Store) else None, problems)
    index = st.index if st is not None else None

    # 1. every object file re-hashes to its name
    objects_dir = root / "objects"
    files: dict[str, Path] = {}
    bad: set[str] = set()
    for shard in sorted(objects_dir.iterdir()) if objects_dir.is_dir() else []:
        if len(shard.name) != 2 or not shard.is_dir():
            continue
        for f in sorted(shard.iterdir()):
            if f.name.startswith(".tmp-") or len(f.name) != HASH_LEN - 2 or not f.is_file():
                continue                       # a killed writer's temp file: no name points at it (gc removes it)
            h = shard.name + f.name
            files[h] = f
            got = _rehash(f)
            if got != h:
                bad.add(h)
                detail = "unreadable" if got is None else f"{f.stat().st_size} bytes hash to {got[:12]}..."
                p = Problem("corrupt-object", h, detail)
                if repair:
                    p.repaired = f"moved to {_quarantine(root, f, h)}"
                problems.append(p)
    rep.checked["objects"] = len(files)

    # 2. the objects against the index: runs and checkpoints it lacks, rows the objects contradict
    objs = scan(root, rehash=False, skip=bad)           # (step 1 re-hashed them all)
    if index is not None:
        def read(h: str):
            try:
                return st.get_json(h)
            except StoreError:
                return None
        try:
            problems.extend(Problem(*x) for x in compare(index, objs, read))
        except StoreError as e:
            problems.append(Problem("index-damaged", "index", e.diagnostic.message))
    if rebuild_index or (repair and any(p.kind in INDEX_KINDS for p in problems)):
        rep.rebuilt = rebuild(root, objs, index)
        for p in problems:
            if p.kind in INDEX_KINDS:
                p.repaired = "index rebuilt from the objects"
        if isinstance(store, Store):
            store.index_damage = []
        st = store if isinstance(store, Store) else Store(root)
        index = st.index
    if index is None:
        rep.seconds = time.monotonic() - t0
        return rep

    # 3. the index against the files, both ways
    rows = {r["hash"]: r for r in index.objects()}
    ck_rows = {r["hash"]: r for r in index.checkpoints()}
    refs, runs = index.refs(), index.runs()
    rep.checked["index_rows"] = len(rows) + len(ck_rows) + len(refs) + len(runs)
    drop: set[str] = set(bad)
    for h, r in rows.items():
        if h not in files:
            p = Problem("missing-object", h, f"indexed as {r['kind']} ({r['size']} bytes), no file")
            problems.append(p)
            drop.add(h)
            if repair:
                p.repaired = "row dropped"
    for h, f in files.items():
        if h not in rows and h not in bad:
            p = Problem("unindexed-object", h, f"{f.stat().st_size} bytes, not in the index")
            rep.orphans.append(p)
            if repair:
                data = f.read_bytes()
                if hash_bytes(data) == h:
                    kind = _kind_of(data)
                    index.add_object(h, kind, len(data))
                    p.repaired = f"registered as {kind}"

    # 4. every checkpoint loads, tensors and all
    manifests = sorted({h for h, r in rows.items() if r["kind"] == "checkpoint"} | set(ck_rows))
    loaded = 0
    for h in manifests:
        if h in drop:
            continue
        if h not in files:
            p = Problem("dangling-checkpoint", f"checkpoint {h}", "the checkpoint row names no stored object")
            problems.append(p)
            drop.add(h)
            if repair:
                p.repaired = "row dropped"
            continue
        try:
            load_checkpoint(st, h)
            loaded += 1
        except StoreError as e:
            p = Problem("broken-checkpoint", f"checkpoint {h}", e.diagnostic.message.split("\n")[0][:200])
            problems.append(p)
            drop.add(h)
            if repair and files[h].exists():
                p.repaired = f"manifest moved to {_quarantine(root, files[h], h)}"
    rep.checked["checkpoints"] = loaded

    # 5. refs and runs name what is there
    present = set(files) - drop
    for r in refs:
        if r["hash"] not in present:
            p = Problem("dangling-ref", f"ref {r['name']}", f"{r['kind']} names {r['hash'][:12]}, which is not stored "
                        "intact")
            problems.append(p)
            if repair:
                index.delete_ref(r["name"])
                p.repaired = "ref dropped"
    if repair and drop:
        index.remove_objects(sorted(drop))             # object and checkpoint rows of what is gone or quarantined
    for r in runs:
        if r["record"] and r["record"] not in present:
            p = Problem("missing-run-record", f"run {r['id']}", f"record {r['record'][:12]} is not stored intact")
            problems.append(p)
            if repair:
                p.repaired = _rebuild_record(st, r, {h for h in present if rows.get(h) is not None
                                                     and rows[h]["kind"] == "run-record"})
        last = r["last_checkpoint"]
        if last and last not in present:
            p = Problem("dangling-last-checkpoint", f"run {r['id']}", f"last checkpoint {last[:12]} does not load")
            problems.append(p)
            if repair:
                good = [c["hash"] for c in index.checkpoints(r["id"]) if c["hash"] in present and c["hash"] not in drop]
                newest = good[-1] if good else None
                index.update_run(r["id"], last_checkpoint=newest)
                p.repaired = f"last checkpoint now {newest[:12]}" if newest else "last checkpoint cleared"
    rep.checked["runs"] = len(runs)
    rep.seconds = time.monotonic() - t0
    return rep
