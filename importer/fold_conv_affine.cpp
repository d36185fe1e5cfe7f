#include "importer/fold_conv_affine.h"

#include <algorithm>
#include <optional>

namespace fusetune::importer {

namespace {

// The per-channel values of constant `v` as an operand broadcast against `out`, whose channel
// axis is `axis`, or nothing if it varies along any other axis or changes the result's shape.
std::optional<std::vector<double>> per_channel(const Graph& g, int v, const Shape& out, size_t axis) {
  const Value& val = g.value(v);
  if (!val.is_constant() || val.shape.size() > out.size() || out.size() < 2) return std::nullopt;
  const int64_t c = out[axis];
  const size_t lead = out.size() - val.shape.size();
  bool varies = false;
  for (size_t i = 0; i < val.shape.size(); ++i) {
    const int64_t d = val.shape[i];
    if (d == 1) continue;
    if (lead + i == axis && d == c) {
      varies = true;
      continue;
    }
    return std::nullopt;
  }
  const std::vector<double> data = val.data->to_doubles();
  std::vector<double> r(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) r[static_cast<size_t>(k)] = data[varies ? static_cast<size_t>(k) : 0];
  return r;
}

}  // namespace

int fold_conv_affine(Graph& g) {
  std::vector<int> uses(g.values().size(), 0);
  for (const Node& n : g.nodes()) {
    for (int in : n.inputs) {
      if (in != kNoValue) ++uses[static_cast<size_t>(in)];
    }
  }
  for (int o : g.outputs()) ++uses[static_cast<size_t>(o)];
  std::vector<int> consumer(g.values().size(), -1);
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    for (int in : g.nodes()[k].inputs) {
      if (in != kNoValue) consumer[static_cast<size_t>(in)] = static_cast<int>(k);
    }
  }
  std::vector<int> replace(g.values().size(), kNoValue);  // value -> value that now computes it
  int folded = 0;
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    Node& conv = g.nodes()[k];
    if (conv.op != "Conv") continue;
    const Value& w = g.value(conv.inputs[1]);
    const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] != kNoValue;
    if (!w.is_constant() || (has_bias && !g.value(conv.inputs[2]).is_constant())) continue;
    const int64_t c = g.value(conv.outputs[0]).shape[1];
    std::vector<double> scale(static_cast<size_t>(c), 1.0);
    std::vector<double> shift(static_cast<size_t>(c), 0.0);
    const auto only_reader = [&](int v) -> Node* {
      if (uses[static_cast<size_t>(v)] != 1 || consumer[static_cast<size_t>(v)] < 0) return nullptr;
      return &g.nodes()[static_cast<size_t>(consumer[static_cast<size_t>(v)])];
    };
    // One Transpose may come first: the chain then works on the channel axis where it moved.
    int start = conv.outputs[0];
    size_t axis = 1;
    if (Node* t = only_reader(start); t != nullptr && t->op == "Transpose") {
      const std::vector<int64_t> perm = t->attrs.ints("perm");
      const auto moved = std::find(perm.begin(), perm.end(), int64_t{1});
      if (moved == perm.end()) continue;
      axis = static_cast<size_t>(moved - perm.begin());
      start = t->outputs[0];
    }
    const Shape out = g.value(start).shape;
    int last = start;
    for (Node* next = only_reader(last); next != nullptr; next = only_reader(last)) {
      const bool sub = next->op == "Sub";
      if (next->op != "Mul" && next->op != "Add" && !(sub && next->inputs[0] == last)) break;
      const int other = next->inputs[0] == last ? next->inputs[1] : next->inputs[0];
      const auto vals = per_channel(g, other, out, axis);
      if (!vals || g.value(next->outputs[0]).shape != out) break;
      for (int64_t ch = 0; ch < c; ++ch) {
        const auto i = static_cast<size_t>(ch);
        if (next->op == "Mul") {
          scale[i] *= (*vals)[i];
          shift[i] *= (*vals)[i];
        } else {
          shift[i] += sub ? -(*vals)[i] : (*vals)[i];
        }
      }
      last = next->outputs[0];
      ++folded;
    }
    if (last == start) continue;
    std::vector<double> wv = w.data->to_doubles();
    const size_t per_filter = wv.size() / static_cast<size_t>(c);
    for (size_t i = 0; i < wv.size(); ++i) wv[i] *= scale[i / per_filter];
    std::vector<double> bv(static_cast<size_t>(c), 0.0);
    if (has_bias) bv = g.value(conv.inputs[2]).data->to_doubles();
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = bv[i] * scale[i] + shift[i];
    Tensor nw(w.dtype, w.shape);
    nw.set_doubles(wv);
    Tensor nb(w.dtype, {c});
    nb.set_doubles(bv);
    const std::string wname = w.name;
    const int new_w = g.add_constant(wname, std::move(nw));
    const int new_b = g.add_constant(conv.name + "/bias", std::move(nb));
    replace.resize(g.values().size(), kNoValue);
    Node& conv_again = g.nodes()[k];  // add_constant does not touch nodes, but keep the reference fresh
    conv_again.inputs = {conv_again.inputs[0], new_w, new_b};
    replace[static_cast<size_t>(last)] = start;
    g.value(start).name = g.value(last).name;
  }
  if (folded == 0) return 0;
  auto fix = [&](int& v) {
    if (v != kNoValue && static_cast<size_t>(v) < replace.size() && replace[static_cast<size_t>(v)] != kNoValue) {
      v = replace[static_cast<size_t>(v)];
    }
  };
  for (Node& n : g.nodes()) {
    for (int& in : n.inputs) fix(in);
  }
  for (int& o : g.outputs()) fix(o);
  g.remove_dead();
  return folded;
}

}  // namespace fusetune::importer
