// Flash attention on the GPU's matrix units (Dawn's subgroup matrices), f16 operands, f32 scores and sums; the
// launcher (kernels/attention.py, sources from kernels/flash_sgm.py) keeps this header and one `//=== name`
// section, with the Params and bindings of flash_fwd.wgsl / flash_bwd.wgsl (the same chunk plan and stats pass):
//   fwd:  one workgroup per (head, BR query rows); subgroup s owns rows s M8 .. + M8 and keeps their q
//         fragments and their output O in fragments. Per staged key block (BC keys): S = q k^T on the matrix
//         units into workgroup memory (Fs), the online softmax by threads (one a row, base 2), P rounded to
//         f16 (Ps), O += P v on the matrix units. O is rescaled only when a row's maximum grows by more than
//         TAU (2^TAU bounds P, in f16 range): the rows keep an older maximum until then, which the final
//         division by the row sum cancels, so O stays in fragments on almost every block (a rare workgroup-
//         uniform branch stores O, scales its rows and loads it back).
//   dq:   one workgroup per (head, BR query rows): q and dout fragments held, per key block S = q k^T and
//         dP = dout v^T into workgroup memory, dS = P (dP - delta) by threads (P = exp2(S scale - lse)), rounded
//         to f16, dq += dS k on the matrix units; delta = rowsum(dout * out) computed here (the stats live in
//         the dq region, which it overwrites).
//   dkdv: one workgroup per (head, BR keys): k and v fragments held, per staged block of BC query rows
//         S^T = k q^T and dP^T = v dout^T, P^T and dS^T by threads (stats from the stats pass), dv += P^T dout,
//         dk += dS^T q.
// Causal blocks past the diagonal are never visited; the per-element mask (causal, key end, row end) runs
// where a block needs it. The gradients' factor `scale` is applied once at the end. Fixed order everywhere, no
// atomics in any sum (the one atomic counts rows that need a rescale). EMU: plain WGSL of the builtins'
// semantics (as matmul_sgm.wgsl's), so CI tests the tiling and indexing on adapters without matrix units.
{{ENABLE}}
const D: u32 = {{D}}u;                // q/k head size (a multiple of the fragment sizes)
const DV: u32 = {{DV}}u;              // v head size
const NT: u32 = {{NT}}u;              // invocations: NSG subgroups
const BR: u32 = {{BR}}u;              // rows a workgroup owns: NSG * M8
const BC: u32 = {{BC}}u;              // rows of the other operand staged per step
const CAUSAL: bool = {{CAUSAL}};
const NEG: f32 = -3.0e38;             // "minus infinity" inside the kernel (exp2(NEG - m) == 0)
const LOG2E: f32 = 1.4426950408889634;
alias TB = vec4<{{T}}>;               // q/k/v/out/gradient bindings: 16-byte rows (the launcher checks)
{{FRAGS}}

//=== stage
// rows r0 .. r0 + ROWS of a [*, W] operand at element `base` into DST (row stride STR), zeros from row nvalid on
fn {{FN}}(t: u32, base: u32, r0: u32, nvalid: u32) {
  for (var e = t; e < {{ROWS}}u * {{W4}}u; e = e + NT) {
    let r = e / {{W4}}u;
    let c = (e % {{W4}}u) * 4u;
    var x = vec4<{{T}}>();
    if (r0 + r < nvalid) { x = {{SRC}}[(base + (r0 + r) * {{W}}u + c) >> 2u]; }
    let o = r * {{STR}}u + c;
    {{DST}}[o] = x.x; {{DST}}[o + 1u] = x.y; {{DST}}[o + 2u] = x.z; {{DST}}[o + 3u] = x.w;
  }
}

//=== key_end
// keys a block of query rows can see: every key, or (causal) up to its last row + coff
var kend = p.lk;
if (CAUSAL) {
  let last = i32(p.r0 + min(q0 + BR, p.nrows)) - 1;
  kend = u32(clamp(last + p.coff + 1, 0, i32(p.lk)));
}

