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
