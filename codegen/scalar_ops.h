// Scalar forms of the canonical element-wise ops for generated code: given C expressions for a
// node's operands, the C expression of its result. Float dtypes compute in float, integer and
// bool dtypes in long long, matching the reference kernels' semantics (reference/elementwise.cpp)
// up to float rounding. Also the conversions between storage dtypes and compute types.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace fusetune::codegen {

// "float" or "long long": the type values of this dtype are computed in.
std::string compute_ctype(DType t);
// A float literal for generated code (exact; infinities and NaN through prelude helpers).
std::string float_literal(double v);
// Converts a raw stored element (expression of storage type) to its compute type.
std::string load_as_compute(DType storage, const std::string& raw);
// Converts a compute-type value of dtype `from` to the storage type of `to`.
std::string store_from_compute(DType to, const std::string& value);
// The result of element-wise node `n` (OpKind::kElementwise) for operand expressions `args`
// (compute types of the node's input dtypes). Operands of a float type narrower than float are
// rounded to it before an op whose result jumps (comparisons, Floor, Ceil, Round, Sign, IsInf,
// Mod, ThresholdedRelu, and a Cast), as the reference stores them; other ops take them as
// computed, in float. Throws Error for ops or dtypes it does not cover.
std::string elementwise_expr(const Graph& g, const Node& n, const std::vector<std::string>& args);

}  // namespace fusetune::codegen
