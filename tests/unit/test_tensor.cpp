// Tensors and dtypes: float16/bfloat16 conversion, casts, shape checks.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/tensor.h"

namespace fusetune {
namespace {

TEST(Half, RoundTripsEveryHalfValue) {
  // Every finite float16 converts to float and back to the same bits.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN payloads need not survive
    EXPECT_EQ(float_to_half(half_to_float(h)), h) << "bits " << bits;
  }
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): ties go to the even mantissa.
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);  // the largest half
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -26)), 0x0000);  // below half of it: zero
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(3.140625f)), 3.140625f);
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even (up)
}

TEST(Tensor, CastsLikeNumpyAstype) {
  const Tensor f = Tensor::from_floats(DType::kF32, {4}, std::vector<float>{-1.7f, 2.5f, 0.0f, 300.0f});
  EXPECT_EQ(f.cast(DType::kI64).to_ints(), (std::vector<int64_t>{-1, 2, 0, 300}));
  EXPECT_EQ(f.cast(DType::kBool).to_ints(), (std::vector<int64_t>{1, 1, 0, 1}));
  const Tensor i = Tensor::from_ints(DType::kI64, {2}, std::vector<int64_t>{300, -1});
  EXPECT_EQ(i.cast(DType::kU8).to_ints(), (std::vector<int64_t>{44, 255}));  // wraps like C
}

TEST(Tensor, RejectsNegativeAndAbsurdShapes) {
  EXPECT_THROW(Tensor(DType::kF32, {2, -1}), Error);
  EXPECT_THROW(Tensor(DType::kF32, {1 << 30, 1 << 30, 1 << 30}), Error);
  EXPECT_EQ(Tensor(DType::kF32, {0, 1 << 30, 1 << 30}).numel(), 0);
}

TEST(Tensor, ReshapeKeepsBytesAndChecksCount) {
  const Tensor t = Tensor::from_floats(DType::kF32, {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.reshaped({3, 2}).to_floats(), t.to_floats());
  EXPECT_THROW((void)t.reshaped({4, 2}), Error);
}

}  // namespace
}  // namespace fusetune
