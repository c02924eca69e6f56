// Flash-attention forward: one workgroup per (head, block of BQ query rows), one thread per query row.
// Key/value blocks of BK rows are staged in workgroup memory; each row keeps a running max m, a running
// sum l and an unnormalized accumulator (online softmax), so no Lq x Lk score matrix ever exists.
// Writes out = acc / l (0 for a row with no allowed key) and lse = m + log(l) (-inf for such a row).
// Element offsets of every binding come in the params, so the same kernel runs on any window of a
// split tensor (a chunk of heads, or of query rows of one head).
{{ENABLE}}
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const BQ: u32 = {{BQ}}u;
const BK: u32 = {{BK}}u;
const CAUSAL: bool = {{CAUSAL}};
const NEG: f32 = -3.0e38;            // "minus infinity" inside the kernel (exp(NEG - m) == 0)

struct Params {
  nbh: u32, lq: u32, lk: u32, nrows: u32,      // heads in this chunk, full lengths, query rows per head here
  r0: u32, nqb: u32, coff: i32, neg_inf: u32,  // first query row, query blocks per head, Lk - Lq, bits of -inf
  scale: f32, qoff: u32, koff: u32, voff: u32, // element offsets inside the bindings
  ooff: u32, loff: u32, moff: u32, bh0: u32,   // moff: (window offset - footprint low) mod 2^32; bh0: first head
  msq: u32, msk: u32, mrank: u32, _p: u32,     // mask strides along query / key, collapsed batch rank
  mshape: vec4<u32>, mstride: vec4<u32>,       // mask batch dims (collapsed) and their broadcast strides
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> k: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> v: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> o: array<{{T}}>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
#include attention:mask
#include attention:key_tiles

@compute @workgroup_size({{BQ}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nqb) { return; }
  let bl = wid / p.nqb;
  let qb = wid % p.nqb;
  let lrow = qb * BQ + t;
  let row = p.r0 + lrow;
  let valid = lrow < p.nrows;
  let mb = mask_base(p.bh0 + bl);
  var qr: array<f32, {{D}}>;
  var acc: array<f32, {{DV}}>;
  let qbase = p.qoff + (bl * p.nrows + lrow) * D;
  if (valid) {
    for (var d = 0u; d < D; d = d + 1u) { qr[d] = f32(q[qbase + d]); }
  }
  for (var d = 0u; d < DV; d = d + 1u) { acc[d] = 0.0; }
  var m = NEG;
  var l = 0.0;
  let kbase = p.koff + bl * p.lk * D;
  let vbase = p.voff + bl * p.lk * DV;
  let kend = key_end(qb);
  for (var j0 = 0u; j0 < kend; j0 = j0 + BK) {
    let nj = min(BK, p.lk - j0);
    workgroupBarrier();
    stage_kv(t, kbase, vbase, j0, nj);
    workgroupBarrier();
    if (valid) {
      var s: array<f32, {{BK}}>;
      var bm = m;
      for (var jj = 0u; jj < nj; jj = jj + 1u) {
        var x = 0.0;
        for (var d = 0u; d < D; d = d + 1u) { x = x + qr[d] * ks[jj * D + d]; }
        x = x * p.scale;
        if (!allowed(row, j0 + jj, mb)) { x = NEG; }
        s[jj] = x;
        bm = max(bm, x);
      }
      if (bm > NEG) {
        let corr = exp(m - bm);
        l = l * corr;
        for (var d = 0u; d < DV; d = d + 1u) { acc[d] = acc[d] * corr; }
        for (var jj = 0u; jj < nj; jj = jj + 1u) {
          if (s[jj] > NEG) {
            let pj = exp(s[jj] - bm);
            l = l + pj;
            for (var d = 0u; d < DV; d = d + 1u) { acc[d] = acc[d] + pj * vs[jj * DV + d]; }
          }
        }
        m = bm;
      }
    }
  }
  if (valid) {
    let obase = p.ooff + (bl * p.nrows + lrow) * DV;
    let inv = select(0.0, 1.0 / l, l > 0.0);
    for (var d = 0u; d < DV; d = d + 1u) { o[obase + d] = {{T}}(acc[d] * inv); }
    lse[p.loff + bl * p.nrows + lrow] = select(bitcast<f32>(p.neg_inf), m + log(l), l > 0.0);
  }
}
