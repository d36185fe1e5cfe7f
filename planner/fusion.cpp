#include "planner/fusion.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/ops.h"
#include "planner/attention.h"
#include "planner/tensor_expr.h"

namespace fusetune::planner {

namespace {

enum class Role { kLight, kReduction, kContraction };

Role role_of(const Node& n) {
  switch (find_op(n.op)->kind) {
    case OpKind::kContraction: return Role::kContraction;
    case OpKind::kReduction:
    case OpKind::kNormalization:
    case OpKind::kPooling: return Role::kReduction;
    default: return Role::kLight;
  }
}

// The partition under construction: groups of node ids with union-find style ownership.
class Partition {
 public:
  explicit Partition(const Graph& g) : g_(g), group_of_(g.nodes().size()), members_(g.nodes().size()) {
    const std::vector<int> prod = g.producers();
    producer_ = prod;
    consumers_.resize(g.values().size());
    for (size_t n = 0; n < g.nodes().size(); ++n) {
      group_of_[n] = static_cast<int>(n);
      members_[n] = {static_cast<int>(n)};
      for (int in : reads(g.nodes()[n])) consumers_[static_cast<size_t>(in)].push_back(static_cast<int>(n));
    }
    for (int o : g.outputs()) graph_output_.insert(o);
  }

  int group(int node) const { return group_of_[static_cast<size_t>(node)]; }
  const std::vector<int>& members(int group) const { return members_[static_cast<size_t>(group)]; }
  const std::vector<int>& consumers(int value) const { return consumers_[static_cast<size_t>(value)]; }
  int producer(int value) const { return producer_[static_cast<size_t>(value)]; }
  bool is_graph_output(int value) const { return graph_output_.count(value) != 0; }

  int count(int group, Role r) const {
    int c = 0;
    for (int n : members(group)) c += role_of(g_.nodes()[static_cast<size_t>(n)]) == r ? 1 : 0;
    return c;
  }

  // Groups that read a value produced by `group`.
  std::set<int> successors(int group) const {
    std::set<int> out;
    for (int n : members(group)) {
      for (int v : g_.nodes()[static_cast<size_t>(n)].outputs) {
        for (int c : consumers(v)) {
          if (this->group(c) != group) out.insert(this->group(c));
        }
      }
    }
    return out;
  }

  // True if merging a and b keeps the group graph acyclic (no path between them through a third
  // group) and leaves the group one sink: a single node whose result no other member reads, the
  // node the group's tiles are computed for.
  bool can_merge(int a, int b) const {
    // A group runs under one set of guards (the branch of an If decided at run time it belongs to).
    if (g_.nodes()[static_cast<size_t>(members(a)[0])].guards != g_.nodes()[static_cast<size_t>(members(b)[0])].guards) return false;
    if (reaches_through_other(a, b) || reaches_through_other(b, a)) return false;
    std::set<int> both(members(a).begin(), members(a).end());
    both.insert(members(b).begin(), members(b).end());
    // A ScatterND reads its indices and updates from memory (codegen/stages/scatter.h): the nodes
    // computing them stay in other groups.
    for (int n : both) {
      const Node& node = g_.nodes()[static_cast<size_t>(n)];
      if (node.op != "ScatterND") continue;
      for (size_t k = 1; k < 3 && k < node.inputs.size(); ++k) {
        if (producer(node.inputs[k]) >= 0 && both.count(producer(node.inputs[k]))) return false;
      }
    }
    if (!keeps_states(both)) return false;
    int sinks = 0;
    for (int n : both) {
      bool read_inside = false;
      for (int c : consumers(g_.nodes()[static_cast<size_t>(n)].outputs[0])) read_inside = read_inside || both.count(c);
      sinks += read_inside ? 0 : 1;
    }
    return sinks == 1;
  }

  // States (rule 1's second clause: a value its producer's group exports while a group that reads
  // it element for element joins them): every later merge must keep each state read element for
  // element at its shape by whatever depends on it in the group, so that the group's tiles still
  // compute all of it.
  bool protect(int v) { return states_.insert(v).second; }  // false: already a state
  void unprotect(int v) { states_.erase(v); }

