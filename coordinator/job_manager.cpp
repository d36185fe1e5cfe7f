#include "coordinator/job_manager.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <nlohmann/json.hpp>

#include "codegen/kernel_ir.h"
#include "coordinator/status_json.h"
#include "core/error.h"

namespace fusetune::coordinator {

JobManager::JobManager(storage::SearchDb& db, storage::JobQueue& queue, Offload& offload, Decisions& decisions,
                       Scheduler& scheduler, const EventLog& log)
    : db_(db), queue_(queue), offload_(offload), decisions_(decisions), scheduler_(scheduler), log_(log),
      search_(queue, offload, decisions, log,
              {[this](int64_t id) {
                 const auto it = jobs_.find(id);
                 return it == jobs_.end() ? nullptr : &it->second;
               },
               [this](int64_t id) { maybe_finish(id); }}) {}

// One line for every way a job ends failed: it cannot start, cannot resume, or its plan failed.
void JobManager::fail_job(int64_t id, const std::string& what, const std::string& why) {
  queue_.set_job_state(id, storage::JobState::kFailed, why);
  log_(LogIds{id, 0, ""}, LogEvent{"job_failed", {{"stage", what}, {"error", why}}}, "job " + std::to_string(id) + " " + what + ": " + why,
       LogLevel::kWarn);
}

void JobManager::settled(int64_t task) {
  std::vector<int64_t> affected;  // first: maybe_finish erases finished jobs from `jobs_`
  for (const auto& [id, job] : jobs_) {
    if (std::find(job.tasks.begin(), job.tasks.end(), task) != job.tasks.end()) affected.push_back(id);
  }
  for (int64_t id : affected) maybe_finish(id);
}

std::vector<std::pair<int64_t, storage::DeviceKey>> JobManager::running() const {
  std::vector<std::pair<int64_t, storage::DeviceKey>> out;
  for (const auto& [id, job] : jobs_) out.emplace_back(id, job.device);
  return out;
}

const Job* JobManager::live(int64_t id) const {
  const auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobManager::reload() {
  jobs_.clear();
  for (auto it = waiting_.begin(); it != waiting_.end();) it = loading_.count(it->first) ? std::next(it) : waiting_.erase(it);
  load_unfinished();
}

// A job's model, imported, planned and lowered again from the files the database keeps: the
// read here, the rest on the pool; `then` runs on the loop with the result, or the job fails.
void JobManager::load_model(const storage::JobRecord& rec, std::function<void(std::shared_ptr<Prepared>)> then) {
  const auto model = queue_.model(rec.model_digest);
  check(model.has_value(), "job ", rec.id, ": model ", rec.model_digest.substr(0, 12), " is missing from the database");
  offload_.post(
      [onnx = model->onnx, rec, then]() -> Offload::Completion {
        auto p = prepare(onnx, rec.model_name, rec.device.name, JobOptions::from_json(rec.options));
        if (!rec.search_state.empty()) p->asked_later = lower_asked_later(*p, rec.search_state);
        return [then, p] { then(p); };
      },
      [this, id = rec.id](const std::string& error) {
        loading_.erase(id);
        waiting_.erase(id);
        fail_job(id, "cannot start", error);
      });
}

// A bound job found unfinished at start-up: its model is prepared on the pool, then it starts
// (unless it was cancelled meanwhile).
void JobManager::resume(const storage::JobRecord& rec) {
  loading_.insert(rec.id);
  load_model(rec, [this, rec](std::shared_ptr<Prepared> p) {
    loading_.erase(rec.id);
    const auto now = queue_.job(rec.id);
    if (!now || (now->state != storage::JobState::kRunning && now->state != storage::JobState::kQueued)) return;
    try {
      start(rec, std::move(p));
    } catch (const Error& e) {
      fail_job(rec.id, "cannot resume", e.what());
    }
  });
}


// Binds every queued job that waits for a device class some connected worker has to that
// worker's identity (the identity most connected workers of the class share; the smallest, by
// its text, of a tie) and starts it.
void JobManager::bind_waiting() {
  const std::vector<storage::DeviceKey> devices = scheduler_.devices();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const auto rec = queue_.job(it->first);
    if (!rec || rec->state != storage::JobState::kQueued) {
      it = waiting_.erase(it);
      continue;
    }
    std::map<std::string, std::pair<int, const storage::DeviceKey*>> identities;  // by str()
    for (const storage::DeviceKey& device : devices) {
      if (!device.same_class(rec->device)) continue;
      auto& [count, key] = identities[device.str()];
      ++count;
      key = &device;
    }
    if (identities.empty() || loading_.count(it->first) || (it->second && !it->second->lowered)) {
      ++it;
      continue;
    }
    if (!it->second) {  // resumed after a restart: prepared on the pool, then bound
      loading_.insert(rec->id);
      try {
        load_model(*rec, [this, id = rec->id](std::shared_ptr<Prepared> p) {
          loading_.erase(id);
          if (!waiting_.count(id)) return;  // cancelled meanwhile
          waiting_[id] = std::move(p);
          bind_waiting();
        });
      } catch (const Error& e) {
        loading_.erase(rec->id);
        fail_job(rec->id, "cannot start", e.what());
        it = waiting_.erase(it);
        continue;
      }
      ++it;
      continue;
    }
    auto best = identities.begin();
    for (auto i = identities.begin(); i != identities.end(); ++i) {
      if (i->second.first > best->second.first) best = i;
    }
    storage::JobRecord bound = *rec;
    bound.identity = queue_.bind_job(rec->id, *best->second.second);
    std::shared_ptr<Prepared> prepared = std::move(it->second);
    it = waiting_.erase(it);
    try {
      start(bound, std::move(prepared));
    } catch (const Error& e) {
      fail_job(bound.id, "cannot start", e.what());
    }
  }
}


// Makes a bound job's tasks (cache hits skipped) from its prepared model and marks it running.
// Only measurements of the job's identity answer; those of near identities (the same device
// class under another driver or toolkit) order each task's candidates. A job found running (a
// coordinator restarted under it) is resumed instead: its tasks are those linked to it, its
// cache hits those counted when it started, and its search (rounds, convergence, what each
// group asked, elapsed time) the state JobSearch::save left.
void JobManager::start(const storage::JobRecord& rec, std::shared_ptr<Prepared> prepared) {
  check(rec.identity.has_value(), "job ", rec.id, " is not bound to a device identity");
  const storage::DeviceKey& device = *rec.identity;
  const bool resumed = rec.state == storage::JobState::kRunning;
  const nlohmann::json saved = nlohmann::json::parse(rec.search_state.empty() ? "{}" : rec.search_state, nullptr, false);
  const nlohmann::json saved_groups = saved.is_object() ? saved.value("groups", nlohmann::json::object()) : nlohmann::json::object();
  std::map<std::string, int64_t> linked;  // a resumed job's tasks, by signature
  if (resumed) {
    for (const storage::TaskRecord& t : queue_.job_tasks(rec.id)) linked[t.signature] = t.id;
  }
  Job job;
  job.device = device;
  job.planner = prepared->planner;
  if (resumed) restore_search(job, rec, saved);
  size_t seeded = 0;
  db_.file().write([&] {  // the job's tasks and its state: one transaction
    for (const TaskSpec& spec : prepared->tasks) {
      db_.commit_workload(spec.signature, spec.canonical_form);
      if (spec.task.candidates_size() == 0) continue;  // nothing the code generator can express
      Job::Group& group = job.groups[spec.signature];
      group.asked = spec.task;
      if (resumed) {
        if (const auto later = prepared->asked_later.find(spec.signature); later != prepared->asked_later.end()) {
          for (const wire::Candidate& c : later->second) *group.asked.add_candidates() = c;
        }
        if (const auto g = saved_groups.find(spec.signature); g != saved_groups.end() && g->is_object()) {
          group.compared = g->value("compared", false);
          group.extended = g->value("extended", 0);
        }
        if (const auto l = linked.find(spec.signature); l != linked.end()) {
          group.task = l->second;
          job.tasks.push_back(l->second);
          continue;
        }
        if (answered(spec, device)) continue;  // a cache hit when the job started: counted then
      } else if (answered(spec, device)) {
        ++job.cache_hits;
        ++cache_hits_;
        continue;
      }
      // Only what the database lacks is measured; a task measured before for fewer candidates
      // (another job's, with a smaller --candidates) is extended when it is done (maybe_finish).
      wire::Task todo = unmeasured(spec.task, device);
      seeded += seed_order(todo, device);
      const int64_t id = queue_.ensure_task(spec.signature, device, codegen::kCodegenVersion, todo.SerializeAsString());
      queue_.link_job_task(rec.id, id);
      job.tasks.push_back(id);
      group.task = id;
    }
    nlohmann::json progress = {{"cache_hits", job.cache_hits}};
    queue_.set_job_state(rec.id, storage::JobState::kRunning, "", progress.dump());
  });
  log_(LogIds{rec.id, 0, ""},
       LogEvent{"job_started",
                {{"tasks", static_cast<int64_t>(job.tasks.size())},
                 {"cache_hits", static_cast<int64_t>(job.cache_hits)},
                 {"seeded", static_cast<int64_t>(seeded)},
                 {"resumed_rounds", resumed ? static_cast<int64_t>(job.rounds) : int64_t{-1}}}},
       "job " + std::to_string(rec.id) + " (" + rec.model_name + " on " + device.str() + "): " +
      std::to_string(job.tasks.size()) + " tasks, " + std::to_string(job.cache_hits) + " answered by the database, " +
      std::to_string(seeded) + " ordered by measurements of near identities" +
      (resumed ? "; resumed after " + std::to_string(job.rounds) + " search rounds (" +
                     std::to_string(job.convergence.size()) + " recorded)"
               : ""));
  job.epoch = ++epochs_;
  jobs_[rec.id] = std::move(job);
  maybe_finish(rec.id);
}


// The task with only the candidates not measured yet (successfully or not) on this device.
wire::Task JobManager::unmeasured(const wire::Task& task, const storage::DeviceKey& d) {
  wire::Task todo = task;
  todo.clear_candidates();
  for (const wire::Candidate& c : task.candidates()) {
    if (!db_.measured(task.signature(), d, codegen::kCodegenVersion, c.config())) *todo.add_candidates() = c;
  }
  return todo;
}

// Puts the candidates that near identities of `d` measured first, fastest first, the others
// after them in the planner's order; returns 1 when the order came from such measurements.
int JobManager::seed_order(wire::Task& task, const storage::DeviceKey& d) {
  std::map<std::string, double> near;  // config -> fastest median on a near identity
  for (const storage::Measurement& m : db_.near_top_k(task.signature(), d, codegen::kCodegenVersion, 1000)) {
    near.emplace(m.config, m.median_us);
  }
  auto key = [&](const wire::Candidate& c) {
    const auto it = near.find(c.config());
    return it == near.end() ? INFINITY : it->second;
  };
  std::vector<wire::Candidate> order(task.candidates().begin(), task.candidates().end());
  if (std::none_of(order.begin(), order.end(), [&](const wire::Candidate& c) { return near.count(c.config()); })) return 0;
  std::stable_sort(order.begin(), order.end(),
                   [&](const wire::Candidate& a, const wire::Candidate& b) { return key(a) < key(b); });
  task.clear_candidates();
  for (wire::Candidate& c : order) *task.add_candidates() = std::move(c);
  return 1;
}

// Whether the database already holds measurements for this task's candidates on this device.
bool JobManager::answered(const TaskSpec& spec, const storage::DeviceKey& d) {
  for (const wire::Candidate& c : spec.task.candidates()) {
    if (!db_.measured(spec.signature, d, codegen::kCodegenVersion, c.config())) return false;
  }
  return true;
}


void JobManager::maybe_finish(int64_t id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.busy) return;
  const storage::JobProgress p = queue_.job_progress(id);
  if (p.queued > 0 || p.leased > 0) return;
  Job& job = it->second;
  // A done task that measured fewer candidates than this job asks (it was created, or leased,
  // for another job), or whose candidates failed in a way that may not reproduce (a timeout, a
  // crash: storage::kMaxTransientFailures), is queued again with what is not settled, before
  // the job finishes; at most 1 + kMaxTransientFailures times by one job.
  bool extending = false;
  for (auto& [signature, group] : job.groups) {
    if (group.task == 0 || group.extended > storage::kMaxTransientFailures) continue;
    const int64_t task_id = group.task;
    const wire::Task todo = unmeasured(group.asked, job.device);
    if (todo.candidates_size() > 0 && queue_.extend_task(task_id, todo.SerializeAsString())) {
      ++group.extended;
      extending = true;
      log_(LogIds{id, task_id, ""}, LogEvent{"task_extended", {{"candidates", static_cast<int64_t>(todo.candidates_size())}}},
           "job " + std::to_string(id) + ": task " + std::to_string(task_id) + " extended by " +
          std::to_string(todo.candidates_size()) + " candidates not settled");
    }
  }
  if (extending) return search_.save(id, job);
  // Once per round, the round's convergence (it comes back here when recorded); then the search
  // session's next step (another round, or the leaders within noise compared), or the end.
  if (job.convergence.size() == static_cast<size_t>(job.rounds)) return search_.record_convergence(id, job);
  if (search_.next(id, job)) return;
  finish(id, job, p);
}

