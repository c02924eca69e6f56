// Flash-attention backward, register-tiled, FlashAttention-2's split (the launcher keeps this header
// and one `//=== name` section; the (lse, delta) pre-pass is the `stats` kernel of attention_bwd.wgsl):
//   dkdv: one workgroup per (head, block of 4 TY key rows); thread (ty, tx) owns keys 4 ty .. + 3 and
//         loops over staged blocks of 16 CK query rows: P^T and dS^T of its keys against queries
//         tx + 16 c in named vec4s (lanes = its 4 keys), then dv += P^T dout, dk += dS^T q on the
//         columns 4 tx .. + 3 through workgroup memory;
//   dq:   one workgroup per (head, block of 4 TY query rows); thread (ty, tx) owns rows 4 ty .. + 3,
//         loops over staged key blocks of 16 CK keys: dq += dS k. It computes delta = rowsum(dout * out)
//         itself (the stats live in the dq region, which it overwrites).
// with p = exp2(s * scale * log2 e - lse * log2 e) on allowed pairs, ds = p * (dout . v - delta), and
// the gradients' factor `scale` applied once at the end. With DROP (attention.wgsl:dropout) the same
// keep factors z as the forward: dv += (p z)^T dout, ds = p * (z (dout . v) - delta). Tiles are f32 vec4 rows in workgroup memory
// (head size padded to 64 with zeros, rows strided 17 vec4). Causal blocks that see nothing are never
// visited; the per-element mask runs only on blocks that need it. Fixed summation order, no atomics.
{{ENABLE}}
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const D4: u32 = (D + 3u) / 4u;
const V4: u32 = (DV + 3u) / 4u;
const TY: u32 = {{TY}}u;
const BR: u32 = 4u * TY;              // rows owned by a workgroup (query rows in dq, key rows in dkdv)
const CK: u32 = {{CK}}u;
const BC: u32 = 16u * CK;             // rows of the other operand staged per step
const NT: u32 = 16u * TY;
const RS: u32 = 17u;
const PS: u32 = TY + 1u;
const CAUSAL: bool = {{CAUSAL}};
const MASKED: bool = {{MASKED}};
const NEG: f32 = -3.0e38;
#if VEC
alias TB = vec4<{{T}}>;               // element type of the q/k/v/out/gradient bindings: 16-byte rows
#else
alias TB = {{T}};
#endif
const LOG2E: f32 = 1.4426950408889634;

struct Params {
  nbh: u32, lq: u32, lk: u32, nrows: u32,      // heads in this chunk, full lengths, query rows per head here
  r0: u32, nblk: u32, coff: i32, accum: u32,   // first query row, owned blocks per head, Lk - Lq, add into dk/dv
  scale: f32, qoff: u32, koff: u32, voff: u32, // scale * log2(e); element offsets inside the bindings
  ooff: u32, loff: u32, doff: u32, goff: u32,  // out, lse, dout, first gradient output (dq or dk)
  g2off: u32, soff: u32, moff: u32, bh0: u32,  // dv, stats, mask (window offset - footprint low), first head
  msq: u32, msk: u32, mrank: u32, nscale: f32, // nscale: the attention scale itself
  mshape: vec4<u32>, mstride: vec4<u32>,
  dctr: vec4<u32>, dprob: vec4<f32>,           // dropout: word offset (lo, hi), Philox key; (p, 1 / (1 - p))
}
@group(0) @binding(0) var<uniform> p: Params;

fn dot4(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(dot(a0, b), dot(a1, b), dot(a2, b), dot(a3, b));
}

//=== dq
@group(0) @binding(1) var<storage, read_write> q: array<TB>;
@group(0) @binding(2) var<storage, read_write> k: array<TB>;
@group(0) @binding(3) var<storage, read_write> v: array<TB>;
@group(0) @binding(4) var<storage, read_write> o: array<TB>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> dout: array<TB>;
@group(0) @binding(7) var<storage, read_write> dq: array<TB>;
#include attention:mask
#if DROP
#include attention:dropout
#endif

var<workgroup> qs: array<vec4<f32>, BR * RS>;     // [query row][d / 4], pre-scaled
var<workgroup> gs: array<vec4<f32>, BR * RS>;     // dout rows
var<workgroup> ks: array<vec4<f32>, BC * RS>;
var<workgroup> vs: array<vec4<f32>, BC * RS>;
var<workgroup> dss: array<vec4<f32>, BC * PS>;    // [key][row group]
var<workgroup> st: array<vec2<f32>, BR>;          // (lse * log2 e, delta) of the block's rows

