#include "planner/select.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <set>

#include "core/error.h"
#include "core/signature.h"
#include "planner/in_place.h"
#include "planner/library_call.h"
#include "planner/library_match.h"
#include "planner/verify_plan.h"

namespace fusetune::planner {

namespace {

class Planner {
 public:
  Planner(const Graph& g, const Device& d, const PlanOptions& opt, const Measurements* m)
      : g_(g), d_(d), opt_(opt), measured_(m), in_place_(g) {}

  GroupPlan plan_group(FusionGroup group) {
    describe_group(g_, group);
    GroupPlan gp;
    const bool in_place = in_place_.eligible(group);
    gp.signature = group_signature(g_, group, in_place).digest;
    auto it = cache_.find(gp.signature);
    if (it == cache_.end()) {
      std::vector<Candidate> candidates = tile_candidates(g_, group, d_, opt_.tiling);
      if (in_place) merge_candidates(candidates, in_place_candidates(g_, group, d_, opt_.tiling), opt_.tiling.top_k);
      it = cache_.emplace(gp.signature, std::move(candidates)).first;
    }
    gp.group = std::move(group);
    gp.in_place = in_place;
    gp.candidates = it->second;
    choose(gp);
    return gp;
  }

  // A group the selection weighs (whole or part): recorded once per signature.
  GroupPlan weigh(const FusionGroup& group) {
    GroupPlan gp = plan_group(group);
    if (compared_signatures_.insert(gp.signature).second) compared_.push_back(gp);
    return gp;
  }
  std::vector<GroupPlan> take_compared() { return std::move(compared_); }

 private:
  void choose(GroupPlan& gp) const {
    double best_modeled = INFINITY, best_measured = INFINITY;
    size_t modeled_pick = 0, measured_pick = 0;
    bool any_valid = false;
    for (size_t k = 0; k < gp.candidates.size(); ++k) {
      const Candidate& c = gp.candidates[k];
      if (!c.cost.valid) continue;
      any_valid = true;
      if (opt_.rejected.count({gp.signature, c.config.str()})) continue;
      if (c.cost.modeled_us < best_modeled) {
        best_modeled = c.cost.modeled_us;
        modeled_pick = k;
      }
      if (measured_ == nullptr) continue;
      auto m = measured_->find({gp.signature, c.config.str()});
      if (m == measured_->end()) continue;
      gp.measured = true;
      if (m->second < best_measured) {
        best_measured = m->second;
        measured_pick = k;
      }
    }
    gp.modeled_us = best_modeled;
    gp.chosen = gp.measured && std::isfinite(best_measured) ? measured_pick : modeled_pick;
    gp.cost_us = gp.measured ? best_measured : best_modeled;
    gp.failed = gp.measured ? !std::isfinite(best_measured)  // every measurement failed
                            : any_valid && !std::isfinite(best_modeled);  // every candidate rejected
  }

  const Graph& g_;
  const Device& d_;
  const PlanOptions& opt_;
  const Measurements* measured_;
  const InPlaceUpdates in_place_;
  std::map<std::string, std::vector<Candidate>> cache_;
  std::set<std::string> compared_signatures_;
  std::vector<GroupPlan> compared_;

