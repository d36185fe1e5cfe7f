#include "search/session.h"

#include <algorithm>

namespace fusetune::search {

TuningSession::TuningSession(std::shared_ptr<const SearchSpace> space, MeasurePolicy policy,
                             std::unique_ptr<CostModel> model, std::unique_ptr<SearchStrategy> strategy)
    : space_(std::move(space)), policy_(policy), model_(std::move(model)), strategy_(std::move(strategy)) {}

TuningSession::Snapshot TuningSession::read(TuningRecords& records, const storage::DeviceKey& device,
                                            const std::map<std::string, Asked>& asked) const {
  Snapshot s;
  for (const std::string& signature : space_->groups()) {
    const GroupRecords& r = records.of(signature, device);
    Snapshot::Group& g = s.groups[signature];
    g.time_us = r.decision.time_us;
    g.tried = r.seen;
    const auto a = asked.find(signature);
    if (a != asked.end()) g.tried.insert(a->second.configs.begin(), a->second.configs.end());
    const auto& pair = r.decision.to_interleave;
    if (pair && r.interleaved.empty() && a != asked.end() && !a->second.compared &&
        a->second.configs.count(pair->first) && a->second.configs.count(pair->second)) {
      g.leaders = pair;
    }
  }
  return s;
}

TuningSession::Step TuningSession::next(const Snapshot& snapshot, double elapsed_s, bool rounds_over) {
  Step step;
  if (!rounds_over && !policy_.out_of_time(elapsed_s)) {
    const int budget = policy_.group_budget(snapshot.groups.size());
    // The model learns from every group's successes; the strategy hears what each group holds.
    std::vector<MeasuredGroup> data;
    std::map<std::string, size_t> trials;
    for (const auto& [signature, g] : snapshot.groups) {
      const std::vector<planner::Candidate>& space = space_->candidates(signature);
      data.push_back(measured_group(space, g.time_us));
      std::set<std::string> library;  // measured besides the budget
      for (const planner::Candidate& c : space) {
        if (!c.config.library.empty()) library.insert(c.config.str());
      }
      int generated = 0;
      for (const std::string& config : g.tried) generated += !library.count(config);
      if (generated >= budget) continue;
      if (g.time_us.empty() && !g.tried.empty()) continue;  // tried, and nothing works: no parent to mutate
      trials[signature] = static_cast<size_t>(std::min(policy_.candidates, budget - generated));
    }
    if (!trials.empty()) {
      model_->update(data);
      for (const auto& [signature, n] : trials) {
        const Snapshot::Group& g = snapshot.groups.at(signature);
        strategy_->notify(signature, g.time_us, g.tried);
        std::vector<planner::TileConfig> round = strategy_->generate(signature, space_->candidates(signature), n, *model_);
        if (!round.empty()) step.measure[signature] = std::move(round);
      }
      if (!step.measure.empty()) {
        step.kind = Step::Kind::kMeasure;
        step.ranked_by = model_->describe();
        return step;
      }
    }
  }
  for (const auto& [signature, g] : snapshot.groups) {
    if (g.leaders) step.interleave[signature] = *g.leaders;
  }
  step.kind = step.interleave.empty() ? Step::Kind::kDone : Step::Kind::kInterleave;
  return step;
}

}  // namespace fusetune::search