// The job's plan chosen from its measurements on the pool; then the job is done (or failed,
// when no plan can be made), with its summary.
void JobManager::finish(int64_t id, Job& job, const storage::JobProgress& p) {
  job.busy = true;
  auto m = std::make_shared<Measured>(decisions_.measured(*job.planner, job.device));
  // Acts only on this coming of the job (Job::epoch): not on one cancelled or resumed anew meanwhile.
  auto failed = [this, id, epoch = job.epoch](const std::string& error) {
    if (const auto it = jobs_.find(id); it == jobs_.end() || it->second.epoch != epoch) return;
    fail_job(id, "failed", error);
    jobs_.erase(id);
  };
  offload_.post(
      [this, id, epoch = job.epoch, p, m, planner = job.planner]() -> Offload::Completion {
        auto s = std::make_shared<JobSummary>(planner->summary(planner->final_plan(m->times), &m->times));
        return [this, id, epoch, p, s] {
          auto it = jobs_.find(id);
          if (it == jobs_.end() || it->second.epoch != epoch) return;  // cancelled or resumed anew meanwhile
          const Job& done = it->second;
          s->tasks = done.tasks.size();
          s->cache_hits = done.cache_hits;
          s->candidates_measured = p.measurements;
          s->interleaved_pairs = 0;  // groups whose leaders were measured interleaved, by this job or another
          for (const auto& [signature, group] : done.groups) s->interleaved_pairs += !decisions_.of(signature, done.device).interleaved.empty();
          s->search_rounds = done.rounds;
          s->convergence = done.convergence;
          s->group_convergence = done.group_convergence;
          queue_.set_job_state(id, storage::JobState::kDone, p.failed ? std::to_string(p.failed) + " tasks failed" : "",
                              s->to_json());
          log_(LogIds{id, 0, ""},
               LogEvent{"job_done",
                        {{"tasks", static_cast<int64_t>(s->tasks)}, {"tasks_failed", static_cast<int64_t>(p.failed)},
                         {"measured", static_cast<int64_t>(p.measurements)}, {"search_rounds", static_cast<int64_t>(s->search_rounds)}}},
               "job " + std::to_string(id) + " done: " + s->to_json());
          jobs_.erase(it);
        };
      },
      failed);
}


