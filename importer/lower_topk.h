// Lowering of ONNX's TopK (opsets 1, 10, 11, 24) to canonical ops, in one of two forms.
// Pairwise, for k >= 2 along an axis of at most kPairwiseTopK elements (and at most
// kMaxTopKPairs comparisons in all): each element's rank along the axis is the count of elements
// that beat it (larger, or smaller with largest = 0; equal at a lower index; a NaN is beaten by
// every other value and NaNs tie), a ReduceSum of pairwise comparisons that fusion keeps in one
// kernel; then rank r's value and index for r < k are a ReduceMax over the axis of the one element
// whose rank is r (the others the type's lowest value, and -1 for the index): three launches or
// fewer whatever k is. Otherwise, k rounds of selection along the
// axis. Round j takes the largest (smallest, largest = 0) element not yet taken: ArgMax (ArgMin) of
// the input with the taken elements replaced by the type's lowest (highest) value, keeping the
// axis, and its ReduceMax (ReduceMin) as the value; where every element left equals that fill
// value (the input holds it), the first index not taken. The taken mask grows by an Equal against
// a constant iota along the axis; the k values and indices are Concats along the axis. k must be
// known at import (a constant, or an input given with the model's test inputs).
//
// Takes the NodeLowering of a TopK node. Guarantees: onnx's reference results for inputs without
// NaN (values in order, equal values by ascending index, `sorted` either way); pairwise O(n x n)
// work, about 20 canonical nodes; rounds O(k x n) work and about 8 canonical nodes a round; k
// outside [0, the axis's extent] is refused naming it.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

inline constexpr int64_t kPairwiseTopK = 4096;          // the longest axis ranked pairwise
inline constexpr int64_t kMaxTopKPairs = int64_t{1} << 24;  // pairwise comparisons in all (the reference holds them)

void top_k(NodeLowering& L);

}  // namespace fusetune::importer
