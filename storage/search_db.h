// SearchDb: the SQLite search database (one file) that makes sure nothing is measured twice, and
// the tuning service's durable state, so that a restarted coordinator resumes every unfinished job.
//
// Measurement data (exported and imported between labs):
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
// but never answer.
// Service state (local to one coordinator's file, never exported):
//  - models: model files by their digest;
//  - jobs: one tuning request (a model on a device, options, state, summary);
//  - tasks: one measurement task per (signature, device, codegen version), shared by every job
//    that needs it (job_tasks links them), with its lease and an opaque payload.
//
// Guarantees: the schema is versioned (kSchemaVersion) and an older file is migrated forward on
// open, in one transaction, keeping every row (a version 1 file gains candidates, filled from its
// measurements, and the service tables; a version 2 file's measurements gain the median's
// confidence interval, [min, max], and no interleaved rival; its devices become identities whose
// product, driver and toolkit are unknown, which no new measurement matches, and its unfinished
// jobs go back to the queue without tasks, to be bound to an identity again); a file newer than
// this build knows is refused. The file
// is in WAL mode with a busy timeout, and every write is one transaction (BEGIN IMMEDIATE ...
// COMMIT, rolled back on error), so a process killed at any moment (kill -9) loses no committed
// record and leaves no partial one: finish_task stores a task's measurements and its new state
// together or not at all. Errors (an unreadable or foreign file, a newer schema, an unknown job or
// task, a constraint violation) throw Error naming the file. Not thread-safe: one SearchDb per
// thread; several processes may share a file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

struct sqlite3;

namespace fusetune::storage {

inline constexpr int kSchemaVersion = 3;

// kCheckFailed: the host executor's racecheck, synccheck, memcheck or initcheck found something
// (simt/executor.h); the detail names the check, the kernel, the hazard and the lines.
enum class Status { kOk, kCompileError, kRuntimeFault, kWrongResult, kTimeout, kResourceLimit, kCheckFailed };
std::string status_name(Status s);
// A timeout or a crash of the measuring child (kTimeout, kRuntimeFault) may not reproduce (a
// loaded machine, a GPU fault): such a failure is retried, up to kMaxTransientFailures of them
// per candidate and device (see measured()); the other failures are deterministic.
inline constexpr int kMaxTransientFailures = 3;
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
  int64_t models = 0;
  int64_t jobs = 0;
  int64_t unfinished_jobs = 0;  // queued or running
  int64_t tasks = 0;
  int64_t open_tasks = 0;  // queued or leased
  int schema_version = 0;  // the file's
  std::vector<IdentityStats> identities;  // with at least one measurement, by identity then codegen version
};

struct ModelBlob {
  std::string name;
  std::string bytes;
};

enum class JobState { kQueued, kRunning, kDone, kFailed, kCancelled };  // the last three are terminal
std::string job_state_name(JobState s);
JobState job_state_from_name(const std::string& name);

struct JobRecord {
  int64_t id = 0;
  std::string model_digest;  // a model stored with put_model
  std::string model_name;
  DeviceKey device;  // the device class the job asks for
  // The identity whose measurements decide the job: bound once, when a worker of the class is
  // there to measure (bind_job); none while the job waits for one.
  std::optional<DeviceKey> identity;
  std::string options;  // JSON text
  JobState state = JobState::kQueued;
  std::string error;
  int64_t created_at = 0, finished_at = 0;  // unix seconds
  std::string summary;  // JSON text the coordinator fills when done
};

enum class TaskState { kQueued, kLeased, kDone, kFailed };
std::string task_state_name(TaskState s);
TaskState task_state_from_name(const std::string& name);

struct TaskRecord {
  int64_t id = 0;
  std::string signature;
  DeviceKey device;
  int codegen_version = 0;
  TaskState state = TaskState::kQueued;
  int attempts = 0;  // leases so far
  std::string worker;  // the lease holder (kept when the task finishes)
  int64_t lease_deadline_ms = 0;  // while leased
  std::string payload;  // stored as a BLOB: a serialized protobuf, opaque to storage
  std::string error;
};