// The unfinished jobs as the database has them: a bound one resumed (prepared on the pool, with
// its search state), an unbound one waiting for a worker of its class. Jobs being loaded already
// are left to that.
void JobManager::load_unfinished() {
  for (const storage::JobRecord& rec : queue_.jobs(true)) {
    if (rec.state == storage::JobState::kCancelled || loading_.count(rec.id)) continue;
    if (!rec.identity) {  // bound when a worker of its class says hello
      waiting_[rec.id] = nullptr;
      continue;
    }
    try {
      resume(rec);
    } catch (const Error& e) {
      loading_.erase(rec.id);
      fail_job(rec.id, "cannot resume", e.what());
    }
  }
}


// Stores a planned submission (its model's row, its files moved into place already by the
// caller, then the job) and binds it when a worker can take it.
int64_t JobManager::accept(storage::JobRecord rec, const std::string& onnx, std::shared_ptr<Prepared> prepared) {
  rec.id = db_.file().write([&] {  // the model and its job: one transaction
    queue_.put_model_row(rec.model_digest, rec.model_name, onnx);
    return queue_.create_job(rec);
  });
  if (!prepared->lowered) lower_later(rec.id, prepared);
  waiting_[rec.id] = std::move(prepared);
  bind_waiting();
  if (waiting_.count(rec.id)) {
    log_(LogIds{rec.id, 0, ""}, LogEvent{"job_waiting", {{"device", rec.device.str()}}},
         "job " + std::to_string(rec.id) + " (" + rec.model_name + ") waits for a worker of " + rec.device.str());
  }
  return rec.id;
}

