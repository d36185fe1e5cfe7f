// The search strategy: which configurations of a group a search round measures next: one of the
// search's extension points (search/session.h), and the strategy that ships.
//
// A SearchStrategy is told what the records say of each group before a round (`notify`: its
// successful medians by configuration, and every configuration tried in any status or asked) and
// proposes at most `trials` untried configurations of the group's space (`generate`), ranked by
// the cost model where it ranks (search/cost_model.h), else in the space's order (the planner's).
//
// MutationStrategy ships: its parents are the kParents fastest measured configurations (ties by
// their text), its trials search::next_trials of them (search/mutation.h: the parents' one-knob
// neighbours, then the best ranked untried of the whole space). Guarantees: deterministic for the
// same notifications and model; nothing tried is proposed; a group with nothing measured gets the
// space's best ranked untried configurations; a group never notified counts as nothing tried.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "planner/tiling.h"
#include "search/cost_model.h"

namespace fusetune::search {

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  virtual void notify(const std::string& signature, const std::map<std::string, double>& measured_us,
                      const std::set<std::string>& tried) = 0;
  virtual std::vector<planner::TileConfig> generate(const std::string& signature, const std::vector<planner::Candidate>& space,
                                                    size_t trials, const CostModel& model) = 0;
};

inline constexpr size_t kParents = 3;

// The kParents fastest of `measured_us`, fastest first.
std::vector<std::string> parents(const std::map<std::string, double>& measured_us);

class MutationStrategy final : public SearchStrategy {
 public:
  void notify(const std::string& signature, const std::map<std::string, double>& measured_us,
              const std::set<std::string>& tried) override;
  std::vector<planner::TileConfig> generate(const std::string& signature, const std::vector<planner::Candidate>& space,
                                            size_t trials, const CostModel& model) override;

 private:
  struct Known {
    std::map<std::string, double> measured_us;
    std::set<std::string> tried;
  };
  std::map<std::string, Known> groups_;
};

}  // namespace fusetune::search