//=== fs4
// 4 consecutive f32 of the workgroup array Fs
fn fs4(i: u32) -> vec4<f32> { return vec4<f32>(Fs[i], Fs[i + 1u], Fs[i + 2u], Fs[i + 3u]); }

//=== query_mask
// The per-element mask of query rows q0.. against keys j0.. (fwd, dq): whether the block needs it at all (uniform
// over the workgroup), and whether key column c is masked for row r, whose last visible key (causal) is i.
fn block_needs_mask(j0: u32, q0: u32) -> bool {
  return j0 + BC > p.lk || q0 + BR > p.nrows || (CAUSAL && i32(j0 + BC) - 1 > i32(p.r0 + q0) + p.coff);
}
fn masked(j0: u32, c: u32, q0: u32, r: u32, i: i32) -> bool {
  return j0 + c >= p.lk || q0 + r >= p.nrows || (CAUSAL && i32(j0 + c) > i);
}

//=== real_types
alias LEFT = subgroup_matrix_left<{{T}}, {{K8}}, {{M8}}>;
alias RIGHT = subgroup_matrix_right<{{T}}, {{N8}}, {{K8}}>;
alias RES = subgroup_matrix_result<f32, {{N8}}, {{M8}}>;
fn mma(a: LEFT, b: RIGHT, c: RES) -> RES { return subgroupMatrixMultiplyAccumulate(a, b, c); }

//=== real_ld
// fragment KIND (LEFT, RIGHT or RES) from ARR at off with row stride st, COL: stored column-major
fn {{FN}}(off: u32, st: u32) -> {{KIND}} { return subgroupMatrixLoad<{{KIND}}>(&{{ARR}}, off, {{COL}}, st); }

//=== real_st
fn {{FN}}(off: u32, f: RES, st: u32) { subgroupMatrixStore(&{{ARR}}, off, f, false, st); }

//=== real_sgid_param
, @builtin(subgroup_id) sg: u32

//=== emu_types
// a fragment every invocation of the emulated subgroup holds whole (row r, column c at [r * columns + c])
alias LEFT = array<{{T}}, {{MK8}}>;
alias RIGHT = array<{{T}}, {{KN8}}>;
alias RES = array<f32, {{MN8}}>;
var<private> emu_lane0: bool;         // the invocation of its emulated subgroup that stores
var<private> emu_one: u32;            // 1, read from the dispatch size so CPU compilers do not unroll the loops
fn mma(a: LEFT, b: RIGHT, c: RES) -> RES {
  var out = c;
  for (var r = 0u; r < {{M8}}u * emu_one; r++) {
    for (var n = 0u; n < {{N8}}u * emu_one; n++) {
      var s = out[r * {{N8}}u + n];
      for (var k = 0u; k < {{K8}}u * emu_one; k++) { s += f32(a[r * {{K8}}u + k]) * f32(b[k * {{N8}}u + n]); }
      out[r * {{N8}}u + n] = s;
    }
  }
  return out;
}

//=== emu_ld
// element (r, c) of a ROWS x COLS fragment at off + r * st + c, or off + c * st + r column-major
fn {{FN}}(off: u32, st: u32) -> {{KIND}} {
  var f: {{KIND}};
  for (var r = 0u; r < {{ROWS}}u * emu_one; r++) {
    for (var c = 0u; c < {{COLS}}u * emu_one; c++) {
      f[r * {{COLS}}u + c] = {{ARR}}[select(off + r * st + c, off + c * st + r, {{COL}})];
    }
  }
  return f;
}

//=== emu_st
fn {{FN}}(off: u32, f: RES, st: u32) {
  if (emu_lane0) {
    for (var i = 0u; i < {{MN8}}u * emu_one; i++) { {{ARR}}[off + (i / {{N8}}u) * st + i % {{N8}}u] = f[i]; }
  }
}

//=== emu_sgid
let sg = t / {{SGS}}u;
emu_lane0 = t % {{SGS}}u == 0u;
emu_one = min(nwg.z, 1u);

//=== frag_zero
var {{V}} = RES();

//=== frag_ld
var {{V}} = {{FN}}({{OFF}}, {{STR}}u);

//=== frag_set
{{V}} = {{FN}}({{OFF}}, {{STR}}u);

