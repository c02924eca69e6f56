// NF4 dequantize (QLoRA): out[e] = NF4[code(e)] * absmax[e / block], one thread per output element.
// codes are i8 storage (packed 4 bytes per u32 word); element e's code is the low nibble of byte e/2 for
// even e and the high nibble for odd e. A chunk starts on an even element, so its byte offset is whole.
struct Params { n: u32, out_base: u32, code_base: u32, amax_base: u32, start: u32, block: u32, _p0: u32, _p1: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read_write> codes: array<u32>;
@group(0) @binding(3) var<storage, read_write> amax: array<f32>;

const NF4 = array<f32, 16>({{TABLE}});

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i >= p.n) { return; }
  let b = p.code_base + i / 2u;                        // byte in the codes binding
  let byte = (codes[b / 4u] >> (8u * (b % 4u))) & 0xffu;
  let c = (byte >> (4u * (i % 2u))) & 0xfu;
  let g = p.start + i;                                 // global element: its block
  let s = amax[p.amax_base + g / p.block - p.start / p.block];
  out[p.out_base + i] = NF4[c] * s;
}
