// The learned cost model: gradient-boosted trees (XGBoost's C API) that rank a group's untried
// configurations by what one device identity measured, where the analytic model (planner/tiling.h)
// describes another device or describes this one badly.
//
// features() turns a candidate of a group's search space into numbers: the traffic model's terms
// (modeled time, DRAM and L2 bytes, arithmetic, shared memory, estimated registers, blocks per SM,
// efficiency, thread blocks; sizes as log2) and the launch's shape (threads, reduction step,
// vector width, tensor cores, tile elements and axes, the GEMV, flash-attention and in-place forms,
// wgmma, split-K, the cp.async ring's stages, and the TMA and warp-specialized forms, which the
// analytic model charges as their twins: only the flags tell them apart). ptxas's registers and
// spills are known only for measured candidates, so they are not features: the model ranks
// configurations before they are compiled.
//
// LearnedModel is a CostModel (search/cost_model.h). Its data are groups of measured candidates of
// one identity (each group one ranking query: its successful candidates with their measured
// medians), fitted with a pairwise ranking objective (rank:pairwise: within a group, the faster of
// two candidates ranks higher), so groups of very different sizes share one model. score() gives a
// candidate's score, lower is better (predicted to be faster).
//
// update() is incremental, as a search's rounds call it: the first time the data suffice it fits
// kFirstRounds trees; each later update with data that changed adds kRoundsPerUpdate trees fitted to
// what the trees so far get wrong on the whole data now (XGBoost's training continuation), so a
// round costs the same however many came before, and what earlier rounds learned is kept. After
// kMaxTrees trees it starts again from kFirstRounds on the data of that moment. train() is the
// same from nothing (a model for held-out evaluation). Guarantees: deterministic for the same
// sequence of updates (one thread, fixed seed); ranks() is false (score() throws) until at least
// kMinGroups groups with kMinSamples candidates in all were given, where the analytic model stays
// the prior; an update with the same data as the last adds nothing. XGBoost's errors throw Error
// with its message.
#pragma once

#include <string>
#include <vector>

#include "search/cost_model.h"

namespace fusetune::search {

std::vector<float> features(const planner::Candidate& c);

class LearnedModel final : public CostModel {
 public:
  static constexpr size_t kMinGroups = 3;
  static constexpr size_t kMinSamples = 32;
  static constexpr int kFirstRounds = 40;
  static constexpr int kRoundsPerUpdate = 10;
  static constexpr int kMaxTrees = 200;

  LearnedModel();
  ~LearnedModel() override;
  LearnedModel(const LearnedModel&) = delete;
  LearnedModel& operator=(const LearnedModel&) = delete;

  // Groups with fewer than two candidates add nothing.
  void update(const std::vector<MeasuredGroup>& groups) override;
  void train(const std::vector<MeasuredGroup>& groups);  // forgets the trees, then update()
  bool ranks() const override { return booster_ != nullptr; }
  std::vector<double> score(const std::vector<planner::Candidate>& candidates) const override;
  std::string describe() const override;
  size_t samples() const { return samples_; }
  int trees() const { return trees_; }

 private:
  void* booster_ = nullptr;  // BoosterHandle
  // The last update's training matrix (DMatrixHandle), freed only once the next one exists: a new
  // matrix never takes its address, which XGBoost's ranking objectives (2.x) key cached groups by.
  void* data_ = nullptr;
  size_t samples_ = 0;
  int trees_ = 0;
  std::vector<float> fitted_;  // the labels and group sizes of the last update's data, to see a change
};

// Kendall's tau-b between two rankings of the same items (1: same order, -1: reversed).
double kendall_tau(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace fusetune::search
