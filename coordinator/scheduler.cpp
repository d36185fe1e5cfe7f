#include "coordinator/scheduler.h"

#include <algorithm>
#include <set>

#include "codegen/kernel_ir.h"
#include "core/error.h"
#include "core/inert_text.h"
#include "proto/wire.h"

namespace fusetune::coordinator {

namespace {

// Why a result may not be stored, or "" when it may: it counts only from the peer holding the
// task's current lease, and only for candidates the task asked for, each once, with the source
// digest it was sent with.
std::string result_refusal(const std::string& identity, const storage::TaskRecord& t, const wire::TaskResult& r,
                           std::string* reason) {
  if (t.state != storage::TaskState::kLeased || t.worker != identity) {
    *reason = "not_lease_holder";
    return "the peer does not hold the task's lease";
  }
  if (r.abandoned()) return "";
  wire::Task asked;
  if (!asked.ParseFromString(t.payload)) {
    *reason = "not_asked";
    return "the task's stored payload is unreadable";
  }
  std::map<std::string, std::string> digests;  // config -> source digest, as asked
  for (const wire::Candidate& c : asked.candidates()) digests.emplace(c.config(), c.source_digest());
  std::set<std::string> seen;
  for (const wire::CandidateResult& c : r.results()) {
    const auto d = digests.find(c.config());
    *reason = "not_asked";
    // The peer's text, clipped and made inert before it reaches the log and the reply.
    const std::string named = "configuration '" + inert_comment(c.config().substr(0, 120)) + "'";
    if (d == digests.end()) return named + " was not asked for";
    if (d->second != c.source_digest()) return named + " came with another source digest";
    if (!seen.insert(c.config()).second) return named + " came twice";
  }
  return "";
}

// A result's candidates as the search database stores them.
std::vector<storage::Measurement> measurements(const storage::TaskRecord& t, const wire::TaskResult& r, const std::string& worker) {
  std::vector<storage::Measurement> ms;
  for (const wire::CandidateResult& c : r.results()) {
    storage::Measurement m;
    m.signature = t.signature;
    m.device = t.device;
    m.codegen_version = t.codegen_version;
    m.config = c.config();
    m.source_digest = c.source_digest();
    m.status = storage::status_from_name(c.status());
    m.median_us = c.median_us();
    m.min_us = c.min_us();
    m.max_us = c.max_us();
    m.repeats = c.repeats();
    m.ci_low_us = c.ci_low_us();
    m.ci_high_us = c.ci_high_us();
    m.interleaved_with = c.interleaved_with();
    m.registers = c.registers();
    m.shared_bytes = c.shared_bytes();
    m.spill_bytes = c.spill_bytes();
    m.compile_ms = c.compile_ms();
    m.worker = worker;
    m.detail = c.detail();
    ms.push_back(std::move(m));
  }
  return ms;
}

}  // namespace

Scheduler::Scheduler(storage::JobQueue& queue, Outbox& outbox, SchedulerOptions options, const EventLog& log, Events events,
                     const Clock& clock)
    : queue_(queue), outbox_(outbox), opt_(std::move(options)), log_(log), events_(std::move(events)), clock_(clock) {}

bool Scheduler::alive(const Worker& w, TimePoint now) const {
  return now - w.last_seen < std::chrono::milliseconds(opt_.worker_timeout_ms);
}

void Scheduler::heard_from(const std::string& identity) {
  if (const auto w = workers_.find(identity); w != workers_.end()) w->second.last_seen = clock_.now();
}

void Scheduler::close_span(const std::string& identity, int64_t task, const std::string& outcome) {
  const auto t = timelines_.find(identity);
  if (t == timelines_.end()) return;
  for (Span& sp : t->second) {
    if (sp.task == task && sp.outcome.empty()) {
      sp.to = clock_.now();
      sp.outcome = outcome;
    }
  }
}

void Scheduler::fail_task(int64_t task, const std::string& why) {
  queue_.finish_task(task, storage::TaskState::kFailed, why, {});
  log_(LogIds{0, task, ""}, LogEvent{"task_failed", {{"error", why}}}, "task " + std::to_string(task) + " failed: " + why,
       LogLevel::kWarn);
  events_.settled(task);
}

void Scheduler::release(int64_t task, const std::string& why) {
  const auto t = queue_.task(task);
  if (!t || t->state != storage::TaskState::kLeased) return;
  if (t->attempts >= opt_.max_attempts) {
    fail_task(task, why + " after " + std::to_string(t->attempts) + " attempts");
    return;
  }
  queue_.requeue_task(task);
  log_(LogIds{0, task, ""}, LogEvent{"task_requeued", {{"why", why}}}, "task " + std::to_string(task) + " re-queued: " + why);
}

void Scheduler::expire() {
  const TimePoint now = clock_.now();
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (alive(it->second, now)) {
      ++it;
      continue;
    }
    log_(LogIds{0, 0, peer_name(it->first)}, LogEvent{"worker_silent", {}}, "worker " + peer_name(it->first) + " went silent",
         LogLevel::kWarn);
    const std::string identity = it->first;
    const std::map<int64_t, int64_t> held = std::move(it->second.leases);
    it = workers_.erase(it);
    for (const auto& [task, deadline] : held) {
      close_span(identity, task, "lost");
      release(task, "worker " + identity + " went silent");
    }
  }
  const int64_t ms = clock_.unix_ms();
  std::set<int64_t> held;
  for (auto& [identity, w] : workers_) {
    for (auto l = w.leases.begin(); l != w.leases.end();) {
      if (l->second >= ms) {
        held.insert(l->first);
        ++l;
        continue;
      }
      const int64_t t = l->first;
      l = w.leases.erase(l);
      ++counters_.lease_expiries;
      close_span(w.identity, t, "expired");
      release(t, "lease deadline passed");
    }
  }
  // A safety net: a lease no live worker holds (the paths above release them as they happen).
  for (int64_t id : queue_.task_ids_in_state(storage::TaskState::kLeased)) {
    if (!held.count(id)) release(id, "its lease holder is gone");
  }
}

