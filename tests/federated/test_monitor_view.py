"""The live RoundMonitorView (anywidget): it follows the federation's listeners, syncs JSON-safe state (a
site's unsent loss under DP as null), and carries the static RoundMonitor's text and HTML as its fallback."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from scellis_jupyter.errors import WidgetError
from scellis_jupyter.federated import Federation, Privacy
from scellis_jupyter.jupyter.widgets import RoundMonitorView
from scellis_jupyter.pool import Pool

from test_monitor import SPEC


def test_view_follows_rounds_and_saves_the_static_form():
    rng = np.random.default_rng(1)
    sites = {s: (rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32))
             for s in ("north", "south", "east")}
    with Pool() as pool:
        f = Federation(pool, SPEC, sites, privacy=Privacy(20.0, 1e-5, clip=1.0, noise_multiplier=1.5), local_steps=2)
        w = RoundMonitorView(f, metric="mse", rounds=3)
        seen, lives, events = [], [], []
        w.observe(lambda ch: seen.append(len(ch["new"]["rounds"])), names="state")
        w.observe(lambda ch: lives.append(ch["new"]), names="live")
        f.progress.append(events.append)
        assert w.state["rounds"] == [] and w.state["sites"] == ["north", "south", "east"]
        xt, yt = sites["north"]
        f.fit(3, evaluate=lambda wt: {"mse": float(np.mean((f.predict(xt, wt) - yt) ** 2))})
    assert seen == [1, 2, 3] and w.updates == 3              # one sync per round, as it landed
    # within each round: it starts with every site training, then each site's end arrives once
    names = ["north", "south", "east"]
    for n in (1, 2, 3):
        evs = [e for e in events if e["round"] == n]
        assert evs[0] == {"kind": "round_start", "round": n, "sites": names}
        assert sorted(e["site"] for e in evs[1:]) == sorted(names) and {e["status"] for e in evs[1:]} == {"finished"}
        starts = [i for i, v in enumerate(lives) if v["round"] == n]
        assert lives[starts[0]] == {"round": n, "waiting": names, "done": []}
        assert sorted(lives[starts[-1]]["done"]) == sorted(names) and lives[starts[-1]]["waiting"] == []
        assert [len(lives[i]["done"]) for i in starts] == [0, 1, 2, 3]
    json.dumps(w.state, allow_nan=False)                     # NaN (no loss under DP) went out as null
    assert all(v is None for r in w.state["rounds"] for v in r["losses"].values())
    assert [r["metric"] for r in w.state["rounds"]] == [r.metrics["mse"] for r in f.rounds]
    assert w.state["privacy"] == {"spent": f.ledger.spent, "epsilon": 20.0, "delta": 1e-5}
    assert w._static_text() == repr(w.monitor) and "RoundMonitor: fedavg on 3 sites" in w._static_text()
    assert "<svg" in w._static_html() and w.monitor._repr_html_().split("<svg")[0] == w._static_html().split("<svg")[0]
    labels = re.findall(r'class="scellis-ytick"[^>]*>([^<]*)<', w._static_html())     # the curve has y ticks
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    assert "application/vnd.jupyter.widget-view+json" in w._repr_mimebundle_()[0]
    w.expect(2)
    assert w.planned == 5


def test_view_refuses_what_is_not_a_federation():
    with pytest.raises(WidgetError, match="needs a Federation, not a dict"):
        RoundMonitorView({})
