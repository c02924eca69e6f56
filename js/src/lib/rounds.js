import { niceTicks } from "./chart.js";
// What the RoundMonitor view draws, from the kernel's state (federated/monitor.py RoundMonitor.state()):
// per-site progress, the metric curve as SVG polyline points, and the privacy budget spent.

/** Per site: rounds its update entered, rounds it was silent, its last local loss (null under DP), the
 * fraction of `planned` rounds (or of the rounds run, when none are planned) it has answered, and `now`:
 * its part in the round in flight (`live`: "training", "sent", "out"), null when no round is in flight. */
export function siteProgress(state, planned = 0, live = null) {
  const rounds = (state && state.rounds) || [];
  const total = Math.max(planned || 0, rounds.length);
  return ((state && state.sites) || []).map((site) => {
    let answered = 0, silent = 0, loss = null;
    for (const r of rounds) {
      if ((r.sites || []).includes(site)) answered++;
      if ((r.dropped || []).includes(site)) silent++;
      const l = r.losses ? r.losses[site] : null;
      if (l != null && Number.isFinite(l)) loss = l;
    }
    let now = null;
    if (live && live.round != null && !rounds.some((r) => r.round >= live.round)) {
      now = (live.waiting || []).includes(site) ? "training" : (live.done || []).includes(site) ? "sent" : "out";
    }
    return { site, answered, silent, loss, frac: total ? answered / total : 0, now };
  });
}

/** The evaluated rounds as polyline points in a width x height box with `pad` (`left`: the room kept for the
 * y tick labels), and the y axis's ticks [{v, y}] over the metric's range; null before the first. */
export function curve(rounds, width, height, pad = 24, left = pad) {
  const pts = (rounds || []).filter((r) => r.metric != null && Number.isFinite(r.metric)).map((r) => [r.round, r.metric]);
  if (!pts.length) return null;
  const n = Math.max(...pts.map((p) => p[0]));
  const lo = Math.min(...pts.map((p) => p[1])), hi = Math.max(...pts.map((p) => p[1]));
  // the y range: the metric's, or a small band around a single value
  const [y0, y1] = hi > lo ? [lo, hi] : [lo - Math.max(Math.abs(lo) * 0.05, 1e-3), hi + Math.max(Math.abs(hi) * 0.05, 1e-3)];
  const Y = (y) => height - pad - ((y - y0) / (y1 - y0)) * (height - 2 * pad);
  const xy = pts.map(([x, y]) => [left + ((x - 1) / Math.max(1, n - 1)) * (width - left - pad), Y(y)]);
  const yticks = niceTicks(y0, y1, 3).map((v) => ({ v, y: Y(v) }));
  return { points: xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" "), lo, hi, last: pts[pts.length - 1][1],
    n: pts.length, yticks };
}

/** The budget: spent, declared (eps, delta) and the fraction spent (clamped to 1); null without DP. */
export function budget(privacy) {
  if (!privacy) return null;
  const { spent, epsilon, delta } = privacy;
  return { spent, epsilon, delta, frac: epsilon > 0 ? Math.min(1, Math.max(0, spent / epsilon)) : 0 };
}
