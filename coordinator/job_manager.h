// JobManager: the jobs' lifecycle, from a submission accepted to its plan chosen.
//
// Takes the search database and job queue (storage/), the pool (coordinator/offload.h), the
// decisions read of the database (coordinator/decisions.h) and the scheduler (coordinator/
// scheduler.h: which device classes have workers, and the leases a cancel takes back). A job is
// queued until a worker of its device class says hello, then bound to the identity most such
// workers share (the smallest by its text, of a tie) and started: one task per unique group
// signature the database does not answer (cache hits), ordered by measurements of near identities
// where there are some; tasks are shared by jobs with the same signature. When a job's tasks are
// settled it extends the tasks that measured fewer candidates than it asks, runs its search
// (coordinator/job_search.h), and is done with its plan chosen from the measurements, with a
// summary; or failed, with the reason. Guarantees: every state change is one transaction in the
// database, so a coordinator started on the same file resumes every unfinished job (its model
// prepared again on the pool, its search where it was); a job that cannot start, resume or be
// planned fails with one line naming it and why, and the others go on; a cancelled job's tasks no
// other job needs are taken back from their workers; nothing the pool finishes for a job cancelled
// meanwhile changes anything.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/decisions.h"
#include "coordinator/event_log.h"
#include "coordinator/job.h"
#include "coordinator/job_search.h"
#include "coordinator/offload.h"
#include "coordinator/prepared.h"
#include "coordinator/scheduler.h"

namespace fusetune::coordinator {

class JobManager {
 public:
  JobManager(storage::SearchDb& db, storage::JobQueue& queue, Offload& offload, Decisions& decisions, Scheduler& scheduler,
             const EventLog& log);

  // Stores a planned submission (its model's row, its files moved into place already by the
  // caller, then the job) and binds it when a worker can take it; returns the job's id. A job
  // whose tasks are not lowered yet has them lowered on the pool first.
  int64_t accept(storage::JobRecord rec, const std::string& onnx, std::shared_ptr<Prepared> prepared);
  // The unfinished jobs as the database has them: a bound one resumed, an unbound one waiting for
  // a worker of its class. Jobs being loaded already are left to that.
  void load_unfinished();
  // After a commit failed, memory may speak of what was rolled back: the jobs are taken from the
  // database again, as a restart takes them.
  void reload();
  // Binds and starts the waiting jobs a connected worker's class can take (a worker said hello).
  void bind_waiting();
  // A task settled (done or failed): the jobs it belongs to may be done.
  void settled(int64_t task);
  // Marks a job cancelled with `reason` (a done, failed or cancelled job stays as it is).
  void cancel(int64_t id, const std::string& reason = "cancelled by a client");

  // The running jobs, by id, with the identity each is bound to (Scheduler::Events::running_jobs).
  std::vector<std::pair<int64_t, storage::DeviceKey>> running() const;
  // A running job, or nullptr.
  const Job* live(int64_t id) const;
  // Statuses of one job, or of every job (id 0), from the database.
  std::vector<wire::JobStatus> status(int64_t id);
  size_t waiting() const { return waiting_.size(); }
  size_t loading() const { return loading_.size(); }
  uint64_t cache_hits() const { return cache_hits_; }  // groups answered without a measurement since start

 private:
  void fail_job(int64_t id, const std::string& what, const std::string& why);
  void load_model(const storage::JobRecord& rec, std::function<void(std::shared_ptr<Prepared>)> then);
  void resume(const storage::JobRecord& rec);
  void lower_later(int64_t id, std::shared_ptr<Prepared> prepared);
  void start(const storage::JobRecord& rec, std::shared_ptr<Prepared> prepared);
  wire::Task unmeasured(const wire::Task& task, const storage::DeviceKey& d);
  int seed_order(wire::Task& task, const storage::DeviceKey& d);
  bool answered(const TaskSpec& spec, const storage::DeviceKey& d);
  void maybe_finish(int64_t id);
  void finish(int64_t id, Job& job, const storage::JobProgress& p);

  storage::SearchDb& db_;
  storage::JobQueue& queue_;
  Offload& offload_;
  uint64_t epochs_ = 0;  // the last Job::epoch given
  Decisions& decisions_;
  Scheduler& scheduler_;
  const EventLog& log_;
  JobSearch search_;
  std::map<int64_t, Job> jobs_;  // running jobs, loaded
  // Queued jobs waiting for a worker of their device class, with the model prepared at submission
  // (a job resumed after a restart has none: it is prepared on the pool when a worker could take
  // it, `loading_` meanwhile).
  std::map<int64_t, std::shared_ptr<Prepared>> waiting_;
  std::set<int64_t> loading_;
  uint64_t cache_hits_ = 0;
};

}  // namespace fusetune::coordinator
