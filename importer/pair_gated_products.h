// A gated linear unit's two projections as one product: LLaMA's gate and up (SwiGLU), GeGLU's.
//
//   g = MatMul(x, Wg); u = MatMul(x, Wu); y = Mul(act(g), u)          (Wg, Wu constants, K x N)
//   ==>  p = MatMul(x, W), W[:, 2c] = Wg[:, c], W[:, 2c + 1] = Wu[:, c];
//        r = Reshape(p, [..., M, N, 2]); g = Reshape(Slice(r, [..., 0:1])); u = Reshape(Slice(r, [..., 1:2]))
//
// Takes a canonical graph. act(g) is a chain of element-wise ops of g's shape reading g and
// one-element constants alone (SiLU as g x Sigmoid(g), GELU's spellings); the two MatMuls read
// the same left operand and constant right operands of one 2-D shape and dtype; each MatMul is in
// one pair at most. Interleaved, a tile of the gated output needs one tile of the product with its
// gate and up columns side by side: one block computes both and the epilogue pairs them, where
// the two products were two launches, the gate's output written and read back and x read twice
// (a decode step's RMSNorm computed twice). Guarantees: every element of g and u is the same dot
// product, summed in the same order; nodes stay in topological order (the pair's nodes where the
// first of the two products was); the old products and their weights are removed. Returns the
// number of pairs.
#pragma once

#include "core/graph.h"

namespace fusetune::importer {

int pair_gated_products(Graph& g);

}  // namespace fusetune::importer
