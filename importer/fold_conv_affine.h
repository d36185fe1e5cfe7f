// Fold per-channel affines into convolutions.
//
//   y = Conv(x, W, b); z = Mul(y, s); u = Add(z, t)      (s, t constant, per output channel)
//   ==>  u = Conv(x, W * s[oc], b * s + t)
//
// Takes a canonical graph. Folds a Mul and/or an Add whose other operand is a constant that varies
// at most along the channel axis, when the Conv's weight and bias are constants and each
// intermediate has no other use. This is how BatchNormalization (lowered to Mul + Add) disappears
// into the preceding Conv. Guarantees: the graph computes the same function (up to rounding);
// nodes stay in topological order; dead nodes are removed. Returns the number of ops folded.
#pragma once

#include "core/graph.h"

namespace fusetune::importer {

int fold_conv_affine(Graph& g);

}  // namespace fusetune::importer
