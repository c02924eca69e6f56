// Flash-attention forward with outer-product register tiles (like matmul.wgsl's 8x8 tiles): one
// workgroup per (head, block of BQ = 4 RG NY query rows), 8 x NY threads. Thread (ty, tx) owns the
// query rows of row groups ty + g NY (g < RG; a group is 4 rows, the lanes of a vec4) and the keys
// tx + 8 j (j < 4 CG) of every staged key block (BK = 32 CG keys): its scores are RG x 4 CG NAMED vec4
// accumulators s{g}_{j}, updated one head element d at a time from a vec4 of 4 rows of Q^T and a vec4
// of 4 of its keys of K^T (both staged transposed, d-major, so every thread's operands are one 16-byte
// load and the loop runs over d < D without padding). Its output is rows x columns 4 (tx + 8 c), c < CV
// (NAMED vec4s o{r}_{c}), updated from the block's probabilities P^T (workgroup memory, [key][row
// group]) and the value rows. The running row max is combined over the 8 threads of a row with
// subgroupShuffleXor (SG: the 8 threads are 8 consecutive invocations, so any subgroup size that is a
// multiple of 8 keeps them together) or through workgroup memory; the row sums stay per thread and
// are combined once at the end. Base-2 online softmax (the launcher passes scale * log2 e). Causal
// blocks past the diagonal are never visited; the per-element mask runs only on blocks that need it.
// With DROP, the keep factors of attention.wgsl:dropout weight v (not the row sums), exactly as in
// flash_fwd.wgsl, so either backward regenerates the mask. Fixed summation order, no atomics.
// The unrolled per-thread code is assembled by attention.py from the sections below.
{{ENABLE}}
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const D4: u32 = (D + 3u) / 4u;
const V4: u32 = (DV + 3u) / 4u;
const RG: u32 = {{RG}}u;              // row groups (4 rows) per thread
const CG: u32 = {{CG}}u;              // key groups (4 keys) per thread
const CV: u32 = {{CV}}u;              // output column vec4s per thread
const NY: u32 = {{NY}}u;
const NT: u32 = 8u * NY;
const BQ4: u32 = RG * NY;             // row groups of the block
const BQ: u32 = 4u * BQ4;
const BK: u32 = 32u * CG;
const BK4: u32 = 8u * CG;
const VW: u32 = 8u * CV;              // vec4s of a staged value row (DV padded to 32 CV)
const PS: u32 = BQ4 + 1u;             // vec4 stride of a key's row of P^T (odd: the 8 tx of a store differ in bank)
const CAUSAL: bool = {{CAUSAL}};
const MASKED: bool = {{MASKED}};
const NEG: f32 = -3.0e38;
#if VEC
alias TB = vec4<{{T}}>;
#else
alias TB = {{T}};
#endif

