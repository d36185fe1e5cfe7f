// The cost models a search ranks a group's untried configurations by: one of the search's
// extension points (with SearchStrategy, MeasurePolicy and TuningRecords; search/session.h puts
// them together).
//
// A CostModel takes what one device identity measured, `update` (every group measured so far:
// each its measured non-library candidates with their medians, as measured_group gathers them),
// and scores candidates of a group's search space, `score` (one number per candidate, lower is
// predicted faster). `ranks()` says whether its scores may rank yet: a model without enough data
// leaves the space's own order (the planner's, best modeled first) in charge. `describe()` names
// it and what it learned from, for the coordinator's log.
//
// Two ship: AnalyticModel, the planner's traffic model (planner/tiling.h: its modeled time,
// needing no data, so update learns nothing), and LearnedModel (search/learned_model.h: gradient-
// boosted trees, updated incrementally as measurements arrive). Guarantees: score returns one
// finite value per candidate, in their order; deterministic for the same updates.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner/tiling.h"

namespace fusetune::search {

// A group's measured candidates: the learned model's data for one ranking query.
struct MeasuredGroup {
  std::vector<planner::Candidate> candidates;
  std::vector<double> median_us;  // measured, per candidate; finite
};

// The candidates of `space` with a successful measurement in `measured_us` (by configuration),
// library calls left out (they have no knobs to learn from).
MeasuredGroup measured_group(const std::vector<planner::Candidate>& space, const std::map<std::string, double>& measured_us);

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual void update(const std::vector<MeasuredGroup>& groups) = 0;
  virtual bool ranks() const = 0;
  virtual std::vector<double> score(const std::vector<planner::Candidate>& candidates) const = 0;
  virtual std::string describe() const = 0;
};

// The planner's modeled time: the prior every search starts from.
class AnalyticModel final : public CostModel {
 public:
  void update(const std::vector<MeasuredGroup>&) override {}
  bool ranks() const override { return true; }
  std::vector<double> score(const std::vector<planner::Candidate>& candidates) const override;
  std::string describe() const override { return "cost model"; }
};

}  // namespace fusetune::search
