// Integer arithmetic the planner and codegen share. Takes non-negative dividends and positive
// divisors; guarantees exact results (no floating point) for every int64_t that does not overflow
// a + b.
#pragma once

#include <cstdint>

namespace fusetune {

// The number of b-sized pieces that cover a: ceil(a / b).
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace fusetune
