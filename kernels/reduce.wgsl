// reduce_sum / reduce_max over a strided sub-box: output element o (row-major over the kept box) reduces
// the R elements of its reduced box, each found by decomposing r over rshape with rstride.
// ROW (flag): one workgroup per output, each thread folds r = lid, lid + WG, ... in increasing order, then
// a fixed-shape tree in workgroup memory: deterministic, no atomics. Without ROW (small R): one thread per
// output folding r = 0 .. R-1 in order. `acc_flag` combines with the value already in `out` (partial
// reductions of a split reduced box, combined in a fixed order by the launcher).
{{ENABLE}}
struct Params { q: array<vec4<u32>, 12> }
// q words: 0 nout, 1 R, 2 krank, 3 rrank, 4 out_base, 5 x_base, 6 acc_flag, 7 -,
//          8..15 kshape, 16..23 kstride (x), 24..31 ostride (out), 32..39 rshape, 40..47 rstride (x)
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<{{OT}}>;
@group(0) @binding(2) var<storage, read_write> x: array<{{XT}}>;

fn P(i: u32) -> u32 { return p.q[i / 4u][i % 4u]; }

fn comb(a: {{CT}}, b: {{CT}}) -> {{CT}} { {{COMB}} }

fn kept_offsets(o: u32) -> vec2<u32> {   // (x offset, out offset) of output o of the box
  var rem = o;
  var xo = P(5u);
  var oo = P(4u);
  for (var d = i32(P(2u)) - 1; d >= 0; d = d - 1) {
    let du = u32(d);
    let s = P(8u + du);
    let c = rem % s;
    rem = rem / s;
    xo = xo + c * P(16u + du);
    oo = oo + c * P(24u + du);
  }
  return vec2<u32>(xo, oo);
}

fn red_offset(r: u32) -> u32 {
  let rr = P(3u);
  if (rr == 1u) { return r * P(40u); }
  var rem = r;
  var xo = 0u;
  for (var d = i32(rr) - 1; d >= 0; d = d - 1) {
    let du = u32(d);
    let s = P(32u + du);
    xo = xo + (rem % s) * P(40u + du);
    rem = rem / s;
  }
  return xo;
}

fn finish(oo: u32, v: {{CT}}) {
  var r = v;
  if (P(6u) != 0u) { r = comb({{CT}}(out[oo]), r); }
  out[oo] = {{OT}}(r);
}

#if ROW
var<workgroup> sh: array<{{CT}}, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let o = wid.x + wid.y * nwg.x;
  if (o >= P(0u)) { return; }
  let offs = kept_offsets(o);
  let n = P(1u);
  var acc: {{CT}} = {{INIT}};
  for (var r = lid.x; r < n; r = r + {{WG}}u) {
    acc = comb(acc, {{CT}}(x[offs.x + red_offset(r)]));
  }
  sh[lid.x] = acc;
  workgroupBarrier();
  for (var s = {{WG}}u / 2u; s > 0u; s = s / 2u) {
    if (lid.x < s) { sh[lid.x] = comb(sh[lid.x], sh[lid.x + s]); }
    workgroupBarrier();
  }
  if (lid.x == 0u) { finish(offs.y, sh[0]); }
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let o = gid.x + gid.y * nwg.x * {{WG}}u;
  if (o >= P(0u)) { return; }
  let offs = kept_offsets(o);
  let n = P(1u);
  var acc: {{CT}} = {{INIT}};
  for (var r = 0u; r < n; r = r + 1u) {
    acc = comb(acc, {{CT}}(x[offs.x + red_offset(r)]));
  }
  finish(offs.y, acc);
}
#endif

//=== comb.sum
// COMB (the combine step) and INIT (its identity) per op and compute type
return a + b;
//=== comb.max_float
// NaN-propagating, like numpy
return select(select(a, b, b > a), b, (bitcast<u32>(b) & 0x7fffffffu) > 0x7f800000u);
//=== comb.max_int
return max(a, b);
//=== init.sum
{{CT}}(0)
//=== init.max_f32
bitcast<f32>(0xff800000u)
//=== init.max_i32
i32(-2147483647 - 1)
//=== init.max_u32
0u
