// Sum of K-split matmul partials: C[i] (+)= P[0][i] + P[1][i] + ... in increasing split order (a fixed
// order, so the result is the same run to run). P holds SPLITS partials of n elements each, stride n.
// With EPI the sum goes through the matmul's epilogue (kernels/matmul.wgsl epi_fn) before its store.
{{ENABLE}}
struct Params { n: u32, splits: u32, acc: u32, off: u32,
  {{EPI_PARAMS}}
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> P: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<{{T}}>;
{{EPILOGUE}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
  let i = gid.x + gid.y * nw.x * 256u;
  if (i >= p.n) { return; }
  var v = P[i];
  for (var s = 1u; s < p.splits; s = s + 1u) { v += P[s * p.n + i]; }
  if (p.acc != 0u) { v += f32(C[p.off + i]); }
#if EPI
  C[p.off + i] = epilogue(v, 0u, 0u, 0u, i / p.en.x, i % p.en.x);
#else
  C[p.off + i] = {{T}}(v);
#endif
}
