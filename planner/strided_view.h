// Strided views: where the elements of a value computed by data movement alone lie in another
// value's buffer, as an offset and one stride per axis (in elements), the form a library takes
// its operands in (cuDNN's tensors are dimensions and strides).
//
// Takes a graph and a set of its nodes (a fusion group). input_view follows a value back through
// Reshape, Transpose, Slice (positive steps) and Expand nodes of the set to the value outside the
// set they start from; output_view follows a value forward through Reshape and Transpose nodes of
// the set to a value the set exports, stored contiguously. A Reshape is a view only where the
// strides allow it (the rule PyTorch's view() follows: axes merged must be contiguous with each
// other; an expanded axis, stride 0, merges with nothing). Guarantees: for every index i of the
// value, element i is element offset + sum(i[d] / groups[d] * strides[d]) of the base's buffer
// (row-major); nullopt where some node on the way is not one of these or not a view. A group
// other than 1 comes from a Reshape that merges an axis with the broadcast axis after it
// (grouped-query attention's repeat of K and V: Expand [b, kv, 1, s, d] to [b, kv, n, s, d], then
// Reshape to [b, kv x n, s, d]: head h reads kv head h / n); such an axis is never merged or
// split again, and a Slice keeps it from its start with step 1. An axis of stride 1 and a group
// other than 1 repeats each element (a broadcast axis merged into the innermost): no contiguous
// run.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "core/graph.h"

namespace fusetune::planner {

struct StridedView {
  int base = -1;       // the value whose buffer holds the elements
  int64_t offset = 0;  // elements
  Shape dims;
  std::vector<int64_t> strides;  // elements; 0 along an expanded axis
  std::vector<int64_t> groups;   // index i along axis d moves i / groups[d] strides; 1 but where a broadcast axis merged in
  std::vector<int> path;         // the nodes of the set followed, in graph order
};

// A row-major value viewed as itself.
StridedView contiguous_view(int base, const Shape& dims);

// `v` reshaped to `to` without moving elements, or nullopt where its strides do not allow it.
std::optional<StridedView> reshape_view(const StridedView& v, const Shape& to);

// Whether some axis of v has a group other than 1 (a layout a library's strides cannot state).
bool grouped(const StridedView& v);

std::optional<StridedView> input_view(const Graph& g, const std::set<int>& nodes, int value);

std::optional<StridedView> output_view(const Graph& g, const std::set<int>& nodes, int value);

}  // namespace fusetune::planner