  // Whether every node of `nodes` that depends on v (through nodes of the set) is element-wise
  // with v's shape as its output's: the sink's tiles then need each element of v at the same
  // index, and compute all of it (a Pad, Slice or Concat on the way could leave elements to no
  // tile).
  bool elementwise_from(int v, const std::set<int>& nodes) const {
    const Shape& shape = g_.value(v).shape;
    std::vector<int> todo = {v};
    std::set<int> seen;
    while (!todo.empty()) {
      const int value = todo.back();
      todo.pop_back();
      for (int c : consumers(value)) {
        if (!nodes.count(c) || !seen.insert(c).second) continue;
        const Node& n = g_.nodes()[static_cast<size_t>(c)];
        if (find_op(n.op)->kind != OpKind::kElementwise || g_.value(n.outputs[0]).shape != shape) return false;
        todo.push_back(n.outputs[0]);
      }
    }
    return true;
  }

  void merge(int a, int b) {
    if (a == b) return;
    if (a > b) std::swap(a, b);
    for (int n : members_[static_cast<size_t>(b)]) group_of_[static_cast<size_t>(n)] = a;
    auto& ma = members_[static_cast<size_t>(a)];
    ma.insert(ma.end(), members_[static_cast<size_t>(b)].begin(), members_[static_cast<size_t>(b)].end());
    std::sort(ma.begin(), ma.end());
    members_[static_cast<size_t>(b)].clear();
  }

  std::vector<int> live_groups() const {
    std::vector<int> out;
    for (size_t k = 0; k < members_.size(); ++k) {
      if (!members_[k].empty()) out.push_back(static_cast<int>(k));
    }
    return out;
  }

 private:
  bool reaches_through_other(int from, int to) const {
    std::vector<int> stack;
    std::set<int> seen;
    for (int s : successors(from)) {
      if (s != to) stack.push_back(s);
    }
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      if (!seen.insert(x).second) continue;
      for (int s : successors(x)) {
        if (s == to) return true;
        stack.push_back(s);
      }
    }
    return false;
  }

  const Graph& g_;
  std::vector<int> group_of_;
  std::vector<std::vector<int>> members_;
  std::vector<int> producer_;
  std::vector<std::vector<int>> consumers_;
  std::set<int> graph_output_;
  std::set<int> states_;

  bool keeps_states(const std::set<int>& both) const {
    return std::all_of(states_.begin(), states_.end(), [&](int v) { return !both.count(producer(v)) || elementwise_from(v, both); });
  }
};

bool is_light(const Node& n) { return role_of(n) == Role::kLight; }

// Merges a and b if that keeps the group graph acyclic and, with a cost function, does not lose.
bool try_merge(Partition& p, int a, int b, const FusionOptions& opt) {
  if (!p.can_merge(a, b)) return false;
  if (opt.cost) {
    std::vector<int> both = p.members(a);
    both.insert(both.end(), p.members(b).begin(), p.members(b).end());
    std::sort(both.begin(), both.end());
    if (opt.cost(both) > opt.cost(p.members(a)) + opt.cost(p.members(b))) return false;
  }
  p.merge(a, b);
  return true;
}

bool light_group(const Partition& p, int grp) {
  return p.count(grp, Role::kContraction) + p.count(grp, Role::kReduction) == 0;
}

// Values a group reads from other groups (not constants, not graph inputs).
std::vector<int> external_reads(const Graph& g, const Partition& p, int grp) {
  std::vector<int> out;
  for (int n : p.members(grp)) {
    for (int in : g.nodes()[static_cast<size_t>(n)].inputs) {
      if (in == kNoValue || p.producer(in) < 0 || p.group(p.producer(in)) == grp) continue;
      if (std::find(out.begin(), out.end(), in) == out.end()) out.push_back(in);
    }
  }
  return out;
}

// A member of `grp` repeats `value` (an Expand or Tile that grows it: grouped-query attention's
// repeat of K and V; a Gather that grows it: a convolution's patches gathered for a product). Such
// a value is not joined to its producer's group, which would write the repeated copies (or, as
// the product's prologue, compute each element once per copy); the repeat stays with its
// consumers, which read the value through it.
bool repeated_in(const Graph& g, const Partition& p, int value, int grp) {
  for (int c : p.consumers(value)) {
    const Node& n = g.nodes()[static_cast<size_t>(c)];
    if (p.group(c) != grp || (n.op != "Expand" && n.op != "Tile" && n.op != "Gather") || n.inputs[0] != value) continue;
    if (numel(g.value(n.outputs[0]).shape) > numel(g.value(value).shape)) return true;
  }
  return false;
}

// Every use of `value` is inside group `grp`, and it is not a graph output.
bool used_only_by(const Partition& p, int value, int grp) {
  if (p.is_graph_output(value)) return false;
  const auto& c = p.consumers(value);
  return !c.empty() && std::all_of(c.begin(), c.end(), [&](int x) { return p.group(x) == grp; });
}

// Light nodes join the light group of a producer whose result they are the only users of, so
// chains like GELU's (Div, Erf, Add, Mul, Mul, reading their input twice) become one group.
bool cluster_light(const Graph& g, Partition& p) {
  bool changed = false;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    if (!is_light(g.nodes()[n])) continue;
    const int grp = p.group(static_cast<int>(n));
    for (int v : external_reads(g, p, grp)) {
      const int pg = p.group(p.producer(v));
      if (!light_group(p, pg) || repeated_in(g, p, v, grp)) continue;
      // All users of v are in this group or the producer's: merging makes v internal.
      const auto& c = p.consumers(v);
      const bool internal = !p.is_graph_output(v) && std::all_of(c.begin(), c.end(), [&](int x) {
        return p.group(x) == grp || p.group(x) == pg;
      });
      if (internal && p.can_merge(pg, grp)) {
        p.merge(pg, grp);
        changed = true;
        break;
      }
    }
  }
  return changed;
}

