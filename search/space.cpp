#include "search/space.h"

#include "core/error.h"

namespace fusetune::search {

std::vector<std::string> ListedSpace::groups() const {
  std::vector<std::string> out;
  for (const auto& [signature, candidates] : groups_) out.push_back(signature);
  return out;
}

const std::vector<planner::Candidate>& ListedSpace::candidates(const std::string& signature) const {
  const auto it = groups_.find(signature);
  check(it != groups_.end(), "search space: no group ", signature);
  return it->second;
}

}  // namespace fusetune::search
