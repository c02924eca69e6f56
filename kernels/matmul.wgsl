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
// Staged type ST: f32 (f32 math; f16 operands are widened on load), or f16 for the packed-f16
// path: vec4<f16> products and sums into NAMED f16 partial accumulators h*, folded into the f32
// accumulators c* after every staged tile (BK k-steps), so an f16 partial sums at most BK products.
// Prefetch variants (loop_prefetch) load the next tile from global memory into registers while the
// current one is being multiplied; the summation order is the same as the plain loop's.
// Transposed operands (the matmul's trans_a / trans_b attrs, a folded permute): A stored [K, M] (row
// stride lda = M) is read by fetch_a_t, B stored [N, K] (ldb = K) by fetch_b_t; each thread still loads
// along the stored matrix's contiguous axis (4 consecutive m of one k row of A^T; consecutive k of one
// row of B^T across neighbouring threads) and writes the same k-major tiles, so the products and their
// order over k are those of the untransposed kernel.
{{ENABLE}}
#include matmul:params

var<workgroup> As: array<vec4<{{ST}}>, {{AS_LEN}}>;   // [BK][TM/4]
var<workgroup> Bs: array<vec4<{{ST}}>, {{BS_LEN}}>;   // [BK][TN/4] (+1 padded, transposed B)
{{EPILOGUE}}

