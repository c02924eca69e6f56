"""notebooks/pool_sweep.ipynb runs headless (nbclient, a real kernel) on a local pool of two worker processes:
the pool cell shows two workers, the heatmap's saved form is the filled grid, the shared loss curve has every
step, and the data-parallel losses stay within 1e-5 of the one-device run (the notebook prints the gap)."""
from __future__ import annotations

import re

import nbformat
import pytest

from fixtures.notebooks import ROOT, cell_text, run_notebook

STEPS = 6


@pytest.mark.slow
def test_pool_sweep_notebook(tmp_path):
    nb = run_notebook(nbformat.read(ROOT / "notebooks" / "pool_sweep.ipynb", as_version=4), cwd=tmp_path,
                      SCELLIS_EXAMPLE_STEPS=str(STEPS), SCELLIS_STORE=str(tmp_path / "store"))
    cells = nb.cells
    pool = cell_text(cells[2])
    assert "2 workers" in pool and "trust regime own" in pool and "dashboard" in pool
    heat = cell_text(cells[4])
    assert "val_accuracy by batch_size x optimizer.lr" in heat and "…" not in heat      # refreshed once full
    assert "6 cells of digits on the pool (val_accuracy); 0 re-checked, 0 rejected" in heat
    assert re.search(r"best cell: \{.*\} val_accuracy 0\.\d{3}", cell_text(cells[5]))
    dp = cell_text(cells[6])
    assert f"2 workers: loss: {STEPS} points" in dp and f"{STEPS} steps, loss" in dp
    gap = float(re.search(r"one-device run: ([0-9.e+-]+)", cell_text(cells[7])).group(1))
    assert gap < 1e-5 and "replicas identical: True" in cell_text(cells[7])
    assert "pool pool closed" in cell_text(cells[8])