void Scheduler::dispatch() {
  // Workers with room for a task, the emptiest first: an idle one before one whose next task
  // would wait behind the one it measures.
  std::vector<Worker*> idle;
  const auto now = clock_.now();
  for (auto& [identity, w] : workers_) {
    if (w.leases.size() < w.depth && !w.draining && now >= w.offer_after) idle.push_back(&w);
  }
  std::stable_sort(idle.begin(), idle.end(), [](const Worker* a, const Worker* b) { return a->leases.size() < b->leases.size(); });
  if (idle.empty()) return;
  const std::vector<std::pair<int64_t, storage::DeviceKey>> jobs = events_.running_jobs();
  if (jobs.empty() || !queue_.any_in_state(storage::TaskState::kQueued)) return;
  // Asked of the database job by job (a job's first queued task), not as the list of every
  // queued task: with thousands queued, listing them for every result was the loop's largest
  // cost under bench/service_load. A job found empty is not asked again in this pass.
  std::set<int64_t> drained;
  for (Worker* w : idle) {
    // Jobs in turn, starting after the one served last.
    std::vector<const std::pair<int64_t, storage::DeviceKey>*> order;
    for (const auto& job : jobs) {
      if (job.first > last_served_job_) order.push_back(&job);
    }
    for (const auto& job : jobs) {
      if (job.first <= last_served_job_) order.push_back(&job);
    }
    for (const auto* job : order) {
      const int64_t id = job->first;
      if (drained.count(id)) continue;
      if (job->second != w->device) continue;  // only the job's identity measures for it
      const std::optional<int64_t> task = queue_.first_queued_task(id);
      if (!task) {
        drained.insert(id);
        continue;
      }
      try {
        lease(*w, *task);
      } catch (const Error& e) {  // a task that cannot be sent fails; the loop and its jobs go on
        fail_task(*task, e.what());
        return;  // the jobs' tasks have changed: the next poll dispatches again
      }
      last_served_job_ = id;
      break;
    }
  }
}

