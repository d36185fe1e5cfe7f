// DType: element types of tensors, with their ONNX codes, sizes and names, and the float16/bfloat16
// conversions the reference interpreter uses (round to nearest even, NaN and infinity preserved).
//
// The narrow types of ONNX 1.23 (float8 E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ and E8M0, float4 E2M1,
// int4, uint4, int2, uint2) are held one element per byte in memory: a float8 or float4 element
// as its code (float4's in the low nibble), a 4- or 2-bit integer as its value in an int8/uint8.
// Only ONNX files pack 4- and 2-bit elements (dtype_bits); core/narrow_types.h converts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fusetune {

enum class DType : uint8_t {
  kUndefined,
  kF32,
  kF16,
  kBF16,
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kBool,
  kF8E4M3FN,
  kF8E4M3FNUZ,
  kF8E5M2,
  kF8E5M2FNUZ,
  kF8E8M0,
  kF4E2M1,
  kI4,
  kU4,
  kI2,
  kU2,  // last: dtype_from_name walks the enum up to here
};

size_t dtype_size(DType t);  // bytes per element in memory
int dtype_bits(DType t);      // bits per element in an ONNX file (4 or 2 for the packed types)
std::string_view dtype_name(DType t);
DType dtype_from_name(std::string_view name);  // kUndefined for a name no dtype has
bool is_float(DType t);
// float8, E8M0 and float4: stored as codes, computed in float.
bool is_narrow_float(DType t);
// The ONNX TensorProto.DataType code; kUndefined for codes fusetune does not represent
// (string, complex).
DType dtype_from_onnx(int code);
int dtype_to_onnx(DType t);

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t b);
// A float rounded to TF32's 10 mantissa bits, to nearest with ties away from zero (as
// cvt.rna.tf32.f32); infinities and NaNs keep their class.
float round_to_tf32(float f);

}  // namespace fusetune
