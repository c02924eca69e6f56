// layer_norm / rms_norm over the trailing n elements of each row (rows are contiguous), in two reads of
// a row: a statistics pass, then the write pass y = (x - mean) * rstd * w + b (RMS: y = x * rstd * w).
// layer_norm's statistics are exact-merge Welford: each invocation keeps (count, mean, M2) over its
// chunks; the row's mean is the sum of count * mean over invocations / n, its M2 the sum of
// M2_i + count_i * (mean_i - mean)^2: two plain sums, so no cancellation of E[x^2] - mean^2.
// rms_norm sums x^2. Sums merge in a fixed order (subgroupAdd, then the subgroups' partials in order
// through workgroup memory; without SG a fixed tree): deterministic, no atomics.
// Layouts (flags, chosen by kernels/norm.py): WGROW, a workgroup per row (long rows), else RPW rows a
// workgroup (with SG: subgroup sg takes rows sg, sg + nsg, ..; without: LANES = WG / RPW a row).
// VEC: n and every base are multiples of 4, operands bind as vec4. W / B: weight / bias present (the
// bias binds at BBIND: 3, or 4 after a weight).
// f16 storage computes in f32 and rounds once on store.
{{ENABLE}}
// ST: the storage type a binding holds, CT: what it computes in
#if VEC
alias ST = vec4<{{T}}>;
alias CT = vec4<f32>;
#else
alias ST = {{T}};
alias CT = f32;
#endif
struct Params { q: array<vec4<u32>, 2> }
// q words (in chunks: vec4 units with VEC): 0 nrows, 1 n, 2 x_base, 3 out_base, 4 w_base, 5 b_base,
// 6 eps (f32 bits)
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<ST>;
@group(0) @binding(2) var<storage, read_write> x: array<ST>;
#if W
@group(0) @binding(3) var<storage, read_write> w: array<ST>;
#endif
#if B
@group(0) @binding({{BBIND}}) var<storage, read_write> b: array<ST>;
#endif

fn P(i: u32) -> u32 { return p.q[i / 4u][i % 4u]; }

#if VEC
const CN: f32 = 4.0;
fn hsum(v: vec4<f32>) -> f32 { return (v.x + v.y) + (v.z + v.w); }
#else
const CN: f32 = 1.0;
fn hsum(v: f32) -> f32 { return v; }
#endif

alias RT = f32;                      // what rowsum sums
#include norm:rowsum

#if RMS
// (sum of x^2 over this invocation's chunks k, k + lanes, ..; four loads in flight)
fn stats(xb: u32, k: u32, lanes: u32, n: u32) -> vec3<f32> {
  var s = 0.0;
  var r = k;
  for (; r + 3u * lanes < n; r = r + 4u * lanes) {
    let a = CT(x[xb + r]);
    let b1 = CT(x[xb + r + lanes]);
    let c = CT(x[xb + r + 2u * lanes]);
    let d = CT(x[xb + r + 3u * lanes]);
    s = s + ((hsum(a * a) + hsum(b1 * b1)) + (hsum(c * c) + hsum(d * d)));
  }
  if (r + lanes < n) {
    let a = CT(x[xb + r]);
    let b1 = CT(x[xb + r + lanes]);
    s = s + (hsum(a * a) + hsum(b1 * b1));
    r = r + 2u * lanes;
  }
  if (r < n) {
    let c = CT(x[xb + r]);
    s = s + hsum(c * c);
  }
  return vec3<f32>(s, 0.0, 0.0);
}
#else
// a group of `cn` values with mean gm and M2 gq merged into (count, mean, M2) (Chan et al.)
fn welford(st: vec3<f32>, cn: f32, gm: f32, gq: f32) -> vec3<f32> {
  let cnt = st.x + cn;
  let delta = gm - st.y;
  let f = cn / cnt;
  return vec3<f32>(cnt, st.y + delta * f, st.z + gq + delta * delta * st.x * f);
}

