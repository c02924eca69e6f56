"""The content-addressed store: objects, SQLite index, checkpoints and run records.

Public surface: `Store` (open, put_/get_ bytes/tensors/json/text, pin, gc), `save_checkpoint`,
`load_checkpoint`, `check_spec`, `Checkpoint`, `start_run`, `list_runs`, `get_run`, `RunRecord`,
`RunHandle`, `HeartbeatThread`, `StoreError`.
"""
from __future__ import annotations

from .checkpoint import Checkpoint, check_spec, load_checkpoint, save_checkpoint
from .errors import StoreError
from .runs import HeartbeatThread, RunHandle, RunRecord, get_run, list_runs, start_run
from .store import GcReport, Store

__all__ = ["Store", "GcReport", "StoreError", "Checkpoint", "save_checkpoint", "load_checkpoint", "check_spec",
           "RunRecord", "RunHandle", "HeartbeatThread", "start_run", "list_runs", "get_run"]
