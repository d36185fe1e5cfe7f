#include "importer/pack_sibling_products.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"

namespace fusetune::importer {
namespace {

// The right operands' rows side by side: [K, N_1 + ... + N_n] from [K, N_i] matrices of one dtype.
Tensor side_by_side(const std::vector<const Tensor*>& parts) {
  const int64_t k = parts.front()->shape()[0];
  int64_t width = 0;
  for (const Tensor* t : parts) width += t->shape()[1];
  Tensor out(parts.front()->dtype(), {k, width});
  const size_t e = dtype_size(out.dtype());
  std::byte* dst = out.data();
  for (int64_t r = 0; r < k; ++r) {
    for (const Tensor* t : parts) {
      const size_t row = static_cast<size_t>(t->shape()[1]) * e;
      std::memcpy(dst, t->data() + static_cast<size_t>(r) * row, row);
      dst += row;
    }
  }
  return out;
}

// The sibling's bias: the one node reading product `v` (nothing else does, nor is it a graph
// output), where it is an Add of v and a column bias (is_column_bias); its node index, or -1.
int bias_of(const Graph& g, int v, const std::vector<int>& readers, const std::set<int>& outputs) {
  if (outputs.count(v) || readers[static_cast<size_t>(v)] < 0) return -1;
  const int a = readers[static_cast<size_t>(v)];
  const Node& n = g.nodes()[static_cast<size_t>(a)];
  if (n.op != "Add" || n.inputs.size() != 2 || !n.guards.empty()) return -1;
  const int c = n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
  if (c == v || !is_column_bias(g.value(c), g.value(v)) || g.value(n.outputs[0]).shape != g.value(v).shape) return -1;
  return a;
}

}  // namespace

int pack_sibling_products(Graph& g) {
  // The MatMuls by a constant 2-D right operand, by (left operand, K, dtype), in graph order.
  std::map<std::tuple<int, int64_t, DType>, std::vector<int>> siblings;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op != "MatMul" || n.inputs.size() != 2 || !n.guards.empty() || n.inputs[0] == n.inputs[1]) continue;
    const Value& x = g.value(n.inputs[0]);
    const Value& w = g.value(n.inputs[1]);
    if (!w.is_constant() || w.data == nullptr || w.shape.size() != 2 || x.shape.size() < 2 || x.dtype != w.dtype) continue;
    siblings[{n.inputs[0], w.shape[0], w.dtype}].push_back(static_cast<int>(i));
  }
  const std::vector<int> readers = g.sole_readers();
  const std::set<int> outputs(g.outputs().begin(), g.outputs().end());
  std::map<int, std::vector<int>> at;     // the first sibling -> all of them
  std::map<int, std::vector<int>> biases;  // ... -> their bias Adds, where every one has one
  std::set<int> taken;
  for (const auto& [key, nodes] : siblings) {
    if (nodes.size() < 2) continue;
    at[nodes.front()] = nodes;
    taken.insert(nodes.begin(), nodes.end());
    std::vector<int> adds;
    for (int s : nodes) adds.push_back(bias_of(g, g.nodes()[static_cast<size_t>(s)].outputs[0], readers, outputs));
    if (std::find(adds.begin(), adds.end(), -1) == adds.end()) {
      biases[nodes.front()] = adds;
      taken.insert(adds.begin(), adds.end());
    }
  }
  if (at.empty()) return 0;
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (!taken.count(static_cast<int>(i))) {
      nodes.push_back(g.nodes()[i]);
      continue;
    }
    const auto it = at.find(static_cast<int>(i));
    if (it == at.end()) continue;
    // Copies: adding values below may move the graph's storage.
    std::vector<Node> parts;
    std::vector<const Tensor*> weights;
    std::string name;
    for (int s : it->second) parts.push_back(g.nodes()[static_cast<size_t>(s)]);
    for (const Node& p : parts) {
      weights.push_back(g.value(p.inputs[1]).data.get());
      name += (name.empty() ? "" : "+") + p.name;
    }
    const int w = g.add_constant(name + "/weights", side_by_side(weights));
    Value wide = g.value(parts.front().outputs[0]);
    wide.name = name;
    wide.shape.back() = g.value(w).shape[1];
    int product = g.add_value(wide);
    Node m;
    m.op = "MatMul";
    m.name = name;
    m.inputs = {parts.front().inputs[0], w};
    m.outputs = {product};
    nodes.push_back(std::move(m));
    // Their biases, one Add of the columns' biases side by side: the slices are then of the sums,
    // each element the same sum of the same two values.
    std::vector<Node> adds;
    if (const auto b = biases.find(it->first); b != biases.end()) {
      std::vector<Tensor> columns;
      for (size_t j = 0; j < parts.size(); ++j) {
        adds.push_back(g.nodes()[static_cast<size_t>(b->second[j])]);
        const Node& add = adds.back();
        const Tensor& t = *g.value(add.inputs[0] == parts[j].outputs[0] ? add.inputs[1] : add.inputs[0]).data;
        columns.push_back(t.reshaped({1, t.shape().back()}));
      }
      std::vector<const Tensor*> rows;
      for (const Tensor& t : columns) rows.push_back(&t);
      Tensor sum = side_by_side(rows);
      const int bias = g.add_constant(name + "/bias", sum.reshaped({sum.shape()[1]}));
      wide.name = name + "/biased";
      const int biased = g.add_value(wide);
      Node add;
      add.op = "Add";
      add.name = name + "/bias";
      add.inputs = {product, bias};
      add.outputs = {biased};
      nodes.push_back(std::move(add));
      product = biased;
    }
    const int64_t rank = static_cast<int64_t>(wide.shape.size());
    int64_t column = 0;
    for (size_t j = 0; j < parts.size(); ++j) {
      const Node& p = parts[j];
      const int64_t width = g.value(p.inputs[1]).shape[1];
      Node slice;
      slice.op = "Slice";
      slice.name = p.name + "/columns";
      slice.inputs = {product};
      slice.outputs = adds.empty() ? p.outputs : adds[j].outputs;  // the old value: its consumers and name stay
      std::vector<int64_t> starts(static_cast<size_t>(rank), 0), ends(wide.shape.begin(), wide.shape.end());
      starts.back() = column;
      ends.back() = column + width;
      slice.attrs.set("starts", starts);
      slice.attrs.set("ends", ends);
      slice.attrs.set("steps", std::vector<int64_t>(static_cast<size_t>(rank), 1));
      nodes.push_back(std::move(slice));
      column += width;
    }
  }
  g.nodes() = std::move(nodes);
  g.remove_dead();
  return static_cast<int>(at.size());
}

}  // namespace fusetune::importer
