#include "core/narrow_types.h"

#include <bit>
#include <cmath>

#include "core/error.h"

namespace fusetune {

namespace {

// A float8/float4 layout: sign, `ebits` exponent bits biased by `bias`, `mbits` mantissa bits.
struct Minifloat {
  int ebits;
  int mbits;
  int bias;
  uint8_t max_code;  // the largest finite magnitude's code
  bool has_inf;      // E5M2: the all-ones exponent holds infinity and NaN
  bool fnuz;         // finite, NaN is 0x80, no negative zero
  bool has_nan;      // float4 has none
};

Minifloat layout(DType t) {
  switch (t) {
    case DType::kF8E4M3FN: return {4, 3, 7, 0x7E, false, false, true};
    case DType::kF8E4M3FNUZ: return {4, 3, 8, 0x7F, false, true, true};
    case DType::kF8E5M2: return {5, 2, 15, 0x7B, true, false, true};
    case DType::kF8E5M2FNUZ: return {5, 2, 16, 0x7F, false, true, true};
    case DType::kF4E2M1: return {2, 1, 1, 0x07, false, false, false};
    default: fail("no float8/float4 layout for ", dtype_name(t));
  }
}

int sign_shift(const Minifloat& L) { return L.ebits + L.mbits; }

double decode(const Minifloat& L, uint8_t code) {
  const uint8_t sign = static_cast<uint8_t>((code >> sign_shift(L)) & 1u);
  const uint8_t mag = static_cast<uint8_t>(code & ((1u << sign_shift(L)) - 1u));
  const int exp_field = mag >> L.mbits;
  const int mant = mag & ((1 << L.mbits) - 1);
  if (L.fnuz && code == 0x80) return std::nan("");
  if (L.has_nan && !L.fnuz && !L.has_inf && mag == ((1 << sign_shift(L)) - 1)) return std::nan("");
  if (L.has_inf && exp_field == (1 << L.ebits) - 1) return mant == 0 ? (sign ? -INFINITY : INFINITY) : std::nan("");
  const double v = exp_field == 0 ? std::ldexp(mant, 1 - L.bias - L.mbits)
                                  : std::ldexp((1 << L.mbits) + mant, exp_field - L.bias - L.mbits);
  return sign ? -v : v;
}

// The code of an out-of-range value: the largest finite one, infinity or NaN.
uint8_t overflow_code(const Minifloat& L, uint8_t sign_bit, bool saturate) {
  if (saturate || !L.has_nan) return static_cast<uint8_t>(sign_bit | L.max_code);
  if (L.fnuz) return 0x80;
  if (L.has_inf) return static_cast<uint8_t>(sign_bit | 0x7C);
  return static_cast<uint8_t>(sign_bit | 0x7F);
}

uint8_t encode(const Minifloat& L, float f, bool saturate) {
  const bool neg = std::signbit(f);
  const auto sign_bit = static_cast<uint8_t>(neg ? 1u << sign_shift(L) : 0u);
  if (std::isnan(f)) {
    if (!L.has_nan) return static_cast<uint8_t>(neg ? 0u : 1u << sign_shift(L));  // ml_dtypes' choice
    if (L.fnuz) return 0x80;
    return static_cast<uint8_t>(sign_bit | (L.has_inf ? 0x7E : 0x7F));
  }
  if (std::isinf(f)) return overflow_code(L, sign_bit, saturate);
  const double a = std::fabs(static_cast<double>(f));
  const int emin = 1 - L.bias;
  int e2 = 0;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1): the leading bit is 2^(e2-1)
  const int e = a == 0.0 ? emin : std::max(e2 - 1, emin);
  const double quantum = std::ldexp(1.0, e - L.mbits);
  const double rounded = std::nearbyint(a / quantum) * quantum;  // the division is exact
  if (rounded > decode(L, L.max_code)) return overflow_code(L, sign_bit, saturate);
  if (rounded == 0.0) return L.fnuz ? 0 : sign_bit;
  uint8_t mag = 0;
  if (rounded < std::ldexp(1.0, emin)) {
    mag = static_cast<uint8_t>(rounded / std::ldexp(1.0, emin - L.mbits));
  } else {
    std::frexp(rounded, &e2);
    const int E = e2 - 1;
    const auto mant = static_cast<int>(rounded / std::ldexp(1.0, E - L.mbits)) - (1 << L.mbits);
    mag = static_cast<uint8_t>(((E + L.bias) << L.mbits) | mant);
  }
  return static_cast<uint8_t>(sign_bit | mag);
}

// onnx.numpy_helper.to_float8e8m0, on the float's bits.
uint8_t encode_e8m0(float f, NarrowCast how) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  uint32_t exponent = (bits >> 23) & 0xFFu;
  if (exponent == 0xFFu) return 0xFF;
  bool up = false;
  switch (how.round) {
    case RoundMode::kNearest: {
      const bool g = (bits & 0x400000u) != 0, r = (bits & 0x200000u) != 0, s = (bits & 0x1FFFFFu) != 0;
      up = g && (r || s || exponent > 0);
      break;
    }
    case RoundMode::kUp: up = (bits & 0x7FFFFFu) != 0; break;
    case RoundMode::kDown: break;
  }
  if (up && !(how.saturate && exponent == 0xFEu)) ++exponent;
  return static_cast<uint8_t>(exponent);
}

}  // namespace

RoundMode round_mode_from_name(std::string_view name) {
  if (name == "up") return RoundMode::kUp;
  if (name == "down") return RoundMode::kDown;
  if (name == "nearest") return RoundMode::kNearest;
  fail("round_mode '", name, "' is not one of up, down, nearest");
}

uint8_t float_to_narrow(DType t, float f, NarrowCast how) {
  if (t == DType::kF8E8M0) return encode_e8m0(f, how);
  return encode(layout(t), f, how.saturate);
}

float narrow_to_float(DType t, uint8_t code) {
  if (t == DType::kF8E8M0) return code == 0xFF ? std::nanf("") : std::ldexp(1.0f, static_cast<int>(code) - 127);
  return static_cast<float>(decode(layout(t), code));
}

int64_t wrap_narrow_int(DType t, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  switch (t) {
    case DType::kI4: return static_cast<int64_t>((u & 0xFu) ^ 0x8u) - 8;
    case DType::kU4: return static_cast<int64_t>(u & 0xFu);
    case DType::kI2: return static_cast<int64_t>((u & 0x3u) ^ 0x2u) - 2;
    case DType::kU2: return static_cast<int64_t>(u & 0x3u);
    default: return v;
  }
}

}  // namespace fusetune
