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
  dctr: vec4<u32>, dprob: vec4<f32>,             // dropout: word offset (lo, hi), Philox key; (p, 1 / (1 - p))
  dlq: u32, dr0: u32, pad0: u32, pad1: u32,      // dropout: the op's Lq, the chunk's first query row
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> sc: array<f32>;

var<workgroup> rm: array<f32, WG>;
var<workgroup> rs: array<f32, WG>;

fn neg_inf() -> f32 { return bitcast<f32>(p.neg_inf); }

// the chunk row of local thread li: RPW rows a workgroup, workgroups folded into x/y
fn row_of(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 { return (wg.x + wg.y * nwg.x) * RPW + li / T; }

#if DROP
#include attention:drop_word

// the stream word of chunk row `row`'s key 0: its keys' words follow it, so a thread takes the row's words
// in whole Philox blocks (quads), one block drawn for up to 4 keys
fn row_word(row: u32) -> vec2<u32> {
  return drop_word((p.bh0 + row / p.lq) * p.dlq + p.dr0 + row % p.lq, 0u, p.lk, drop_off(p.dctr.xy));
}
#endif

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
#if DROP
  // P times its keep factor (out = P v takes the dropped probabilities; lse the undropped ones), by quads
  let w0 = row_word(row);
  let s0 = w0.x & 3u;
  let wa = vec2<u32>(w0.x & ~3u, w0.y);       // the row's first block
  for (var q = t; q * 4u < jw + s0; q = q + T) {
    let kf = drop_quad(ph_add64(wa, vec2<u32>(q * 4u, 0u)), p.dctr.zw, p.dprob.x, p.dprob.y);
    for (var l = 0u; l < 4u; l = l + 1u) {
      let j = q * 4u + l - s0;
      if (q * 4u + l < s0 || j >= jw) { continue; }
      var pr = 0.0;
      if (rsum > 0.0 && allowed(i, j, mb)) { pr = exp(sc[base + j] * p.scale - rmax) * inv * kf[l]; }
      sc[base + j] = pr;
    }
  }
#else
  for (var j = t; j < jw; j = j + T) {
    var pr = 0.0;
    if (rsum > 0.0 && allowed(i, j, mb)) { pr = exp(sc[base + j] * p.scale - rmax) * inv; }
    sc[base + j] = pr;
  }
#endif
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
#if DROP
  // P with its keep bit in the sign: -P where dropped (dscores reads both, then leaves P times its factor)
  let w0 = row_word(row);
  let s0 = w0.x & 3u;
  let wa = vec2<u32>(w0.x & ~3u, w0.y);       // the row's first block
  for (var q = t; q * 4u < p.lk + s0; q = q + T) {
    let kf = drop_quad(ph_add64(wa, vec2<u32>(q * 4u, 0u)), p.dctr.zw, p.dprob.x, p.dprob.y);
    for (var c = 0u; c < 4u; c = c + 1u) {
      let j = q * 4u + c - s0;
      if (q * 4u + c < s0 || j >= p.lk) { continue; }
      var pr = 0.0;
      if (any && allowed(i, j, mb)) { pr = exp(sc[base + j] * p.scale - l); }
      sc[base + j] = select(-pr, pr, kf[c] != 0.0);
    }
  }
#else
  for (var j = t; j < p.lk; j = j + T) {
    var pr = 0.0;
    if (any && allowed(i, j, mb)) { pr = exp(sc[base + j] * p.scale - l); }
    sc[base + j] = pr;
  }
#endif
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
#if DROP
    // pr holds P signed by its keep bit (probs): dS = P (z dP - delta) scale, and pr becomes P z for dv
    if (j < jend) {
      let e = pr[p.loff + base + j];
      let z = select(0.0, p.dprob.y, e > 0.0);
      ds = abs(e) * (sc[p.soff + base + j] * z - delta) * p.scale;
      pr[p.loff + base + j] = e * z;
    }
#else
    if (j < jend) { ds = pr[p.loff + base + j] * (sc[p.soff + base + j] - delta) * p.scale; }
#endif
    sc[p.soff + base + j] = ds;
  }
#endif
}

