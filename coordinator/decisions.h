// Decisions: what the search database says of a job's groups, read once and kept for the event
// loop until a result changes it.
//
// Takes the search database. For a group (signature) on a device identity, `of` applies the
// decision rule (search/decision.h) to the group's successful measurements and keeps, with the
// decision, the source digest each configuration was measured with, every configuration with any
// measurement and those whose outcome is settled, and the pairs measured interleaved. `measured`
// gathers, over a job's compared groups, the times final_plan chooses from (a settled
// configuration without a success is infinite) and the digests of the kernels they are of. Guarantees: what `of` returns stays as it
// was read until forget(signature), which the coordinator calls as each result is stored, so a
// decision never lags a result.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>

#include "coordinator/job_planner.h"
#include "search/decision.h"
#include "storage/search_db.h"

namespace fusetune::coordinator {

// What the database holds for a job's groups: times for final_plan and the source digests of the
// kernels the times are of.
struct Measured {
  planner::Measurements times;
  MeasuredDigests digests;
};

class Decisions {
 public:
  struct Decided {
    search::GroupDecision decision;
    std::map<std::string, std::string> digests;
    std::set<std::string> seen;     // every configuration with a measurement, of any status
    std::set<std::string> settled;  // those whose outcome is settled (SearchDb::measured's rule)
    std::set<std::pair<std::string, std::string>> interleaved;  // pairs measured in turn, both orders
  };

  explicit Decisions(storage::SearchDb& db) : db_(db) {}

  const Decided& of(const std::string& signature, const storage::DeviceKey& device);
  Measured measured(const JobPlanner& planner, const storage::DeviceKey& device);
  void forget(const std::string& signature);

 private:
  storage::SearchDb& db_;
  std::map<std::pair<std::string, std::string>, Decided> decided_;  // by signature and identity
};

}  // namespace fusetune::coordinator