// States, after the other rules: a light group that reads a light producer's value element for
// element at its shape joins it while later groups read that value too, the value leaving as a
// side output (a recurrent cell's new state, which its step's output reads and so does the next
// step), if the cost function keeps the merge. Partition::protect holds every later merge to
// that reading, so that the group's tiles compute all of the state.
bool state_pass(const Graph& g, Partition& p, const FusionOptions& opt) {
  bool changed = false;
  for (int grp : p.live_groups()) {
    if (p.members(grp).empty() || !light_group(p, grp)) continue;
    for (int v : external_reads(g, p, grp)) {
      const int pg = p.group(p.producer(v));
      if (!light_group(p, pg) || repeated_in(g, p, v, grp)) continue;
      const bool fresh = p.protect(v);
      if (try_merge(p, pg, grp, opt)) {
        changed = true;
        break;
      }
      if (fresh) p.unprotect(v);
    }
  }
  return changed;
}

// A light group joins the group that produces a value only it reads (bias, activation, residual,
// scale, transposes after a contraction or reduction), preferring a producer with an anchor.
bool epilogue_pass(const Graph& g, Partition& p) {
  bool changed = false;
  for (int grp : p.live_groups()) {
    if (p.members(grp).empty() || !light_group(p, grp)) continue;
    int best = -1, best_rank = -1;
    for (int v : external_reads(g, p, grp)) {
      if (!used_only_by(p, v, grp) || repeated_in(g, p, v, grp)) continue;
      const int pg = p.group(p.producer(v));
      const int rank = p.count(pg, Role::kContraction) * 2 + p.count(pg, Role::kReduction);
      if (rank > best_rank) {
        best = pg;
        best_rank = rank;
      }
    }
    if (best >= 0 && p.can_merge(best, grp)) {
      p.merge(best, grp);
      changed = true;
    }
  }
  return changed;
}

// A light group whose results are all read by one other group joins it (element-wise chains into
// reductions and contractions, transposes into index maps).
bool prologue_pass(const Graph& g, Partition& p, const FusionOptions& opt) {
  bool changed = false;
  const std::vector<int> groups = p.live_groups();
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
    const int grp = *it;
    if (p.members(grp).empty() || !light_group(p, grp)) continue;
    int target = -1;
    bool ok = true;
    for (int m : p.members(grp)) {
      for (int v : g.nodes()[static_cast<size_t>(m)].outputs) {
        if (p.is_graph_output(v)) ok = false;
        for (int c : p.consumers(v)) {
          const int cg = p.group(c);
          if (cg == grp) continue;
          if (target >= 0 && cg != target) ok = false;
          target = cg;
        }
      }
    }
    if (ok && target >= 0 && try_merge(p, grp, target, opt)) changed = true;
  }
  return changed;
}

