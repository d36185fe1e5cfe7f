#include "search/learned_model.h"

#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"

namespace fusetune::search {

namespace {

void xgb(int rc, const char* what) {
  if (rc != 0) fail("XGBoost: ", what, ": ", XGBGetLastError());
}

float log2p(double v) { return static_cast<float>(std::log2(1.0 + std::max(0.0, v))); }

// A dense matrix of the candidates' features, one row each.
DMatrixHandle matrix(const std::vector<planner::Candidate>& candidates) {
  std::vector<float> data;
  size_t columns = 0;
  for (const planner::Candidate& c : candidates) {
    const std::vector<float> f = features(c);
    columns = f.size();
    data.insert(data.end(), f.begin(), f.end());
  }
  DMatrixHandle m = nullptr;
  xgb(XGDMatrixCreateFromMat(data.data(), candidates.size(), columns, NAN, &m), "matrix");
  return m;
}

}  // namespace

std::vector<float> features(const planner::Candidate& c) {
  const planner::Cost& k = c.cost;
  const planner::TileConfig& t = c.config;
  double elements = 1;
  for (int64_t e : t.tile) elements *= static_cast<double>(std::max<int64_t>(e, 1));
  return {log2p(k.modeled_us),           log2p(static_cast<double>(k.dram_bytes)), log2p(static_cast<double>(k.l2_bytes)),
          log2p(static_cast<double>(k.flops)), log2p(static_cast<double>(k.smem_bytes)), static_cast<float>(k.registers),
          static_cast<float>(k.blocks_per_sm), static_cast<float>(k.efficiency), log2p(static_cast<double>(k.tiles)),
          static_cast<float>(t.threads),  static_cast<float>(t.reduce_step),   static_cast<float>(t.vector),
          t.mma ? 1.0f : 0.0f,            log2p(elements),                     static_cast<float>(t.tile.size()),
          t.gemv ? 1.0f : 0.0f,           t.flash ? 1.0f : 0.0f,               t.in_place ? 1.0f : 0.0f,
          t.wgmma ? 1.0f : 0.0f,          static_cast<float>(t.split_k),       static_cast<float>(t.ring_stages),
          t.tma ? 1.0f : 0.0f,            t.ws ? 1.0f : 0.0f};
}

LearnedModel::LearnedModel() = default;

LearnedModel::~LearnedModel() {
  if (booster_) XGBoosterFree(booster_);
  if (data_) XGDMatrixFree(data_);
}

void LearnedModel::train(const std::vector<MeasuredGroup>& groups) {
  if (booster_) XGBoosterFree(booster_);
  booster_ = nullptr;
  trees_ = 0;
  fitted_.clear();
  update(groups);
}

void LearnedModel::update(const std::vector<MeasuredGroup>& groups) {
  std::vector<planner::Candidate> rows;
  std::vector<float> labels;
  std::vector<unsigned> sizes;
  for (const MeasuredGroup& g : groups) {
    if (g.candidates.size() < 2) continue;
    double best = INFINITY;
    for (double us : g.median_us) best = std::min(best, us);
    for (size_t i = 0; i < g.candidates.size(); ++i) {
      rows.push_back(g.candidates[i]);
      labels.push_back(static_cast<float>(-std::log2(g.median_us[i] / best)));  // higher: faster
    }
    sizes.push_back(static_cast<unsigned>(g.candidates.size()));
  }
  samples_ = rows.size();
  if (sizes.size() < kMinGroups || rows.size() < kMinSamples) return;
  // The data as numbers (features, labels, group sizes): an update with the same data adds nothing.
  std::vector<float> data;
  for (const planner::Candidate& c : rows) {
    const std::vector<float> f = features(c);
    data.insert(data.end(), f.begin(), f.end());
  }
  data.insert(data.end(), labels.begin(), labels.end());
  for (unsigned n : sizes) data.push_back(static_cast<float>(n));
  if (booster_ && data == fitted_) return;
  if (trees_ + kRoundsPerUpdate > kMaxTrees) {
    XGBoosterFree(booster_);
    booster_ = nullptr;
    trees_ = 0;
  }
  DMatrixHandle m = matrix(rows);
  BoosterHandle b = static_cast<BoosterHandle>(booster_);
  const bool fresh = b == nullptr;
  try {
    xgb(XGDMatrixSetFloatInfo(m, "label", labels.data(), labels.size()), "labels");
    xgb(XGDMatrixSetUIntInfo(m, "group", sizes.data(), sizes.size()), "groups");
    if (fresh) {
      xgb(XGBoosterCreate(&m, 1, &b), "booster");
      for (const auto& [name, value] : std::vector<std::pair<const char*, const char*>>{
               {"objective", "rank:pairwise"}, {"max_depth", "4"}, {"eta", "0.3"}, {"nthread", "1"},
               {"seed", "1"}, {"verbosity", "0"}}) {
        xgb(XGBoosterSetParam(b, name, value), name);
      }
    }
    // Boosting goes on from the trees there are: each new tree fits what they get wrong on `m`.
    const int rounds = fresh ? kFirstRounds : kRoundsPerUpdate;
    for (int round = 0; round < rounds; ++round) xgb(XGBoosterUpdateOneIter(b, trees_ + round, m), "training");
    trees_ += rounds;
  } catch (...) {  // a booster part-way through its rounds is not kept: the model starts again
    if (b) XGBoosterFree(b);
    booster_ = nullptr;
    trees_ = 0;
    fitted_.clear();
    XGDMatrixFree(m);
    throw;
  }
  if (data_) XGDMatrixFree(data_);
  data_ = m;
  booster_ = b;
  fitted_ = std::move(data);
}

std::string LearnedModel::describe() const {
  return ranks() ? "learned model (" + std::to_string(samples_) + " measurements, " + std::to_string(trees_) + " trees)"
                 : "cost model (" + std::to_string(samples_) + " measurements: too few to learn from)";
}

std::vector<double> LearnedModel::score(const std::vector<planner::Candidate>& candidates) const {
  check(ranks(), "the learned model is not trained (", samples_, " samples)");
  if (candidates.empty()) return {};
  DMatrixHandle m = matrix(candidates);
  bst_ulong n = 0;
  const float* out = nullptr;
  const int rc = XGBoosterPredict(booster_, m, 0, 0, 0, &n, &out);
  std::vector<double> scores;
  if (rc == 0) {
    for (bst_ulong i = 0; i < n; ++i) scores.push_back(-static_cast<double>(out[i]));  // lower: predicted faster
  }
  XGDMatrixFree(m);
  xgb(rc, "prediction");
  return scores;
}

double kendall_tau(const std::vector<double>& a, const std::vector<double>& b) {
  check(a.size() == b.size(), "kendall_tau: rankings of ", a.size(), " and ", b.size(), " items");
  double concordant = 0, discordant = 0, ties_a = 0, ties_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = i + 1; j < a.size(); ++j) {
      const double x = a[i] - a[j], y = b[i] - b[j];
      if (x == 0 && y == 0) continue;
      if (x == 0) {
        ++ties_a;
      } else if (y == 0) {
        ++ties_b;
      } else if ((x > 0) == (y > 0)) {
        ++concordant;
      } else {
        ++discordant;
      }
    }
  }
  const double denom = std::sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b));
  return denom > 0 ? (concordant - discordant) / denom : 0;
}

}  // namespace fusetune::search