struct Params {
  nbh: u32, lq: u32, lk: u32, nrows: u32,
  r0: u32, nqb: u32, coff: i32, neg_inf: u32,
  scale: f32, qoff: u32, koff: u32, voff: u32,
  ooff: u32, loff: u32, moff: u32, bh0: u32,
  msq: u32, msk: u32, mrank: u32, _p: u32,
  mshape: vec4<u32>, mstride: vec4<u32>,
  dctr: vec4<u32>, dprob: vec4<f32>,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<TB>;
@group(0) @binding(2) var<storage, read_write> k: array<TB>;
@group(0) @binding(3) var<storage, read_write> v: array<TB>;
@group(0) @binding(4) var<storage, read_write> o: array<TB>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
#include attention:mask
#if DROP
#include attention:dropout
#endif

var<workgroup> qT: array<vec4<f32>, D * BQ4>;   // [d][row group], pre-scaled
var<workgroup> kT: array<vec4<f32>, D * BK4>;   // [d][h * 8 + tx]: lane c holds key tx + 8 (4 h + c)
var<workgroup> vs: array<vec4<f32>, BK * VW>;   // [key][column / 4], zero past DV
var<workgroup> pT: array<vec4<f32>, BK * PS>;   // [key][row group]: probabilities of 4 rows
#if SG
#else
var<workgroup> red: array<vec4<f32>, NT * RG>;  // [g][t]: per-thread row partials
#endif

fn ld_q(base: u32, e: u32, n: u32) -> vec4<f32> {
  var r = vec4<f32>(0.0);
#if VEC
  if (e < n) { r = vec4<f32>(q[(base + e) >> 2u]); }
#else
  for (var i = 0u; i < 4u; i = i + 1u) { if (e + i < n) { r[i] = f32(q[base + e + i]); } }
#endif
  return r;
}
fn ld_k(base: u32, e: u32, n: u32) -> vec4<f32> {
  var r = vec4<f32>(0.0);
#if VEC
  if (e < n) { r = vec4<f32>(k[(base + e) >> 2u]); }
#else
  for (var i = 0u; i < 4u; i = i + 1u) { if (e + i < n) { r[i] = f32(k[base + e + i]); } }
#endif
  return r;
}
fn ld_v(base: u32, e: u32, n: u32) -> vec4<f32> {
  var r = vec4<f32>(0.0);
#if VEC
  if (e < n) { r = vec4<f32>(v[(base + e) >> 2u]); }
#else
  for (var i = 0u; i < 4u; i = i + 1u) { if (e + i < n) { r[i] = f32(v[base + e + i]); } }
#endif
  return r;
}

// scores s (lanes: local rows lr0 .. lr0 + 3) against key j, NEG where not allowed
fn mask4(s: vec4<f32>, lr0: u32, j: u32, mb: u32) -> vec4<f32> {
  var r = s;
  for (var i = 0u; i < 4u; i = i + 1u) {
    let lr = lr0 + i;
    if (j >= p.lk || lr >= p.nrows || !allowed(p.r0 + lr, j, mb)) { r[i] = NEG; }
  }
  return r;
}

// one output row: columns 4 (tx + 8 c) of x0 (c = 0) and x1 (c = 1, when CV = 2) over the row sum li;
// lse from the row max mi (base 2) by the thread with tx = 0
fn store_row(obase: u32, lbase: u32, lr: u32, li: f32, mi: f32, tx: u32, x0: vec4<f32>, x1: vec4<f32>) {
  if (lr >= p.nrows) { return; }
  let inv = select(0.0, 1.0 / li, li > 0.0);
  for (var c = 0u; c < CV; c = c + 1u) {
    var x = x0;
    if (c == 1u) { x = x1; }
    let col = 4u * (tx + 8u * c);
#if VEC
    if (col < DV) { o[(obase + lr * DV + col) >> 2u] = TB(x * inv); }
#else
    for (var i = 0u; i < 4u; i = i + 1u) {
      if (col + i < DV) { o[obase + lr * DV + col + i] = {{T}}(x[i] * inv); }
    }
#endif
  }
  if (tx == 0u) {
    lse[lbase + lr] = select(bitcast<f32>(p.neg_inf), mi * 0.6931471805599453 + log(li), li > 0.0);
  }
}

@compute @workgroup_size({{NT}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nqb) { return; }
  let bl = wid / p.nqb;
  let qb = wid % p.nqb;
  let tx = t % 8u;
  let ty = t / 8u;
  let q0 = qb * BQ;
  let mb = mask_base(p.bh0 + bl);
  let qbase = p.qoff + bl * p.nrows * D;
  let kbase = p.koff + bl * p.lk * D;
  let vbase = p.voff + bl * p.lk * DV;
  // Q^T of the block, pre-scaled, zero past the rows (consecutive threads take consecutive rows)
  for (var e = t; e < BQ * D4; e = e + NT) {
    let r = e % BQ;
    let c4 = e / BQ;
    var x = vec4<f32>(0.0);
    if (q0 + r < p.nrows) { x = ld_q(qbase + (q0 + r) * D, c4 * 4u, D) * p.scale; }
    for (var i = 0u; i < 4u; i = i + 1u) {
      if (4u * c4 + i < D) { qT[(4u * c4 + i) * BQ4 + r / 4u][r % 4u] = x[i]; }
    }
  }
  var kend = p.lk;
  if (CAUSAL) {
    let last = i32(p.r0 + min(q0 + BQ, p.nrows)) - 1;
    kend = u32(clamp(last + p.coff + 1, 0, i32(p.lk)));
  }
  {{DECL}}
  for (var j0 = 0u; j0 < kend; j0 = j0 + BK) {
    workgroupBarrier();
    // K^T (key r of the block at lane (r / 8) % 4 of vec4 (r / 32) * 8 + r % 8) and the value rows
    for (var e = t; e < BK * D4; e = e + NT) {
      let r = e % BK;
      let c4 = e / BK;
      var x = vec4<f32>(0.0);
      if (j0 + r < p.lk) { x = ld_k(kbase + (j0 + r) * D, c4 * 4u, D); }
      let slot = (r / 32u) * 8u + r % 8u;
      let lane = (r / 8u) % 4u;
      for (var i = 0u; i < 4u; i = i + 1u) {
        if (4u * c4 + i < D) { kT[(4u * c4 + i) * BK4 + slot][lane] = x[i]; }
      }
    }
    for (var e = t; e < BK * VW; e = e + NT) {
      let r = e / VW;
      let c4 = e % VW;
      var x = vec4<f32>(0.0);
      if (j0 + r < p.lk && c4 < V4) { x = ld_v(vbase + (j0 + r) * DV, c4 * 4u, DV); }
      vs[r * VW + c4] = x;
    }
    workgroupBarrier();
    {{SCORES}}
    var need = MASKED || j0 + BK > p.lk || q0 + BQ > p.nrows;
    if (CAUSAL) { need = need || i32(j0 + BK) - 1 > i32(p.r0 + q0) + p.coff; }
    if (need) {
      {{MASK}}
    }
    {{ROWMAX}}
    {{SOFTMAX}}
    workgroupBarrier();
    for (var c = 0u; c < BK; c = c + 1u) {
      {{PV}}
    }
  }
  {{ROWSUM}}
  let obase = p.ooff + bl * p.nrows * DV;
  {{STORE}}
}

//=== decl
// per row group G: running max and (per-thread) row sum; per output row R, column vec4 C
var m{{G}} = vec4<f32>(NEG);
var l{{G}} = vec4<f32>(0.0);

//=== o_decl
var o{{R}}_{{C}} = vec4<f32>(0.0);

//=== s_decl
var s{{G}}_{{J}} = vec4<f32>(0.0);

//=== d_loop
// the score tile over the head elements: one vec4 of Q^T per row group, one of K^T per key group
for (var d = 0u; d < D; d = d + 1u) {
  {{BODY}}
}

//=== a_reg
let a{{G}} = qT[d * BQ4 + ty + {{OFF}}u];

//=== b_reg
let b{{H}} = kT[d * BK4 + tx + {{OFF}}u];

//=== s_fma
s{{G}}_{{J}} += a{{G}} * b{{H}}.{{L}};

//=== mask
s{{G}}_{{J}} = mask4(s{{G}}_{{J}}, q0 + 4u * (ty + {{OFF}}u), j0 + tx + {{KO}}u, mb);

//=== pm_init
var pm{{G}} = s{{G}}_0;

//=== pm_max
pm{{G}} = max(pm{{G}}, s{{G}}_{{J}});

//=== sg_max
// butterfly over the 8 threads of a row (lanes tx ^ X)
pm{{G}} = max(pm{{G}}, subgroupShuffleXor(pm{{G}}, {{X}}u));

//=== red_put
red[{{G}}u * NT + t] = pm{{G}};

//=== red_max
for (var x = 0u; x < 8u; x = x + 1u) { pm{{G}} = max(pm{{G}}, red[{{G}}u * NT + ty * 8u + x]); }

//=== barrier
workgroupBarrier();

//=== stats
// new running max of row group G; corr rescales the old sums and outputs
let mn{{G}} = max(m{{G}}, pm{{G}});
let mm{{G}} = select(mn{{G}}, vec4<f32>(0.0), mn{{G}} <= vec4<f32>(NEG));
let corr{{G}} = exp2(m{{G}} - mm{{G}});
m{{G}} = mn{{G}};

//=== p_val
let p{{G}}_{{J}} = exp2(s{{G}}_{{J}} - mm{{G}});

//=== l_upd
// the row sums take the probabilities before dropout
l{{G}} = l{{G}} * corr{{G}} + {{SUM}};

//=== p_put
#if DROP
pT[(tx + {{KO}}u) * PS + ty + {{OFF}}u] = p{{G}}_{{J}} * keep_rows(p.bh0 + bl, p.r0 + q0 + 4u * (ty + {{OFF}}u), j0 + tx + {{KO}}u);
#else
pT[(tx + {{KO}}u) * PS + ty + {{OFF}}u] = p{{G}}_{{J}};
#endif

//=== o_corr
o{{R}}_{{C}} = o{{R}}_{{C}} * corr{{G}}.{{L}};

//=== pa_reg
let pa{{G}} = pT[c * PS + ty + {{OFF}}u];

//=== vb_reg
let vb{{C}} = vs[c * VW + tx + {{CO}}u];

//=== pv_fma
o{{R}}_{{C}} += pa{{G}}.{{L}} * vb{{C}};

//=== sg_sum
l{{G}} = l{{G}} + subgroupShuffleXor(l{{G}}, {{X}}u);

//=== red_lput
red[{{G}}u * NT + t] = l{{G}};

//=== red_sum
// the 8 partial sums of a row, in tx order
{
  var lt = vec4<f32>(0.0);
  for (var x = 0u; x < 8u; x = x + 1u) { lt = lt + red[{{G}}u * NT + ty * 8u + x]; }
  l{{G}} = lt;
}

//=== store
store_row(obase, p.loff + bl * p.nrows, q0 + 4u * (ty + {{OFF}}u) + {{I}}u, l{{G}}.{{L}}, m{{G}}.{{L}}, tx, o{{R}}_0, o{{R}}_{{C1}});
