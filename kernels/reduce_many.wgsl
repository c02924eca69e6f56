// sum_many, stage one: the partial sums of many tensors (a training step's gradients) in one dispatch, a
// multi-tensor reduction. Member k of the table is one contiguous run of n_k elements at a base element
// of the one bound window; it takes workgroups first_k .. first_k + ceil(n_k / CHUNK) - 1 of this
// dispatch, workgroup piece j folding elements [j * CHUNK, (j + 1) * CHUNK) of it into
// out[part_k + j]. `part_k` numbers every chunk of every member in the op's input order across all
// dispatches of the op, and the launcher sums that row in increasing order (kernels/reduce.wgsl), so
// the bits depend only on the shapes and the binding limit, never on where the tensors lie. Inside a
// workgroup: each invocation folds lid, lid + WG, .. in order (four loads in flight), then a fixed tree
// in workgroup memory, or with SG its subgroup's subgroupAdd and the subgroups in order. No atomics.
// TERM: the value each element adds (itself, or its square with `square`), computed in f32.
{{ENABLE}}
struct Params {
  count: u32, groups: u32, _a: u32, _b: u32,
  m: array<vec4<u32>, {{MAXM}}>,     // (first workgroup, n, base element, first partial), first ascending
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<{{XT}}>;

var<workgroup> sh: array<f32, {{WG}}>;

fn term(i: u32) -> f32 {
  let v = f32(x[i]);
  return {{TERM}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
#if SG
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_id) sg: u32,
        @builtin(num_subgroups) nsg: u32,
#endif
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let g = wid.x + wid.y * nwg.x;
  if (g >= p.groups) { return; }
  // the member of workgroup g: the last whose first workgroup is <= g
  var a = 0u;
  var b = p.count;
  while (b - a > 1u) {
    let mid = (a + b) / 2u;
    if (p.m[mid].x <= g) { a = mid; } else { b = mid; }
  }
  let mem = p.m[a];
  let piece = g - mem.x;
  let i0 = mem.z + piece * {{CHUNK}}u;
  let i1 = mem.z + min(mem.y, (piece + 1u) * {{CHUNK}}u);
  var acc = 0.0;
  var i = i0 + lid.x;
  for (; i + 3u * {{WG}}u < i1; i = i + 4u * {{WG}}u) {
    let t0 = term(i);
    let t1 = term(i + {{WG}}u);
    let t2 = term(i + 2u * {{WG}}u);
    let t3 = term(i + 3u * {{WG}}u);
    acc = (((acc + t0) + t1) + t2) + t3;
  }
  for (; i < i1; i = i + {{WG}}u) { acc = acc + term(i); }
#if SG
  let t = subgroupAdd(acc);
  if (lane == 0u) { sh[sg] = t; }
  workgroupBarrier();
  if (lid.x == 0u) {
    var v = sh[0];
    for (var j = 1u; j < nsg; j = j + 1u) { v = v + sh[j]; }
    out[mem.w + piece] = v;
  }
#else
  sh[lid.x] = acc;
  workgroupBarrier();
  for (var s = {{WG}}u / 2u; s > 0u; s = s / 2u) {
    if (lid.x < s) { sh[lid.x] = sh[lid.x] + sh[lid.x + s]; }
    workgroupBarrier();
  }
  if (lid.x == 0u) { out[mem.w + piece] = sh[0]; }
#endif
}

//=== term.plain
v
//=== term.square
v * v
