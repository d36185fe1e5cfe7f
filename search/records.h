// Tuning records: what a device identity measured of a group, as the search reads it: one of the
// search's extension points (search/session.h).
//
// TuningRecords::of(signature, identity) gives a group's GroupRecords: the decision rule applied
// to its successful measurements (search/decision.h), the source digest each success was measured
// with, every configuration with a measurement of any status (`seen`), those whose outcome is
// settled (a success, a deterministic failure, or storage::kMaxTransientFailures transient ones:
// SearchDb::measured's rule, so a configuration not settled is measured again), and the pairs
// measured interleaved (both orders). record() adds a measurement.
//
// Two ship: DbRecords, the SQLite search database (storage/search_db.h) of one codegen version,
// which the coordinator reads; MemoryRecords, held in memory, for search_eval's replays and the
// tests. Guarantees: both give the same GroupRecords for the same measurements; what `of` returns
// stays as it was read (the reference valid) until that group's next record() or forget(); only
// measurements of the exact identity answer.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "search/decision.h"
#include "storage/search_db.h"

namespace fusetune::search {

struct GroupRecords {
  GroupDecision decision;
  std::map<std::string, std::string> digests;  // by config, of its successes
  std::set<std::string> seen;
  std::set<std::string> settled;
  std::set<std::pair<std::string, std::string>> interleaved;
};

class TuningRecords {
 public:
  virtual ~TuningRecords() = default;
  virtual const GroupRecords& of(const std::string& signature, const storage::DeviceKey& device) = 0;
  virtual void record(const storage::Measurement& m) = 0;
};

class MemoryRecords final : public TuningRecords {
 public:
  // Keeps the measurements of one codegen version, as DbRecords reads them; others are ignored.
  explicit MemoryRecords(int codegen_version = 0) : codegen_version_(codegen_version) {}
  const GroupRecords& of(const std::string& signature, const storage::DeviceKey& device) override;
  void record(const storage::Measurement& m) override;

 private:
  using Key = std::pair<std::string, std::string>;  // signature, the identity's every field
  int codegen_version_;
  std::map<Key, std::vector<storage::Measurement>> measurements_;
  std::map<Key, GroupRecords> read_;
};

class DbRecords final : public TuningRecords {
 public:
  DbRecords(storage::SearchDb& db, int codegen_version) : db_(db), codegen_version_(codegen_version) {}
  const GroupRecords& of(const std::string& signature, const storage::DeviceKey& device) override;
  void record(const storage::Measurement& m) override;
  // The group's measurements changed underneath (the job queue stores a task's results in the
  // transaction that finishes it): read them again at the next `of`.
  void forget(const std::string& signature);

 private:
  storage::SearchDb& db_;
  int codegen_version_;
  std::map<std::pair<std::string, std::string>, GroupRecords> read_;
};

}  // namespace fusetune::search