// A submitted job's tasks, lowered on the pool after its submission was answered; the job can
// be bound once they are there.
void JobManager::lower_later(int64_t id, std::shared_ptr<Prepared> prepared) {
  loading_.insert(id);
  offload_.post(
      [this, id, prepared]() -> Offload::Completion {
        const auto started = std::chrono::steady_clock::now();
        auto tasks = std::make_shared<std::vector<TaskSpec>>(prepared->planner->tasks());
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        return [this, id, prepared, tasks, seconds] {
          loading_.erase(id);
          auto it = waiting_.find(id);
          if (it == waiting_.end() || it->second != prepared) return;  // cancelled meanwhile
          char line[160];
          std::snprintf(line, sizeof line, "job %lld: %zu tasks lowered in %.1f s", static_cast<long long>(id), tasks->size(),
                        seconds);
          log_(LogIds{id, 0, ""}, LogEvent{"tasks_lowered", {{"tasks", static_cast<int64_t>(tasks->size())}}}, line);
          prepared->tasks = std::move(*tasks);
          prepared->lowered = true;
          bind_waiting();
        };
      },
      [this, id](const std::string& error) {
        loading_.erase(id);
        waiting_.erase(id);
        fail_job(id, "cannot start", error);
      });
}


std::vector<wire::JobStatus> JobManager::status(int64_t id) {
  std::vector<storage::JobRecord> recs;
  if (id == 0) {
    recs = queue_.jobs(false);
  } else {
    auto r = queue_.job(id);
    check(r.has_value(), "no job ", id);
    recs.push_back(*r);
  }
  std::vector<wire::JobStatus> out;
  for (const storage::JobRecord& r : recs) out.push_back(job_status_of(r, queue_.job_progress(r.id)));
  return out;
}

void JobManager::cancel(int64_t id, const std::string& reason) {
  const auto r = queue_.job(id);
  check(r.has_value(), "no job ", id);
  if (r->state == storage::JobState::kDone || r->state == storage::JobState::kFailed ||
      r->state == storage::JobState::kCancelled) {
    return;
  }
  queue_.set_job_state(id, storage::JobState::kCancelled, reason);
  std::vector<int64_t> tasks;
  if (const auto j = jobs_.find(id); j != jobs_.end()) tasks = j->second.tasks;
  jobs_.erase(id);
  waiting_.erase(id);
  log_(LogIds{id, 0, ""}, LogEvent{"job_cancelled", {{"reason", reason}}}, "job " + std::to_string(id) + ": " + reason);
  // Its tasks no live job waits on are taken back from their workers.
  std::set<int64_t> needed;
  for (const auto& [other, job] : jobs_) needed.insert(job.tasks.begin(), job.tasks.end());
  std::vector<int64_t> unneeded;
  for (const int64_t t : tasks) {
    if (!needed.count(t)) unneeded.push_back(t);
  }
  scheduler_.revoke(unneeded, "job " + std::to_string(id) + " was cancelled");
}

}  // namespace fusetune::coordinator
