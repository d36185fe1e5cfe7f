#include "planner/select.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <set>

#include "core/error.h"
#include "core/signature.h"
#include "planner/library_call.h"

namespace fusetune::planner {

namespace {

class Planner {
 public:
  Planner(const Graph& g, const Device& d, const PlanOptions& opt, const Measurements* m)
      : g_(g), d_(d), opt_(opt), measured_(m) {}

  GroupPlan plan_group(FusionGroup group) {
    describe_group(g_, group);
    GroupPlan gp;
    gp.signature = subgraph_signature(g_, group.nodes).digest;
    auto it = cache_.find(gp.signature);
    if (it == cache_.end()) it = cache_.emplace(gp.signature, tile_candidates(g_, group, d_, opt_.tiling)).first;
    gp.group = std::move(group);
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
  std::map<std::string, std::vector<Candidate>> cache_;
  std::set<std::string> compared_signatures_;
  std::vector<GroupPlan> compared_;

 public:
  size_t unique() const { return cache_.size(); }
};

}  // namespace

namespace {

// The group's leading nodes that a library runs whole (planner/library_call.h) as one part, the
// rest as another: a MatMul with its bias on cuBLASLt and the GELU after it generated, where the
// whole group has only generated candidates. Empty where no prefix of the group (at most four
// nodes, exporting one value) is a library call or nothing follows it.
std::vector<FusionGroup> library_split(const Graph& g, const FusionGroup& group) {
  const size_t n = group.nodes.size();
  for (size_t k = std::min<size_t>(4, n - 1); k >= 1; --k) {
    FusionGroup head;
    head.nodes.assign(group.nodes.begin(), group.nodes.begin() + static_cast<std::ptrdiff_t>(k));
    describe_group(g, head);
    if (!match_library_call(g, head)) continue;
    FusionGroup tail;
    tail.nodes.assign(group.nodes.begin() + static_cast<std::ptrdiff_t>(k), group.nodes.end());
    return {head, tail};
  }
  return {};
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
// nodes), or as its leading library call and the rest (library_split). `levels` lists
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

ModelPlan plan_model(const Graph& g, const Device& d, const PlanOptions& opt, const Measurements* measurements) {
  Planner planner(g, d, opt, measurements);
  FusionOptions fusion = opt.fusion;
  if (opt.compare_with_parts && !fusion.cost) {
    fusion.cost = [&](const std::vector<int>& nodes) {
      FusionGroup group;
      group.nodes = nodes;
      return planner.plan_group(group).modeled_us;
    };
  }
  FusionOptions local = fusion;  // the same fusion without stitching and packing: the parts
  local.stitch = false;
  local.pack = false;
  const std::vector<FusionPlan> levels = {fuse(g, fusion), fuse(g, local)};
  ModelPlan plan;
  int fresh_launch = 0;
  for (const FusionGroup& fg : levels[0].groups) {
    for (GroupPlan& gp : best_split(g, planner, fg, levels, 0, opt.compare_with_parts, plan.split_groups, fresh_launch,
                                    plan.failed_groups)) {
      plan.groups.push_back(std::move(gp));
    }
  }
  // Launches: pack the final groups (splitting may have freed siblings to share a launch). A
  // library call is a launch of its own: it cannot share a kernel with generated parts; nor can a
  // split-K kernel, whose blocks cooperate through its own scratch buffers.
  FusionPlan final_groups;
  std::vector<bool> solo;
  for (const GroupPlan& gp : plan.groups) {
    final_groups.groups.push_back(gp.group);
    const TileConfig& chosen = gp.candidates[gp.chosen].config;
    solo.push_back(!chosen.library.empty() || chosen.split_k > 1);
  }
  pack_launches(g, final_groups, fusion, solo);
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
  return plan;
}

}  // namespace fusetune::planner
