// softmax / log_softmax along one axis of an [outer, R, inner] layout: one workgroup per row
// (outer x inner rows), three fixed-order passes: max (tree), sum of exp(x - max) (tree), write
// (x - max - log(sum) with the LOG flag: log_softmax).
// f16 inputs are computed in f32 and rounded once on store.
{{ENABLE}}
struct Params { q: array<vec4<u32>, 4> }
// q words: 0 nrows (of this box), 1 R, 2 box inner size, 3 outer stride, 4 r stride, 5 x_base, 6 out_base
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> x: array<{{T}}>;

fn P(i: u32) -> u32 { return p.q[i / 4u][i % 4u]; }

var<workgroup> sh: array<f32, {{WG}}>;

fn fmax(a: f32, b: f32) -> f32 { return select(select(a, b, b > a), b, (bitcast<u32>(b) & 0x7fffffffu) > 0x7f800000u); }

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= P(0u)) { return; }
  let bi = P(2u);
  let base = (row / bi) * P(3u) + (row % bi);
  let n = P(1u);
  let rs = P(4u);
  let xb = P(5u) + base;
  let ob = P(6u) + base;
  var m = bitcast<f32>(0xff800000u);
  for (var r = lid.x; r < n; r = r + {{WG}}u) { m = fmax(m, f32(x[xb + r * rs])); }
  sh[lid.x] = m;
  workgroupBarrier();
  for (var s = {{WG}}u / 2u; s > 0u; s = s / 2u) {
    if (lid.x < s) { sh[lid.x] = fmax(sh[lid.x], sh[lid.x + s]); }
    workgroupBarrier();
  }
  let mx = sh[0];
  workgroupBarrier();
  var t = 0.0;
  for (var r = lid.x; r < n; r = r + {{WG}}u) { t = t + exp(f32(x[xb + r * rs]) - mx); }
  sh[lid.x] = t;
  workgroupBarrier();
  for (var s = {{WG}}u / 2u; s > 0u; s = s / 2u) {
    if (lid.x < s) { sh[lid.x] = sh[lid.x] + sh[lid.x + s]; }
    workgroupBarrier();
  }
  let sum = sh[0];
#if LOG
  let lse = mx + log(sum);
#endif
  for (var r = lid.x; r < n; r = r + {{WG}}u) {
    let e = f32(x[xb + r * rs]);
#if LOG
    out[ob + r * rs] = {{T}}(e - lse);
#else
    out[ob + r * rs] = {{T}}(exp(e - mx) / sum);
#endif
  }
}
