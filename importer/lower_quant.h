// Lowering of ONNX's quantization operators (default domain) to canonical ops:
//   - QuantizeLinear (10-25): x / scale (in their type, float32 where they differ, or `precision`),
//     rounded half to even, plus the zero point, saturated to the target's range, cast; to float8
//     a Cast (saturating or not), to float4 a Cast after adding the zero point;
//   - DequantizeLinear (10-25): (x - zero point) x scale in float32, cast to the scale's type or
//     `output_dtype`;
//   - DynamicQuantizeLinear (11): the uint8 scale and zero point of x's range widened to 0, and
//     x quantized with them;
//   - MatMulInteger (10), ConvInteger (10): the operands cast to int32 less their zero points
//     (per tensor; per row of A, per column of B, per output channel of W), an int32 MatMul or Conv;
//   - QLinearMatMul (10, 21), QLinearConv (10): that int32 contraction (plus QLinearConv's int32
//     bias) times a_scale x b_scale / y_scale in float32, rounded half to even, plus y's zero
//     point, saturated and cast.
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

}  // namespace fusetune::importer
