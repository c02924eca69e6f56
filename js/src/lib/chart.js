// Chart helpers for the LossCurve and the RoundMonitor (pure; the Python static form in
// scellis_jupyter/jupyter/widgets/_static.py says the same): how a series is drawn, axis ranges, ticks.

// One hue per metric (the name without its split prefix), one dash per split, and runs told apart by a
// shade of the metric's hue plus a line width (a second cue that survives a grey-scale print).
export const METRIC_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
export const SPLIT_DASH = { train: null, val: [6, 4], test: [2, 3] };
const SHADES = [0, -0.35, 0.35, -0.6, 0.55];          // run k: mix towards black (<0) or white (>0)
const WIDTHS = [1.5, 2.5];

/** {metric, split} of a series name: "val_loss" -> {loss, val}, "test_f1" -> {f1, test}, "loss" -> {loss, train}. */
export function splitOf(name) {
  const m = /^(train|val|valid|validation|test)_(.+)$/.exec(name);
  if (!m) return { metric: name, split: "train" };
  const split = m[1] === "train" ? "train" : m[1] === "test" ? "test" : "val";
  return { metric: m[2], split };
}

function hex(c) { return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)); }

/** `color` mixed towards black (f < 0) or white (f > 0) by |f|, as #rrggbb. */
export function shade(color, f) {
  const t = f < 0 ? 0 : 255, a = Math.abs(f);
  return "#" + hex(color).map((v) => Math.round(v + a * (t - v)).toString(16).padStart(2, "0")).join("");
}

/** How each series {run, name} of one chart is drawn: {stroke, dash, width, label}. Metrics get their hue by
 * order of first appearance in `series`, runs their shade and width by order of first appearance. */
export function seriesStyles(series) {
  const metrics = [], runs = [];
  for (const s of series) {
    const m = splitOf(s.name).metric;
    if (!metrics.includes(m)) metrics.push(m);
    if (!runs.includes(s.run)) runs.push(s.run);
  }
  return series.map((s) => {
    const { metric, split } = splitOf(s.name);
    const r = runs.indexOf(s.run);
    const base = METRIC_COLORS[metrics.indexOf(metric) % METRIC_COLORS.length];
    return {
      stroke: shade(base, SHADES[r % SHADES.length]),
      dash: SPLIT_DASH[split] || null,
      width: runs.length > 1 ? WIDTHS[r % WIDTHS.length] : WIDTHS[0],
      label: runs.length > 1 ? `${s.run}: ${s.name}` : s.name,
    };
  });
}

/** The x range every panel shares: the steps of all series (a single evaluation point sits inside the run's
 * steps instead of stretching its own axis); null when there are no steps. */
export function stepRange(series) {
  let lo = Infinity, hi = -Infinity;
  for (const s of series) for (const x of s.steps) { if (x < lo) lo = x; if (x > hi) hi = x; }
  if (!(lo <= hi)) return null;
  return lo === hi ? [lo - 1, hi + 1] : [lo, hi];
}

/** A linear y range over [min, max] with 5% headroom; a flat series (one point) gets a small band around
 * its value, never a range from 0 to twice it. */
export function yRange(min, max) {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (max - min <= 1e-12 * Math.max(1, Math.abs(max))) {
    const pad = Math.max(Math.abs(max) * 0.05, 1e-3);
    return [min - pad, max + pad];
  }
  const pad = 0.05 * (max - min);
  return [min - pad, max + pad];
}

/** A log y range: the enclosing decades of the positive values ([min, max]); one decade at least. */
export function logRange(min, max) {
  if (!(min > 0) || !(max > 0)) return [0.1, 10];
  let lo = Math.floor(Math.log10(min) + 1e-6), hi = Math.ceil(Math.log10(max) - 1e-6);
  if (hi <= lo) hi = lo + 1;
  return [10 ** lo, 10 ** hi];
}

/** The height of a log-y panel: at least `base`, and ~32 px per decade of the plot area (capped at `cap`),
 * so eight decades are not crammed into a hundred pixels. */
export function logHeight(min, max, base = 200, cap = 480) {
  const [lo, hi] = logRange(min, max);
  const decades = Math.round(Math.log10(hi / lo));
  return Math.min(cap, Math.max(base, 100 + 32 * decades));
}

/** "Nice" ticks (1, 2, 2.5, 5 x 10^k) covering [lo, hi], at most ~n+1 of them, every label distinct. */
export function niceTicks(lo, hi, n = 4) {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi === lo) return [lo];
  const raw = (hi - lo) / n, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw * (1 - 1e-9));
  const out = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push(Number((k * step).toPrecision(12)));
  return out.length < 2 && n < 32 ? niceTicks(lo, hi, 2 * n) : out;     // a narrow band still gets two ticks
}
