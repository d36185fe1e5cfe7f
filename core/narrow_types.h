// Narrow element types of ONNX 1.23: conversions between float and the codes of float8 (E4M3FN,
// E4M3FNUZ, E5M2, E5M2FNUZ), E8M0 and float4 (E2M1), and the wrap of an integer to 4 or 2 bits,
// as ONNX's reference implementation defines them (ml_dtypes for float8, float4 and the 4/2-bit
// integers, onnx.numpy_helper.to_float8e8m0 for E8M0).
//
// Guarantees: float to float8/float4 rounds to nearest even; with `saturate` (ONNX Cast's default)
// values beyond the largest finite one, infinities included, become it, without they become the
// type's infinity (E5M2) or NaN; NaN stays NaN (float4, which has none, gives ml_dtypes' zero of
// the opposite sign); the FNUZ types have no negative zero. E8M0 keeps only the exponent, rounded
// as Cast's `round_mode` says. Every code decodes (narrow_to_float) to the value it stands for.
// This is the reference interpreter's side; generated code has its own (codegen/emit_common.h),
// and tests hold the two together and both against ONNX's reference.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace fusetune {

enum class RoundMode : uint8_t { kUp, kDown, kNearest };  // E8M0's rounding (Cast's round_mode)

struct NarrowCast {
  bool saturate = true;
  RoundMode round = RoundMode::kUp;
};

// How a value already of a narrow type is stored (Tensor::set_floats, generated stores): exact for
// every value the type holds, infinity included; E8M0 rounds down, so 2^-127 keeps its code 0.
inline constexpr NarrowCast kStoreExact{false, RoundMode::kDown};

// The RoundMode an ONNX round_mode attribute names; throws Error naming an unknown one.
RoundMode round_mode_from_name(std::string_view name);

// t is a narrow float type (is_narrow_float).
uint8_t float_to_narrow(DType t, float f, NarrowCast how = {});
float narrow_to_float(DType t, uint8_t code);

// v reduced to t's width, two's complement (int4, uint4, int2, uint2; other types unchanged).
int64_t wrap_narrow_int(DType t, int64_t v);

}  // namespace fusetune
