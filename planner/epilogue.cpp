#include "planner/epilogue.h"

#include <algorithm>
#include <set>

#include "core/ops.h"
#include "planner/tensor_expr.h"
#include "planner/tiling.h"

namespace fusetune::planner {

namespace {

bool identity(const Access& a, size_t rank) {
  if (a.guarded || a.index.size() != rank) return false;
  for (size_t d = 0; d < rank; ++d) {
    if (!a.index[d].is_var(static_cast<int>(d))) return false;
  }
  return true;
}

}  // namespace

std::optional<std::vector<int>> register_epilogue(const Graph& g, const FusionGroup& group, int matmul_node) {
  const Node& mm = g.nodes()[static_cast<size_t>(matmul_node)];
  if (mm.op != "MatMul") return std::nullopt;
  const int product = mm.outputs[0];
  const Shape& shape = g.value(product).shape;
  const size_t rank = shape.size();
  const auto at = std::find(group.nodes.begin(), group.nodes.end(), matmul_node);
  if (at == group.nodes.end()) return std::nullopt;
  // The chain: values computed from the product by element-wise nodes at their own index, in the
  // group's (topological) order, so a node's chain inputs are known when it is reached.
  std::set<int> chain = {product};
  // Values ready when the contraction's stage ends: what the group reads, anchors before it, and
  // element-wise values of those.
  std::set<int> ready(group.inputs.begin(), group.inputs.end());
  for (auto it = group.nodes.begin(); it != group.nodes.end(); ++it) {
    const Node& n = g.nodes()[static_cast<size_t>(*it)];
    const int out = n.outputs[0];
    bool reads_chain = false;
    for (int v : n.inputs) reads_chain = reads_chain || chain.count(v) > 0;
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
      if (chain.count(v) ? !identity(a, rank) : !ready.count(v)) return std::nullopt;
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
    if (chain.count(v)) exported.push_back(v);
  }
  std::sort(exported.begin(), exported.end());
  return exported;
}

bool sixteen_byte_runs(const Graph& g, const std::vector<int>& values, int64_t run) {
  for (int v : values) {
    if (run * static_cast<int64_t>(dtype_size(g.value(v).dtype)) % 16 != 0) return false;
  }
  return !values.empty();
}

}  // namespace fusetune::planner
