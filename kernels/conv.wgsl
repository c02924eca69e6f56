// unfold (im2col, torch.nn.functional.unfold layout [N, C*kh*kw, L]) and fold (col2im): one thread per
// output element; fold sums the patches covering its pixel in a fixed (ki, kj) order (no atomics).
// Thread i of a chunk handles flat output element g = start + i.
{{ENABLE}}
struct Params { q: array<vec4<u32>, 5> }
// q words: 0 n, 1 c, 2 h, 3 w, 4 kh, 5 kw, 6 sh, 7 sw, 8 ph, 9 pw, 10 dh, 11 dw, 12 oh, 13 ow,
//          14 pad value bits (f32), 15 chunk size, 16 chunk start, 17 out_base, 18 x_base
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<{{OT}}>;
@group(0) @binding(2) var<storage, read_write> x0: array<{{XT}}>;

fn P(i: u32) -> u32 { return p.q[i / 4u][i % 4u]; }

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let li = gid.x + gid.y * nwg.x * 64u;
  if (li >= P(15u)) { return; }
  let i = P(16u) + li;
  let c_ = P(1u); let h_ = P(2u); let w_ = P(3u);
  let kh = P(4u); let kw = P(5u); let sh = P(6u); let sw = P(7u);
  let ph = P(8u); let pw = P(9u); let dh = P(10u); let dw = P(11u);
  let oh = P(12u); let ow = P(13u);
  let ob = P(17u); let xb = P(18u);
  {{BODY}}
}

//=== unfold
// BODY of unfold: patch element i of column (c, ki, kj) and position (oi, oj); padding reads the pad
// value's f32 bits from the params
let oj = i % ow; let oi = (i / ow) % oh; let kj = (i / (ow * oh)) % kw; let ki = (i / (ow * oh * kw)) % kh;
let c = (i / (ow * oh * kw * kh)) % c_; let n = i / (ow * oh * kw * kh * c_);
let y = i32(oi * sh + ki * dh) - i32(ph); let z = i32(oj * sw + kj * dw) - i32(pw);
if (y < 0 || z < 0 || y >= i32(h_) || z >= i32(w_)) { out[ob + li] = {{OT}}(bitcast<f32>(P(14u))); return; }
out[ob + li] = x0[xb + ((n * c_ + c) * h_ + u32(y)) * w_ + u32(z)];

//=== fold
// BODY of fold: pixel i sums the patch entries that cover it, in (ki, kj) order, in {{CT}}
let z = i % w_; let y = (i / w_) % h_; let c = (i / (w_ * h_)) % c_; let n = i / (w_ * h_ * c_);
var acc = {{CT}}(0);
for (var ki = 0u; ki < kh; ki = ki + 1u) {
  let ty = i32(y + ph) - i32(ki * dh);
  if (ty < 0 || ty % i32(sh) != 0 || u32(ty) / sh >= oh) { continue; }
  for (var kj = 0u; kj < kw; kj = kj + 1u) {
    let tz = i32(z + pw) - i32(kj * dw);
    if (tz < 0 || tz % i32(sw) != 0 || u32(tz) / sw >= ow) { continue; }
    let row = (c * kh + ki) * kw + kj;
    acc = acc + {{CT}}(x0[xb + (n * c_ * kh * kw + row) * oh * ow + (u32(ty) / sh) * ow + u32(tz) / sw]);
  }
}
out[ob + li] = {{OT}}(acc);
