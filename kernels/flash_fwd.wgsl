// Flash-attention forward, register-tiled (FlashAttention-2's loop order): one workgroup per (head,
// block of BQ = 4 TY query rows), 16 x TY threads. Thread (ty, tx) owns query rows 4 ty .. 4 ty + 3:
// for every staged key block (BK = 16 CK keys) it computes the scores of its rows against keys
// tx + 16 c (c < CK) into NAMED vec4 accumulators (one per key slot, the 4 lanes are its 4 rows),
// and keeps the output columns 4 tx .. 4 tx + 3 of its rows in o0..o3 (rows r). Q, K, V tiles live
// in workgroup memory as f32 vec4 rows (head size padded to 64 with zeros, q/k rows strided 17 vec4
// against bank conflicts); the row max is combined over the 16 threads of a row through `red`, the
// row sum is kept per thread and combined once at the end (online softmax, base 2: the launcher
// passes scale * log2(e)). Causal blocks past the diagonal are never visited; a block needs the
// per-element mask only where it crosses the diagonal, the key end, or a bool mask is bound.
// Writes out = acc / l (0 for a row with no allowed key) and lse = ln(sum exp(s)) (-inf for such a
// row). With DROP, attention dropout (attention.wgsl:dropout) scales the probabilities that weight v
// (not the row sums), so the backward can regenerate the same mask. Every sum runs in a fixed order and nothing uses atomics (deterministic).
{{ENABLE}}
const D: u32 = {{D}}u;                // q/k head size (<= 64)
const DV: u32 = {{DV}}u;              // v head size (<= 64)
const D4: u32 = (D + 3u) / 4u;
const V4: u32 = (DV + 3u) / 4u;
const TY: u32 = {{TY}}u;
const BQ: u32 = 4u * TY;
const CK: u32 = {{CK}}u;
const BK: u32 = 16u * CK;
const NT: u32 = 16u * TY;             // threads
const RS: u32 = 17u;                  // vec4 stride of a q/k row in workgroup memory
const PS: u32 = TY + 1u;              // vec4 stride of a key's column of probabilities
const CAUSAL: bool = {{CAUSAL}};
const MASKED: bool = {{MASKED}};      // a bool mask is bound
const NEG: f32 = -3.0e38;             // "minus infinity" inside the kernel (exp2(NEG - m) == 0)
#if VEC
alias TB = vec4<{{T}}>;               // element type of the q/k/v/out/gradient bindings: 16-byte rows
#else
alias TB = {{T}};
#endif

