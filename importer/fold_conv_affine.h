// Fold per-channel affines into convolutions.
//
//   y = Conv(x, W, b); z = Mul(y, s); u = Add(z, t)      (s, t constant, per output channel)
//   ==>  u = Conv(x, W * s[oc], b * s + t)
//
// Takes a canonical graph. Folds the chain of Muls, Adds and Subs (of the form y - t) that follows
// a Conv, in any order, whose other operands are constants that vary at most along the channel
// axis, when the Conv's weight and bias are constants and each intermediate has no other use. One
// Transpose may stand between the Conv and the chain (an NHWC model's layout change: Keras 3's
// exports put one after every convolution); the channel axis is then where it moved, and the
// Transpose stays, reading the folded Conv. This is how BatchNormalization (lowered to Mul + Add,
// or exported as Sub, Mul, Add) disappears into the preceding Conv. Guarantees: the graph computes
// the same function (up to rounding); nodes stay in topological order; dead nodes are removed.
// Returns the number of ops folded.
#pragma once

#include "core/graph.h"

namespace fusetune::importer {

int fold_conv_affine(Graph& g);

}  // namespace fusetune::importer