// The innermost reduced extent of a reduction node whose reduced axes are the trailing ones,
// or 0 if it reduces any other axis.
int64_t trailing_row(const Graph& g, const Node& n) {
  const TensorExpr e = describe(g, n);
  if (e.reduce_extents.empty() || find_op(n.op)->kind == OpKind::kPooling) return 0;
  const Shape& in = g.value(n.inputs[0]).shape;
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes;
  if (n.attrs.has("axes")) {
    axes = n.attrs.ints("axes");
  } else {
    const int64_t axis = normalize_axis(n.attrs.i("axis", -1), r, "axis");
    for (int64_t a = axis; a < (n.op == "LayerNormalization" ? r : axis + 1); ++a) axes.push_back(a);
  }
  std::sort(axes.begin(), axes.end());
  int64_t row = 1;
  for (size_t k = 0; k < axes.size(); ++k) {
    if (axes[axes.size() - 1 - k] != r - 1 - static_cast<int64_t>(k)) return 0;
    row *= in[static_cast<size_t>(axes[axes.size() - 1 - k])];
  }
  return row;
}

// The MatMul that reads softmax node n's probabilities (through Casts, each the sole reader) as
// its left operand: attention's P @ V; -1 if none.
int attention_output(const Graph& g, const Partition& p, int n) {
  int v = g.nodes()[static_cast<size_t>(n)].outputs[0];
  for (;;) {
    if (p.is_graph_output(v) || p.consumers(v).size() != 1) return -1;
    const int c = p.consumers(v)[0];
    const Node& node = g.nodes()[static_cast<size_t>(c)];
    if (node.op == "MatMul" && node.inputs[0] == v && node.inputs[1] != v) return c;
    if (node.op != "Cast") return -1;
    v = node.outputs[0];
  }
}

// Attention: the scores' group, the softmax's and the P @ V group merged at once (flash attention,
// planner/attention.h, tiles the whole at any length; the scores and the softmax alone would hold
// whole rows, which past max_row keys do not fit and below it may cost more than apart), if that
// keeps the group graph acyclic and, with a cost function, does not lose against the three parts.
// Returns whether it merged.
bool stitch_attention(const Graph& g, Partition& p, int scores_group, int softmax, const FusionOptions& opt) {
  const int pv = attention_output(g, p, softmax);
  if (pv < 0 || !p.can_merge(scores_group, p.group(softmax))) return false;
  Partition trial = p;
  trial.merge(scores_group, trial.group(softmax));
  if (trial.group(pv) == trial.group(softmax) || !trial.can_merge(trial.group(softmax), trial.group(pv))) return false;
  if (trial.count(trial.group(softmax), Role::kContraction) + trial.count(trial.group(pv), Role::kContraction) > 2) return false;
  std::vector<int> all = trial.members(trial.group(softmax));
  all.insert(all.end(), trial.members(trial.group(pv)).begin(), trial.members(trial.group(pv)).end());
  std::sort(all.begin(), all.end());
  FusionGroup merged;  // only flash attention tiles the whole: it must be an attention core
  merged.nodes = all;
  describe_group(g, merged);
  if (!match_attention(g, merged)) return false;
  if (opt.cost) {
    const double parts = opt.cost(p.members(scores_group)) + opt.cost(p.members(p.group(softmax))) + opt.cost(p.members(p.group(pv)));
    if (opt.cost(all) > parts) return false;
  }
  p.merge(scores_group, p.group(softmax));
  p.merge(p.group(softmax), p.group(pv));
  return true;
}

