// Lowering of ONNX's TopK (opsets 1, 10, 11, 24) to canonical ops, in one of three forms, for k
// >= 2 the first that fits.
// - Pairwise, along an axis of at most kPairwiseTopK elements with at most kMaxTopKPairs
//   comparisons in all: each element's rank along the axis is the count of elements that beat it
//   (larger, or smaller with largest = 0; equal at a lower index; a NaN is beaten by every other
//   value and NaNs tie), a ReduceSum of pairwise comparisons that fusion keeps in one kernel; then
//   rank r's value and index for r < k are a ReduceMax over the axis of the one element whose
//   rank is r (the others the type's lowest value, and -1 for the index): three or four launches
//   whatever k is.
// - Two stages, along a longer axis (a detector's anchors, a vocabulary): the axis cut into
//   chunks of c (a power of two; the last padded with NaN, or for integers the type's worst value,
//   which every element beats or ties at a lower index), each chunk's min(k, c) best by pairwise
//   ranks with their indices in the input, then the k best of those candidates by pairwise ranks
//   again (chunk after chunk, each in its order, so that equal values keep the order of their
//   indices). Taken where some c keeps both stages within the two bounds.
// - Rounds (k = 1, or where neither fits): round j takes the largest (smallest, largest = 0)
//   element not yet taken: ArgMax (ArgMin) of the input with the taken elements replaced by the
//   type's lowest (highest) value, keeping the axis, and its ReduceMax (ReduceMin) as the value;
//   where every element left equals that fill value (the input holds it), the first index not
//   taken. The taken mask grows by an Equal against a constant iota along the axis; the k values
//   and indices are Concats along the axis.
// k must be known at import (a constant, or an input given with the model's test inputs).
//
// Takes the NodeLowering of a TopK node. Guarantees: onnx's reference results for inputs without
// NaN (values in order, equal values by ascending index, `sorted` either way); pairwise O(n x n)
// work, about 20 canonical nodes; two stages O(n x c + (n / c x k)^2), about 50; rounds O(k x n)
// and about 8 canonical nodes a round; k outside [0, the axis's extent] is refused naming it.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

inline constexpr int64_t kPairwiseTopK = 4096;          // the longest axis ranked pairwise
inline constexpr int64_t kMaxTopKPairs = int64_t{1} << 24;  // pairwise comparisons in all (the reference holds them)

void top_k(NodeLowering& L);

}  // namespace fusetune::importer
