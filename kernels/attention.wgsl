// Memory-efficient attention (baseline): online softmax per query row, lse saved; backward recomputes
// probabilities from q, k and lse. Never materializes the Lq x Lk score matrix.
{{ENABLE}}
struct Params { a: vec4<u32>, b: vec4<u32>, scale: f32, ms: vec3<u32>, _x: vec4<u32> }
@group(0) @binding(0) var<uniform> p: Params;
{{BINDINGS}}
{{DOT}}
{{BODY}}