//=== frag_st
{{FN}}({{OFF}}, {{V}}, {{STR}}u);

//=== frag_mma
{{V}} = mma({{A}}, {{B}}, {{V}});

//=== fwd_params
struct Params {
  nbh: u32, lq: u32, lk: u32, nrows: u32,      // heads in this chunk, full lengths, query rows per head here
  r0: u32, nqb: u32, coff: i32, neg_inf: u32,  // first query row, query blocks per head, Lk - Lq, bits of -inf
  scale: f32, qoff: u32, koff: u32, voff: u32, // scale * log2(e); element offsets inside the bindings
  ooff: u32, loff: u32, moff: u32, bh0: u32,
  msq: u32, msk: u32, mrank: u32, _p: u32,
  mshape: vec4<u32>, mstride: vec4<u32>,
  dctr: vec4<u32>, dprob: vec4<f32>,
}

//=== bwd_params
struct Params {
  nbh: u32, lq: u32, lk: u32, nrows: u32,      // heads in this chunk, full lengths, query rows per head here
  r0: u32, nblk: u32, coff: i32, accum: u32,   // first query row, owned blocks per head, Lk - Lq, add into dk/dv
  scale: f32, qoff: u32, koff: u32, voff: u32, // scale * log2(e); element offsets inside the bindings
  ooff: u32, loff: u32, doff: u32, goff: u32,  // out, lse, dout, first gradient output (dq or dk)
  g2off: u32, soff: u32, moff: u32, bh0: u32,  // dv, stats
  msq: u32, msk: u32, mrank: u32, nscale: f32, // nscale: the attention scale itself
  mshape: vec4<u32>, mstride: vec4<u32>,
  dctr: vec4<u32>, dprob: vec4<f32>,
}

//=== fwd
#include flash_sgm:fwd_params
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<TB>;
@group(0) @binding(2) var<storage, read_write> k: array<TB>;
@group(0) @binding(3) var<storage, read_write> v: array<TB>;
@group(0) @binding(4) var<storage, read_write> o: array<TB>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;

const TAU: f32 = 8.0;                          // rescale O only when a row maximum grows by more (base 2)
var<workgroup> Ks: array<{{T}}, {{KS_LEN}}>;    // [key][d]
var<workgroup> Vs: array<{{T}}, {{VS_LEN}}>;    // [key][dv]
var<workgroup> Ps: array<{{T}}, {{PS_LEN}}>;    // [query row][key]: P in f16 (q's staging at the start)
var<workgroup> Fs: array<f32, {{SS_LEN}}>;      // [query row][key]: scores; O for a rescale and the store
#include flash_sgm:fs4
#include flash_sgm:query_mask
var<workgroup> mrow: array<f32, BR>;            // the maximum each row's P and O are relative to
var<workgroup> lrow: array<f32, BR>;            // row sums relative to it
var<workgroup> arow: array<f32, BR>;            // this block's rescale factor of each row
var<workgroup> nresc: atomic<u32>;              // rows that need a rescale this block
var<workgroup> resc: u32;
{{STAGES}}

@compute @workgroup_size(NT)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32{{SGID_PARAM}}) {
  {{SGID}}
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nqb) { return; }
  let bl = wid / p.nqb;
  let q0 = (wid % p.nqb) * BR;            // first local query row of the block
  let kbase = p.koff + bl * p.lk * D;
  let vbase = p.voff + bl * p.lk * DV;
  stage_q(t, p.qoff + bl * p.nrows * D, q0, p.nrows);
  for (var r = t; r < BR; r = r + NT) { mrow[r] = NEG; lrow[r] = 0.0; }
  if (t == 0u) { atomicStore(&nresc, 0u); }
  workgroupBarrier();
  {{LOAD_Q}}
  {{ZERO_O}}
