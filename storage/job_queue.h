// JobQueue: the tuning service's durable state in the search database's file (storage/db_file.h),
// beside the tuning records (SearchDb), so that a restarted coordinator resumes every unfinished
// job from the file alone. Local to one coordinator's file, never exported:
//  - models: a model's files by their digest, laid out as the client had them in a directory beside
//    the database (`FILE.models/DIGEST.files/`), so that the database itself grows by rows, not by
//    weights, and the importer reads the model where it lies;
//  - jobs: one tuning request (a model on a device class, the identity it is bound to, options,
//    state, summary);
//  - tasks: one measurement task per (signature, device identity, codegen version), shared by every
//    job that needs it (job_tasks links them), with its lease and an opaque payload.
// Guarantees: every write is one transaction; finish_task stores a task's measurements (through
// SearchDb, with its candidates and best plans) and its new state together or not at all, so a
// process killed at any moment loses no committed result and keeps no partial one. gc() clears
// what no unfinished job needs (the payloads of done tasks, by far the largest rows) and never a
// measurement, a job or a model. Errors (an unknown job or task, a constraint violation) throw
// Error naming the file. Not thread-safe, like SearchDb.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "storage/search_db.h"

namespace fusetune::storage {

// A stored model: its name and its .onnx, with any external data beside it.
struct StoredModel {
  std::string name;
  std::filesystem::path onnx;
};

// A model's files as (path relative to the model's directory, bytes), the .onnx first.
using ModelFiles = std::vector<std::pair<std::string, std::string>>;

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
  // JSON text: a running job's search so far (the coordinator's, set_search_state); empty before
  // its first round.
  std::string search_state;
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

struct QueueStats {
  int64_t models = 0;
  int64_t model_bytes = 0;      // the models' files beside the database (and rows of older schemas)
  int64_t jobs = 0;
  int64_t unfinished_jobs = 0;  // queued or running
  int64_t tasks = 0;
  int64_t open_tasks = 0;       // queued or leased
  int64_t payload_bytes = 0;    // of every task's payload
};

struct GcResult {
  int64_t tasks_cleared = 0;  // done tasks whose payload was dropped
  int64_t bytes_cleared = 0;  // their payloads' size
};

class JobQueue {
 public:
  // Works on the file `records` has open (which must outlive it).
  explicit JobQueue(SearchDb& records);
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Models by digest (the caller's content digest: letters, digits, ':', '_', '-', '.'; Error for
  // anything else, which could name another file). A model is stored whole: its files go to
  // model_dir()/DIGEST.files/ before the row that names its .onnx there, and storing a digest again
  // changes nothing. put_model writes the files given; a caller that wrote them elsewhere first (the
  // coordinator: an upload of several GB, staged under staging_dir()) moves the directory into place
  // with store_model_files (safe from any thread), then puts the row. A path that would leave the
  // model's directory is an Error naming it. model() throws Error naming the files when they are
  // gone. Stored files are the owner's only, whatever the umask: the store (model_dir()), each
  // DIGEST.files/ and every directory in it 0700, every file 0600 (store_model_files sets the
  // staged directory's modes before it moves it into place, and refuses a link in it);
  // staging_dir() returns the staging directory created 0700 in the store, made 0700 too, so what
  // is written there before it is stored is not readable by others either.
  void put_model(const std::string& digest, const std::string& name, const ModelFiles& files);
  static std::filesystem::path staging_dir(const std::filesystem::path& db);
  static void store_model_files(const std::filesystem::path& db, const std::string& digest,
                                const std::filesystem::path& staged);
  void put_model_row(const std::string& digest, const std::string& name, const std::string& onnx);
  std::optional<StoredModel> model(const std::string& digest);
  std::filesystem::path model_dir() const;
  // Models stored by schema 4 or older keep their files as one blob (a serialized message of the
  // coordinator's wire format, which storage does not read): listed, read, and replaced by their
  // files laid out (the coordinator does this when it starts).
  std::vector<std::string> legacy_models();
  std::string legacy_model_bytes(const std::string& digest);
  void replace_legacy_model(const std::string& digest, const ModelFiles& files);

  // Jobs. create_job stores the record (its model must be stored; created_at is filled when 0)
  // and returns the new id. set_job_state replaces the state, error and summary, and sets
  // finished_at to now for a terminal state (0 otherwise). An unknown id throws.
  int64_t create_job(const JobRecord& job);
  void set_job_state(int64_t id, JobState state, const std::string& error = "", const std::string& summary = "");
  void set_search_state(int64_t id, const std::string& state);
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
  bool any_in_state(TaskState state);                       // whether any task is in `state`
  std::map<std::string, int64_t> task_counts();             // tasks by state name (states with none absent)
  // The job's queued task of the lowest id, if any (what a dispatcher leases next for the job).
  std::optional<int64_t> first_queued_task(int64_t job);
  // Leases a queued task to a worker (attempts + 1); a task in any other state throws.
  void lease_task(int64_t id, const std::string& worker, int64_t deadline_ms);
  // Puts a leased or failed task back in the queue (worker, deadline, error cleared); a queued or
  // done task is left as it is. An unknown id throws. With attempt_counts false the lease being
  // returned is not counted among the task's attempts (a worker handed it back unstarted).
  void requeue_task(int64_t id, bool attempt_counts = true);
  // Queues a done task again with a new payload (attempts, worker and error reset): a job asking
  // for candidates the task did not measure extends it. Returns false, changing nothing, for a
  // task that is not done. An unknown id throws.
  bool extend_task(int64_t id, const std::string& payload);
  // Puts every leased task back in the queue and returns how many (a restarted coordinator's
  // first call: no lease survives it); a lease lost with its coordinator is not counted among the
  // task's attempts.
  int requeue_leased();
  // One transaction: records every measurement as record() does (candidates, best plans) and sets
  // the task's state, kDone or kFailed with `error`. Every measurement must carry the task's
  // signature, device and codegen version. A task already done is left as it is and nothing is
  // recorded (returns false): a late duplicate result, from a worker whose lease expired, must
  // not duplicate rows. Otherwise (queued, leased or failed) returns true.
  bool finish_task(int64_t id, TaskState state, const std::string& error, const std::vector<Measurement>& results);
  // The job's tasks by state, and their measurements. An unknown job throws.
  JobProgress job_progress(int64_t job);
  // The measurements job_progress counts, by status name ("ok", "timeout", ...).
  std::map<std::string, int64_t> job_measurements_by_status(int64_t job);


  QueueStats stats();
  // Drops the payloads of done tasks that no queued or running job links (a later job that needs
  // such a task again gives it a new payload, as extend_task does). Keeps every row.
  GcResult gc();

 private:
  SearchDb& records_;
  DbFile& file_;
};

}  // namespace fusetune::storage
