// Test helper: appends canonical nodes to a Graph with their types inferred, and makes seeded
// random constants, so tests can state canonical graphs directly.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/ops.h"
#include "importer/importer.h"
#include "planner/fusion.h"

namespace fusetune::testing {

inline int add_op(Graph& g, const std::string& op, std::vector<int> inputs, Attributes attrs = {},
                  const std::string& name = "") {
  Node n;
  n.name = name.empty() ? op + std::to_string(g.nodes().size()) : name;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  std::vector<TensorType> types;
  for (int in : n.inputs) types.push_back(in == kNoValue ? TensorType{} : TensorType{g.value(in).dtype, g.value(in).shape});
  const TensorType out = infer_types(n, types)[0];
  Value v;
  v.name = n.name + ":0";
  v.dtype = out.dtype;
  v.shape = out.shape;
  const int id = g.add_value(v);
  n.outputs = {id};
  g.add_node(std::move(n));
  return id;
}

inline int add_input(Graph& g, const std::string& name, DType dt, Shape s) {
  Value v;
  v.name = name;
  v.dtype = dt;
  v.shape = std::move(s);
  const int id = g.add_value(v);
  g.inputs().push_back(id);
  return id;
}

inline int random_constant(Graph& g, const std::string& name, DType dt, Shape s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> vals(static_cast<size_t>(numel(s)));
  for (float& v : vals) v = dist(rng);
  return g.add_constant(name, Tensor::from_floats(dt, std::move(s), vals));
}

// The small exported model tests/data/models/NAME, imported (BERT with its 1x16 input shapes).
inline Graph load_test_model(const std::string& name) {
  importer::ImportOptions opt;
  if (name == "bert") opt.input_shapes = {{"input_ids", {1, 16}}, {"attention_mask", {1, 16}}};
  return importer::import_onnx(std::string(FUSETUNE_SOURCE_DIR) + "/tests/data/models/" + name + "/model.onnx", opt).graph;
}

inline Attributes attrs(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

// A float32 Conv of input "x" (shape `x`) with random weights "w" (shape `w`) and bias "b", then a
// Relu, the graph's output.
inline void conv_bias_relu(Graph& g, const Shape& x, const Shape& w, const Attributes& a) {
  const int y = add_op(g, "Conv", {add_input(g, "x", DType::kF32, x), random_constant(g, "w", DType::kF32, w, 7u),
                                   random_constant(g, "b", DType::kF32, {w[0]}, 8u)},
                       a);
  g.outputs().push_back(add_op(g, "Relu", {y}));
}

// All of g's nodes as one group exporting the last node's output.
inline planner::FusionGroup whole_graph_group(const Graph& g) {
  planner::FusionGroup group = planner::whole_graph_group(g);
  group.outputs = {g.nodes().back().outputs[0]};
  return group;
}

// A graph and groups of it (each group lowered and checked on its own).
struct GroupedGraph {
  Graph g;
  std::vector<planner::FusionGroup> groups;
};

// Two sibling projections of one float16 input x [rows, k]: x times constants wk and wv [k, n]
// (seeded 7 and 8), both graph outputs (a layer's K and V).
inline Graph sibling_projections(int64_t rows, int64_t k, int64_t n) {
  Graph g;
  const int x = add_input(g, "x", DType::kF16, {rows, k});
  g.outputs().push_back(add_op(g, "MatMul", {x, random_constant(g, "wk", DType::kF16, {k, n}, 7u)}));
  g.outputs().push_back(add_op(g, "MatMul", {x, random_constant(g, "wv", DType::kF16, {k, n}, 8u)}));
  return g;
}

// A MatMul of input `a` and a constant `b` of `dtype` (its product optionally cast to float32),
// plus a constant bias and `activation`, appended to g as one group exporting the activation's
// output; `id` names its values and seeds its constants.
inline planner::FusionGroup add_matmul_chain(Graph& g, DType dtype, Shape a, Shape b, const char* activation, bool to_f32,
                                             int id) {
  const std::string n = std::to_string(id);
  const int64_t cols = b.back();
  const size_t first = g.nodes().size();
  int x = add_op(g, "MatMul", {add_input(g, "a" + n, dtype, std::move(a)),
                               random_constant(g, "w" + n, dtype, std::move(b), 101u + static_cast<uint32_t>(id))});
  DType epilogue = dtype;
  if (to_f32) {
    x = add_op(g, "Cast", {x}, attrs({{"to", int64_t{1}}}));
    epilogue = DType::kF32;
  }
  x = add_op(g, "Add", {x, random_constant(g, "bias" + n, epilogue, {cols}, 201u + static_cast<uint32_t>(id))});
  add_op(g, activation, {x});
  planner::FusionGroup fg;
  for (size_t k = first; k < g.nodes().size(); ++k) fg.nodes.push_back(static_cast<int>(k));
  planner::describe_group(g, fg);
  fg.outputs = {g.nodes().back().outputs[0]};
  return fg;
}

// Every node of g its own group, with its output as the group's.
inline std::vector<planner::FusionGroup> one_group_per_node(const Graph& g) {
  std::vector<planner::FusionGroup> out;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    planner::FusionGroup fg;
    fg.nodes = {static_cast<int>(n)};
    planner::describe_group(g, fg);
    fg.outputs = {g.nodes()[n].outputs[0]};
    out.push_back(fg);
  }
  return out;
}

}  // namespace fusetune::testing