// 4 consecutive elements (e, e+1, ...) of a row of n valid elements at base of binding `which`
// (0 q, 1 k, 2 v, 3 out, 4 dout), zero past n; VEC: one 16-byte load from a vec4 binding
fn ld4(which: u32, base: u32, e: u32, n: u32) -> vec4<f32> {
  var r = vec4<f32>(0.0);
#if VEC
  if (e < n) {
    let a = (base + e) >> 2u;
    if (which == 0u) { r = vec4<f32>(q[a]); }
    else if (which == 1u) { r = vec4<f32>(k[a]); }
    else if (which == 2u) { r = vec4<f32>(v[a]); }
    else if (which == 3u) { r = vec4<f32>(o[a]); }
    else { r = vec4<f32>(dout[a]); }
  }
#else
  for (var i = 0u; i < 4u; i = i + 1u) {
    if (e + i < n) {
      let a = base + e + i;
      if (which == 0u) { r[i] = f32(q[a]); }
      else if (which == 1u) { r[i] = f32(k[a]); }
      else if (which == 2u) { r[i] = f32(v[a]); }
      else if (which == 3u) { r[i] = f32(o[a]); }
      else { r[i] = f32(dout[a]); }
    }
  }
#endif
  return r;
}

// one staging slot (a vec4 of two rows), fetched into registers a block ahead
struct Slot { a: vec4<f32>, b: vec4<f32> }
const NL: u32 = BC * 16u / NT;        // slots per thread (1, 2 or 4)

fn fetch(kbase: u32, vbase: u32, j0: u32, e: u32) -> Slot {
  let r = e / 16u;
  let c4 = e % 16u;
  var f = Slot(vec4<f32>(0.0), vec4<f32>(0.0));
  if (j0 + r < p.lk) {
    f.a = ld4(1u, kbase + (j0 + r) * D, c4 * 4u, D);
    f.b = ld4(2u, vbase + (j0 + r) * DV, c4 * 4u, DV);
  }
  return f;
}

fn put(f: Slot, e: u32) {
  let r = e / 16u;
  let c4 = e % 16u;
  ks[r * RS + c4] = f.a;
  vs[r * RS + c4] = f.b;
}

fn mask4(s: vec4<f32>, lr0: u32, j: u32, mb: u32) -> vec4<f32> {
  var r = s;
  for (var i = 0u; i < 4u; i = i + 1u) {
    let lr = lr0 + i;
    if (j >= p.lk || lr >= p.nrows || !allowed(p.r0 + lr, j, mb)) { r[i] = NEG; }
  }
  return r;
}

