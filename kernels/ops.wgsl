// Elementwise op expressions, shared by the strided map (elementwise.wgsl) and the fused kernel
// (fused.wgsl). Not a kernel: each section is one expression in the op's compute type (f32 for
// f32/f16, i32 or u32 otherwise) over the operands {{A}}, {{B}}, {{C}}, picked by name from Python:
//   float.<op>    unary op on floats          int.<op>     unary op on integers
//   binary.<op>   a op b (any compute type)   compare.<op> 0u / 1u (bool) from a comparison
// The section names ARE the ops the wgpu backend launches (kernels/elementwise.py registers them).
// Operands are atomic (a call or a name), so expressions need no parentheses around them.

//=== helpers
#include common:f32_bits
// sin and cos to about 1 ulp on |x| up to ~1e5 on every implementation: WGSL promises only an absolute error of
// 2^-11 inside [-pi, pi] and nothing outside (SwiftShader under Tint was 2e-4 off), numpy gives the rounded value.
// x = k pi/2 + r by Cody-Waite (pi/2 in three parts), |r| <= pi/4, then Taylor polynomials of r; k mod 4 picks
// the quadrant (cos is sin a quadrant on).
fn sincos_s(x: f32, shift: i32) -> f32 {
  let k = round(x * 0.6366197723675814);
  let r = ((x - k * 1.5703125) - k * 4.837512969970703125e-4) - k * 7.549789954891882e-8;
  let r2 = r * r;
  let s = r + r * r2 * (-0.16666666666666666 + r2 * (0.008333333333333333 + r2 * (-1.984126984126984e-4
          + r2 * 2.7557319223985893e-6)));
  let c = 1.0 + r2 * (-0.5 + r2 * (0.041666666666666664 + r2 * (-0.001388888888888889 + r2 * (2.48015873015873e-5
          - r2 * 2.755731922398589e-7))));
  let q = (i32(k) + shift) & 3;
  let v = select(s, c, (q & 1) == 1);
  return select(v, -v, q >= 2);
}
fn sin_s(x: f32) -> f32 { return sincos_s(x, 0); }
fn cos_s(x: f32) -> f32 { return sincos_s(x, 1); }
// Accurate tanh (tanh of |x| >= 0.5 through exp) and erf (Taylor near 0, Abramowitz-Stegun 7.1.26
// beyond), and pow with numpy's special cases (0^negative = inf, negative^non-integer = NaN).
fn tanh_s(x: f32) -> f32 {
  let e = exp(-2.0 * abs(x));
  return select(sign(x) * (1.0 - e) / (1.0 + e), tanh(x), abs(x) < 0.5);
}
fn erf_s(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5) {
    let x2 = x * x;
    return 1.1283791670955126 * x * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.1 + x2 * (-0.023809523809523808
           + x2 * (0.004629629629629629 + x2 * (-0.0007575757575757576))))));
  }
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
  return sign(x) * y;
}
fn pow_s(a: f32, b: f32) -> f32 {
  if (b == 0.0) { return 1.0; }
  if (a == 0.0) { return select(0.0, f32_bits(0x7f800000u), b < 0.0); }
  if (b == 1.0) { return a; }
  if (b == 2.0) { return a * a; }
  let r = exp2(b * log2(abs(a)));
  if (a < 0.0) {
    if (b != floor(b)) { return f32_bits(0x7fc00000u); }
    return select(r, -r, (b * 0.5) != floor(b * 0.5));
  }
  return r;
}

//=== load
// input operand {{K}} (binding x{{K}}, offset slot {{K1}} = K + 1) read in its compute type {{CT}}
{{CT}}(x{{K}}[o[{{K1}}]])

//=== float.neg
-{{A}}
//=== float.exp
exp({{A}})
//=== float.log
log({{A}})
//=== float.tanh
tanh_s({{A}})
//=== float.sigmoid
1.0 / (1.0 + exp(-{{A}}))
//=== float.relu
select({{A}}, 0.0, {{A}} < 0.0)
//=== float.gelu
0.5 * {{A}} * (1.0 + erf_s({{A}} * 0.7071067811865476))
//=== float.gelu_grad
0.5 * (1.0 + erf_s({{A}} * 0.7071067811865476)) + {{A}} * exp(-0.5 * {{A}} * {{A}}) * 0.3989422804014327
//=== float.sqrt
sqrt({{A}})
//=== float.rsqrt
1.0 / sqrt({{A}})
//=== float.abs
abs({{A}})
//=== float.sign
sign({{A}})
//=== float.sin
sin_s({{A}})
//=== float.cos
cos_s({{A}})
//=== float.reciprocal
1.0 / {{A}}
//=== float.erf
erf_s({{A}})

//=== int.neg
-{{A}}
//=== int.abs
abs({{A}})
//=== int.sign
sign({{A}})

//=== binary.add
{{A}} + {{B}}
//=== binary.sub
{{A}} - {{B}}
//=== binary.mul
{{A}} * {{B}}
//=== binary.div
{{A}} / {{B}}
//=== binary.pow
// floats only (kernels/elementwise.py refuses integer pow)
pow_s({{A}}, {{B}})
//=== binary.maximum
// NaN-propagating, like numpy
select(select({{B}}, {{A}}, {{A}} > {{B}}), {{A}}, {{A}} != {{A}})
//=== binary.minimum
select(select({{B}}, {{A}}, {{A}} < {{B}}), {{A}}, {{A}} != {{A}})

//=== float.isfinite
// bool (u32) from the bits: a shader compiler may assume no inf/NaN and fold a float test (x - x == 0) to
// true; an f16 operand arrives widened to f32, which keeps inf and NaN
select(0u, 1u, (bitcast<u32>(f32({{A}})) & 0x7f800000u) != 0x7f800000u)

//=== compare.lt
select(0u, 1u, {{A}} < {{B}})
//=== compare.le
select(0u, 1u, {{A}} <= {{B}})
//=== compare.gt
select(0u, 1u, {{A}} > {{B}})
//=== compare.ge
select(0u, 1u, {{A}} >= {{B}})
//=== compare.eq
select(0u, 1u, {{A}} == {{B}})
//=== compare.ne
select(0u, 1u, {{A}} != {{B}})

//=== where
// {{C}}: the bool condition (u32)
select({{B}}, {{A}}, {{C}} != 0u)

//=== cast.to_bool
// {{ZERO}}: the zero of the source's type (a zero.* section)
select(0u, 1u, {{A}} != {{ZERO}})
//=== cast.float_to_i32
// truncation toward zero, NaN -> 0 (like the reference path)
select(i32(trunc({{A}})), 0, {{A}} != {{A}})
//=== cast.convert
{{T}}({{A}})

//=== zero.f32
0.0
//=== zero.f16
0.0h
//=== zero.i32
0
//=== zero.u32
0u
