// Copy n 32-bit words from x (word offset xo in its binding) to out (word offset oo): a value moved into a buffer
// of its own before a dispatch that would bind it twice (runtime.py `_unaliased`). WebGPU forbids a writable
// storage binding that overlaps another binding of the same dispatch (Dawn and browsers check it; wgpu-native
// does not), and the kernels here bind every operand read_write: an in-place update (an optimizer's new weights
// written over the old ones) or x * x would bind one range twice. Bits are moved, not values.
struct Params { n: u32, oo: u32, xo: u32, _p: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<storage, read_write> x: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i >= p.n) { return; }
  out[p.oo + i] = x[p.xo + i];
}