//=== epi_probs
// Matmul epilogue (kernels/matmul.wgsl epi_fn) of the backward's S = q k^T without a mask: the product
// goes straight to P = exp(S * scale - lse), as the `probs` kernel computes it, 0 on causally masked keys
// (without a mask a row has no allowed key only by causality: its lse = -inf is never read). x0: lse, one
// element a row (er[0] = (1, 0)). en.y: scale's bits; en.z: the causal offset of this matmul chunk's first row and column (key col may follow row when
// col <= row + en.z). A tile wholly past the band runs no k (matmul.wgsl band_tiles_epi) and lands here
// masked, so every entry of P is written. With DROP, P's sign carries its keep bit, as `probs` stores it.
{{BINDINGS}}
#if DROP
#include attention_scores:epi_keep
#endif
fn epilogue(acc: f32, i0: u32, i1: u32, i2: u32, row: u32, col: u32) -> f32 {
  if ({{CAUSAL}} && i32(col) > i32(row) + bitcast<i32>(p.en.z)) { return 0.0; }
  let l = x0[p.eb[0].w + i0 * p.eb[0].x + i1 * p.eb[0].y + i2 * p.eb[0].z + row * p.er[0].x];
  let pr = exp(acc * bitcast<f32>(p.en.y) - l);
#if DROP
  return select(-pr, pr, epi_keep(i0, i1, i2, row, col) != 0.0);
#else
  return pr;
#endif
}

//=== epi_dscores
// Matmul epilogue of the backward's dP = dout v^T without a mask: dS = P * (dP - delta) * scale, as the
// `dscores` kernel computes it, 0 on causally masked keys. x0: P (the fused probs above), x1: delta, one
// element a row; en as in epi_probs. With DROP, x0 holds P signed by its keep bit: dS = P (z dP - delta)
// scale, and x0 is left holding P z for the dv product (each entry is this thread's alone).
{{BINDINGS}}
fn epilogue(acc: f32, i0: u32, i1: u32, i2: u32, row: u32, col: u32) -> f32 {
  if ({{CAUSAL}} && i32(col) > i32(row) + bitcast<i32>(p.en.z)) { return 0.0; }
  let o = p.eb[0].w + i0 * p.eb[0].x + i1 * p.eb[0].y + i2 * p.eb[0].z + row * p.er[0].x + col * p.er[0].y;
  let pr = x0[o];
  let delta = x1[p.eb[1].w + i0 * p.eb[1].x + i1 * p.eb[1].y + i2 * p.eb[1].z + row * p.er[1].x];
#if DROP
  let z = select(0.0, bitcast<f32>(p.eph[1].y), pr > 0.0);
  x0[o] = pr * z;
  return abs(pr) * (acc * z - delta) * bitcast<f32>(p.en.y);
#else
  return pr * (acc - delta) * bitcast<f32>(p.en.y);
#endif
}

//=== epi_keep
// The keep factor of the epilogue's element (epi_probs with DROP): its flat query row and key come from two
// index entries of the epilogue's params past the inputs (eb/er {{NI}}: bh * Lq + i; {{NI}} + 1: j); eph[0] is
// the word offset and key, eph[1] (bits of p, bits of 1 / (1 - p), Lk). A thread's store visits 4
// consecutive keys of a row, so it keeps the last Philox block drawn and draws again only past it.
#include attention:drop_word

var<private> ek_have: bool = false;
var<private> ek_ctr: vec2<u32>;
var<private> ek_quad: vec4<f32>;

fn epi_keep(i0: u32, i1: u32, i2: u32, row: u32, col: u32) -> f32 {
  let fr = p.eb[{{NI}}].w + i0 * p.eb[{{NI}}].x + i1 * p.eb[{{NI}}].y + i2 * p.eb[{{NI}}].z + row * p.er[{{NI}}].x;
  let j = p.eb[{{NI}} + 1].w + col * p.er[{{NI}} + 1].y;
  let w = drop_word(fr, j, p.eph[1].z, drop_off(p.eph[0].xy));
  let c = ph_counter(w);
  if (!ek_have || any(c != ek_ctr)) {
    ek_have = true;
    ek_ctr = c;
    ek_quad = drop_quad(w, p.eph[0].zw, bitcast<f32>(p.eph[1].x), bitcast<f32>(p.eph[1].y));
  }
  return ek_quad[w.x & 3u];
}