// (count, mean, M2) of this invocation's chunks k, k + lanes, .. (four at a time: their own mean and
// M2 merged in; four loads in flight)
fn stats(xb: u32, k: u32, lanes: u32, n: u32) -> vec3<f32> {
  var st = vec3<f32>(0.0, 0.0, 0.0);
  var r = k;
  for (; r + 3u * lanes < n; r = r + 4u * lanes) {
    let a = CT(x[xb + r]);
    let b1 = CT(x[xb + r + lanes]);
    let c = CT(x[xb + r + 2u * lanes]);
    let d = CT(x[xb + r + 3u * lanes]);
    let gm = ((hsum(a) + hsum(b1)) + (hsum(c) + hsum(d))) / (4.0 * CN);
    let g = CT(gm);
    let da = a - g;
    let db = b1 - g;
    let dc = c - g;
    let dd = d - g;
    st = welford(st, 4.0 * CN, gm, (hsum(da * da) + hsum(db * db)) + (hsum(dc * dc) + hsum(dd * dd)));
  }
  if (r + lanes < n) {
    let a = CT(x[xb + r]);
    let b1 = CT(x[xb + r + lanes]);
    let gm = (hsum(a) + hsum(b1)) / (2.0 * CN);
    let da = a - CT(gm);
    let db = b1 - CT(gm);
    st = welford(st, 2.0 * CN, gm, hsum(da * da) + hsum(db * db));
    r = r + 2u * lanes;
  }
  if (r < n) {
    let c = CT(x[xb + r]);
    let cm = hsum(c) / CN;
    let dc = c - CT(cm);
    st = welford(st, CN, cm, hsum(dc * dc));
  }
  return st;
}
#endif

#if REG
// REG: this invocation's chunks k, k + lanes, .. (KREG at most) read once into registers, their
// statistics computed exactly from there (layer_norm: their mean, then M2 about it) and the write taken
// from them: one read of the row instead of two. A row that KREG * lanes does not cover (the lane
// count is the run-time subgroup size in the subgroup-a-row layout) takes the two-read path.
var<private> cache: array<CT, {{KREG}}>;

fn stats_c(xb: u32, k: u32, lanes: u32, n: u32) -> vec3<f32> {
  if ({{KREG}}u * lanes < n) { return stats(xb, k, lanes, n); }
  var s = 0.0;
  var m = 0u;
  for (var j = 0u; j < {{KREG}}u; j = j + 1u) {
    let r = k + j * lanes;
    if (r < n) {
      cache[j] = CT(x[xb + r]);
#if RMS
      s = s + hsum(cache[j] * cache[j]);
#else
      s = s + hsum(cache[j]);
#endif
      m = m + 1u;
    }
  }
#if RMS
  return vec3<f32>(s, 0.0, 0.0);
#else
  if (m == 0u) { return vec3<f32>(0.0, 0.0, 0.0); }
  let cnt = f32(m) * CN;
  let mean = s / cnt;
  var q = 0.0;
  for (var j = 0u; j < {{KREG}}u; j = j + 1u) {
    if (j < m) {
      let d = cache[j] - CT(mean);
      q = q + hsum(d * d);
    }
  }
  return vec3<f32>(cnt, mean, q);
#endif
}

fn write_c(row: u32, k: u32, lanes: u32, sc: vec2<f32>) {
  let n = P(1u);
  if ({{KREG}}u * lanes < n) { write(row, k, lanes, sc); return; }
  let ob = P(3u) + row * n;
  for (var j = 0u; j < {{KREG}}u; j = j + 1u) {
    let r = k + j * lanes;
    if (r < n) { out[ob + r] = y(ST(cache[j]), r, sc); }
  }
}
#else
fn stats_c(xb: u32, k: u32, lanes: u32, n: u32) -> vec3<f32> { return stats(xb, k, lanes, n); }
fn write_c(row: u32, k: u32, lanes: u32, sc: vec2<f32>) { write(row, k, lanes, sc); }
#endif

// (shift, scale) of the row: y = (x - shift) * scale
fn finish(st: vec3<f32>, lid: u32, a: u32, c: u32, d: u32) -> vec2<f32> {
  let n = P(1u);
  let total = f32(n) * CN;
  let eps = bitcast<f32>(P(6u));
#if RMS
  let ss = rowsum(st.x, lid, a, c, d);
  return vec2<f32>(0.0, 1.0 / sqrt(ss / total + eps));
#else
  let mean = rowsum(st.x * st.y, lid, a, c, d) / total;
  let dm = st.y - mean;
  let m2 = rowsum(st.z + st.x * dm * dm, lid, a, c, d);
  return vec2<f32>(mean, 1.0 / sqrt(m2 / total + eps));
#endif
}

