// Flash-attention backward with larger register tiles (the launcher keeps this header and one
// `//=== name` section; the (lse, delta) pre-pass is attention_bwd.wgsl's `stats` kernel, as for
// flash_bwd.wgsl, whose math and dropout this follows exactly):
//   dkdv: one workgroup per (head, block of BR = 4 RG NY keys), 8 x NY threads. Thread (ty, tx) owns
//         the keys of key groups ty + g NY (g < RG; 4 keys, the lanes of a vec4) and, of every staged
//         block of BC = 32 CG query rows, the rows tx + 8 j (j < 4 CG): P^T and dP^T of its keys
//         against those rows in NAMED vec4s (dot products over vec4s of the K / V rows, broadcast to
//         the 8 threads of a row group, and of the Q / dout rows), then dv += (P z)^T dout and
//         dk += dS^T q on its keys x columns 4 (tx + 8 c), c < CV, in NAMED vec4s, through P^T and dS^T
//         in workgroup memory ([query][key group]).
//   dq:   one workgroup per (head, block of BR = 4 RG NY query rows): rows of row groups ty + g NY,
//         keys tx + 8 j of every staged key block of BC = 32 CG keys; S and dP in NAMED vec4s, then
//         dq += dS k on columns 4 (tx + 8 c). It computes delta = rowsum(dout * out) itself (the
//         stats live in the dq region, which it overwrites).
// All rows in workgroup memory have an odd vec4 stride RS (the 8 threads of a row group read 8 rows
// in different banks). The unrolled per-thread code is assembled by attention_op.py. Causal blocks
// that see nothing are never visited; the per-element mask runs only on blocks that need it. Fixed
// summation order, no atomics.
{{ENABLE}}
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const D4: u32 = (D + 3u) / 4u;
const V4: u32 = (DV + 3u) / 4u;
const RG: u32 = {{RG}}u;
const CG: u32 = {{CG}}u;
const CV: u32 = {{CV}}u;
const NY: u32 = {{NY}}u;
const NT: u32 = 8u * NY;
const BR4: u32 = RG * NY;
const BR: u32 = 4u * BR4;             // owned rows (keys in dkdv, query rows in dq)
const BC: u32 = 32u * CG;             // staged rows of the other operand per step
const RS: u32 = {{RS}}u;              // odd vec4 stride of a staged row (>= max(D4, V4))
const PS: u32 = BR4 + 1u;
const CAUSAL: bool = {{CAUSAL}};
const MASKED: bool = {{MASKED}};
const NEG: f32 = -3.0e38;
#if VEC
alias TB = vec4<{{T}}>;
#else
alias TB = {{T}};
#endif
const LOG2E: f32 = 1.4426950408889634;

struct Params {
  nbh: u32, lq: u32, lk: u32, nrows: u32,
  r0: u32, nblk: u32, coff: i32, accum: u32,
  scale: f32, qoff: u32, koff: u32, voff: u32,
  ooff: u32, loff: u32, doff: u32, goff: u32,
  g2off: u32, soff: u32, moff: u32, bh0: u32,
  msq: u32, msk: u32, mrank: u32, nscale: f32,
  mshape: vec4<u32>, mstride: vec4<u32>,
  dctr: vec4<u32>, dprob: vec4<f32>,
}
@group(0) @binding(0) var<uniform> p: Params;