struct JobProgress {
  int tasks = 0, queued = 0, leased = 0, done = 0, failed = 0;
  // Measurements in the database under the keys (signature, device, codegen version) of the
  // job's tasks, whoever recorded them.
  int64_t measurements = 0;
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
  // Whether this candidate's outcome is settled on this device/codegen: it has a success or a
  // deterministic failure (compile error, wrong result, a failed check, a resource limit), or
  // kMaxTransientFailures transient ones (is_transient). A candidate not settled is measured (again).
  bool measured(const std::string& signature, const DeviceKey& d, int codegen_version, const std::string& config);
  std::optional<BestPlan> best(const std::string& signature, const DeviceKey& d, int codegen_version);
  // The k fastest successful measurements of a workload on a device identity.
  std::vector<Measurement> top_k(const std::string& signature, const DeviceKey& d, int codegen_version, int k);
  // The k fastest successful measurements of a workload on near identities of d: the same name and
  // architecture, any other product, driver or toolkit (schema 2 rows included). For seeding a
  // ranking only, never for answering.
  std::vector<Measurement> near_top_k(const std::string& signature, const DeviceKey& d, int codegen_version, int k);
  DbStats stats();
  // JSON lines: one workload or measurement per line; import merges (records already present,
  // by their key, measurement time and worker, are skipped; candidates are shared with what the
  // file holds) and returns the number of records added. Models, jobs and tasks are the local
  // service state and are neither exported nor imported.
  int64_t export_to(const std::filesystem::path& file);
  int64_t import_from(const std::filesystem::path& file);

  // Models by digest (the caller's content digest). Storing a digest again changes nothing.
  void put_model(const std::string& digest, const std::string& name, const std::string& bytes);
  std::optional<ModelBlob> model(const std::string& digest);

  // Jobs. create_job stores the record (its model must be stored; created_at is filled when 0)
  // and returns the new id. set_job_state replaces the state, error and summary, and sets
  // finished_at to now for a terminal state (0 otherwise). An unknown id throws.
  int64_t create_job(const JobRecord& job);
  void set_job_state(int64_t id, JobState state, const std::string& error = "", const std::string& summary = "");
  // Binds a job to the identity that measures it, which must be of the job's device class; a job
  // already bound keeps its identity. Returns the job's identity.
  DeviceKey bind_job(int64_t id, const DeviceKey& identity);
  std::optional<JobRecord> job(int64_t id);
  // All jobs, or the queued and running ones, ordered by id.
  std::vector<JobRecord> jobs(bool unfinished_only);

  // Tasks. Returns the task for this key, creating it queued with `payload` if absent; an existing
  // task keeps its state and payload, except that a failed one is re-queued with the new payload,
  // its attempts, worker and error reset (a new job retries what failed before).
  int64_t ensure_task(const std::string& signature, const DeviceKey& d, int codegen_version, const std::string& payload);
  void link_job_task(int64_t job, int64_t task);  // idempotent; both must exist
  std::vector<TaskRecord> job_tasks(int64_t job);  // ordered by task id
  std::optional<TaskRecord> task(int64_t id);
  std::vector<TaskRecord> tasks_in_state(TaskState state);  // ordered by id
  std::vector<int64_t> task_ids_in_state(TaskState state);  // the same without reading payloads
  // Leases a queued task to a worker (attempts + 1); a task in any other state throws.
  void lease_task(int64_t id, const std::string& worker, int64_t deadline_ms);
  // Puts a leased or failed task back in the queue (worker, deadline, error cleared); a queued or
  // done task is left as it is. An unknown id throws.
  void requeue_task(int64_t id);
  // Queues a done task again with a new payload (attempts, worker and error reset): a job asking
  // for candidates the task did not measure extends it. Returns false, changing nothing, for a
  // task that is not done. An unknown id throws.
  bool extend_task(int64_t id, const std::string& payload);
  // Puts every leased task back in the queue and returns how many (a restarted coordinator's
  // first call: no lease survives it).
  int requeue_leased();
  // One transaction: records every measurement as record() does (candidates, best plans) and sets
  // the task's state, kDone or kFailed with `error`. Every measurement must carry the task's
  // signature, device and codegen version. A task already done is left as it is and nothing is
  // recorded (returns false): a late duplicate result, from a worker whose lease expired, must
  // not duplicate rows. Otherwise (queued, leased or failed) returns true.
  bool finish_task(int64_t id, TaskState state, const std::string& error, const std::vector<Measurement>& results);
  // The job's tasks by state, and their measurements. An unknown job throws.
  JobProgress job_progress(int64_t job);

 private:
  void exec(const std::string& sql);
  // Runs fn inside BEGIN IMMEDIATE ... COMMIT, rolling back when it throws.
  template <typename Fn>
  auto write(Fn&& fn);
  void open_schema();
  int64_t device_id(const DeviceKey& d);                // created when absent
  std::optional<int64_t> find_device(const DeviceKey& d);  // never creates
  int64_t insert_measurement(const Measurement& m);  // inside a transaction
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
};

}  // namespace fusetune::storage
