// SearchDb: the SQLite search database (one file) that makes sure nothing is measured twice.
//
// Keys: a workload is a group signature (core/signature.h) with its canonical form; a tuning
// record is keyed by (signature, device, codegen version, candidate config). Every measurement is
// kept, failures included, with its status; the best plan per (signature, device, codegen version)
// is maintained as measurements arrive.
//
// Guarantees: the schema is versioned and migrated forward on open (a newer file than this build
// knows is refused); the file is in WAL mode with a busy timeout, and every write is one
// transaction, so a process killed at any moment (kill -9) loses no committed record and leaves
// no corrupt file. Errors (an unreadable or foreign file, a constraint violation) throw Error
// naming the file. Not thread-safe: one SearchDb per thread; several processes may share a file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace fusetune::storage {

inline constexpr int kSchemaVersion = 1;

enum class Status { kOk, kCompileError, kRuntimeFault, kWrongResult, kTimeout, kResourceLimit };
std::string status_name(Status s);
Status status_from_name(const std::string& name);

struct DeviceKey {
  std::string name;  // "h100", or a worker's reported device name
  std::string arch;  // "sm_90", or "host"
};

struct Measurement {
  std::string signature;
  DeviceKey device;
  int codegen_version = 0;
  std::string config;         // the candidate (planner::TileConfig::str())
  std::string source_digest;  // SHA-256 of the kernel source measured
  Status status = Status::kOk;
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
  int repeats = 0;
  int registers = 0;
  int64_t shared_bytes = 0;
  int spill_bytes = 0;
  double compile_ms = 0;
  std::string worker;
  std::string detail;  // error text for failures
  int64_t measured_at = 0;  // unix seconds; filled in by record() when 0
};

struct BestPlan {
  std::string config;
  double median_us = 0;
  int64_t measurement_id = 0;
};

struct DbStats {
  int64_t workloads = 0;
  int64_t devices = 0;
  int64_t measurements = 0;
  int64_t failures = 0;
  int64_t best_plans = 0;
  int schema_version = 0;
};

class SearchDb {
 public:
  explicit SearchDb(const std::filesystem::path& path);
  ~SearchDb();
  SearchDb(const SearchDb&) = delete;
  SearchDb& operator=(const SearchDb&) = delete;

  void commit_workload(const std::string& signature, const std::string& canonical_form);
  // Stores a measurement and updates the best plan if it is a faster success; returns its id.
  int64_t record(const Measurement& m);
  // Whether this candidate was measured already (successfully or not) on this device/codegen.
  bool measured(const std::string& signature, const DeviceKey& d, int codegen_version, const std::string& config);
  std::optional<BestPlan> best(const std::string& signature, const DeviceKey& d, int codegen_version);
  // The k fastest successful measurements of a workload on a device.
  std::vector<Measurement> top_k(const std::string& signature, const DeviceKey& d, int codegen_version, int k);
  DbStats stats();
  // JSON lines: one workload or measurement per line; import merges (records already present,
  // by their key and measurement time, are skipped) and returns the number of records added.
  int64_t export_to(const std::filesystem::path& file);
  int64_t import_from(const std::filesystem::path& file);

 private:
  void exec(const std::string& sql);
  int64_t device_id(const DeviceKey& d);
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
};

}  // namespace fusetune::storage