@compute @workgroup_size({{NT}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nblk) { return; }
  let bl = wid / p.nblk;
  let qb = wid % p.nblk;
  let tx = t % 16u;
  let ty = t / 16u;
  let q0 = qb * BR;
  let lr0 = q0 + 4u * ty;
  let mb = mask_base(p.bh0 + bl);
  let rbase = bl * p.nrows;
  let kbase = p.koff + bl * p.lk * D;
  let vbase = p.voff + bl * p.lk * DV;
  for (var e = t; e < BR * 16u; e = e + NT) {
    let r = e / 16u;
    let c4 = e % 16u;
    var xq = vec4<f32>(0.0);
    var xg = vec4<f32>(0.0);
    if (q0 + r < p.nrows) {
      xq = ld4(0u, p.qoff + (rbase + q0 + r) * D, c4 * 4u, D) * p.scale;
      xg = ld4(4u, p.doff + (rbase + q0 + r) * DV, c4 * 4u, DV);
    }
    qs[r * RS + c4] = xq;
    gs[r * RS + c4] = xg;
  }
  workgroupBarrier();
  if (t < BR) {
    var sv = vec2<f32>(0.0);
    if (q0 + t < p.nrows) {
      let ri = rbase + q0 + t;
      var dl = 0.0;
      for (var d = 0u; d < V4; d = d + 1u) { dl = dl + dot(gs[t * RS + d], ld4(3u, p.ooff + ri * DV, d * 4u, DV)); }
      sv = vec2<f32>(lse[p.loff + ri] * LOG2E, dl);
    }
    st[t] = sv;
  }
  workgroupBarrier();
  let lse4 = vec4<f32>(st[4u * ty].x, st[4u * ty + 1u].x, st[4u * ty + 2u].x, st[4u * ty + 3u].x);
  let dl4 = vec4<f32>(st[4u * ty].y, st[4u * ty + 1u].y, st[4u * ty + 2u].y, st[4u * ty + 3u].y);
  var kend = p.lk;
  if (CAUSAL) {
    let last = i32(p.r0 + min(q0 + BR, p.nrows)) - 1;
    kend = u32(clamp(last + p.coff + 1, 0, i32(p.lk)));
  }
  var a0 = vec4<f32>(0.0);
  var a1 = vec4<f32>(0.0);
  var a2 = vec4<f32>(0.0);
  var a3 = vec4<f32>(0.0);
  var f0 = Slot(vec4<f32>(0.0), vec4<f32>(0.0));
  var f1 = f0;
  var f2 = f0;
  var f3 = f0;
  if (kend > 0u) {
    f0 = fetch(kbase, vbase, 0u, t);
    if (NL > 1u) { f1 = fetch(kbase, vbase, 0u, t + NT); }
    if (NL > 2u) { f2 = fetch(kbase, vbase, 0u, t + 2u * NT); f3 = fetch(kbase, vbase, 0u, t + 3u * NT); }
  }
  for (var j0 = 0u; j0 < kend; j0 = j0 + BC) {
    workgroupBarrier();
    put(f0, t);
    if (NL > 1u) { put(f1, t + NT); }
    if (NL > 2u) { put(f2, t + 2u * NT); put(f3, t + 3u * NT); }
    workgroupBarrier();
    let jn = j0 + BC;
    if (jn < kend) {
      f0 = fetch(kbase, vbase, jn, t);
      if (NL > 1u) { f1 = fetch(kbase, vbase, jn, t + NT); }
      if (NL > 2u) { f2 = fetch(kbase, vbase, jn, t + 2u * NT); f3 = fetch(kbase, vbase, jn, t + 3u * NT); }
    }
    var s0 = vec4<f32>(0.0);
    var g0 = vec4<f32>(0.0);
#if K2
    var s1 = vec4<f32>(0.0);
    var g1 = vec4<f32>(0.0);
#endif
    for (var d = 0u; d < D4; d = d + 1u) {
      let b0 = qs[(4u * ty) * RS + d];
      let b1 = qs[(4u * ty + 1u) * RS + d];
      let b2 = qs[(4u * ty + 2u) * RS + d];
      let b3 = qs[(4u * ty + 3u) * RS + d];
      s0 = s0 + dot4(b0, b1, b2, b3, ks[tx * RS + d]);
#if K2
      s1 = s1 + dot4(b0, b1, b2, b3, ks[(tx + 16u) * RS + d]);
#endif
    }
    for (var d = 0u; d < V4; d = d + 1u) {
      let b0 = gs[(4u * ty) * RS + d];
      let b1 = gs[(4u * ty + 1u) * RS + d];
      let b2 = gs[(4u * ty + 2u) * RS + d];
      let b3 = gs[(4u * ty + 3u) * RS + d];
      g0 = g0 + dot4(b0, b1, b2, b3, vs[tx * RS + d]);
#if K2
      g1 = g1 + dot4(b0, b1, b2, b3, vs[(tx + 16u) * RS + d]);
#endif
    }
    var need = MASKED || j0 + BC > p.lk || q0 + BR > p.nrows;
    if (CAUSAL) { need = need || i32(j0 + BC) - 1 > i32(p.r0 + q0) + p.coff; }
    if (need) {
      s0 = mask4(s0, lr0, j0 + tx, mb);
#if K2
      s1 = mask4(s1, lr0, j0 + tx + 16u, mb);
#endif
    }
#if DROP
    g0 = g0 * keep_rows(p.bh0 + bl, p.r0 + lr0, j0 + tx);
#if K2
    g1 = g1 * keep_rows(p.bh0 + bl, p.r0 + lr0, j0 + tx + 16u);
#endif
#endif
    let p0 = select(exp2(s0 - lse4), vec4<f32>(0.0), s0 <= vec4<f32>(NEG));
    dss[tx * PS + ty] = p0 * (g0 - dl4);
#if K2
    let p1 = select(exp2(s1 - lse4), vec4<f32>(0.0), s1 <= vec4<f32>(NEG));
    dss[(tx + 16u) * PS + ty] = p1 * (g1 - dl4);
#endif
    workgroupBarrier();
    for (var c = 0u; c < BC; c = c + 1u) {
      let dc = dss[c * PS + ty];
      let kv = ks[c * RS + tx];
      a0 = a0 + dc.x * kv;
      a1 = a1 + dc.y * kv;
      a2 = a2 + dc.z * kv;
      a3 = a3 + dc.w * kv;
    }
  }
  for (var i = 0u; i < 4u; i = i + 1u) {
    let lr = lr0 + i;
    if (lr >= p.nrows) { continue; }
    var ai = a0;
    if (i == 1u) { ai = a1; }
    if (i == 2u) { ai = a2; }
    if (i == 3u) { ai = a3; }
#if VEC
    if (4u * tx < D) { dq[(p.goff + (rbase + lr) * D + 4u * tx) >> 2u] = TB(ai * p.nscale); }
#else
    for (var c = 0u; c < 4u; c = c + 1u) {
      let col = 4u * tx + c;
      if (col < D) { dq[p.goff + (rbase + lr) * D + col] = {{T}}(ai[c] * p.nscale); }
    }
#endif
  }
}

