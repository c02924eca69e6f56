// Copy (permute, expand, slice, concat pieces) of a box whose innermost dim is contiguous in the output
// and the input and a whole number of chunks of four: one 16-byte load and store a chunk. The box's
// shape and strides are baked in as constants (DECOMP, from kernels/elementwise.py), so the index
// decomposition divides by constants, once a chunk, not by uniforms once an element as the strided
// kernel does (a [64, 6, 256, 64] -> [64, 256, 6, 64] permute ran at 640 GB/s there on the H200).
// A copy moves bits: the result is the strided kernel's exactly.
{{ENABLE}}
struct Params { n4: u32, ob: u32, xb: u32, _p: u32 }   // chunks in the box; bases in chunks
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<{{T}}>>;
@group(0) @binding(2) var<storage, read_write> x: array<vec4<{{T}}>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i >= p.n4) { return; }
  // chunk c of row `rem` of the innermost dim ({{Q}} chunks a row)
  var rem = i / {{Q}}u;
  let c = i % {{Q}}u;
  var oo = p.ob + c;
  var xo = p.xb + c;
  {{DECOMP}}
  out[oo] = x[xo];
}

//=== dim
// outer dim of size S (innermost first): its coordinate, added with the output's and the input's
// strides (in chunks)
{ let d = rem % {{S}}u; rem = rem / {{S}}u; oo = oo + d * {{OS}}u; xo = xo + d * {{XS}}u; }
