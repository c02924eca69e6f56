// unfold (im2col, torch.nn.functional.unfold layout [N, C*kh*kw, L]) and fold (col2im): one thread per
// output element; fold sums the patches covering its pixel in a fixed (ki, kj) order (no atomics).
// Thread i of a chunk handles flat output element g = start + i.
{{ENABLE}}
struct Params { q: array<vec4<u32>, 5> }
// q words: 0 n, 1 c, 2 h, 3 w, 4 kh, 5 kw, 6 sh, 7 sw, 8 ph, 9 pw, 10 dh, 11 dw, 12 oh, 13 ow,
//          14 pad value bits (f32), 15 chunk size, 16 chunk start, 17 out_base, 18 x_base
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<{{OT}}>;
@group(0) @binding(2) var<storage, read_write> x0: array<{{XT}}>;

fn P(i: u32) -> u32 { return p.q[i / 4u][i % 4u]; }

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let li = gid.x + gid.y * nwg.x * 64u;
  if (li >= P(15u)) { return; }
  let i = P(16u) + li;
  let c_ = P(1u); let h_ = P(2u); let w_ = P(3u);
  let kh = P(4u); let kw = P(5u); let sh = P(6u); let sw = P(7u);
  let ph = P(8u); let pw = P(9u); let dh = P(10u); let dw = P(11u);
  let oh = P(12u); let ow = P(13u);
  let ob = P(17u); let xb = P(18u);
  {{BODY}}
}
