// Tiled matmul C[b] (+)= A[b] @ B[b] over one chunk: A [M, K] (row stride lda), B [K, N] (ldb),
// C [M, N] (ldc), each at an element offset inside its binding; batch over workgroup z, decoded
// into up to 3 dims with per-operand strides (0 = broadcast). Tile {{TM}}x{{TN}} per workgroup,
// {{RM}}x{{RN}} outputs per thread held in NAMED vec4<f32> accumulators (runtime-indexed private
// arrays spill), A and B tiles of depth {{BK}} staged in workgroup memory (A transposed, k-major).
// Accumulation is f32 in a fixed order over k; no atomics. With p.acc = 1 the chunk adds onto C
// (splitting over K adds blocks in increasing k order). The unrolled bodies are generated in
// scellis_jupyter/backends/wgpu/kernels/matmul.py.
{{ENABLE}}
struct Params {
  M: u32, N: u32, K: u32, acc: u32,
  lda: u32, ldb: u32, ldc: u32, _pad: u32,
  off: vec4<u32>,      // element offsets of A, B, C inside their bindings
  bsz: vec4<u32>,      // batch dims of this chunk (d0, d1, d2, count)
  sa: vec4<u32>,       // batch strides (elements) of A, B, C over (d0, d1, d2)
  sb: vec4<u32>,
  sc: vec4<u32>,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> A: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> B: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> C: array<{{T}}>;

var<workgroup> As: array<vec4<f32>, {{AS_LEN}}>;   // [BK][TM/4]
var<workgroup> Bs: array<vec4<f32>, {{BS_LEN}}>;   // [BK][TN/4]

@compute @workgroup_size({{THREADS}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let tx = t % {{TXN}}u;
  let ty = t / {{TXN}}u;
  let n0 = wid.x * {{TN}}u;
  let m0 = wid.y * {{TM}}u;
  var z = wid.z;
  let i2 = z % p.bsz.z;
  z = z / p.bsz.z;
  let i1 = z % p.bsz.y;
  let i0 = z / p.bsz.y;
  let abase = p.off.x + i0 * p.sa.x + i1 * p.sa.y + i2 * p.sa.z;
  let bbase = p.off.y + i0 * p.sb.x + i1 * p.sb.y + i2 * p.sb.z;
  let cbase = p.off.z + i0 * p.sc.x + i1 * p.sc.y + i2 * p.sc.z;
{{DECL}}
  for (var k0 = 0u; k0 < p.K; k0 = k0 + {{BK}}u) {
{{LOAD}}
    workgroupBarrier();
{{COMPUTE}}
    workgroupBarrier();
  }
{{STORE}}
}
