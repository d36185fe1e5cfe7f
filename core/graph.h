// Graph: the canonical dataflow graph every pass after import works on.
//
// Values are tensors with a static shape and dtype; a value with `data` set is a constant (a weight
// or a folded expression). Nodes apply one canonical op (core/ops.h) to value ids and produce value
// ids; an absent optional input is kNoValue. Nodes are kept in a topological order: every input of
// a node is a graph input, a constant or the output of an earlier node. Names are for people only.
//
// A node may be guarded: it runs only when each of its guards holds (an If's branch whose
// condition is known only at run time, importer/control_flow.h). A guard names a bool scalar
// value (produced before the node, like an input) and the value it must have; guards are listed
// outermost first, and an inner guard's condition is read only when the outer ones hold. Values
// of a branch that does not run are never computed; an IfMerge (docs/canonical-ops.md) takes the
// branch results and reads only the one its condition picks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace fusetune {

inline constexpr int kNoValue = -1;

using AttrValue = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>>;

// Named attributes of a canonical node, ordered by name so iteration is deterministic.
class Attributes {
 public:
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  // Typed getters; a missing attribute returns the fallback, a mistyped one throws Error.
  int64_t i(const std::string& name, int64_t fallback = 0) const;
  float f(const std::string& name, float fallback = 0.0f) const;
  std::string s(const std::string& name, const std::string& fallback = "") const;
  std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> fallback = {}) const;
  std::vector<float> floats(const std::string& name, std::vector<float> fallback = {}) const;
  const std::map<std::string, AttrValue>& all() const { return values_; }
  bool operator==(const Attributes& other) const = default;

 private:
  std::map<std::string, AttrValue> values_;
};

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  std::shared_ptr<const Tensor> data;  // set for constants
  bool is_constant() const { return data != nullptr; }
};

// Whether constant c holds one value a column of value p, in p's dtype (shape [N] or
// [1, ..., 1, N], no more axes than p): a bias an Add broadcasts along p's rows.
bool is_column_bias(const Value& c, const Value& p);

// A graph output whose extent along one axis depends on the data (NonMaxSuppression's selections,
// Unique's values, NonZero's indices): its buffer holds the bound the importer derived on `axis`,
// and the first `count` entries there hold data (`count`: another graph output, an int64
// scalar); the rest are padding, whatever the importer wrote there.
struct DataExtent {
  int count = kNoValue;
  int axis = 0;
};

// DataExtent by position among a graph's (or a plan's) outputs: the index of the output that
// counts this one, and the axis; count_output -1 for an output of static size.
struct OutputExtent {
  int count_output = -1;
  int axis = 0;
};

// The outputs of a run as the model defines them: each output of data-dependent extent cut to
// the value of its count, the counts themselves left out (they are the cut outputs' extents).
std::vector<Tensor> trim_to_counts(const std::vector<Tensor>& outputs, const std::vector<OutputExtent>& extents);

// An input or output of the ONNX graph a Graph was imported from, where some are sequences or
// optionals: the Graph takes and gives their tensors (importer/onnx_io.h), `tensors` consecutive
// graph inputs or outputs (a sequence's elements; an optional's content, none when empty).
struct OnnxValue {
  enum class Kind { kTensor, kSequence, kOptional };
  std::string name;
  Kind kind = Kind::kTensor;
  int tensors = 1;
  bool operator==(const OnnxValue&) const = default;
};
const char* onnx_value_kind_name(OnnxValue::Kind kind);  // "tensor", "sequence", "optional"

struct Guard {
  int cond = kNoValue;  // a bool scalar value
  bool when = true;     // the node runs when cond holds this
  bool operator==(const Guard&) const = default;
};

struct Node {
  std::string name;
  std::string op;
  std::vector<int> inputs;
  std::vector<int> outputs;
  Attributes attrs;
  std::vector<Guard> guards;  // outermost first; empty: always runs
};

// What a node reads: its present inputs, then its guards' conditions.
std::vector<int> reads(const Node& n);

// Whether guards hold, `cond_value(id)` giving each condition's value; conditions are read in
// order and only while the earlier guards hold (an inner condition of a branch that does not run
// is never computed).
template <typename CondValue>
bool guards_hold(const std::vector<Guard>& guards, CondValue&& cond_value) {
  for (const Guard& gd : guards) {
    if (cond_value(gd.cond) != gd.when) return false;
  }
  return true;
}

class Graph {
 public:
  int add_value(Value v);
  int add_constant(const std::string& name, Tensor t);
  int add_node(Node n);

  std::vector<Value>& values() { return values_; }
  const std::vector<Value>& values() const { return values_; }
  const Value& value(int id) const { return values_.at(static_cast<size_t>(id)); }
  Value& value(int id) { return values_.at(static_cast<size_t>(id)); }
  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<int>& inputs() { return inputs_; }
  const std::vector<int>& inputs() const { return inputs_; }
  std::vector<int>& outputs() { return outputs_; }
  const std::vector<int>& outputs() const { return outputs_; }
  // The outputs of data-dependent extent, by value id (each one a graph output).
  std::map<int, DataExtent>& extents() { return extents_; }
  const std::map<int, DataExtent>& extents() const { return extents_; }
  // extents() by output position, one entry per graph output.
  std::vector<OutputExtent> output_extents() const;
  // The ONNX graph's inputs and outputs in order, where some are sequences or optionals; empty
  // where each graph input and output is an ONNX tensor of the same position.
  std::vector<OnnxValue>& onnx_inputs() { return onnx_inputs_; }
  const std::vector<OnnxValue>& onnx_inputs() const { return onnx_inputs_; }
  std::vector<OnnxValue>& onnx_outputs() { return onnx_outputs_; }
  const std::vector<OnnxValue>& onnx_outputs() const { return onnx_outputs_; }

  // Producer node index of each value (-1 for inputs and constants).
  std::vector<int> producers() const;
  // Each value's one reader node (-1: none; -2: several), counting what reads() counts.
  std::vector<int> sole_readers() const;
  // Drops nodes whose outputs reach no graph output and values nothing refers to; renumbers ids.
  void remove_dead();
  // Throws Error if the graph breaks an invariant above (bad ids, order, arity, shapes, guards).
  void validate() const;

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
  std::map<int, DataExtent> extents_;
  std::vector<OnnxValue> onnx_inputs_, onnx_outputs_;
};

}  // namespace fusetune
