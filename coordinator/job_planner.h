// JobPlanner: what the coordinator knows of one tuning job's model, from import to plan export.
//
// Takes the model's .onnx as stored (any external data beside it), the job's target device and
// options. It imports the model (importer/),
// plans it with modeled costs (planner/select.h), and turns every group the selection weighs
// (each fused group and its parts, once per signature) into a measurement task: the group as a
// standalone sub-graph with its constants (what the worker's reference runs), and its top
// `candidates` valid tile candidates lowered and emitted as CUDA and host kernels, each with its
// parameter bindings (a library call is measured wherever it ranks, beyond `candidates` too).
// final_plan() re-plans with the measurements the search database holds; bundle() generates the
// plan bundle of that plan and refuses, naming the group, unless every kernel it ships is the one
// whose measurement chose it (the same configuration and source digest: no group unmeasured or
// all failed, no spill substitution, no re-threaded packed launch); summary() compares the tuned
// plan with the unfused one on the same measured device. Guarantees: the same files, device and options give
// the same tasks (deterministic), and a task's candidate configs are exactly the keys that
// final_plan() looks measurements up by. Bad files, shapes or devices throw Error naming them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <utility>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codegen/lower_group.h"
#include "compiler/compile_bundle.h"
#include "core/graph.h"
#include "fusetune_proto/service.pb.h"
#include "planner/device.h"
#include "planner/select.h"
#include "planner/tiling.h"
#include "runtime/bundle.h"

namespace fusetune::coordinator {

struct JobOptions {
  std::map<std::string, Shape> shapes;  // input shape overrides
  int candidates = 8;                   // measured per group
  uint64_t seed = 1;                    // verification inputs
  std::string plan_device = "h100";     // the GPU whose kernels a host job measures
  int warmup = 2;
  int min_repeats = 5;
  int max_repeats = 100;
  double min_time_ms = 5;
  int timeout_ms = 20000;
  // The search's budget (search::MeasurePolicy, search/measure_policy.h): trials (candidates
  // measured) for the whole job, spread evenly over its groups; 0: search::kRoundsByDefault rounds
  // of `candidates` per group. time_s: no new round after so many seconds of the job (0: no limit).
  int trials = 0;
  double time_s = 0;
  // The precision policy (planner::tf32_precision): "model", or "tf32" (float32 MatMuls may run on
  // TF32 tensor cores; their candidates are verified at TF32's tolerance).
  std::string precision = "model";
  // The vendor libraries whose calls may be candidates (planner::library_set): "all", "none", or
  // a comma list of cublasLt and cudnn.
  std::string libraries = "all";

  std::string to_json() const;
  static JobOptions from_json(const std::string& text);  // errors name the field
};

// The search space of a group: its kSearchSpace best modeled valid configurations.
inline constexpr int kSearchSpace = 512;
planner::PlanOptions search_plan_options(const JobOptions& options);

// A lowered candidate as a task carries it to workers: its configuration, kernel name, CUDA text,
// launch shape, library call and parameters bound to the sub-graph's values (no source digest).
wire::Candidate wire_candidate(const codegen::LoweredKernel& lk, const planner::TileConfig& cfg);

struct TaskSpec {
  std::string signature;
  std::string canonical_form;
  std::string pattern;
  wire::Task task;  // without task id and lease deadline
};

// (group signature, TileConfig::str()) -> the source digest of the kernel a successful
// measurement timed (storage::Measurement::source_digest).
using MeasuredDigests = std::map<std::pair<std::string, std::string>, std::string>;

struct JobSummary {
  size_t groups = 0;
  int launches = 0;
  size_t tasks = 0;
  size_t cache_hits = 0;
  int64_t candidates_measured = 0;
  double tuned_us = 0;    // sum of the chosen groups' measured times (NaN when a group is unmeasured)
  double unfused_us = 0;  // sum of every node's best measured time alone (NaN when unmeasured)
  int split_groups = 0;
  int interleaved_pairs = 0;  // groups whose two best were within noise and measured again, interleaved
  int search_rounds = 0;      // rounds of mutations after the first
  // Best so far after each round: {"round", "trials" (measurements of the job's groups), "seconds"
  // (since the job started), "tuned_us" (the plan the measurements so far choose; null while a
  // group is unmeasured)}; per group signature, [trials of the group, its best time, seconds] after
  // each.
  nlohmann::json convergence = nlohmann::json::array();
  nlohmann::json group_convergence = nlohmann::json::object();
  std::vector<std::string> failed_groups;  // every measurement failed (planner::ModelPlan::failed_groups)
  // The plan's groups that run as a library call, by library ("cublasLt", "cudnn-tf32", ...).
  std::map<std::string, int> library_groups;
  // Every weighed group (summary() given the measurements): {"signature", "pattern", "nodes",
  // "chosen" (in the plan), "config" (the chosen candidate's, for a chosen group),
  // "candidates": [[modeled µs, measured µs], ...] for each candidate
  // measured (failures left out), and for a fused group "parts_us" (its nodes' best measured times
  // added: what it ran as when split)}; modeled and measured stay apart, one field each.
  nlohmann::json group_details = nlohmann::json::array();
  std::string to_json() const;
};

class JobPlanner {
 public:
  // `device` is the measured device's planner name ("h100"), or "host".
  JobPlanner(const std::filesystem::path& onnx, const std::string& model_name, const std::string& device,
             const JobOptions& options);
  ~JobPlanner();

  const Graph& graph() const;
  const planner::Device& plan_device() const;
  const planner::ModelPlan& modeled() const;
  const JobOptions& options() const;
  const std::string& model_name() const;
  std::vector<TaskSpec> tasks() const;
  // The given configurations of a task's group lowered as the task's candidates are (those the
  // code generator cannot express left out).
  std::vector<wire::Candidate> lower(const wire::Task& task, const std::vector<planner::TileConfig>& configs) const;
  // A weighed group (modeled().compared) by signature, with its whole search space; throws when absent.
  const planner::GroupPlan& group(const std::string& signature) const;
  planner::ModelPlan final_plan(const planner::Measurements& measured) const;
  runtime::Bundle bundle(const planner::ModelPlan& plan, const MeasuredDigests& measured) const;
  // Measured costs of the single-node groups and the chosen groups of `plan`; with `measured`
  // (what chose it), each weighed group's details too.
  JobSummary summary(const planner::ModelPlan& plan, const planner::Measurements* measured = nullptr) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// The digest that names a model's files in the search database: of each file's path (relative to
// `dir`, in the order given, the .onnx first) and bytes, read from disk in pieces.
std::string model_digest(const std::filesystem::path& dir, const std::vector<std::string>& paths);

}  // namespace fusetune::coordinator
