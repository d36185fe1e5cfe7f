#include "importer/pointwise_conv.h"

#include <string>
#include <utility>
#include <vector>

namespace fusetune::importer {

namespace {

int64_t pixels_of(const Shape& image) {
  int64_t pixels = 1;
  for (size_t d = 2; d < image.size(); ++d) pixels *= image[d];
  return pixels;
}

bool all_equal(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t e : v) {
    if (e != x) return false;
  }
  return true;
}

// Whether node `n` is a pointwise Conv this pass rewrites.
bool pointwise(const Graph& g, const Node& n) {
  if (n.op != "Conv" || n.inputs.size() < 2) return false;
  const Value& x = g.value(n.inputs[0]);
  const Value& w = g.value(n.inputs[1]);
  const bool bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  if (!is_float(x.dtype) || w.dtype != x.dtype || !w.is_constant() || x.shape.size() < 3 || w.shape.size() != x.shape.size() ||
      w.shape[1] != x.shape[1] || (bias && g.value(n.inputs[2]).dtype != x.dtype)) {
    return false;
  }
  const size_t spatial = x.shape.size() - 2;
  for (size_t d = 2; d < w.shape.size(); ++d) {
    if (w.shape[d] != 1) return false;
  }
  return pixels_of(x.shape) > 1 && n.attrs.i("group", 1) == 1 && all_equal(n.attrs.ints("strides", std::vector<int64_t>(spatial, 1)), 1) &&
         all_equal(n.attrs.ints("pads", std::vector<int64_t>(2 * spatial, 0)), 0) && g.value(n.outputs[0]).shape.size() == x.shape.size();
}

}  // namespace

int pointwise_convs_as_matmuls(Graph& g) {
  std::vector<Node> nodes;
  nodes.reserve(g.nodes().size());
  int rewritten = 0;
  for (Node& conv : g.nodes()) {
    if (!pointwise(g, conv)) {
      nodes.push_back(std::move(conv));
      continue;
    }
    ++rewritten;
    // Copies: adding values below may move the graph's value storage.
    const Value x = g.value(conv.inputs[0]);
    const Value w = g.value(conv.inputs[1]);
    const int bias = conv.inputs.size() > 2 ? conv.inputs[2] : kNoValue;
    const int y = conv.outputs[0];
    const Shape out = g.value(y).shape;
    const int64_t n = x.shape[0], c = x.shape[1], k = w.shape[0], pixels = pixels_of(x.shape);
    const auto value = [&](const std::string& suffix, Shape shape) {
      return g.add_value(Value{conv.name + suffix, x.dtype, std::move(shape), nullptr});
    };
    const auto emit = [&](const std::string& suffix, const std::string& op, std::vector<int> inputs, int output, Attributes a) {
      nodes.push_back(Node{conv.name + suffix, op, std::move(inputs), {output}, std::move(a), conv.guards});
      return output;
    };
    const auto reshape = [&](const std::string& suffix, int from, const Shape& to, int output) {
      Attributes a;
      a.set("shape", std::vector<int64_t>(to.begin(), to.end()));
      return emit(suffix, "Reshape", {from}, output, std::move(a));
    };
    const Shape xs{n, c, pixels}, ps{n, k, pixels};
    const int x2 = reshape("/pixels", conv.inputs[0], xs, value("/pixels", xs));
    const int w2 = g.add_constant(w.name + "/matrix", w.data->reshaped({k, c}));
    int product = emit("/matmul", "MatMul", {w2, x2}, value("/matmul", ps), {});
    if (bias != kNoValue) {  // along the product's rows: [K, 1]
      const Value b = g.value(bias);
      product = emit("/bias", "Add", {product, g.add_constant(b.name + "/column", b.data->reshaped({k, 1}))}, value("/bias", ps), {});
    }
    reshape("/image", product, out, y);
  }
  g.nodes() = std::move(nodes);
  if (rewritten > 0) g.remove_dead();  // the 4-D weights and 1-D biases, now read by nobody
  return rewritten;
}

}  // namespace fusetune::importer
