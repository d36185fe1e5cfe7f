// The search strategy that ships: which configurations of a group a search round measures next.
// The coordinator's search rounds (coordinator/job_search.h) call it, and bench/search_eval replays
// it against groups whose whole space was measured, so the regret table in docs/tuning.md measures
// the code that ships rather than a copy of it.
//
// next_round takes a group's search space (the planner's valid candidates, best modeled first),
// what was measured of it (successful medians by configuration), every configuration tried in any
// status, how many trials the round may take, and the learned model (search/learned_model.h; null
// or untrained: the cost model's order ranks). Its parents are the kParents fastest measured
// configurations (ties by their text); its trials are search::next_trials of them (mutation.h).
// measured_group gives the learned model's data for a group: each non-library candidate of the
// space with a measurement. Guarantees: deterministic for the same inputs; nothing tried is
// returned; with nothing measured, the space's best ranked untried configurations.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "planner/tiling.h"
#include "search/learned_model.h"

namespace fusetune::search {

inline constexpr size_t kParents = 3;

// The kParents fastest of `measured_us`, fastest first.
std::vector<std::string> parents(const std::map<std::string, double>& measured_us);

std::vector<planner::TileConfig> next_round(const std::vector<planner::Candidate>& space,
                                            const std::map<std::string, double>& measured_us,
                                            const std::set<std::string>& tried, size_t trials, const LearnedModel* model);

MeasuredGroup measured_group(const std::vector<planner::Candidate>& space, const std::map<std::string, double>& measured_us);

}  // namespace fusetune::search
