// The learned cost model: gradient-boosted trees (XGBoost's C API) that rank a group's untried
// configurations by what one device identity measured, where the analytic model (planner/tiling.h)
// describes another device or describes this one badly.
//
// features() turns a candidate of a group's search space into numbers: the traffic model's terms
// (modeled time, DRAM and L2 bytes, arithmetic, shared memory, estimated registers, blocks per SM,
// efficiency, thread blocks; sizes as log2) and the launch's shape (threads, reduction step,
// vector width, tensor cores, tile elements and axes, the GEMV and flash-attention forms). ptxas's registers and
// spills are known only for measured candidates, so they are not features: the model ranks
// configurations before they are compiled.
//
// LearnedModel::train() takes groups of measured candidates of one identity (each group one
// ranking query: its successful candidates with their measured medians) and fits a pairwise
// ranking objective (rank:pairwise: within a group, the faster of two candidates ranks higher),
// so groups of very different sizes share one model. score() gives a candidate's score, lower is
// better (predicted to be faster). Guarantees: deterministic for the same training data (one
// thread, fixed seed); trained() is false (score() throws) until at least kMinGroups groups with
// kMinSamples candidates in all were given, where the analytic model stays the prior. XGBoost's
// errors throw Error with its message.
#pragma once

#include <string>
#include <vector>

#include "planner/tiling.h"

namespace fusetune::search {

std::vector<float> features(const planner::Candidate& c);

struct MeasuredGroup {
  std::vector<planner::Candidate> candidates;
  std::vector<double> median_us;  // measured, per candidate; finite
};

class LearnedModel {
 public:
  static constexpr size_t kMinGroups = 3;
  static constexpr size_t kMinSamples = 32;

  LearnedModel();
  ~LearnedModel();
  LearnedModel(const LearnedModel&) = delete;
  LearnedModel& operator=(const LearnedModel&) = delete;

  // Trains from scratch on these groups (groups with fewer than two candidates add nothing).
  void train(const std::vector<MeasuredGroup>& groups);
  bool trained() const { return booster_ != nullptr; }
  std::vector<double> score(const std::vector<planner::Candidate>& candidates) const;
  size_t samples() const { return samples_; }

 private:
  void* booster_ = nullptr;  // BoosterHandle
  size_t samples_ = 0;
};

// Kendall's tau-b between two rankings of the same items (1: same order, -1: reversed).
double kendall_tau(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace fusetune::search
