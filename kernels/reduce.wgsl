// reduce_sum / reduce_max over a strided sub-box: output element o (row-major over the kept box) reduces
// the R elements of its reduced box, each found by decomposing r over rshape with rstride.
// ROW (flag): one workgroup per output, each thread folds r = lid, lid + WG, ... in increasing order, then
// a fixed-shape tree in workgroup memory, or with SG the subgroups' sgcomb values combined in order by
// invocation 0: deterministic, no atomics. SPLIT (with ROW): two stages for few outputs of large boxes,
// workgroup g reducing piece g % pieces of output g / pieces into a scratch row (the launcher then
// reduces that row). SUBROW (SG only): a subgroup per output for short reduced boxes, RPW a workgroup.
// COL: adjacent invocations take adjacent outputs of a contiguous kept run (see the section below).
// Without ROW (small R): one thread per output folding r = 0 .. R-1 in order. `acc_flag` combines with the value already in `out` (partial
// reductions of a split reduced box, combined in a fixed order by the launcher).
{{ENABLE}}
#include common:f32_bits
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

// r = r0, r0 + step, .. < r1 folded in increasing order (four loads in flight)
fn fold(xo: u32, r0: u32, r1: u32, step: u32) -> {{CT}} {
  var acc: {{CT}} = {{INIT}};
  var r = r0;
  for (; r + 3u * step < r1; r = r + 4u * step) {
    let a = {{CT}}(x[xo + red_offset(r)]);
    let b = {{CT}}(x[xo + red_offset(r + step)]);
    let c = {{CT}}(x[xo + red_offset(r + 2u * step)]);
    let d = {{CT}}(x[xo + red_offset(r + 3u * step)]);
    acc = comb(comb(comb(comb(acc, a), b), c), d);
  }
  for (; r < r1; r = r + step) { acc = comb(acc, {{CT}}(x[xo + red_offset(r)])); }
  return acc;
}

#if SG
// the subgroup's combined value (SGCOMB: subgroupAdd / subgroupMax, NaN kept for float max)
fn sgcomb(v: {{CT}}) -> {{CT}} { {{SGCOMB}} }
#endif

#if COL
// columns (the kept run is contiguous: bias / norm-weight gradients, sums over leading axes): a
// workgroup is COLS adjacent outputs x SLICES row slices; invocation (c, s), c = lid % COLS,
// s = lid / COLS, takes output blk * COLS + c, so neighbouring invocations read neighbouring columns
// (coalesced), and folds r = r0 + s, r0 + s + SLICES, .. < r1 in increasing order. Slice 0 then
// combines the SLICES values of its column in order s = 0, 1, ... With pieces = P(7) > 1 (two stages,
// few column blocks of long columns) workgroup g takes block g % nblk and rows piece = g / nblk of
// pieces equal chunks, writing out[piece * nout + o] (a scratch row the launcher reduces next with
// this same layout, pieces in increasing order). No atomics: the order depends only on the shapes.
var<workgroup> sh: array<{{CT}}, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let g = wid.x + wid.y * nwg.x;
  let nout = P(0u);
  let pieces = max(P(7u), 1u);
  let nblk = (nout + {{COLS}}u - 1u) / {{COLS}}u;
  let blk = g % nblk;
  let piece = g / nblk;
  if (piece >= pieces) { return; }
  let c = lid.x % {{COLS}}u;
  let s = lid.x / {{COLS}}u;
  let o = blk * {{COLS}}u + c;
  let live = o < nout;
  let n = P(1u);
  let chunk = (n + pieces - 1u) / pieces;
  let r0 = piece * chunk;
  let r1 = min(n, r0 + chunk);
  var acc: {{CT}} = {{INIT}};
  var offs = vec2<u32>(0u, 0u);
  if (live) {
    offs = kept_offsets(o);
    acc = fold(offs.x, r0 + s, r1, {{SLICES}}u);
  }
  sh[lid.x] = acc;
  workgroupBarrier();
  if (s == 0u && live) {
    var v = sh[c];
    for (var j = 1u; j < {{SLICES}}u; j = j + 1u) { v = comb(v, sh[c + j * {{COLS}}u]); }
    if (pieces > 1u) { out[piece * nout + o] = {{OT}}(v); } else { finish(offs.y, v); }
  }
}
#else
#if SUBROW
// a subgroup per output (short reduced boxes, SG only): subgroup sg of the workgroup takes outputs
// sg, sg + nsg, .. of its RPW; lane l folds r = l, l + sgs, .. in order, then sgcomb
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) sgs: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
  let first = (wid.x + wid.y * nwg.x) * {{RPW}}u;
  let n = P(1u);
  for (var rr = sg; rr < {{RPW}}u; rr = rr + nsg) {
    let o = first + rr;
    if (o >= P(0u)) { break; }
    let offs = kept_offsets(o);
    let acc = fold(offs.x, lane, n, sgs);
    let t = sgcomb(acc);
    if (lane == 0u) { finish(offs.y, t); }
  }
}
#else
#if ROW
var<workgroup> sh: array<{{CT}}, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
#if SG
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_id) sg: u32,
        @builtin(num_subgroups) nsg: u32,
#endif
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let g = wid.x + wid.y * nwg.x;
#if SPLIT
  // two-stage: workgroup g reduces piece g % pieces of output g / pieces into out[g] (a scratch row)
  let pieces = P(7u);
  let o = g / pieces;
  let piece = g % pieces;
#else
  let o = g;
#endif
  if (o >= P(0u)) { return; }
  let offs = kept_offsets(o);
  let n = P(1u);
#if SPLIT
  let chunk = (n + pieces - 1u) / pieces;
  let r0 = piece * chunk;
  let r1 = min(n, r0 + chunk);
#else
  let r0 = 0u;
  let r1 = n;
#endif
  let acc = fold(offs.x, r0 + lid.x, r1, {{WG}}u);
#if SG
  let t = sgcomb(acc);
  if (lane == 0u) { sh[sg] = t; }
  workgroupBarrier();
  if (lid.x == 0u) {
    var v = sh[0];
    for (var j = 1u; j < nsg; j = j + 1u) { v = comb(v, sh[j]); }
    sh[0] = v;
  }
#else
  sh[lid.x] = acc;
  workgroupBarrier();
  for (var s = {{WG}}u / 2u; s > 0u; s = s / 2u) {
    if (lid.x < s) { sh[lid.x] = comb(sh[lid.x], sh[lid.x + s]); }
    workgroupBarrier();
  }
#endif
#if SPLIT
  if (lid.x == 0u) { out[g] = {{OT}}(sh[0]); }
#else
  if (lid.x == 0u) { finish(offs.y, sh[0]); }
#endif
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
#endif
#endif

//=== comb.sum
// COMB (the combine step) and INIT (its identity) per op and compute type
return a + b;
//=== comb.max_float
// NaN-propagating, like numpy
return select(select(a, b, b > a), b, (bitcast<u32>(b) & 0x7fffffffu) > 0x7f800000u);
//=== comb.max_int
return max(a, b);
//=== sgcomb.sum
return subgroupAdd(v);
//=== sgcomb.max_float
// subgroupMax may drop a NaN: any NaN lane makes the result NaN (numpy's max)
let m = subgroupMax(v);
let nan = subgroupAny((bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u);
return select(m, f32_bits(0x7fc00000u), nan);
//=== sgcomb.max_int
return subgroupMax(v);
//=== init.sum
{{CT}}(0)
//=== init.max_f32
f32_bits(0xff800000u)
//=== init.max_i32
i32(-2147483647 - 1)
//=== init.max_u32
0u