@compute @workgroup_size({{THREADS}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
#if WT
  // warp-tiled ("wt"): each 32 invocations take 8 column groups x 4 row groups (fewer distinct workgroup-memory
  // vec4s per load than 16 x 2), the warps tiled WX across; each (tx, ty) is still taken once. (4 x 8 ran alike
  // on an H100: 38.8-39.0 against 39.0-39.2 TFLOP/s at 2048^3, 42.7-42.8 against 42.4 at 8192^3)
  let tx = (t / 32u % {{WX}}u) * 8u + t % 8u;
  let ty = (t / 32u / {{WX}}u) * 4u + t % 32u / 8u;
#else
  let tx = t % {{TXN}}u;
  let ty = t / {{TXN}}u;
#endif
  let n0 = wid.x * {{TN}}u;
  let m0 = wid.y * {{TM}}u;
#include matmul:chunk
  {{DECL}}
  {{MAINLOOP}}
  {{STORE}}
}

//=== loop
// stage a tile, multiply it, fold the f16 partials (packed path only), next tile
for (var k0 = kbeg; k0 < kend; k0 = k0 + {{BK}}u) {
  {{FETCH}}
  {{PUT}}
  workgroupBarrier();
  {{COMPUTE}}
  {{FOLD}}
  workgroupBarrier();
}

//=== loop_prefetch
// the first tile into registers; then: registers to workgroup memory, fetch the next tile (its global
// loads in flight while this one is multiplied), multiply
var k0 = kbeg;
{{FETCH}}
while (k0 < kend) {
  {{PUT}}
  workgroupBarrier();
  k0 = k0 + {{BK}}u;
  {{FETCH}}
  {{COMPUTE}}
  {{FOLD}}
  workgroupBarrier();
}

//=== loop_db
// double-buffered workgroup memory (the "db" variants): the first tile is staged into buffer 0; then each
// step fetches the next tile into registers, multiplies the current buffer, writes the registers into
// the other buffer and waits once (one barrier a tile instead of two: a thread writes a buffer only
// after every thread has passed the barrier that ended the reads of it). Unrolled twice so each copy
// addresses its buffers by constants. The summation order is the plain loop's.
var k0 = kbeg;
{{FETCH}}
{{PUT0}}
workgroupBarrier();
loop {
  if (k0 >= kend) { break; }
  k0 = k0 + {{BK}}u;
  {{FETCH}}
  {{COMPUTE0}}
  {{FOLD}}
  {{PUT1}}
  workgroupBarrier();
  if (k0 >= kend) { break; }
  k0 = k0 + {{BK}}u;
  {{FETCH}}
  {{COMPUTE1}}
  {{FOLD}}
  {{PUT0}}
  workgroupBarrier();
}

//=== band_tiles
// causal band (matmul.py BAND_TILES): a tile whose first column is past its last row + offset is all
// masked scores; the workgroup leaves it (uniformly: before any barrier)
if (i32(n0) > i32(m0) + {{TM}} - 1 + bitcast<i32>(p.off.w)) { return; }

//=== band_tiles_epi
// the same band with an epilogue that writes what the band means (attention_scores.wgsl epi_probs,
// epi_dscores: 0): the tile runs no k and stores through the epilogue, so its callers may read it; a tile
// more than REACH columns past the band, out of reach of every banded product that reads C (row tiles of
// at most REACH rows), is left as band_tiles leaves it
if (i32(n0) > i32(m0) + {{TM}} - 1 + bitcast<i32>(p.off.w) + {{REACH}}) { return; }
if (i32(n0) > i32(m0) + {{TM}} - 1 + bitcast<i32>(p.off.w)) { kend = kbeg; }

//=== band_kend
// causal band (BAND_KEND): the tile's rows sum k <= row + offset only; A is 0 past that
kend = min(kend, u32(clamp(i32(m0) + {{TM}} + bitcast<i32>(p.off.w), 0, i32(p.K))));

//=== band_kbeg
// causal band (BAND_KBEG): the tile's rows sum k >= row + offset only; A is 0 before that
kbeg = max(kbeg, u32(clamp(i32(m0) + bitcast<i32>(p.off.w), 0, i32(p.K))));

//=== acc
// accumulator of output row R (within the thread's RM rows), column group H (4 columns)
var c{{R}}_{{H}} = vec4<f32>(0.0);

//=== stage_a
// register of A load slot J, filled by fetch_a, written to workgroup memory by put_a
var pa{{J}} = vec4<{{ST}}>(0.0);

//=== stage_b
var pb{{J}} = vec4<{{ST}}>(0.0);

//=== fetch_a
// A load slot: element E0 + t of the tile, 4 rows x 1 k of A into pa J; zero outside A
{ let e = t + {{E0}}u; let kk = e % {{BK}}u; let r4 = e / {{BK}}u;
  let gk = k0 + kk; let gr = m0 + r4 * 4u;
  var v = vec4<{{ST}}>(0.0);
  if (gk < kend) {
    if (gr + 0u < p.M) { v.x = {{ST}}(A[abase + (gr + 0u) * p.lda + gk]); }
    if (gr + 1u < p.M) { v.y = {{ST}}(A[abase + (gr + 1u) * p.lda + gk]); }
    if (gr + 2u < p.M) { v.z = {{ST}}(A[abase + (gr + 2u) * p.lda + gk]); }
    if (gr + 3u < p.M) { v.w = {{ST}}(A[abase + (gr + 3u) * p.lda + gk]); }
  }
  pa{{J}} = v; }

//=== put_a
// A slot J into As (k-major)
{ let e = t + {{E0}}u; As[{{AO}}u + (e % {{BK}}u) * {{TM4}}u + e / {{BK}}u] = pa{{J}}; }

//=== fetch_a_v4
// row-major A slot as one 16-byte load along k: 1 row x 4 consecutive k of A into pa J (A's rows, K and every
// offset whole vec4s, matmul.py `_vec4`; the k range starts on a vec4). Components at or past kend (a causal
// band's end need not be a multiple of 4) are zeros, as fetch_a leaves them
{ let e = t + {{E0}}u; let k4 = e % {{BK4}}u; let r = e / {{BK4}}u;
  let gk = k0 + k4 * 4u; let gr = m0 + r;
  var v = vec4<{{ST}}>(0.0);
  if (gk < kend && gr < p.M) {
    v = select(vec4<{{ST}}>(0.0), vec4<{{ST}}>(A[(abase + gr * p.lda + gk) / 4u]),
               vec4<u32>(gk) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(kend));
  }
  pa{{J}} = v; }

//=== put_a_v4
// fetch_a_v4's slot J into As (k-major, row stride TM4 vec4s): its 4 k to 4 k-rows, each the component
// r % 4 of vec4 r / 4, where put_a puts the same values
{ let e = t + {{E0}}u; let r = e / {{BK4}}u; let c = r % 4u;
  let i = {{AO}}u + (e % {{BK4}}u) * 4u * {{TM4}}u + r / 4u;
  As[i][c] = pa{{J}}.x; As[i + {{TM4}}u][c] = pa{{J}}.y; As[i + 2u * {{TM4}}u][c] = pa{{J}}.z;
  As[i + 3u * {{TM4}}u][c] = pa{{J}}.w; }

//=== fetch_a_t
// transposed A slot: 1 k x 4 consecutive rows of A = 4 contiguous elements of row gk of the stored A^T
{ let e = t + {{E0}}u; let kk = e / {{TM4}}u; let r4 = e % {{TM4}}u;
  let gk = k0 + kk; let gr = m0 + r4 * 4u;
  var v = vec4<{{ST}}>(0.0);
  if (gk < kend) {
    let row = abase + gk * p.lda + gr;
    if (gr + 0u < p.M) { v.x = {{ST}}(A[row + 0u]); }
    if (gr + 1u < p.M) { v.y = {{ST}}(A[row + 1u]); }
    if (gr + 2u < p.M) { v.z = {{ST}}(A[row + 2u]); }
    if (gr + 3u < p.M) { v.w = {{ST}}(A[row + 3u]); }
  }
  pa{{J}} = v; }

//=== fetch_a_t_v4
// fetch_a_t as one 16-byte load: A^T's rows, M and every offset are whole vec4s (matmul.py `_vec4`), so the
// 4 rows are in bounds together
{ let e = t + {{E0}}u; let kk = e / {{TM4}}u; let r4 = e % {{TM4}}u;
  let gk = k0 + kk; let gr = m0 + r4 * 4u;
  var v = vec4<{{ST}}>(0.0);
  if (gk < kend && gr < p.M) { v = vec4<{{ST}}>(A[(abase + gk * p.lda + gr) / 4u]); }
  pa{{J}} = v; }

//=== put_a_t
// transposed A slot J into As (k-major, row stride ASTR vec4s)
{ let e = t + {{E0}}u; As[{{AO}}u + (e / {{TM4}}u) * {{ASTR}}u + e % {{TM4}}u] = pa{{J}}; }

//=== fetch_b
// B load slot: 1 k x 4 columns of B into pb J; zero outside B
{ let e = t + {{E0}}u; let kk = e / {{TN4}}u; let c4 = e % {{TN4}}u;
  let gk = k0 + kk; let gc = n0 + c4 * 4u;
  var v = vec4<{{ST}}>(0.0);
  if (gk < kend) {
    let row = bbase + gk * p.ldb + gc;
    if (gc + 0u < p.N) { v.x = {{ST}}(B[row + 0u]); }
    if (gc + 1u < p.N) { v.y = {{ST}}(B[row + 1u]); }
    if (gc + 2u < p.N) { v.z = {{ST}}(B[row + 2u]); }
    if (gc + 3u < p.N) { v.w = {{ST}}(B[row + 3u]); }
  }
  pb{{J}} = v; }

//=== fetch_b_v4
// fetch_b as one 16-byte load: B's rows, N and every offset are whole vec4s (matmul.py `_vec4`)
{ let e = t + {{E0}}u; let kk = e / {{TN4}}u; let c4 = e % {{TN4}}u;
  let gk = k0 + kk; let gc = n0 + c4 * 4u;
  var v = vec4<{{ST}}>(0.0);
  if (gk < kend && gc < p.N) { v = vec4<{{ST}}>(B[(bbase + gk * p.ldb + gc) / 4u]); }
  pb{{J}} = v; }

//=== put_b
// B slot J into Bs
Bs[{{BO}}u + t + {{E0}}u] = pb{{J}};

//=== fetch_b_t
// transposed B slot: 1 k x 4 columns of B = element gk of 4 consecutive rows of the stored B^T
// (neighbouring threads take neighbouring k: contiguous along each row); zero outside B
{ let e = t + {{E0}}u; let kk = e % {{BK}}u; let c4 = e / {{BK}}u;
  let gk = k0 + kk; let gc = n0 + c4 * 4u;
  var v = vec4<{{ST}}>(0.0);
  if (gk < kend) {
    if (gc + 0u < p.N) { v.x = {{ST}}(B[bbase + (gc + 0u) * p.ldb + gk]); }
    if (gc + 1u < p.N) { v.y = {{ST}}(B[bbase + (gc + 1u) * p.ldb + gk]); }
    if (gc + 2u < p.N) { v.z = {{ST}}(B[bbase + (gc + 2u) * p.ldb + gk]); }
    if (gc + 3u < p.N) { v.w = {{ST}}(B[bbase + (gc + 3u) * p.ldb + gk]); }
  }
  pb{{J}} = v; }

//=== put_b_t
// transposed B slot J into Bs (k-major, row stride BSTR vec4s: padded when that fits)
{ let e = t + {{E0}}u; Bs[{{BO}}u + (e % {{BK}}u) * {{BSTR}}u + e / {{BK}}u] = pb{{J}}; }

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
// component C of a{{G}} times b{{H}} into row R's accumulator of column group H (c: f32, h: f16 partial)
{{ACC}}{{R}}_{{H}} += a{{G}}.{{C}} * b{{H}};

//=== fma_fused
// the same update as one explicit fused multiply-add (a single rounding): SPIR-V from naga carries a
// separate multiply and add, which a driver need not contract
{{ACC}}{{R}}_{{H}} = fma(vec4<{{ST}}>(a{{G}}.{{C}}), b{{H}}, {{ACC}}{{R}}_{{H}});

//=== hacc
// f16 partial accumulator of row R, column group H (packed path)
var h{{R}}_{{H}} = vec4<f16>(0.0);

//=== fold
// the f16 partial (at most BK products) into the f32 accumulator, then restart it
c{{R}}_{{H}} += vec4<f32>(h{{R}}_{{H}}); h{{R}}_{{H}} = vec4<f16>(0.0);

//=== fold_counter
// staged tiles since the last fold (fold_every)
var kt = 0u;

//=== fold_every
// fold after every F staged tiles (kt counts them; uniform across the workgroup)
kt = kt + 1u;
if (kt == {{F}}u) {
  {{FOLD}}
  kt = 0u;
}

//=== fold_rest
// the partials of the last tiles, when their count was not a multiple of F
if (kt != 0u) {
  {{FOLD}}
}

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

//=== epi_params
// Epilogue (program/epilogue.py) fields of Params: en.x = columns of the product (the K-split sum's
// row length); per epilogue input k, eb[k] = its batch strides over (d0, d1, d2) and, in .w, the element
// at this chunk's (batch, row, column) origin; er[k] = its row and column strides (the last k, when the
// chain draws uniforms, is no binding: the logical element index); eph[j] = draw j's stream word offset
// (lo, hi) and key
en: vec4<u32>,
eb: array<vec4<u32>, {{NE}}>,
er: array<vec4<u32>, {{NE}}>,
eph: array<vec4<u32>, {{ND}}>,

//=== epi_fn
// The epilogue: a fused group's instruction list (as in kernels/fused.wgsl, each `let` rounded to its
// dtype) on the product `acc` at logical element (batch i0, i1, i2; row, col of this chunk), its other
// inputs x0.. read at that element; only the chain's result is stored. Used by every tile variant's
// store and by the K-split sum (kernels/matmul_ksplit.wgsl), so partials never see it.
{{BINDINGS}}
{{HELPERS}}
fn epilogue(acc: f32, i0: u32, i1: u32, i2: u32, row: u32, col: u32) -> {{TC}} {
  {{OFFSETS}}
  {{BODY}}
  return {{TC}}(t{{LAST}});
}

//=== epi_offset
// element of epilogue input K at (i0, i1, i2, row, col)
let eo{{K}} = p.eb[{{K}}].w + i0 * p.eb[{{K}}].x + i1 * p.eb[{{K}}].y + i2 * p.eb[{{K}}].z + row * p.er[{{K}}].x + col * p.er[{{K}}].y;

//=== epi_load
// epilogue input K in its compute type CT
{{CT}}(x{{K}}[eo{{K}}])

//=== epi_acc
// the product as the chain reads it: rounded to the matmul's dtype T, as its store would round it
f32({{T}}(acc))

//=== store_cols_epi
// 4 columns of row `row` from accumulator c{{R}}_{{H}} through the epilogue (no `acc`: never K-chunked)
{ let col = n0 + {{COL}}u + tx * 4u; let base = cbase + row * p.ldc + col;
  if (col + 0u < p.N) { C[base + 0u] = epilogue(c{{R}}_{{H}}.x, i0, i1, i2, row, col + 0u); }
  if (col + 1u < p.N) { C[base + 1u] = epilogue(c{{R}}_{{H}}.y, i0, i1, i2, row, col + 1u); }
  if (col + 2u < p.N) { C[base + 2u] = epilogue(c{{R}}_{{H}}.z, i0, i1, i2, row, col + 2u); }
  if (col + 3u < p.N) { C[base + 3u] = epilogue(c{{R}}_{{H}}.w, i0, i1, i2, row, col + 3u); }
}

//=== epi_philox
// Dropout's uniforms drawn in the epilogue: word `o` + w of the Philox-4x32-10 stream keyed `k`, as
// f32 in [0, 1); bit-exact with kernels/philox.wgsl (block = word / 4, lane = word % 4, 64-bit words)
#include common:philox

fn epi_uniform(w: u32, o: vec2<u32>, key: vec2<u32>) -> f32 {
  let word = ph_add64(o, vec2<u32>(w, 0u));
  return ph_unit(ph_block(ph_counter(word), key)[word.x & 3u]);
}

//=== epi_draw
// draw J's uniform at this element (eo K: the logical element index) from offset OFF
epi_uniform(eo{{K}}, {{OFF}}, p.eph[{{J}}].zw)

//=== epi_draw_off
p.eph[{{J}}].xy

//=== epi_draw_off_based
// the step's stream position (input B: u32 lo, hi) added to the draw's offset
ph_add64(p.eph[{{J}}].xy, vec2<u32>(x{{B}}[0], x{{B}}[1]))

//=== params
// Params and bindings, shared with kernels/matmul_sgm.wgsl (the same launcher fills both)
struct Params {
  M: u32, N: u32, K: u32, acc: u32,
  lda: u32, ldb: u32, ldc: u32, kc: u32,   // kc: k per split, 0 = no split
  off: vec4<u32>,      // element offsets of A, B, C inside their bindings; .w: a causal band's offset
  bsz: vec4<u32>,      // batch dims of this chunk (d0, d1, d2, count)
  sa: vec4<u32>,       // batch strides (elements) of A, B, C over (d0, d1, d2)
  sb: vec4<u32>,
  sc: vec4<u32>,       // .w: element stride between K-split partials
  {{EPI_PARAMS}}
}
@group(0) @binding(0) var<uniform> p: Params;
// VA / VB: A / B bound as vec4s for 16-byte loads (fetch_a_v4 or fetch_a_t_v4, fetch_b_v4). AACC / BACC: `read`
// where no binding this dispatch writes lies in that operand's buffer (matmul.py `_readonly`), else `read_write`
// (WebGPU refuses one buffer both read-only and writable in a dispatch)
#if VA
@group(0) @binding(1) var<storage, {{AACC}}> A: array<vec4<{{T}}>>;
#else
@group(0) @binding(1) var<storage, {{AACC}}> A: array<{{T}}>;
#endif
#if VB
@group(0) @binding(2) var<storage, {{BACC}}> B: array<vec4<{{T}}>>;
#else
@group(0) @binding(2) var<storage, {{BACC}}> B: array<{{T}}>;
#endif
@group(0) @binding(3) var<storage, read_write> C: array<{{CBT}}>;   // CBT: T, or f32 for K-split partials of f16 operands

//=== chunk
// this workgroup's K-split range, causal band and batch element, and A's, B's and C's bases in their bindings
  var nsplit = 1u;
  var kc = p.K;
  if (p.kc != 0u) { kc = p.kc; nsplit = (p.K + kc - 1u) / kc; }
  let split = wid.z % nsplit;
  var kbeg = split * kc;
  var kend = min(p.K, kbeg + kc);
  {{BAND}}
  var z = wid.z / nsplit;
  let i2 = z % p.bsz.z;
  z = z / p.bsz.z;
  let i1 = z % p.bsz.y;
  let i0 = z / p.bsz.y;
  let abase = p.off.x + i0 * p.sa.x + i1 * p.sa.y + i2 * p.sa.z;
  let bbase = p.off.y + i0 * p.sb.x + i1 * p.sb.y + i2 * p.sb.z;
  let cbase = p.off.z + i0 * p.sc.x + i1 * p.sc.y + i2 * p.sc.z + split * p.sc.w;
