// Tiled matmul C[b] (+)= A[b] @ B[b] over one chunk: A [M, K] (row stride lda), B [K, N] (ldb),
// C [M, N] (ldc), each at an element offset inside its binding; batch over workgroup z, decoded
// into up to 3 dims with per-operand strides (0 = broadcast). Tile {{TM}}x{{TN}} per workgroup,
// {{RM}}x{{RN}} outputs per thread held in NAMED vec4<f32> accumulators (runtime-indexed private
// arrays spill), A and B tiles of depth {{BK}} staged in workgroup memory (A transposed, k-major).
// Accumulation is f32 in a fixed order over k; no atomics. With p.acc = 1 the chunk adds onto C
// (splitting over K adds blocks in increasing k order). The unrolled bodies are generated in
// scellis_jupyter/backends/wgpu/kernels/matmul.py.
// K-split (p.kc > 0): workgroup z = batch * splits + s computes the partial product over
// k in [s*kc, min(K, (s+1)*kc)) into C + s * p.sc.w (a f32 partial buffer); matmul_ksplit.wgsl then
// sums the partials in increasing s, a fixed order (deterministic, but not the unsplit order).
{{ENABLE}}
struct Params {
  M: u32, N: u32, K: u32, acc: u32,
  lda: u32, ldb: u32, ldc: u32, kc: u32,   // kc: k per split, 0 = no split
  off: vec4<u32>,      // element offsets of A, B, C inside their bindings
  bsz: vec4<u32>,      // batch dims of this chunk (d0, d1, d2, count)
  sa: vec4<u32>,       // batch strides (elements) of A, B, C over (d0, d1, d2)
  sb: vec4<u32>,
  sc: vec4<u32>,       // .w: element stride between K-split partials
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
  var nsplit = 1u;
  var kc = p.K;
  if (p.kc != 0u) { kc = p.kc; nsplit = (p.K + kc - 1u) / kc; }
  let split = wid.z % nsplit;
  let kbeg = split * kc;
  let kend = min(p.K, kbeg + kc);
  var z = wid.z / nsplit;
  let i2 = z % p.bsz.z;
  z = z / p.bsz.z;
  let i1 = z % p.bsz.y;
  let i0 = z / p.bsz.y;
  let abase = p.off.x + i0 * p.sa.x + i1 * p.sa.y + i2 * p.sa.z;
  let bbase = p.off.y + i0 * p.sb.x + i1 * p.sb.y + i2 * p.sb.z;
  let cbase = p.off.z + i0 * p.sc.x + i1 * p.sc.y + i2 * p.sc.z + split * p.sc.w;
  {{DECL}}
  for (var k0 = kbeg; k0 < kend; k0 = k0 + {{BK}}u) {
    {{LOAD}}
    workgroupBarrier();
    {{COMPUTE}}
    workgroupBarrier();
  }
  {{STORE}}
}

//=== acc
// accumulator of output row R (within the thread's RM rows), column group H (4 columns)
var c{{R}}_{{H}} = vec4<f32>(0.0);

//=== load_a
// A load slot: element E0 + t of the tile, 4 rows x 1 k of A into As (k-major); zero outside A
{ let e = t + {{E0}}u; let kk = e % {{BK}}u; let r4 = e / {{BK}}u;
  let gk = k0 + kk; let gr = m0 + r4 * 4u;
  var v = vec4<f32>(0.0);
  if (gk < kend) {
    if (gr + 0u < p.M) { v.x = f32(A[abase + (gr + 0u) * p.lda + gk]); }
    if (gr + 1u < p.M) { v.y = f32(A[abase + (gr + 1u) * p.lda + gk]); }
    if (gr + 2u < p.M) { v.z = f32(A[abase + (gr + 2u) * p.lda + gk]); }
    if (gr + 3u < p.M) { v.w = f32(A[abase + (gr + 3u) * p.lda + gk]); }
  }
  As[kk * {{TM4}}u + r4] = v; }

//=== load_b
// B load slot: 1 k x 4 columns of B into Bs; zero outside B
{ let e = t + {{E0}}u; let kk = e / {{TN4}}u; let c4 = e % {{TN4}}u;
  let gk = k0 + kk; let gc = n0 + c4 * 4u;
  var v = vec4<f32>(0.0);
  if (gk < kend) {
    let row = bbase + gk * p.ldb + gc;
    if (gc + 0u < p.N) { v.x = f32(B[row + 0u]); }
    if (gc + 1u < p.N) { v.y = f32(B[row + 1u]); }
    if (gc + 2u < p.N) { v.z = f32(B[row + 2u]); }
    if (gc + 3u < p.N) { v.w = f32(B[row + 3u]); }
  }
  Bs[kk * {{TN4}}u + c4] = v; }

//=== k_step
// one k of the staged tiles: the thread's A and B vec4s, then every accumulator's update
{
  {{A_REGS}}
  {{B_REGS}}
  {{FMAS}}
}

//=== a_reg
let a{{G}} = As[{{I}}u + ty];

//=== b_reg
let b{{H}} = Bs[{{I}}u + tx];

//=== fma
// component C of a{{G}} times b{{H}} into row R's accumulator of column group H
c{{R}}_{{H}} += a{{G}}.{{C}} * b{{H}};

//=== store_row
{ let row = m0 + {{ROW}}u + ty * 4u;
  if (row < p.M) {
    {{COLS}}
  }
}

//=== store_cols
// 4 columns of row `row` from accumulator c{{R}}_{{H}}, added onto C when p.acc is set
{ let col = n0 + {{COL}}u + tx * 4u; let base = cbase + row * p.ldc + col;
  if (col + 0u < p.N) { var v = c{{R}}_{{H}}.x; if (p.acc != 0u) { v += f32(C[base + 0u]); } C[base + 0u] = {{T}}(v); }
  if (col + 1u < p.N) { var v = c{{R}}_{{H}}.y; if (p.acc != 0u) { v += f32(C[base + 1u]); } C[base + 1u] = {{T}}(v); }
  if (col + 2u < p.N) { var v = c{{R}}_{{H}}.z; if (p.acc != 0u) { v += f32(C[base + 2u]); } C[base + 2u] = {{T}}(v); }
  if (col + 3u < p.N) { var v = c{{R}}_{{H}}.w; if (p.acc != 0u) { v += f32(C[base + 3u]); } C[base + 3u] = {{T}}(v); }
}
