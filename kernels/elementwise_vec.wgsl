// Elementwise over contiguous operands, four elements a chunk: the rank-1 case of elementwise.wgsl /
// fused.wgsl when every operand either steps by 1 (bound as array<vec4<T>>: one 16-byte load or store
// a chunk) or is one broadcast element (bound as array<T>, read at its base). Invocation tid takes
// chunks tid, tid + nthr, .. (EPT of them, coalesced). When all are in range every load of every chunk
// is issued before the first store (the bindings may alias, so a compiler cannot hoist a later load
// above an earlier store itself): EPT * (16 bytes per vector operand) in flight an invocation. Each
// lane of a chunk runs the same scalar instruction list as the scalar kernels, so the bits are theirs.
{{ENABLE}}
struct Params {
  n4: u32, _a: u32, _b: u32, _c: u32,
  base: array<vec4<u32>, 2>,     // per slot (out, x0..): base in chunks (vector operands) or elements
}
@group(0) @binding(0) var<uniform> p: Params;
{{BINDINGS}}

#include ops:helpers

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let nthr = nwg.x * nwg.y * 256u;
  let tid = gid.x + gid.y * nwg.x * 256u;
  let lo = p.base[0];
  let hi = p.base[1];
  let o = array<u32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
  if (tid + {{LAST}}u * nthr < p.n4) {
    {{LOADS}}
    {{STEPS}}
    return;
  }
  for (var k = 0u; k < {{EPT}}u; k = k + 1u) {
    let q = tid + k * nthr;
    if (q >= p.n4) { return; }
    {{LOOP_LOADS}}
    {{LOOP_STEP}}
  }
}

//=== load
// chunk S of vector operand K (binding x{{K}}, slot {{K1}}) at chunk index Q
let v{{K}}_{{S}} = x{{K}}[o[{{K1}}] + {{Q}}];
//=== lane_load
// lane C of that chunk, in the compute type
{{CT}}(v{{K}}_{{S}}[{{C}}])
//=== step
// one chunk: its four lanes (BODY pieces that set r[lane]), then one vector store
{
  var r: vec4<{{T}}>;
  {{LANES}}
  out[o[0] + {{Q}}] = r;
}
//=== lane
{
  {{BODY}}
}
//=== lane_store
// the lane's result, in place of a scalar kernel's store
r[{{C}}] = {{T}}({{EXPR}});
//=== q.step
tid + {{S}}u * nthr
//=== q.loop
q
//=== vtype
// a vector operand's binding element
vec4<{{T}}>
