// A perceptual colour ramp (viridis, 9 stops, interpolated) for heatmap cells; null is "not yet run".
const STOPS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"];

function hex(c) { return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)); }

export function ramp(t) {
  if (t == null || !Number.isFinite(t)) return null;
  t = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(t));
  const a = hex(STOPS[i]), b = hex(STOPS[i + 1]), f = t - i;
  return `rgb(${a.map((v, k) => Math.round(v + f * (b[k] - v))).join(",")})`;
}

/** [min, max] over the finite values of a 2-D array of numbers and nulls (null when none). */
export function extent(values) {
  let lo = Infinity, hi = -Infinity;
  for (const row of values) for (const v of row) if (v != null && Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  return lo <= hi ? [lo, hi] : null;
}
