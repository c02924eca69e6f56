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
  for (var d = i32(min(p.mrank, 4u)) - 1; d >= 0; d = d - 1) {   // (at most the 4 of mshape)
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

//=== drop_word
// Where attention dropout draws (kernels/attention.wgsl:dropout, the score path's row kernels and epilogues
// in attention_scores.wgsl): the keep factor of pair (query row i, key j) of head bh is 1 / (1 - p) when
// the uniform of stream word offset + (bh * Lq + i) * Lk + j (64-bit; the Philox key and word offset are
// the op's, plus the step's stream position from `dbase` with the BASED flag) is >= p, else 0;
// bit-exact with scellis_jupyter/rng/philox.py, so every kernel (and the reference path) draws one mask.
#include common:philox
#if BASED
@group(0) @binding({{BASE_BINDING}}) var<storage, read_write> dbase: array<u32>;
#endif

// the op's word offset (lo, hi) plus, with BASED, the step's stream position
fn drop_off(off: vec2<u32>) -> vec2<u32> {
#if BASED
  return ph_add64(off, vec2<u32>(dbase[0], dbase[1]));
#else
  return off;
#endif
}

// the stream word (lo, hi) of flat query row fr = bh * Lq + i and key j, past offset `off`
fn drop_word(fr: u32, j: u32, lk: u32, off: vec2<u32>) -> vec2<u32> {
  let m = ph_mulhilo(fr, lk);
  return ph_add64(ph_add64(vec2<u32>(m.y, m.x), vec2<u32>(j, 0u)), off);
}

// keep factors (r where the uniform is >= prob, else 0) of the 4 words of the Philox block holding word w
fn drop_quad(w: vec2<u32>, key: vec2<u32>, prob: f32, r: f32) -> vec4<f32> {
  let c = ph_block(ph_counter(w), key);
  let u = vec4<f32>(c >> vec4<u32>(8u)) * (1.0 / 16777216.0);
  return select(vec4<f32>(0.0), vec4<f32>(r), u >= vec4<f32>(prob));
}

//=== dropout
// Attention dropout in the flash kernels: keep(bh, i, j) is pair (i, j)'s keep factor (drop_word above).
// Expects the includer's p.lq, p.lk, p.dctr (offset lo, hi, key 0, 1) and p.dprob (p, 1 / (1 - p)).
#include attention:drop_word

fn keep(bh: u32, i: u32, j: u32) -> f32 {
  let w = drop_word(bh * p.lq + i, j, p.lk, drop_off(p.dctr.xy));
  return drop_quad(w, p.dctr.zw, p.dprob.x, p.dprob.y)[w.x & 3u];
}

// keep factors of rows i0 .. i0 + 3 (the lanes) against key j
fn keep_rows(bh: u32, i0: u32, j: u32) -> vec4<f32> {
  return vec4<f32>(keep(bh, i0, j), keep(bh, i0 + 1u, j), keep(bh, i0 + 2u, j), keep(bh, i0 + 3u, j));
}

// keep factors of row i against keys j0 .. j0 + 3 (the lanes): 4 consecutive words, so one Philox block
// (two where they straddle a block boundary) instead of four
fn keep_keys(bh: u32, i: u32, j0: u32) -> vec4<f32> {
  let w = drop_word(bh * p.lq + i, j0, p.lk, drop_off(p.dctr.xy));
  let s = w.x & 3u;
  let q0 = drop_quad(w, p.dctr.zw, p.dprob.x, p.dprob.y);
  var q1 = q0;
  if (s != 0u) { q1 = drop_quad(ph_add64(w, vec2<u32>(4u, 0u)), p.dctr.zw, p.dprob.x, p.dprob.y); }
  let l = (vec4<u32>(s) + vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(3u);
  return select(vec4<f32>(q1[l.x], q1[l.y], q1[l.z], q1[l.w]), vec4<f32>(q0[l.x], q0[l.y], q0[l.z], q0[l.w]),
                vec4<u32>(s) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(4u));
}
