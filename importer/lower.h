// Lowering: one ONNX node (default domain, opsets 1 to kMaxOpset, the older forms where they
// differ) to canonical nodes.
//
// Takes the decoded inputs of the node (value ids in the graph being built, kNoValue for absent
// optional inputs) and its attributes; emits canonical nodes through the GraphBuilder (which folds
// constant sub-expressions) and reports the value id of each ONNX output. Guarantees: the emitted
// nodes compute the ONNX op's semantics for the static shapes at hand; data-dependent arguments
// (shapes, axes, bounds, pads, scales) must be constant after folding, or the node is rejected with
// an Error naming the input; an attribute the lowering does not read is rejected, naming it. Rewrites (Gemm -> MatMul + Add, BatchNormalization -> affine,
// Flatten/Squeeze/Unsqueeze -> Reshape, Split -> Slices, Shape/Size/ConstantOfShape/Range ->
// constants, Trilu -> Where, Gelu and RMSNormalization -> element-wise ops and ReduceMean, ...)
// are listed in docs/canonical-ops.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "importer/builder.h"
#include "fusetune_proto/onnx_subset.pb.h"

namespace fusetune::importer {

class NodeLowering {
 public:
  NodeLowering(const onnx::NodeProto& proto, int64_t opset, GraphBuilder& b, std::vector<int> inputs,
               std::filesystem::path base_dir);

  const std::string& op() const { return proto_.op_type(); }
  int64_t opset() const { return opset_; }
  const std::string& name() const { return name_; }

  // Attributes of the ONNX node; a missing one gives the fallback. Each attribute asked about is
  // recorded: one the lowering never asks about is an error (check_attributes_read()).
  bool has_attr(const std::string& n) const {
    read_.insert(n);
    return attrs_.count(n) != 0;
  }
  int64_t attr_i(const std::string& n, int64_t fallback) const;
  float attr_f(const std::string& n, float fallback) const;
  std::string attr_s(const std::string& n, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& n, std::vector<int64_t> fallback = {}) const;
  std::vector<float> attr_floats(const std::string& n, std::vector<float> fallback = {}) const;
  std::vector<std::string> attr_strings(const std::string& n) const;
  Tensor attr_tensor(const std::string& n) const;

  // Fails naming the first attribute of the node that the lowering did not read: one fusetune
  // does not know (a newer opset's, a misspelt one) is refused, never ignored.
  void check_attributes_read() const;

  // Inputs: input(k) requires input k; has_input(k) tells whether the optional input is given.
  size_t input_count() const { return inputs_.size(); }
  bool has_input(size_t k) const { return k < inputs_.size() && inputs_[k] != kNoValue; }
  int input(size_t k) const;
  const Value& val(size_t k) const { return b_.value(input(k)); }
  // By value: emitting nodes may reallocate the graph's values and invalidate references.
  Shape shape(size_t k) const { return val(k).shape; }
  int64_t rank(size_t k) const { return static_cast<int64_t>(val(k).shape.size()); }
  // A constant input's values; throws Error if the input is not constant after folding.
  const Tensor& const_input(size_t k, const char* what) const;
  std::vector<int64_t> const_ints(size_t k, const char* what) const { return const_input(k, what).to_ints(); }
  std::vector<float> const_floats(size_t k, const char* what) const { return const_input(k, what).to_floats(); }

  // Emits a canonical node named after this ONNX node; returns its output id.
  int emit(const std::string& op, std::vector<int> inputs, Attributes attrs = {});
  int constant(Tensor t);
  int reshape(int v, const Shape& to);

  // Sets ONNX output k to value id v.
  void set_output(size_t k, int v);
  const std::vector<int>& outputs() const { return outputs_; }
  size_t output_count() const { return static_cast<size_t>(proto_.output_size()); }
  bool output_used(size_t k) const { return k < output_count() && !proto_.output(static_cast<int>(k)).empty(); }
  const std::string& output_name(size_t k) const { return proto_.output(static_cast<int>(k)); }

  GraphBuilder& builder() { return b_; }

 private:
  const onnx::NodeProto& proto_;
  int64_t opset_;
  GraphBuilder& b_;
  std::vector<int> inputs_;
  std::filesystem::path base_dir_;
  std::string name_;
  std::map<std::string, const onnx::AttributeProto*> attrs_;
  mutable std::set<std::string> read_;  // the attributes asked about
  std::vector<int> outputs_;
  int emitted_ = 0;
};

// Helpers the lowering files share (lower.cpp and the lower_*.cpp of op families).
// Value v as type `to`: a Cast, or v itself when it has that type already.
int cast_to(NodeLowering& L, int v, DType to);
// Matrix v transposed.
int transpose2d(NodeLowering& L, int v);
// The smallest and largest value of an integer type or bool (the largest uint64 as its bit
// pattern, -1).
std::pair<int64_t, int64_t> integer_range(DType t);
// An int64 constant 0, 1, ..., n - 1 along `axis` of a value of rank `rank` (extent 1 elsewhere):
// what Hardmax, OneHot and TopK compare positions with.
int iota_along(NodeLowering& L, size_t rank, int64_t axis, int64_t n);
// A canonical reduction `op` of x over `axes` (keepdims `keep`).
int reduce_node(NodeLowering& L, const std::string& op, int x, const std::vector<int64_t>& axes, int64_t keep);
// A canonical Pad of v with zeros (begin pads, then end pads, per axis).
int zero_pad(NodeLowering& L, int v, const std::vector<int64_t>& pads);
// A canonical Slice of v with per-axis (start, end, step), clamped as ONNX and numpy clamp them
// (an end of INT64_MIN with a negative step: through index 0); v itself where nothing is cut.
int slice_axes(NodeLowering& L, int v, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
               const std::vector<int64_t>& axes, const std::vector<int64_t>& steps);
// v clamped to [lo, hi] (a canonical Clip).
int clip_between(NodeLowering& L, int v, double lo, double hi);
// Entries [begin, end) of v's axis `axis` (a Slice); slice_last_axis: of its last axis.
int slice_axis(NodeLowering& L, int v, size_t axis, int64_t begin, int64_t end);
int slice_last_axis(NodeLowering& L, int v, int64_t begin, int64_t end);
// The canonical Conv's attributes for the node's input `x` and weight `w` (strides, dilations,
// explicit pads with auto_pad resolved, group), checking kernel_shape against the weight.
Attributes conv_attributes(NodeLowering& L, size_t x, size_t w);

// True if fusetune lowers this ONNX op type of the default domain (If, Loop and Scan: the importer
// inlines them, importer/control_flow.h).
bool is_supported_onnx_op(const std::string& op_type);
// Why fusetune refuses an op of the default domain it does not lower, for the classes it leaves
// refused on purpose (training, strings, image decoding, sequences and optionals,
// outputs whose size depends on the data); "" for one not yet implemented.
std::string unsupported_op_reason(const std::string& op_type);

// Lowers the node; every ONNX output that is named gets a value id in outputs().
void lower_node(NodeLowering& node);

}  // namespace fusetune::importer
