// Integer arithmetic the importer, planner and codegen share. ceil_div takes a non-negative
// dividend and a positive divisor; floor_div any dividend and a non-zero divisor. Guarantees exact
// results (no floating point) for every int64_t that does not overflow a + b (ceil_div) or a / b.
#pragma once

#include <cstdint>

namespace fusetune {

// The number of b-sized pieces that cover a: ceil(a / b).
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// a / b rounded towards negative infinity (Python's a // b).
constexpr int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace fusetune
