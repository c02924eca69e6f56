// Flash-attention backward, three kernels sharing this header (the launcher keeps the header and one
// `//=== name` section). Scores are recomputed blockwise from q, k and the forward's lse, so no
// Lq x Lk matrix exists; every sum runs in a fixed order and nothing uses atomics (deterministic).
//   stats: per query row, (lse, delta = rowsum(dout * out)) as f32 pairs into a scratch window
//          (the dq output region, which the dq kernel overwrites last);
//   dkdv:  one workgroup per (head, block of BKV key rows), one thread per key row, looping over
//          staged blocks of query rows: dv += p * dout, dk += ds * q;
//   dq:    one workgroup per (head, block of BQ query rows), one thread per query row, looping over
//          staged key blocks: dq += ds * k.
// with p = exp(s * scale - lse) on allowed pairs, ds = p * (dout . v - delta) * scale.
{{ENABLE}}
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const BQ: u32 = {{BQ}}u;     // threads per workgroup (rows owned by the workgroup)
const BK: u32 = {{BK}}u;     // rows of the other operand staged per step
const CAUSAL: bool = {{CAUSAL}};

struct Params {
  nbh: u32, lq: u32, lk: u32, nrows: u32,      // heads in this chunk, full lengths, query rows per head here
  r0: u32, nblk: u32, coff: i32, accum: u32,   // first query row, owned blocks per head, Lk - Lq, add into dk/dv
  scale: f32, qoff: u32, koff: u32, voff: u32, // element offsets inside the bindings
  ooff: u32, loff: u32, doff: u32, goff: u32,  // out, lse, dout, first gradient output (dq or dk)
  g2off: u32, soff: u32, moff: u32, bh0: u32,  // dv, stats, mask (window offset - footprint low), first head
  msq: u32, msk: u32, mrank: u32, _p: u32,
  mshape: vec4<u32>, mstride: vec4<u32>,
}
@group(0) @binding(0) var<uniform> p: Params;

//=== stats
@group(0) @binding(1) var<storage, read_write> o: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read_write> dout: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> stats: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;       // row within the chunk, heads outer
  if (i >= p.nbh * p.nrows) { return; }
  var dl = 0.0;
  for (var d = 0u; d < DV; d = d + 1u) {
    dl = dl + f32(dout[p.doff + i * DV + d]) * f32(o[p.ooff + i * DV + d]);
  }
  stats[p.soff + 2u * i] = lse[p.loff + i];
  stats[p.soff + 2u * i + 1u] = dl;
}

//=== dq
@group(0) @binding(1) var<storage, read_write> q: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> k: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> v: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> o: array<{{T}}>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> dout: array<{{T}}>;
@group(0) @binding(7) var<storage, read_write> dq: array<{{T}}>;
#include attention:mask
#include attention:key_tiles

@compute @workgroup_size({{BQ}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nblk) { return; }
  let bl = wid / p.nblk;
  let qb = wid % p.nblk;
  let lrow = qb * BQ + t;
  let row = p.r0 + lrow;
  let valid = lrow < p.nrows;
  let mb = mask_base(p.bh0 + bl);
  let ri = bl * p.nrows + lrow;
  var qr: array<f32, {{D}}>;
  var dor: array<f32, {{DV}}>;
  var acc: array<f32, {{D}}>;
  var li = 0.0;
  var dl = 0.0;
  if (valid) {
    for (var d = 0u; d < D; d = d + 1u) { qr[d] = f32(q[p.qoff + ri * D + d]); }
    for (var d = 0u; d < DV; d = d + 1u) {
      dor[d] = f32(dout[p.doff + ri * DV + d]);
      dl = dl + dor[d] * f32(o[p.ooff + ri * DV + d]);
    }
    li = lse[p.loff + ri];
  }
  for (var d = 0u; d < D; d = d + 1u) { acc[d] = 0.0; }
  let kbase = p.koff + bl * p.lk * D;
  let vbase = p.voff + bl * p.lk * DV;
  let kend = key_end(qb);
  for (var j0 = 0u; j0 < kend; j0 = j0 + BK) {
    let nj = min(BK, p.lk - j0);
    workgroupBarrier();
    stage_kv(t, kbase, vbase, j0, nj);
    workgroupBarrier();
    if (valid) {
      for (var jj = 0u; jj < nj; jj = jj + 1u) {
        if (!allowed(row, j0 + jj, mb)) { continue; }
        var x = 0.0;
        for (var d = 0u; d < D; d = d + 1u) { x = x + qr[d] * ks[jj * D + d]; }
        let pij = exp(x * p.scale - li);
        var dp = 0.0;
        for (var d = 0u; d < DV; d = d + 1u) { dp = dp + dor[d] * vs[jj * DV + d]; }
        let ds = pij * (dp - dl) * p.scale;
        for (var d = 0u; d < D; d = d + 1u) { acc[d] = acc[d] + ds * ks[jj * D + d]; }
      }
    }
  }
  if (valid) {
    for (var d = 0u; d < D; d = d + 1u) { dq[p.goff + ri * D + d] = {{T}}(acc[d]); }
  }
}

