#include "importer/fold_product_scales.h"

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fusetune::importer {
namespace {

// The power of two (either sign) a constant float scalar holds, or 0.
double power_of_two(const Value& c) {
  if (!c.is_constant() || numel(c.shape) != 1 || !is_float(c.dtype)) return 0;
  const double v = c.data->to_doubles()[0];
  int e = 0;
  return std::isfinite(v) && std::fabs(std::frexp(v, &e)) == 0.5 ? v : 0;
}

// The smallest normal number of a float type the fold takes (0: another type).
double smallest_normal(DType t) {
  switch (t) {
    case DType::kF16: return 0x1p-14;
    case DType::kBF16:
    case DType::kF32: return 0x1p-126;
    case DType::kF64: return 0x1p-1022;
    default: return 0;
  }
}

// t times s: every element the exact scaled value (a power of two moves the exponent) but for
// those below the type's normal range, which round to its subnormal step; nothing where an element
// would leave the finite range.
std::optional<Tensor> scaled(const Tensor& t, double s) {
  const double normal = smallest_normal(t.dtype());
  if (normal == 0) return std::nullopt;
  std::vector<double> v = t.to_doubles();
  for (double& x : v) x *= s;  // exact in double
  Tensor out(t.dtype(), t.shape());
  out.set_doubles(v);
  const std::vector<double> kept = out.to_doubles();
  for (size_t i = 0; i < v.size(); ++i) {
    if (kept[i] != v[i] && !(std::fabs(v[i]) < normal && std::isfinite(kept[i]))) return std::nullopt;
  }
  return out;
}

// A scaled product found from the scale's node: the MatMul, its bias Add (or -1), and the scale.
struct Scaled {
  int matmul = -1, add = -1;
  double scale = 0;
};

// The product that node `at` (a Mul or Div by a power of two) scales, walking back from its
// operand through Reshapes and Transposes and a bias Add, each value on the way read by the next
// node alone and no graph output.
std::optional<Scaled> scaled_product(const Graph& g, int at, const std::vector<int>& producers, const std::vector<int>& readers,
                                     const std::set<int>& outputs) {
  const Node& n = g.nodes()[static_cast<size_t>(at)];
  if ((n.op != "Mul" && n.op != "Div") || n.inputs.size() != 2 || !n.guards.empty() || outputs.count(n.outputs[0])) return std::nullopt;
  Scaled out;
  int u = -1;
  for (int side = n.op == "Div" ? 1 : 0; side < 2 && u < 0; ++side) {
    const double s = power_of_two(g.value(n.inputs[static_cast<size_t>(side)]));
    const int other = n.inputs[static_cast<size_t>(1 - side)];
    if (s == 0 || g.value(other).is_constant() || g.value(other).dtype != g.value(n.inputs[static_cast<size_t>(side)]).dtype ||
        g.value(other).shape != g.value(n.outputs[0]).shape) {
      continue;
    }
    out.scale = n.op == "Div" ? 1.0 / s : s;
    u = other;
  }
  if (u < 0) return std::nullopt;
  for (int reader = at;;) {
    if (outputs.count(u) || readers[static_cast<size_t>(u)] != reader || producers[static_cast<size_t>(u)] < 0) return std::nullopt;
    const int p = producers[static_cast<size_t>(u)];
    const Node& pn = g.nodes()[static_cast<size_t>(p)];
    if (!pn.guards.empty()) return std::nullopt;
    if ((pn.op == "Reshape" || pn.op == "Transpose") && pn.inputs.size() == 1 && out.add < 0) {
      u = pn.inputs[0];
    } else if (pn.op == "Add" && pn.inputs.size() == 2 && out.add < 0) {
      const int b = is_column_bias(g.value(pn.inputs[1]), g.value(pn.inputs[0])) ? 1 : is_column_bias(g.value(pn.inputs[0]), g.value(pn.inputs[1])) ? 0 : -1;
      if (b < 0 || g.value(pn.inputs[static_cast<size_t>(1 - b)]).shape != g.value(u).shape) return std::nullopt;
      out.add = p;
      u = pn.inputs[static_cast<size_t>(1 - b)];
    } else if (pn.op == "MatMul" && pn.inputs.size() == 2) {
      const Value& w = g.value(pn.inputs[1]);
      if (!w.is_constant() || w.shape.size() != 2 || w.dtype != g.value(u).dtype || pn.inputs[0] == pn.inputs[1]) return std::nullopt;
      out.matmul = p;
      return out;
    } else {
      return std::nullopt;
    }
    reader = p;
  }
}

}  // namespace

int fold_product_scales(Graph& g) {
  const std::vector<int> producers = g.producers();
  std::vector<int> readers = g.sole_readers();
  const std::set<int> outputs(g.outputs().begin(), g.outputs().end());
  int folded = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const std::optional<Scaled> found = scaled_product(g, static_cast<int>(i), producers, readers, outputs);
    if (!found) continue;
    // The new constants first (adding values may move the graph's storage).
    const Node mm = g.nodes()[static_cast<size_t>(found->matmul)];
    const std::optional<Tensor> w = scaled(*g.value(mm.inputs[1]).data, found->scale);
    if (!w) continue;
    int bias_at = -1;
    std::optional<Tensor> b;
    if (found->add >= 0) {
      const Node& add = g.nodes()[static_cast<size_t>(found->add)];
      bias_at = g.value(add.inputs[1]).is_constant() ? 1 : 0;
      b = scaled(*g.value(add.inputs[static_cast<size_t>(bias_at)]).data, found->scale);
      if (!b) continue;
    }
    const std::string label = "/scaled " + std::to_string(found->scale);
    const int wv = g.add_constant(g.value(mm.inputs[1]).name + label, std::move(*w));
    g.nodes()[static_cast<size_t>(found->matmul)].inputs[1] = wv;
    if (b) {
      Node& add = g.nodes()[static_cast<size_t>(found->add)];
      add.inputs[static_cast<size_t>(bias_at)] = g.add_constant(g.value(add.inputs[static_cast<size_t>(bias_at)]).name + label, std::move(*b));
    }
    // y's readers read the scale's operand, which now holds y's values; the scale is dead.
    const Node& scale = g.nodes()[i];
    const int y = scale.outputs[0];
    const int operand = g.value(scale.inputs[0]).is_constant() ? scale.inputs[1] : scale.inputs[0];
    for (Node& n : g.nodes()) {
      for (int& in : n.inputs) in = in == y ? operand : in;
      for (Guard& gd : n.guards) gd.cond = gd.cond == y ? operand : gd.cond;
    }
    readers.resize(g.values().size(), -1);
    readers[static_cast<size_t>(operand)] = readers[static_cast<size_t>(y)];
    readers[static_cast<size_t>(y)] = -1;
    ++folded;
  }
  if (folded > 0) g.remove_dead();
  return folded;
}

}  // namespace fusetune::importer
