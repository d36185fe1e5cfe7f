#include "importer/pair_gated_products.h"

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::importer {
namespace {

struct Pair {
  int gate = -1, up = -1;  // the two MatMul nodes
};

// Element i of a and of b to elements 2i and 2i + 1 of out, elements of E bytes (a copy of a
// constant size: no call per element, any alignment).
template <size_t E>
void interleave_elements(const std::byte* a, const std::byte* b, std::byte* out, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(out + 2 * i * E, a + i * E, E);
    std::memcpy(out + (2 * i + 1) * E, b + i * E, E);
  }
}

// Column c of a and of b side by side: [K, 2N] from two [K, N] matrices of one dtype (TinyLlama's
// gate and up weights, 11.5 M elements each, interleave in tens of milliseconds).
Tensor interleaved(const Tensor& a, const Tensor& b) {
  const int64_t k = a.shape()[0], n = a.shape()[1];
  Tensor out(a.dtype(), {k, 2 * n});
  const auto count = static_cast<size_t>(k * n);
  switch (dtype_size(a.dtype())) {
    case 1:
      interleave_elements<1>(a.data(), b.data(), out.data(), count);
      break;
    case 2:
      interleave_elements<2>(a.data(), b.data(), out.data(), count);
      break;
    case 4:
      interleave_elements<4>(a.data(), b.data(), out.data(), count);
      break;
    case 8:
      interleave_elements<8>(a.data(), b.data(), out.data(), count);
      break;
    default:
      check(false, "pair_gated_products: weights of ", dtype_size(a.dtype()), "-byte elements");
  }
  return out;
}

}  // namespace