//=== dkdv
@group(0) @binding(1) var<storage, read_write> q: array<TB>;
@group(0) @binding(2) var<storage, read_write> k: array<TB>;
@group(0) @binding(3) var<storage, read_write> v: array<TB>;
@group(0) @binding(4) var<storage, read_write> stats: array<f32>;
@group(0) @binding(5) var<storage, read_write> dout: array<TB>;
@group(0) @binding(6) var<storage, read_write> dk: array<TB>;
@group(0) @binding(7) var<storage, read_write> dv: array<TB>;
#include attention:mask
#if DROP
#include attention:dropout
#endif

var<workgroup> ks: array<vec4<f32>, BR * RS>;     // [key][d / 4], pre-scaled
var<workgroup> vs: array<vec4<f32>, BR * RS>;
var<workgroup> qs: array<vec4<f32>, BC * RS>;     // [query row][d / 4]
var<workgroup> gs: array<vec4<f32>, BC * RS>;     // dout rows
var<workgroup> pt: array<vec4<f32>, BC * PS>;     // [query][key group]: P^T of 4 keys
var<workgroup> dst: array<vec4<f32>, BC * PS>;    // dS^T likewise
var<workgroup> st: array<vec2<f32>, BC>;          // (lse * log2 e, delta) of the staged query rows

// as in dq: binding `which` (0 q, 1 k, 2 v, 3 dout)
fn ld4(which: u32, base: u32, e: u32, n: u32) -> vec4<f32> {
  var r = vec4<f32>(0.0);
#if VEC
  if (e < n) {
    let a = (base + e) >> 2u;
    if (which == 0u) { r = vec4<f32>(q[a]); }
    else if (which == 1u) { r = vec4<f32>(k[a]); }
    else if (which == 2u) { r = vec4<f32>(v[a]); }
    else { r = vec4<f32>(dout[a]); }
  }
#else
  for (var i = 0u; i < 4u; i = i + 1u) {
    if (e + i < n) {
      let a = base + e + i;
      if (which == 0u) { r[i] = f32(q[a]); }
      else if (which == 1u) { r[i] = f32(k[a]); }
      else if (which == 2u) { r[i] = f32(v[a]); }
      else { r[i] = f32(dout[a]); }
    }
  }
#endif
  return r;
}

struct Slot { a: vec4<f32>, b: vec4<f32> }
const NL: u32 = BC * 16u / NT;

// a vec4 of a query row and of its dout row (local rows i0 ..), fetched a block ahead
fn fetch(rbase: u32, i0: u32, e: u32) -> Slot {
  let r = e / 16u;
  let c4 = e % 16u;
  var f = Slot(vec4<f32>(0.0), vec4<f32>(0.0));
  if (i0 + r < p.nrows) {
    f.a = ld4(0u, p.qoff + (rbase + i0 + r) * D, c4 * 4u, D);
    f.b = ld4(3u, p.doff + (rbase + i0 + r) * DV, c4 * 4u, DV);
  }
  return f;
}

fn put(f: Slot, e: u32) {
  let r = e / 16u;
  let c4 = e % 16u;
  qs[r * RS + c4] = f.a;
  gs[r * RS + c4] = f.b;
}

