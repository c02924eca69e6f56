// Strided elementwise map over a box of up to 8 dims: out[o] = EXPR(x0[i0], x1[i1], x2[i2]).
// Every operand (output included) has its own strides and base element offset, so the same kernel
// does arithmetic with broadcasting, permute, slice, expand, concat pieces and casts, and works on
// any chunk of a split tensor. Indices are logical element indices: no dependence on the layout.
{{ENABLE}}
struct Params {
  n: u32, rank: u32, value: u32, _pad: u32,
  shape: array<vec4<u32>, 2>,
  base: vec4<u32>,                 // base element offset of out, x0, x1, x2 within their bindings
  st: array<array<vec4<u32>, 2>, 4>,   // strides (elements) of out, x0, x1, x2
}
@group(0) @binding(0) var<uniform> p: Params;
{{BINDINGS}}

#include ops:helpers

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
#if CONTIG
  // a box of rank 1 (after collapsing): element i of operand k is base[k] + i * stride[k]. Invocation
  // tid takes elements tid, tid + nthr, .. (EPT of them, coalesced); when all are in range the steps
  // are unrolled (independent loads in flight), else the guarded loop does the tail.
  let nthr = nwg.x * nwg.y * 256u;
  let tid = gid.x + gid.y * nwg.x * 256u;
  let sv = vec4<u32>(p.st[0][0][0], p.st[1][0][0], p.st[2][0][0], p.st[3][0][0]);
  if (tid + {{LAST}}u * nthr < p.n) {
    {{UNROLLED}}
    return;
  }
  for (var k = 0u; k < {{EPT}}u; k = k + 1u) {
    let i = tid + k * nthr;
    if (i >= p.n) { return; }
    let o = p.base + i * sv;
    {{BODY}}
  }
#else
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i >= p.n) { return; }
  var rem = i;
  var o = p.base;
  for (var d = i32(p.rank) - 1; d >= 0; d = d - 1) {
    let du = u32(d);
    let s = p.shape[du / 4u][du % 4u];
    let c = rem % s;
    rem = rem / s;
    o = o + c * vec4<u32>(p.st[0][du / 4u][du % 4u], p.st[1][du / 4u][du % 4u],
                          p.st[2][du / 4u][du % 4u], p.st[3][du / 4u][du % 4u]);
  }
  {{BODY}}
#endif
}

//=== contig_step
// one unrolled step K of the CONTIG path
{
  let o = p.base + (tid + {{K}}u * nthr) * sv;
  {{BODY}}
}

//=== unary
// This and the sections below are BODY pieces for the launchers in kernels/elementwise.py: A and B
// are ops.wgsl `load` reads, EXPR an ops.wgsl expression, T the output's storage type.
let a = {{A}};
out[o[0]] = {{T}}({{EXPR}});

//=== binary
let a = {{A}};
let b = {{B}};
out[o[0]] = {{T}}({{EXPR}});

//=== where
let c = x0[o[1]];
let a = {{A}};
let b = {{B}};
out[o[0]] = {{T}}({{EXPR}});

//=== store
out[o[0]] = {{EXPR}};

//=== copy
out[o[0]] = x0[o[1]];

//=== iota
out[o[0]] = {{T}}(o[0]);

//=== raw
// input 0 as stored (casts convert it themselves)
x0[o[1]]

//=== fill.float
// the fill value's f32 bits come in p.value
{{T}}(bitcast<f32>(p.value))
//=== fill.i32
bitcast<i32>(p.value)
//=== fill.u32
p.value

//=== vlane.unary
// the lane bodies of kernels/elementwise_vec.wgsl (A, B: its lane loads; C the lane)
let a = {{A}};
r[{{C}}] = {{T}}({{EXPR}});
//=== vlane.binary
let a = {{A}};
let b = {{B}};
r[{{C}}] = {{T}}({{EXPR}});
