// Import: an ONNX file to a canonical Graph with static shapes, constants folded and every op
// lowered to the canonical set (docs/canonical-ops.md).
//
// The pipeline, in order: read the protobuf (importer/onnx_io) -> check opsets -> bind graph inputs
// to static shapes (declared, or given in ImportOptions::input_shapes; a symbolic dimension without
// a value is an error naming the input and the dimension; a sequence or an optional input as its
// tensors, importer/onnx_io.h) -> topologically order the ONNX nodes
// (a cycle, or an input nothing produces, is an error naming the node) -> lower each node
// (importer/lower; If, Loop and Scan inlined by importer/control_flow, their subgraphs through the
// same node loop), folding constant expressions such as shape arithmetic -> check declared output
// shapes (a sequence or an optional output is its tensors, named as importer/onnx_io.h says) -> drop dead nodes
// -> fold the cones of constants too large for the node-by-node fold where that does not grow the
// model's constants (importer/fold_constant_cones) -> fold per-channel affines into convolutions
// (importer/fold_conv_affine) -> validate. Every error is an Error whose message starts with the
// file and names the node, op, input or field at fault.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/graph.h"

namespace fusetune::importer {

struct ImportOptions {
  std::map<std::string, Shape> input_shapes;  // overrides the model's declared input shapes
  // Values of graph inputs known at import time. They stay graph inputs, but an op that needs a
  // data-dependent argument (a Reshape's shape, Resize's scales, ...) from one of them
  // specializes to the value given here, as `run` does with the data it is handed.
  std::map<std::string, Tensor> input_values;
  // Sequence- and optional-typed graph inputs are tensor inputs (importer/onnx_io.h): a sequence
  // S of n elements is the inputs S[0] ... S[n-1], whose shapes and values come under those names
  // above. Its length: sequence_lengths[S], else the count of S[0], S[1], ... in input_shapes (a
  // sequence of neither is an error naming it). An optional input holds its element unless it is
  // in empty_optionals.
  std::map<std::string, int64_t> sequence_lengths = {};
  std::set<std::string> empty_optionals = {};
  // Bounds on outputs of data-dependent size (NonMaxSuppression's selections, Unique's values,
  // NonZero's indices), by the output's ONNX name: the padded buffer keeps at most that many
  // entries where the shapes allow more (importer/lower_data_sized.h). A name that is no such
  // output is an error.
  std::map<std::string, int64_t> output_bounds = {};
  // Run fold_layout_and_affines as the last step; the compiler's pipeline runs it as a pass of its
  // own (compiler/pipeline.h).
  bool fold_affines = true;
};

struct OnnxOpUse {
  std::string node_name;
  std::string op_type;
  std::string domain;
  int64_t opset = 0;
};

// What the ONNX file holds, before lowering.
struct OnnxSummary {
  int64_t ir_version = 0;
  int64_t opset = 0;  // of the default domain
  std::string producer;
  size_t nodes = 0;
  std::map<std::string, int> op_histogram;  // "op" for the default domain, "domain:op" otherwise
  std::vector<OnnxOpUse> unsupported;
};

struct ImportedModel {
  Graph graph;
  OnnxSummary onnx;
  size_t folded = 0;  // canonical nodes folded into constants during import
};

// The rewrites after lowering, in order: per-channel affines folded into the convolutions before
// them (importer/fold_conv_affine.h), Transposes that undo each other around element-wise ops
// removed (importer/cancel_transposes.h), pointwise convolutions as MatMuls
// (importer/pointwise_conv.h), power-of-two scales of products folded into their constants
// (importer/fold_product_scales.h), a gated unit's two projections as one product
// (importer/pair_gated_products.h), sibling projections of one left operand as one product
// (importer/pack_sibling_products.h), a large value computed from a few constants copied for each
// reader (importer/clone_constant_chains.h).
void fold_layout_and_affines(Graph& g);

inline constexpr int64_t kMinOpset = 1;
inline constexpr int64_t kMaxOpset = 28;  // onnx 1.23

OnnxSummary summarize_onnx(const std::filesystem::path& path);
ImportedModel import_onnx(const std::filesystem::path& path, const ImportOptions& options = {});
// The same for a model already in memory; external data is resolved relative to base_dir.
ImportedModel import_onnx_bytes(std::string_view bytes, const std::filesystem::path& base_dir,
                                const ImportOptions& options = {});

}  // namespace fusetune::importer
