// Pieces the flash-attention kernels share (attention_fwd.wgsl, and the dq and dkdv kernels of
// attention_bwd.wgsl), pulled in with `#include attention:<section>`. Not a kernel by itself: each
// piece expects the includer's `p` (fields coff, r0, nrows, lk, moff, msq, msk, mrank, mshape,
// mstride), its constants D, DV, BQ, BK and CAUSAL, and (key_tiles) its k and v bindings.

//=== mask
// Which (query row i, key j) pairs may attend: causal (j <= i + Lk - Lq) and, with the MASK flag, the
// bool mask bound at MASK_BINDING, broadcast over heads by strides (mask_base: head bh's offset).
#if MASK
@group(0) @binding({{MASK_BINDING}}) var<storage, read_write> msk: array<u32>;
#endif

fn mask_base(bh: u32) -> u32 {
  var r = bh;
  var off = p.moff;
  for (var d = i32(p.mrank) - 1; d >= 0; d = d - 1) {
    let s = p.mshape[u32(d)];
    off = off + (r % s) * p.mstride[u32(d)];
    r = r / s;
  }
  return off;
}

fn allowed(i: u32, j: u32, mb: u32) -> bool {
  var ok = true;
  if (CAUSAL) { ok = i32(j) <= i32(i) + p.coff; }
#if MASK
  if (ok) { ok = msk[mb + i * p.msq + j * p.msk] != 0u; }
#endif
  return ok;
}

//=== key_tiles
// Key/value blocks of BK rows staged in workgroup memory (f32), for kernels that own a block of BQ
// query rows (qb) and loop over the keys.
var<workgroup> ks: array<f32, {{KS}}>;
var<workgroup> vs: array<f32, {{VS}}>;

// One past the last key that query block qb can see: every key, or (causal) up to its last row + coff.
fn key_end(qb: u32) -> u32 {
  var kend = p.lk;
  if (CAUSAL) {
    let last = i32(p.r0 + min(qb * BQ + BQ, p.nrows)) - 1;
    kend = u32(clamp(last + p.coff + 1, 0, i32(p.lk)));
  }
  return kend;
}

// Keys (and values) j0 .. j0 + nj - 1 of the head at kbase (vbase) into ks (vs), the workgroup's
// BQ threads striding over the elements; callers put a workgroupBarrier before and after.
fn stage_kv(t: u32, kbase: u32, vbase: u32, j0: u32, nj: u32) {
  for (var e = t; e < nj * D; e = e + BQ) { ks[e] = f32(k[kbase + j0 * D + e]); }
  for (var e = t; e < nj * DV; e = e + BQ) { vs[e] = f32(v[vbase + j0 * DV + e]); }
}

//=== dropout
// Attention dropout (flash kernels): the keep factor of pair (query row i, key j) of head bh is
// 1 / (1 - p) when the uniform of word offset + (bh * Lq + i) * Lk + j of the Philox stream (key
// p.dctr.zw, 64-bit word offset p.dctr.xy, plus the step's stream position from `dbase` with the
// BASED flag) is >= p, else 0; bit-exact with scellis_jupyter/rng/philox.py and kernels/philox.wgsl,
// so the forward and both backward kernels (and the reference path) draw the same mask. Expects the
// includer's p.lq, p.lk, p.dctr (offset lo, hi, key 0, 1) and p.dprob (p, 1 / (1 - p)).
#if BASED
@group(0) @binding({{BASE_BINDING}}) var<storage, read_write> dbase: array<u32>;
#endif

fn mulhilo(a: u32, b: u32) -> vec2<u32> {   // (hi, lo) of the 64-bit product
  let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
  let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  let lo = (p00 & 0xffffu) | (mid << 16u);
  let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
  return vec2<u32>(hi, lo);
}

fn keep(bh: u32, i: u32, j: u32) -> f32 {
  let m = mulhilo(bh * p.lq + i, p.lk);
  var lo = m.y + j;
  var hi = m.x + select(0u, 1u, lo < j);
  var olo = p.dctr.x;
  var ohi = p.dctr.y;
#if BASED
  let blo = olo + dbase[0];
  ohi = ohi + dbase[1] + select(0u, 1u, blo < olo);
  olo = blo;
#endif
  let lo2 = lo + olo;
  hi = hi + ohi + select(0u, 1u, lo2 < lo);
  lo = lo2;
  var c = vec4<u32>((lo >> 2u) | (hi << 30u), hi >> 2u, 0u, 0u);
  var kk = p.dctr.zw;
  for (var r = 0u; r < 10u; r = r + 1u) {
    if (r > 0u) { kk = kk + vec2<u32>(0x9E3779B9u, 0xBB67AE85u); }
    let m0 = mulhilo(0xD2511F53u, c.x);
    let m1 = mulhilo(0xCD9E8D57u, c.z);
    c = vec4<u32>(m1.x ^ c.y ^ kk.x, m1.y, m0.x ^ c.w ^ kk.y, m0.y);
  }
  let u = f32(c[lo & 3u] >> 8u) * (1.0 / 16777216.0);
  return select(0.0, p.dprob.y, u >= p.dprob.x);
}

// keep factors of rows i0 .. i0 + 3 (the lanes) against key j
fn keep_rows(bh: u32, i0: u32, j: u32) -> vec4<f32> {
  return vec4<f32>(keep(bh, i0, j), keep(bh, i0 + 1u, j), keep(bh, i0 + 2u, j), keep(bh, i0 + 3u, j));
}

// keep factors of row i against keys j0 .. j0 + 3 (the lanes)
fn keep_keys(bh: u32, i: u32, j0: u32) -> vec4<f32> {
  return vec4<f32>(keep(bh, i, j0), keep(bh, i, j0 + 1u), keep(bh, i, j0 + 2u), keep(bh, i, j0 + 3u));
}
