// Lowering of ONNX's TopK (opsets 1, 10, 11, 24) to canonical ops: k rounds of selection along the
// axis. Round j takes the largest (smallest, largest = 0) element not yet taken: ArgMax (ArgMin) of
// the input with the taken elements replaced by the type's lowest (highest) value, keeping the
// axis, and its ReduceMax (ReduceMin) as the value; where every element left equals that fill
// value (the input holds it), the first index not taken. The taken mask grows by an Equal against
// a constant iota along the axis; the k values and indices are Concats along the axis. k must be
// known at import (a constant, or an input given with the model's test inputs).
//
// Takes the NodeLowering of a TopK node. Guarantees: onnx's reference results for inputs without
// NaN (values in order, equal values by ascending index, `sorted` either way); O(k x n) work and
// about 8 canonical nodes a round; k outside [0, the axis's extent] is refused naming it.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

void top_k(NodeLowering& L);

}  // namespace fusetune::importer
