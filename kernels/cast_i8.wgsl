// Casts to and from i8, stored packed 4 per u32 word (kernels/quant.py). The header is shared; a
// launch takes it with one of the kernel sections `to_i8` / `from_i8`, whose CONVERT / WIDEN step is
// one of the `convert.*` / `widen.*` sections below, picked by the other dtype.
{{ENABLE}}
struct Params { n: u32, in_base: u32, out_base: u32, _p: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<{{OT}}>;
@group(0) @binding(2) var<storage, read_write> x: array<{{XT}}>;

//=== to_i8
// one thread per output word packs 4 lanes (lanes past n are written 0): no two threads share a word
fn to_i8(e: u32) -> u32 {
  let a = x[p.in_base + e];
  {{CONVERT}}
}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = gid.x + gid.y * nwg.x * 64u;     // output word (relative to this chunk)
  if (j * 4u >= p.n) { return; }
  var w = 0u;
  for (var l = 0u; l < 4u; l = l + 1u) {
    let e = j * 4u + l;
    if (e < p.n) { w = w | ((to_i8(e) & 0xffu) << (8u * l)); }
  }
  out[p.out_base / 4u + j] = w;
}

//=== from_i8
// one thread per output element sign-extends its byte
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i >= p.n) { return; }
  let b = p.in_base + i;                   // byte index in the binding
  let word = x[b / 4u];
  let v = bitcast<i32>(word << (24u - 8u * (b % 4u))) >> 24u;
  out[p.out_base + i] = {{WIDEN}};
}

//=== convert.f32
// CONVERT: element e of x (`a`) as an i8 in the low byte of a u32. Floats truncate toward zero and
// saturate to [-128, 127]; NaN (tested on the bits: drivers may fold a != a away) gives 0.
if ((bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u) { return 0u; }
return bitcast<u32>(i32(clamp(trunc(a), -128.0, 127.0)));
//=== convert.f16
let f = f32(a);
if ((bitcast<u32>(f) & 0x7fffffffu) > 0x7f800000u) { return 0u; }
return bitcast<u32>(i32(clamp(trunc(f), -128.0, 127.0)));
//=== convert.i32
// integers wrap modulo 256 (numpy astype)
return bitcast<u32>(a);
//=== convert.u32
return a;
//=== convert.bool
return select(0u, 1u, a != 0u);
//=== convert.i8
// i8 -> i8: the byte itself (x is the packed source)
return (x[(p.in_base + e) / 4u] >> (8u * ((p.in_base + e) % 4u)));

//=== widen.f32
// WIDEN: the sign-extended byte `v` (i32) in the output's type
f32(v)
//=== widen.f16
f16(f32(v))
//=== widen.i32
v
//=== widen.u32
bitcast<u32>(v)
//=== widen.bool
select(0u, 1u, v != 0)
