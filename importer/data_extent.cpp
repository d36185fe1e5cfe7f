#include "importer/data_extent.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::importer {

namespace {

// A padded value's extent, and the value it began as (for messages).
struct Carried {
  DataExtent e;
  std::string source;
};

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t d = begin; d < end; ++d) p *= s[d];
  return p;
}

// Nodes whose outputs reach a graph output.
std::vector<bool> live_nodes(const Graph& g) {
  std::set<int> needed(g.outputs().begin(), g.outputs().end());
  std::vector<bool> live(g.nodes().size(), false);
  for (size_t n = g.nodes().size(); n-- > 0;) {
    const Node& node = g.nodes()[n];
    if (std::none_of(node.outputs.begin(), node.outputs.end(), [&](int o) { return needed.count(o) != 0; })) continue;
    live[n] = true;
    for (int in : node.inputs) {
      if (in != kNoValue) needed.insert(in);
    }
  }
  return live;
}

// The axis of the node's output that holds the padded axis of its carried inputs (input index,
// extent), the count possibly narrowed by a Slice; `refuse` throws naming why not.
Carried carry_node(GraphBuilder& b, const Node& n, const std::vector<std::pair<size_t, Carried>>& ins,
                   const std::function<void(const std::string&)>& refuse) {
  const Graph& g = b.graph();
  const Shape out = g.value(n.outputs.at(0)).shape;
  const auto in_shape = [&](size_t k) { return g.value(n.inputs[k]).shape; };
  const size_t k0 = ins[0].first;
  const Carried c = ins[0].second;
  const int a = c.e.axis;
  const Shape s = in_shape(k0);
  const int r = static_cast<int>(s.size());
  const int R = static_cast<int>(out.size());
  const auto same_count = [&] {
    for (const auto& [k, other] : ins) {
      if (other.e.count != c.e.count) refuse("two values of different counts meet in it");
    }
  };
  const auto kept = [&](int axis) { return Carried{{c.e.count, axis}, c.source}; };
  const OpSchema* schema = find_op(n.op);
  if (schema != nullptr && schema->kind == OpKind::kElementwise) {
    same_count();
    std::optional<int> axis;
    for (const auto& [k, other] : ins) {
      const Shape is = in_shape(k);
      const int at = other.e.axis + R - static_cast<int>(is.size());
      if (is[static_cast<size_t>(other.e.axis)] != out[static_cast<size_t>(at)]) refuse("it broadcasts the padded axis");
      if (axis && *axis != at) refuse("two padded axes meet in it");
      axis = at;
    }
    return kept(*axis);
  }
  if (n.op == "Concat") {
    same_count();
    const int64_t axis = n.attrs.i("axis");
    for (const auto& [k, other] : ins) {
      if (other.e.axis != a) refuse("two padded axes meet in it");
    }
    if (axis == a) refuse("it concatenates along the padded axis");
    return kept(a);
  }
  if (ins.size() > 1) refuse("two padded values meet in it");
  if (n.op == "Reshape") {
    const int64_t before = product(s, 0, static_cast<size_t>(a));
    for (int at = 0; at < R; ++at) {
      if (product(out, 0, static_cast<size_t>(at)) == before && out[static_cast<size_t>(at)] == s[static_cast<size_t>(a)]) return kept(at);
    }
    refuse("it merges or splits the padded axis");
  }
  if (n.op == "Transpose") {
    const std::vector<int64_t> perm = n.attrs.ints("perm");
    return kept(static_cast<int>(std::find(perm.begin(), perm.end(), a) - perm.begin()));
  }
  if (n.op == "Slice") {
    const auto at = static_cast<size_t>(a);
    const int64_t start = n.attrs.ints("starts").at(at), end = n.attrs.ints("ends").at(at), step = n.attrs.ints("steps").at(at);
    if (start != 0 || step != 1) refuse("it slices the padded axis elsewhere than from its start");
    if (end >= s[at]) return kept(a);
    const int bound = b.constant(Tensor::scalar_int(DType::kI64, end), n.name + ".bound");
    return Carried{{b.emit("Min", {c.e.count, bound}, {}, n.name + ".count"), a}, c.source};
  }
  if (n.op == "Expand") {
    const int at = a + R - r;
    if (s[static_cast<size_t>(a)] != out[static_cast<size_t>(at)]) refuse("it broadcasts the padded axis");
    return kept(at);
  }
  if (n.op == "Tile") {
    if (n.attrs.ints("repeats").at(static_cast<size_t>(a)) != 1) refuse("it repeats the padded axis");
    return kept(a);
  }
  if (n.op == "Pad") {
    const std::vector<int64_t> pads = n.attrs.ints("pads");
    if (pads.at(static_cast<size_t>(a)) != 0 || pads.at(static_cast<size_t>(a + r)) != 0) refuse("it pads the padded axis");
    return kept(a);
  }
  if (n.op == "Gather") {
    const int axis = static_cast<int>(n.attrs.i("axis"));
    if (k0 == 1) return kept(axis + a);  // rows gathered at padded indices: the padding's rows are padding
    if (axis == a) refuse("it gathers along the padded axis");
    return kept(a < axis ? a : a + static_cast<int>(in_shape(1).size()) - 1);
  }
  if (n.op == "ReduceSum" || n.op == "ReduceMean" || n.op == "ReduceMax" || n.op == "ReduceMin" || n.op == "ReduceProd" ||
      n.op == "ArgMax" || n.op == "ArgMin") {
    const std::vector<int64_t> axes = n.attrs.has("axes") ? n.attrs.ints("axes") : std::vector<int64_t>{n.attrs.i("axis")};
    if (std::find(axes.begin(), axes.end(), a) != axes.end()) refuse("it reduces the padded axis");
    if (n.attrs.i("keepdims", 1) != 0) return kept(a);
    return kept(a - static_cast<int>(std::count_if(axes.begin(), axes.end(), [&](int64_t x) { return x < a; })));
  }
  if (n.op == "Softmax" || n.op == "LogSoftmax") {
    if (n.attrs.i("axis") == a) refuse("it normalizes along the padded axis");
    return kept(a);
  }
  if (n.op == "LayerNormalization") {
    if (k0 != 0 || a >= n.attrs.i("axis")) refuse("it normalizes over the padded axis");
    return kept(a);
  }
  if (n.op == "MatMul" && r >= 2) {
    const bool rows = k0 == 0 && a == r - 2, columns = k0 == 1 && a == r - 1;
    if (rows || columns) return kept(R - (rows ? 2 : 1));
    const int at = a + R - r;
    if (a < r - 2 && s[static_cast<size_t>(a)] == out[static_cast<size_t>(at)]) return kept(at);
    refuse("it contracts or broadcasts the padded axis");
  }
  refuse("fusetune carries such a value only through ops that keep its entries in place (docs/canonical-ops.md)");
  return c;  // not reached
}

