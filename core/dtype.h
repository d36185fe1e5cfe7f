// DType: element types of tensors, with their ONNX codes, sizes and names, and the float16/bfloat16
// conversions the reference interpreter uses (round to nearest even, NaN and infinity preserved).
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
};

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
bool is_float(DType t);
// The ONNX TensorProto.DataType code; kUndefined for codes fusetune does not represent
// (string, complex).
DType dtype_from_onnx(int code);
int dtype_to_onnx(DType t);

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t b);

}  // namespace fusetune
