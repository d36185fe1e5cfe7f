#include "planner/epilogue.h"

#include <algorithm>
#include <set>

#include "core/ops.h"
#include "planner/tensor_expr.h"
#include "planner/tiling.h"

namespace fusetune::planner {

namespace {

// Whether `a` reads its input at the node's own index over `shape`: each axis by its variable, or
// by 0 where the axis has one element (as describe writes a batch of one).
bool identity(const Access& a, const Shape& shape) {
  if (a.guarded || a.index.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d) {
    const IndexExpr& i = a.index[d];
    if (!i.is_var(static_cast<int>(d)) && !(shape[d] == 1 && i.is_const() && i.value() == 0)) return false;
  }
  return true;
}

// The element-wise chain from `chain` (values of `shape`) to the group's root, over the group's
// nodes but `views` (a pair's Reshapes and Slices, which nothing else may read: `hidden`).
std::optional<std::vector<int>> chain_to_root(const Graph& g, const FusionGroup& group, std::vector<int>::const_iterator at,
                                              std::set<int> chain, const Shape& shape, const std::set<int>& views = {},
                                              const std::set<int>& hidden = {}) {
  // Values ready when the contraction's stage ends: what the group reads, anchors before it, and
  // element-wise values of those.
  std::set<int> ready(group.inputs.begin(), group.inputs.end());
  for (auto it = group.nodes.begin(); it != group.nodes.end(); ++it) {
    if (views.count(*it)) continue;
    const Node& n = g.nodes()[static_cast<size_t>(*it)];
    const int out = n.outputs[0];
    bool reads_chain = false;
    for (int v : n.inputs) {
      if (hidden.count(v)) return std::nullopt;
      reads_chain = reads_chain || chain.count(v) > 0;
    }
    if (!reads_chain) {
      bool inputs_ready = true;
      for (int v : n.inputs) inputs_ready = inputs_ready && (v == kNoValue || ready.count(v) > 0);
      if ((runs_as_stage(n) && it < at) || (!runs_as_stage(n) && inputs_ready)) ready.insert(out);
      continue;
    }
    if (find_op(n.op)->kind != OpKind::kElementwise || n.outputs.size() != 1 || g.value(out).shape != shape) return std::nullopt;
    const TensorExpr e = describe(g, n);
    for (const Access& a : e.accesses) {
      const int v = n.inputs[static_cast<size_t>(a.input)];
      if (chain.count(v) ? !identity(a, shape) : !ready.count(v)) return std::nullopt;
    }
    chain.insert(out);
  }
  // The chain ends in the root: every value of it but the root is read inside the chain.
  const int root = group_root(g, group);
  if (!chain.count(root)) return std::nullopt;
  std::set<int> read;
  for (int id : group.nodes) {
    const Node& n = g.nodes()[static_cast<size_t>(id)];
    if (chain.count(n.outputs[0])) read.insert(n.inputs.begin(), n.inputs.end());
  }
  for (int v : chain) {
    if (v != root && !read.count(v)) return std::nullopt;
  }
  std::vector<int> exported;
  for (int v : group.outputs) {
    if (hidden.count(v)) return std::nullopt;
    if (chain.count(v)) exported.push_back(v);
  }
  std::sort(exported.begin(), exported.end());
  return exported;
}

// The group's nodes reading `v` (its consumers inside the group).
std::vector<int> readers(const Graph& g, const FusionGroup& group, int v) {
  std::vector<int> out;
  for (int id : group.nodes) {
    const Node& n = g.nodes()[static_cast<size_t>(id)];
    if (std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end()) out.push_back(id);
  }
  return out;
}

}  // namespace

std::optional<std::vector<int>> register_epilogue(const Graph& g, const FusionGroup& group, int matmul_node) {
  const Node& mm = g.nodes()[static_cast<size_t>(matmul_node)];
  if (mm.op != "MatMul") return std::nullopt;
  const auto at = std::find(group.nodes.begin(), group.nodes.end(), matmul_node);
  if (at == group.nodes.end()) return std::nullopt;
  const int product = mm.outputs[0];
  return chain_to_root(g, group, at, {product}, g.value(product).shape);
}

std::optional<PairedEpilogue> paired_epilogue(const Graph& g, const FusionGroup& group, int matmul_node) {
  const Node& mm = g.nodes()[static_cast<size_t>(matmul_node)];
  if (mm.op != "MatMul") return std::nullopt;
  const auto at = std::find(group.nodes.begin(), group.nodes.end(), matmul_node);
  if (at == group.nodes.end()) return std::nullopt;
  const int product = mm.outputs[0];
  const Shape& wide = g.value(product).shape;
  if (wide.size() < 2 || wide.back() % 2 != 0) return std::nullopt;
  Shape half = wide, pairs = wide;
  half.back() = wide.back() / 2;
  pairs.back() = half.back();
  pairs.push_back(2);
  // The views: Reshape(p, pairs) -> Slice of column c -> Reshape(half), one reader each.
  const auto only = [&](int v, const std::string& op, const Shape& out) -> const Node* {
    const std::vector<int> r = readers(g, group, v);
    if (r.size() != 1) return nullptr;
    const Node& n = g.nodes()[static_cast<size_t>(r[0])];
    return n.op == op && n.outputs.size() == 1 && g.value(n.outputs[0]).shape == out ? &n : nullptr;
  };
  const Node* split = only(product, "Reshape", pairs);
  if (split == nullptr) return std::nullopt;
  std::set<int> views = {static_cast<int>(split - g.nodes().data())}, hidden = {product, split->outputs[0]};
  const std::vector<int> slices = readers(g, group, split->outputs[0]);
  if (slices.size() != 2) return std::nullopt;
  Shape one = pairs;
  one.back() = 1;
  int halves[2] = {kNoValue, kNoValue};
  for (int id : slices) {
    const Node& s = g.nodes()[static_cast<size_t>(id)];
    if (s.op != "Slice" || s.outputs.size() != 1 || g.value(s.outputs[0]).shape != one) return std::nullopt;
    const std::vector<int64_t> starts = s.attrs.ints("starts"), ends = s.attrs.ints("ends"), steps = s.attrs.ints("steps");
    if (starts.size() != pairs.size() || ends.size() != pairs.size() || steps.size() != pairs.size()) return std::nullopt;
    for (size_t d = 0; d + 1 < pairs.size(); ++d) {
      if (starts[d] != 0 || ends[d] != pairs[d] || steps[d] != 1) return std::nullopt;
    }
    const int64_t column = starts.back();
    if ((column != 0 && column != 1) || ends.back() != column + 1 || steps.back() != 1 || halves[column] != kNoValue) return std::nullopt;
    const Node* back = only(s.outputs[0], "Reshape", half);
    if (back == nullptr) return std::nullopt;
    views.insert(id);
    views.insert(static_cast<int>(back - g.nodes().data()));
    hidden.insert(s.outputs[0]);
    halves[column] = back->outputs[0];
  }
  const auto written = chain_to_root(g, group, at, {halves[0], halves[1]}, half, views, hidden);
  if (!written) return std::nullopt;
  return PairedEpilogue{halves[0], halves[1], *written};
}

bool sixteen_byte_runs(const Graph& g, const std::vector<int>& values, int64_t run) {
  for (int v : values) {
    if (run * static_cast<int64_t>(dtype_size(g.value(v).dtype)) % 16 != 0) return false;
  }
  return !values.empty();
}

}  // namespace fusetune::planner