void Scheduler::lease(Worker& w, int64_t task_id) {
  const auto t = queue_.task(task_id);
  wire::Envelope e;
  wire::Task& task = *e.mutable_task();
  check(task.ParseFromString(t->payload), "task ", task_id, ": stored payload is unreadable");
  // Generous: compile and the reference values to their limit, plus every candidate running to
  // its timeout, twice over; a task queued behind others the worker holds waits for theirs too.
  const int64_t now = clock_.unix_ms();
  int64_t deadline = now + 60000 + wire::reference_timeout_ms(task.policy()) +
                     2LL * task.candidates_size() * std::max(1000, task.policy().timeout_ms());
  for (const auto& [held, until] : w.leases) deadline += std::max<int64_t>(0, until - now);
  task.set_task_id(task_id);
  task.set_lease_deadline_ms(deadline);
  queue_.lease_task(task_id, w.identity, deadline);
  w.leases[task_id] = deadline;
  outbox_.send(w.identity, std::move(e));
  const auto now_c = clock_.now();
  ++counters_.leases;
  leased_at_[task_id] = now_c;
  std::deque<Span>& line = timelines_[w.identity];
  line.push_back({task_id, now_c, now_c, ""});
  if (line.size() > kTimeline) line.pop_front();
  if (const auto f = slot_freed_.find(w.identity); f != slot_freed_.end()) {
    counters_.dispatch_seconds.observe(std::chrono::duration<double>(now_c - f->second).count());
    slot_freed_.erase(f);
  }
}

// A refused result changes nothing: one line in the log, a count by reason, an error to the peer.
void Scheduler::refuse_result(const std::string& identity, int64_t task, const std::string& reason, const std::string& why) {
  ++counters_.results_refused[reason];
  log_(LogIds{0, task, peer_name(identity)}, LogEvent{"result_refused", {{"reason", reason}}},
       "result for task " + std::to_string(task) + " from " + peer_name(identity) + " refused: " + why, LogLevel::kWarn);
  outbox_.send_error(identity, "result for task " + std::to_string(task) + " refused: " + why);
}

void Scheduler::on_result(const std::string& identity, const wire::TaskResult& r) {
  const auto w = workers_.find(identity);
  if (w == workers_.end()) return refuse_result(identity, r.task_id(), "unknown_peer", "unknown worker: say hello");
  const auto t = queue_.task(r.task_id());
  if (!t) return refuse_result(identity, r.task_id(), "unknown_task", "no such task");
  if (t->state == storage::TaskState::kDone && t->worker == identity && !r.abandoned()) {
    // Its own late duplicate (a resend after a reconnect): already stored once.
    log_(LogIds{0, r.task_id(), peer_name(identity)},
         "late result for task " + std::to_string(r.task_id()) + " from " + peer_name(identity) + " ignored (already done)");
    return;
  }
  std::string reason;
  if (const std::string why = result_refusal(identity, *t, r, &reason); !why.empty()) {
    return refuse_result(identity, r.task_id(), reason, why);
  }
  Worker& holder = w->second;
  holder.leases.erase(r.task_id());
  slot_freed_.emplace(identity, clock_.now());
  if (r.abandoned() && !holder.draining) {
    ++holder.handed_back;
    holder.offer_after = clock_.now() + std::chrono::milliseconds(std::min(5000, 100 << std::min(holder.handed_back - 1, 6)));
  } else if (!r.abandoned()) {
    holder.handed_back = 0;
    holder.offer_after = {};
  }
  const bool any_ok = std::any_of(r.results().begin(), r.results().end(),
                                  [](const wire::CandidateResult& c) { return c.status() == "ok"; });
  close_span(identity, r.task_id(), r.abandoned() ? "handed back" : any_ok ? "ok" : "failed");
  if (const auto l = leased_at_.find(r.task_id()); l != leased_at_.end()) {
    if (!r.abandoned()) counters_.task_seconds.observe(std::chrono::duration<double>(clock_.now() - l->second).count());
    leased_at_.erase(l);
  }
  if (r.abandoned()) {
    queue_.requeue_task(r.task_id(), /*attempt_counts=*/false);
    log_(LogIds{0, r.task_id(), peer_name(identity)}, LogEvent{"lease_handed_back", {}},
         "task " + std::to_string(r.task_id()) + " handed back by " + peer_name(identity));
    return;
  }
  // result_refusal saw the task leased to this peer: finish_task cannot find it done.
  check(queue_.finish_task(r.task_id(), storage::TaskState::kDone, "", measurements(*t, r, holder.hello.worker_id())),
        "task ", r.task_id(), " was done while leased");
  ++counters_.results;
  for (const wire::CandidateResult& c : r.results()) ++counters_.candidates_by_status[c.status()];
  events_.stored(t->signature);
  // The worker's next task first; then what the result settles (a job's next round or its end
  // reads the database at length).
  dispatch();
  events_.settled(r.task_id());
}