fn y(v: ST, r: u32, sc: vec2<f32>) -> ST {
  var t = (CT(v) - CT(sc.x)) * CT(sc.y);
#if W
  t = t * CT(w[P(4u) + r]);
#endif
#if B
  t = t + CT(b[P(5u) + r]);
#endif
  return ST(t);
}

fn write(row: u32, k: u32, lanes: u32, sc: vec2<f32>) {
  let n = P(1u);
  let xb = P(2u) + row * n;
  let ob = P(3u) + row * n;
  var r = k;
  for (; r + 3u * lanes < n; r = r + 4u * lanes) {
    let a = x[xb + r];
    let b1 = x[xb + r + lanes];
    let c = x[xb + r + 2u * lanes];
    let d = x[xb + r + 3u * lanes];
    out[ob + r] = y(a, r, sc);
    out[ob + r + lanes] = y(b1, r + lanes, sc);
    out[ob + r + 2u * lanes] = y(c, r + 2u * lanes, sc);
    out[ob + r + 3u * lanes] = y(d, r + 3u * lanes, sc);
  }
  if (r + lanes < n) {
    let a = x[xb + r];
    let b1 = x[xb + r + lanes];
    out[ob + r] = y(a, r, sc);
    out[ob + r + lanes] = y(b1, r + lanes, sc);
    r = r + 2u * lanes;
  }
  if (r < n) { out[ob + r] = y(x[xb + r], r, sc); }
}

#if SG
@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) sgs: u32, @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
  let n = P(1u);
#if WGROW
  let row = wid.x + wid.y * nwg.x;
  if (row >= P(0u)) { return; }
  let st = stats_c(P(2u) + row * n, lid.x, {{WG}}u, n);
  let sc = finish(st, lid.x, lane, sg, nsg);
  write_c(row, lid.x, {{WG}}u, sc);
#else
  let first = (wid.x + wid.y * nwg.x) * {{RPW}}u;
  for (var rr = sg; rr < {{RPW}}u; rr = rr + nsg) {
    let row = first + rr;
    if (row >= P(0u)) { break; }
    let st = stats_c(P(2u) + row * n, lane, sgs, n);
    let sc = finish(st, lid.x, lane, sg, nsg);
    write_c(row, lane, sgs, sc);
  }
#endif
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = P(1u);
  let lanes = {{WG}}u / {{RPW}}u;
  let k = lid.x % lanes;
  let row = (wid.x + wid.y * nwg.x) * {{RPW}}u + lid.x / lanes;
  let live = row < P(0u);
  var st = vec3<f32>(0.0, 0.0, 0.0);
  if (live) { st = stats_c(P(2u) + row * n, k, lanes, n); }
  let sc = finish(st, lid.x, k, lanes, 0u);
  if (live) { write_c(row, k, lanes, sc); }
}
#endif

//=== rowsum
// the sum of v over the invocations of one row, the same value in each (fixed order), in the type RT the
// including file aliases (f32 here; vec4<f32> in norm_bwd.wgsl, four sums at once): with SG and a
// workgroup a row, subgroupAdd then the subgroups' sums in order through workgroup memory; with SG and a
// subgroup a row, subgroupAdd; without SG a fixed tree over the row's LANES invocations
var<workgroup> sh: array<RT, {{WG}}>;

#if SG
#if WGROW
fn rowsum(v: RT, lid: u32, lane: u32, sg: u32, nsg: u32) -> RT {
  let s = subgroupAdd(v);
  if (lane == 0u) { sh[sg] = s; }
  workgroupBarrier();
  var t = sh[0];
  for (var j = 1u; j < nsg; j = j + 1u) { t = t + sh[j]; }
  workgroupBarrier();
  return t;
}
#else
fn rowsum(v: RT, lid: u32, lane: u32, sg: u32, nsg: u32) -> RT { return subgroupAdd(v); }
#endif
#else
fn rowsum(v: RT, lid: u32, k: u32, lanes: u32, unused: u32) -> RT {
  sh[lid] = v;
  workgroupBarrier();
  for (var h = lanes / 2u; h > 0u; h = h / 2u) {
    if (k < h) { sh[lid] = sh[lid] + sh[lid + h]; }
    workgroupBarrier();
  }
  let t = sh[lid - k];
  workgroupBarrier();
  return t;
}
#endif
