#include "search/cost_model.h"

namespace fusetune::search {

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

std::vector<double> AnalyticModel::score(const std::vector<planner::Candidate>& candidates) const {
  std::vector<double> out;
  out.reserve(candidates.size());
  for (const planner::Candidate& c : candidates) out.push_back(c.cost.modeled_us);
  return out;
}

}  // namespace fusetune::search
