"""RoundMonitor's static forms show what the rounds recorded: answered sites, losses, the metric, eps."""
from __future__ import annotations

import re

import numpy as np

from scellis_jupyter.federated import Federation, Privacy, RoundMonitor
from scellis_jupyter.pool import Pool

from fixtures import spec_text

SPEC = spec_text("fed_linear", name="fed-monitor")


def test_monitor_text_and_html_follow_the_rounds():
    rng = np.random.default_rng(0)
    sites = {s: (rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32))
             for s in ("north", "south")}
    with Pool() as pool:
        f = Federation(pool, SPEC, sites, privacy=Privacy(20.0, 1e-5, clip=1.0, noise_multiplier=1.5), local_steps=2)
        mon = RoundMonitor(f, metric="mse")
        xt, yt = sites["north"]
        f.fit(3, evaluate=lambda w: {"mse": float(np.mean((f.predict(xt, w) - yt) ** 2))})
    assert mon.updates == 3
    text = repr(mon)
    lines = text.splitlines()
    assert lines[0].startswith("RoundMonitor: fedavg on 2 sites, trust=own") and f"eps {f.ledger.spent:.3f} of 20" in text
    assert [ln.split()[0] for ln in lines[2:]] == ["1", "2", "3"]
    for r, ln in zip(f.rounds, lines[2:]):
        assert f"{r.metrics['mse']:.4f}" in ln and f"{r.epsilon:.3f}" in ln
        assert np.isnan(r.losses["south"])                     # under DP no site sends its local loss
    page = mon._repr_html_()
    pts = re.search(r'points="([^"]+)"', page).group(1).split()
    assert len(pts) == 3
    assert f'value="{f.ledger.spent / 20.0:.4f}"' in page and page.count("<tr>") == 4
