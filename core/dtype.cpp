#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace fusetune {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kI8: return 1;
    case DType::kI16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kU16: return 2;
    case DType::kU32: return 4;
    case DType::kU64: return 8;
    case DType::kBool:
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E8M0:
    case DType::kF4E2M1:
    case DType::kI4:
    case DType::kU4:
    case DType::kI2:
    case DType::kU2: return 1;
    case DType::kUndefined: return 0;
  }
  return 0;
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::kF4E2M1:
    case DType::kI4:
    case DType::kU4: return 4;
    case DType::kI2:
    case DType::kU2: return 2;
    default: return static_cast<int>(8 * dtype_size(t));
  }
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF64: return "float64";
    case DType::kI8: return "int8";
    case DType::kI16: return "int16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
    case DType::kU16: return "uint16";
    case DType::kU32: return "uint32";
    case DType::kU64: return "uint64";
    case DType::kBool: return "bool";
    case DType::kF8E4M3FN: return "float8e4m3fn";
    case DType::kF8E4M3FNUZ: return "float8e4m3fnuz";
    case DType::kF8E5M2: return "float8e5m2";
    case DType::kF8E5M2FNUZ: return "float8e5m2fnuz";
    case DType::kF8E8M0: return "float8e8m0";
    case DType::kF4E2M1: return "float4e2m1";
    case DType::kI4: return "int4";
    case DType::kU4: return "uint4";
    case DType::kI2: return "int2";
    case DType::kU2: return "uint2";
    case DType::kUndefined: return "undefined";
  }
  return "undefined";
}

DType dtype_from_name(std::string_view name) {
  for (int k = 1; k <= static_cast<int>(DType::kU2); ++k) {
    if (dtype_name(static_cast<DType>(k)) == name) return static_cast<DType>(k);
  }
  return DType::kUndefined;
}

bool is_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64 || is_narrow_float(t);
}

bool is_narrow_float(DType t) {
  return t == DType::kF8E4M3FN || t == DType::kF8E4M3FNUZ || t == DType::kF8E5M2 || t == DType::kF8E5M2FNUZ ||
         t == DType::kF8E8M0 || t == DType::kF4E2M1;
}

DType dtype_from_onnx(int code) {
  switch (code) {
    case 1: return DType::kF32;
    case 2: return DType::kU8;
    case 3: return DType::kI8;
    case 4: return DType::kU16;
    case 5: return DType::kI16;
    case 6: return DType::kI32;
    case 7: return DType::kI64;
    case 9: return DType::kBool;
    case 10: return DType::kF16;
    case 11: return DType::kF64;
    case 12: return DType::kU32;
    case 13: return DType::kU64;
    case 16: return DType::kBF16;
    case 17: return DType::kF8E4M3FN;
    case 18: return DType::kF8E4M3FNUZ;
    case 19: return DType::kF8E5M2;
    case 20: return DType::kF8E5M2FNUZ;
    case 21: return DType::kU4;
    case 22: return DType::kI4;
    case 23: return DType::kF4E2M1;
    case 24: return DType::kF8E8M0;
    case 25: return DType::kU2;
    case 26: return DType::kI2;
    default: return DType::kUndefined;
  }
}

int dtype_to_onnx(DType t) {
  switch (t) {
    case DType::kF32: return 1;
    case DType::kU8: return 2;
    case DType::kI8: return 3;
    case DType::kU16: return 4;
    case DType::kI16: return 5;
    case DType::kI32: return 6;
    case DType::kI64: return 7;
    case DType::kBool: return 9;
    case DType::kF16: return 10;
    case DType::kF64: return 11;
    case DType::kU32: return 12;
    case DType::kU64: return 13;
    case DType::kBF16: return 16;
    case DType::kF8E4M3FN: return 17;
    case DType::kF8E4M3FNUZ: return 18;
    case DType::kF8E5M2: return 19;
    case DType::kF8E5M2FNUZ: return 20;
    case DType::kU4: return 21;
    case DType::kI4: return 22;
    case DType::kF4E2M1: return 23;
    case DType::kF8E8M0: return 24;
    case DType::kU2: return 25;
    case DType::kI2: return 26;
    case DType::kUndefined: return 0;
  }
  return 0;
}

float round_to_tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;  // a NaN stays quiet and a NaN
  } else {
    u += 0x1000u;  // half of the dropped 13 bits: the carry rounds the magnitude away from zero at a tie
  }
  u &= ~0x1fffu;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // infinity or NaN; keep NaN quiet
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflows to infinity
  if (abs < 0x38800000u) {  // result is subnormal or zero: scale into the subnormal grid
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // 2^24: units of the smallest subnormal
    const float rounded = std::nearbyint(scaled);                    // round half to even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(rounded));
  }
  // normal: rebias exponent and round the 13 dropped mantissa bits to nearest even
  uint32_t mant = abs + 0xfffu + ((abs >> 13) & 1u);
  mant -= 0x38000000u;  // exponent bias 127 -> 15
  return static_cast<uint16_t>(sign | (mant >> 13));
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) / 16777216.0f;  // mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t float_to_bfloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

float bfloat16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace fusetune
