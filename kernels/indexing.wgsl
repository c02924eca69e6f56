// gather (torch.gather) and scatter_add, one thread per output element, fixed loop order, no atomics.
// Thread i of a chunk handles flat output element g = start + i, decomposed over `shape` (row-major).
{{ENABLE}}
struct Params { q: array<vec4<u32>, 9> }
// q words: 0 n (this chunk), 1 start, 2 rank, 3 axis, 4 axis size (x for gather, base for scatter),
//          5 out_base, 6 a_base, 7 b_base, 8..15 shape (out), 16..23 strides A, 24..31 dims B,
//          32 outputs of the chunk (split scatter_add), 33 piece length (stage 1) or piece count (stage 2)
@group(0) @binding(0) var<uniform> p: Params;
{{BINDINGS}}

fn P(i: u32) -> u32 { return p.q[i / 4u][i % 4u]; }

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i >= P(0u)) { return; }
  let g = P(1u) + i;
  let rank = P(2u);
  let ax = P(3u);
  {{BODY}}
}

//=== gather
// BODY of gather: output element g reads x at g's coordinates with the axis coordinate from idx
// (clamped into the axis)
var rem = g;
var xo = P(7u);
for (var d = i32(rank) - 1; d >= 0; d = d - 1) {
  let du = u32(d);
  let c = rem % P(8u + du);
  rem = rem / P(8u + du);
  if (du != ax) { xo = xo + c * P(16u + du); }
}
let j = u32(clamp(idx[P(6u) + i], 0, i32(P(4u)) - 1));
xo = xo + j * P(16u + ax);
out[P(5u) + i] = x[xo];

//=== scatter_add
// BODY of scatter_add: output element g is base plus every src entry along the axis whose index
// points at g, in increasing index position, rounded to T after every add (C: the compute type)
var rem = g;
var io = P(6u);
var inside = true;
var pos = 0u;
for (var d = i32(rank) - 1; d >= 0; d = d - 1) {
  let du = u32(d);
  let c = rem % P(8u + du);
  rem = rem / P(8u + du);
  if (du == ax) { pos = c; } else {
    if (c >= P(24u + du)) { inside = false; }
    io = io + c * P(16u + du);
  }
}
var acc = base[P(5u) + i];
if (inside) {
  let n_ax = P(24u + ax);
  let st = P(16u + ax);
  for (var t = 0u; t < n_ax; t = t + 1u) {
    let k = io + t * st;
    if (idx[k] == i32(pos)) { acc = {{T}}({{C}}(acc) + {{C}}(src[P(7u) + k - P(6u)])); }
  }
}
out[P(5u) + i] = acc;

//=== scatter_add_part
// BODY of split scatter_add, stage 1 (prod and fast tiers only): thread i takes piece pc = i / m of the
// axis (positions pc*L .. pc*L + L - 1) for output element ii = i % m, sums its matches in increasing
// position in the compute type C, and writes out[pc * m + ii]; stage 2 adds the pieces in piece order.
let m = P(32u);
let L = P(33u);
let pc = i / m;
let ii = i % m;
var rem = P(1u) + ii;
var io = P(6u);
var inside = true;
var pos = 0u;
for (var d = i32(rank) - 1; d >= 0; d = d - 1) {
  let du = u32(d);
  let c = rem % P(8u + du);
  rem = rem / P(8u + du);
  if (du == ax) { pos = c; } else {
    if (c >= P(24u + du)) { inside = false; }
    io = io + c * P(16u + du);
  }
}
var acc = {{C}}(0);
if (inside) {
  let st = P(16u + ax);
  let t1 = min(pc * L + L, P(24u + ax));
  for (var t = pc * L; t < t1; t = t + 1u) {
    let k = io + t * st;
    if (idx[k] == i32(pos)) { acc = acc + {{C}}(src[P(7u) + k - P(6u)]); }
  }
}
out[pc * m + ii] = acc;

//=== scatter_add_sum
// BODY of split scatter_add, stage 2: base plus the S = P(33) piece sums of output element i, in piece
// order, rounded to T after every add
var acc = base[P(5u) + i];
let m = P(32u);
for (var pc = 0u; pc < P(33u); pc = pc + 1u) { acc = {{T}}({{C}}(acc) + src[pc * m + i]); }
out[P(5u) + i] = acc;
