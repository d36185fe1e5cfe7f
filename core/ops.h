// The canonical op set: every op a Graph may hold after import, with its arity, its kind and its
// type/shape function. docs/canonical-ops.md lists the ops with their attributes and semantics.
//
// Shape functions depend only on input types and attributes (never on tensor data): canonical
// graphs have static shapes, and the importer resolves data-dependent arguments (a Reshape's
// target, a Slice's bounds) into attributes before it creates a node. They validate their
// arguments and throw Error naming the node on anything inconsistent.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/narrow_types.h"

#include "core/graph.h"

namespace fusetune {

enum class OpKind {
  kElementwise,   // output element i depends on input elements at i (after broadcasting)
  kReduction,     // reduces some axes of one input
  kNormalization, // softmax and layer norm: reduce and broadcast back over the same axes
  kContraction,   // MatMul and Conv
  kPooling,       // windowed reductions
  kDataMovement,  // reshape, transpose, slice, gather, ...: no arithmetic
};

std::string_view op_kind_name(OpKind k);

struct TensorType {
  DType dtype = DType::kUndefined;  // kUndefined marks an absent optional input
  Shape shape;
  bool present() const { return dtype != DType::kUndefined; }
  bool operator==(const TensorType&) const = default;
};

using InferFn = std::vector<TensorType> (*)(const Node& node, std::span<const TensorType> inputs);

struct OpSchema {
  std::string_view name;
  OpKind kind;
  int min_inputs;
  int max_inputs;
  InferFn infer;
};

const OpSchema* find_op(std::string_view name);
std::span<const OpSchema> canonical_ops();

// Whether a node of a fusion group runs as a stage of its own in generated kernels (reductions,
// normalizations, contractions, pooling, ScatterND: codegen/stages/context.h's anchors); every
// other node is computed inline where its value is read.
bool runs_as_stage(const Node& n);

// Checks arity and runs the op's shape function; errors name the node and its op.
std::vector<TensorType> infer_types(const Node& node, std::span<const TensorType> inputs);

// Numpy-style broadcast of two shapes; throws Error naming `what` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& what);

// Normalizes a possibly negative axis for a tensor of `rank` dimensions; throws Error if out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what);

// Floating-point operations of one node (multiply-add = 2), by the conventions in docs/canonical-ops.md.
int64_t node_flops(const Graph& g, const Node& n);

// Special-function results of one node (exp, log, sqrt, sin, ... : what the GPU computes on its
// special function units and the host executor counts apart), by the code generator's forms: one
// per output element of a transcendental element-wise op, two per element of a Softmax (the sum's
// pass and the output's), one per element of a LogSoftmax, one per row of a LayerNormalization.
int64_t node_special_ops(const Graph& g, const Node& n);

// How a Cast node rounds to a float8, E8M0 or float4 target: its `saturate` (default 1) and
// `round_mode` (a RoundMode, default up) attributes.
NarrowCast cast_rounding(const Node& n);

}  // namespace fusetune
