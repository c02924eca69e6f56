// The icicle layout of one step's dispatches (scellis_jupyter/jupyter/widgets/profile_view.py lays out its
// static form the same way): x is kernel time laid end to end in dispatch order; row 0 is the layer, 1 the
// op, 2 the kernel, 3 the dispatch; a block is a maximal run of consecutive dispatches with the same labels
// down to its row (a dispatch is labelled by its result's shape). Kept apart from the view so vitest checks it without a DOM.

export const LEVELS = ["layer", "op", "kernel", "dispatch"];
export const PALETTE = ["#8fb8de", "#f4b183", "#a9d18e", "#f7a1a1", "#c5a3e0", "#ffd966", "#9fd8d2", "#e2b0c9",
  "#c9c0a6", "#b4c7e7"];

export function scopeLabel(s) { return s ? s : "(other)"; }

/** A stable colour per label: FNV-1a over UTF-16 code units (the Python side hashes the same way). */
export function colorOf(label) {
  let h = 0x811c9dc5;
  for (let i = 0; i < label.length; i++) { h ^= label.charCodeAt(i); h = Math.imul(h, 0x01000193) >>> 0; }
  return PALETTE[h % PALETTE.length];
}

export function fmtUs(us) { return us >= 1e3 ? `${(us / 1e3).toFixed(2)} ms` : `${us.toFixed(1)} µs`; }

/** Cumulative start times: xs[i] is where dispatch i starts, xs[n] the total. */
export function starts(timeline) {
  const xs = new Float64Array(timeline.length + 1);
  for (let i = 0; i < timeline.length; i++) xs[i + 1] = xs[i] + Math.max(0, Number(timeline[i].us) || 0);
  return xs;
}

/** The result part of a dispatch's shape text ("f32[8,4] f32[4,6] -> f32[8,6]" gives "f32[8,6]"). */
export function resultOf(shape) {
  const k = (shape || "").lastIndexOf(" -> ");
  return k < 0 ? shape || "" : shape.slice(k + 4);
}

function keyOf(d, level) {
  return level === 0 ? scopeLabel(d.scope) : level === 1 ? d.op : d.kernel;
}

/** Blocks {level, label, i0, i1, x0, x1, us} of every row, row by row, each row in time order. */
export function icicle(timeline) {
  const xs = starts(timeline), out = [], n = timeline.length;
  for (let level = 0; level < LEVELS.length; level++) {
    let i = 0;
    while (i < n) {
      let j = i + 1;
      if (level < 3) {
        while (j < n && sameUpTo(timeline[i], timeline[j], level)) j++;
      }
      out.push({ level, label: level < 3 ? keyOf(timeline[i], level) : resultOf(timeline[i].shape), i0: i, i1: j,
        x0: xs[i], x1: xs[j], us: xs[j] - xs[i] });
      i = j;
    }
  }
  return out;
}

function sameUpTo(a, b, level) {
  for (let l = 0; l <= level; l++) if (keyOf(a, l) !== keyOf(b, l)) return false;
  return true;
}

/** The blocks that show in the window [x0, x1): clipped to it, as fractions of its width, dropping those
 * narrower than `minFrac` (their parent row already shows their time). */
export function inWindow(blocks, x0, x1, minFrac = 0.001) {
  const span = x1 - x0;
  if (!(span > 0)) return [];
  const out = [];
  for (const b of blocks) {
    const a = Math.max(b.x0, x0), e = Math.min(b.x1, x1);
    if (e <= a) continue;
    const f = (e - a) / span;
    if (f < minFrac) continue;
    out.push({ ...b, left: (a - x0) / span, width: f });
  }
  return out;
}

/** (kernel, shape) pairs of dispatches i0..i1-1 by time: {kernel, op, shape, calls, us, share}. */
export function topRows(timeline, n, i0 = 0, i1 = timeline.length) {
  const by = new Map();
  let total = 0;
  for (let i = i0; i < i1; i++) {
    const d = timeline[i], k = `${d.kernel}\u0000${d.shape}`, us = Math.max(0, Number(d.us) || 0);
    let r = by.get(k);
    if (!r) { r = { kernel: d.kernel, op: d.op, shape: d.shape, calls: 0, us: 0 }; by.set(k, r); }
    r.calls += 1; r.us += us; total += us;
  }
  const rows = [...by.values()].sort((a, b) => b.us - a.us).slice(0, n);
  for (const r of rows) r.share = total > 0 ? r.us / total : 0;
  return rows;
}

/** What hovering a block says: its row, label, time, share of the step's kernels and of the zoomed window. */
export function describe(b, timeline, total, windowUs) {
  const pct = (v, of) => (of > 0 ? `${(100 * v / of).toFixed(1)}%` : "–");
  if (b.level === 3) {
    const d = timeline[b.i0];
    return { title: d.kernel, lines: [`${d.op} · ${scopeLabel(d.scope)}`, d.shape, `${fmtUs(b.us)} · ${pct(b.us, total)} of the step's kernels`] };
  }
  const n = b.i1 - b.i0;
  return { title: `${LEVELS[b.level]} ${b.label}`, lines: [`${n} dispatch${n === 1 ? "" : "es"}`,
    `${fmtUs(b.us)} · ${pct(b.us, total)} of the step's kernels` + (windowUs < total ? ` · ${pct(b.us, windowUs)} of this view` : "")] };
}
