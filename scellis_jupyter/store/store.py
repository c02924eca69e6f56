"""`Store`: one directory (objects/ + index.sqlite) holding checkpoints, run records, specs and pins.

Why one class: notebooks and the CLI need a single handle that finds the store the same way everywhere
(explicit path > $SCELLIS_STORE > ./.scellis), registers every object it writes in the index, and
collects garbage with one rule: intermediate checkpoints nobody refers to go; the final checkpoint of
every run, pinned and named objects, run records and everything they name stay.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from .errors import StoreError, os_error
from .index import COLLECTABLE_KINDS, Index
from .objects import (HASH_LEN, ObjectStore, canonical_json, load_json, load_tensors,
                      tensors_bytes)
from .checkpoint import save_checkpoint
from .checkpoint import load_checkpoint
from .checkpoint import check_spec
from .runs import start_run
from .runs import list_runs
from .runs import get_run
from .leases import DEFAULT_EXPIRY, Lease, live_leases
from .reindex import compare, file_problems, fix_hint, is_manifest, is_record, keep_wal, scan
from .. import settings
from ..errors import Diagnostic, did_you_mean

ENV_VAR = "SCELLIS_STORE"
DEFAULT_DIR = ".scellis"


@dataclass
class GcReport:
    """What `Store.gc` removed (hashes, bytes) and what it kept."""

    freed_objects: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    removed_checkpoints: list[str] = field(default_factory=list)
    removed_temp_files: int = 0
    kept_objects: int = 0
    kept_for_lease: int = 0           # collectable but younger than the oldest live writer's lease
    live_leases: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"freed_objects": self.freed_objects, "freed_bytes": self.freed_bytes,
                "removed_checkpoints": self.removed_checkpoints, "removed_temp_files": self.removed_temp_files,
                "kept_objects": self.kept_objects, "kept_for_lease": self.kept_for_lease,
                "live_leases": self.live_leases}


def default_path(path: str | os.PathLike | None = None) -> Path:
    """Where the store lives: `path`, else $SCELLIS_STORE, else `.scellis/` in the current directory."""
    if path is not None:
        return Path(path).expanduser()
    env = settings.text(ENV_VAR)
    return Path(env).expanduser() if env else Path.cwd() / DEFAULT_DIR


class Store:
    """A content-addressed store; open with `Store.open()`."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.objects = ObjectStore(self.root)
        # before SQLite opens the index: it ignores a WAL whose checksum fails, and its next writer overwrites it
        self.index_damage = file_problems(self.root)
        if any("wal" in detail.lower() for _, _, detail in self.index_damage):
            try:
                kept = keep_wal(self.root)
                if kept:
                    self.index_damage.append(("index-damaged", "index", f"the damaged WAL was copied to {kept}"))
            except OSError:
                pass
        if not (self.root / "index.sqlite").exists() and next(iter(self.objects), None) is not None:
            n = sum(1 for _ in self.objects)
            raise StoreError(f"the index is missing but the store holds {n} objects (runs and checkpoints a new "
                             "index would not know): refusing to start a fresh index over them",
                             where=f"store {self.root}", code="store-index", hint=fix_hint(self.root), objects=n)
        self.index = Index(self.root / "index.sqlite", store=str(self.root))
        self._leases: list[Lease] = []
        self.dropped_rows = self._drop_dangling()

    def _drop_dangling(self) -> list[str]:
        """Drop index rows that name an object file which is not there, so the index never names what the
        store does not hold (every writer puts the file before its row, and gc drops rows before files,
        so only a store damaged by hand, or written by an older engine killed mid-write, has any)."""
        named = {r[0] for r in self.index.query("SELECT hash FROM objects UNION SELECT hash FROM checkpoints")}
        if not named:
            return []
        missing = sorted(named - set(self.objects))
        if missing:
            try:
                self.index.remove_objects(missing)
            except StoreError:                  # a read-only store: reads still refuse the missing objects
                return []
        return missing

    def check_index(self) -> list[tuple[str, str, str]]:
        """(kind, subject, detail) for each way the index is damaged or disagrees with the objects: its files
        (junk, a failed WAL checksum, a lost WAL, as seen when this store was opened), SQLite's quick_check,
        and runs or checkpoints the objects hold that the index lacks or contradicts. [] when it is sound."""
        out = list(self.index_damage)
        try:
            rows = [r[0] for r in self.index.query("PRAGMA quick_check")]
        except StoreError as e:
            return out + [("index-damaged", "index", e.diagnostic.message)]
        if rows != ["ok"]:
            out.append(("index-damaged", "index", "PRAGMA quick_check: " + "; ".join(rows[:5])))
        objs = scan(self.root, rehash=False)            # the objects first, then the index (see compare)

        def read(h: str):
            try:
                return self.get_json(h)
            except StoreError:
                return None
        try:
            out += compare(self.index, objs, read)
        except StoreError as e:
            out.append(("index-damaged", "index", e.diagnostic.message))
        return out

    def index_diagnostics(self) -> list[Diagnostic]:
        """`check_index` in the project's one diagnostic format, each naming the fix."""
        return [Diagnostic("index-damaged", f"{kind}: {subject}: {detail}", where=f"store {self.root}",
                           hint=fix_hint(self.root)) for kind, subject, detail in self.check_index()]

    @classmethod
    def open(cls, path: str | os.PathLike | None = None, *, create: bool = True) -> "Store":
        root = default_path(path)
        if root.exists() and not root.is_dir():
            raise StoreError(f"{root} is not a directory", where=f"store {root}", code="bad-argument",
                             hint=f"give a directory (explicit path or ${ENV_VAR})")
        if not root.exists():
            if not create:
                raise StoreError(f"no store at {root}", where=f"store {root}", code="store-missing",
                                 hint=f"pass --store DIR or set ${ENV_VAR} to the store of your runs")
            try:
                (root / "objects").mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise os_error(e, action=f"create the store {root}", where=f"store {root}") from None
        elif not (root / "index.sqlite").exists() and not create and next(iter(ObjectStore(root)), None) is None:
            raise StoreError(f"{root} is not a scellis store (no index.sqlite)", where=f"store {root}",
                             code="store-missing", hint=f"pass --store DIR or set ${ENV_VAR}")
        return cls(root)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # ---- objects ----------------------------------------------------------------------------------
    def put_bytes(self, data: bytes, *, kind: str = "blob") -> str:
        """Store bytes; returns their BLAKE3 hash. The file comes first (durable), then its index row, so a
        kill in between leaves an unnamed file (gc removes it), never a row naming nothing."""
        data = bytes(data)
        for lease in self._leases:
            lease.refresh()
        h = self.objects.write(data)
        self.index.add_object(h, kind, len(data))
        return h

    def lease(self, *, expiry: float = DEFAULT_EXPIRY) -> Lease:
        """Register this process as a writer until the returned lease is released (use it as a `with`):
        gc keeps every object younger than the oldest live lease, so what a writer has written but not
        yet named survives any `--grace`. Writes through this handle refresh it."""
        lease = Lease(self.root, expiry=expiry, on_release=lambda x: x in self._leases and self._leases.remove(x))
        self._leases.append(lease)
        return lease

    def get_bytes(self, ref: str) -> bytes:
        """Bytes of an object (full hash or unique prefix), verified against the hash."""
        return self.objects.read(self.resolve(ref))

    def put_tensors(self, tensors: dict[str, np.ndarray], *, kind: str = "tensors") -> str:
        return self.put_bytes(tensors_bytes(tensors), kind=kind)

    def get_tensors(self, ref: str) -> dict[str, np.ndarray]:
        h = self.resolve(ref)
        return load_tensors(self.objects.read(h), name=h, where=f"store {self.root}")

    def put_json(self, obj: Any, *, kind: str = "json") -> str:
        return self.put_bytes(canonical_json(obj), kind=kind)

    def get_json(self, ref: str) -> Any:
        h = self.resolve(ref)
        return load_json(self.objects.read(h), name=h, where=f"store {self.root}")

    def put_text(self, text: str, *, kind: str = "text") -> str:
        """Store text (e.g. a spec, so a spec mismatch can show a diff); returns its hash."""
        if not isinstance(text, str):
            raise StoreError(f"put_text needs a str, got {type(text).__name__}", code="bad-argument")
        return self.put_bytes(text.encode("utf-8"), kind=kind)

    def get_text(self, ref: str) -> str:
        h = self.resolve(ref)
        try:
            return self.objects.read(h).decode("utf-8")
        except UnicodeDecodeError:
            raise StoreError(f"object {h} is not UTF-8 text", where=f"store {self.root}", code="bad-argument") from None

    def text_or_none(self, h: str) -> str | None:
        """The text of object `h` if the store has it (used for spec diffs), else None."""
        try:
            return self.get_text(h)
        except StoreError:
            return None

    def resolve(self, ref: str) -> str:
        """Full hash for a hash or unique hex prefix."""
        return self.objects.resolve(ref)

    def has(self, h: str) -> bool:
        return self.objects.exists(h)

    def verify(self, hashes: Iterable[str] | None = None) -> dict[str, str]:
        """Re-hash objects (all by default); returns {hash: problem} for those that fail."""
        bad = {}
        for h in (self.objects if hashes is None else hashes):
            try:
                self.objects.read(h)
            except StoreError as e:
                bad[h] = e.diagnostic.message
        return bad

    # ---- refs and pins ----------------------------------------------------------------------------
    def set_ref(self, name: str, ref: str) -> str:
        """Name an object (e.g. "best"); named objects are never collected."""
        h = self.resolve(ref)
        self.index.set_ref(_ref_name(name), h, "ref")
        return h

    def ref(self, name: str) -> str | None:
        row = self.index.ref(name)
        return row["hash"] if row else None

    def pin(self, name: str, ref: str) -> str:
        """Pin an object for a notebook (a hash, or a run id = its current record): gc keeps it and what it names."""
        if isinstance(ref, str) and ref.startswith("run-"):
            h = get_run(self, ref).record_hash
        else:
            h = self.resolve(ref)
        self.index.set_ref(_ref_name(name), h, "pin")
        return h

    def unpin(self, name: str) -> None:
        if not self.index.delete_ref(name):
            names = [r["name"] for r in self.index.refs()]
            raise StoreError(f"no pin {name!r}", where=f"store {self.root}", code="store-unknown",
                             hint=did_you_mean(name, names) or "nothing is pinned under that name")

    def pins(self) -> dict[str, str]:
        return {r["name"]: r["hash"] for r in self.index.refs("pin")}

    # ---- checkpoints and runs (module functions, bound here for convenience) ------------------------
    def save_checkpoint(self, **kw: Any) -> str:
        return save_checkpoint(self, **kw)

    def load_checkpoint(self, ref: str):
        return load_checkpoint(self, ref)

    def keep_spec_text(self, spec_hash: str, text: str) -> None:
        """A spec's text, found again by its spec hash: `resume` rebuilds the spec from it and a checkpoint
        from another spec is refused with the diff of the two texts."""
        self.set_ref(f"spec-{spec_hash}", self.put_text(text, kind="spec"))

    def spec_text(self, spec_hash: str) -> str | None:
        """The text kept for `spec_hash` (keep_spec_text), or None."""
        h = self.ref(f"spec-{spec_hash}")
        return self.text_or_none(h) if h is not None else None

    def check_spec(self, ckpt, spec_hash: str) -> None:
        """Refuse `ckpt` under another spec, with the diff of the texts kept by spec hash (or by object hash)."""
        check_spec(ckpt, spec_hash, lambda h: self.spec_text(h) or self.text_or_none(h))

    def resolve_checkpoint(self, ref: str) -> str:
        """A checkpoint hash from a hash/prefix, a ref or pin name, or a run id (its last checkpoint).

        Unknown references get suggestions among checkpoints (close hash prefixes), refs and run ids, not
        among every object, and an object that is not a checkpoint (e.g. its weights) is named as such.
        """
        if not isinstance(ref, str) or not ref:
            raise StoreError(f"a checkpoint reference must be a non-empty string, got {ref!r}", code="bad-argument")
        row = self.index.ref(ref)
        if row is not None:
            return row["hash"]
        if ref.startswith("run-"):
            rec = get_run(self, ref)
            if rec.last_checkpoint is None:
                raise StoreError(f"run {rec.id} has no checkpoint", where=f"run {rec.id}", code="store-unknown",
                                 hint="it stopped before saving one: start it again")
            return rec.last_checkpoint
        p = ref.strip().lower()
        where = f"store {self.root}"
        if not (0 < len(p) <= HASH_LEN and all(c in "0123456789abcdef" for c in p)):
            names = [r["name"] for r in self.index.refs()] + [r["id"] for r in self.index.runs()]
            raise StoreError(f"no checkpoint, ref or run named {ref!r}", where=where, code="store-unknown",
                             hint=did_you_mean(ref, names) or "give a checkpoint hash (or a unique prefix), a ref "
                             "or a run id; `scellis runs` lists the runs")
        cks = sorted({r["hash"] for r in self.index.objects("checkpoint")} |
                     {r["hash"] for r in self.index.checkpoints()})
        matches = [h for h in cks if h.startswith(p)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            shown = ", ".join(m[: max(len(p) + 2, 12)] for m in matches[:5])
            raise StoreError(f"prefix {ref!r} is ambiguous: {len(matches)} checkpoints match ({shown})", where=where,
                             code="store-ambiguous", hint="give more digits of the hash", matches=matches)
        try:
            h = self.resolve(p)
        except StoreError as e:
            if e.diagnostic.code not in ("store-unknown", "store-ambiguous"):
                raise
            close = _typos_of(p, cks)
            hint = ("did you mean " + " or ".join(c[:max(12, len(p))] for c in close) + "?") if close else \
                ("this store has no checkpoints yet" if not cks else
                 "no checkpoint here starts with it (one whose process was killed while writing it was never "
                 "saved); `scellis runs` lists each run's last good checkpoint")
            raise StoreError(f"no checkpoint {ref!r} in the store", where=where, code="store-unknown", hint=hint,
                             suggestions=close) from None
        row = self.index.object(h)
        if row is not None and row["kind"] != "checkpoint":
            raise StoreError(f"object {h[:12]} is a {row['kind']} object, not a checkpoint", where=where,
                             code="checkpoint-malformed", hint="give the hash of a checkpoint (see `scellis show RUN`)")
        return h

    # ---- logs of runs (mutable files beside the objects: not content, never collected) ------------
    def log_path(self, run_id: str, suffix: str) -> Path:
        """`<store>/logs/<run>.<suffix>` (the folder is created): a run's output, progress events, launch."""
        d = self.root / "logs"
        try:
            d.mkdir(exist_ok=True)
        except OSError as e:
            raise os_error(e, action=f"create {d}", where=f"store {self.root}") from None
        return d / f"{run_id}.{suffix}"

    def start_run(self, **fields: Any):
        return start_run(self, **fields)

    def list_runs(self, **kw: Any):
        return list_runs(self, **kw)

    def get_run(self, prefix: str, **kw: Any):
        return get_run(self, prefix, **kw)

    # ---- garbage collection -----------------------------------------------------------------------
    def gc(self, keep_final: bool = True, *, grace_s: float = 60.0, timeout: float = 30.0) -> GcReport:
        """Delete intermediate checkpoints (and their tensors) that nothing refers to; returns what was freed.

        Kept: every pinned or named object and what it names; the latest record of every run and the
        hashes it names (spec, program, dataset, split); the final checkpoint of every run (with
        `keep_final`); every checkpoint of a run still running; anything younger than `grace_s` seconds
        (a concurrent writer may not have named it yet). Only checkpoint objects and superseded run
        records are ever deleted: datasets, specs and user blobs stay. Leftover temp files of killed
        writers, and object files no index row names (a writer killed between file and row: nobody got
        their hash), older than `grace_s` go too. Whatever `grace_s` says, nothing younger than the start
        of the oldest live writer's lease (`Store.lease`, held by every running run) is deleted: that
        writer may not have named it yet (`kept_for_lease` counts them); dead leases are removed.
        """
        # The order matters: the cutoff, then the leases, then what is named. A writer whose lease is gone
        # when the leases are read named its objects before that, so the refs and runs read next see them;
        # a live lease is covered by the floor; a writer that registers later writes after the cutoff (a
        # rewrite of existing bytes refreshes the file's mtime), which the grace covers.
        damage = self.check_index()
        if damage:           # the index would not name what the objects need kept: collect nothing
            kind, subject, detail = damage[0]
            raise StoreError(f"gc refused: the index does not match the objects ({len(damage)} problem(s); first: "
                             f"{kind}: {subject}: {detail})", where=f"store {self.root}", code="store-index",
                             hint=fix_hint(self.root) + ", then gc", problems=len(damage))
        cutoff = time.time() - grace_s
        report = GcReport()
        leases = live_leases(self.root, drop_dead=True)
        report.live_leases = len(leases)
        # 1 s of slack: a file system may round an mtime down below the lease's start
        floor = min((lease["started"] for lease in leases), default=math.inf) - 1.0

        def leased(*times: float) -> bool:
            young = max(times) >= floor
            report.kept_for_lease += young
            return young

        runs = list_runs(self, timeout=timeout)            # settles dead runs first
        keep: set[str] = set()
        for r in self.index.refs():
            keep |= self._closure(r["hash"])
        for rec in runs:
            keep.add(rec.record_hash)
            keep |= {h for h in (rec.spec_hash, rec.program_hash, rec.dataset_hash, rec.split_hash) if h}
            if rec.state == "running":
                for c in rec.checkpoints:
                    keep |= self._closure(c["hash"])
                for row in self.index.checkpoints(rec.id):
                    keep |= self._closure(row["hash"])
            elif keep_final and rec.last_checkpoint:
                keep |= self._closure(rec.last_checkpoint)
        for u in runs.unreadable:           # a run whose record cannot be read: keep all it may name
            keep.add(u["record"])
            row = self.index.run(u["run"])
            for h in [c["hash"] for c in self.index.checkpoints(u["run"])] + [row and row["last_checkpoint"]]:
                keep |= self._closure(h)
        doomed = [row for row in self.index.objects()
                  if row["kind"] in COLLECTABLE_KINDS and row["hash"] not in keep
                  and max(row["created"], self._mtime(row["hash"])) < cutoff
                  and not leased(row["created"], self._mtime(row["hash"]))]
        # rows first, then files: a kill in between leaves unnamed files (removed below next time), never
        # rows that name nothing
        self.index.remove_objects([row["hash"] for row in doomed])
        for row in doomed:
            if self._mtime(row["hash"]) >= cutoff:     # written again meanwhile (same bytes): a writer's now
                self.index.add_object(row["hash"], row["kind"], row["size"])
                continue
            freed = self.objects.delete(row["hash"])
            report.freed_bytes += freed
            if freed:
                report.freed_objects.append(row["hash"])
            if row["kind"] == "checkpoint":
                report.removed_checkpoints.append(row["hash"])
        indexed = {row["hash"] for row in self.index.objects()}
        for h in self.objects:                  # files no row names (a writer killed between file and row)
            if h not in indexed and h not in keep:
                try:
                    mtime = self.objects.path(h).stat().st_mtime
                except OSError:
                    continue
                if mtime >= cutoff or leased(mtime):
                    continue                    # a concurrent writer may be about to add its row
                freed = self.objects.delete(h)
                report.freed_bytes += freed
                if freed:
                    report.freed_objects.append(h)
        for p in self.objects.temp_files():
            try:
                mtime = p.stat().st_mtime
                if mtime < cutoff and not leased(mtime):
                    report.freed_bytes += p.stat().st_size
                    p.unlink()
                    report.removed_temp_files += 1
            except OSError:
                pass
        report.kept_objects = sum(1 for _ in self.objects)
        return report

    def _mtime(self, h: str) -> float:
        try:
            return self.objects.path(h).stat().st_mtime
        except OSError:
            return 0.0

    def _sniff(self, h: str) -> str | None:
        """"checkpoint" or "run-record" when object `h` is one (read only when it starts as JSON), else None."""
        try:
            with open(self.objects.path(h), "rb") as f:
                if f.read(2) != b'{"':
                    return None
            d = self.get_json(h)
        except (OSError, StoreError):
            return None
        return "checkpoint" if is_manifest(d) else "run-record" if is_record(d) else None

    def _closure(self, h: str | None) -> set[str]:
        """`h` plus what it names when it is a checkpoint (its tensors, not its parent) or a run record."""
        if not h:
            return set()
        out = {h}
        row = self.index.object(h)
        kind = row["kind"] if row else self._sniff(h)       # a row the index lacks: what the bytes say
        if kind not in ("checkpoint", "run-record"):
            return out
        try:
            m = self.get_json(h)
        except StoreError:
            return out
        if kind == "checkpoint" and isinstance(m, dict):
            out |= {m[k] for k in ("weights", "optimizer_state", "spec_hash") if isinstance(m.get(k), str)}
        elif kind == "run-record" and isinstance(m, dict):
            out |= {m[k] for k in ("spec_hash", "program_hash", "dataset_hash", "split_hash")
                    if isinstance(m.get(k), str)}
            cks = m.get("checkpoints") or []
            last = m.get("resume_from") or (cks[-1].get("hash") if cks and isinstance(cks[-1], dict) else None)
            if last:
                out |= self._closure(last)
        return out


def _typos_of(p: str, hashes: Iterable[str], n: int = 3) -> list[str]:
    """Hashes that `p` is plausibly a mistyped prefix of: the first 4+ digits agree, or at most a digit or
    two of the first len(p) differ; nearest first. Never unrelated ones (a random hash differs from a
    12-digit prefix in ~11 places and shares its first 4 digits once in 65,536)."""
    if len(p) < 4:
        return []
    allowed = max(1, len(p) // 6)
    scored = []
    for h in hashes:
        miss, common = sum(a != b for a, b in zip(h, p)), len(os.path.commonprefix([h, p]))
        if miss <= allowed or common >= 4:
            scored.append((miss, -common, h))
    return [h for _, _, h in sorted(scored)][:n]


def _ref_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise StoreError(f"a ref or pin name must be a non-empty string, got {name!r}", code="bad-argument")
    if len(name) <= HASH_LEN and all(c in "0123456789abcdef" for c in name) and len(name) >= 4:
        raise StoreError(f"{name!r} looks like an object hash; pick a name that does not",
                         code="bad-argument", hint="e.g. 'best' or 'notebook/intro'")
    return name
