// Matmul on the GPU's matrix units (tensor cores, simdgroup matrices, XMX) through Dawn's subgroup matrices
// (`chromium-experimental-subgroup-matrix`): C[b] (+)= A[b] @ B[b] over one chunk, with the Params, bindings,
// batch decoding, K-split, causal bands and epilogues of kernels/matmul.wgsl (launched by the same launcher,
// kernels/matmul.py; the source is assembled in kernels/matmul_sgm.py).
// A {{TM}}x{{TN}} tile per workgroup of {{NSG}} subgroups ({{WM}} x {{WN}}), each owning {{FM}} x {{FN}} result
// fragments of {{M8}}x{{N8}} (the adapter's configuration; f32 accumulation), K staged {{BK}} deep in workgroup
// memory in the operands' stored orientation (a transposed operand loads column-major), the next tile's global
// loads in flight while the current one is multiplied. Out-of-range rows, columns and k are staged as zeros, so
// any M, N, K works. The store goes through workgroup memory one fragment at a time (Cs), where every
// invocation writes its share of C with the bounds, the `acc` flag and the epilogue of the plain kernel.
// WHOLE tiles, for chunks that fill whole tiles with 16-byte aligned rows (matmul_sgm.whole_fits), drop every
// bound: vec4 loads straight into two staging buffers that alternate, one barrier a step.
// EMU: the same kernel with the subgroup-matrix types and builtins replaced by plain WGSL of the same semantics
// (sgm_* below: a fragment is a private array every invocation of the emulated subgroup holds whole, loads and
// stores read and write workgroup memory with the same offsets, strides and orientation, and lane 0 writes),
// so the tiling, indexing and edge handling run, and are tested, where no adapter has matrix units.
{{ENABLE}}
#include matmul:params

var<workgroup> As: array<{{T}}, {{AS_LEN}}>;   // A's tile(s) as stored: [TM][ASTR] (k along rows), transposed [BK][ASTR]
var<workgroup> Bs: array<{{T}}, {{BS_LEN}}>;   // B's tile(s) as stored: [BK][BSTR], transposed [TN][BSTR]
var<workgroup> Cs: array<f32, {{CS_LEN}}>;     // a strip of result fragments per subgroup, [M8][SW] each
{{EPILOGUE}}
{{EMULATION}}

