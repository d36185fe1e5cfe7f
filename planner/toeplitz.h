// Toeplitz values: values computed from index vectors and scalars whose elements depend on the
// difference of their last two indices alone, found without computing the values.
//
// A causal mask too large to fold (a 4,096-token export with dynamic axes: Range vectors compared,
// or a Trilu's j - i, then Where, Cast and Mul, ~16.8 M elements) is an element-wise function of
// j - i. Takes a graph, the members of a group and a value; follows the members computing it back
// to constants. Leaves: a constant of one element, or an integer constant varying along one of
// its last two axes alone (every other extent 1) as an arithmetic progression (an iota). Integer
// values stay affine in the indices (a i + b j + c) through Add, Sub, Neg, Mul by a scalar and
// integer Casts, in exact arithmetic (a form whose values would wrap in its type, or overflow
// int64, is none); a comparison of two affine values compares their difference, in int64, with
// zero; any other
// element-wise op applies to the diagonals (the reference kernels run it on vectors of rows +
// cols - 1 elements); Reshape and Expand keep the last two extents (or broadcast an affine value
// along an axis of extent 1), Slice takes unit steps on the last two axes, Transpose keeps them in
// place (or swaps an affine value's). Anything else, a leaf that varies along a leading axis or a
// value not computed from constants, is no Toeplitz value. Guarantees: where a value is found,
// element [..., i, j] of v equals diagonal[j - i + rows - 1] for every leading index; the work is
// O(rows + cols) per member, never the value's elements.
#pragma once

#include <cstdint>
#include <optional>
#include <set>

#include "core/graph.h"

namespace fusetune::planner {

struct Toeplitz {
  int64_t rows = 1, cols = 1;  // the value's last two extents (1 for an axis it lacks)
  Tensor diagonal;             // rows + cols - 1 elements of the value's dtype
};

std::optional<Toeplitz> toeplitz_of(const Graph& g, const std::set<int>& members, int v);

}  // namespace fusetune::planner
