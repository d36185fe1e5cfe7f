// JobSearch: a running job's search after its first round, as the job's search::TuningSession
// (search/session.h) steps it: the rounds that mutate each group's best measured configurations,
// the leaders within noise measured again interleaved, and the convergence recorded after each
// round. The session decides; JobSearch turns its steps into tasks. What the pool finishes acts only
// on the job's coming it was started for (Job::epoch): a job cancelled, or reloaded and resumed
// under the same id, meanwhile is left alone.
//
// Takes the job queue (the tasks rounds are queued on, the job's saved search state), the pool
// that runs the session's steps and lowers a round (coordinator/offload.h), the decisions read of
// the search database (coordinator/decisions.h: the session's tuning records), and two hooks into
// the job manager: `find` (the running job of an id, nullptr once it was cancelled) and `settle`
// (look again at whether the job is done: JobManager::maybe_finish). The job's session (made at
// its first step: the job planner's spaces, search::MeasurePolicy from the job's options, the
// learned model, the mutation strategy) lives with the job, so its learned model is updated from
// round to round. Guarantees: the slow work runs on the pool while the job is busy, and its
// completion changes nothing of a job cancelled meanwhile; a round that queues nothing ends the
// rounds (the offspring the code generator cannot express are dropped); every change of the
// search state is saved in the job's row before the event loop goes on.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

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
  // The session's next step, taken on the pool from what the records say now: a search round
  // (lowered on the pool, then queued), the leaders within noise queued again with
  // Policy::interleave, or the end of the search (Job::search_done; the job then finishes).
  // Returns false once the search is done, true while a step is under way (the job waits).
  bool next(int64_t id, Job& job);
  void save(int64_t id, const Job& job);

 private:
  struct Round;
  void lower_round(int64_t id, Job& job, std::map<std::string, std::vector<planner::TileConfig>> configs,
                   const std::string& ranked_by);
  bool queue_round(Job& job, int64_t id, Round& round);
  bool compare_leaders(int64_t id, Job& job, const std::map<std::string, std::pair<std::string, std::string>>& pairs);
  int64_t requeue_group(int64_t id, Job& job, Job::Group& group, const wire::Task& todo);
  // The running job of `id` if it is still the coming `epoch` (not cancelled, not resumed anew).
  Job* live(int64_t id, uint64_t epoch) const;

  storage::JobQueue& queue_;
  Offload& offload_;
  Decisions& decisions_;
  const EventLog& log_;
  Hooks hooks_;
};

}  // namespace fusetune::coordinator