@compute @workgroup_size({{THREADS}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>{{SGID_PARAM}}) {
  {{SGID}}
  let n0 = wid.x * {{TN}}u;
  let m0 = wid.y * {{TM}}u;
#include matmul:chunk
  let fm0 = (sg / {{WN}}u) * {{SM}}u;     // this subgroup's first row and column within the tile
  let fn0 = (sg % {{WN}}u) * {{SN}}u;
  {{DECL}}
  var k0 = kbeg;
#if WHOLE
  // WHOLE: two staging buffers, one barrier a step, loads with no bounds (the launcher picks it only where every
  // workgroup's rows, columns and k steps lie inside the operands, and A and B are bound as vec4s)
  if (k0 < kend) {       // (a band or a K-split may leave a tile no k)
  {{FETCH}}
  {{PUT0}}
  workgroupBarrier();
  loop {
    {{STEP1}}
    if (!more1) { break; }
    {{STEP2}}
    if (!more2) { break; }
  }
  }
#else
  {{FETCH}}
  while (k0 < kend) {
    {{PUT0}}
    workgroupBarrier();
    k0 = k0 + {{BK}}u;
    {{FETCH}}
    {{COMPUTE0}}
    workgroupBarrier();
  }
#endif
  {{STORE}}
}

//=== acc
var acc{{I}}_{{J}} = {{RESULT}}();

//=== stage
// register of load slot J: 4 consecutive elements along the stored operand's contiguous axis
var r{{J}} = vec4<{{T}}>();

//=== fetch_a
// A slot: 4 consecutive k of one row (row-major A), zeros outside A or past kend
{ let e = (t + {{E0}}u) * 4u; let r = e / {{BK}}u; let kk = e % {{BK}}u;
  let gr = m0 + r; let gk = k0 + kk;
  var v = vec4<{{T}}>();
  if (gr < p.M && gk < kend) {
#if VA
    v = select(vec4<{{T}}>(), A[(abase + gr * p.lda + gk) / 4u], vec4<u32>(gk) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(kend));
#else
    let i = abase + gr * p.lda + gk;
    v.x = A[i];
    if (gk + 1u < kend) { v.y = A[i + 1u]; }
    if (gk + 2u < kend) { v.z = A[i + 2u]; }
    if (gk + 3u < kend) { v.w = A[i + 3u]; }
#endif
  }
  r{{J}} = v; }

//=== fetch_a_t
// transposed A slot (stored [K, M]): 4 consecutive m of one k row
{ let e = (t + {{E0}}u) * 4u; let kk = e / {{TM}}u; let r = e % {{TM}}u;
  let gr = m0 + r; let gk = k0 + kk;
  var v = vec4<{{T}}>();
  if (gk < kend && gr < p.M) {
#if VA
    v = A[(abase + gk * p.lda + gr) / 4u];
#else
    let i = abase + gk * p.lda + gr;
    v.x = A[i];
    if (gr + 1u < p.M) { v.y = A[i + 1u]; }
    if (gr + 2u < p.M) { v.z = A[i + 2u]; }
    if (gr + 3u < p.M) { v.w = A[i + 3u]; }
#endif
  }
  r{{J}} = v; }

//=== fetch_b
// B slot: 4 consecutive n of one k row
{ let e = (t + {{E0}}u) * 4u; let kk = e / {{TN}}u; let c = e % {{TN}}u;
  let gc = n0 + c; let gk = k0 + kk;
  var v = vec4<{{T}}>();
  if (gk < kend && gc < p.N) {
#if VB
    v = B[(bbase + gk * p.ldb + gc) / 4u];
#else
    let i = bbase + gk * p.ldb + gc;
    v.x = B[i];
    if (gc + 1u < p.N) { v.y = B[i + 1u]; }
    if (gc + 2u < p.N) { v.z = B[i + 2u]; }
    if (gc + 3u < p.N) { v.w = B[i + 3u]; }
#endif
  }
  r{{J}} = v; }

//=== fetch_b_t
// transposed B slot (stored [N, K]): 4 consecutive k of one n row
{ let e = (t + {{E0}}u) * 4u; let c = e / {{BK}}u; let kk = e % {{BK}}u;
  let gc = n0 + c; let gk = k0 + kk;
  var v = vec4<{{T}}>();
  if (gc < p.N && gk < kend) {
    let i = bbase + gc * p.ldb + gk;
    v.x = B[i];
    if (gk + 1u < kend) { v.y = B[i + 1u]; }
    if (gk + 2u < kend) { v.z = B[i + 2u]; }
    if (gk + 3u < kend) { v.w = B[i + 3u]; }
  }
  r{{J}} = v; }

//=== whole_step
// step I of the WHOLE loop, unrolled by two so each buffer's offsets stay constants: the next tile's loads in
// flight while this one is multiplied from one buffer, then staged into the other
let more{{I}} = k0 + {{BK}}u < kend;
k0 = k0 + {{BK}}u;
if (more{{I}}) {
  {{FETCH}}
}
{{COMPUTE}}
if (more{{I}}) {
  {{PUT}}
}
workgroupBarrier();

//=== wfetch_a
// WHOLE: A slot (row-major) with no bounds: 4 consecutive k of one row, one vec4 load
{ let e = (t + {{E0}}u) * 4u; r{{J}} = A[(abase + (m0 + e / {{BK}}u) * p.lda + k0 + e % {{BK}}u) / 4u]; }

//=== wfetch_a_t
// WHOLE: transposed A slot (stored [K, M]): 4 consecutive m of one k row
{ let e = (t + {{E0}}u) * 4u; r{{J}} = A[(abase + (k0 + e / {{TM}}u) * p.lda + m0 + e % {{TM}}u) / 4u]; }

//=== wfetch_b
// WHOLE: B slot: 4 consecutive n of one k row
{ let e = (t + {{E0}}u) * 4u; r{{J}} = B[(bbase + (k0 + e / {{TN}}u) * p.ldb + n0 + e % {{TN}}u) / 4u]; }

//=== wfetch_b_t
// WHOLE: transposed B slot (stored [N, K]): 4 consecutive k of one n row
{ let e = (t + {{E0}}u) * 4u; r{{J}} = B[(bbase + (n0 + e / {{BK}}u) * p.ldb + k0 + e % {{BK}}u) / 4u]; }

//=== put
// slot J into tile S (As or Bs; buffer at BASE) at row e / W, column e % W of its stored orientation (row stride STR)
{ let e = (t + {{E0}}u) * 4u; let o = {{BASE}}u + (e / {{W}}u) * {{STR}}u + e % {{W}}u;
  {{S}}[o] = r{{J}}.x; {{S}}[o + 1u] = r{{J}}.y; {{S}}[o + 2u] = r{{J}}.z; {{S}}[o + 3u] = r{{J}}.w; }

//=== load_a
let a{{I}} = {{LOAD_A}};

//=== load_b
let b{{J}} = {{LOAD_B}};

//=== mma
acc{{I}}_{{J}} = {{MMA}};

//=== store_row
// fragments (I, J0..) of every subgroup through Cs: subgroup s stores them side by side as a row-major M8 x SW
// strip at Cs[s * M8 * SW], then every invocation writes its share of the NSG strips (consecutive invocations
// along a strip's row: contiguous columns of C)
{{STORE_CS}}
workgroupBarrier();
for (var e = t; e < {{CS_LEN}}u; e = e + {{THREADS}}u) {
  let s = e / {{MSN}}u;
  let row = m0 + (s / {{WN}}u) * {{SM}}u + {{I}}u * {{M8}}u + (e % {{MSN}}u) / {{SW}}u;
  let col = n0 + (s % {{WN}}u) * {{SN}}u + {{COL0}}u + e % {{SW}}u;
  if (row < p.M && col < p.N) {
    {{STORE_ONE}}
  }
}
workgroupBarrier();

//=== store_one
let base = cbase + row * p.ldc + col;
var v = Cs[e];
if (p.acc != 0u) { v += f32(C[base]); }
C[base] = {{CBT}}(v);

//=== store_one_epi
C[cbase + row * p.ldc + col] = epilogue(Cs[e], i0, i1, i2, row, col);

//=== real_load_a
subgroupMatrixLoad<subgroup_matrix_left<{{T}}, {{K8}}, {{M8}}>>(&As, {{OFF}}, {{COL}}, {{STR}}u)

//=== real_load_b
subgroupMatrixLoad<subgroup_matrix_right<{{T}}, {{N8}}, {{K8}}>>(&Bs, {{OFF}}, {{COL}}, {{STR}}u)

//=== real_mma
subgroupMatrixMultiplyAccumulate(a{{I}}, b{{J}}, acc{{I}}_{{J}})

//=== real_result
subgroup_matrix_result<f32, {{N8}}, {{M8}}>

//=== real_store_cs
subgroupMatrixStore(&Cs, sg * {{MSN}}u + {{JJ}}u * {{N8}}u, acc{{I}}_{{J}}, false, {{SW}}u);

//=== real_sgid_param
, @builtin(subgroup_id) sg: u32

//=== emu_sgid
// the emulated subgroup of invocation t
let sg = t / {{SGS}}u;

//=== emu_load_a
sgm_load_a({{OFF}}, {{COL}}, {{STR}}u)

//=== emu_load_b
sgm_load_b({{OFF}}, {{COL}}, {{STR}}u)

//=== emu_mma
sgm_mma(a{{I}}, b{{J}}, acc{{I}}_{{J}})

//=== emu_result
sgm_result

//=== emu_store_cs
if (t % {{SGS}}u == 0u) { sgm_store(sg * {{MSN}}u + {{JJ}}u * {{N8}}u, acc{{I}}_{{J}}, {{SW}}u); }

//=== emulation
// Plain WGSL of the builtins' semantics for one configuration: a left fragment is M8 x K8 (row r, column c at
// [r * K8 + c]), a right one K8 x N8, a result M8 x N8 in f32; a load reads element (r, c) at off + r * stride
// + c, or off + c * stride + r column-major; the product sums k in increasing order.
alias sgm_left = array<{{T}}, {{MK8}}>;
alias sgm_right = array<{{T}}, {{KN8}}>;
alias sgm_result = array<f32, {{MN8}}>;
fn sgm_load_a(off: u32, col_major: bool, stride: u32) -> sgm_left {
  var f: sgm_left;
  for (var r = 0u; r < {{M8}}u; r++) {
    for (var c = 0u; c < {{K8}}u; c++) {
      f[r * {{K8}}u + c] = As[select(off + r * stride + c, off + c * stride + r, col_major)];
    }
  }
  return f;
}
fn sgm_load_b(off: u32, col_major: bool, stride: u32) -> sgm_right {
  var f: sgm_right;
  for (var r = 0u; r < {{K8}}u; r++) {
    for (var c = 0u; c < {{N8}}u; c++) {
      f[r * {{N8}}u + c] = Bs[select(off + r * stride + c, off + c * stride + r, col_major)];
    }
  }
  return f;
}
fn sgm_mma(a: sgm_left, b: sgm_right, acc: sgm_result) -> sgm_result {
  var out = acc;
  for (var r = 0u; r < {{M8}}u; r++) {
    for (var c = 0u; c < {{N8}}u; c++) {
      var s = out[r * {{N8}}u + c];
      for (var k = 0u; k < {{K8}}u; k++) { s += f32(a[r * {{K8}}u + k]) * f32(b[k * {{N8}}u + c]); }
      out[r * {{N8}}u + c] = s;
    }
  }
  return out;
}
fn sgm_store(off: u32, f: sgm_result, stride: u32) {
  for (var i = 0u; i < {{MN8}}u; i++) { Cs[off + (i / {{N8}}u) * stride + i % {{N8}}u] = f[i]; }
}
