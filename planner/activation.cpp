#include "planner/activation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "reference/interpreter.h"

namespace fusetune::planner {

namespace {

// The points the tail is evaluated at: every 0.005 in [-10, 10], then out to +-100.
std::vector<float> sample_points() {
  std::vector<float> xs;
  for (int i = -2000; i <= 2000; ++i) xs.push_back(static_cast<float>(i) * 0.005f);
  for (int i = 10; i <= 100; i += 10) {
    xs.push_back(static_cast<float>(i));
    xs.push_back(-static_cast<float>(i));
  }
  return xs;
}

// Smooth arithmetic only: a step (Floor, Sign, a comparison) could hide a difference between the
// sampled points or beyond them.
bool smooth_op(const std::string& op) {
  static const std::set<std::string> ops = {"Add", "Cast", "Div",  "Erf",     "Exp",  "Mul", "Neg",
                                            "Pow", "Reciprocal", "Sigmoid", "Sqrt", "Sub", "Tanh"};
  return ops.count(op) != 0;
}

// The tail as a graph of its own over one float32 input of `n` points, constants in float32 (an
// integer exponent kept), Casts between float types dropped; empty where the tail does not qualify.
std::optional<Graph> tail_graph(const Graph& g, std::span<const int> nodes, int x, int out, int64_t n) {
  const Shape& shape = g.value(x).shape;
  if (!is_float(g.value(x).dtype)) return std::nullopt;
  Graph t;
  Value in;
  in.name = "x";
  in.dtype = DType::kF32;
  in.shape = {n};
  std::map<int, int> mapped = {{x, t.add_value(in)}};
  t.inputs() = {mapped[x]};
  for (int id : nodes) {
    const Node& node = g.nodes()[static_cast<size_t>(id)];
    if (!smooth_op(node.op) || node.outputs.size() != 1) return std::nullopt;
    const Value& y = g.value(node.outputs[0]);
    if (!is_float(y.dtype) || y.shape != shape) return std::nullopt;
    Node copy = node;
    copy.inputs.clear();
    copy.guards.clear();  // one group's nodes, all under the same guards
    for (int v : node.inputs) {
      if (mapped.count(v) != 0) {
        copy.inputs.push_back(mapped[v]);
        continue;
      }
      const Value& c = g.value(v);
      if (!c.is_constant() || c.data->numel() != 1) return std::nullopt;
      copy.inputs.push_back(is_float(c.dtype) ? t.add_constant(c.name, Tensor::scalar_float(DType::kF32, c.data->to_floats()[0]))
                                              : t.add_constant(c.name, *c.data));
    }
    if (node.op == "Cast") {
      mapped[node.outputs[0]] = copy.inputs[0];
      continue;
    }
    std::vector<TensorType> types;
    for (int v : copy.inputs) types.push_back({t.value(v).dtype, t.value(v).shape});
    const std::vector<TensorType> out_types = infer_types(copy, types);
    if (out_types[0].dtype != DType::kF32 || out_types[0].shape != Shape{n}) return std::nullopt;
    Value o;
    o.name = y.name;
    o.dtype = DType::kF32;
    o.shape = {n};
    copy.outputs = {t.add_value(o)};
    mapped[node.outputs[0]] = copy.outputs[0];
    t.add_node(std::move(copy));
  }
  if (mapped.count(out) == 0 || mapped[out] == mapped[x]) return std::nullopt;
  t.outputs() = {mapped[out]};
  return t;
}

}  // namespace

bool computes_tanh_gelu(const Graph& g, std::span<const int> nodes, int x, int out) {
  static const std::vector<float> xs = sample_points();
  std::vector<float> got;
  try {
    const std::optional<Graph> t = tail_graph(g, nodes, x, out, static_cast<int64_t>(xs.size()));
    if (!t) return false;
    const Tensor input = Tensor::from_floats(DType::kF32, {static_cast<int64_t>(xs.size())}, xs);
    got = reference::run_graph(*t, {&input, 1})[0].to_floats();
  } catch (const Error&) {
    return false;  // a tail the shape functions or the interpreter refuse computes no activation
  }
  const double c = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    const double want = 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
    if (!(std::abs(got[i] - want) <= 5e-5 * std::max(1.0, std::abs(v)))) return false;
  }
  return true;
}

}  // namespace fusetune::planner
