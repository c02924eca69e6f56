// Series packing: the binary format the Python side (scellis_jupyter/jupyter/widgets/_series.py) writes.
// [u32 header length H][H bytes JSON {"series":[{run,name,n,k}]}][pad to 4][per series: u32 steps[n],
// f32 values[n], u32 skipped[k]]. One format for the whole snapshot (a trait) and for appended chunks
// (custom messages), so a model keeps one store and merges chunks in order.

export function decode(buf) {
  if (!buf) return [];
  const bytes = buf instanceof ArrayBuffer ? new Uint8Array(buf)
    : new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
  if (bytes.byteLength < 4) return [];
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const h = dv.getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + h)));
  let off = 4 + h;
  off += (4 - (off % 4)) % 4;
  // copy into an aligned buffer once: typed-array views need 4-byte alignment from the buffer start
  const body = bytes.slice(off).buffer;
  let o = 0;
  const out = [];
  for (const s of header.series) {
    const steps = new Uint32Array(body, o, s.n); o += 4 * s.n;
    const values = new Float32Array(body, o, s.n); o += 4 * s.n;
    const skipped = new Uint32Array(body, o, s.k || 0); o += 4 * (s.k || 0);
    out.push({ run: s.run, name: s.name, steps, values, skipped });
  }
  return out;
}

export function encode(series) {
  const header = new TextEncoder().encode(JSON.stringify({
    series: series.map((s) => ({ run: s.run, name: s.name, n: s.steps.length, k: s.skipped.length })),
  }));
  let off = 4 + header.length;
  const pad = (4 - (off % 4)) % 4;
  off += pad;
  let total = off;
  for (const s of series) total += 8 * s.steps.length + 4 * s.skipped.length;
  const bytes = new Uint8Array(total);
  new DataView(bytes.buffer).setUint32(0, header.length, true);
  bytes.set(header, 4);
  let o = off;
  for (const s of series) {
    bytes.set(new Uint8Array(Uint32Array.from(s.steps).buffer), o); o += 4 * s.steps.length;
    bytes.set(new Uint8Array(Float32Array.from(s.values).buffer), o); o += 4 * s.values.length;
    bytes.set(new Uint8Array(Uint32Array.from(s.skipped).buffer), o); o += 4 * s.skipped.length;
  }
  return bytes.buffer;
}

function concat(Kind, a, b) {
  if (!a.length) return b;
  if (!b.length) return a;
  const r = new Kind(a.length + b.length);
  r.set(a, 0); r.set(b, a.length);
  return r;
}

/** A new list of series: `store` with `chunk`'s points appended (matched by run and name, order kept). */
export function merge(store, chunk) {
  const out = store.slice();
  for (const c of chunk) {
    const i = out.findIndex((s) => s.run === c.run && s.name === c.name);
    if (i < 0) { out.push(c); continue; }
    const s = out[i];
    out[i] = { run: s.run, name: s.name, steps: concat(Uint32Array, s.steps, c.steps),
      values: concat(Float32Array, s.values, c.values), skipped: concat(Uint32Array, s.skipped, c.skipped) };
  }
  return out;
}

/** uPlot's aligned form for several series with their own steps: [xs, ys...], null where a series has no
 * point at that x or its value is not finite. Fast path when every series shares the same steps. */
export function align(list) {
  if (!list.length) return [[]];
  const same = list.every((s) => s.steps.length === list[0].steps.length
    && (s.steps === list[0].steps || s.steps.every((v, i) => v === list[0].steps[i])));
  const clean = (v) => (Number.isFinite(v) ? v : null);
  if (same) {
    return [Array.from(list[0].steps), ...list.map((s) => Array.from(s.values, clean))];
  }
  const xsSet = new Set();
  for (const s of list) for (const x of s.steps) xsSet.add(x);
  const xs = Array.from(xsSet).sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = list.map((s) => {
    const y = new Array(xs.length).fill(null);
    for (let i = 0; i < s.steps.length; i++) y[index.get(s.steps[i])] = clean(s.values[i]);
    return y;
  });
  return [xs, ...ys];
}

/** Which panel a series belongs to: losses together, the learning rate alone, other metrics together. */
export function groupOf(name) {
  if (name === "lr") return "lr";
  if (name.includes("loss")) return "loss";
  return "metrics";
}

/** Indices that keep at most ~maxPoints of `values`: each bucket's min and max finite point (a spike stays
 * visible), the first point of an all-non-finite bucket. The Python side (widgets/_static.py) does the same. */
export function decimateIndices(values, maxPoints) {
  const n = values.length;
  if (n <= maxPoints) return null;
  const buckets = Math.floor(maxPoints / 2);
  const keep = [];
  for (let b = 0; b < buckets; b++) {
    const a = Math.floor((b * n) / buckets), e = Math.floor(((b + 1) * n) / buckets);
    if (e <= a) continue;
    let lo = -1, hi = -1;
    for (let i = a; i < e; i++) {
      const v = values[i];
      if (!Number.isFinite(v)) continue;
      if (lo < 0 || v < values[lo]) lo = i;
      if (hi < 0 || v > values[hi]) hi = i;
    }
    if (lo < 0) keep.push(a);
    else if (lo === hi) keep.push(lo);
    else keep.push(Math.min(lo, hi), Math.max(lo, hi));
  }
  return keep;
}

/** The store as saved in a notebook: each series at most ~maxPoints (skipped steps kept). */
export function decimate(series, maxPoints) {
  return series.map((s) => {
    const idx = decimateIndices(s.values, maxPoints);
    if (!idx) return s;
    return { run: s.run, name: s.name, steps: Uint32Array.from(idx, (i) => s.steps[i]),
      values: Float32Array.from(idx, (i) => s.values[i]), skipped: s.skipped };
  });
}
