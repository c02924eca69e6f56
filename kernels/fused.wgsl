// A fused elementwise group: out[o0] = the group's instruction list over up to 7 strided inputs.
// Generated per group at compile time (BODY holds one `let` per instruction, each rounded to its
// dtype as a store would round it), so a chain of elementwise ops costs one dispatch and no
// intermediate buffers. Operand indexing is the strided scheme of elementwise.wgsl, with 8 slots.
{{ENABLE}}
struct Params {
  n: u32, rank: u32, value: u32, _pad: u32,
  shape: array<vec4<u32>, 2>,
  base: array<vec4<u32>, 2>,              // base element offsets of out, x0..x6
  st: array<array<vec4<u32>, 2>, 8>,      // strides (elements) of out, x0..x6
}
@group(0) @binding(0) var<uniform> p: Params;
{{BINDINGS}}

#include ops:helpers

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
#if CONTIG
  // rank 1 after collapsing: as in elementwise.wgsl, EPT coalesced elements an invocation
  let nthr = nwg.x * nwg.y * 256u;
  let tid = gid.x + gid.y * nwg.x * 256u;
  let svl = vec4<u32>(p.st[0][0][0], p.st[1][0][0], p.st[2][0][0], p.st[3][0][0]);
  let svh = vec4<u32>(p.st[4][0][0], p.st[5][0][0], p.st[6][0][0], p.st[7][0][0]);
  if (tid + {{LAST}}u * nthr < p.n) {
    {{UNROLLED}}
    return;
  }
  for (var k = 0u; k < {{EPT}}u; k = k + 1u) {
    let i = tid + k * nthr;
    if (i >= p.n) { return; }
    let lo = p.base[0] + i * svl;
    let hi = p.base[1] + i * svh;
    let o = array<u32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
    {{BODY}}
  }
#else
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i >= p.n) { return; }
  var rem = i;
  var lo = p.base[0];
  var hi = p.base[1];
  for (var d = i32(p.rank) - 1; d >= 0; d = d - 1) {
    let du = u32(d);
    let s = p.shape[du / 4u][du % 4u];
    let c = rem % s;
    rem = rem / s;
    let q = du / 4u;
    let r = du % 4u;
    lo = lo + c * vec4<u32>(p.st[0][q][r], p.st[1][q][r], p.st[2][q][r], p.st[3][q][r]);
    hi = hi + c * vec4<u32>(p.st[4][q][r], p.st[5][q][r], p.st[6][q][r], p.st[7][q][r]);
  }
  let o = array<u32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
  {{BODY}}
#endif
}

//=== contig_step
// one unrolled step K of the CONTIG path
{
  let lo = p.base[0] + (tid + {{K}}u * nthr) * svl;
  let hi = p.base[1] + (tid + {{K}}u * nthr) * svh;
  let o = array<u32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
  {{BODY}}
}

//=== let
// This and the sections below are the pieces kernels/fused.py assembles BODY from: one `let` per
// instruction of the group, then the store of the last one. Expressions come from ops.wgsl.
let t{{J}} = {{EXPR}};

//=== temp
// the value of instruction {{J}}
t{{J}}

//=== round_f16
// an f16 intermediate, rounded as a store would round it and computed on in f32
f32(f16({{EXPR}}))

//=== store
out[o[0]] = {{T}}(t{{J}});

//=== literal.float
// a fill constant: its f32 bits (f16 values are rounded to f16 first)
bitcast<f32>({{BITS}}u)
//=== literal.i32
i32({{V}})
//=== literal.u32
{{V}}u