struct Params {
  nbh: u32, lq: u32, lk: u32, nrows: u32,      // heads in this chunk, full lengths, query rows per head here
  r0: u32, nqb: u32, coff: i32, neg_inf: u32,  // first query row, query blocks per head, Lk - Lq, bits of -inf
  scale: f32, qoff: u32, koff: u32, voff: u32, // scale * log2(e); element offsets inside the bindings
  ooff: u32, loff: u32, moff: u32, bh0: u32,   // moff: (window offset - footprint low) mod 2^32; bh0: first head
  msq: u32, msk: u32, mrank: u32, _p: u32,     // mask strides along query / key, collapsed batch rank
  mshape: vec4<u32>, mstride: vec4<u32>,       // mask batch dims (collapsed) and their broadcast strides
  dctr: vec4<u32>, dprob: vec4<f32>,           // dropout: word offset (lo, hi), Philox key; (p, 1 / (1 - p))
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

var<workgroup> qs: array<vec4<f32>, BQ * RS>;     // [query row][d / 4], pre-scaled
var<workgroup> ks: array<vec4<f32>, BK * RS>;     // [key][d / 4]
var<workgroup> vs: array<vec4<f32>, BK * 16u>;    // [key][dv / 4]
var<workgroup> ps: array<vec4<f32>, BK * PS>;     // [key][row group]: probabilities of 4 rows
var<workgroup> red: array<vec4<f32>, NT>;         // [row group][tx]: per-thread row partials

// 4 consecutive elements (e, e+1, ...) of a row of n valid elements at base, zero past n, as f32.
// VEC: the bindings are vec4 arrays (head sizes and offsets multiples of 4), one 16-byte load.
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

// one staging slot (a vec4 of a key row and of its value row), fetched into registers a block ahead
struct KV { k: vec4<f32>, v: vec4<f32> }
const NL: u32 = BK * 16u / NT;        // slots per thread (1, 2 or 4)

fn fetch(kbase: u32, vbase: u32, j0: u32, e: u32) -> KV {
  let r = e / 16u;
  let c4 = e % 16u;
  var f = KV(vec4<f32>(0.0), vec4<f32>(0.0));
  if (j0 + r < p.lk) {
    f.k = ld_k(kbase + (j0 + r) * D, c4 * 4u, D);
    f.v = ld_v(vbase + (j0 + r) * DV, c4 * 4u, DV);
  }
  return f;
}

fn put(f: KV, e: u32) {
  let r = e / 16u;
  let c4 = e % 16u;
  ks[r * RS + c4] = f.k;
  vs[r * 16u + c4] = f.v;
}

// scores s (lanes: the thread's 4 rows, local rows lr0..lr0+3) against key j, NEG where not allowed
fn mask4(s: vec4<f32>, lr0: u32, j: u32, mb: u32) -> vec4<f32> {
  var r = s;
  for (var i = 0u; i < 4u; i = i + 1u) {
    let lr = lr0 + i;
    if (j >= p.lk || lr >= p.nrows || !allowed(p.r0 + lr, j, mb)) { r[i] = NEG; }
  }
  return r;
}

fn dot4(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(dot(a0, b), dot(a1, b), dot(a2, b), dot(a3, b));
}

@compute @workgroup_size({{NT}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nqb) { return; }
  let bl = wid / p.nqb;
  let qb = wid % p.nqb;
  let tx = t % 16u;
  let ty = t / 16u;
  let q0 = qb * BQ;                       // first local query row of the block
  let lr0 = q0 + 4u * ty;                 // first local row of this thread
  let mb = mask_base(p.bh0 + bl);
  let qbase = p.qoff + bl * p.nrows * D;
  let kbase = p.koff + bl * p.lk * D;
  let vbase = p.voff + bl * p.lk * DV;
  // the query block, pre-scaled (scale * log2 e), zero past the rows and the head size
  for (var e = t; e < BQ * 16u; e = e + NT) {
    let r = e / 16u;
    let c4 = e % 16u;
    var x = vec4<f32>(0.0);
    if (q0 + r < p.nrows) { x = ld_q(qbase + (q0 + r) * D, c4 * 4u, D) * p.scale; }
    qs[r * RS + c4] = x;
  }
  // keys this block can see: every key, or (causal) up to its last row + coff
  var kend = p.lk;
  if (CAUSAL) {
    let last = i32(p.r0 + min(q0 + BQ, p.nrows)) - 1;
    kend = u32(clamp(last + p.coff + 1, 0, i32(p.lk)));
  }
  var m = vec4<f32>(NEG);
  var l = vec4<f32>(0.0);
  var o0 = vec4<f32>(0.0);
  var o1 = vec4<f32>(0.0);
  var o2 = vec4<f32>(0.0);
  var o3 = vec4<f32>(0.0);
  var f0 = KV(vec4<f32>(0.0), vec4<f32>(0.0));
  var f1 = f0;
  var f2 = f0;
  var f3 = f0;
  if (kend > 0u) {
    f0 = fetch(kbase, vbase, 0u, t);
    if (NL > 1u) { f1 = fetch(kbase, vbase, 0u, t + NT); }
    if (NL > 2u) { f2 = fetch(kbase, vbase, 0u, t + 2u * NT); f3 = fetch(kbase, vbase, 0u, t + 3u * NT); }
  }
  for (var j0 = 0u; j0 < kend; j0 = j0 + BK) {
    workgroupBarrier();
    put(f0, t);
    if (NL > 1u) { put(f1, t + NT); }
    if (NL > 2u) { put(f2, t + 2u * NT); put(f3, t + 3u * NT); }
    workgroupBarrier();
    // the next block's loads are in flight while this one is computed
    let jn = j0 + BK;
    if (jn < kend) {
      f0 = fetch(kbase, vbase, jn, t);
      if (NL > 1u) { f1 = fetch(kbase, vbase, jn, t + NT); }
      if (NL > 2u) { f2 = fetch(kbase, vbase, jn, t + 2u * NT); f3 = fetch(kbase, vbase, jn, t + 3u * NT); }
    }
    var s0 = vec4<f32>(0.0);
#if K2
    var s1 = vec4<f32>(0.0);
#endif
    for (var d = 0u; d < D4; d = d + 1u) {
      let a0 = qs[(4u * ty) * RS + d];
      let a1 = qs[(4u * ty + 1u) * RS + d];
      let a2 = qs[(4u * ty + 2u) * RS + d];
      let a3 = qs[(4u * ty + 3u) * RS + d];
      s0 = s0 + dot4(a0, a1, a2, a3, ks[tx * RS + d]);
#if K2
      s1 = s1 + dot4(a0, a1, a2, a3, ks[(tx + 16u) * RS + d]);
#endif
    }
    // the per-element mask only where the block needs it (uniform over the workgroup)
    var need = MASKED || j0 + BK > p.lk || q0 + BQ > p.nrows;
    if (CAUSAL) { need = need || i32(j0 + BK) - 1 > i32(p.r0 + q0) + p.coff; }
    if (need) {
      s0 = mask4(s0, lr0, j0 + tx, mb);
#if K2
      s1 = mask4(s1, lr0, j0 + tx + 16u, mb);
#endif
    }
    var pm = s0;
#if K2
    pm = max(pm, s1);
#endif
    red[ty * 16u + tx] = pm;
    workgroupBarrier();
    var mn = m;
    for (var x = 0u; x < 16u; x = x + 1u) { mn = max(mn, red[ty * 16u + x]); }
    let mm = select(mn, vec4<f32>(0.0), mn <= vec4<f32>(NEG));
    let corr = exp2(m - mm);
    m = mn;
    // the row sums take the probabilities before dropout; the values get the dropped ones
    let p0 = exp2(s0 - mm);
#if DROP
    ps[tx * PS + ty] = p0 * keep_rows(p.bh0 + bl, p.r0 + lr0, j0 + tx);
#else
    ps[tx * PS + ty] = p0;
#endif
    var ls = p0;
#if K2
    let p1 = exp2(s1 - mm);
#if DROP
    ps[(tx + 16u) * PS + ty] = p1 * keep_rows(p.bh0 + bl, p.r0 + lr0, j0 + tx + 16u);
#else
    ps[(tx + 16u) * PS + ty] = p1;
#endif
    ls = ls + p1;
#endif
    l = l * corr + ls;
    o0 = o0 * corr.x;
    o1 = o1 * corr.y;
    o2 = o2 * corr.z;
    o3 = o3 * corr.w;
    workgroupBarrier();
    for (var c = 0u; c < BK; c = c + 1u) {
      let pc = ps[c * PS + ty];
      let vv = vs[c * 16u + tx];
      o0 = o0 + pc.x * vv;
      o1 = o1 + pc.y * vv;
      o2 = o2 + pc.z * vv;
      o3 = o3 + pc.w * vv;
    }
  }
  // the row sums: the 16 threads of a row group, in tx order
  workgroupBarrier();
  red[ty * 16u + tx] = l;
  workgroupBarrier();
  var lt = vec4<f32>(0.0);
  for (var x = 0u; x < 16u; x = x + 1u) { lt = lt + red[ty * 16u + x]; }
  let obase = p.ooff + bl * p.nrows * DV;
  for (var i = 0u; i < 4u; i = i + 1u) {
    let lr = lr0 + i;
    if (lr >= p.nrows) { continue; }
    var oi = o0;
    if (i == 1u) { oi = o1; }
    if (i == 2u) { oi = o2; }
    if (i == 3u) { oi = o3; }
    let li = lt[i];
    let inv = select(0.0, 1.0 / li, li > 0.0);
#if VEC
    if (4u * tx < DV) { o[(obase + lr * DV + 4u * tx) >> 2u] = TB(oi * inv); }
#else
    for (var c = 0u; c < 4u; c = c + 1u) {
      let col = 4u * tx + c;
      if (col < DV) { o[obase + lr * DV + col] = {{T}}(oi[c] * inv); }
    }
#endif
    if (tx == 0u) {
      lse[p.loff + bl * p.nrows + lr] = select(bitcast<f32>(p.neg_inf), m[i] * 0.6931471805599453 + log(li), li > 0.0);
    }
  }
}
