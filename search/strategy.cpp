#include "search/strategy.h"

#include <algorithm>
#include <utility>

#include "search/mutation.h"

namespace fusetune::search {

std::vector<std::string> parents(const std::map<std::string, double>& measured_us) {
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [config, us] : measured_us) ranked.emplace_back(us, config);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  for (size_t k = 0; k < ranked.size() && k < kParents; ++k) out.push_back(ranked[k].second);
  return out;
}

std::vector<planner::TileConfig> next_round(const std::vector<planner::Candidate>& space,
                                            const std::map<std::string, double>& measured_us,
                                            const std::set<std::string>& tried, size_t trials, const LearnedModel* model) {
  const std::vector<double> scores = model != nullptr && model->trained() ? model->score(space) : std::vector<double>();
  return next_trials(space, parents(measured_us), tried, trials, scores.empty() ? nullptr : &scores);
}

MeasuredGroup measured_group(const std::vector<planner::Candidate>& space, const std::map<std::string, double>& measured_us) {
  MeasuredGroup m;
  for (const planner::Candidate& c : space) {
    const auto it = measured_us.find(c.config.str());
    if (it == measured_us.end() || !c.config.library.empty()) continue;
    m.candidates.push_back(c);
    m.median_us.push_back(it->second);
  }
  return m;
}

}  // namespace fusetune::search
