// The measure policy: how much of a job's search spaces is measured, and until when: one of the
// search's extension points (search/session.h). How each candidate is timed (warm-up, repeats,
// the minimum time, a timeout, interleaving) is the task's wire::Policy, which the job planner
// writes from the same job options.
//
// A round measures at most `candidates` configurations per group. `trials` is the job's budget
// spread evenly over its groups (never less than one round each); 0 gives kRoundsByDefault rounds
// of `candidates` per group. No round starts `time_s` seconds after the job did (0: no limit).
// Library calls are measured besides the budget: they have no knobs to search. The leaders of a
// group within each other's noise (search/decision.h) are measured again interleaved once the
// rounds are over, once per group. Guarantees: group_budget() >= candidates >= 1 for valid options.
#pragma once

#include <cstddef>

namespace fusetune::search {

// Rounds of `candidates` trials per group a job searches by default: the cost model's best, then
// mutations of the best measured (search/mutation.h) twice; 24 trials per group at the default 8
// (full-size BERT-base: 24 per unique group, within the 30 its tuning should need).
inline constexpr int kRoundsByDefault = 3;

struct MeasurePolicy {
  int candidates = 8;
  int trials = 0;
  double time_s = 0;

  int group_budget(size_t groups) const;
  bool out_of_time(double elapsed_s) const { return time_s > 0 && elapsed_s >= time_s; }
};

}  // namespace fusetune::search