void Scheduler::refuse_hello(const std::string& identity, const std::string& reason) {
  wire::Envelope e;
  e.mutable_refused()->set_reason(reason);
  outbox_.send(identity, std::move(e));
}

void Scheduler::on_hello(const std::string& identity, const wire::Hello& h, uint32_t version) {
  if (h.max_version() < wire::kMinProtocolVersion || h.min_version() > wire::kProtocolVersion) {
    refuse_hello(identity, "this coordinator speaks protocol versions " + std::to_string(wire::kMinProtocolVersion) + " to " +
                               std::to_string(wire::kProtocolVersion) + "; the worker speaks " + std::to_string(h.min_version()) +
                               " to " + std::to_string(h.max_version()));
    log_(LogIds{0, 0, h.worker_id()}, LogEvent{"worker_refused", {{"reason", "protocol"}}}, "refused worker " + h.worker_id() + ": protocol " + std::to_string(h.min_version()) + ".." +
         std::to_string(h.max_version()) + " (envelope " + std::to_string(version) + ")");
    return;
  }
  if (h.codegen_version() != codegen::kCodegenVersion) {
    return refuse_hello(identity, "this coordinator generates code version " + std::to_string(codegen::kCodegenVersion) +
                                      "; the worker has " + std::to_string(h.codegen_version()));
  }
  if (h.device().toolkit().empty()) {
    refuse_hello(identity, "the worker does not report its toolkit (NVRTC, or the host compiler, and its "
                           "version), which is part of its device identity: upgrade the worker");
    log_(LogIds{0, 0, h.worker_id()}, LogEvent{"worker_refused", {{"reason", "no_toolkit"}}},
         "refused worker " + h.worker_id() + ": no toolkit in its device identity");
    return;
  }
  Worker& w = workers_[identity];
  const std::map<int64_t, int64_t> held = std::move(w.leases);
  w.leases.clear();
  w.identity = identity;
  w.hello = h;
  w.device = {h.device().name(),          h.device().arch(),           h.device().description(),
              h.device().compute_capability(), h.device().driver_version(), h.device().toolkit()};
  w.last_seen = clock_.now();
  w.depth = static_cast<size_t>(std::clamp(h.queue_depth(), 1, 4));
  w.draining = false;
  slot_freed_[identity] = w.last_seen;
  for (const auto& [task, deadline] : held) release(task, "worker " + peer_name(identity) + " said hello again");
  wire::Envelope e;
  e.mutable_welcome()->set_coordinator_id(opt_.id);
  e.mutable_welcome()->set_heartbeat_ms(opt_.heartbeat_ms);
  outbox_.send(identity, std::move(e));
  log_(LogIds{0, 0, h.worker_id()}, LogEvent{"worker_joined", {{"device", w.device.str()}, {"backend", h.backend()}}},
       "worker " + h.worker_id() + " joined: " + w.device.str() + ", " + h.backend());
  events_.joined();
}

void Scheduler::on_heartbeat(const std::string& identity, const wire::Heartbeat& h) {
  const auto w = workers_.find(identity);
  if (w == workers_.end()) return outbox_.send_error(identity, "unknown worker: say hello");
  if (h.draining() && !w->second.draining) {
    w->second.draining = true;
    log_(LogIds{0, 0, peer_name(identity)}, LogEvent{"worker_stopping", {}},
         "worker " + peer_name(identity) + " is stopping: it finishes what it measures and takes nothing more");
  }
}