// Back-to-back products, with a cost function: MatMul n's group, a product and light members,
// joins the group of one other product (no reduction in either) whose rows reach n's left operand
// through light members of n's group alone (a GRU step without linear_before_reset: the reset
// gate, sigmoid(x + h R), times h, is the left operand of the candidate's product), when that
// operand's rows are at most max_row long: a block then computes the first product's rows whole
// before the second (where the operand reads part of the first product's columns, through a Slice
// or Gather, only if no other group nor the graph's outputs read the first group's values). The
// candidate groups are tried in the order their values are met, walking back from the operand; the
// first merge the cost function keeps ends the search.
void stitch_products(const Graph& g, Partition& p, int n, const FusionOptions& opt) {
  const Node& node = g.nodes()[static_cast<size_t>(n)];
  const int me = p.group(n);
  const Shape& a = g.value(node.inputs[0]).shape;
  if (!opt.cost || a.empty() || a.back() > opt.max_row || p.count(me, Role::kContraction) != 1 || p.count(me, Role::kReduction) != 0) return;
  // Values with whether the walk to them crossed a Slice or Gather (the operand reads part of them).
  std::vector<std::pair<int, bool>> stack = {{node.inputs[0], false}};
  std::set<std::pair<int, bool>> seen;
  while (!stack.empty()) {
    const auto [v, part] = stack.back();
    stack.pop_back();
    if (v == kNoValue || !seen.insert({v, part}).second || p.producer(v) < 0) continue;
    const int pn = p.producer(v);
    const Node& producer = g.nodes()[static_cast<size_t>(pn)];
    if (p.group(pn) == me) {
      if (!is_light(producer)) continue;
      const bool partial = part || producer.op == "Slice" || producer.op == "Gather";
      for (int in : producer.inputs) stack.push_back({in, partial});
      continue;
    }
    const int pg = p.group(pn);
    if (p.count(pg, Role::kContraction) != 1 || p.count(pg, Role::kReduction) != 0) continue;
    // A block computes the first product's rows over the columns the operand reads: where that is
    // part of them (a packed product's slice: importer/pack_sibling_products.h), no other group
    // (nor the graph's outputs) may read the first group's values, which would leave partly
    // unwritten.
    const auto outside = [&](int m) {
      const int o = g.nodes()[static_cast<size_t>(m)].outputs[0];
      const auto& c = p.consumers(o);
      return p.is_graph_output(o) || std::any_of(c.begin(), c.end(), [&](int x) { return p.group(x) != pg && p.group(x) != me; });
    };
    if (part && std::any_of(p.members(pg).begin(), p.members(pg).end(), outside)) continue;
    if (try_merge(p, pg, me, opt)) return;
  }
}

// Row epilogues, with a cost function: a light group whose results have the shape of the rows a
// row reduction of another group reduces (its result broadcast back over them: a selection
// round of NonMaxSuppression marks off what the round's ArgMax picked) joins that group when the
// rows are at most max_row long, although the reduction's result has readers elsewhere too (it
// leaves the group as a side output), if the cost function keeps the merge.
bool row_epilogue_pass(const Graph& g, Partition& p, const FusionOptions& opt) {
  if (!opt.cost) return false;
  bool changed = false;
  for (int grp : p.live_groups()) {
    if (p.members(grp).empty() || !light_group(p, grp)) continue;
    std::vector<Shape> results;
    for (int n : p.members(grp)) {
      for (int v : g.nodes()[static_cast<size_t>(n)].outputs) {
        const auto& c = p.consumers(v);
        if (p.is_graph_output(v) || std::any_of(c.begin(), c.end(), [&](int x) { return p.group(x) != grp; })) {
          results.push_back(g.value(v).shape);
        }
      }
    }
    for (int v : external_reads(g, p, grp)) {
      const Node& r = g.nodes()[static_cast<size_t>(p.producer(v))];
      const int64_t row = role_of(r) == Role::kReduction ? trailing_row(g, r) : 0;
      if (row == 0 || row > opt.max_row) continue;
      const Shape& rows = g.value(r.inputs[0]).shape;
      if (results.empty() || std::any_of(results.begin(), results.end(), [&](const Shape& s) { return s != rows; })) continue;
      if (try_merge(p, p.group(p.producer(v)), grp, opt)) {
        changed = true;
        break;
      }
    }
  }
  return changed;
}

// Row chains, with a cost function: a group of row reductions reading the rows another group's
// row reductions produced (at most max_row long, the same shape: the next NonMaxSuppression
// round reading what the last one left alive) joins it, up to kMaxChainedReductions reductions a
// group, if the cost function keeps the merge: a block then runs the rounds one after the other.
constexpr int kMaxChainedReductions = 8;
bool row_chain_pass(const Graph& g, Partition& p, const FusionOptions& opt) {
  if (!opt.cost) return false;
  bool changed = false;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    if (role_of(node) != Role::kReduction) continue;
    const int me = p.group(static_cast<int>(n));
    const int64_t row = trailing_row(g, node);
    if (row == 0 || row > opt.max_row || p.count(me, Role::kContraction) != 0) continue;
    for (int in : external_reads(g, p, me)) {
      const int pg = p.group(p.producer(in));
      if (g.value(in).shape != g.value(node.inputs[0]).shape || p.count(pg, Role::kReduction) == 0 ||
          p.count(pg, Role::kContraction) != 0 || p.count(pg, Role::kReduction) + p.count(me, Role::kReduction) > kMaxChainedReductions) {
        continue;
      }
      if (try_merge(p, pg, me, opt)) {
        changed = true;
        break;
      }
    }
  }
  return changed;
}

