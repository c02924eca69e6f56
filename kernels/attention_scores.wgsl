// Row kernels of the materialized-score attention path (kernels/attention.py `_scores_fwd` /
// `_scores_bwd`): the launcher runs the products (S = q k^T, out = P v, dP = dout v^T, and the three
// gradients) as batched matmuls over a chunk of whole heads, and these kernels do what lies between,
// one row of Lk scores at a time. RPW rows a workgroup, T threads a row (a power of two), each
// thread striding over the row's keys (coalesced loads); partials are merged by a fixed tree in
// workgroup memory, so every result depends only on the shapes (deterministic, no atomics).
//   fwd       S (scores of q k^T, unscaled) -> P = softmax(S * scale) over the allowed keys, in place;
//             lse = ln(sum exp(S * scale)) of the row (-inf, and P = 0, for a row with no allowed key);
//             causal: P is written up to REACH keys past the row's last allowed one, as far as P v reads
//   probs     S -> P = exp(S * scale - lse) on allowed keys (0 elsewhere), in place (the backward's
//             recomputation from the forward's lse)
//   dscores   dP (dout v^T) -> dS = P * (dP - delta) * scale in place, delta = rowsum(dout * out); 0 on
//             causally masked keys (their dP tiles may never have been computed); with ONLY_DELTA, only
//             delta per row (the fused backward's `delta` kernel, for the epi_dscores epilogue)
// Rows are numbered inside the chunk: head h = row / Lq, query i = row % Lq, Lq the chunk's rows a head
// (whole heads, or a block of one head's query rows: coff and the mask window then start at its first row).
const T: u32 = {{T}}u;                // threads a row
const RPW: u32 = {{RPW}}u;            // rows a workgroup
const WG: u32 = T * RPW;
const CAUSAL: bool = {{CAUSAL}};

struct Params {
  nrows: u32, lq: u32, lk: u32, coff: i32,      // rows in this chunk, rows a head, keys, Lk - Lq + r0 (causal offset)
  soff: u32, loff: u32, aoff: u32, boff: u32,   // element offsets: scores, lse / P, dout, out
  scale: f32, neg_inf: u32, moff: u32, bh0: u32, // bits of -inf; mask window offset; first head of the chunk
  msq: u32, msk: u32, mrank: u32, dv: u32,       // mask strides along query / key, collapsed rank; v head size
  mshape: vec4<u32>, mstride: vec4<u32>,         // mask batch dims (collapsed) and their broadcast strides
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> sc: array<f32>;

var<workgroup> rm: array<f32, WG>;
var<workgroup> rs: array<f32, WG>;

fn neg_inf() -> f32 { return bitcast<f32>(p.neg_inf); }

// the chunk row of local thread li: RPW rows a workgroup, workgroups folded into x/y
fn row_of(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 { return (wg.x + wg.y * nwg.x) * RPW + li / T; }

//=== fwd
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
#include attention:mask

// the share of a partial (max m, sum s) in a merged state of max mm: nothing from an empty one
fn part(m: f32, s: f32, mm: f32) -> f32 { return select(s * exp(m - mm), 0.0, m == neg_inf()); }

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
  let row = row_of(wg, nwg, li);
  let lr = li / T;
  let t = li % T;
  let live = row < p.nrows;
  let i = row % p.lq;
  let mb = mask_base(p.bh0 + row / p.lq);
  let base = p.soff + row * p.lk;
  var m = neg_inf();
  var s = 0.0;
  if (live) {
    for (var j = t; j < p.lk; j = j + T) {
      if (allowed(i, j, mb)) {
        let x = sc[base + j] * p.scale;
        if (x > m) { s = s * exp(m - x) + 1.0; m = x; } else { s = s + exp(x - m); }
      }
    }
  }
  rm[li] = m;
  rs[li] = s;
  for (var w = T / 2u; w > 0u; w = w / 2u) {
    workgroupBarrier();
    if (t < w) {
      let m2 = rm[li + w];
      let mm = max(m, m2);
      s = part(m, s, mm) + part(m2, rs[li + w], mm);
      m = mm;
      rm[li] = m;
      rs[li] = s;
    }
  }
  workgroupBarrier();
  let rmax = rm[lr * T];
  let rsum = rs[lr * T];
  if (!live) { return; }
  let inv = select(0.0, 1.0 / rsum, rsum > 0.0);
  // causal: P v (matmul BAND_KEND, row tiles of at most REACH rows) reads keys below i + coff + REACH only
  var jw = p.lk;
  if (CAUSAL) { jw = u32(clamp(i32(i) + p.coff + {{REACH}} + 1, 0, i32(p.lk))); }
  for (var j = t; j < jw; j = j + T) {
    var pr = 0.0;
    if (rsum > 0.0 && allowed(i, j, mb)) { pr = exp(sc[base + j] * p.scale - rmax) * inv; }
    sc[base + j] = pr;
  }
  if (t == 0u) { lse[p.loff + row] = select(neg_inf(), rmax + log(rsum), rsum > 0.0); }
}

//=== probs
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
#include attention:mask

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
  let row = row_of(wg, nwg, li);
  if (row >= p.nrows) { return; }
  let t = li % T;
  let i = row % p.lq;
  let mb = mask_base(p.bh0 + row / p.lq);
  let base = p.soff + row * p.lk;
  let l = lse[p.loff + row];
  let any = l != neg_inf();
  for (var j = t; j < p.lk; j = j + T) {
    var pr = 0.0;
    if (any && allowed(i, j, mb)) { pr = exp(sc[base + j] * p.scale - l); }
    sc[base + j] = pr;
  }
}

