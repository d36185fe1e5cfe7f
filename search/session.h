// TuningSession: one job's search, without sockets or threads of its own: from what the records
// say, the next thing to measure. The coordinator's job search (coordinator/job_search.h),
// bench/search_eval and the tests drive the same session, so what search_eval measures is the
// search that ships.
//
// Takes the job's search space (search/space.h), a MeasurePolicy (search/measure_policy.h), a
// CostModel (search/cost_model.h) and a SearchStrategy (search/strategy.h); the session keeps the
// model and the strategy across its rounds, so a learned model is updated, not retrained.
//
// read() takes the tuning records (search/records.h) of the job's identity and what the job asked
// of each group (`asked`: every configuration it sent; `compared`: whether its leaders were sent to
// be interleaved) and returns a Snapshot; next() takes a snapshot, the seconds since the job
// started and whether the job's search rounds are over, and returns the next step:
//  - kMeasure, a search round, unless the rounds are over or the time is: for every group with
//    budget left (MeasurePolicy::group_budget counts the configurations tried by any job on this
//    identity, library calls left out) and a success to start from, or nothing tried at all (its
//    opening: the best ranked untried), at most MeasurePolicy::candidates configurations from the
//    strategy, ranked by the model after it was updated with every group's successes; groups
//    without trials are left out, and a round with none is no round;
//  - else kInterleave: the groups whose two fastest alone are within noise (search/decision.h),
//    both asked by this job, whose group has no pair measured interleaved (by any job) and whose
//    leaders this job did not send yet: that pair each, once per group;
//  - else kDone.
// The caller measures what a step asks and calls again once everything asked is settled. A round
// whose configurations the caller cannot measure (the coordinator drops what its code generator
// cannot express) should end the rounds: the caller then passes rounds_over. Guarantees:
// deterministic for the same snapshots; nothing tried is asked again; read() runs on the thread
// that owns the records, next() on any one thread at a time.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "search/cost_model.h"
#include "search/measure_policy.h"
#include "search/records.h"
#include "search/space.h"
#include "search/strategy.h"

namespace fusetune::search {

struct Asked {
  std::set<std::string> configs;
  bool compared = false;
};

class TuningSession {
 public:
  struct Snapshot {
    struct Group {
      std::map<std::string, double> time_us;  // the decision's, by configuration
      std::set<std::string> tried;            // measured in any status by any job, or asked by this one
      std::optional<std::pair<std::string, std::string>> leaders;  // within noise, to be interleaved
    };
    std::map<std::string, Group> groups;  // by signature
  };
  struct Step {
    enum class Kind { kMeasure, kInterleave, kDone };
    Kind kind = Kind::kDone;
    std::map<std::string, std::vector<planner::TileConfig>> measure;        // kMeasure: by group
    std::map<std::string, std::pair<std::string, std::string>> interleave;  // kInterleave: by group
    std::string ranked_by;  // kMeasure: CostModel::describe() of the model that ranked it
  };

  TuningSession(std::shared_ptr<const SearchSpace> space, MeasurePolicy policy, std::unique_ptr<CostModel> model,
                std::unique_ptr<SearchStrategy> strategy);

  Snapshot read(TuningRecords& records, const storage::DeviceKey& device, const std::map<std::string, Asked>& asked) const;
  Step next(const Snapshot& snapshot, double elapsed_s, bool rounds_over);

  const SearchSpace& space() const { return *space_; }
  const MeasurePolicy& policy() const { return policy_; }

 private:
  std::shared_ptr<const SearchSpace> space_;
  MeasurePolicy policy_;
  std::unique_ptr<CostModel> model_;
  std::unique_ptr<SearchStrategy> strategy_;
};

}  // namespace fusetune::search