void stitch_pass(const Graph& g, Partition& p, const FusionOptions& opt) {
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    const Role role = role_of(node);
    if (role == Role::kLight) continue;
    const int me = p.group(static_cast<int>(n));
    const int in0 = node.inputs[0];
    if (in0 == kNoValue || p.producer(in0) < 0) continue;
    const int pg = p.group(p.producer(in0));
    if (pg == me) continue;
    const int contractions = p.count(pg, Role::kContraction) + p.count(me, Role::kContraction);
    if (role == Role::kReduction) {
      // A row reduction (softmax, layer norm) after a group that produces its rows.
      const int64_t row = trailing_row(g, node);
      if (node.op == "Softmax" && row > 0 && contractions <= 1) {
        if (stitch_attention(g, p, pg, static_cast<int>(n), opt) || row > opt.max_row) continue;
      }
      if (row == 0 || row > opt.max_row || contractions > 2) continue;
      if (p.count(pg, Role::kReduction) + p.count(me, Role::kReduction) > 3) continue;
    } else {
      // A contraction whose left operand is a row-normalized result (attention's P @ V).
      if (node.op != "MatMul" || p.count(pg, Role::kReduction) == 0 || contractions > 2) continue;
      // Without a cost function, rows a block keeps on chip (max_row); with one, any length: the
      // merge stands where a candidate holds the rows and costs no more than the parts (a decode
      // step's RMSNorm over 2,048 features before its projection: one row).
      const Shape& a = g.value(in0).shape;
      if (a.empty() || (!opt.cost && a.back() > opt.max_row)) continue;
    }
    try_merge(p, pg, me, opt);
  }
}

}  // namespace

void describe_group(const Graph& g, FusionGroup& group) {
  std::set<int> in_group(group.nodes.begin(), group.nodes.end());
  std::set<int> produced;
  for (int n : group.nodes) {
    for (int o : g.nodes()[static_cast<size_t>(n)].outputs) produced.insert(o);
  }
  group.inputs.clear();
  group.outputs.clear();
  std::set<int> outside_uses;
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    if (in_group.count(static_cast<int>(k))) continue;
    for (int in : reads(g.nodes()[k])) {
      if (produced.count(in)) outside_uses.insert(in);
    }
  }
  group.guards = group.nodes.empty() ? std::vector<Guard>{} : g.nodes()[static_cast<size_t>(group.nodes[0])].guards;
  for (int o : g.outputs()) {
    if (produced.count(o)) outside_uses.insert(o);
  }
  std::string anchors, light;
  for (int n : group.nodes) {
    const Node& node = g.nodes()[static_cast<size_t>(n)];
    for (int in : node.inputs) {
      if (in != kNoValue && !produced.count(in) &&
          std::find(group.inputs.begin(), group.inputs.end(), in) == group.inputs.end()) {
        group.inputs.push_back(in);
      }
    }
    for (int o : node.outputs) {
      if (outside_uses.count(o)) group.outputs.push_back(o);
    }
    if (role_of(node) != Role::kLight) anchors += (anchors.empty() ? "" : "+") + node.op;
  }
  if (anchors.empty()) {
    std::map<std::string, int> ops;
    for (int n : group.nodes) ++ops[g.nodes()[static_cast<size_t>(n)].op];
    for (const auto& [op, c] : ops) light += (light.empty() ? "" : ",") + op;
    group.pattern = "light(" + light + ")";
  } else {
    group.pattern = anchors;
    const size_t extra = group.nodes.size() - static_cast<size_t>(std::count(anchors.begin(), anchors.end(), '+') + 1);
    if (extra > 0) group.pattern += " (+" + std::to_string(extra) + " fused)";
  }
}

FusionGroup whole_graph_group(const Graph& g) {
  FusionGroup all;
  all.nodes.resize(g.nodes().size());
  std::iota(all.nodes.begin(), all.nodes.end(), 0);
  describe_group(g, all);
  return all;
}

std::vector<int> group_reads(const FusionGroup& group) {
  std::vector<int> out = group.inputs;
  for (const Guard& gd : group.guards) out.push_back(gd.cond);
  return out;
}

int FusionPlan::launches() const {
  std::set<int> ids;
  for (const FusionGroup& gr : groups) ids.insert(gr.launch);
  return static_cast<int>(ids.size());
}

