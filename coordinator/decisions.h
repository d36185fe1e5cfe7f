// Decisions: what the search database says of a job's groups (search::DbRecords, read once and
// kept for the event loop until a result changes it), and the times a job's plan is chosen from.
//
// Takes the search database. `of` is search::DbRecords::of for the codegen version this build
// generates: a group's decision, digests, seen and settled configurations and interleaved pairs.
// `measured` gathers, over a job's compared groups, the times final_plan chooses from (a settled
// configuration without a success is infinite) and the digests of the kernels they are of.
// Guarantees: what `of` returns stays as it was read until forget(signature), which the
// coordinator calls as each result is stored, so a decision never lags a result.
#pragma once

#include <string>

#include "coordinator/job_planner.h"
#include "search/records.h"
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
  using Decided = search::GroupRecords;

  explicit Decisions(storage::SearchDb& db);

  const Decided& of(const std::string& signature, const storage::DeviceKey& device) { return records_.of(signature, device); }
  Measured measured(const JobPlanner& planner, const storage::DeviceKey& device);
  void forget(const std::string& signature) { records_.forget(signature); }
  search::TuningRecords& records() { return records_; }

 private:
  search::DbRecords records_;
};

}  // namespace fusetune::coordinator
