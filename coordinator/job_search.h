// JobSearch: a running job's search after its first round: the rounds that mutate each group's
// best measured configurations, the leaders within noise measured again interleaved, and the
// convergence recorded after each round.
//
// Takes the job queue (the tasks rounds are queued on, the job's saved search state), the pool
// that trains the learned model and lowers a round (coordinator/offload.h), the decisions read of
// the search database (coordinator/decisions.h: what was measured), and two hooks into the job manager: `find` (the
// running job of an id, nullptr once it was cancelled) and `settle` (look again at whether the job
// is done: JobManager::maybe_finish). Guarantees: the slow work runs on the pool while the job is
// busy, and its completion changes nothing of a job cancelled meanwhile; a group's budget counts
// every trial this identity measured of it, by any job, and library calls besides; a round that
// queues nothing ends the search; each group's leaders are compared once per job; every change of
// the search state is saved in the job's row before the event loop goes on.
#pragma once

#include <cstdint>
#include <functional>

#include "coordinator/decisions.h"
#include "coordinator/event_log.h"
#include "coordinator/job.h"
#include "coordinator/offload.h"
#include "storage/job_queue.h"

namespace fusetune::coordinator {

// A group's point of convergence: [the trials of what the job asked whose outcome is settled, the
// best measured µs (null while nothing succeeded), `seconds`]. The rounds record one per group;
// the live page (coordinator/service_view.h) adds one at the moment it is asked.
nlohmann::json convergence_point(const Decisions::Decided& d, const Job::Group& group, double seconds);

class JobSearch {
 public:
  struct Hooks {
    std::function<Job*(int64_t id)> find;
    std::function<void(int64_t id)> settle;
  };
  JobSearch(storage::JobQueue& queue, Offload& offload, Decisions& decisions, const EventLog& log, Hooks hooks);

  // Appends the job's best so far (the plan its measurements choose now, chosen on the pool) and
  // each group's best after the round that just settled, then settles the job.
  void record_convergence(int64_t id, Job& job);
  // One round for every group with budget left (and the job within its time) and something
  // measured: search::next_round (search/strategy.h), ranked by the learned model once this
  // identity's measurements of the job's groups suffice and by the cost model before. Returns
  // whether a round was started.
  bool search_round(int64_t id, Job& job);
  // For every group whose two fastest candidates are within each other's noise and not yet
  // measured interleaved (search::decide_group), queues the group's task again with just those two
  // and Policy::interleave; returns whether it queued any (the job then waits).
  bool compare_leaders(int64_t id, Job& job);
  void save(int64_t id, const Job& job);

 private:
  struct RoundAsk;
  bool queue_round(Job& job, int64_t id, std::vector<RoundAsk>& asks, const std::string& ranked_by);
  int64_t requeue_group(int64_t id, Job& job, Job::Group& group, const wire::Task& todo);
  int group_budget(const Job& job) const;

  storage::JobQueue& queue_;
  Offload& offload_;
  Decisions& decisions_;
  const EventLog& log_;
  Hooks hooks_;
};

}  // namespace fusetune::coordinator