//=== dkdv
@group(0) @binding(1) var<storage, read_write> q: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> k: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> v: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> stats: array<f32>;
@group(0) @binding(5) var<storage, read_write> dout: array<{{T}}>;
@group(0) @binding(6) var<storage, read_write> dk: array<{{T}}>;
@group(0) @binding(7) var<storage, read_write> dv: array<{{T}}>;
#include attention:mask

var<workgroup> qs: array<f32, {{QS}}>;
var<workgroup> ds_: array<f32, {{DS}}>;
var<workgroup> st: array<f32, {{SS}}>;

@compute @workgroup_size({{BQ}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nblk) { return; }
  let bl = wid / p.nblk;
  let kb = wid % p.nblk;
  let key = kb * BQ + t;
  let valid = key < p.lk;
  let mb = mask_base(p.bh0 + bl);
  let kj = bl * p.lk + key;
  var kr: array<f32, {{D}}>;
  var vr: array<f32, {{DV}}>;
  var dka: array<f32, {{D}}>;
  var dva: array<f32, {{DV}}>;
  for (var d = 0u; d < D; d = d + 1u) { dka[d] = 0.0; }
  for (var d = 0u; d < DV; d = d + 1u) { dva[d] = 0.0; }
  if (valid) {
    for (var d = 0u; d < D; d = d + 1u) { kr[d] = f32(k[p.koff + kj * D + d]); }
    for (var d = 0u; d < DV; d = d + 1u) { vr[d] = f32(v[p.voff + kj * DV + d]); }
    if (p.accum != 0u) {
      for (var d = 0u; d < D; d = d + 1u) { dka[d] = f32(dk[p.goff + kj * D + d]); }
      for (var d = 0u; d < DV; d = d + 1u) { dva[d] = f32(dv[p.g2off + kj * DV + d]); }
    }
  }
  // query rows of this chunk that can see a key of this block (causal: i >= j - coff)
  var i0 = 0u;
  if (CAUSAL) {
    i0 = u32(clamp(i32(kb * BQ) - p.coff - i32(p.r0), 0, i32(p.nrows)));
  }
  let qbase = bl * p.nrows;
  for (; i0 < p.nrows; i0 = i0 + BK) {
    let ni = min(BK, p.nrows - i0);
    workgroupBarrier();
    for (var e = t; e < ni * D; e = e + BQ) { qs[e] = f32(q[p.qoff + (qbase + i0) * D + e]); }
    for (var e = t; e < ni * DV; e = e + BQ) { ds_[e] = f32(dout[p.doff + (qbase + i0) * DV + e]); }
    for (var e = t; e < ni * 2u; e = e + BQ) { st[e] = stats[p.soff + 2u * (qbase + i0) + e]; }
    workgroupBarrier();
    if (valid) {
      for (var ii = 0u; ii < ni; ii = ii + 1u) {
        if (!allowed(p.r0 + i0 + ii, key, mb)) { continue; }
        var x = 0.0;
        for (var d = 0u; d < D; d = d + 1u) { x = x + qs[ii * D + d] * kr[d]; }
        let pij = exp(x * p.scale - st[2u * ii]);
        var dp = 0.0;
        for (var d = 0u; d < DV; d = d + 1u) {
          let g = ds_[ii * DV + d];
          dva[d] = dva[d] + pij * g;
          dp = dp + g * vr[d];
        }
        let dsv = pij * (dp - st[2u * ii + 1u]) * p.scale;
        for (var d = 0u; d < D; d = d + 1u) { dka[d] = dka[d] + dsv * qs[ii * D + d]; }
      }
    }
  }
  if (valid) {
    for (var d = 0u; d < D; d = d + 1u) { dk[p.goff + kj * D + d] = {{T}}(dka[d]); }
    for (var d = 0u; d < DV; d = d + 1u) { dv[p.g2off + kj * DV + d] = {{T}}(dva[d]); }
  }
}
