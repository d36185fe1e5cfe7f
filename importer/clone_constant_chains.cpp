#include "importer/clone_constant_chains.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/model_stats.h"
#include "core/tensor.h"
#include "importer/fold_constant_cones.h"

namespace fusetune::importer {

size_t clone_constant_chains(Graph& g) {
  const std::vector<char> derived = computed_from_constants(g);
  const std::vector<int> producer = g.producers();
  const auto computed = [&](int v) {
    return v != kNoValue && producer[static_cast<size_t>(v)] >= 0 && derived[static_cast<size_t>(producer[static_cast<size_t>(v)])];
  };
  // Each (value, reader) pair: a value computed from constants, read as an input by a node that
  // is not; the chain computing it, in node order.
  struct Pair {
    int value = kNoValue, reader = -1;
    std::set<int> chain;
  };
  std::vector<Pair> pairs;
  std::map<int, int> uses;  // chain node -> the pairs whose chains hold it
  for (size_t r = 0; r < g.nodes().size(); ++r) {
    // A guarded reader (a branch of an If) keeps what it reads: a copy would run whether the
    // branch does or not, and fusion merges nodes under the same guards alone.
    if (derived[r] || !g.nodes()[r].guards.empty()) continue;
    std::set<int> read;
    for (int v : g.nodes()[r].inputs) {
      if (!computed(v) || !read.insert(v).second) continue;
      Pair p{v, static_cast<int>(r), {}};
      for (std::vector<int> todo{producer[static_cast<size_t>(v)]}; !todo.empty();) {
        const int n = todo.back();
        todo.pop_back();
        if (!p.chain.insert(n).second) continue;
        for (int in : g.nodes()[static_cast<size_t>(n)].inputs) {
          if (computed(in)) todo.push_back(producer[static_cast<size_t>(in)]);
        }
      }
      for (int n : p.chain) ++uses[n];
      pairs.push_back(std::move(p));
    }
  }
  // The pairs that get a copy: a chain another pair shares, small, of few constant bytes.
  std::map<int, std::vector<const Pair*>> before;  // reader -> its pairs to copy
  for (const Pair& p : pairs) {
    bool shared = false;
    int64_t constant_bytes = 0;
    std::set<int> leaves;
    for (int n : p.chain) {
      shared = shared || uses[n] > 1;
      for (int in : g.nodes()[static_cast<size_t>(n)].inputs) {
        if (in != kNoValue && g.value(in).is_constant() && leaves.insert(in).second) constant_bytes += value_bytes(g.value(in));
      }
    }
    if (shared && p.chain.size() <= kMaxChain && constant_bytes * 8 <= value_bytes(g.value(p.value))) before[p.reader].push_back(&p);
  }
  if (before.empty()) return 0;
  std::vector<Node> nodes;
  size_t copied = 0;
  for (size_t r = 0; r < g.nodes().size(); ++r) {
    Node reader = g.nodes()[r];
    if (auto it = before.find(static_cast<int>(r)); it != before.end()) {
      // The reader's chains, one copy of each node even where two of its values share one.
      std::set<int> chain;
      for (const Pair* p : it->second) chain.insert(p->chain.begin(), p->chain.end());
      std::map<int, int> renamed;  // chain value -> its copy for this reader
      for (int n : chain) {
        Node copy = g.nodes()[static_cast<size_t>(n)];
        copy.name += "/for:" + reader.name;
        for (int& in : copy.inputs) {
          if (auto c = renamed.find(in); c != renamed.end()) in = c->second;
        }
        for (int& o : copy.outputs) {
          Value v = g.value(o);
          v.name += "/for:" + reader.name;
          const int id = g.add_value(std::move(v));
          renamed[o] = id;
          o = id;
        }
        nodes.push_back(std::move(copy));
        ++copied;
      }
      for (const Pair* p : it->second) {
        for (int& in : reader.inputs) in = in == p->value ? renamed.at(p->value) : in;
      }
    }
    nodes.push_back(std::move(reader));
  }
  g.nodes() = std::move(nodes);
  g.remove_dead();
  return copied;
}

}  // namespace fusetune::importer
