// Philox-4x32-10, bit-exact with scellis_jupyter/rng/philox.py: word w of a stream comes from counter
// block w / 4 = (lo32, hi32, 0, 0), lane w % 4. One thread per counter block writes up to 4 words,
// bounds-checked at both ends (the stream offset need not be a multiple of 4). Block numbers are
// 64-bit: (lo, hi) with carry. With the BASED flag, a (lo, hi) word offset read from `base` (the
// stream's position at the start of this step, a step input) is added first, so one compiled step
// draws fresh words every step.
struct Params { n: u32, blk_lo: u32, blk_hi: u32, k0: u32, k1: u32, skip: u32, out_base: u32, uniform: u32 }
// n words to write; first block (blk_lo, blk_hi); skip = offset % 4 (words of the first block not written)
@group(0) @binding(0) var<uniform> p: Params;
#if BASED
@group(0) @binding(1) var<storage, read> base: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
#else
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
#endif

#include common:philox

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = gid.x + gid.y * nwg.x * 64u;
  var blk_lo = p.blk_lo;
  var blk_hi = p.blk_hi;
  var skip = p.skip;
#if BASED
  {   // word offset = 4 * blk + skip, plus the base (64-bit, with carry)
    let w_lo = (blk_lo << 2u) | skip;
    let w_hi = (blk_hi << 2u) | (blk_lo >> 30u);
    let s_lo = w_lo + base[0];
    let s_hi = w_hi + base[1] + select(0u, 1u, s_lo < w_lo);
    blk_lo = (s_lo >> 2u) | (s_hi << 30u);
    blk_hi = s_hi >> 2u;
    skip = s_lo & 3u;
  }
#endif
  let nblocks = (skip + p.n + 3u) / 4u;
  if (t >= nblocks) { return; }
  let lo = blk_lo + t;
  let hi = blk_hi + select(0u, 1u, lo < t);
  let c = ph_block(vec2<u32>(lo, hi), vec2<u32>(p.k0, p.k1));
  for (var lane = 0u; lane < 4u; lane = lane + 1u) {
    let w = t * 4u + lane;             // word index relative to the first block
    if (w < skip || w - skip >= p.n) { continue; }
    let word = c[lane];
    var val = word;
    if (p.uniform == 1u) { val = bitcast<u32>(ph_unit(word)); }
    out[p.out_base + w - skip] = val;
  }
}
