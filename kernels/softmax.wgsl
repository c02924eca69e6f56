// softmax / log_softmax along one axis of an [outer, R, inner] layout, in two reads of a row: one
// online pass keeps (max m, sum s of exp(x - m)) per invocation, rescaling s when m grows; the states
// are merged in a fixed order (subgroup ops, or a tree in workgroup memory); a second pass writes
// exp(x - m) / s (or x - m - log(s) with the LOG flag). f16 computes in f32 and rounds once on store.
//
// Layouts (flags, chosen by kernels/softmax.py when it builds the pipeline):
//   COL        one invocation per row, folding r = 0 .. R-1 in order (inner > 1: neighbouring rows are
//              neighbouring in memory, so loads coalesce across invocations)
//   else       RPW rows per workgroup of WG invocations. SG (adapter grants `subgroup`): with RPW = 1
//              the workgroup shares a row (subgroup merge, then the subgroups' states in order through
//              workgroup memory); with RPW > 1 each subgroup takes rows sg, sg + nsg, .. of the
//              workgroup's RPW (correct for any subgroup size). Without SG: LANES = WG / RPW
//              invocations a row and a fixed tree in workgroup memory.
//   VEC        rows are contiguous with R and both bases multiples of 4: x and out bind as vec4.
// Every reduction order is fixed by the shapes and the subgroup size (no atomics): deterministic.
{{ENABLE}}
// ST: the storage type a binding holds, CT: what it computes in
#if VEC
alias ST = vec4<{{T}}>;
alias CT = vec4<f32>;
#else
alias ST = {{T}};
alias CT = f32;
#endif
struct Params { q: array<vec4<u32>, 4> }
// q words (in chunks: vec4 units with VEC, elements otherwise): 0 nrows (of this box), 1 R,
// 2 box inner size, 3 outer stride, 4 r stride, 5 x_base, 6 out_base
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<ST>;
@group(0) @binding(2) var<storage, read_write> x: array<ST>;

fn P(i: u32) -> u32 { return p.q[i / 4u][i % 4u]; }

#include common:f32_bits
fn neg_inf() -> f32 { return f32_bits(0xff800000u); }

// NaN-propagating max (numpy's)
fn fmax(a: f32, b: f32) -> f32 { return select(select(a, b, b > a), b, (bitcast<u32>(b) & 0x7fffffffu) > 0x7f800000u); }

#if VEC
fn ld(i: u32) -> vec4<f32> { return vec4<f32>(x[i]); }
fn hmax(v: vec4<f32>) -> f32 { return fmax(fmax(v.x, v.y), fmax(v.z, v.w)); }
fn hsum(v: vec4<f32>) -> f32 { return (v.x + v.y) + (v.z + v.w); }
fn ex(v: vec4<f32>, m: f32) -> vec4<f32> { return exp(v - vec4<f32>(m)); }
#else
fn ld(i: u32) -> f32 { return f32(x[i]); }
fn hmax(v: f32) -> f32 { return v; }
fn hsum(v: f32) -> f32 { return v; }
fn ex(v: f32, m: f32) -> f32 { return exp(v - m); }
#endif

// one chunk folded into the state (m, s); while m is -inf every value so far is -inf and s stays 0
fn upd(st: vec2<f32>, c: CT) -> vec2<f32> {
  let mn = fmax(st.x, hmax(c));
  if (mn == neg_inf()) { return st; }
  return vec2<f32>(mn, st.y * exp(st.x - mn) + hsum(ex(c, mn)));
}

// the share of a state in a merged one of max m: nothing from an empty (-inf) state
fn part(st: vec2<f32>, m: f32) -> f32 { return select(st.y * exp(st.x - m), 0.0, st.x == neg_inf()); }

fn merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  let m = fmax(a.x, b.x);
  return vec2<f32>(m, part(a, m) + part(b, m));
}

// (x base, out base) of row `row`, in chunks
fn bases(row: u32) -> vec2<u32> {
  let bi = P(2u);
  let base = (row / bi) * P(3u) + (row % bi);
  return vec2<u32>(P(5u) + base, P(6u) + base);
}