#include flash_sgm:key_end
  for (var j0 = 0u; j0 < kend; j0 = j0 + BC) {
    workgroupBarrier();
    stage_k(t, kbase, j0, p.lk);
    stage_v(t, vbase, j0, p.lk);
    workgroupBarrier();
    {{SCORES}}
    workgroupBarrier();
    let need = block_needs_mask(j0, q0);     // the per-element mask only where the block needs it
    for (var r = t; r < BR; r = r + NT) {
      let i = i32(p.r0 + q0 + r) + p.coff;     // the last key row r may see (causal)
      var mx = NEG;
      for (var c0 = 0u; c0 < BC; c0 = c0 + 1u) {
        let c = (c0 + r) % BC;                  // rows start at different columns: no bank conflicts
        var s = Fs[r * {{SSTR}}u + c] * p.scale;
        if (need && masked(j0, c, q0, r, i)) { s = NEG; }
        Fs[r * {{SSTR}}u + c] = s;
        mx = max(mx, s);
      }
      let mo = mrow[r];
      var mu = mo;
      var alpha = 1.0;
      if (mx > mo + TAU) {
        mu = mx;
        if (mo > NEG) { alpha = exp2(mo - mx); atomicAdd(&nresc, 1u); }
      }
      mrow[r] = mu;
      arow[r] = alpha;
      let mref = select(mu, 0.0, mu <= NEG);
      var l = 0.0;
      for (var c0 = 0u; c0 < BC; c0 = c0 + 1u) {
        let c = (c0 + r) % BC;
        let pv = exp2(Fs[r * {{SSTR}}u + c] - mref);
        l = l + pv;
        Ps[r * {{PSTR}}u + c] = {{T}}(pv);
      }
      lrow[r] = lrow[r] * alpha + l;
    }
    workgroupBarrier();
    if (t == 0u) { resc = atomicExchange(&nresc, 0u); }
    if (workgroupUniformLoad(&resc) != 0u) {
      {{STORE_O}}
      workgroupBarrier();
      for (var e = t; e < BR * DV; e = e + NT) {
        let r = e / DV;
        Fs[r * {{SSTR}}u + e % DV] *= arow[r];
      }
      workgroupBarrier();
      {{RELOAD_O}}
    }
    {{PV}}
  }
  workgroupBarrier();
  {{STORE_O}}
  workgroupBarrier();
  let obase = p.ooff + bl * p.nrows * DV;
  for (var e = t; e < BR * (DV / 4u); e = e + NT) {
    let r = e / (DV / 4u);
    let c = (e % (DV / 4u)) * 4u;
    if (q0 + r < p.nrows) {
      let l = lrow[r];
      let inv = select(0.0, 1.0 / l, l > 0.0);
      o[(obase + (q0 + r) * DV + c) >> 2u] = TB(fs4(r * {{SSTR}}u + c) * inv);
    }
  }
  for (var r = t; r < BR; r = r + NT) {
    if (q0 + r < p.nrows) {
      let l = lrow[r];
      lse[p.loff + bl * p.nrows + q0 + r] = select(bitcast<f32>(p.neg_inf), mrow[r] * 0.6931471805599453 + log(l),
                                                   l > 0.0);
    }
  }
}

//=== dq
#include flash_sgm:bwd_params
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<TB>;
@group(0) @binding(2) var<storage, read_write> k: array<TB>;
@group(0) @binding(3) var<storage, read_write> v: array<TB>;
@group(0) @binding(4) var<storage, read_write> o: array<TB>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> dout: array<TB>;
@group(0) @binding(7) var<storage, read_write> dq: array<TB>;

var<workgroup> Ks: array<{{T}}, {{KS_LEN}}>;    // [key][d]
var<workgroup> Vs: array<{{T}}, {{VS_LEN}}>;    // [key][dv]
var<workgroup> Xs: array<{{T}}, {{XS_LEN}}>;    // q's, then dout's staging; then dS [query row][key] in f16
var<workgroup> Fs: array<f32, {{FS_LEN}}>;      // S [row][key] at 0, dP at {{DOFF}}; dq for the store
#include flash_sgm:fs4
#include flash_sgm:query_mask
var<workgroup> lrow: array<f32, BR>;            // lse * log2 e of each row (NEG past the rows)
var<workgroup> drow: array<f32, BR>;            // delta = rowsum(dout * out)
{{STAGES}}

