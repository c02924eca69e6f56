// Simple, deterministic kernels (one thread per output, fixed loop order): the correctness baseline for
// matmul, reductions, row softmax and gather/scatter_add until the tiled families replace them.
{{ENABLE}}
struct Params { a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, d: vec4<u32> }
@group(0) @binding(0) var<uniform> p: Params;
{{BINDINGS}}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  {{BODY}}
}
