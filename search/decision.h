// The decision rule: what a group's measurements say, robustly, and what to do when its two
// fastest candidates are too close to tell apart.
//
// estimate() takes measurements of one candidate on one device identity (any number of workers,
// each perhaps several times) and returns a time with its 95% confidence interval: each worker
// counts once (its median of medians, and the medians of its intervals' bounds), then the median
// over workers of each (the mean of the middle two for an even count), so one noisy or
// miscalibrated worker cannot decide alone. A measurement without an interval (bounds unset, or
// not around its median) counts as the point [median, median].
//
// decide_group() takes the successful measurements of a group's candidates, by config, and
// returns the time each candidate is compared by:
//  - its estimate over the measurements taken alone (Policy::interleave off), comparable with
//    every other candidate and group measured alone;
//  - except for the two fastest when their intervals overlap (within noise) and they were also
//    measured interleaved with each other (A B A B ... in one child, the same machine state for
//    both): their times are then their mean time alone split in the ratio of their estimates
//    interleaved with each other, so the interleaved run orders them and the level stays that of
//    the measurements alone;
// and, when the two fastest are within noise and not yet measured interleaved with each other,
// that pair: what the coordinator measures again, interleaved, before it decides.
// Guarantees: deterministic (equal times ordered by config text); measuring a pair interleaved
// never changes which two are the fastest alone, so a group is compared at most once; estimate()
// throws Error when given no measurement or a failed one.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "storage/search_db.h"

namespace fusetune::search {

struct Estimate {
  double time_us = 0;
  double ci_low_us = 0;
  double ci_high_us = 0;
  int workers = 0;
};

Estimate estimate(const std::vector<storage::Measurement>& ok);

// Whether two estimates' confidence intervals overlap.
bool within_noise(const Estimate& a, const Estimate& b);

struct GroupDecision {
  std::map<std::string, double> time_us;  // by config
  std::map<std::string, Estimate> alone;  // by config: the estimates over measurements taken alone
  // The two fastest alone (faster first) when within noise and not yet interleaved with each other.
  std::optional<std::pair<std::string, std::string>> to_interleave;
  bool paired = false;  // the two fastest were within noise, and their interleaved run ordered them
};

GroupDecision decide_group(const std::map<std::string, std::vector<storage::Measurement>>& ok_by_config);

}  // namespace fusetune::search
