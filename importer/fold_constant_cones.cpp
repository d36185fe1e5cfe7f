#include "importer/fold_constant_cones.h"

#include <map>
#include <set>
#include <vector>

#include "core/model_stats.h"
#include "core/tensor.h"
#include "reference/kernels.h"

namespace fusetune::importer {
namespace {

// Folds the first cone (in node order) that fold_constant_cones folds; its nodes, 0 where none is left.
size_t fold_one(Graph& g) {
  const size_t values = g.values().size(), count = g.nodes().size();
  std::vector<char> output(values, 0);
  for (int o : g.outputs()) output[static_cast<size_t>(o)] = 1;
  std::vector<std::vector<int>> readers(values);
  for (size_t n = 0; n < count; ++n) {
    for (int in : reads(g.nodes()[n])) readers[static_cast<size_t>(in)].push_back(static_cast<int>(n));
  }
  const std::vector<char> derived_node = computed_from_constants(g);
  const std::vector<int> producer = g.producers();
  for (size_t n = 0; n < count; ++n) {
    if (!derived_node[n]) continue;
    for (int v : g.nodes()[n].outputs) {
      std::set<int> cone;
      for (std::vector<int> stack{static_cast<int>(n)}; !stack.empty();) {
        const int m = stack.back();
        stack.pop_back();
        if (!cone.insert(m).second) continue;
        for (int in : g.nodes()[static_cast<size_t>(m)].inputs) {
          if (in != kNoValue && producer[static_cast<size_t>(in)] >= 0) stack.push_back(producer[static_cast<size_t>(in)]);
        }
      }
      // What folding frees: the constants the cone alone reads. It folds only where its other
      // results are read inside it alone (then the whole cone dies).
      const auto inside = [&](int value) {
        if (output[static_cast<size_t>(value)]) return false;
        for (int r : readers[static_cast<size_t>(value)]) {
          if (!cone.count(r)) return false;
        }
        return true;
      };
      int64_t freed = 0;
      bool dies = true;
      std::set<int> leaves;
      for (int m : cone) {
        const Node& node = g.nodes()[static_cast<size_t>(m)];
        for (int o : node.outputs) dies = dies && (o == v || inside(o));
        for (int in : node.inputs) {
          if (in != kNoValue && g.value(in).is_constant() && leaves.insert(in).second && inside(in)) freed += value_bytes(g.value(in));
        }
      }
      // (A graph output of data-dependent extent keeps its producer: its extent names it.)
      if (!dies || freed < value_bytes(g.value(v)) || g.extents().count(v)) continue;
      // Evaluated in node order, each value dropped after its last reader in the cone.
      std::map<int, int> left;
      for (int m : cone) {
        for (int in : g.nodes()[static_cast<size_t>(m)].inputs) {
          if (in != kNoValue && !g.value(in).is_constant()) ++left[in];
        }
      }
      std::map<int, Tensor> computed;
      for (int m : cone) {
        const Node& node = g.nodes()[static_cast<size_t>(m)];
        std::vector<const Tensor*> args;
        for (int in : node.inputs) {
          args.push_back(in == kNoValue ? nullptr : g.value(in).is_constant() ? g.value(in).data.get() : &computed.at(in));
        }
        std::vector<Tensor> results = reference::run_node(node, args);
        for (int in : node.inputs) {
          if (in != kNoValue && !g.value(in).is_constant() && --left[in] == 0) computed.erase(in);
        }
        for (size_t k = 0; k < node.outputs.size(); ++k) computed[node.outputs[k]] = std::move(results[k]);
      }
      const int folded = g.add_constant(g.value(v).name, std::move(computed.at(v)));
      for (int r : readers[static_cast<size_t>(v)]) {
        Node& reader = g.nodes()[static_cast<size_t>(r)];
        for (int& in : reader.inputs) in = in == v ? folded : in;
        for (Guard& gd : reader.guards) gd.cond = gd.cond == v ? folded : gd.cond;
      }
      for (int& o : g.outputs()) o = o == v ? folded : o;
      g.remove_dead();
      return cone.size();
    }
  }
  return 0;
}

}  // namespace

std::vector<char> computed_from_constants(const Graph& g) {
  std::vector<char> derived(g.values().size(), 0), derived_node(g.nodes().size(), 0);
  for (size_t v = 0; v < derived.size(); ++v) derived[v] = g.values()[v].is_constant();
  for (size_t n = 0; n < derived_node.size(); ++n) {
    const Node& node = g.nodes()[n];
    bool all = !node.inputs.empty() && node.guards.empty();
    for (int in : node.inputs) all = all && (in == kNoValue || derived[static_cast<size_t>(in)]);
    if (!all) continue;
    derived_node[n] = 1;
    for (int o : node.outputs) derived[static_cast<size_t>(o)] = 1;
  }
  return derived_node;
}

size_t fold_constant_cones(Graph& g) {
  size_t folded = 0;
  for (size_t nodes = fold_one(g); nodes > 0; nodes = fold_one(g)) folded += nodes;
  return folded;
}

}  // namespace fusetune::importer
