// Whole-model selection: fusion groups, their tile candidates, and the choice per group from
// modeled or measured costs.
//
// Takes a canonical graph and a device. Groups with the same signature (core/signature.h) share
// one candidate list, so a model's repeated layers are planned once. A fused group is kept only
// when its best cost does not exceed the sum of its parts' best costs (each node planned alone),
// nor that of its runs of nodes a library computes whole (a MatMul with its bias and GELU, a Conv
// with its ReLU: planner/library_call.h) as library calls and the generated parts between them;
// otherwise it is split the cheapest way. Measurements, keyed by (group signature, candidate
// config), feed measured times through the same decisions, never mixed with modeled ones: a group
// with measurements chooses among its measured candidates (a failed one is measured as infinite
// and never chosen; a group whose measurements all failed falls back to its parts, and is listed
// in ModelPlan::failed_groups), and whole-vs-parts is decided on measured times when the whole and every
// part are measured, on modeled times otherwise. The fusion pass's own merge decisions use
// modeled costs, so the groups proposed do not depend on which measurements exist.
// Launches: the final groups are packed again (planner/fusion.h), a group whose chosen candidate
// is a library call never sharing its launch, and numbered so that launches run in id order.
// ModelPlan::compared lists every group the selection weighed (each fused group and its parts,
// down to single nodes, once per signature): what the tuning service measures. Deterministic
// for a given graph, device, options and measurements.
#pragma once

#include <map>
#include <memory>
#include <set>
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
  // (group signature, TileConfig::str()) of candidates a check rejected (a compile error or a
  // wrong result in a dry run: coordinator/dry_run.h): never chosen by the modeled choice; a group
  // with every candidate rejected is `failed` (a fused one falls back to its parts).
  std::set<std::pair<std::string, std::string>> rejected;
};

// (group signature, TileConfig::str()) -> measured microseconds (infinity: the candidate failed).
using Measurements = std::map<std::pair<std::string, std::string>, double>;

struct GroupPlan {
  FusionGroup group;
  std::string signature;
  std::vector<Candidate> candidates;  // best first by modeled time
  size_t chosen = 0;                  // index into candidates
  double cost_us = 0;                 // of the chosen candidate: measured when `measured`, else modeled
  double modeled_us = 0;              // the best modeled cost, whether measured or not
  bool measured = false;
  bool in_place = false;              // it may update its data in place (planner/in_place.h; its signature says so)
  // Measured, and every measurement failed: no candidate may ship. A fused group falls back to its
  // parts; a single node (nothing to fall back to) keeps its modeled best, flagged.
  bool failed = false;
};

struct ModelPlan {
  std::vector<GroupPlan> groups;  // topological order
  int launches = 0;
  int64_t dram_bytes = 0;  // modeled, of the chosen candidates
  double modeled_us = 0;
  size_t unique_signatures = 0;
  int split_groups = 0;  // fused groups that lost to their parts
  // Groups with measurements that all failed: fused ones fell back to their parts; single nodes
  // (nothing to fall back to) are in the plan, `failed` set. Patterns, in planning order.
  std::vector<std::string> failed_groups;
  std::vector<GroupPlan> compared;  // every group weighed, one per signature, in first-seen order
  bool tf32 = false;  // planned under the TF32 precision policy (TilingOptions::tf32)
};

// The precision policy a `--precision` flag or a job's "precision" option names: "model" (the
// model's types; false) or "tf32" (float32 MatMuls may run as TF32 on tensor cores; true). Throws
// Error naming the value otherwise.
bool tf32_precision(const std::string& precision);

ModelPlan plan_model(const Graph& g, const Device& d, const PlanOptions& opt = {},
                     const Measurements* measurements = nullptr);

// plan_model in the two steps the compiler's pipeline runs (compiler/pipeline.h), over one cost
// model: partition() fuses the graph (the cost model judging merges where compare_with_parts)
// into the two fusions selection weighs: [0] the fusion as configured, [1] the same without
// stitching and packing, the parts a fused group may split back into; plan() chooses the tiles of
// each group of those, splits a fused group back where its parts model or measure faster, packs
// the launches and checks the result (verify_plan). `g` and `measurements` must outlive the
// planner; it keeps copies of `d` and `opt`.
class ModelPlanner {
 public:
  ModelPlanner(const Graph& g, const Device& d, const PlanOptions& opt = {}, const Measurements* measurements = nullptr);
  ~ModelPlanner();
  ModelPlanner(const ModelPlanner&) = delete;
  ModelPlanner& operator=(const ModelPlanner&) = delete;
  std::vector<FusionPlan> partition();
  ModelPlan plan(const std::vector<FusionPlan>& levels);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusetune::planner
