// The words a plan verdict is said in (shared by PlanView and tested): green fits, yellow fits but says why,
// red does not fit. The Python static form (widgets/_static.py) says the same.
import { fmtBytes } from "./cell.js";

export const CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations", "workspace",
  "master_weights", "data", "buffers", "evaluation", "readback"];

export function verdictWords(p) {
  const pct = p.capacity_bytes ? (100 * p.peak_bytes / p.capacity_bytes).toFixed(0) : "?";
  const of = `peak ${fmtBytes(p.peak_bytes)} of ${fmtBytes(p.capacity_bytes)} (${pct}%)`;
  if (p.verdict === "green") return `Fits: ${of}.`;
  if (p.verdict === "yellow") {
    const why = (p.warnings && p.warnings.length) ? p.warnings.join("; ") : "little headroom";
    return `Fits, with a warning: ${why}. ${of}.`;
  }
  return `Does not fit: needs ${fmtBytes(p.peak_bytes)}, the device has ${fmtBytes(p.capacity_bytes)}`
    + ` (${p.capacity_source || "capacity"}). Refused before any compute.`;
}

/** Segments of the stacked bar as fractions of the bar's full scale (max of peak and capacity). */
export function barSegments(p) {
  const scale = Math.max(p.peak_bytes || 0, p.capacity_bytes || 0, 1);
  const segs = [];
  let x = 0;
  for (const k of CATEGORIES) {
    const v = (p.breakdown || {})[k] || 0;
    if (v <= 0) continue;
    segs.push({ key: k, bytes: v, x: x / scale, w: v / scale });
    x += v;
  }
  return { segs, capacity: (p.capacity_bytes || 0) / scale, scale };
}
