#include "codegen/uniform_constants.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>

#include "codegen/index_expr.h"
#include "planner/index_expr.h"

namespace fusetune::codegen {

namespace {

// One let of the prologue: its expression, the lets it reads, the coordinates it depends on.
struct Let {
  Stmt* stmt = nullptr;
  IndexExpr expr;
  std::vector<int> reads;       // earlier lets (their indices)
  bool coordinate = false;      // reads the block index
  std::vector<int> depends;     // coordinates (let indices), sorted
  std::set<int64_t> values;     // every value it takes
  bool unknown = false;         // some value is not known, or it was not evaluated
};

}  // namespace

FoldResult fold_uniform_constants(Kernel& k, const std::vector<int64_t>& blocks, int64_t budget) {
  FoldResult out;
  std::vector<Let> lets;
  std::map<std::string, int> index_of;
  // Slot 0 is the block index; let i is slot i + 1.
  for (Stmt& s : k.uniform) {
    if (s.kind != Stmt::Kind::kLet) continue;
    Let l;
    l.stmt = &s;
    const int self = static_cast<int>(lets.size());
    l.expr = IndexExpr::parse(s.a, [&](const std::string& name) {
      IndexExpr::Binding b;
      if (name == "ft_block") {
        l.coordinate = true;
        b.kind = IndexExpr::Binding::Kind::kSlot;
        b.index = 0;
      } else if (const auto it = index_of.find(name); it != index_of.end()) {
        l.reads.push_back(it->second);
        b.kind = IndexExpr::Binding::Kind::kSlot;
        b.index = it->second + 1;
      }
      return b;
    });
    std::set<int> deps;
    if (l.coordinate) {
      deps.insert(self);
    } else {
      for (int r : l.reads) deps.insert(lets[static_cast<size_t>(r)].depends.begin(), lets[static_cast<size_t>(r)].depends.end());
    }
    l.depends.assign(deps.begin(), deps.end());
    index_of[s.name] = self;  // a later let of the same name shadows it for the lets after it
    lets.push_back(std::move(l));
  }
  out.lets = static_cast<int>(lets.size());
  if (lets.empty()) return out;
  const size_t n = lets.size();
  std::vector<IndexValue> env(n + 1);
  const auto no_loads = [](int, IndexValue) {};
  // The lets a let needs, itself included, in program order.
  const auto closure = [&](const std::vector<int>& roots) {
    std::vector<char> need(n, 0);
    for (int r : roots) need[static_cast<size_t>(r)] = 1;
    for (size_t i = n; i-- > 0;) {
      if (!need[i]) continue;
      for (int r : lets[i].reads) need[static_cast<size_t>(r)] = 1;
    }
    std::vector<int> order;
    for (size_t i = 0; i < n; ++i) {
      if (need[i]) order.push_back(static_cast<int>(i));
    }
    return order;
  };
  const auto eval = [&](int i) {
    env[static_cast<size_t>(i) + 1] = lets[static_cast<size_t>(i)].expr.eval(env, no_loads);
    return env[static_cast<size_t>(i) + 1];
  };

  // The coordinates, block by block; their combinations.
  std::vector<int> coords;
  for (size_t i = 0; i < n; ++i) {
    if (lets[i].coordinate) coords.push_back(static_cast<int>(i));
  }
  const std::vector<int> coord_closure = closure(coords);
  bool independent = false;
  if (!coords.empty() && static_cast<int64_t>(blocks.size()) * static_cast<int64_t>(coord_closure.size()) <= budget) {
    budget -= static_cast<int64_t>(blocks.size()) * static_cast<int64_t>(coord_closure.size());
    std::set<std::vector<int64_t>> combos;
    for (int64_t b : blocks) {
      env[0] = b;
      for (int i : coord_closure) eval(i);
      std::vector<int64_t> combo;
      for (int c : coords) {
        Let& l = lets[static_cast<size_t>(c)];
        const IndexValue v = env[static_cast<size_t>(c) + 1];
        if (v) l.values.insert(*v), combo.push_back(*v);
        else l.unknown = true;
      }
      if (combo.size() == coords.size()) combos.insert(std::move(combo));
    }
    double product = 1;
    bool known = true;
    for (int c : coords) {
      product *= static_cast<double>(lets[static_cast<size_t>(c)].values.size());
      known = known && !lets[static_cast<size_t>(c)].unknown;
    }
    independent = known && product == static_cast<double>(combos.size());
  } else {
    for (int c : coords) lets[static_cast<size_t>(c)].unknown = true;
  }
  env[0] = std::nullopt;  // the other lets never read the block index directly

  // Every other let, over the combinations of the coordinates it depends on: one enumeration per
  // distinct set of coordinates, evaluating the lets that set determines.
  std::map<std::vector<int>, std::vector<int>> by_depends;
  for (size_t i = 0; i < n; ++i) {
    if (!lets[i].coordinate) by_depends[lets[i].depends].push_back(static_cast<int>(i));
  }
  for (const auto& [deps, members] : by_depends) {
    bool possible = deps.size() <= 1 || independent;
    double combos = 1;
    for (int c : deps) {
      const Let& l = lets[static_cast<size_t>(c)];
      possible = possible && !l.unknown;
      combos *= static_cast<double>(l.values.size());
    }
    const std::vector<int> order = closure(members);
    std::vector<int> inner;  // the non-coordinate lets to evaluate per combination
    for (int i : order) {
      if (!lets[static_cast<size_t>(i)].coordinate) inner.push_back(i);
    }
    const double cost = combos * static_cast<double>(inner.size());
    if (!possible || cost > static_cast<double>(budget)) {
      for (int i : members) lets[static_cast<size_t>(i)].unknown = true;
      continue;
    }
    budget -= static_cast<int64_t>(cost);
    std::vector<std::vector<int64_t>> choices;
    for (int c : deps) {
      const auto& v = lets[static_cast<size_t>(c)].values;
      choices.emplace_back(v.begin(), v.end());
    }
    std::vector<size_t> digit(deps.size(), 0);
    for (bool more = true; more;) {
      for (size_t j = 0; j < deps.size(); ++j) env[static_cast<size_t>(deps[j]) + 1] = choices[j][digit[j]];
      for (int i : inner) eval(i);
      for (int i : members) {
        Let& l = lets[static_cast<size_t>(i)];
        const IndexValue v = env[static_cast<size_t>(i) + 1];
        if (v) l.values.insert(*v);
        else l.unknown = true;
      }
      more = false;
      for (size_t j = 0; j < digit.size(); ++j) {
        if (++digit[j] < choices[j].size()) {
          more = true;
          break;
        }
        digit[j] = 0;
      }
    }
  }
  // Then the lets nothing reads any more (a folded extent's inputs) go: last first, so that a let
  // read only by dropped lets goes too.
  std::map<std::string, int> reads;
  const auto count_names = [&](const std::string& text, int by) {
    for (size_t i = 0; i < text.size();) {
      if (!(std::isalpha(static_cast<unsigned char>(text[i])) || text[i] == '_')) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      reads[text.substr(i, j - i)] += by;
      i = j;
    }
  };
  std::function<void(const Block&)> count_block = [&](const Block& b) {
    for (const Stmt& s : b) {
      count_names(s.a, 1);
      count_names(s.b, 1);
      count_names(s.c, 1);
      count_names(s.d, 1);
      count_names(s.e, 1);
      if (s.kind == Stmt::Kind::kAssign) count_names(s.name, 1);
      count_block(s.body);
      count_block(s.orelse);
      count_block(s.uniform);
    }
  };
  count_block(k.body);
  for (Let& l : lets) {
    if (l.unknown || l.values.empty()) continue;
    out.bounds[l.stmt->name] = {*l.values.begin(), *l.values.rbegin()};
    if (l.values.size() != 1) continue;
    const std::string literal = planner::index_literal(*l.values.begin());
    if (l.stmt->a != literal) {
      l.stmt->a = literal;
      ++out.folded;
    }
  }
  for (const Stmt& s : k.uniform) count_names(s.a, 1);
  std::set<const Stmt*> dropped;
  for (auto it = k.uniform.rbegin(); it != k.uniform.rend(); ++it) {
    if (it->kind != Stmt::Kind::kLet || reads[it->name] > 0) continue;
    dropped.insert(&*it);
    count_names(it->a, -1);
  }
  out.dropped = static_cast<int>(dropped.size());
  Block kept;
  for (Stmt& s : k.uniform) {
    if (!dropped.count(&s)) kept.push_back(std::move(s));
  }
  k.uniform = std::move(kept);
  return out;
}

}  // namespace fusetune::codegen