int pair_gated_products(Graph& g) {
  const std::vector<int> producer = g.producers();
  // A MatMul by a constant 2-D right operand computing v, or -1.
  const auto product_of = [&](int v) {
    const int p = v == kNoValue ? -1 : producer[static_cast<size_t>(v)];
    if (p < 0) return -1;
    const Node& n = g.nodes()[static_cast<size_t>(p)];
    if (n.op != "MatMul") return -1;
    const Value& w = g.value(n.inputs[1]);
    return w.is_constant() && w.shape.size() == 2 ? p : -1;
  };
  // The one value an element-wise chain of a's shape computes a from (with one-element
  // constants), where a MatMul by a constant computes it; -1 otherwise.
  const auto gated_source = [&](int a) {
    std::set<int> sources, seen;
    for (std::vector<int> todo{a}; !todo.empty();) {
      const int v = todo.back();
      todo.pop_back();
      if (!seen.insert(v).second) continue;
      if (product_of(v) >= 0) {
        sources.insert(v);
        continue;
      }
      const Value& value = g.value(v);
      if (value.is_constant() && numel(value.shape) == 1) continue;
      const int p = producer[static_cast<size_t>(v)];
      if (p < 0 || value.shape != g.value(a).shape) return -1;
      const Node& n = g.nodes()[static_cast<size_t>(p)];
      const OpSchema* s = find_op(n.op);
      if (s == nullptr || s->kind != OpKind::kElementwise || n.inputs.empty() || !n.guards.empty()) return -1;
      for (int in : n.inputs) {
        if (in == kNoValue) return -1;
        todo.push_back(in);
      }
    }
    return sources.size() == 1 ? *sources.begin() : -1;
  };
  std::vector<Pair> pairs;
  std::set<int> taken;
  for (const Node& n : g.nodes()) {
    if (n.op != "Mul" || n.inputs.size() != 2 || !n.guards.empty()) continue;
    for (int side = 0; side < 2; ++side) {
      const int up = product_of(n.inputs[static_cast<size_t>(1 - side)]);
      const int source = gated_source(n.inputs[static_cast<size_t>(side)]);
      const int gate = source < 0 ? -1 : product_of(source);
      if (up < 0 || gate < 0 || up == gate || taken.count(up) || taken.count(gate)) continue;
      const Node& gn = g.nodes()[static_cast<size_t>(gate)];
      const Node& un = g.nodes()[static_cast<size_t>(up)];
      const Value& wg = g.value(gn.inputs[1]);
      const Value& wu = g.value(un.inputs[1]);
      if (gn.inputs[0] != un.inputs[0] || wg.shape != wu.shape || wg.dtype != wu.dtype || !gn.guards.empty() || !un.guards.empty() ||
          g.value(gn.outputs[0]).shape != g.value(n.inputs[static_cast<size_t>(side)]).shape) {
        continue;
      }
      pairs.push_back({gate, up});
      taken.insert(gate);
      taken.insert(up);
      break;
    }
  }
  if (pairs.empty()) return 0;
  std::map<int, const Pair*> at;  // the first of a pair's products -> the pair
  for (const Pair& p : pairs) at[std::min(p.gate, p.up)] = &p;
  std::map<int, int> renamed;  // a pair's old outputs -> their slices of the paired product
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (taken.count(static_cast<int>(i))) {
      const auto it = at.find(static_cast<int>(i));
      if (it == at.end()) continue;
      // Copies: adding values below may move the graph's storage. The shared input may itself
      // be a half of an earlier pair (a unit whose input is another's up projection).
      Node gate = g.nodes()[static_cast<size_t>(it->second->gate)];
      const Node up = g.nodes()[static_cast<size_t>(it->second->up)];
      if (auto r = renamed.find(gate.inputs[0]); r != renamed.end()) gate.inputs[0] = r->second;
      const Value out = g.value(gate.outputs[0]);
      const int64_t n = g.value(gate.inputs[1]).shape[1];
      const auto value = [&](const std::string& name, Shape s) {
        Value v;
        v.name = name;
        v.dtype = out.dtype;
        v.shape = std::move(s);
        return g.add_value(std::move(v));
      };
      const auto node = [&](const std::string& op, const std::string& name, std::vector<int> inputs, int output, Attributes attrs) {
        Node m;
        m.op = op;
        m.name = name;
        m.inputs = std::move(inputs);
        m.outputs = {output};
        m.attrs = std::move(attrs);
        nodes.push_back(std::move(m));
      };
      const std::string name = gate.name + "+" + up.name;
      const int w = g.add_constant(name + "/weights", interleaved(*g.value(gate.inputs[1]).data, *g.value(up.inputs[1]).data));
      Shape wide = out.shape, pairs_shape = out.shape;
      wide.back() = 2 * n;
      pairs_shape.push_back(2);
      const int product = value(name, wide);
      node("MatMul", name, {gate.inputs[0], w}, product, {});
      const int split = value(name + "/pairs", pairs_shape);
      Attributes reshape;
      reshape.set("shape", std::vector<int64_t>(pairs_shape.begin(), pairs_shape.end()));
      node("Reshape", name + "/pairs", {product}, split, reshape);
      for (const Node* half : {static_cast<const Node*>(&gate), &up}) {
        const int64_t column = half == &gate ? 0 : 1;
        std::vector<int64_t> starts(pairs_shape.size(), 0), ends(pairs_shape.begin(), pairs_shape.end()), steps(pairs_shape.size(), 1);
        starts.back() = column;
        ends.back() = column + 1;
        Attributes slice;
        slice.set("starts", starts);
        slice.set("ends", ends);
        slice.set("steps", steps);
        Shape one = pairs_shape;
        one.back() = 1;
        const int picked = value(half->name + "/column", one);
        node("Slice", half->name + "/column", {split}, picked, slice);
        const int result = value(g.value(half->outputs[0]).name, out.shape);
        Attributes back;
        back.set("shape", std::vector<int64_t>(out.shape.begin(), out.shape.end()));
        node("Reshape", half->name + "/half", {picked}, result, back);
        renamed[half->outputs[0]] = result;
      }
      continue;
    }
    Node m = g.nodes()[i];
    for (int& in : m.inputs) {
      if (auto r = renamed.find(in); r != renamed.end()) in = r->second;
    }
    nodes.push_back(std::move(m));
  }
  for (int& o : g.outputs()) {
    if (auto r = renamed.find(o); r != renamed.end()) o = r->second;
  }
  g.nodes() = std::move(nodes);
  g.remove_dead();
  return static_cast<int>(pairs.size());
}

}  // namespace fusetune::importer