//=== dscores
// (ONLY_DELTA: the `delta` kernel of the fused backward instead, which stores each row's delta at
// sc[soff + row] for the epi_dscores epilogue below; bindings dout and o move up by one)
#if ONLY_DELTA
@group(0) @binding(2) var<storage, read_write> dout: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
#else
@group(0) @binding(2) var<storage, read_write> pr: array<f32>;
@group(0) @binding(3) var<storage, read_write> dout: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
#endif

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
  let t = li % T;
  let row = row_of(wg, nwg, li);
  let lr = li / T;
  let live = row < p.nrows;
  var s = 0.0;
  if (live) {
    for (var d = t; d < p.dv; d = d + T) { s = s + dout[p.aoff + row * p.dv + d] * o[p.boff + row * p.dv + d]; }
  }
  rs[li] = s;
  for (var w = T / 2u; w > 0u; w = w / 2u) {
    workgroupBarrier();
    if (t < w) {
      s = s + rs[li + w];
      rs[li] = s;
    }
  }
  workgroupBarrier();
  let delta = rs[lr * T];
#if ONLY_DELTA
  if (live && t == 0u) { sc[p.soff + row] = delta; }
#else
  if (!live) { return; }
  let base = row * p.lk;
  // causal: keys past the row's last one are 0 (their dP was never computed: matmul BAND_TILES)
  var jend = p.lk;
  if (CAUSAL) { jend = u32(clamp(i32(row % p.lq) + p.coff + 1, 0, i32(p.lk))); }
  for (var j = t; j < p.lk; j = j + T) {
    var ds = 0.0;
    if (j < jend) { ds = pr[p.loff + base + j] * (sc[p.soff + base + j] - delta) * p.scale; }
    sc[p.soff + base + j] = ds;
  }
#endif
}

//=== epi_probs
// Matmul epilogue (kernels/matmul.wgsl epi_fn) of the backward's S = q k^T without a mask: the product
// goes straight to P = exp(S * scale - lse), as the `probs` kernel computes it, 0 on causally masked keys
// (without a mask a row has no allowed key only by causality: its lse = -inf is never read). x0: lse, one element a row (er[0] = (1, 0)). en.y: scale's bits;
// en.z: the causal offset of this matmul chunk's first row and column (key col may follow row when
// col <= row + en.z). A tile wholly past the band runs no k (matmul.wgsl band_tiles_epi) and lands here
// masked, so every entry of P is written.
{{BINDINGS}}
fn epilogue(acc: f32, i0: u32, i1: u32, i2: u32, row: u32, col: u32) -> f32 {
  if ({{CAUSAL}} && i32(col) > i32(row) + bitcast<i32>(p.en.z)) { return 0.0; }
  let l = x0[p.eb[0].w + i0 * p.eb[0].x + i1 * p.eb[0].y + i2 * p.eb[0].z + row * p.er[0].x];
  return exp(acc * bitcast<f32>(p.en.y) - l);
}

//=== epi_dscores
// Matmul epilogue of the backward's dP = dout v^T without a mask: dS = P * (dP - delta) * scale, as the
// `dscores` kernel computes it, 0 on causally masked keys. x0: P (the fused probs above), x1: delta, one
// element a row; en as in epi_probs.
{{BINDINGS}}
fn epilogue(acc: f32, i0: u32, i1: u32, i2: u32, row: u32, col: u32) -> f32 {
  if ({{CAUSAL}} && i32(col) > i32(row) + bitcast<i32>(p.en.z)) { return 0.0; }
  let pr = x0[p.eb[0].w + i0 * p.eb[0].x + i1 * p.eb[0].y + i2 * p.eb[0].z + row * p.er[0].x + col * p.er[0].y];
  let delta = x1[p.eb[1].w + i0 * p.eb[1].x + i1 * p.eb[1].y + i2 * p.eb[1].z + row * p.er[1].x];
  return pr * (acc - delta) * bitcast<f32>(p.en.y);
}
