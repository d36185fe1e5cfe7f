// Lowering of ONNX's Det (opset 11 on) to canonical ops.
//
// X [..., n, n] gives the determinant of each matrix, Y [...]: Gaussian elimination with partial
// pivoting as LAPACK's getrf does it (numpy.linalg.det's way), unrolled over the n columns for the
// static n: per column the row of the largest magnitude at or below the diagonal (ArgMax, the
// first of equals) is swapped in by one-hot row masks (a sign flip when it moves), its diagonal
// element multiplies the determinant, and the rows below subtract their multiples of it. A zero
// pivot (a singular matrix) makes the determinant 0 and eliminates nothing. In float32 for
// float16 and bfloat16 inputs, the result cast back.
//
// Takes the NodeLowering of a Det node. Guarantees: onnx's semantics (numpy.linalg.det) within
// float rounding; an input that is not [..., n, n], or n over kMaxDetOrder, is refused naming its
// shape.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

inline constexpr int64_t kMaxDetOrder = 64;  // n columns unroll into about 20 n nodes

void det(NodeLowering& L);

}  // namespace fusetune::importer