// four chunks folded into the state at once: one rescale, in the order a, b, c, d
fn upd4(st: vec2<f32>, a: CT, b: CT, c: CT, d: CT) -> vec2<f32> {
  let mn = fmax(st.x, fmax(fmax(hmax(a), hmax(b)), fmax(hmax(c), hmax(d))));
  if (mn == neg_inf()) { return st; }
  return vec2<f32>(mn, st.y * exp(st.x - mn) + hsum(ex(a, mn)) + hsum(ex(b, mn)) + hsum(ex(c, mn))
                   + hsum(ex(d, mn)));
}

// invocation k of `lanes` folds chunks k, k + lanes, .. of the row at xb (four loads in flight)
fn fold(xb: u32, k: u32, lanes: u32) -> vec2<f32> {
  let n = P(1u);
  let rs = P(4u);
  var st = vec2<f32>(neg_inf(), 0.0);
  var r = k;
  for (; r + 3u * lanes < n; r = r + 4u * lanes) {
    let a = ld(xb + r * rs);
    let b = ld(xb + (r + lanes) * rs);
    let c = ld(xb + (r + 2u * lanes) * rs);
    let d = ld(xb + (r + 3u * lanes) * rs);
    st = upd4(st, a, b, c, d);
  }
  // at most three chunks left: two, then one (loads still paired)
  if (r + lanes < n) {
    let a = ld(xb + r * rs);
    let b = ld(xb + (r + lanes) * rs);
    st = upd(upd(st, a), b);
    r = r + 2u * lanes;
  }
  if (r < n) { st = upd(st, ld(xb + r * rs)); }
  return st;
}

// a row of -inf only leaves s = 0: numpy's 0/0, NaN, written out here, since WGSL lets a compiler assume there are
// no infinities (Tint over SwiftShader computed -inf - -inf as 0 and gave 1/0)
fn y(e: CT, st: vec2<f32>) -> ST {
  let empty = st.y == 0.0;
#if LOG
  return select(ST(e - CT(st.x + log(st.y))), ST(CT(f32_bits(0x7fc00000u))), empty);
#else
  return select(ST(ex(e, st.x) / CT(st.y)), ST(CT(f32_bits(0x7fc00000u))), empty);
#endif
}

fn write(xb: u32, ob: u32, k: u32, lanes: u32, st: vec2<f32>) {
  let n = P(1u);
  let rs = P(4u);
  var r = k;
  for (; r + 3u * lanes < n; r = r + 4u * lanes) {
    let a = ld(xb + r * rs);
    let b = ld(xb + (r + lanes) * rs);
    let c = ld(xb + (r + 2u * lanes) * rs);
    let d = ld(xb + (r + 3u * lanes) * rs);
    out[ob + r * rs] = y(a, st);
    out[ob + (r + lanes) * rs] = y(b, st);
    out[ob + (r + 2u * lanes) * rs] = y(c, st);
    out[ob + (r + 3u * lanes) * rs] = y(d, st);
  }
  if (r + lanes < n) {
    let a = ld(xb + r * rs);
    let b = ld(xb + (r + lanes) * rs);
    out[ob + r * rs] = y(a, st);
    out[ob + (r + lanes) * rs] = y(b, st);
    r = r + 2u * lanes;
  }
  if (r < n) { out[ob + r * rs] = y(ld(xb + r * rs), st); }
}

#if REG
// REG: the row's chunks k, k + lanes, .. (KREG of them at most) are read once into registers and
// written from there: one read of the row instead of two. The state is then exact (max over the
// cached chunks, then one sum of exp(x - max)). The launcher sizes KREG so that KREG * lanes covers
// the row for the lane count it knows; where lanes is the run-time subgroup size, a row it does not
// cover takes the two-read path (the branch is uniform over the subgroup).
var<private> cache: array<CT, {{KREG}}>;

