// Pure-ALU throughput (benchmarks/alu_peak.py): CHAINS independent multiply-add chains of type VT per
// invocation, ITER steps each, no memory traffic but one store of their sum (so none is optimized away).
// It bounds what any kernel of that arithmetic can reach through this driver: a packed-f16 matmul cannot
// run faster than vec4<f16> multiply-adds do here.
{{ENABLE}}
@group(0) @binding(0) var<storage, read_write> O: array<vec4<f32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let m = {{VT}}({{T}}({{MUL}}));
  let c = {{VT}}({{T}}({{ADD}}));
  {{DECL}}
  for (var i = 0u; i < {{ITER}}u; i = i + 1u) {
    {{STEP}}
  }
  O[g.x] = {{OUT}};
}

//=== decl
var a{{I}} = {{VT}}({{T}}(f32(g.x % 256u) * 0.001 + {{I}}.0 * 0.0001));

//=== step_fma
a{{I}} = fma(a{{I}}, m, c);

//=== step_mad
a{{I}} = a{{I}} * m + c;

//=== out_4
vec4<f32>({{SUM}})

//=== out_2
vec4<f32>(vec2<f32>({{SUM}}), 0.0, 0.0)

//=== out_1
vec4<f32>(f32({{SUM}}))
