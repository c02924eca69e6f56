// Axis tick labels that stay short on linear and log axes: 0.003, 1.5, 2e+5, 1e-4.
export function fmtTick(v) { return fmtDigits(v, 3); }

function fmtDigits(v, digits) {
  if (v == null || !Number.isFinite(v)) return "";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e4 || a < 1e-2) return v.toExponential(digits - 3).replace("e+", "e");
  return String(Number(v.toPrecision(digits)));
}

/** Labels for a set of ticks, each as short as fmtTick makes it but with as many digits as it takes for
 * distinct ticks to read distinct (299, 299.5, 300, not 299, 300, 300). */
export function fmtTicks(values) {
  let out = values.map((v) => fmtDigits(v, 3));
  const distinct = new Set(values.filter((v) => v != null && Number.isFinite(v))).size;
  for (let d = 4; d <= 12 && new Set(out.filter(Boolean)).size < distinct; d++) out = values.map((v) => fmtDigits(v, d));
  return out;
}

export const tickValues = (u, splits) => fmtTicks(splits);

// The y range of a learning-rate panel: from 0 to a little above the largest value (a constant lr, the
// common case, would otherwise get a zero-height range and a single tick).
export function lrRange(u, min, max) {
  const top = Number.isFinite(max) && max > 0 ? max * 1.15 : 1;
  const low = Number.isFinite(min) && min < 0 ? min * 1.15 : 0;
  return [low, top];
}