namespace {

// Orders groups topologically (by their first node, then dependencies) and numbers launches.
FusionPlan finish(const Graph& g, const Partition& p) {
  FusionPlan plan;
  std::vector<int> live = p.live_groups();
  std::map<int, size_t> index;
  for (int grp : live) {
    FusionGroup fg;
    fg.nodes = p.members(grp);
    describe_group(g, fg);
    index[grp] = plan.groups.size();
    plan.groups.push_back(std::move(fg));
  }
  // Kahn over group dependencies; ties by first node id keep the order deterministic.
  const size_t ng = plan.groups.size();
  std::vector<std::set<size_t>> deps(ng);
  const std::vector<int> prod = g.producers();
  for (size_t k = 0; k < ng; ++k) {
    for (int in : group_reads(plan.groups[k])) {
      if (prod[static_cast<size_t>(in)] >= 0) deps[k].insert(index.at(p.group(prod[static_cast<size_t>(in)])));
    }
  }
  std::vector<size_t> order;
  std::vector<bool> done(ng, false);
  while (order.size() < ng) {
    size_t pick = ng;
    for (size_t k = 0; k < ng; ++k) {
      if (done[k]) continue;
      bool ready = std::all_of(deps[k].begin(), deps[k].end(), [&](size_t d) { return done[d]; });
      if (ready && (pick == ng || plan.groups[k].nodes.front() < plan.groups[pick].nodes.front())) pick = k;
    }
    check(pick < ng, "fusion produced a cycle between groups");
    done[pick] = true;
    order.push_back(pick);
  }
  FusionPlan sorted;
  for (size_t k : order) sorted.groups.push_back(plan.groups[k]);
  for (size_t k = 0; k < sorted.groups.size(); ++k) sorted.groups[k].launch = static_cast<int>(k);
  return sorted;
}

}  // namespace

// Packs independent groups into shared launches: siblings that read the same non-constant input
// (projections of one value; the consumers of one product's column slices:
// importer/pack_sibling_products.h), and small groups that are ready at the same point.
void pack_launches(const Graph& g, FusionPlan& plan, const FusionOptions& opt, const std::vector<PackTerms>& terms) {
  for (size_t k = 0; k < plan.groups.size(); ++k) plan.groups[k].launch = static_cast<int>(k);
  if (!opt.pack) return;
  const std::vector<int> prod = g.producers();
  std::map<int, size_t> group_of_value;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    for (int n : plan.groups[k].nodes) {
      for (int o : g.nodes()[static_cast<size_t>(n)].outputs) group_of_value[o] = k;
    }
  }
  // depth: a group can share a launch with another of the same depth (no path between them).
  std::vector<int> depth(plan.groups.size(), 0);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    for (int in : group_reads(plan.groups[k])) {
      if (auto it = group_of_value.find(in); it != group_of_value.end()) depth[k] = std::max(depth[k], depth[it->second] + 1);
    }
  }
  auto first_nonconst_input = [&](const FusionGroup& fg) {
    for (int in : fg.inputs) {
      if (!g.value(in).is_constant()) return in;
    }
    return kNoValue;
  };
  auto is_small = [&](const FusionGroup& fg) {
    int64_t elems = 0;
    for (int o : fg.outputs) elems += numel(g.value(o).shape);
    return elems <= opt.small_group_elements;
  };
  const auto term = [&](size_t k) { return k < terms.size() ? terms[k] : PackTerms{}; };
  // Per launch: whether a member runs only at its own thread count, and its members' counts.
  std::map<int, bool> own_threads;
  std::map<int, std::set<int>> threads_of;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    own_threads[static_cast<int>(k)] = term(k).own_threads;
    threads_of[static_cast<int>(k)] = {term(k).threads};
  }
  for (size_t a = 0; a < plan.groups.size(); ++a) {
    for (size_t b = a + 1; b < plan.groups.size(); ++b) {
      if (depth[a] != depth[b] || plan.groups[b].launch != static_cast<int>(b)) continue;
      if (term(a).solo || term(b).solo) continue;
      if (plan.groups[a].guards != plan.groups[b].guards) continue;  // a launch runs under one set of guards
      const int l = plan.groups[a].launch;
      std::set<int> threads = threads_of[l];
      threads.insert(term(b).threads);
      if ((own_threads[l] || term(b).own_threads) && threads.size() > 1) continue;
      const bool siblings = first_nonconst_input(plan.groups[a]) != kNoValue &&
                            first_nonconst_input(plan.groups[a]) == first_nonconst_input(plan.groups[b]);
      const bool small = is_small(plan.groups[a]) && is_small(plan.groups[b]);
      if (!siblings && !small) continue;
      plan.groups[b].launch = l;
      own_threads[l] = own_threads[l] || term(b).own_threads;
      threads_of[l] = threads;
    }
  }
  // Renumber launches densely by depth, then first appearance: a launch runs where its first
  // member would, which could precede a producer of a later member (one of lower depth placed
  // after it); in order of depth every producer's launch runs first. Among the launches whose
  // producers have run, one under the guards of the launch before it goes first, else one sharing
  // most of its outer guards, so that a branch of an If decided at run time runs as few stretches
  // of launches as its nesting allows (the runtime cuts the sequence where the guards change);
  // without guards this is the order of depth itself.
  std::map<int, int> depth_of_launch;
  std::map<int, std::vector<Guard>> guards_of_launch;
  std::map<int, std::set<int>> needs;  // launch -> the launches producing what it reads
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const int l = plan.groups[k].launch;
    depth_of_launch.emplace(l, depth[k]);
    guards_of_launch.emplace(l, plan.groups[k].guards);
    for (int in : group_reads(plan.groups[k])) {
      if (auto it = group_of_value.find(in); it != group_of_value.end() && plan.groups[it->second].launch != l) {
        needs[l].insert(plan.groups[it->second].launch);
      }
    }
  }
  std::set<std::pair<int, int>> waiting;  // (depth, first appearance)
  for (const auto& [l, d] : depth_of_launch) waiting.emplace(d, l);
  std::map<int, int> renumber;
  const std::vector<Guard>* last = nullptr;
  // How many guards, from the outermost, two launches share.
  const auto shared = [](const std::vector<Guard>& a, const std::vector<Guard>& b) {
    return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())), b.begin()).first - a.begin());
  };
  while (!waiting.empty()) {
    auto pick = waiting.end();
    size_t best = 0;
    for (auto it = waiting.begin(); it != waiting.end(); ++it) {
      const bool ready = std::all_of(needs[it->second].begin(), needs[it->second].end(), [&](int l) { return renumber.count(l) != 0; });
      if (!ready) continue;
      const std::vector<Guard>& guards = guards_of_launch[it->second];
      if (last == nullptr || guards == *last) {
        pick = it;
        break;
      }
      const size_t score = shared(guards, *last);  // inside the branch of the launch before, deeper or not
      if (pick == waiting.end() || score > best) {
        pick = it;
        best = score;
      }
    }
    check(pick != waiting.end(), "packing produced a cycle between launches");
    renumber.emplace(pick->second, static_cast<int>(renumber.size()));
    last = &guards_of_launch[pick->second];
    waiting.erase(pick);
  }
  for (FusionGroup& fg : plan.groups) fg.launch = renumber[fg.launch];
}

