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
// Whether values of dtype t, computed in float, lose precision when stored: a float type narrower
// than float.
bool rounds_when_stored(DType t);
// A compute-type value of dtype t as a store to t and a load back give it: rounded to t's precision
// where rounds_when_stored(t); other dtypes' values unchanged.
std::string as_stored(DType t, const std::string& value);
// Whether node n's result jumps where an operand crosses a point: a comparison, a rounding to an
// integer (Floor, Ceil, Round), Sign, IsInf, Mod, ThresholdedRelu, a Cast of a float to an integer
// or bool, ArgMax and ArgMin. Where a float16 value computed in float feeds one, the jump falls
// where the reference's does only if the value is the one the reference stores (as_stored):
// codegen/stages/context.h rounds such values, and the chains of ops before them.
bool result_jumps(const Graph& g, const Node& n);
// The result of element-wise node `n` (OpKind::kElementwise) for operand expressions `args`
// (compute types of the node's input dtypes), in float (or long long) as they come; a Cast of a
// narrow float to another float rounds its operand to the narrow type first, as the reference
// stores it. Throws Error for ops or dtypes it does not cover.
std::string elementwise_expr(const Graph& g, const Node& n, const std::vector<std::string>& args);

}  // namespace fusetune::codegen
