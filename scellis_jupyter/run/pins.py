"""Pins of a run's data files: each file by BLAKE3 (up to a bound), so verify can name a changed dataset.

Why apart: the run records the pins when it starts and verify re-checks them; neither should import the other.
"""
from __future__ import annotations

import blake3
from pathlib import Path


MAX_HASHED_FILES = 256        # beyond this many data files the record keeps the content hash only


def data_files(dataset) -> list[dict]:
    """The files a dataset was read from, each with its size and BLAKE3 (so verify can name a changed one)."""
    paths = list(getattr(dataset, "files", None) or [])
    if not paths:
        paths = [p for p in (getattr(dataset, "path", None), getattr(dataset, "target_path", None)) if p]
    if not paths and getattr(dataset, "_file", None):
        paths = [dataset._file[0]]
    return file_hashes(paths)


def file_hashes(paths: list) -> list[dict]:
    """{path, bytes, blake3} per file (None for what cannot be read; unhashed past MAX_HASHED_FILES)."""
    if len(paths) > MAX_HASHED_FILES:
        return [{"path": str(Path(p).resolve()), "bytes": None, "blake3": None} for p in paths[:MAX_HASHED_FILES]]
    out = []
    for p in paths:
        p = Path(p)
        h = blake3.blake3()
        try:
            with open(p, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            out.append({"path": str(p.resolve()), "bytes": p.stat().st_size, "blake3": h.hexdigest()})
        except OSError:
            out.append({"path": str(p.resolve()), "bytes": None, "blake3": None})
    return out


def _changed_files(recorded: list[dict]) -> list[str]:
    """What differs between the recorded data files and the disk, one phrase per file."""
    now = {d["path"]: d for d in file_hashes([Path(r["path"]) for r in recorded])}
    out = []
    for r in recorded:
        cur = now.get(r["path"])
        if not Path(r["path"]).exists():
            out.append(f"{r['path']} is gone")
        elif r.get("blake3") and cur and cur["blake3"] != r["blake3"]:
            out.append(f"{r['path']} changed ({r['bytes']} -> {cur['bytes']} bytes, BLAKE3 {r['blake3'][:12]} -> "
                       f"{cur['blake3'][:12]})")
    return out
