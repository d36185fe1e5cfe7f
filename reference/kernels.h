// Reference kernels: one host implementation per canonical op, written for obvious correctness
// first. They are the oracle generated kernels are checked against, and the importer's constant
// folder. Large tensors are streamed in pieces (kernel_util.h for_element_chunks: element-wise
// kernels, Softmax and LayerNormalization on the machine's cores, reductions and compare in
// element order), which gives every element the value a whole-tensor pass gives it: a task's
// reference on 128 MB tensors took the worker's measuring child longer than a candidate's timeout.
//
// run_node takes a canonical node and its input tensors (nullptr for an absent optional input) and
// returns its outputs, shaped by the op's shape function (core/ops.h). Errors throw Error naming
// the node.
#pragma once

#include <span>
#include <vector>

#include "core/graph.h"

namespace fusetune::reference {

std::vector<Tensor> run_node(const Node& node, std::span<const Tensor* const> inputs);

// Per-family entry points, called by run_node; each takes the pre-shaped outputs to fill.
void run_elementwise(const Node& node, std::span<const Tensor* const> in, Tensor& out);
void run_reduction(const Node& node, std::span<const Tensor* const> in, Tensor& out);
void run_normalization(const Node& node, std::span<const Tensor* const> in, Tensor& out);
void run_contraction(const Node& node, std::span<const Tensor* const> in, Tensor& out);
void run_pooling(const Node& node, std::span<const Tensor* const> in, Tensor& out);
void run_data_movement(const Node& node, std::span<const Tensor* const> in, Tensor& out);

}  // namespace fusetune::reference
