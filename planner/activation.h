// Activations a library applies in its epilogue (cuBLASLt's GELU), recognized in the element-wise
// tail of a fusion group however the exporter spelled them.
//
// Takes a graph, the nodes of a group's tail (in the group's order), the value they start from (x)
// and the value they end in. The tail qualifies when every node is element-wise, keeps x's shape,
// and reads only x, earlier tail nodes' outputs and scalar constants; Casts between float types are
// taken as exact (the library computes in float). It is then run on the reference interpreter, in
// float32, on 4,021 points from -100 to 100 (dense in [-10, 10]), against the function asked about
// evaluated in double precision. Guarantees: `computes_tanh_gelu` answers true only for a tail that
// agrees with 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) within 5e-5 max(1, |x|) at every
// point: the exact GELU, 0.5 x (1 + erf(x / sqrt 2)), differs from it by up to 4.7e-4 near
// x = -2.7 and is refused; constants rounded to float16 stay within 1.4e-5 of it and are accepted.
#pragma once

#include <span>

#include "core/graph.h"

namespace fusetune::planner {

bool computes_tanh_gelu(const Graph& g, std::span<const int> nodes, int x, int out);

}  // namespace fusetune::planner
