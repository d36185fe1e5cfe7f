#include "importer/cancel_transposes.h"

#include <vector>

#include "core/ops.h"

namespace fusetune::importer {

namespace {

// Whether node n maps elements to elements wherever they lie: an element-wise op whose only
// non-scalar-constant input is `chain`, and not a random one.
bool layout_free(const Graph& g, const Node& n, int chain) {
  const OpSchema* s = find_op(n.op);
  if (s == nullptr || s->kind != OpKind::kElementwise || n.op.rfind("Random", 0) == 0 || n.outputs.size() != 1) return false;
  bool reads_chain = false;
  for (int in : n.inputs) {
    if (in == chain) {
      if (reads_chain) return false;  // the chain twice (x * x): still element-wise, kept simple
      reads_chain = true;
    } else if (in != kNoValue && !(g.value(in).is_constant() && numel(g.value(in).shape) == 1)) {
      return false;
    }
  }
  return reads_chain && g.value(n.outputs[0]).shape == g.value(chain).shape;
}

}  // namespace

int cancel_transposes(Graph& g) {
  std::vector<int> replace(g.values().size(), kNoValue);  // a Transpose's output -> what computes it now
  const auto redirect = [&] {
    const auto fix = [&](int& v) {
      if (v != kNoValue && replace[static_cast<size_t>(v)] != kNoValue) v = replace[static_cast<size_t>(v)];
    };
    for (Node& n : g.nodes()) {
      for (int& in : n.inputs) fix(in);
      for (Guard& gd : n.guards) fix(gd.cond);
    }
    for (int& o : g.outputs()) fix(o);
    std::fill(replace.begin(), replace.end(), kNoValue);
  };
  // A Transpose of a Transpose reads the first one's input, by the two permutations composed;
  // where they compose to the identity, its readers read that input (a graph output keeps its
  // Transpose, now a copy).
  std::vector<bool> is_output(g.values().size(), false);
  for (int o : g.outputs()) is_output[static_cast<size_t>(o)] = true;
  const std::vector<int> producer = g.producers();
  int cancelled = 0;
  for (Node& second : g.nodes()) {
    if (second.op != "Transpose") continue;
    const int p = producer[static_cast<size_t>(second.inputs[0])];
    if (p < 0 || g.nodes()[static_cast<size_t>(p)].op != "Transpose" || g.nodes()[static_cast<size_t>(p)].guards != second.guards) continue;
    const Node& first = g.nodes()[static_cast<size_t>(p)];
    const std::vector<int64_t> p1 = first.attrs.ints("perm"), p2 = second.attrs.ints("perm");
    std::vector<int64_t> composed(p2.size());
    bool identity = true;
    for (size_t i = 0; i < p2.size(); ++i) {
      composed[i] = p1[static_cast<size_t>(p2[i])];
      identity = identity && composed[i] == static_cast<int64_t>(i);
    }
    second.inputs[0] = first.inputs[0];
    second.attrs.set("perm", composed);
    if (identity && !is_output[static_cast<size_t>(second.outputs[0])]) replace[static_cast<size_t>(second.outputs[0])] = first.inputs[0];
    ++cancelled;
  }
  redirect();
  // A Transpose and its inverse around a chain of layout-free element-wise ops.
  std::vector<int> uses(g.values().size(), 0), reader(g.values().size(), -1);
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    for (int in : reads(g.nodes()[k])) {
      ++uses[static_cast<size_t>(in)];
      reader[static_cast<size_t>(in)] = static_cast<int>(k);
    }
  }
  for (int o : g.outputs()) uses[static_cast<size_t>(o)] += 2;  // a graph output is no chain link
  const auto only_reader = [&](int v) -> Node* {
    return uses[static_cast<size_t>(v)] == 1 ? &g.nodes()[static_cast<size_t>(reader[static_cast<size_t>(v)])] : nullptr;
  };
  for (Node& first : g.nodes()) {
    if (first.op != "Transpose" || !first.guards.empty() || uses[static_cast<size_t>(first.outputs[0])] == 0) continue;
    const std::vector<int64_t> p = first.attrs.ints("perm");
    std::vector<Node*> chain;
    int v = first.outputs[0];
    Node* next = only_reader(v);
    while (next != nullptr && next->op != "Transpose" && next->guards.empty() && layout_free(g, *next, v)) {
      chain.push_back(next);
      v = next->outputs[0];
      next = only_reader(v);
    }
    if (chain.empty() || next == nullptr || next->op != "Transpose" || !next->guards.empty()) continue;
    const std::vector<int64_t> q = next->attrs.ints("perm");
    bool identity = q.size() == p.size();
    for (size_t i = 0; identity && i < q.size(); ++i) identity = p[static_cast<size_t>(q[i])] == static_cast<int64_t>(i);
    if (!identity) continue;
    const int x = first.inputs[0];
    for (int& in : chain.front()->inputs) {
      if (in == first.outputs[0]) in = x;
    }
    for (Node* n : chain) g.value(n->outputs[0]).shape = g.value(x).shape;
    replace[static_cast<size_t>(next->outputs[0])] = v;
    g.value(v).name = g.value(next->outputs[0]).name;
    uses[static_cast<size_t>(first.outputs[0])] = 0;  // both Transposes are dead now
    uses[static_cast<size_t>(v)] = 0;
    ++cancelled;
  }
  if (cancelled == 0) return 0;
  redirect();
  g.remove_dead();
  return cancelled;
}

}  // namespace fusetune::importer
