"""Content-addressed objects: bytes named by their BLAKE3 hash, under `<store>/objects/ab/cdef...`.

Why content addressing: the same weights always get the same name, so checkpoints deduplicate and a
name is its own integrity check. Every load re-hashes the bytes, so a flipped bit or a truncated file is
refused instead of silently resumed from. Every write goes temp file -> fsync -> rename -> fsync(dir):
a name never points at half an object, even under kill -9 (a killed writer leaves only a `.tmp-*` file,
which no name points at and `Store.gc` removes).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator

import blake3
import numpy as np
import safetensors.numpy as stnp

from .errors import CorruptObject, StoreError, os_error

HASH_LEN = 64
TMP_PREFIX = ".tmp-"
_HEX = re.compile(r"^[0-9a-f]*$")


def hash_bytes(data: bytes) -> str:
    """The BLAKE3 hex digest that names `data`."""
    return blake3.blake3(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, no whitespace, UTF-8) so equal objects get equal hashes."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise StoreError(f"cannot store this object as JSON: {e}", code="bad-argument",
                         hint="use dicts, lists, str, int, float, bool and None only") from None


def tensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """safetensors bytes of a flat name -> array dict; deterministic for equal contents (key order ignored)."""
    if not isinstance(tensors, dict):
        raise StoreError(f"tensors must be a dict of name -> array, got {type(tensors).__name__}",
                         code="bad-argument")
    clean: dict[str, np.ndarray] = {}
    for name in sorted(tensors):
        if not isinstance(name, str):
            raise StoreError(f"tensor names must be strings, got {name!r}", code="bad-argument")
        a = np.asarray(tensors[name])
        if a.dtype.byteorder == ">":                 # safetensors is little-endian by definition
            a = a.astype(a.dtype.newbyteorder("<"))
        clean[name] = a if a.flags.c_contiguous else a.copy(order="C")   # (ascontiguousarray makes 0-d 1-d)
    try:
        return stnp.save(clean)
    except Exception as e:                         # safetensors raises its own error type for bad dtypes
        raise StoreError(f"cannot store these tensors: {e}", code="bad-argument", where="put_tensors",
                         hint="tensors must be numeric numpy arrays (bool, int, uint, float16/32/64)") from None


class ObjectStore:
    """The `objects/` directory of a store: atomic writes, verified reads, git-like prefix lookup."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.dir = self.root / "objects"

    # ---- paths ------------------------------------------------------------------------------------
    def path(self, h: str) -> Path:
        return self.dir / h[:2] / h[2:]

    def exists(self, h: str) -> bool:
        return len(h) == HASH_LEN and self.path(h).is_file()

    def __iter__(self) -> Iterator[str]:
        """Every object name (complete files only; temp files are skipped)."""
        if not self.dir.is_dir():
            return
        for shard in sorted(self.dir.iterdir()):
            if len(shard.name) != 2 or not shard.is_dir():
                continue
            for f in sorted(shard.iterdir()):
                if not f.name.startswith(TMP_PREFIX) and len(f.name) == HASH_LEN - 2:
                    yield shard.name + f.name

    def temp_files(self) -> list[Path]:
        """Leftovers of writers that were killed mid-write (never reachable through a name)."""
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.glob(f"*/{TMP_PREFIX}*") if p.is_file())

    # ---- write ------------------------------------------------------------------------------------
    def write(self, data: bytes) -> str:
        """Store `data` atomically and durably; returns its hash. Writing an existing object is a no-op."""
        data = bytes(data)
        h = hash_bytes(data)
        final = self.path(h)
        try:
            if final.is_file() and final.stat().st_size == len(data) and hash_bytes(final.read_bytes()) == h:
                os.utime(final)                         # written again: as young as a new one (gc's grace, leases)
                return h                                # already there and intact; a damaged copy is replaced
        except OSError:
            pass
        where = f"store {self.root}"
        shard = final.parent
        try:
            shard.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise os_error(e, action=f"create {shard}", where=where) from None
        # atomic: concurrent writers of one hash write equal bytes
        atomic_write(final, data, where=where, action=f"write object {h[:12]}")
        return h

    # ---- read -------------------------------------------------------------------------------------
    def read(self, h: str) -> bytes:
        """The bytes of object `h` (a full hash), verified against the hash."""
        p = self.path(h)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"object {h} is missing from the store", where=f"store {self.root}",
                             code="store-missing", object=h,
                             hint="it was deleted (by gc?) or the store was copied partially") from None
        except OSError as e:
            raise os_error(e, action=f"read object {h[:12]}", where=f"store {self.root}") from None
        got = hash_bytes(data)
        if got != h:
            raise CorruptObject(
                f"object {h} is corrupt: its {len(data)} bytes hash to {got[:12]}..., not to its name "
                "(tampered with or truncated)", where=f"store {self.root} ({p})",
                object=h, hint="restore it from a copy of the store, or delete it and re-create what named it")
        return data

    def resolve(self, prefix: str) -> str:
        """The full hash for a unique hex prefix (like git); suggests close names when nothing matches."""
        if not isinstance(prefix, str):
            raise StoreError(f"an object name must be a string, got {type(prefix).__name__}", code="bad-argument")
        p = prefix.strip().lower()
        if not p or len(p) > HASH_LEN or not _HEX.match(p):
            raise StoreError(f"{prefix!r} is not an object hash (hex digits, up to {HASH_LEN})",
                             where=f"store {self.root}", code="store-unknown")
        if len(p) == HASH_LEN:
            if self.path(p).is_file():
                return p
            matches: list[str] = []
        else:
            matches = [h for h in self._candidates(p) if h.startswith(p)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            shown = ", ".join(m[: max(len(p) + 2, 12)] for m in matches[:5])
            raise StoreError(f"prefix {prefix!r} is ambiguous: {len(matches)} objects match ({shown})",
                             where=f"store {self.root}", code="store-ambiguous",
                             hint="give more digits of the hash", matches=matches)
        close = self.suggest(p)
        hint = ("did you mean " + " or ".join(c[:12] for c in close) + "?") if close else "the store has no such object"
        raise StoreError(f"no object {prefix!r} in the store", where=f"store {self.root}",
                         code="store-unknown", hint=hint, suggestions=close)

    def suggest(self, p: str, n: int = 3) -> list[str]:
        """Names sharing the longest leading digits with `p` (at least one)."""
        best, out = 0, []
        for h in self:
            k = _common(h, p)
            if k > best:
                best, out = k, [h]
            elif k == best and k > 0:
                out.append(h)
        return out[:n] if best > 0 else []

    def _candidates(self, p: str) -> Iterator[str]:
        if len(p) >= 2:
            shard = self.dir / p[:2]
            if shard.is_dir():
                for f in shard.iterdir():
                    if not f.name.startswith(TMP_PREFIX):
                        yield p[:2] + f.name
        else:
            yield from self

    def delete(self, h: str) -> int:
        """Remove object `h`; returns the bytes freed (0 when absent)."""
        p = self.path(h)
        try:
            size = p.stat().st_size
            p.unlink()
        except FileNotFoundError:
            return 0
        except OSError as e:
            raise os_error(e, action=f"delete object {h[:12]}", where=f"store {self.root}") from None
        return size


def _common(a: str, b: str) -> int:
    k = 0
    for x, y in zip(a, b):
        if x != y:
            break
        k += 1
    return k


def atomic_write(final: Path, data: bytes, *, where: str, action: str) -> None:
    """temp file beside `final` -> fsync -> rename -> fsync(dir): a crash (kill -9 included) leaves either
    the old file or the whole new one under the name, never half of it; OS errors become StoreErrors."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=final.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        tmp = None
        _fsync_dir(final.parent)
    except OSError as e:
        raise os_error(e, action=action, where=where) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _fsync_dir(d: Path) -> None:
    """Make a rename durable: fsync the directory that holds the new name (no-op where unsupported)."""
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_tensors(data: bytes, *, name: str = "", where: str = "") -> dict[str, np.ndarray]:
    """Parse verified safetensors bytes; a malformed file is a store-corrupt error, not a crash."""
    try:
        return dict(stnp.load(data))
    except Exception as e:
        raise CorruptObject(f"object {name} is not a valid safetensors file: {e}", where=where,
                         object=name) from None


def load_json(data: bytes, *, name: str = "", where: str = "") -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptObject(f"object {name} is not valid JSON: {e}", where=where,
                         object=name) from None
