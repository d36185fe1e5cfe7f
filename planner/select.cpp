#include "planner/select.h"

#include <cmath>
#include <set>

#include "core/signature.h"

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

 private:
  void choose(GroupPlan& gp) const {
    double best = INFINITY;
    for (size_t k = 0; k < gp.candidates.size(); ++k) {
      const Candidate& c = gp.candidates[k];
      if (!c.cost.valid) continue;
      double cost = c.cost.modeled_us;
      bool measured = false;
      if (measured_ != nullptr) {
        auto m = measured_->find({gp.signature, c.config.str()});
        if (m != measured_->end()) {
          cost = m->second;
          measured = true;
        }
      }
      if (cost < best) {
        best = cost;
        gp.chosen = k;
        gp.measured = measured;
      }
    }
    gp.cost_us = best;
  }

  const Graph& g_;
  const Device& d_;
  const PlanOptions& opt_;
  const Measurements* measured_;
  std::map<std::string, std::vector<Candidate>> cache_;

 public:
  size_t unique() const { return cache_.size(); }
};

}  // namespace

namespace {

// The cheapest way to run `group`: whole, or as its parts (each planned the same way, down to
// single nodes). `levels` lists coarser-to-finer partitions; parts of a group at level k are the
// groups of level k+1 whose nodes it contains.
std::vector<GroupPlan> best_split(Planner& planner, const FusionGroup& group, const std::vector<FusionPlan>& levels,
                                  size_t level, bool compare, int& split_count, int& fresh_launch) {
  GroupPlan whole = planner.plan_group(group);
  if (!compare || group.nodes.size() == 1) return {whole};
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
  std::vector<GroupPlan> split;
  double split_cost = 0;
  for (FusionGroup& p : parts) {
    p.launch = --fresh_launch;  // a split part runs in a launch of its own
    for (GroupPlan& gp : best_split(planner, p, levels, level + 1, compare, split_count, fresh_launch)) {
      split_cost += gp.cost_us;
      split.push_back(std::move(gp));
    }
  }
  if (split_cost < whole.cost_us) {
    ++split_count;
    return split;
  }
  return {whole};
}

}  // namespace

ModelPlan plan_model(const Graph& g, const Device& d, const PlanOptions& opt, const Measurements* measurements) {
  Planner planner(g, d, opt, measurements);
  FusionOptions fusion = opt.fusion;
  if (opt.compare_with_parts && !fusion.cost) {
    fusion.cost = [&](const std::vector<int>& nodes) {
      FusionGroup group;
      group.nodes = nodes;
      return planner.plan_group(group).cost_us;
    };
  }
  FusionOptions local = fusion;  // the same fusion without stitching and packing: the parts
  local.stitch = false;
  local.pack = false;
  const std::vector<FusionPlan> levels = {fuse(g, fusion), fuse(g, local)};
  ModelPlan plan;
  int fresh_launch = 0;
  for (const FusionGroup& fg : levels[0].groups) {
    for (GroupPlan& gp : best_split(planner, fg, levels, 0, opt.compare_with_parts, plan.split_groups, fresh_launch)) {
      plan.groups.push_back(std::move(gp));
    }
  }
  // Launches: pack the final groups (splitting may have freed siblings to share a launch).
  FusionPlan final_groups;
  for (const GroupPlan& gp : plan.groups) final_groups.groups.push_back(gp.group);
  pack_launches(g, final_groups, fusion);
  for (size_t k = 0; k < plan.groups.size(); ++k) plan.groups[k].group.launch = final_groups.groups[k].launch;
  plan.launches = final_groups.launches();
  double packed_saving = 0;
  std::map<int, int> per_launch;
  for (const GroupPlan& gp : plan.groups) {
    plan.dram_bytes += gp.candidates[gp.chosen].cost.dram_bytes;
    plan.modeled_us += gp.cost_us;
    if (per_launch[gp.group.launch]++ > 0) packed_saving += opt.tiling.launch_overhead_us;
  }
  plan.modeled_us -= packed_saving;
  plan.unique_signatures = planner.unique();
  return plan;
}

}  // namespace fusetune::planner
