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

void MutationStrategy::notify(const std::string& signature, const std::map<std::string, double>& measured_us,
                              const std::set<std::string>& tried) {
  groups_[signature] = {measured_us, tried};
}

std::vector<planner::TileConfig> MutationStrategy::generate(const std::string& signature,
                                                            const std::vector<planner::Candidate>& space, size_t trials,
                                                            const CostModel& model) {
  const Known& known = groups_[signature];
  const std::vector<double> scores = model.ranks() ? model.score(space) : std::vector<double>();
  return next_trials(space, parents(known.measured_us), known.tried, trials, scores.empty() ? nullptr : &scores);
}

}  // namespace fusetune::search