// A name for the count of `padded`: "<name>.count", numbered when taken.
std::string count_name(const Graph& g, const std::string& padded) {
  std::set<std::string> taken;
  for (const Value& v : g.values()) taken.insert(v.name);
  std::string name = padded + ".count";
  for (int k = 1; taken.count(name); ++k) name = padded + ".count" + std::to_string(k);
  return name;
}

}  // namespace

std::map<int, int> carry_extents(GraphBuilder& b) {
  std::map<int, int> axes;
  if (b.extents().empty()) return axes;
  Graph& g = b.graph();
  std::map<int, Carried> at;
  for (const auto& [v, e] : b.extents()) at[v] = {e, g.value(v).name};
  const std::vector<bool> live = live_nodes(g);
  const size_t original = g.nodes().size();
  for (size_t i = 0; i < original; ++i) {
    if (!live[i]) continue;
    const Node n = g.nodes()[i];  // a copy: carrying a Slice emits nodes
    std::vector<std::pair<size_t, Carried>> ins;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (auto it = at.find(n.inputs[k]); it != at.end()) ins.emplace_back(k, it->second);
    }
    if (ins.empty()) continue;
    const auto refuse = [&](const std::string& why) {
      const Value& v = g.value(n.inputs[ins[0].first]);
      fail("node '", n.name, "' (", n.op, "): reads '", v.name, "', whose extent along axis ", ins[0].second.e.axis,
           " depends on the data (from '", ins[0].second.source, "'), but ", why);
    };
    const Carried c = carry_node(b, n, ins, refuse);
    for (int o : n.outputs) at[o] = c;
  }
  std::map<int, int> counted;  // count value -> the graph output that delivers it
  const std::vector<int> outputs = g.outputs();
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int v = outputs[k];
    const auto it = at.find(v);
    if (it == at.end()) continue;
    const DataExtent e = it->second.e;
    const Value count = g.value(e.count);
    if (count.is_constant()) {  // an exact shape
      const Shape s = g.value(v).shape;
      Attributes slice;
      std::vector<int64_t> starts(s.size(), 0), ends = s, steps(s.size(), 1);
      ends[static_cast<size_t>(e.axis)] = count.data->to_ints().at(0);
      slice.set("starts", starts);
      slice.set("ends", ends);
      slice.set("steps", steps);
      const std::string name = g.value(v).name;
      g.value(v).name = name + ".padded";
      g.outputs()[k] = b.emit("Slice", {v}, slice, name);
      g.value(g.outputs()[k]).name = name;
      continue;
    }
    g.extents()[v] = e;
    if (counted.count(e.count)) continue;
    g.value(e.count).name = count_name(g, it->second.source);
    g.outputs().push_back(e.count);
    counted[e.count] = v;
  }
  for (const auto& [v, c] : at) axes[v] = c.e.axis;
  return axes;
}

}  // namespace fusetune::importer
