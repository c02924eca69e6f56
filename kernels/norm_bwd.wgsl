// layer_norm / rms_norm backward over the trailing n elements of each row (rows contiguous): dx, and with
// a weight W also g * xhat (the weight's gradient summed over rows by the launcher's caller), in one
// kernel where the composite backward took a dozen dispatches. With gh = g * w (or g):
//   layer_norm: mean, then sums of (x - mean)^2, gh and gh * (x - mean) (no cancellation: the mean is
//               subtracted first), rstd = 1 / sqrt(var + eps), xhat = (x - mean) * rstd,
//               dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat))
//   rms_norm:   sums of x^2 and gh * x, xhat = x * rstd, dx = rstd * (gh - xhat * mean(gh * xhat))
// (graph/autodiff.py _norm_composite_bwd is the meaning). Rows are read three times (layer_norm) or twice
// (rms_norm); a row is small enough to stay in cache. Layouts as in norm.wgsl (kernels/norm.py picks
// them): WGROW, a workgroup a row; else RPW rows a workgroup, a subgroup a row with SG, LANES = WG / RPW
// invocations a row and a fixed tree without. VEC: n and every base are multiples of 4 (vec4 bindings).
// Sums merge in a fixed order: deterministic, no atomics. f16 storage computes in f32, rounds on store.
{{ENABLE}}
#if VEC
alias ST = vec4<{{T}}>;
alias CT = vec4<f32>;
const CN: f32 = 4.0;
fn hsum(v: vec4<f32>) -> f32 { return (v.x + v.y) + (v.z + v.w); }
#else
alias ST = {{T}};
alias CT = f32;
const CN: f32 = 1.0;
fn hsum(v: f32) -> f32 { return v; }
#endif
struct Params { q: array<vec4<u32>, 2> }
// q words (in chunks: vec4 units with VEC): 0 nrows, 1 n, 2 x_base, 3 g_base, 4 dx_base, 5 w_base,
// 6 gxh_base, 7 eps (f32 bits)
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> dx: array<ST>;
@group(0) @binding(2) var<storage, read_write> x: array<ST>;
@group(0) @binding(3) var<storage, read_write> g: array<ST>;
#if W
@group(0) @binding(4) var<storage, read_write> w: array<ST>;
@group(0) @binding(5) var<storage, read_write> gxh: array<ST>;
#endif

fn P(i: u32) -> u32 { return p.q[i / 4u][i % 4u]; }

alias RT = vec4<f32>;                // rowsum (norm.wgsl) takes four sums at once
#include norm:rowsum

// gh = g * w at chunk c of the row starting at chunk rb (of x and g)
fn gh_at(gb: u32, c: u32) -> CT {
#if W
  return CT(g[gb + c]) * CT(w[P(5u) + c]);
#else
  return CT(g[gb + c]);
#endif
}

// row `row` (live: inside this box), folded by invocation k of `lanes`; a, b, c, d: rowsum's arguments
fn one_row(row: u32, live: bool, k: u32, lanes: u32, a: u32, b: u32, cc: u32, d: u32) {
  let n = P(1u);
  let nf = f32(n) * CN;
  let eps = bitcast<f32>(P(7u));
  let xb = P(2u) + row * n;
  let gb = P(3u) + row * n;
  let ob = P(4u) + row * n;
#if RMS
  var s = vec4<f32>(0.0);
  if (live) {
    for (var c = k; c < n; c = c + lanes) {
      let xv = CT(x[xb + c]);
      s = s + vec4<f32>(hsum(xv * xv), hsum(gh_at(gb, c) * xv), 0.0, 0.0);
    }
  }
  let t = rowsum(s, a, b, cc, d);
  let mu = 0.0;
  let rstd = 1.0 / sqrt(t.x / nf + eps);
  let mgh = 0.0;
  let mghxh = rstd * t.y / nf;
#else
  var s1 = vec4<f32>(0.0);
  if (live) {
    for (var c = k; c < n; c = c + lanes) { s1.x = s1.x + hsum(CT(x[xb + c])); }
  }
  let mu = rowsum(s1, a, b, cc, d).x / nf;
  var s = vec4<f32>(0.0);
  if (live) {
    for (var c = k; c < n; c = c + lanes) {
      let dv = CT(x[xb + c]) - CT(mu);
      let gh = gh_at(gb, c);
      s = s + vec4<f32>(hsum(dv * dv), hsum(gh), hsum(gh * dv), 0.0);
    }
  }
  let t = rowsum(s, a, b, cc, d);
  let rstd = 1.0 / sqrt(t.x / nf + eps);
  let mgh = t.y / nf;
  let mghxh = rstd * t.z / nf;
#endif
  if (!live) { return; }
  for (var c = k; c < n; c = c + lanes) {
    let xh = (CT(x[xb + c]) - CT(mu)) * rstd;
    let gh = gh_at(gb, c);
    dx[ob + c] = ST(CT(rstd) * (gh - CT(mgh) - xh * CT(mghxh)));
#if W
    gxh[P(6u) + row * n + c] = ST(CT(g[gb + c]) * xh);
#endif
  }
}

#if SG
#if WGROW
@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= P(0u)) { return; }
  one_row(row, true, lid.x, {{WG}}u, lid.x, lane, sg, nsg);
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) sgs: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
  let first = (wid.x + wid.y * nwg.x) * {{RPW}}u;
  for (var rr = sg; rr < {{RPW}}u; rr = rr + nsg) {
    let row = first + rr;
    if (row >= P(0u)) { break; }
    one_row(row, true, lane, sgs, 0u, lane, sg, nsg);
  }
}
#endif
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let lanes = {{WG}}u / {{RPW}}u;
  let k = lid.x % lanes;
  let row = (wid.x + wid.y * nwg.x) * {{RPW}}u + lid.x / lanes;
  one_row(row, row < P(0u), k, lanes, lid.x, k, lanes, 0u);
}
#endif
