// Transposes that undo each other, next to each other or around layout-free element-wise ops.
//
//   t = Transpose(x, p); y = Transpose(t, q)                           ==>  y = Transpose(x, p o q)
//                                                                          (y = x for the identity)
//   t = Transpose(x, p); e1 = Relu(t); ...; y = Transpose(ek, q)      (q after p: the identity)
//   ==>  e1 = Relu(x); ...; y = ek
//
// Takes a canonical graph. An NHWC model exported through a framework that computes in NCHW
// (Keras 3 on its PyTorch backend) moves every convolution's output to NHWC and back before the
// next convolution, with the activation between: once fold_conv_affine has folded the
// normalization into the convolution, the pair is layout traffic and nothing else (a library
// convolution cannot take it into its epilogue; a generated kernel would copy it). The chain between
// the two Transposes must be element-wise ops each reading one value of the chain and otherwise
// only scalar constants (no random op: its draws follow the element's position), each value read
// by the next alone and none a graph output. A Transpose of a Transpose takes the composed
// permutation whatever else reads the first (a graph output keeps an identity Transpose, a copy).
// Guarantees: the graph computes the same function exactly; the chain's values take the
// untransposed shape; nodes stay in topological order; the dead Transposes are removed. Returns
// the number of pairs composed or removed.
#pragma once

#include "core/graph.h"

namespace fusetune::importer {

int cancel_transposes(Graph& g);

}  // namespace fusetune::importer
