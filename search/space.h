// The search space of a job: one of the search's extension points (search/session.h).
//
// SearchSpace names the job's groups (by signature) and gives each group's candidates: the
// planner's valid configurations (planner/tiling.h), best modeled first, library calls among them;
// every configuration a strategy proposes is one of these, so every offspring is one the planner
// checked. The coordinator's space is its JobPlanner's (coordinator/job_search.cpp); ListedSpace
// holds the candidates itself (search_eval's measured tables, the tests). Guarantees: groups() is
// sorted; candidates() of a signature not in groups() throws Error naming it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner/tiling.h"

namespace fusetune::search {

class SearchSpace {
 public:
  virtual ~SearchSpace() = default;
  virtual std::vector<std::string> groups() const = 0;
  virtual const std::vector<planner::Candidate>& candidates(const std::string& signature) const = 0;
};

class ListedSpace final : public SearchSpace {
 public:
  explicit ListedSpace(std::map<std::string, std::vector<planner::Candidate>> groups) : groups_(std::move(groups)) {}
  std::vector<std::string> groups() const override;
  const std::vector<planner::Candidate>& candidates(const std::string& signature) const override;

 private:
  std::map<std::string, std::vector<planner::Candidate>> groups_;
};

}  // namespace fusetune::search
