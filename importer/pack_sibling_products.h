// Sibling projections as one product: the MatMuls that read one left operand by constant 2-D
// right operands of one K and one dtype (BERT's query, key and value; a LLaMA layer's q, k and v
// projections).
//
//   y_i = MatMul(x, W_i)   (W_i constants, K x N_i; i = 1 .. n, n >= 2)
//   ==>  p = MatMul(x, W), W = [W_1 | W_2 | ... | W_n] (K x (N_1 + ... + N_n));
//        y_i = Slice(p, last axis, [N_1 + ... + N_(i-1), N_1 + ... + N_i))
//
// Where each y_i's one reader is an Add of a constant holding one value a column (a bias; y_i no
// graph output), the biases go with them: p' = Add(p, [b_1 | ... | b_n]), and the Adds' outputs are
// the slices of p' (the bias then joins the product's epilogue, and its readers read the sums as
// laid out: 16 bytes a load where the columns allow).
//
// Takes a canonical graph (after pair_gated_products: a gated pair's product is one sibling like
// any other). One product reads x once and tiles the columns of all, where the siblings were one
// launch each, or a packed launch of products each reading x; and a normalization that computes x
// can join the one product that reads it (planner/fusion.h, codegen/stages/mma_matmul.h's
// resident A), where with three readers it joined one of them and the others waited a launch for
// its value. Guarantees: every element of each y_i is the same dot product, summed in the same
// order (and each biased one the same sum); the products' (or biases') consumers read the slices, which keep the old outputs' names and shapes
// (graph outputs included); nodes stay in topological order (the product and its slices where
// the first sibling was); the old products and their weights are removed. Returns the number of
// products that replaced siblings.
#pragma once

#include "core/graph.h"

namespace fusetune::importer {

int pack_sibling_products(Graph& g);

}  // namespace fusetune::importer