fn dot4(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(dot(a0, b), dot(a1, b), dot(a2, b), dot(a3, b));
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

var<workgroup> ks: array<vec4<f32>, BR * RS>;     // owned key rows, pre-scaled (scale * log2 e)
var<workgroup> vs: array<vec4<f32>, BR * RS>;
var<workgroup> qs: array<vec4<f32>, BC * RS>;     // staged query rows
var<workgroup> gs: array<vec4<f32>, BC * RS>;     // their dout rows
var<workgroup> pt: array<vec4<f32>, BC * PS>;     // [query][key group]: (P z)^T of 4 keys
var<workgroup> dst: array<vec4<f32>, BC * PS>;    // dS^T likewise
var<workgroup> st: array<vec2<f32>, BC>;          // (lse * log2 e, delta) of the staged query rows

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

// scores of keys kj0 .. kj0 + 3 (the lanes) against local query row qi, NEG where not allowed
fn mask4t(s: vec4<f32>, qi: u32, kj0: u32, mb: u32) -> vec4<f32> {
  var r = s;
  for (var i = 0u; i < 4u; i = i + 1u) {
    let j = kj0 + i;
    if (qi >= p.nrows || j >= p.lk || !allowed(p.r0 + qi, j, mb)) { r[i] = NEG; }
  }
  return r;
}

// the gradients of key j (global row bl * lk + j): columns 4 (tx + 8 c) of xk (dk) and xv (dv)
fn store_key(bl: u32, j: u32, tx: u32, xk0: vec4<f32>, xk1: vec4<f32>, xv0: vec4<f32>, xv1: vec4<f32>) {
  if (j >= p.lk) { return; }
  let row = bl * p.lk + j;
  for (var c = 0u; c < CV; c = c + 1u) {
    var xk = xk0;
    var xv = xv0;
    if (c == 1u) { xk = xk1; xv = xv1; }
    xk = xk * p.nscale;
    let col = 4u * (tx + 8u * c);
#if VEC
    if (col < D) {
      let a = (p.goff + row * D + col) >> 2u;
      if (p.accum != 0u) { xk = xk + vec4<f32>(dk[a]); }
      dk[a] = TB(xk);
    }
    if (col < DV) {
      let a = (p.g2off + row * DV + col) >> 2u;
      if (p.accum != 0u) { xv = xv + vec4<f32>(dv[a]); }
      dv[a] = TB(xv);
    }
#else
    for (var i = 0u; i < 4u; i = i + 1u) {
      if (col + i < D) {
        let a = p.goff + row * D + col + i;
        var x = xk[i];
        if (p.accum != 0u) { x = x + f32(dk[a]); }
        dk[a] = {{T}}(x);
      }
      if (col + i < DV) {
        let a = p.g2off + row * DV + col + i;
        var x = xv[i];
        if (p.accum != 0u) { x = x + f32(dv[a]); }
        dv[a] = {{T}}(x);
      }
    }
#endif
  }
}

@compute @workgroup_size({{NT}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nblk) { return; }
  let bl = wid / p.nblk;
  let kb0 = (wid % p.nblk) * BR;
  let tx = t % 8u;
  let ty = t / 8u;
  let mb = mask_base(p.bh0 + bl);
  let rbase = bl * p.nrows;
  for (var e = t; e < BR * RS; e = e + NT) {
    let r = e / RS;
    let c4 = e % RS;
    var xk = vec4<f32>(0.0);
    var xv = vec4<f32>(0.0);
    if (kb0 + r < p.lk) {
      xk = ld4(1u, p.koff + (bl * p.lk + kb0 + r) * D, c4 * 4u, D) * p.scale;
      xv = ld4(2u, p.voff + (bl * p.lk + kb0 + r) * DV, c4 * 4u, DV);
    }
    ks[e] = xk;
    vs[e] = xv;
  }
  {{DECL}}
  var i0 = 0u;
  if (CAUSAL) { i0 = u32(clamp(i32(kb0) - p.coff - i32(p.r0), 0, i32(p.nrows))); }
  for (; i0 < p.nrows; i0 = i0 + BC) {
    workgroupBarrier();
    for (var e = t; e < BC * RS; e = e + NT) {
      let r = e / RS;
      let c4 = e % RS;
      var xq = vec4<f32>(0.0);
      var xg = vec4<f32>(0.0);
      if (i0 + r < p.nrows) {
        xq = ld4(0u, p.qoff + (rbase + i0 + r) * D, c4 * 4u, D);
        xg = ld4(3u, p.doff + (rbase + i0 + r) * DV, c4 * 4u, DV);
      }
      qs[e] = xq;
      gs[e] = xg;
    }
    for (var e = t; e < BC; e = e + NT) {
      var sv = vec2<f32>(0.0);
      if (i0 + e < p.nrows) {
        let si = p.soff + 2u * (rbase + i0 + e);
        sv = vec2<f32>(stats[si] * LOG2E, stats[si + 1u]);
      }
      st[e] = sv;
    }
    workgroupBarrier();
    {{SCORES}}
    var need = MASKED || i0 + BC > p.nrows;
    if (CAUSAL) { need = need || i32(kb0 + BR) - 1 > i32(p.r0 + i0) + p.coff; }
    if (need) {
      {{MASK}}
    }
    {{PROBS}}
    workgroupBarrier();
    for (var c = 0u; c < BC; c = c + 1u) {
      {{UPDATE}}
    }
  }
  {{STORE}}
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

var<workgroup> qs: array<vec4<f32>, BR * RS>;     // owned query rows, pre-scaled
var<workgroup> gs: array<vec4<f32>, BR * RS>;     // their dout rows
var<workgroup> ks: array<vec4<f32>, BC * RS>;     // staged key rows
var<workgroup> vs: array<vec4<f32>, BC * RS>;
var<workgroup> dss: array<vec4<f32>, BC * PS>;    // [key][row group]: dS of 4 rows
var<workgroup> st: array<vec2<f32>, BR>;          // (lse * log2 e, delta) of the owned rows

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

fn mask4(s: vec4<f32>, lr0: u32, j: u32, mb: u32) -> vec4<f32> {
  var r = s;
  for (var i = 0u; i < 4u; i = i + 1u) {
    let lr = lr0 + i;
    if (j >= p.lk || lr >= p.nrows || !allowed(p.r0 + lr, j, mb)) { r[i] = NEG; }
  }
  return r;
}

// row lr's gradient: columns 4 (tx + 8 c) of x0 / x1, times the attention scale
fn store_row(rbase: u32, lr: u32, tx: u32, x0: vec4<f32>, x1: vec4<f32>) {
  if (lr >= p.nrows) { return; }
  for (var c = 0u; c < CV; c = c + 1u) {
    var x = x0;
    if (c == 1u) { x = x1; }
    x = x * p.nscale;
    let col = 4u * (tx + 8u * c);
#if VEC
    if (col < D) { dq[(p.goff + (rbase + lr) * D + col) >> 2u] = TB(x); }
#else
    for (var i = 0u; i < 4u; i = i + 1u) {
      if (col + i < D) { dq[p.goff + (rbase + lr) * D + col + i] = {{T}}(x[i]); }
    }
#endif
  }
}

@compute @workgroup_size({{NT}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nblk) { return; }
  let bl = wid / p.nblk;
  let q0 = (wid % p.nblk) * BR;
  let tx = t % 8u;
  let ty = t / 8u;
  let mb = mask_base(p.bh0 + bl);
  let rbase = bl * p.nrows;
  let kbase = p.koff + bl * p.lk * D;
  let vbase = p.voff + bl * p.lk * DV;
  for (var e = t; e < BR * RS; e = e + NT) {
    let r = e / RS;
    let c4 = e % RS;
    var xq = vec4<f32>(0.0);
    var xg = vec4<f32>(0.0);
    if (q0 + r < p.nrows) {
      xq = ld4(0u, p.qoff + (rbase + q0 + r) * D, c4 * 4u, D) * p.scale;
      xg = ld4(4u, p.doff + (rbase + q0 + r) * DV, c4 * 4u, DV);
    }
    qs[e] = xq;
    gs[e] = xg;
  }
  workgroupBarrier();
  for (var r = t; r < BR; r = r + NT) {
    var sv = vec2<f32>(0.0);
    if (q0 + r < p.nrows) {
      let ri = rbase + q0 + r;
      var dl = 0.0;
      for (var d = 0u; d < V4; d = d + 1u) { dl = dl + dot(gs[r * RS + d], ld4(3u, p.ooff + ri * DV, d * 4u, DV)); }
      sv = vec2<f32>(lse[p.loff + ri] * LOG2E, dl);
    }
    st[r] = sv;
  }
  workgroupBarrier();
  {{DECL}}
  var kend = p.lk;
  if (CAUSAL) {
    let last = i32(p.r0 + min(q0 + BR, p.nrows)) - 1;
    kend = u32(clamp(last + p.coff + 1, 0, i32(p.lk)));
  }
  for (var j0 = 0u; j0 < kend; j0 = j0 + BC) {
    workgroupBarrier();
    for (var e = t; e < BC * RS; e = e + NT) {
      let r = e / RS;
      let c4 = e % RS;
      var xk = vec4<f32>(0.0);
      var xv = vec4<f32>(0.0);
      if (j0 + r < p.lk) {
        xk = ld4(1u, kbase + (j0 + r) * D, c4 * 4u, D);
        xv = ld4(2u, vbase + (j0 + r) * DV, c4 * 4u, DV);
      }
      ks[e] = xk;
      vs[e] = xv;
    }
    workgroupBarrier();
    {{SCORES}}
    var need = MASKED || j0 + BC > p.lk || q0 + BR > p.nrows;
    if (CAUSAL) { need = need || i32(j0 + BC) - 1 > i32(p.r0 + q0) + p.coff; }
    if (need) {
      {{MASK}}
    }
    {{PROBS}}
    workgroupBarrier();
    for (var c = 0u; c < BC; c = c + 1u) {
      {{UPDATE}}
    }
  }
  {{STORE}}
}

//=== acc
// a NAMED vec4 accumulator
var {{N}} = vec4<f32>(0.0);

//=== own_regs
// the 4 owned rows of group G at head vec4 d from array A (broadcast to the group's 8 threads)
let {{P}}{{G}}_0 = {{A}}[(4u * (ty + {{OFF}}u)) * RS + d];
let {{P}}{{G}}_1 = {{A}}[(4u * (ty + {{OFF}}u) + 1u) * RS + d];
let {{P}}{{G}}_2 = {{A}}[(4u * (ty + {{OFF}}u) + 2u) * RS + d];
let {{P}}{{G}}_3 = {{A}}[(4u * (ty + {{OFF}}u) + 3u) * RS + d];

//=== oth_reg
let {{P}}{{J}} = {{A}}[(tx + {{KO}}u) * RS + d];

//=== dot_acc
{{N}} += dot4({{P}}{{G}}_0, {{P}}{{G}}_1, {{P}}{{G}}_2, {{P}}{{G}}_3, {{Q}}{{J}});

//=== d_loop
for (var d = 0u; d < {{N}}; d = d + 1u) {
  {{BODY}}
}

//=== mask_t
s{{G}}_{{J}} = mask4t(s{{G}}_{{J}}, i0 + tx + {{KO}}u, kb0 + 4u * (ty + {{OFF}}u), mb);

//=== mask_q
s{{G}}_{{J}} = mask4(s{{G}}_{{J}}, q0 + 4u * (ty + {{OFF}}u), j0 + tx + {{KO}}u, mb);

//=== probs_t
// keys of group G against staged query row tx + KO: (P z)^T and dS^T into workgroup memory
{
  let c = st[tx + {{KO}}u];
  let pp = select(exp2(s{{G}}_{{J}} - c.x), vec4<f32>(0.0), s{{G}}_{{J}} <= vec4<f32>(NEG));
#if DROP
  let z = keep_keys(p.bh0 + bl, p.r0 + i0 + tx + {{KO}}u, kb0 + 4u * (ty + {{OFF}}u));
  pt[(tx + {{KO}}u) * PS + ty + {{OFF}}u] = pp * z;
  dst[(tx + {{KO}}u) * PS + ty + {{OFF}}u] = pp * (x{{G}}_{{J}} * z - c.y);
#else
  pt[(tx + {{KO}}u) * PS + ty + {{OFF}}u] = pp;
  dst[(tx + {{KO}}u) * PS + ty + {{OFF}}u] = pp * (x{{G}}_{{J}} - c.y);
#endif
}

//=== probs_q
// rows of group G against staged key tx + KO: dS into workgroup memory
{
  let lse4 = vec4<f32>(st[4u * (ty + {{OFF}}u)].x, st[4u * (ty + {{OFF}}u) + 1u].x, st[4u * (ty + {{OFF}}u) + 2u].x, st[4u * (ty + {{OFF}}u) + 3u].x);
  let dl4 = vec4<f32>(st[4u * (ty + {{OFF}}u)].y, st[4u * (ty + {{OFF}}u) + 1u].y, st[4u * (ty + {{OFF}}u) + 2u].y, st[4u * (ty + {{OFF}}u) + 3u].y);
  let pp = select(exp2(s{{G}}_{{J}} - lse4), vec4<f32>(0.0), s{{G}}_{{J}} <= vec4<f32>(NEG));
#if DROP
  let z = keep_rows(p.bh0 + bl, p.r0 + q0 + 4u * (ty + {{OFF}}u), j0 + tx + {{KO}}u);
  dss[(tx + {{KO}}u) * PS + ty + {{OFF}}u] = pp * (x{{G}}_{{J}} * z - dl4);
#else
  dss[(tx + {{KO}}u) * PS + ty + {{OFF}}u] = pp * (x{{G}}_{{J}} - dl4);
#endif
}

//=== upd_reg
let {{P}}{{G}} = {{A}}[c * PS + ty + {{OFF}}u];

//=== upd_col
let {{P}}{{C}} = {{A}}[c * RS + tx + {{CO}}u];

//=== upd_fma
{{N}} += {{P}}{{G}}.{{L}} * {{Q}}{{C}};

//=== store_key
store_key(bl, kb0 + 4u * (ty + {{OFF}}u) + {{I}}u, tx, k{{R}}_0, k{{R}}_{{C1}}, v{{R}}_0, v{{R}}_{{C1}});

//=== store_row
store_row(rbase, q0 + 4u * (ty + {{OFF}}u) + {{I}}u, tx, a{{R}}_0, a{{R}}_{{C1}});
