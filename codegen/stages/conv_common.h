// What the two staged forms of a Conv (stages/conv_gemm.h, stages/conv_window.h) share: the
// channel groups of the output channels a region spans.
//
// Takes a graph and a Conv node of it (weights [C_out, C_in / group, window...]). conv_cout_per_group
// is C_out / group; conv_groups_spanned, for one tile's numeric region of the Conv's output (whose
// channel axis, 1, is not empty), the number of groups its channels touch. The driver takes the
// most over the sampled tiles: the patch slices a staged step needs. Guarantees: at least 1.
#pragma once

#include <cstdint>
#include <vector>

#include "core/graph.h"
#include "planner/index_expr.h"

namespace fusetune::codegen::stages {

inline int64_t conv_cout_per_group(const Graph& g, const Node& n) {
  return g.value(n.inputs[1]).shape[0] / n.attrs.i("group", 1);
}

inline int64_t conv_groups_spanned(const Graph& g, const Node& n, const std::vector<planner::Interval>& region) {
  const int64_t cout_g = conv_cout_per_group(g, n);
  return region[1].hi / cout_g - region[1].lo / cout_g + 1;
}

}  // namespace fusetune::codegen::stages
