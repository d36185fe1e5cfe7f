// GraphBuilder: appends canonical nodes to a Graph, inferring each output's type with the op's
// shape function and folding the node into a constant when all its inputs are constant (through
// the reference kernels), unless the result would exceed kFoldLimit elements or the node has no
// inputs at all (a generator, never folded nor known); a result without elements is an empty
// constant whatever its inputs.
//
// It also tracks values known at import time without being constants (graph inputs whose value
// the caller supplied, and small results computed only from those and constants): the node
// stays in the graph, but lowering may specialize a data-dependent argument to the known value.
//
// Every node it emits takes the guards in force (core/graph.h): an If whose condition is known
// only at run time imports each branch under a GuardScope.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/graph.h"

namespace fusetune::importer {

inline constexpr int64_t kFoldLimit = int64_t{1} << 24;
inline constexpr int64_t kKnownLimit = 4096;

class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& g) : g_(g) {}

  int constant(Tensor t, const std::string& name);
  // Emits op(inputs) with attrs and returns the id of its (single) output.
  int emit(const std::string& op, std::vector<int> inputs, Attributes attrs, const std::string& name);

  // A graph input whose value is known at import time (ImportOptions::input_values).
  void set_known(int id, Tensor t) { known_[id] = std::move(t); }
  const Tensor* known(int id) const {
    auto it = known_.find(id);
    return it == known_.end() ? nullptr : &it->second;
  }

  // Values whose extent along an axis depends on the data (the lowerings of
  // importer/lower_data_sized.h set them; importer/data_extent.h carries them to the outputs).
  void set_extent(int id, DataExtent e) { extents_[id] = e; }
  const std::map<int, DataExtent>& extents() const { return extents_; }
  // Bounds the user set for outputs of data-dependent size, by the outputs' ONNX names
  // (ImportOptions::output_bounds); bound_for gives one (recording that it was asked for),
  // unused_bounds those nothing asked for.
  void set_bounds(std::map<std::string, int64_t> bounds) { bounds_ = std::move(bounds); }
  std::optional<int64_t> bound_for(const std::string& name) {
    auto it = bounds_.find(name);
    if (it == bounds_.end()) return std::nullopt;
    used_bounds_.insert(name);
    return it->second;
  }
  std::vector<std::string> unused_bounds() const {
    std::vector<std::string> out;
    for (const auto& [name, bound] : bounds_) {
      if (!used_bounds_.count(name)) out.push_back(name);
    }
    return out;
  }
  // What DequantizeLinear made a float32 value from (importer/lower_quant.h records it, its
  // fold_dequantized_matmul reads it, the value itself possibly folded to a constant): an 8-bit
  // value x, its zero point (kNoValue for none) and its float32 scale, each one element (axis -1)
  // or, for a matrix x quantized along axis 0 or 1, shaped to broadcast along it (M x 1, 1 x N).
  struct Dequantization {
    int x = kNoValue, zero = kNoValue, scale = kNoValue;
    int axis = -1;
  };
  void set_dequantization(int id, Dequantization d) { dequantized_[id] = d; }
  const Dequantization* dequantization(int id) const {
    auto it = dequantized_.find(id);
    return it == dequantized_.end() ? nullptr : &it->second;
  }
  // Import-time sequences and optionals (importer/sequences.h): a placeholder value (no dtype,
  // never read by a canonical node) standing for a list of tensor value ids, or for an optional
  // that holds one value (kNoValue: empty). *_of give what a value stands for, nullptr for one that
  // is no such placeholder.
  int sequence(std::vector<int> elements, const std::string& name);
  const std::vector<int>* sequence_of(int id) const {
    auto it = sequences_.find(id);
    return it == sequences_.end() ? nullptr : &it->second;
  }
  int optional(int element, const std::string& name);
  const int* optional_of(int id) const {
    auto it = optionals_.find(id);
    return it == optionals_.end() ? nullptr : &it->second;
  }
  // The node that produces value `id`, or nullptr for inputs and constants.
  const Node* producer(int id) const {
    auto it = producer_.find(id);
    return it == producer_.end() ? nullptr : &g_.nodes()[it->second];
  }

  // The guards every node emitted from now on takes, outermost first.
  const std::vector<Guard>& guards() const { return guards_; }

  Graph& graph() { return g_; }
  const Value& value(int id) const { return g_.value(id); }
  size_t folded() const { return folded_; }

  // The ordinal of the next random draw (importer/lower_random.h keys each draw's stream by it, so
  // that the iterations of an unrolled Loop draw apart): 0, 1, 2, ... in import order.
  int64_t next_draw() { return draws_++; }

 private:
  Graph& g_;
  std::map<int, Tensor> known_;
  std::map<int, DataExtent> extents_;
  std::map<int, std::vector<int>> sequences_;
  std::map<int, int> optionals_;
  std::map<int, Dequantization> dequantized_;
  std::vector<Guard> guards_;
  std::map<std::string, int64_t> bounds_;
  std::set<std::string> used_bounds_;
  friend class GuardScope;
  std::map<int, size_t> producer_;
  size_t folded_ = 0;
  int64_t draws_ = 0;
};

// While it lives, the builder's nodes take one more guard (innermost).
class GuardScope {
 public:
  GuardScope(GraphBuilder& b, Guard g) : b_(b) { b_.guards_.push_back(g); }
  ~GuardScope() { b_.guards_.pop_back(); }
  GuardScope(const GuardScope&) = delete;
  GuardScope& operator=(const GuardScope&) = delete;

 private:
  GraphBuilder& b_;
};

}  // namespace fusetune::importer
