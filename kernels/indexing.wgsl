// gather (torch.gather) and scatter_add, one thread per output element, fixed loop order, no atomics.
// Thread i of a chunk handles flat output element g = start + i, decomposed over `shape` (row-major).
{{ENABLE}}
struct Params { q: array<vec4<u32>, 8> }
// q words: 0 n (this chunk), 1 start, 2 rank, 3 axis, 4 axis size (x for gather, base for scatter),
//          5 out_base, 6 a_base, 7 b_base, 8..15 shape (out), 16..23 strides A, 24..31 dims B
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