fn fold_c(xb: u32, k: u32, lanes: u32) -> vec2<f32> {
  let n = P(1u);
  if ({{KREG}}u * lanes < n) { return fold(xb, k, lanes); }
  let rs = P(4u);
  var m = neg_inf();
  for (var j = 0u; j < {{KREG}}u; j = j + 1u) {
    let r = k + j * lanes;
    if (r < n) {
      cache[j] = ld(xb + r * rs);
      m = fmax(m, hmax(cache[j]));
    }
  }
  if (m == neg_inf()) { return vec2<f32>(m, 0.0); }
  var s = 0.0;
  for (var j = 0u; j < {{KREG}}u; j = j + 1u) {
    if (k + j * lanes < n) { s = s + hsum(ex(cache[j], m)); }
  }
  return vec2<f32>(m, s);
}

fn write_c(xb: u32, ob: u32, k: u32, lanes: u32, st: vec2<f32>) {
  let n = P(1u);
  if ({{KREG}}u * lanes < n) { write(xb, ob, k, lanes, st); return; }
  let rs = P(4u);
  for (var j = 0u; j < {{KREG}}u; j = j + 1u) {
    let r = k + j * lanes;
    if (r < n) { out[ob + r * rs] = y(cache[j], st); }
  }
}
#else
fn fold_c(xb: u32, k: u32, lanes: u32) -> vec2<f32> { return fold(xb, k, lanes); }
fn write_c(xb: u32, ob: u32, k: u32, lanes: u32, st: vec2<f32>) { write(xb, ob, k, lanes, st); }
#endif

#if COL
@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = gid.x + gid.y * nwg.x * {{WG}}u;
  if (row >= P(0u)) { return; }
  let b = bases(row);
  let st = fold(b.x, 0u, 1u);
  write(b.x, b.y, 0u, 1u, st);
}
#else
#if SG
#if WGROW
var<workgroup> shs: array<vec2<f32>, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= P(0u)) { return; }
  let b = bases(row);
  let st = fold_c(b.x, lid.x, {{WG}}u);
  let m = subgroupMax(st.x);
  let nan = subgroupAny((bitcast<u32>(st.x) & 0x7fffffffu) > 0x7f800000u);
  let mm = select(m, st.x + f32_bits(0x7fc00000u), nan);
  let s = subgroupAdd(part(st, mm));
  if (lane == 0u) { shs[sg] = vec2<f32>(mm, s); }
  workgroupBarrier();
  var t = shs[0];
  for (var j = 1u; j < nsg; j = j + 1u) { t = merge(t, shs[j]); }
  write_c(b.x, b.y, lid.x, {{WG}}u, t);
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) sgs: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
  let first = (wid.x + wid.y * nwg.x) * {{RPW}}u;
  for (var rr = sg; rr < {{RPW}}u; rr = rr + nsg) {
    let row = first + rr;
    if (row >= P(0u)) { break; }
    let b = bases(row);
    let st = fold_c(b.x, lane, sgs);
    let m = subgroupMax(st.x);
    let nan = subgroupAny((bitcast<u32>(st.x) & 0x7fffffffu) > 0x7f800000u);
    let mm = select(m, st.x + f32_bits(0x7fc00000u), nan);
    let s = subgroupAdd(part(st, mm));
    write_c(b.x, b.y, lane, sgs, vec2<f32>(mm, s));
  }
}
#endif
#else
var<workgroup> shs: array<vec2<f32>, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let lanes = {{WG}}u / {{RPW}}u;
  let k = lid.x % lanes;
  let row = (wid.x + wid.y * nwg.x) * {{RPW}}u + lid.x / lanes;
  let live = row < P(0u);
  var b = vec2<u32>(0u, 0u);
  var st = vec2<f32>(neg_inf(), 0.0);
  if (live) {
    b = bases(row);
    st = fold_c(b.x, k, lanes);
  }
  shs[lid.x] = st;
  workgroupBarrier();
  for (var h = lanes / 2u; h > 0u; h = h / 2u) {
    if (k < h) { shs[lid.x] = merge(shs[lid.x], shs[lid.x + h]); }
    workgroupBarrier();
  }
  let t = shs[lid.x - k];
  if (live) { write_c(b.x, b.y, k, lanes, t); }
}
#endif
#endif