@compute @workgroup_size(NT)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32{{SGID_PARAM}}) {
  {{SGID}}
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nblk) { return; }
  let bl = wid / p.nblk;
  let q0 = (wid % p.nblk) * BR;
  let rbase = bl * p.nrows;
  let kbase = p.koff + bl * p.lk * D;
  let vbase = p.voff + bl * p.lk * DV;
  stage_q(t, p.qoff + rbase * D, q0, p.nrows);
  for (var r = t; r < BR; r = r + NT) {
    var ls = NEG;
    var dl = 0.0;
    if (q0 + r < p.nrows) {
      let ri = rbase + q0 + r;
      ls = lse[p.loff + ri] * LOG2E;
      for (var c = 0u; c < DV; c = c + 4u) {
        dl = dl + dot(vec4<f32>(dout[(p.doff + ri * DV + c) >> 2u]), vec4<f32>(o[(p.ooff + ri * DV + c) >> 2u]));
      }
    }
    lrow[r] = ls;
    drow[r] = dl;
  }
  workgroupBarrier();
  {{LOAD_Q}}
  workgroupBarrier();
  stage_g(t, p.doff + rbase * DV, q0, p.nrows);
  workgroupBarrier();
  {{LOAD_G}}
  {{ZERO_DQ}}
#include flash_sgm:key_end
  for (var j0 = 0u; j0 < kend; j0 = j0 + BC) {
    workgroupBarrier();
    stage_k(t, kbase, j0, p.lk);
    stage_v(t, vbase, j0, p.lk);
    workgroupBarrier();
    {{SCORES}}
    {{DPROBS}}
    workgroupBarrier();
    let need = block_needs_mask(j0, q0);
    for (var r = t; r < BR; r = r + NT) {
      let i = i32(p.r0 + q0 + r) + p.coff;
      let ls = lrow[r];
      let dl = drow[r];
      for (var c0 = 0u; c0 < BC; c0 = c0 + 1u) {
        let c = (c0 + r) % BC;
        var pv = exp2(Fs[r * {{SSTR}}u + c] * p.scale - ls);
        if (need && masked(j0, c, q0, r, i)) { pv = 0.0; }
        Xs[r * {{XSTR}}u + c] = {{T}}(pv * (Fs[{{DOFF}}u + r * {{SSTR}}u + c] - dl));
      }
    }
    workgroupBarrier();
    {{DQ}}
  }
  workgroupBarrier();
  {{STORE_DQ}}
  workgroupBarrier();
  for (var e = t; e < BR * (D / 4u); e = e + NT) {
    let r = e / (D / 4u);
    let c = (e % (D / 4u)) * 4u;
    if (q0 + r < p.nrows) {
      dq[(p.goff + (rbase + q0 + r) * D + c) >> 2u] = TB(fs4(r * {{OSTR}}u + c) * p.nscale);
    }
  }
}

//=== dkdv
#include flash_sgm:bwd_params
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<TB>;
@group(0) @binding(2) var<storage, read_write> k: array<TB>;
@group(0) @binding(3) var<storage, read_write> v: array<TB>;
@group(0) @binding(4) var<storage, read_write> stats: array<f32>;
@group(0) @binding(5) var<storage, read_write> dout: array<TB>;
@group(0) @binding(6) var<storage, read_write> dk: array<TB>;
@group(0) @binding(7) var<storage, read_write> dv: array<TB>;

var<workgroup> Qs: array<{{T}}, {{QS_LEN}}>;    // [query row][d]
var<workgroup> Gs: array<{{T}}, {{GS_LEN}}>;    // [query row][dv]: dout
var<workgroup> Ps: array<{{T}}, {{PS_LEN}}>;    // [key][query row]: P^T in f16 (k's, then v's staging at the start)
var<workgroup> Es: array<{{T}}, {{ES_LEN}}>;    // [key][query row]: dS^T in f16
var<workgroup> Fs: array<f32, {{FS_LEN}}>;      // S^T [key][row] at 0, dP^T at {{DOFF}}; dk, then dv, for the store
#include flash_sgm:fs4
var<workgroup> st: array<vec2<f32>, BC>;        // (lse * log2 e, delta) of the staged query rows
{{STAGES}}

