// Scheduler: the coordinator's workers, the leases they hold and the dispatch of queued tasks to
// them.
//
// Takes the job queue (storage/job_queue.h: tasks and their leases live in the database), the
// outbox to answer peers on (the transport), the options that time workers and tasks, the events
// the job manager hears of (Events) and the clock (core/clock.h). A worker says hello with its device identity and protocol versions,
// heartbeats, sends results and says bye; dispatch leases each worker with room (Hello.
// queue_depth) the first queued task of the next running job of its identity, jobs in turn (round
// robin). Guarantees: a worker of another protocol or code generator, or without a toolkit in its
// identity, is refused with the reason; a result counts only from the peer holding the task's
// current lease, only for candidates the task asked, each once, with the source digest it was sent
// with (else it is refused, counted by reason, and changes nothing), and a late duplicate of the
// holder's own is ignored; a lease ends with the result, or goes back to the queue when its
// deadline passes, its worker falls silent (no heartbeat for worker_timeout_ms), leaves, says hello
// again or hands it back, and after max_attempts its task fails; a worker that hands everything
// back is offered tasks 0.1, 0.2, 0.4 ... up to 5 s apart. Every task that settles (a result
// stored, a failure) is told to Events::settled after the worker's next task is leased.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/event_log.h"
#include "core/clock.h"
#include "coordinator/transport.h"
#include "dashboards/metrics.h"
#include "storage/job_queue.h"

namespace fusetune::coordinator {

struct SchedulerOptions {
  std::string id = "coordinator";  // the name a Welcome gives
  int heartbeat_ms = 1000;
  int worker_timeout_ms = 5000;
  int max_attempts = 3;
};

class Scheduler {
 public:
  using TimePoint = Clock::TimePoint;
  struct Events {
    // The running jobs, by id, with the device identity only whose workers measure for each.
    std::function<std::vector<std::pair<int64_t, storage::DeviceKey>>()> running_jobs;
    std::function<void(int64_t task)> settled;              // a task is done or failed
    std::function<void(const std::string& signature)> stored;  // measurements of a signature stored
    std::function<void()> joined;                           // a worker said hello
  };
  // What /metrics counts of workers and tasks since this coordinator started, and the latencies
  // measured from a worker's slot freed (its result, its hello) to its next lease sent, and from a
  // task's lease to its result.
  struct Counters {
    std::map<std::string, uint64_t> candidates_by_status;
    // Results refused, by reason: unknown_peer, unknown_task, not_lease_holder, not_asked.
    std::map<std::string, uint64_t> results_refused;
    uint64_t results = 0, leases = 0, lease_expiries = 0;
    dashboards::Histogram dispatch_seconds{{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
    dashboards::Histogram task_seconds{{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}};
  };

  // `clock` times heartbeats, leases and backoff (a test's clock moves them without waiting).
  Scheduler(storage::JobQueue& queue, Outbox& outbox, SchedulerOptions options, const EventLog& log, Events events,
            const Clock& clock = system_clock());

  // The messages of a worker.
  void heard_from(const std::string& identity);  // any message: the peer is alive
  void on_hello(const std::string& identity, const wire::Hello& h, uint32_t version);
  void on_heartbeat(const std::string& identity, const wire::Heartbeat& h);
  void on_result(const std::string& identity, const wire::TaskResult& r);
  void on_bye(const std::string& identity);

  // Leases expired and workers gone silent, as of the clock's now.
  void expire();
  void dispatch();
  // Marks a task failed (its groups keep their modeled costs) and tells Events::settled.
  void fail_task(int64_t task, const std::string& why);
  // Takes back the leases of `tasks` (those no live job waits on): each goes back to the queue (no
  // attempt counted) and its holder is told to stop (Revoke).
  void revoke(const std::vector<int64_t>& tasks, const std::string& reason);
  // After a failed commit: each connected worker holds the leases the database gives it; a lease
  // of a peer not connected goes back to the queue.
  void reload_leases();

  size_t size() const { return workers_.size(); }
  std::vector<storage::DeviceKey> devices() const;  // one per connected worker
  const Counters& counters() const { return counters_; }
  // The workers as /api/workers gives them, with their recent leases and the result counters.
  nlohmann::json workers_json() const;

 private:
  struct Worker {
    std::string identity;
    wire::Hello hello;
    storage::DeviceKey device;
    TimePoint last_seen;
    std::map<int64_t, int64_t> leases;  // task -> lease deadline (unix ms)
    size_t depth = 1;  // tasks it may hold at once (Hello.queue_depth): the next one compiles while one is measured
    bool draining = false;  // stopping (Heartbeat.draining): given nothing more
    // Leases it handed straight back since its last result, and when it may be offered the next.
    int handed_back = 0;
    TimePoint offer_after{};
  };
  // A lease on a worker's timeline: the task, its lease and its end (open while it is held), and
  // how it ended ("ok", "failed": no candidate ok, "handed back", "expired", "lost": the worker
  // went silent or left, "revoked").
  struct Span {
    int64_t task = 0;
    TimePoint from, to;
    std::string outcome;  // empty while held
  };
  static constexpr size_t kTimeline = 200;  // spans kept per worker

  bool alive(const Worker& w, TimePoint now) const;
  void release(int64_t task, const std::string& why);
  void lease(Worker& w, int64_t task_id);
  void close_span(const std::string& identity, int64_t task, const std::string& outcome);
  void refuse_result(const std::string& identity, int64_t task, const std::string& reason, const std::string& why);
  void refuse_hello(const std::string& identity, const std::string& reason);
  nlohmann::json timeline_json(const std::string& identity, TimePoint now) const;

  storage::JobQueue& queue_;
  Outbox& outbox_;
  SchedulerOptions opt_;
  const EventLog& log_;
  Events events_;
  const Clock& clock_;
  std::map<std::string, Worker> workers_;  // by identity
  int64_t last_served_job_ = 0;
  Counters counters_;
  std::map<std::string, TimePoint> slot_freed_;  // worker identity -> when it could take a task
  std::map<int64_t, TimePoint> leased_at_;       // task -> when it was leased
  std::map<std::string, std::deque<Span>> timelines_;   // by worker identity, the last kTimeline
};

}  // namespace fusetune::coordinator
