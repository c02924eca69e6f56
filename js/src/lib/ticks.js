// Axis tick labels that stay short on linear and log axes: 0.003, 1.5, 2e+5, 1e-4.
export function fmtTick(v) {
  if (v == null || !Number.isFinite(v)) return "";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e4 || a < 1e-2) return v.toExponential(0).replace("e+", "e");
  return String(Number(v.toPrecision(3)));
}

export const tickValues = (u, splits) => splits.map(fmtTick);

// The y range of a learning-rate panel: from 0 to a little above the largest value (a constant lr, the
// common case, would otherwise get a zero-height range and a single tick).
export function lrRange(u, min, max) {
  const top = Number.isFinite(max) && max > 0 ? max * 1.15 : 1;
  const low = Number.isFinite(min) && min < 0 ? min * 1.15 : 0;
  return [low, top];
}
