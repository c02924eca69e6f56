// Progress arithmetic for the RunPanel: steps per second over a sliding window of (time, step) samples,
// and the time left. Why a window: the first steps compile kernels and are slow; an average since the start
// would overstate the ETA for a long while.
export function rate(samples, windowSeconds = 10) {
  if (samples.length < 2) return null;
  const last = samples[samples.length - 1];
  let first = samples[0];
  for (const s of samples) { if (last.t - s.t <= windowSeconds) { first = s; break; } }
  if (first === last) first = samples[samples.length - 2];
  const dt = last.t - first.t;
  const ds = last.step - first.step;
  return dt > 0 && ds >= 0 ? ds / dt : null;
}

export function eta(step, total, stepsPerSecond) {
  if (total == null || stepsPerSecond == null || stepsPerSecond <= 0) return null;
  return Math.max(0, total - step) / stepsPerSecond;
}

export function formatDuration(s) {
  if (s == null || !Number.isFinite(s)) return "–";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (h) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m) return `${m}m ${String(sec).padStart(2, "0")}s`;
  return `${sec}s`;
}

/** Keep the samples a window needs (and a bounded count), appending one. */
export function pushSample(samples, t, step, windowSeconds = 10, max = 256) {
  if (samples.length && samples[samples.length - 1].step === step) return samples;
  const out = samples.concat([{ t, step }]);
  while (out.length > 2 && (t - out[1].t > windowSeconds || out.length > max)) out.shift();
  return out;
}

/** A loss or metric as people read it: four decimals in the usual range, scientific notation for small or
 * huge magnitudes (a loss of 4.7e-7 is not "0.000"), exact zero as "0". run/records.py fmt_value has the same rule. */
export function fmtValue(v) {
  if (v == null || Number.isNaN(Number(v))) return "";
  const x = Number(v);
  if (x === 0) return "0";
  const a = Math.abs(x);
  return !Number.isFinite(x) || (a >= 1e-3 && a < 1e5) ? x.toFixed(4) : x.toExponential(3);
}
