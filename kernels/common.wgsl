// Pieces every kernel family shares, picked by name from Python (templates.snippet) to fill a kernel's
// placeholders: the f16 directive for ENABLE, one storage binding per operand for BINDINGS.
// Not a kernel by itself.

//=== enable_f16
enable f16;

//=== f32_bits
// An f32 from its bits, as a function: Tint (Chrome's compiler) evaluates `bitcast<f32>(0x7f800000u)` written
// inline as a constant and refuses an infinity or a NaN there ("value inf cannot be represented"); a call's
// argument is a runtime value to every compiler, so f32_bits(0xff800000u) is -inf on naga and Tint alike.
fn f32_bits(b: u32) -> f32 { return bitcast<f32>(b); }

//=== binding
@group(0) @binding({{I}}) var<storage, read_write> {{NAME}}: array<{{T}}>;

//=== philox
// Philox-4x32-10 (Salmon et al. 2011), bit-exact with scellis_jupyter/rng/philox.py: 64-bit word w of a
// stream is lane w % 4 of the block at counter (w / 4 as lo, hi, 0, 0) under the stream's key; a word's
// uniform is its top 24 bits / 2^24. Included by every kernel that draws (philox.wgsl, the matmul's
// dropout epilogue, attention dropout); ph_ names keep clear of the includer's. INT64 (the device has
// `shader-int64`): each round's 32 x 32 -> 64-bit products are one 64-bit multiply, else four 16-bit ones.
#if INT64
fn ph_mulhilo(a: u32, b: u32) -> vec2<u32> {   // (hi, lo) of the 64-bit product
  let m = u64(a) * u64(b);
  return vec2<u32>(u32(m >> 32u), u32(m));
}
#else
fn ph_mulhilo(a: u32, b: u32) -> vec2<u32> {   // (hi, lo) of the 64-bit product
  let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
  let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
  return vec2<u32>(hi, a * b);                 // the low word: u32 products wrap
}
#endif

fn ph_add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {    // (lo, hi) words
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

fn ph_counter(w: vec2<u32>) -> vec2<u32> {   // the block (lo, hi) holding 64-bit word w (lo, hi)
  return vec2<u32>((w.x >> 2u) | (w.y << 30u), w.y >> 2u);
}

fn ph_block(ctr: vec2<u32>, key: vec2<u32>) -> vec4<u32> {   // the 4 words of block ctr (lo, hi)
  var c = vec4<u32>(ctr.x, ctr.y, 0u, 0u);
  var k = key;
  for (var r = 0u; r < 10u; r = r + 1u) {
    if (r > 0u) { k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u); }
    let m0 = ph_mulhilo(0xD2511F53u, c.x);
    let m1 = ph_mulhilo(0xCD9E8D57u, c.z);
    c = vec4<u32>(m1.x ^ c.y ^ k.x, m1.y, m0.x ^ c.w ^ k.y, m0.y);
  }
  return c;
}

fn ph_unit(x: u32) -> f32 { return f32(x >> 8u) * (1.0 / 16777216.0); }   // a word's uniform in [0, 1)