void Scheduler::on_bye(const std::string& identity) {
  const auto w = workers_.find(identity);
  if (w == workers_.end()) return;
  const std::map<int64_t, int64_t> held = std::move(w->second.leases);
  for (const auto& [task, deadline] : held) close_span(identity, task, "lost");
  workers_.erase(w);
  for (const auto& [task, deadline] : held) release(task, "worker " + peer_name(identity) + " left");
  log_(LogIds{0, 0, peer_name(identity)}, LogEvent{"worker_left", {{"leases", static_cast<int64_t>(held.size())}}},
       "worker " + peer_name(identity) + " left");
}

void Scheduler::revoke(const std::vector<int64_t>& tasks, const std::string& reason) {
  std::map<std::string, wire::Envelope> by_holder;
  for (const int64_t t : tasks) {
    const auto rec = queue_.task(t);
    if (!rec || rec->state != storage::TaskState::kLeased) continue;
    if (const auto w = workers_.find(rec->worker); w != workers_.end()) {
      w->second.leases.erase(t);
      slot_freed_.emplace(rec->worker, clock_.now());
    }
    close_span(rec->worker, t, "revoked");
    leased_at_.erase(t);
    queue_.requeue_task(t, /*attempt_counts=*/false);
    by_holder[rec->worker].mutable_revoke()->add_tasks(t);
  }
  for (auto& [holder, e] : by_holder) {
    e.mutable_revoke()->set_reason(reason);
    log_(LogIds{0, 0, peer_name(holder)},
         LogEvent{"leases_revoked", {{"leases", static_cast<int64_t>(e.revoke().tasks_size())}, {"reason", reason}}},
         std::to_string(e.revoke().tasks_size()) + " leases of " + peer_name(holder) + " revoked: " + reason);
    outbox_.send(holder, std::move(e));
  }
  if (!by_holder.empty()) dispatch();
}

void Scheduler::reload_leases() {
  for (auto& [identity, w] : workers_) w.leases.clear();
  for (const storage::TaskRecord& t : queue_.tasks_in_state(storage::TaskState::kLeased)) {
    if (const auto w = workers_.find(t.worker); w != workers_.end()) {
      w->second.leases[t.id] = t.lease_deadline_ms;
    } else {
      queue_.requeue_task(t.id, /*attempt_counts=*/false);
    }
  }
}

std::vector<storage::DeviceKey> Scheduler::devices() const {
  std::vector<storage::DeviceKey> out;
  for (const auto& [identity, w] : workers_) out.push_back(w.device);
  return out;
}

nlohmann::json Scheduler::workers_json() const {
  nlohmann::json out = nlohmann::json::array();
  const auto now = clock_.now();
  for (const auto& [identity, w] : workers_) {
    out.push_back({{"worker_id", w.hello.worker_id()},
                   {"host", w.hello.host()},
                   {"device", w.device.str()},
                   {"backend", w.hello.backend()},
                   {"tasks_held", w.leases.size()},
                   {"queue_depth", w.depth},
                   {"draining", w.draining},
                   {"last_heard_s", std::chrono::duration<double>(now - w.last_seen).count()},
                   {"timeline", timeline_json(identity, now)}});
  }
  return {{"workers", out},
          {"candidates_by_status", counters_.candidates_by_status},
          {"results", counters_.results},
          {"results_refused", counters_.results_refused},
          {"lease_expiries", counters_.lease_expiries}};
}

// A worker's recent leases as seconds before now: {"task", "from_s", "to_s" (0 while held), "outcome"}.
nlohmann::json Scheduler::timeline_json(const std::string& identity, TimePoint now) const {
  nlohmann::json out = nlohmann::json::array();
  const auto t = timelines_.find(identity);
  if (t == timelines_.end()) return out;
  auto ago = [&](TimePoint p) { return std::chrono::duration<double>(now - p).count(); };
  for (const Span& sp : t->second) {
    out.push_back({{"task", sp.task},
                   {"from_s", ago(sp.from)},
                   {"to_s", sp.outcome.empty() ? 0.0 : ago(sp.to)},
                   {"outcome", sp.outcome.empty() ? "measuring" : sp.outcome}});
  }
  return out;
}

}  // namespace fusetune::coordinator
