"""notebooks/pool_sweep.ipynb runs headless (nbclient, a real kernel) on a local pool of two worker processes:
the pool cell shows two workers, the heatmap's saved form is the filled grid, the shared loss curve has every
step, and the data-parallel losses stay within 1e-5 of the one-device run (the notebook prints the gap)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = 6


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
    return "\n".join(out)


@pytest.mark.slow
def test_pool_sweep_notebook(tmp_path):
    from nbclient import NotebookClient
    nb = nbformat.read(ROOT / "notebooks" / "pool_sweep.ipynb", as_version=4)
    env = {"SCELLIS_EXAMPLE_STEPS": str(STEPS), "SCELLIS_DEVICE": "reference", "PYTHONPATH": str(ROOT),
           "SCELLIS_STORE": str(tmp_path / "store")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    cells = nb.cells
    pool = _text(cells[2])
    assert "2 workers" in pool and "trust regime own" in pool and "dashboard" in pool
    heat = _text(cells[4])
    assert "val_accuracy by batch_size x optimizer.lr" in heat and "…" not in heat      # refreshed once full
    assert "6 cells of digits on the pool (val_accuracy); 0 re-checked, 0 rejected" in heat
    assert re.search(r"best cell: \{.*\} val_accuracy 0\.\d{3}", _text(cells[5]))
    dp = _text(cells[6])
    assert f"2 workers: loss: {STEPS} points" in dp and f"{STEPS} steps, loss" in dp
    gap = float(re.search(r"one-device run: ([0-9.e+-]+)", _text(cells[7])).group(1))
    assert gap < 1e-5 and "replicas identical: True" in _text(cells[7])
    assert "pool pool closed" in _text(cells[8])
