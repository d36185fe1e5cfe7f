#include "coordinator/service_view.h"

#include <chrono>

#include "coordinator/status_json.h"
#include "core/files.h"
#include "core/inert_text.h"

namespace fusetune::coordinator {

namespace {

// A running job's groups' convergence: each settled round's point, then, for each group with a
// successful measurement, one at this moment ([trials of the group, best µs, seconds]), so that a
// group's best shows as soon as its task is done rather than when the whole round ends.
nlohmann::json live_groups(const Job& job, Decisions& decisions) {
  nlohmann::json out = job.group_convergence;
  const double seconds = std::chrono::duration<double>(Job::Clock::now() - job.started).count();
  for (const auto& [signature, group] : job.groups) {
    nlohmann::json point = convergence_point(decisions.of(signature, job.device), group, seconds);
    if (!point[1].is_null()) out[signature].push_back(std::move(point));
  }
  return out;
}

}  // namespace

nlohmann::json CoordinatorView::jobs() const {
  return status_json(jobs_.status(0), static_cast<int>(scheduler_.size()), warning_());
}

std::optional<nlohmann::json> CoordinatorView::job(int64_t id) const {
  if (!queue_.job(id)) return std::nullopt;
  const wire::JobStatus status = jobs_.status(id).at(0);
  const auto by_status = queue_.job_measurements_by_status(id);
  const Job* live = jobs_.live(id);
  if (!live) return job_detail_json(status, by_status);
  return job_detail_json(status, by_status, live->convergence, live_groups(*live, decisions_));
}

std::optional<nlohmann::json> CoordinatorView::tasks(int64_t id) const {
  if (!queue_.job(id)) return std::nullopt;
  nlohmann::json out = nlohmann::json::array();
  for (const storage::TaskRecord& t : queue_.job_tasks(id)) {
    wire::Task payload;
    const bool readable = payload.ParseFromString(t.payload);
    out.push_back({{"task_id", t.id},
                   {"signature", t.signature},
                   {"state", storage::task_state_name(t.state)},
                   {"attempts", t.attempts},
                   {"worker", valid_utf8(t.worker)},  // the lease holder's routing id, which a peer may make binary
                   {"error", t.error},
                   {"candidates", readable ? payload.candidates_size() : 0}});
  }
  return nlohmann::json{{"job_id", id}, {"tasks", out}};
}

nlohmann::json CoordinatorView::workers() const {
  nlohmann::json out = scheduler_.workers_json();
  out["cache_hits"] = jobs_.cache_hits();
  return out;
}

void CoordinatorView::metrics(dashboards::Exposition& x) const {
  const Scheduler::Counters& c = scheduler_.counters();
  std::map<std::string, double> job_states, task_states;
  for (const char* st : {"queued", "running", "done", "failed", "cancelled"}) job_states[st] = 0;
  for (const storage::JobRecord& j : queue_.jobs(false)) ++job_states[storage::job_state_name(j.state)];
  for (const char* st : {"queued", "leased", "done", "failed"}) task_states[st] = 0;
  for (const auto& [st, n] : queue_.task_counts()) task_states[st] = static_cast<double>(n);
  std::map<std::string, double> devices;
  for (const storage::DeviceKey& d : scheduler_.devices()) ++devices[d.str()];
  auto by = [](const std::string& label, const auto& m) {
    std::vector<std::pair<dashboards::Labels, double>> out;
    for (const auto& [k, v] : m) out.push_back({{{label, k}}, static_cast<double>(v)});
    return out;
  };
  x.gauge("fusetune_jobs", "Jobs in the database, by state.", by("state", job_states));
  x.gauge("fusetune_tasks", "Measurement tasks in the database, by state.", by("state", task_states));
  x.gauge("fusetune_workers", "Workers connected, by device identity.", by("device", devices));
  x.counter("fusetune_candidates_measured", "Candidates whose results this coordinator stored, by status.",
            by("status", c.candidates_by_status));
  x.counter("fusetune_results", "Task results this coordinator stored.", {{{}, static_cast<double>(c.results)}});
  x.counter("fusetune_results_refused",
            "Task results refused: from a peer that said no hello, for an unknown task, from a peer not holding the "
            "task's lease, or for candidates the task did not ask for.",
            by("reason", c.results_refused));
  x.counter("fusetune_role_refusals", "Messages refused because the peer's CURVE key lacks the role (worker or client).",
            {{{}, static_cast<double>(transport_.role_refusals())}});
  x.counter("fusetune_leases", "Tasks leased to workers.", {{{}, static_cast<double>(c.leases)}});
  x.counter("fusetune_lease_expiries", "Leases whose deadline passed.", {{{}, static_cast<double>(c.lease_expiries)}});
  x.counter("fusetune_cache_hits", "Groups the search database answered without a measurement.",
            {{{}, static_cast<double>(jobs_.cache_hits())}});
  x.histogram("fusetune_dispatch_latency_seconds",
              "From a worker's slot freed (its result or hello) to its next lease sent, measured.", c.dispatch_seconds);
  x.histogram("fusetune_task_duration_seconds", "From a task's lease to its result, measured.", c.task_seconds);
  x.gauge("fusetune_database_writable", "1 while the search database can be written, 0 while it cannot (a full disk: no new work).",
          {{{}, warning_().empty() ? 1.0 : 0.0}});
  x.gauge("fusetune_database_bytes", "The search database's file (without its WAL and model files).",
          {{{}, static_cast<double>(db_.file().size_bytes())}});
}

}  // namespace fusetune::coordinator
