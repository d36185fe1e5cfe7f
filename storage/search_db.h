// SearchDb: the tuning records of the search database (storage/db_file.h), which make sure
// nothing is measured twice, exported and imported between labs:
//  - workloads: a group signature (core/signature.h) with its canonical form;
//  - devices: device identities (DeviceKey): the planner device and architecture, the product,
//    the driver and the toolkit that compiled the kernels;
//  - candidates: a kernel candidate, (signature, codegen version, config, source digest), unique;
//  - measurements: every measurement, failures included, with its status, keyed by (signature,
//    device identity, codegen version, config) and referencing its candidate;
//  - best plans: the fastest successful measurement per (signature, device identity, codegen
//    version), maintained as measurements arrive.
// A lookup (measured, best, top_k) answers only from the exact identity: a kernel timed under
// another driver or toolkit is another measurement. near_top_k reads the measurements of near
// identities (same planner device and architecture, any other identity), which may seed a ranking
// but never answer. The service's jobs and tasks are JobQueue's (storage/job_queue.h), in the same
// file. Errors throw Error naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "storage/db_file.h"

namespace fusetune::storage {

// kCheckFailed: the host executor's racecheck, synccheck, memcheck or initcheck found something
// (simt/executor.h); the detail names the check, the kernel, the hazard and the lines.
enum class Status { kOk, kCompileError, kRuntimeFault, kWrongResult, kTimeout, kResourceLimit, kCheckFailed };
std::string status_name(Status s);
// A timeout or a crash of the measuring child (kTimeout, kRuntimeFault) may not reproduce (a
// loaded machine, a GPU fault): such a failure is retried, up to kMaxTransientFailures of them
// per candidate and device (see measured()); the other failures are deterministic.
inline constexpr int kMaxTransientFailures = 3;
inline bool is_transient(Status s) { return s == Status::kTimeout || s == Status::kRuntimeFault; }
Status status_from_name(const std::string& name);

// A device identity. Two measurements are comparable only under the same identity (and codegen
// version): the same GPU under another driver, or kernels built by another NVRTC or host compiler,
// may run differently or wrongly. name and arch alone (the other fields empty) are a device class:
// what a job asks for, and what a schema 2 file's measurements are recorded under.
struct DeviceKey {
  DeviceKey() = default;
  DeviceKey(std::string name_, std::string arch_, std::string product_ = "", int compute_capability_ = 0,
            std::string driver_ = "", std::string toolkit_ = "")
      : name(std::move(name_)), arch(std::move(arch_)), product(std::move(product_)),
        compute_capability(compute_capability_), driver(std::move(driver_)), toolkit(std::move(toolkit_)) {}
  std::string name;  // the planner device ("h100"), or "host"
  std::string arch;  // "sm_90", or "host"
  std::string product;  // as the driver names the GPU ("NVIDIA H100 80GB HBM3"), or the host's CPU
  int compute_capability = 0;  // 90; 0 for the host
  std::string driver;   // the CUDA driver's version ("12.8"); empty for the host
  std::string toolkit;  // what compiles the kernels: "nvrtc 13.0", or the host C++ compiler and its version
  bool operator==(const DeviceKey&) const = default;
  bool same_class(const DeviceKey& o) const { return name == o.name && arch == o.arch; }
  DeviceKey device_class() const { return {name, arch}; }
  std::string str() const;  // one line, for logs and `db stats`
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
  double ci_low_us = 0;   // the median's 95% confidence interval ([min, max] for rows older than schema 3)
  double ci_high_us = 0;
  std::string interleaved_with;  // the rival's config when timed in turn with it in one child (Policy::interleave)
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

// One identity's share of the database, per codegen version.
struct IdentityStats {
  DeviceKey device;
  int codegen_version = 0;
  int64_t measurements = 0;
  int64_t best_plans = 0;
};

struct DbStats {
  int64_t workloads = 0;
  int64_t devices = 0;
  int64_t candidates = 0;
  int64_t measurements = 0;
  int64_t failures = 0;
  int64_t interleaved = 0;  // measurements of a candidate timed in turn with a rival
  int64_t best_plans = 0;
  int schema_version = 0;  // the file's
  int64_t file_bytes = 0;  // DbFile::size_bytes
  std::vector<IdentityStats> identities;  // with at least one measurement, by identity then codegen version
};

class SearchDb {
 public:
  explicit SearchDb(const std::filesystem::path& path);
  ~SearchDb();
  SearchDb(const SearchDb&) = delete;
  SearchDb& operator=(const SearchDb&) = delete;
  DbFile& file() { return file_; }

  void commit_workload(const std::string& signature, const std::string& canonical_form);
  // Stores a measurement and updates the best plan if it is a faster success; returns its id.
  int64_t record(const Measurement& m);
  // Whether this candidate's outcome is settled on this device/codegen: it has a success or a
  // deterministic failure (compile error, wrong result, a failed check, a resource limit), or
  // kMaxTransientFailures transient ones (is_transient). A candidate not settled is measured (again).
  bool measured(const std::string& signature, const DeviceKey& d, int codegen_version, const std::string& config);
  std::optional<BestPlan> best(const std::string& signature, const DeviceKey& d, int codegen_version);
  // Every config of a workload with at least one measurement (of any status) on a device identity.
  std::set<std::string> configs_measured(const std::string& signature, const DeviceKey& d, int codegen_version);
  // Every config of a workload whose outcome is settled on a device identity (measured()'s rule).
  std::set<std::string> configs_settled(const std::string& signature, const DeviceKey& d, int codegen_version);
  // The k fastest successful measurements of a workload on a device identity.
  std::vector<Measurement> top_k(const std::string& signature, const DeviceKey& d, int codegen_version, int k);
  // The k fastest successful measurements of a workload on near identities of d: the same name and
  // architecture, any other product, driver or toolkit (schema 2 rows included). For seeding a
  // ranking only, never for answering.
  std::vector<Measurement> near_top_k(const std::string& signature, const DeviceKey& d, int codegen_version, int k);
  DbStats stats();
  // JSON lines: a header (format, schema and fusetune versions), then one workload or measurement
  // per line; import merges (records already present, by their key, measurement time and worker,
  // are skipped; candidates are shared with what the file holds) and returns the number of
  // records added; a file of a newer format is refused naming both versions. Models, jobs and
  // tasks are the local service state and are neither exported nor imported. The export is valid
  // UTF-8 whatever the database holds: text that is not becomes U+FFFD in its record.
  int64_t export_to(const std::filesystem::path& file);
  int64_t import_from(const std::filesystem::path& file);

 private:
  friend class JobQueue;  // records a task's measurements in the transaction that finishes it
  int64_t device_id(const DeviceKey& d);                // created when absent
  std::optional<int64_t> find_device(const DeviceKey& d);  // never creates
  int64_t insert_measurement(const Measurement& m);  // inside a transaction
  DbFile file_;
};

}  // namespace fusetune::storage
