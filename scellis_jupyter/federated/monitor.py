"""RoundMonitor, static form: a view of a federation's rounds (who answered, each site's local loss, the
accuracy curve, the (eps, delta) spent against the budget) as text/plain and as HTML with an SVG curve.

Why static first: a saved notebook must show the final state without a kernel; the live widget (in
`jupyter`) renders the same record. The monitor only reads `Federation.rounds`: it owns no training state.
"""
from __future__ import annotations

import html
from typing import Any


class RoundMonitor:
    """`RoundMonitor(fed)`; registers as a listener so it sees each round as it lands (`fed.fit(...)`)."""

    def __init__(self, federation: Any, metric: str = "accuracy"):
        self.fed, self.metric = federation, metric
        self.updates = 0
        federation.listeners.append(self._on_round)

    def _on_round(self, r) -> None:
        self.updates += 1

    # ---- the record --------------------------------------------------------------------------------------
    def state(self) -> dict:
        """What a view draws: per-round sites/dropped/losses/metric, the budget and what is spent."""
        f = self.fed
        led = f.ledger
        return {
            "strategy": f.strategy_name, "trust": f.trust, "secure": f.secure, "sites": list(f.names),
            "version": f.version,
            "rounds": [{"round": r.round, "sites": r.sites, "dropped": r.dropped, "losses": r.losses,
                        "metric": r.metrics.get(self.metric), "epsilon": r.epsilon, "seconds": r.seconds,
                        "staleness": r.staleness} for r in f.rounds],
            "privacy": None if led is None else {"spent": led.spent, "epsilon": led.epsilon, "delta": led.delta},
        }

    # ---- text ---------------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        s = self.state()
        p = s["privacy"]
        dp = "DP off" if p is None else f"eps {p['spent']:.3f} of {p['epsilon']:g} (delta {p['delta']:g})"
        lines = [f"RoundMonitor: {s['strategy']} on {len(s['sites'])} sites, trust={s['trust']}, "
                 f"secure aggregation {'on' if s['secure'] else 'off'}, {dp}, model version {s['version']}"]
        head = f"{'round':>5}  {'answered':>8}  {self.metric:>9}  {'eps':>7}  " + "  ".join(f"{n:>8}" for n in s["sites"])
        lines.append(head)
        for r in s["rounds"]:
            m = "" if r["metric"] is None else f"{r['metric']:.4f}"
            e = "" if r["epsilon"] is None else f"{r['epsilon']:.3f}"
            cells = ["  silent" if n in r["dropped"] else (f"{r['losses'][n]:8.4f}" if n in r["losses"] and
                                                           r["losses"][n] == r["losses"][n] else " " * 8)
                     for n in s["sites"]]
            lines.append(f"{r['round']:>5}  {len(r['sites']):>8}  {m:>9}  {e:>7}  " + "  ".join(cells))
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))

    # ---- HTML / SVG ----------------------------------------------------------------------------------------
    def svg(self, width: int = 360, height: int = 120) -> str:
        """The metric per round as an SVG polyline (empty axes before the first evaluated round)."""
        pts = [(r["round"], r["metric"]) for r in self.state()["rounds"] if r["metric"] is not None]
        pad = 24
        body = ""
        if pts:
            n = max(p[0] for p in pts)
            lo, hi = min(p[1] for p in pts), max(p[1] for p in pts)
            span = (hi - lo) or 1.0
            xy = [(pad + (x - 1) / max(1, n - 1) * (width - 2 * pad),
                   height - pad - (y - lo) / span * (height - 2 * pad)) for x, y in pts]
            body = (f'<polyline fill="none" stroke="#2a6fdb" stroke-width="2" points="'
                    + " ".join(f"{x:.1f},{y:.1f}" for x, y in xy) + '"/>'
                    + f'<text x="{pad}" y="12" font-size="10">{html.escape(self.metric)} {lo:.3f}..{hi:.3f}</text>')
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
                f'aria-label="{html.escape(self.metric)} per round">'
                f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>'
                f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#999"/>{body}</svg>')

    def _repr_html_(self, chart: str | None = None) -> str:
        """The summary, the privacy meter, the metric chart (`chart`, else svg()) and the per-round table."""
        s = self.state()
        p = s["privacy"]
        meter = ""
        if p is not None:
            frac = min(1.0, p["spent"] / p["epsilon"])
            meter = (f'<div>privacy: eps {p["spent"]:.3f} of {p["epsilon"]:g} (delta {p["delta"]:g}) '
                     f'<meter min="0" max="1" value="{frac:.4f}"></meter></div>')
        rows = "".join(
            "<tr><td>{}</td><td>{}</td><td>{}</td>{}</tr>".format(
                r["round"], "" if r["metric"] is None else f"{r['metric']:.4f}",
                "" if r["epsilon"] is None else f"{r['epsilon']:.3f}",
                "".join("<td>silent</td>" if n in r["dropped"] else
                        f"<td>{r['losses'][n]:.4f}</td>" if n in r["losses"] else "<td></td>" for n in s["sites"]))
            for r in s["rounds"])
        head = "".join(f"<th>{html.escape(n)}</th>" for n in s["sites"])
        return (f'<div class="scellis-round-monitor"><b>{html.escape(s["strategy"])}</b> on {len(s["sites"])} sites, '
                f'trust {html.escape(s["trust"])}, secure aggregation {"on" if s["secure"] else "off"}, '
                f'model version {s["version"]}{meter}{self.svg() if chart is None else chart}'
                f'<table><tr><th>round</th><th>{html.escape(self.metric)}</th><th>eps</th>{head}</tr>{rows}</table>'
                f'</div>')
