// Lowering of ONNX's random operators (RandomUniform, RandomUniformLike, RandomNormal,
// RandomNormalLike, Bernoulli, Multinomial) to the canonical RandomUniform generator and arithmetic.
//
// Every draw is Philox4x32-10 at the element's flat index (core/philox.h) under a 64-bit key: the
// first 8 bytes of the SHA-256 of the node's `seed` (its float bits; "unseeded" when absent) and
// the draw's ordinal in the import (GraphBuilder::next_draw). A plan therefore draws the same values
// on every run and on every device, the reference draws them too (a plan is verified against it),
// and the iterations of an unrolled Loop draw apart. By choice, a seeded node's stream also moves
// when a random node is added before it in the model. ONNX leaves the generator to the
// implementation: numpy's draws (onnx's expected outputs) are not reproduced.
//
//  - RandomUniform(Like): low + (high - low) x U, U uniform in [0, 1) on a 2^-24 grid.
//  - RandomNormal(Like): mean + scale x sqrt(-2 ln(1 - U0)) x cos(2 pi U1) (Box-Muller), U0 and U1
//    two words of one Philox block.
//  - Bernoulli: 1 where U < p (p = 0 never, p = 1 always).
//  - Multinomial: per row of unnormalized log-probabilities, the count of classes whose cumulative
//    softmax probability (a MatMul by a 0/1 triangle: at most kMaxMultinomialClasses classes) is
//    at most U, clamped to the last class. Where U falls within float rounding of a cumulative
//    probability, a compiled plan (float32) may pick the neighbouring class the reference (float64)
//    does not.
//
// Takes the NodeLowering of one of these nodes. Guarantees: the output types the spec allows
// (float16, bfloat16, float, double; Bernoulli also integers and bool; Multinomial int32 or int64),
// anything else refused naming the dtype; the values computed in float32 and cast once.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

inline constexpr int64_t kMaxMultinomialClasses = 4096;  // a 64 MB triangle

void random_op(NodeLowering& L);

}  // namespace fusetune::importer
