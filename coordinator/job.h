// Job: a running job as the coordinator's event loop holds it, and its search state as the
// database keeps it for a restarted coordinator.
//
// A job is bound to one device identity (only its measurements decide), planned once (an
// immutable JobPlanner shared with the pool), and tracks per weighed group what it asked to
// measure and the task that measures it. search_state and restore_search take and give the same
// JSON ({"rounds", "elapsed_s", "search_over", "convergence", "group_convergence", "groups":
// {signature: {"asked", "compared", "extended"}}}): what restore_search reads of a malformed state
// is left at its default, never an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "coordinator/job_planner.h"
#include "search/session.h"
#include "storage/job_queue.h"

namespace fusetune::coordinator {

struct Job {
  using Clock = std::chrono::steady_clock;
  std::shared_ptr<const JobPlanner> planner;
  storage::DeviceKey device;  // the identity the job is bound to: only its measurements decide
  std::vector<int64_t> tasks;
  // Per weighed group, by signature: what the job has asked to measure (every candidate of every
  // round), its task (0 while the database answered it all), how often this job queued the task
  // again for unsettled candidates, and whether its leaders were sent to be interleaved.
  struct Group {
    wire::Task asked;
    int64_t task = 0;
    int extended = 0;
    bool compared = false;
  };
  std::map<std::string, Group> groups;
  size_t cache_hits = 0;
  Clock::time_point started = Clock::now();
  int rounds = 0;             // search rounds after the first
  bool busy = false;          // the pool works for it (a search round, its convergence, its final plan)
  bool search_over = false;   // the rounds are over: one queued nothing, or a round failed
  bool search_done = false;   // the session said kDone: nothing more to measure, the job finishes
  std::shared_ptr<search::TuningSession> session;  // made at the job's first search step
  // Which coming of the job this is: a job resumed after a reload is the same id, another epoch,
  // and what the pool finishes for an earlier epoch is dropped (JobSearch::live).
  uint64_t epoch = 0;
  nlohmann::json convergence = nlohmann::json::array();
  nlohmann::json group_convergence = nlohmann::json::object();
};

// What a restarted coordinator needs to resume the job's search where it is: its rounds,
// convergence, elapsed time, and per group what it asked (configurations), whether its leaders
// were compared and how often its task was extended.
std::string search_state(const Job& job);
// A resumed job's figures as they were: the cache hits counted when it started (the record's
// summary while it runs) and its search state (`saved`, parsed); the groups' part is read by the
// job manager as it makes the groups.
void restore_search(Job& job, const storage::JobRecord& rec, const nlohmann::json& saved);

}  // namespace fusetune::coordinator