FusionPlan fuse(const Graph& g, const FusionOptions& options) {
  Partition p(g);
  if (options.epilogue || options.prologue) {
    while (cluster_light(g, p)) {
    }
  }
  if (options.epilogue) {
    while (epilogue_pass(g, p)) {
    }
  }
  if (options.prologue) {
    while (prologue_pass(g, p, options)) {
    }
  }
  if (options.stitch) {
    stitch_pass(g, p, options);
    if (options.prologue) {
      while (prologue_pass(g, p, options)) {  // light groups into a stitched group they alone feed
      }
    }
    if (options.epilogue) {
      while (epilogue_pass(g, p)) {  // ops after a stitched reduction
      }
      while (row_epilogue_pass(g, p, options) || row_chain_pass(g, p, options)) {
      }
    }
    // Back-to-back products, after the other stitches (attention and normalizations first).
    for (size_t n = 0; n < g.nodes().size(); ++n) {
      if (g.nodes()[n].op == "MatMul") stitch_products(g, p, static_cast<int>(n), options);
    }
    if (options.epilogue) {
      while (epilogue_pass(g, p)) {
      }
    }
  }
  if (options.epilogue) {
    bool merged = false;
    while (state_pass(g, p, options)) merged = true;
    while (merged && epilogue_pass(g, p)) {  // a merged state's group after its producer's anchor
    }
  }
  FusionPlan plan = finish(g, p);
  pack_launches(g, plan, options);
  return plan;
}

FusionPlan unfused(const Graph& g) {
  FusionOptions none;
  none.epilogue = none.prologue = none.stitch = none.pack = false;
  return fuse(g, none);
}

}  // namespace fusetune::planner
