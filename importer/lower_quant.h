// Lowering of ONNX's quantization operators (default domain) to canonical ops:
//   - QuantizeLinear (10-25): x / scale (in their type, float32 where they differ, or `precision`),
//     rounded half to even, plus the zero point, saturated to the target's range, cast; to float8
//     a Cast (saturating or not), to float4 a Cast after adding the zero point;
//   - DequantizeLinear (10-25): (x - zero point) x scale in float32, cast to the scale's type or
//     `output_dtype`;
//   - DynamicQuantizeLinear (11): the uint8 scale and zero point of x's range widened to 0, and
//     x quantized with them;
//   - MatMulInteger (10): of 8-bit operands, the raw product of the bytes (a MatMul of int8/uint8
//     into int32, which stages in the dp4a form) less the zero points' terms (za x B's column
//     sums, A's row sums x zb, plus K x za x zb; per tensor, per row of A, per column of B);
//     otherwise, and for ConvInteger (10), the operands cast to int32 less their zero points and
//     an int32 MatMul or Conv;
//   - QLinearMatMul (10, 21), QLinearConv (10): that int32 contraction (plus QLinearConv's int32
//     bias) times a_scale x b_scale / y_scale in float32, rounded half to even, plus y's zero
//     point, saturated and cast;
//   - a float32 MatMul of two DequantizeLinear results of 8-bit values (QDQ, fold_dequantized_
//     matmul; A per tensor, B per tensor or per column): the same integer product times
//     a_scale x b_scale, the dequantized operands never made; a float32 Conv of two such results
//     (fold_dequantized_conv; x per tensor, w per tensor or per output channel) likewise.
// Arithmetic is float32 where onnx's numpy reference promotes to float64 (an int32 x or zero point,
// the QLinear ops' requantization), as onnxruntime computes and as generated code does (it computes
// float64 in float): the reference interpreter and the compiled plan then agree exactly, and differ
// from float64 only where a value lies within float32's rounding of a rounding boundary.
// Scales and zero points are per tensor (one element), per axis (1-D along `axis`) or blocked
// (`block_size` along `axis`, the last block short), broadcast against x with Reshape or Gather.
//
// Takes the NodeLowering of one of those ops. Guarantees: onnx's reference semantics
// (onnx/reference/ops: the same rounding and saturation); integer contractions are
// exact (int32 operands accumulate in 64 bits: reference/contraction.cpp, codegen's unstaged
// contraction); a float8 zero point that is a constant other than zero, an unknown target type or
// scales of the wrong shape are refused naming the input or attribute.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

void quantize_linear(NodeLowering& L);
void dequantize_linear(NodeLowering& L);
void dynamic_quantize_linear(NodeLowering& L);
void matmul_integer(NodeLowering& L);
void conv_integer(NodeLowering& L);
void qlinear_matmul(NodeLowering& L);
void qlinear_conv(NodeLowering& L);
// The product of float32 values a and b (each transposed where asked; times alpha), a MatMul's or a
// Gemm's being lowered by L, where both are DequantizeLinear results of int8 or uint8 values, A's
// scale and zero point per tensor and B's per tensor or per output column (a QDQ model's pair
// around the product): the integer product of the bytes less the zero points' terms (as
// MatMulInteger's), cast to float32, times a_scale x b_scale (x alpha); kNoValue (nothing
// emitted) otherwise, and where K x 255 x 255 passes int32's range. The integer sum is exact where
// the float32 one rounds at every step.
int fold_dequantized_matmul(NodeLowering& L, int a, bool trans_a, int b, bool trans_b, float alpha = 1.0f);
// The Conv of float32 x by float32 w (plus `bias`, kNoValue for none) with `attrs`
// (conv_attributes), both DequantizeLinear results of int8 or uint8 values, x's scale and zero
// point per tensor and w's per tensor or per output channel (a QDQ model's pair around the
// convolution): ConvInteger's byte product over x's patches (the patches gathered from the bytes
// inside the product's group, x quantized once in its own), cast to float32, times x_scale x
// w_scale, plus the bias; kNoValue (nothing emitted) where the product would stay an int32 Conv
// (conv_integer's rules) or where a group's K x 255 x 255 passes int32's range.
int fold_dequantized_conv(NodeLowering& L, int x, int w, int bias, const Attributes& attrs);

}  // namespace fusetune::importer
