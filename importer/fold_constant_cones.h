// Constant cones too large for the per-node fold, folded where that does not grow the model.
//
//   m = Where(GreaterOrEqual(Sub(iota_j, iota_i), 1), F, 0); c = Mul(m, T)   (F, T constants)
//   ==>  c = the constant the cone computes
//
// Takes a canonical graph as lowering leaves it. GraphBuilder folds a node whose inputs are all
// constant unless its result exceeds kFoldLimit elements (importer/builder.h), so a cone of
// nodes computing from constants alone (no graph input, no generator, no guard) survives import
// when any value inside it is that large: a torch export of a causal mask at 4,096 tokens
// (transformers' LLaMA: a Trilu of a folded full matrix times a folded triangle, each 4,096 x
// 4,097 floats) computes the mask in a kernel of its own on every run, and the attention that
// reads it cannot see it is causal (planner/attention.h causal_mask_of reads constants). A value
// such a cone computes is folded into a constant when the constants only its cone reads, its
// intermediate values read by nothing else, hold at least as many bytes as the value: the
// model's constants do not grow (the mask above: 134 MB of constants become one of 67 MB). Values
// are tried in node order, each fold making the next cone's inputs constants, so the mask folds a
// node at a time; a fold that pays only for a whole cone whose first node alone would not (a
// Slice that shrinks, then a Pad) is missed. A cone of small constants whose result is large (a
// mask from index vectors alone: importer/clone_constant_chains.h) stays computed, and so does a
// graph output of data-dependent extent.
// Guarantees: the graph computes the same function exactly (the reference kernels compute the
// constant); every reader of a folded result reads the new constant; nodes stay in topological
// order; the cone's dead nodes and constants are removed. Returns the number of nodes folded.
#pragma once

#include <cstddef>
#include <vector>

#include "core/graph.h"

namespace fusetune::importer {

size_t fold_constant_cones(Graph& g);

// For each node of g: whether it computes from constants alone (it has inputs, no guard, and
// every input is a constant or computed so; a generator has no inputs).
std::vector<char> computed_from_constants(const Graph& g);

}  // namespace fusetune::importer
