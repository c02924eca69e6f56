"""Notebooks as run records: find the run pins a saved .ipynb carries and check each against the store.

Why: a notebook's outputs say "this run, on this data, gave these numbers". Each run made in a notebook
leaves an `application/vnd.scellis.run+json` output (display.run_pin). `scellis verify NOTEBOOK.ipynb`
checks every pin against the store it names (run record, spec hash, data hashes and the data files on
disk, checkpoints, weights hash) and then re-executes the run on the reference path within the stated
tolerance (run/verify.py), so an edited pin, a changed dataset or a lost checkpoint is named in a table.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .._version import __version__
from ..errors import NotebookError, ScellisError
from .display import PIN_FORMAT, RUN_MIME


@dataclass
class Row:
    cell: int
    run: str
    check: str
    ok: bool
    detail: str


@dataclass
class NotebookVerification:
    path: str
    rows: list = field(default_factory=list)
    runs: int = 0

    @property
    def ok(self) -> bool:
        return self.runs > 0 and all(r.ok for r in self.rows)

    @property
    def differences(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]

    def table(self, only_differences: bool = False) -> str:
        rows = self.differences if only_differences else self.rows
        head = ("CELL", "RUN", "CHECK", "", "DETAIL")
        body = [(str(r.cell), r.run, r.check, "ok" if r.ok else "FAIL", r.detail) for r in rows]
        w = [max(len(x[i]) for x in [head] + body) for i in range(4)]
        lines = ["  ".join(c.ljust(w[i]) if i < 4 else c for i, c in enumerate(x)).rstrip() for x in [head] + body]
        verdict = (f"verified: {self.runs} run(s) pinned in {self.path}" if self.ok else
                   f"DOES NOT VERIFY: {len(self.differences)} difference(s) in {self.runs} run(s) pinned in {self.path}"
                   if self.runs else f"no run pins in {self.path}")
        return "\n".join([verdict] + lines)

    def to_json(self) -> dict:
        return {"path": self.path, "ok": self.ok, "runs": self.runs,
                "rows": [r.__dict__ for r in self.rows]}


def notebook_pins(path: str | Path) -> list[tuple[int, dict]]:
    """(cell number from 1, pin) for every run pin in the notebook's outputs; the last pin of a run wins."""
    p = Path(path)
    try:
        nb = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotebookError(f"notebook {str(p)!r} does not exist", where=str(p)) from None
    except (OSError, ValueError) as e:
        raise NotebookError(f"{str(p)!r} is not a readable notebook: {e}", where=str(p),
                            hint="a .ipynb file saved by Jupyter") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError(f"{str(p)!r} is not a notebook (no cells)", where=str(p))
    found: dict[str, tuple[int, dict]] = {}
    for i, c in enumerate(nb["cells"], 1):
        for out in c.get("outputs") or []:
            pin = (out.get("data") or {}).get(RUN_MIME)
            if isinstance(pin, str):
                try:
                    pin = json.loads(pin)
                except ValueError:
                    pin = None
            if isinstance(pin, dict) and pin.get("run"):
                found[pin["run"]] = (i, pin)
    return sorted(found.values(), key=lambda t: t[0])


def verify_notebook(path: str | Path, *, store=None, device: str = "reference", tolerance: float | None = None,
                    rerun: bool = True) -> NotebookVerification:
    """Check every pin in the notebook against its store, then re-execute each finished run (rerun)."""
    from ..run.verify import _changed_files, check_tolerance, verify
    from ..store import Store
    if tolerance is not None:
        check_tolerance(tolerance)                    # bad input, not a failed re-execution per run
    out = NotebookVerification(str(path))
    for cell, pin in notebook_pins(path):
        out.runs += 1
        rid = str(pin["run"])
        add = lambda check, ok, detail: out.rows.append(Row(cell, rid, check, bool(ok), detail))  # noqa: E731
        if pin.get("format") != PIN_FORMAT:
            add("format", False, f"pin format {pin.get('format')!r}, this engine reads {PIN_FORMAT!r}")
            continue
        root = store if store is not None else pin.get("store")
        try:
            st = Store.open(root, create=False) if not isinstance(root, Store) else root
            rec = st.get_run(rid)
        except ScellisError as e:
            add("record", False, e.diagnostic.message)
            continue
        add("record", True, f"{rec.state} in {st.root}")
        ex = rec.extra or {}

        def same(check, pinned, recorded, n=12):
            add(check, pinned == recorded, f"{str(pinned)[:n]}" if pinned == recorded else
                f"pinned {str(pinned)[:n]}, store has {str(recorded)[:n]}")

        same("spec", pin.get("spec_hash"), rec.spec_hash)
        data = pin.get("data") or {}
        same("dataset", data.get("dataset_hash"), rec.dataset_hash)
        same("split", data.get("split_hash"), rec.split_hash)
        if data.get("files"):
            changed = _changed_files(data["files"])
            add("data files", not changed, "; ".join(changed) if changed else f"{len(data['files'])} file(s) unchanged")
        if data.get("memory"):
            mem = ex.get("memory_data") or {}
            ok = data["memory"].get("blake3") == mem.get("blake3") and bool(mem.get("tensors")) and st.has(mem["tensors"])
            add("notebook data", ok, f"arrays {str(mem.get('blake3'))[:12]} kept in the store" if ok else
                f"pinned {str(data['memory'].get('blake3'))[:12]}, store has {str(mem.get('blake3'))[:12]}")
        recorded = [c["hash"] for c in rec.checkpoints]
        pinned = list(pin.get("checkpoints") or [])
        missing = [h for h in pinned if not st.has(h)]
        add("checkpoints", pinned == recorded and not missing,
            f"{len(pinned)} present" if pinned == recorded and not missing else
            (f"{len(missing)} missing from the store: {', '.join(h[:12] for h in missing)}" if missing else
             f"pinned {len(pinned)} ({', '.join(h[:8] for h in pinned[-2:])}), record has {len(recorded)} "
             f"({', '.join(h[:8] for h in recorded[-2:])})"))
        same("weights", pin.get("weights_hash"), ex.get("weights_hash"))
        same("tier", pin.get("tier"), rec.tier)
        if pin.get("engine_version") != __version__:
            add("engine", True, f"pinned with {pin.get('engine_version')}, checking with {__version__}")
        if rerun and rec.state == "finished":
            try:
                v = verify(rid, store=st, device=device, tolerance=tolerance)
            except ScellisError as e:
                add("re-execution", False, e.diagnostic.message)
                continue
            for c in v.checks:
                if c.name in ("spec", "checkpoints"):
                    continue                  # checked above against the pin
                add(f"rerun {c.name}", c.ok, c.detail)
            if v.rerun is not None and pin.get("metrics"):
                bad = {k: (pv, v.rerun["metrics"].get(k)) for k, pv in pin["metrics"].items()
                       if isinstance(pv, (int, float)) and isinstance(v.rerun["metrics"].get(k), (int, float))
                       and abs(v.rerun["metrics"][k] - pv) > max(v.tolerance * max(1, int(v.rerun["steps"])), 0.0)
                       * max(abs(pv), 1.0)}
                add("pinned metrics", not bad, "as re-executed" if not bad else
                    "; ".join(f"{k} pinned {a:.6g}, re-executed {b:.6g}" for k, (a, b) in bad.items()))
        elif rerun:
            add("re-execution", True, f"not re-executed: the run is {rec.state} (only a finished run has results)")
    return out


__all__ = ["notebook_pins", "verify_notebook", "NotebookVerification", "NotebookError"]