@compute @workgroup_size(NT)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32{{SGID_PARAM}}) {
  {{SGID}}
  let wid = wg.x + wg.y * nwg.x;
  if (wid >= p.nbh * p.nblk) { return; }
  let bl = wid / p.nblk;
  let kb0 = (wid % p.nblk) * BR;          // first key of the block
  let rbase = bl * p.nrows;
  stage_kp(t, p.koff + bl * p.lk * D, kb0, p.lk);
  workgroupBarrier();
  {{LOAD_K}}
  workgroupBarrier();
  stage_vp(t, p.voff + bl * p.lk * DV, kb0, p.lk);
  workgroupBarrier();
  {{LOAD_V}}
  {{ZERO_DKDV}}
  // query rows of this chunk that can see a key of this block (causal: i >= j - coff)
  var i0 = 0u;
  if (CAUSAL) { i0 = u32(clamp(i32(kb0) - p.coff - i32(p.r0), 0, i32(p.nrows))); }
  for (; i0 < p.nrows; i0 = i0 + BC) {
    workgroupBarrier();
    stage_q(t, p.qoff + rbase * D, i0, p.nrows);
    stage_g(t, p.doff + rbase * DV, i0, p.nrows);
    for (var c = t; c < BC; c = c + NT) {
      var sv = vec2<f32>(NEG, 0.0);
      if (i0 + c < p.nrows) {
        let si = p.soff + 2u * (rbase + i0 + c);
        sv = vec2<f32>(stats[si] * LOG2E, stats[si + 1u]);
      }
      st[c] = sv;
    }
    workgroupBarrier();
    {{SCORES}}
    {{DPROBS}}
    workgroupBarrier();
    var need = kb0 + BR > p.lk || i0 + BC > p.nrows;
    if (CAUSAL) { need = need || i32(kb0 + BR) - 1 > i32(p.r0 + i0) + p.coff; }
    for (var r = t; r < BR; r = r + NT) {
      let j = kb0 + r;
      for (var c0 = 0u; c0 < BC; c0 = c0 + 1u) {
        let c = (c0 + r) % BC;
        let sv = st[c];
        var pv = exp2(Fs[r * {{SSTR}}u + c] * p.scale - sv.x);
        if (need && (j >= p.lk || i0 + c >= p.nrows || (CAUSAL && i32(j) > i32(p.r0 + i0 + c) + p.coff))) { pv = 0.0; }
        Ps[r * {{PSTR}}u + c] = {{T}}(pv);
        Es[r * {{PSTR}}u + c] = {{T}}(pv * (Fs[{{DOFF}}u + r * {{SSTR}}u + c] - sv.y));
      }
    }
    workgroupBarrier();
    {{DV_ACC}}
    {{DK_ACC}}
  }
  // dk, then dv, through Fs (each as f32 rows of stride OSTR)
  workgroupBarrier();
  {{STORE_DK}}
  workgroupBarrier();
  for (var e = t; e < BR * (D / 4u); e = e + NT) {
    let r = e / (D / 4u);
    let c = (e % (D / 4u)) * 4u;
    if (kb0 + r < p.lk) {
      let a = (p.goff + (bl * p.lk + kb0 + r) * D + c) >> 2u;
      var x = fs4(r * {{OSTR}}u + c) * p.nscale;
      if (p.accum != 0u) { x = x + vec4<f32>(dk[a]); }
      dk[a] = TB(x);
    }
  }
  workgroupBarrier();
  {{STORE_DV}}
  workgroupBarrier();
  for (var e = t; e < BR * (DV / 4u); e = e + NT) {
    let r = e / (DV / 4u);
    let c = (e % (DV / 4u)) * 4u;
    if (kb0 + r < p.lk) {
      let a = (p.g2off + (bl * p.lk + kb0 + r) * DV + c) >> 2u;
      var x = fs4(r * {{OSTR}}u + c);
      if (p.accum != 0u) { x = x + vec4<f32>(dv[a]); }
      dv[a] = TB(x);
    }
  }
}