fn fetch_st(rbase: u32, i0: u32, t: u32) -> vec2<f32> {
  var sv = vec2<f32>(0.0);
  if (t < BC && i0 + t < p.nrows) {
    let si = p.soff + 2u * (rbase + i0 + t);
    sv = vec2<f32>(stats[si] * LOG2E, stats[si + 1u]);
  }
  return sv;
}

// scores of keys kj0 .. kj0 + 3 (the lanes) against local query row qi, NEG where not allowed
fn mask4t(s: vec4<f32>, qi: u32, kj0: u32, mb: u32) -> vec4<f32> {
  var r = s;
  for (var i = 0u; i < 4u; i = i + 1u) {
    let j = kj0 + i;
    if (qi >= p.nrows || j >= p.lk || !allowed(p.r0 + qi, j, mb)) { r[i] = NEG; }
  }
  return r;
}

@compute @workgroup_size({{NT}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nblk) { return; }
  let bl = wid / p.nblk;
  let kb0 = (wid % p.nblk) * BR;        // first key of the block
  let tx = t % 16u;
  let ty = t / 16u;
  let kj0 = kb0 + 4u * ty;               // first key of this thread
  let mb = mask_base(p.bh0 + bl);
  let rbase = bl * p.nrows;
  for (var e = t; e < BR * 16u; e = e + NT) {
    let r = e / 16u;
    let c4 = e % 16u;
    var xk = vec4<f32>(0.0);
    var xv = vec4<f32>(0.0);
    if (kb0 + r < p.lk) {
      xk = ld4(1u, p.koff + (bl * p.lk + kb0 + r) * D, c4 * 4u, D) * p.scale;
      xv = ld4(2u, p.voff + (bl * p.lk + kb0 + r) * DV, c4 * 4u, DV);
    }
    ks[r * RS + c4] = xk;
    vs[r * RS + c4] = xv;
  }
  var k0 = vec4<f32>(0.0);
  var k1 = vec4<f32>(0.0);
  var k2 = vec4<f32>(0.0);
  var k3 = vec4<f32>(0.0);
  var v0 = vec4<f32>(0.0);
  var v1 = vec4<f32>(0.0);
  var v2 = vec4<f32>(0.0);
  var v3 = vec4<f32>(0.0);
  // query rows of this chunk that can see a key of this block (causal: i >= j - coff)
  var i0 = 0u;
  if (CAUSAL) { i0 = u32(clamp(i32(kb0) - p.coff - i32(p.r0), 0, i32(p.nrows))); }
  var f0 = Slot(vec4<f32>(0.0), vec4<f32>(0.0));
  var f1 = f0;
  var f2 = f0;
  var f3 = f0;
  var fs = vec2<f32>(0.0);
  if (i0 < p.nrows) {
    f0 = fetch(rbase, i0, t);
    if (NL > 1u) { f1 = fetch(rbase, i0, t + NT); }
    if (NL > 2u) { f2 = fetch(rbase, i0, t + 2u * NT); f3 = fetch(rbase, i0, t + 3u * NT); }
    fs = fetch_st(rbase, i0, t);
  }
  for (; i0 < p.nrows; i0 = i0 + BC) {
    workgroupBarrier();
    put(f0, t);
    if (NL > 1u) { put(f1, t + NT); }
    if (NL > 2u) { put(f2, t + 2u * NT); put(f3, t + 3u * NT); }
    if (t < BC) { st[t] = fs; }
    workgroupBarrier();
    let inx = i0 + BC;
    if (inx < p.nrows) {
      f0 = fetch(rbase, inx, t);
      if (NL > 1u) { f1 = fetch(rbase, inx, t + NT); }
      if (NL > 2u) { f2 = fetch(rbase, inx, t + 2u * NT); f3 = fetch(rbase, inx, t + 3u * NT); }
      fs = fetch_st(rbase, inx, t);
    }
    var s0 = vec4<f32>(0.0);
    var g0 = vec4<f32>(0.0);
#if K2
    var s1 = vec4<f32>(0.0);
    var g1 = vec4<f32>(0.0);
#endif
    for (var d = 0u; d < D4; d = d + 1u) {
      let b0 = ks[(4u * ty) * RS + d];
      let b1 = ks[(4u * ty + 1u) * RS + d];
      let b2 = ks[(4u * ty + 2u) * RS + d];
      let b3 = ks[(4u * ty + 3u) * RS + d];
      s0 = s0 + dot4(b0, b1, b2, b3, qs[tx * RS + d]);
#if K2
      s1 = s1 + dot4(b0, b1, b2, b3, qs[(tx + 16u) * RS + d]);
#endif
    }
    for (var d = 0u; d < V4; d = d + 1u) {
      let b0 = vs[(4u * ty) * RS + d];
      let b1 = vs[(4u * ty + 1u) * RS + d];
      let b2 = vs[(4u * ty + 2u) * RS + d];
      let b3 = vs[(4u * ty + 3u) * RS + d];
      g0 = g0 + dot4(b0, b1, b2, b3, gs[tx * RS + d]);
#if K2
      g1 = g1 + dot4(b0, b1, b2, b3, gs[(tx + 16u) * RS + d]);
#endif
    }
    var need = MASKED || i0 + BC > p.nrows;
    if (CAUSAL) { need = need || i32(kb0 + BR) - 1 > i32(p.r0 + i0) + p.coff; }
    if (need) {
      s0 = mask4t(s0, i0 + tx, kj0, mb);
#if K2
      s1 = mask4t(s1, i0 + tx + 16u, kj0, mb);
#endif
    }
    let c0 = st[tx];
    let p0 = select(exp2(s0 - c0.x), vec4<f32>(0.0), s0 <= vec4<f32>(NEG));
#if DROP
    let z0 = keep_keys(p.bh0 + bl, p.r0 + i0 + tx, kj0);
    pt[tx * PS + ty] = p0 * z0;
    dst[tx * PS + ty] = p0 * (g0 * z0 - c0.y);
#else
    pt[tx * PS + ty] = p0;
    dst[tx * PS + ty] = p0 * (g0 - c0.y);
#endif
#if K2
    let c1 = st[tx + 16u];
    let p1 = select(exp2(s1 - c1.x), vec4<f32>(0.0), s1 <= vec4<f32>(NEG));
#if DROP
    let z1 = keep_keys(p.bh0 + bl, p.r0 + i0 + tx + 16u, kj0);
    pt[(tx + 16u) * PS + ty] = p1 * z1;
    dst[(tx + 16u) * PS + ty] = p1 * (g1 * z1 - c1.y);
#else
    pt[(tx + 16u) * PS + ty] = p1;
    dst[(tx + 16u) * PS + ty] = p1 * (g1 - c1.y);
#endif
#endif
    workgroupBarrier();
    for (var c = 0u; c < BC; c = c + 1u) {
      let pc = pt[c * PS + ty];
      let dc = dst[c * PS + ty];
      let gv = gs[c * RS + tx];
      let qv = qs[c * RS + tx];
      v0 = v0 + pc.x * gv;
      v1 = v1 + pc.y * gv;
      v2 = v2 + pc.z * gv;
      v3 = v3 + pc.w * gv;
      k0 = k0 + dc.x * qv;
      k1 = k1 + dc.y * qv;
      k2 = k2 + dc.z * qv;
      k3 = k3 + dc.w * qv;
    }
  }
  for (var i = 0u; i < 4u; i = i + 1u) {
    let j = kj0 + i;
    if (j >= p.lk) { continue; }
    var ki = k0;
    var vi = v0;
    if (i == 1u) { ki = k1; vi = v1; }
    if (i == 2u) { ki = k2; vi = v2; }
    if (i == 3u) { ki = k3; vi = v3; }
#if VEC
    if (4u * tx < D) {
      let a = (p.goff + (bl * p.lk + j) * D + 4u * tx) >> 2u;
      var x = ki * p.nscale;
      if (p.accum != 0u) { x = x + vec4<f32>(dk[a]); }
      dk[a] = TB(x);
    }
    if (4u * tx < DV) {
      let a = (p.g2off + (bl * p.lk + j) * DV + 4u * tx) >> 2u;
      var x = vi;
      if (p.accum != 0u) { x = x + vec4<f32>(dv[a]); }
      dv[a] = TB(x);
    }
#else
    for (var c = 0u; c < 4u; c = c + 1u) {
      let col = 4u * tx + c;
      if (col < D) {
        let a = p.goff + (bl * p.lk + j) * D + col;
        var x = ki[c] * p.nscale;
        if (p.accum != 0u) { x = x + f32(dk[a]); }
        dk[a] = {{T}}(x);
      }
      if (col < DV) {
        let a = p.g2off + (bl * p.lk + j) * DV + col;
        var x = vi[c];
        if (p.accum != 0u) { x = x + f32(dv[a]); }
        dv[a] = {{T}}(x);
      }
    }
#endif
  }
}
