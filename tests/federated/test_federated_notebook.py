"""notebooks/federated_digits.ipynb runs headless (nbclient, a real kernel) at three rounds, on three local
worker processes: the split is complete and skewed, both strategies' monitors hold every round, the private
federation stops at the round that would overspend, and its ledger's eps agree with dp-accounting computed
here independently."""
from __future__ import annotations

import ast
import re

import nbformat
import numpy as np
import pytest
from sklearn.datasets import load_digits

from fixtures.notebooks import ROOT, cell_text, run_notebook

ROUNDS = 3


def _rdp_eps(z: float, k: int, delta: float) -> float:
    from dp_accounting import dp_event, rdp
    acc = rdp.RdpAccountant()
    acc.compose(dp_event.GaussianDpEvent(z), k)
    return acc.get_epsilon(delta)


@pytest.mark.slow
def test_federated_digits_notebook(tmp_path):
    nb = run_notebook(nbformat.read(ROOT / "notebooks" / "federated_digits.ipynb", as_version=4), cwd=tmp_path,
                      SCELLIS_EXAMPLE_STEPS=str(ROUNDS), SCELLIS_STORE=str(tmp_path / "store"))
    c = nb.cells
    # the split: every training row on exactly one site, classes concentrated (alpha = 0.3)
    x, y = load_digits(return_X_y=True)
    y = y[np.random.default_rng(0).permutation(len(y))][:1500]
    counts = np.array([ast.literal_eval(m) for m in re.findall(r"per class (\[[^\]]+\])", cell_text(c[2]))])
    assert counts.shape == (3, 10) and counts.sum(axis=0).tolist() == np.bincount(y, minlength=10).tolist()
    assert (counts.max(axis=0) / counts.sum(axis=0)).mean() > 0.6
    assert sorted(p.name for p in tmp_path.glob("site*.npz")) == ["site0.npz", "site1.npz", "site2.npz"]
    assert "workers=3" in cell_text(c[3])
    # FedAvg and FedProx: the monitor's saved (refreshed) static form holds every round
    last = {}
    for i, name in ((4, "fedavg"), (5, "fedprox")):
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in c[i].outputs)
        mon = next(o["data"]["text/plain"] for o in c[i].outputs        # the static form (refreshed each round)
                   if str(o.get("data", {}).get("text/plain", "")).startswith("RoundMonitor:"))
        assert mon.startswith(f"RoundMonitor: {name} on 3 sites, trust=own, secure aggregation off, DP off")
        rows = mon.splitlines()[2:]
        assert [r.split()[0] for r in rows] == [str(k) for k in range(1, ROUNDS + 1)]
        accs = [float(r.split()[2]) for r in rows]
        assert accs[-1] > 0.25, accs                         # chance is 0.1 on ten classes
        last[name] = accs[-1]
    fedavg_acc = float(re.search(r"test accuracy (0\.\d+)", cell_text(c[4])).group(1))
    assert fedavg_acc == pytest.approx(last["fedavg"], abs=1e-3)     # the print and the monitor agree
    per_round = re.findall(r"(FedAvg|FedProx)\s+test accuracy per round: (\[[^\]]+\])", cell_text(c[5]))
    assert [n for n, _ in per_round] == ["FedAvg", "FedProx"]
    assert all(len(ast.literal_eval(v)) == ROUNDS for _, v in per_round)
    # DP: three rounds fit eps = 4.5 at sigma = 2; the fourth is refused and says so
    dp = cell_text(c[6])
    assert "error[privacy-budget]" in dp and "round 4 would spend eps to" in dp
    assert "3 round(s)" in dp
    assert float(re.search(r"to ([0-9.]+) >", dp).group(1)) == pytest.approx(_rdp_eps(2.0, 4, 1e-5), abs=1e-3)
    ledger = re.findall(r"eps spent ([0-9.]+)", cell_text(c[7]))
    assert [float(e) for e in ledger] == pytest.approx([_rdp_eps(2.0, k, 1e-5) for k in (1, 2, 3)], abs=1e-3)
    assert "PrivacyLedger(spent eps=" in cell_text(c[7]) and "rounds=3" in cell_text(c[7])
    assert not [o for cell in c if cell.cell_type == "code" for o in cell.outputs if o.get("output_type") == "error"]
