// Pointwise convolutions as matrix products.
//
//   y = Conv(x, W, b)   x: [N, C, S1, ...], W: [K, C, 1, ...] constant, group 1, strides 1, no pads
//   ==>  y = Reshape(MatMul(W', Reshape(x, [N, C, S])) + b', [N, K, S1, ...])
//        (S = S1 x ... > 1, W' = W as [K, C], b' = b as [K, 1])
//
// Takes a canonical graph. A 1 x 1 convolution with stride 1 and no padding is a product of its
// weights by each image's channels-by-pixels matrix (NCHW keeps each channel's pixels contiguous):
// as a MatMul it takes the staged product's forms that the implicit-GEMM Conv lacks (tensor cores
// for 16-bit operands and under the TF32 policy, wgmma, 16-byte cp.async rings copying the image's
// buffer through the Reshape: planner::computed_elements), and cuDNN still computes it as a 1 x 1
// convolution (planner/library_match.cpp's pointwise pattern).
// Only floating-point convolutions with constant weights over more than one pixel are rewritten:
// an integer one keeps its exact Conv, and on a 1 x 1 feature map (a squeeze-and-excitation's
// channel mixing) the product would be a row by a matrix, which the cost model charges more L2
// traffic than its kernels request (TrafficModel.*). Guarantees: the graph computes the same
// function (the same products and sums; the bias is added after the sum is rounded to the type,
// where the reference's Conv adds it before, which differs in the last place of 16-bit types); the
// Conv's output value keeps its id, name and shape, so its readers and a graph output are
// unchanged; nodes stay in topological order and the new nodes carry the Conv's guards; the
// weights and biases nothing reads any more are removed. Returns the number rewritten.
#pragma once

#include "core/graph.h"

namespace fusetune::importer {

int pointwise_convs_as_matmuls(Graph& g);

}  // namespace fusetune::importer
