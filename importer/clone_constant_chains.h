// Values computed from a few constants, too large to fold, computed again by each reader.
//
//   m = Where(Greater(range_j, range_i), lowest, 0)   (16.8 M elements from two index vectors)
//   s0 = Slice(m); a0 = Add(scores0, s0)  ...  s1 = Slice(m); a1 = Add(scores1, s1)
//   ==>  each Add reads its own copy of Slice(Where(Greater(range_j, range_i), lowest, 0))
//
// Takes a canonical graph after the folds. A chain of nodes computing from constants alone (no
// graph input, no generator, no guard; importer/fold_constant_cones.h computed_from_constants)
// survives import only where a value in it exceeds kFoldLimit elements: a causal mask of a
// 4,096-token export with dynamic axes, from Range vectors. Read by several layers, it is one
// fusion group that writes the mask and every attention reads it back (67 MB each), and the
// attention cannot tell it is causal (its members hold no mask: planner/attention.h). Each
// reader (a node not computed from constants, under no guard) of such a value gets its own copy
// (one for all the values it reads) of the nodes
// computing it, where the chain's constants hold at most an eighth of the value's bytes and the
// chain is at most kMaxChain nodes: fusion's prologue rule then computes it inside the reader's
// group (planner/toeplitz.h finds it causal there), and no kernel writes it. Guarantees: the
// graph computes the same function exactly; nodes stay in topological order (a copy just before
// its reader); a chain no two (value, reader) pairs share stays as it is; the originals left
// unread are removed. Returns the number of nodes copied.
#pragma once

#include <cstddef>

#include "core/graph.h"

namespace fusetune::importer {

inline constexpr size_t kMaxChain = 32;

size_t clone_constant_chains(Graph& g);

}  // namespace fusetune::importer
