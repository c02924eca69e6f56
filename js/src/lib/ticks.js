// Axis tick labels that stay short on linear and log axes: 0.003, 1.5, 2e+5, 1e-4.
export function fmtTick(v) {
  if (v == null || !Number.isFinite(v)) return "";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e4 || a < 1e-2) return v.toExponential(0).replace("e+", "e");
  return String(Number(v.toPrecision(3)));
}

export const tickValues = (u, splits) => splits.map(fmtTick);
