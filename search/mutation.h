// The search after the first round: mutations of a group's best measured configurations over the
// planner's knobs, ranked by the cost model before anything is measured.
//
// The search space of a group is the planner's list of valid candidates (planner/tiling.h: every
// configuration the cost model accepts, best modeled first, up to PlanOptions' cap), so every
// offspring is one the planner checked. A configuration's knobs are its tile extent per axis, its
// threads, its reduction step, its vector width, its tensor-core, wgmma, TMA, warp-specialization
// and GEMV flags, its split-K count, its ring's stages and its form (flash attention or an in-place
// update: never changed); a neighbor differs from
// its parent in one knob only and is the nearest such configuration in that knob, up or down
// (tiles and threads double or halve where the space has them; steps move to the next one).
// Library calls have no knobs and are never offspring.
//
// next_trials() takes the space, the parents (the best measured configurations, best first) and
// every configuration already tried, and returns at most k untried configurations: the parents'
// neighbors, best ranked first, then, when the neighborhood is exhausted, the best ranked untried
// configurations of the whole space (exploration). The rank is `scores` (one per configuration of
// the space, lower is better: the learned model's, search/learned_model.h) when given, else the
// space's order (the analytic cost model's). Deterministic.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "planner/tiling.h"

namespace fusetune::search {

// The neighbors of `parent` in `space` (valid, non-library candidates), in the space's order.
std::vector<planner::TileConfig> neighbors(const std::vector<planner::Candidate>& space, const planner::TileConfig& parent);

std::vector<planner::TileConfig> next_trials(const std::vector<planner::Candidate>& space,
                                             const std::vector<std::string>& parents, const std::set<std::string>& tried,
                                             size_t k, const std::vector<double>* scores = nullptr);

}  // namespace fusetune::search