 public:
  size_t unique() const { return cache_.size(); }
};

}  // namespace

namespace {

// The group as library calls (planner/library_call.h) and the generated parts between them: from
// each node on, the longest run of the group's next nodes (at most 16, in the group's order) that
// a library runs whole is one part; the nodes between such runs are generated parts. So a MatMul
// with its bias and GELU goes to cuBLASLt and the LayerNorm before it stays generated, where the
// whole group has only generated candidates. Each part reads only values of the graph and of
// earlier parts (the parts follow the group's topological order). Empty where no run of the group
// is a library call, the group is one, or a generated part would not be one tree of values ending
// in its last node (as fusion's groups are: the code generator computes a group from its root's
// tiles; Q and K sliced apart before a product of theirs taken by the library are two).
std::vector<FusionGroup> library_split(const Graph& g, const FusionGroup& group) {
  constexpr size_t kLongestCall = 16;  // the product, two Adds and an activation spelled in nodes
  const size_t n = group.nodes.size();
  std::vector<FusionGroup> parts;
  FusionGroup generated;
  bool any_call = false;
  // Whether every node of a generated part feeds its last one.
  const auto rooted = [&](const FusionGroup& p) {
    std::set<int> needed = {p.nodes.back()};
    for (size_t i = p.nodes.size(); i-- > 0;) {
      const Node& node = g.nodes()[static_cast<size_t>(p.nodes[i])];
      if (!needed.count(p.nodes[i])) return false;
      for (size_t j = 0; j < i; ++j) {
        const Node& earlier = g.nodes()[static_cast<size_t>(p.nodes[j])];
        for (int out : earlier.outputs) {
          if (std::find(node.inputs.begin(), node.inputs.end(), out) != node.inputs.end()) needed.insert(p.nodes[j]);
        }
      }
    }
    return true;
  };
  const auto run = [&](size_t from, size_t to) {
    FusionGroup p;
    p.nodes.assign(group.nodes.begin() + static_cast<std::ptrdiff_t>(from), group.nodes.begin() + static_cast<std::ptrdiff_t>(to));
    describe_group(g, p);
    return p;
  };
  for (size_t i = 0; i < n;) {
    size_t len = std::min(kLongestCall, n - i);
    for (; len >= 1; --len) {
      if (len == n) continue;  // the whole group is weighed as itself
      if (match_library_call(g, run(i, i + len))) break;
    }
    if (len == 0) {
      generated.nodes.push_back(group.nodes[i++]);
      continue;
    }
    if (!generated.nodes.empty()) {
      if (!rooted(generated)) return {};
      describe_group(g, generated);
      parts.push_back(std::move(generated));
      generated = {};
    }
    parts.push_back(run(i, i + len));
    any_call = true;
    i += len;
  }
  if (!any_call) return {};
  if (!generated.nodes.empty()) {
    if (!rooted(generated)) return {};
    describe_group(g, generated);
    parts.push_back(std::move(generated));
  }
  return parts;
}

// One way to run a group: its groups, what they cost in total measured and modeled, and whether
// every one of them was measured.
struct Alternative {
  std::vector<GroupPlan> groups;
  double measured_us = 0, modeled_us = 0;
  bool all_measured = true;
  void add(GroupPlan gp) {
    measured_us += gp.cost_us;
    modeled_us += gp.failed ? INFINITY : gp.modeled_us;
    all_measured = all_measured && gp.measured;
    groups.push_back(std::move(gp));
  }
  // Measured against measured, or modeled against modeled: never one against the other.
  bool beats(const Alternative& other) const {
    return all_measured && other.all_measured ? measured_us < other.measured_us : modeled_us < other.modeled_us;
  }
};

// The cheapest way to run `group`: whole, as its parts (each planned the same way, down to single
// nodes), or as library calls and the generated parts between them (library_split). `levels` lists
// coarser-to-finer partitions; parts of a group at level k are the groups of level k+1 whose nodes
// it contains.
std::vector<GroupPlan> best_split(const Graph& g, Planner& planner, const FusionGroup& group,
                                  const std::vector<FusionPlan>& levels, size_t level, bool compare, int& split_count,
                                  int& fresh_launch, std::vector<std::string>& failed) {
  GroupPlan whole_plan = planner.weigh(group);
  if (whole_plan.failed) failed.push_back(whole_plan.group.pattern);
  if ((!compare && !whole_plan.failed) || group.nodes.size() == 1) return {whole_plan};
  std::vector<FusionGroup> parts;
  if (level + 1 < levels.size()) {
    const std::set<int> mine(group.nodes.begin(), group.nodes.end());
    for (const FusionGroup& p : levels[level + 1].groups) {
      if (mine.count(p.nodes.front())) parts.push_back(p);
    }
  }
  if (parts.size() <= 1) {  // no coarser split at the next level: go to single nodes
    parts.clear();
    for (int n : group.nodes) {
      FusionGroup single;
      single.nodes = {n};
      parts.push_back(single);
    }
  }
  Alternative whole, split, library;
  whole.add(std::move(whole_plan));  // a whole whose measurements all failed loses to any parts that can run
  for (FusionGroup& p : parts) {
    p.launch = --fresh_launch;  // a split part runs in a launch of its own
    for (GroupPlan& gp : best_split(g, planner, p, levels, level + 1, compare, split_count, fresh_launch, failed)) {
      split.add(std::move(gp));
    }
  }
  const Alternative* best = split.beats(whole) ? &split : &whole;
  if (const std::vector<FusionGroup> lib = library_split(g, group); !lib.empty()) {
    for (FusionGroup p : lib) {
      p.launch = --fresh_launch;
      library.add(planner.weigh(p));
    }
    if (library.beats(*best)) best = &library;
  }
  if (best != &whole) ++split_count;
  return best->groups;
}

}  // namespace

bool tf32_precision(const std::string& precision) {
  check(precision == "model" || precision == "tf32", "precision '", precision.substr(0, 64),
        "' is not a policy (model: the model's types; tf32: float32 MatMuls on TF32 tensor cores)");
  return precision == "tf32";
}

struct ModelPlanner::Impl {
  Impl(const Graph& graph, const Device& device, const PlanOptions& options, const Measurements* measurements)
      : g(graph), d(device), opt(options), planner(graph, d, opt, measurements), fusion(opt.fusion) {
    if (opt.compare_with_parts && !fusion.cost) {
      fusion.cost = [this](const std::vector<int>& nodes) {
        FusionGroup group;
        group.nodes = nodes;
        return planner.plan_group(group).modeled_us;
      };
    }
  }
  const Graph& g;
  const Device d;         // copies: the planner keeps references to them
  const PlanOptions opt;
  Planner planner;
  FusionOptions fusion;  // opt.fusion, its merges judged by the planner's cost model
};

ModelPlanner::ModelPlanner(const Graph& g, const Device& d, const PlanOptions& opt, const Measurements* measurements)
    : impl_(std::make_unique<Impl>(g, d, opt, measurements)) {}
ModelPlanner::~ModelPlanner() = default;

std::vector<FusionPlan> ModelPlanner::partition() {
  FusionOptions local = impl_->fusion;  // the same fusion without stitching and packing: the parts
  local.stitch = false;
  local.pack = false;
  return {fuse(impl_->g, impl_->fusion), fuse(impl_->g, local)};
}

ModelPlan plan_model(const Graph& g, const Device& d, const PlanOptions& opt, const Measurements* measurements) {
  ModelPlanner planner(g, d, opt, measurements);
  return planner.plan(planner.partition());
}

ModelPlan ModelPlanner::plan(const std::vector<FusionPlan>& levels) {
  check(levels.size() == 2, "ModelPlanner::plan: the two fusions of partition(), not ", levels.size());
  const Graph& g = impl_->g;
  const PlanOptions& opt = impl_->opt;
  const FusionOptions& fusion = impl_->fusion;
  Planner& planner = impl_->planner;
  ModelPlan plan;
  int fresh_launch = 0;
  for (const FusionGroup& fg : levels[0].groups) {
    for (GroupPlan& gp : best_split(g, planner, fg, levels, 0, opt.compare_with_parts, plan.split_groups, fresh_launch,
                                    plan.failed_groups)) {
      plan.groups.push_back(std::move(gp));
    }
  }
  // Launches: pack the final groups (splitting may have freed siblings to share a launch). A
  // library call is a launch of its own: it cannot share a kernel with generated parts; so is the
  // warp-specialized form (its producer warpgroup and register budgets are the block's); a split-K
  // kernel, whose blocks cooperate through scratch buffers of its own, shares a launch only with
  // groups of its thread count (its warps' layout is the candidate's).
  FusionPlan final_groups;
  std::vector<PackTerms> terms;
  for (const GroupPlan& gp : plan.groups) {
    final_groups.groups.push_back(gp.group);
    const TileConfig& chosen = gp.candidates[gp.chosen].config;
    terms.push_back({!chosen.library.empty() || chosen.ws, chosen.split_k > 1, chosen.threads});
  }
  pack_launches(g, final_groups, fusion, terms);
  for (size_t k = 0; k < plan.groups.size(); ++k) plan.groups[k].group.launch = final_groups.groups[k].launch;
  std::set<int> launch_ids;
  for (const GroupPlan& gp : plan.groups) launch_ids.insert(gp.group.launch);
  plan.launches = static_cast<int>(launch_ids.size());
  plan.tf32 = opt.tiling.tf32;
  double packed_saving = 0;
  std::map<int, int> per_launch;
  for (const GroupPlan& gp : plan.groups) {
    plan.dram_bytes += gp.candidates[gp.chosen].cost.dram_bytes;
    plan.modeled_us += gp.modeled_us;
    if (per_launch[gp.group.launch]++ > 0) packed_saving += opt.tiling.launch_overhead_us;
  }
  plan.modeled_us -= packed_saving;
  plan.unique_signatures = planner.unique();
  plan.compared = planner.take_compared();
  verify_plan(g, plan);
  return plan;
}

}  // namespace fusetune::planner
