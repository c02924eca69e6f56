// One fused elementwise group run over many tensors in one dispatch (a multi-tensor kernel): the
// optimizer's update of every parameter, say, which is the same instruction list per parameter.
// Member k covers elements [start_k, start_k + n_k) of one flat index space; each of its operands
// (out, x0..x6) is either contiguous from a base element offset in that slot's binding, or one
// element read by every index (a scalar: lr, step, a finite flag). Every member of a slot lies in
// the one buffer window bound to that slot. BODY is the same instruction list fused.wgsl runs, so
// each element gets exactly the instructions (and roundings) it would get one tensor at a time.
{{ENABLE}}
struct Member {
  lo: vec4<u32>,        // base element offsets of out, x0, x1, x2
  hi: vec4<u32>,        // base element offsets of x3..x6
  info: vec4<u32>,      // (start, n, scalar mask: bit s set when slot s is read at its base only, 0)
}
struct Params {
  count: u32, total: u32, _a: u32, _b: u32,
  m: array<Member, {{MAXM}}>,
}
@group(0) @binding(0) var<uniform> p: Params;
{{BINDINGS}}

#include ops:helpers

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i >= p.total) { return; }
  // the member holding flat index i: the last whose start is <= i (starts ascend)
  var a = 0u;
  var b = p.count;
  while (b - a > 1u) {
    let mid = (a + b) / 2u;
    if (p.m[mid].info.x <= i) { a = mid; } else { b = mid; }
  }
  let mem = p.m[a];
  let j = i - mem.info.x;
  let mask = mem.info.z;
  var step_lo = vec4<u32>(j, j, j, j);
  var step_hi = vec4<u32>(j, j, j, j);
  for (var s = 0u; s < 4u; s = s + 1u) {
    if ((mask & (1u << s)) != 0u) { step_lo[s] = 0u; }
    if ((mask & (1u << (s + 4u))) != 0u) { step_hi[s] = 0u; }
  }
  let lo = mem.lo + step_lo;
  let hi = mem.hi + step_hi;
  let o = array<u32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
  {{BODY}}
}
