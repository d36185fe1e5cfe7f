// Whole-model selection: fusion groups, their tile candidates, and the choice per group from
// modeled or measured costs.
//
// Takes a canonical graph and a device. Groups with the same signature (core/signature.h) share
// one candidate list, so a model's repeated layers are planned once. A fused group is kept only
// when its best cost does not exceed the sum of its parts' best costs (each node planned alone);
// otherwise it is split into those parts. Measurements, keyed by (group signature, candidate
// config), replace modeled costs wherever they exist, so the tuning service feeds measured times
// through the same decision. Deterministic for a given graph, device and options.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "planner/fusion.h"
#include "planner/tiling.h"

namespace fusetune::planner {

struct PlanOptions {
  FusionOptions fusion;
  TilingOptions tiling;
  bool compare_with_parts = true;
};

// (group signature, TileConfig::str()) -> measured microseconds.
using Measurements = std::map<std::pair<std::string, std::string>, double>;

struct GroupPlan {
  FusionGroup group;
  std::string signature;
  std::vector<Candidate> candidates;  // best first by modeled time
  size_t chosen = 0;                  // index into candidates
  double cost_us = 0;                 // of the chosen candidate, measured where known
  bool measured = false;
};

struct ModelPlan {
  std::vector<GroupPlan> groups;  // topological order
  int launches = 0;
  int64_t dram_bytes = 0;  // modeled, of the chosen candidates
  double modeled_us = 0;
  size_t unique_signatures = 0;
  int split_groups = 0;  // fused groups that lost to their parts
};

ModelPlan plan_model(const Graph& g, const Device& d, const PlanOptions& opt = {},
                     const Measurements* measurements = nullptr);

}  // namespace fusetune::planner
