"""The detached child: the process `launch` starts, which trains or resumes one job and records how it ended.

    python -c "<child_main>" <store>/logs/<run>.job.json
"""
from __future__ import annotations

import traceback
import json
import os
from pathlib import Path

from ..backends.device import ensure_xdg_runtime_dir
from ..errors import EXIT_ERROR, EXIT_FAILED, EXIT_REFUSED, ScellisError
from .lifecycle import exit_code, resume, train
from .records import summary_lines
from ..store import Store
from ..store.runs import reserved_for
from ..spec import Spec
from ..store import start_run


def child_main(job_path: str) -> int:
    """Run a launched job; every outcome is recorded in the store under the job's run id."""
    ensure_xdg_runtime_dir()
    job = json.loads(Path(job_path).read_text())
    run_id, store = job["run_id"], Store.open(job["store"])
    print(f"scellis: detached run {run_id} (pid {os.getpid()}), job {job_path}", flush=True)
    spec = None
    try:
        if job.get("spec"):
            s = job["spec"]
            spec = Spec.from_text(s["text"], source=s.get("source") or "<spec>", base_dir=s.get("base_dir"))
        kw = dict(job.get("kwargs") or {})
        if job["kind"] == "train":
            run = train(spec, store=store, run_id=run_id, **kw)
        else:
            run = resume(job["ref"], store=store, spec=spec, run_id=run_id, **kw)
        print("\n".join(summary_lines(run.result(), str(store.root))), flush=True)
        return exit_code(run.state)
    except ScellisError as e:
        print(e.diagnostic.format(), flush=True)
        row = store.index.run(run_id)
        if row is not None and row["state"] == "failed":     # it ran and failed (diverged, ...): exit 1, as `train`
            return EXIT_FAILED
        _record_failure(store, run_id, e, spec)
        return EXIT_REFUSED if e.diagnostic.code == "plan-red" else EXIT_ERROR
    except KeyboardInterrupt:
        return 1
    except BaseException as e:
        traceback.print_exc()
        _record_failure(store, run_id, e, spec)
        return 1


def _record_failure(store, run_id: str, error: BaseException, spec) -> None:
    """A run that failed before it registered is still recorded, so whoever waits on it learns why."""
    try:
        row = store.index.run(run_id)
        if row is None or reserved_for(store, row, os.getpid()):      # never registered, or only reserved
            start_run(store, id=run_id, spec_hash=spec.hash if spec is not None else None,
                      extra={"detached": True}).fail(error)
    except ScellisError as e:                      # a full or read-only store: the log says it all
        print(f"scellis: could not record the failure: {e.diagnostic.format()}", flush=True)
