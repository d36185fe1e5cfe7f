#include "coordinator/server.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "codegen/kernel_ir.h"
#include "coordinator/job_planner.h"
#include "coordinator/offload.h"
#include "coordinator/status_json.h"
#include "coordinator/uploads.h"
#include "core/parallel.h"
#include "core/error.h"
#include "core/inert_text.h"
#include "core/files.h"
#include "core/log.h"
#include "dashboards/http_server.h"
#include "dashboards/metrics.h"
#include "proto/wire.h"
#include "search/decision.h"
#include "search/learned_model.h"
#include "search/mutation.h"
#include "storage/job_queue.h"
#include "storage/search_db.h"

namespace fusetune::coordinator {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A peer's identity for logs: as it is when printable (workers name themselves), else in hex
// (ZeroMQ's generated identities are binary).
std::string peer_name(const std::string& identity) {
  bool printable = !identity.empty();
  for (char c : identity) printable = printable && c >= 0x20 && c < 0x7f;
  if (printable) return identity;
  static const char* hex = "0123456789abcdef";
  std::string out = "peer-";
  for (unsigned char c : identity) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

storage::DeviceKey job_device_key(const std::string& device) {
  return device == "host" ? storage::DeviceKey{"host", "host"} : storage::DeviceKey{device, planner::find_device(device).arch};
}

}  // namespace

namespace {

// A model imported and planned, with its tasks lowered: what the pool hands the event loop.
struct Prepared {
  std::shared_ptr<const JobPlanner> planner;
  std::vector<TaskSpec> tasks;
  bool lowered = false;  // `tasks` made (a submission is answered before: they follow on the pool)
  // A job resumed in the middle of its search: what its later rounds asked of each group (by
  // signature), lowered again from the configurations its search state names.
  std::map<std::string, std::vector<wire::Candidate>> asked_later;
};

// Imports and plans a stored model and, with `lower`, lowers its tasks (the slow part of a
// submission; on the pool).
std::shared_ptr<Prepared> prepare(const fs::path& onnx, const std::string& name, const std::string& device,
                                  const JobOptions& options, bool lower = true) {
  auto p = std::make_shared<Prepared>();
  auto planner = std::make_shared<const JobPlanner>(onnx, name, device, options);
  if (lower) p->tasks = planner->tasks();
  p->lowered = lower;
  p->planner = std::move(planner);
  return p;
}

// The candidates a resumed job's search rounds asked beyond each group's first (the search state's
// "groups": {signature: {"asked": [config, ...]}}), lowered again from the group's search space,
// where every round's offspring come from (search::next_trials).
std::map<std::string, std::vector<wire::Candidate>> lower_asked_later(const Prepared& p, const std::string& search_state) {
  std::map<std::string, std::vector<wire::Candidate>> out;
  const nlohmann::json state = nlohmann::json::parse(search_state, nullptr, false);
  if (!state.is_object() || !state.contains("groups") || !state["groups"].is_object()) return out;
  const nlohmann::json& groups = state["groups"];
  for (const TaskSpec& spec : p.tasks) {
    const auto g = groups.find(spec.signature);
    if (g == groups.end() || !g->is_object() || !g->contains("asked") || !(*g)["asked"].is_array()) continue;
    std::set<std::string> first;
    for (const wire::Candidate& c : spec.task.candidates()) first.insert(c.config());
    std::map<std::string, planner::TileConfig> space;
    for (const planner::Candidate& c : p.planner->group(spec.signature).candidates) space.emplace(c.config.str(), c.config);
    std::vector<planner::TileConfig> configs;
    for (const nlohmann::json& config : (*g)["asked"]) {
      if (!config.is_string() || first.count(config.get<std::string>())) continue;
      if (const auto it = space.find(config.get<std::string>()); it != space.end()) configs.push_back(it->second);
    }
    if (!configs.empty()) out[spec.signature] = p.planner->lower(spec.task, configs);
  }
  return out;
}

// A submission admitted: its model's digest, the .onnx's path in the model's directory, and the
// model imported and planned.
struct Admitted {
  std::string digest;
  std::string onnx;
  std::shared_ptr<Prepared> prepared;
};

// Checks that the staged files are exactly those the Submit names (each whole, nothing more);
// imports and plans the model with `plan` while the files are digested on another thread (each
// reads them once); then moves them into the model store. The staged directory is gone
// afterwards, whatever happens.
Admitted admit(const fs::path& db, const wire::Submit& s, const Staged& st,
               const std::function<std::shared_ptr<Prepared>(const fs::path& onnx)>& plan) {
  struct Cleanup {
    const fs::path& dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{st.dir};
  check(s.files_size() > 0, "submit: no model file");
  std::vector<std::string> paths;
  std::set<std::string> seen;
  for (const wire::ModelFile& f : s.files()) {
    const std::string rel = path_inside(f.path(), "submit: model file").string();
    check(seen.insert(rel).second, "submit: model file '", rel, "' is named twice");
    const auto got = st.received.find(rel);
    const uint64_t want = f.size();
    check(got != st.received.end(), "submit: model file '", rel, "' was not uploaded");
    check(got->second == want, "submit: model file '", rel, "' is ", want, " bytes and ", got->second,
          " arrived (an upload cut short, or pieces sent twice)");
    std::error_code ec;
    check(fs::file_size(st.dir / rel, ec) == want && !ec, "submit: model file '", rel, "' is not ", want,
          " bytes on disk");
    paths.push_back(rel);
  }
  check(st.received.size() == paths.size(), "submit: ", st.received.size() - paths.size(),
        " uploaded files are not named by the submission");
  std::future<std::string> digest = std::async(std::launch::async, [&] { return model_digest(st.dir, paths); });
  Admitted a;
  a.onnx = paths.front();
  a.prepared = plan(st.dir / a.onnx);  // its mapped weights stay valid when the directory moves
  a.digest = digest.get();
  storage::JobQueue::store_model_files(db, a.digest, st.dir);
  return a;
}

// A group's part of the next search round: what the loop read from the database (the task it
// extends, the parents, what was tried, how many trials fit the budget), and the kernels the pool
// lowered for it.
struct RoundAsk {
  std::string signature;
  wire::Task asked;
  std::vector<std::string> parents;
  std::set<std::string> tried;
  size_t trials = 0;
  std::vector<wire::Candidate> offspring;
};

}  // namespace

struct Server::State {
  struct Worker {
    std::string identity;
    wire::Hello hello;
    storage::DeviceKey device;
    Clock::time_point last_seen;
    std::map<int64_t, int64_t> leases;  // task -> lease deadline (unix ms)
    size_t depth = 1;  // tasks it may hold at once (Hello.queue_depth): the next one compiles while one is measured
    bool draining = false;  // stopping (Heartbeat.draining): given nothing more
    // Leases it handed straight back since its last result, and when it may be offered the next:
    // a worker that hands back everything (a full hand after a coordinator restart) is offered
    // tasks 0.1, 0.2, 0.4 ... up to 5 s apart, not thousands of times a second.
    int handed_back = 0;
    Clock::time_point offer_after{};
  };
  struct Job {
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
    int rounds = 0;  // search rounds after the first
    bool busy = false;          // the pool works for it (a search round, its convergence, its final plan)
    bool search_over = false;   // a round queued nothing: no further round is tried
    nlohmann::json convergence = nlohmann::json::array();
    nlohmann::json group_convergence = nlohmann::json::object();
  };

  zmq::context_t& context;
  ServerOptions opt;
  storage::SearchDb db;      // the tuning records
  storage::JobQueue queue;   // jobs and tasks, in the same file
  std::unique_ptr<wire::Authenticator> auth;  // before the socket: it must be bound when peers connect
  zmq::socket_t socket;
  std::map<std::string, Worker> workers;  // by identity
  std::map<int64_t, Job> jobs;            // running jobs, loaded
  // Queued jobs waiting for a worker of their device class, with the model prepared at submission
  // (a job resumed after a restart has none: it is prepared on the pool when a worker could take
  // it, `loading` meanwhile).
  std::map<int64_t, std::shared_ptr<Prepared>> waiting;
  std::set<int64_t> loading;
  int64_t last_served_job = 0;
  Clock::time_point last_expiry = Clock::now();
  Uploads uploads;  // uploads under way (coordinator/uploads.h)
  // The model store's bytes (the models stored beside the database): measured when the coordinator
  // starts, grown by each submission's files (a model stored twice counts twice until a restart).
  uint64_t stored_bytes = 0;
  // The WAL is copied back into the file by the pool, through a connection of its own, once a
  // second: a commit on the loop never waits for that copy's syncs.
  std::shared_ptr<storage::DbFile> checkpointer;
  Clock::time_point last_checkpoint = Clock::now();
  bool checkpointing = false;
  // What /metrics counts besides the database's rows (since this coordinator started), and the
  // moments its latencies are measured from: a worker's slot freed (its result, its hello) until
  // its next lease is sent, and a task's lease until its result.
  struct Counters {
    std::map<std::string, uint64_t> candidates_by_status;
    // Results refused, by reason: unknown_peer, unknown_task, not_lease_holder, not_asked.
    std::map<std::string, uint64_t> results_refused;
    uint64_t results = 0, leases = 0, lease_expiries = 0, cache_hits = 0;
    uint64_t role_refusals = 0;  // messages of a role the peer's key does not have
    dashboards::Histogram dispatch_seconds{{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
    dashboards::Histogram task_seconds{{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}};
  } counters;
  std::map<std::string, Clock::time_point> slot_freed;  // worker identity -> when it could take a task
  std::map<int64_t, Clock::time_point> leased_at;       // task -> when it was leased
  // Each worker's recent leases, for the dashboard's timelines: the task, its lease and its end
  // (open while it is held), and how it ended ("ok", "failed": no candidate ok, "handed back",
  // "expired", "lost": the worker went silent or left).
  struct Span {
    int64_t task = 0;
    Clock::time_point from, to;
    std::string outcome;  // empty while held
  };
  std::map<std::string, std::deque<Span>> timelines;  // by worker identity, the last kTimeline
  static constexpr size_t kTimeline = 200;
  void close_span(const std::string& identity, int64_t task, const std::string& outcome) {
    const auto t = timelines.find(identity);
    if (t == timelines.end()) return;
    for (Span& sp : t->second) {
      if (sp.task == task && sp.outcome.empty()) {
        sp.to = Clock::now();
        sp.outcome = outcome;
      }
    }
  }
  std::unique_ptr<dashboards::HttpServer> http;
  // The pools last: destroyed first, so no pool thread outlives what it was given.
  Offload offload;
  Offload disk{1};  // writes upload pieces, never behind the pool's planning

  State(zmq::context_t& ctx, ServerOptions o)
      : context(ctx), opt(std::move(o)), db(opt.db), queue(db), socket(ctx, zmq::socket_type::router),
        uploads(opt.db, {opt.max_upload_bytes, opt.max_client_upload_bytes, opt.max_store_bytes}),
        offload(opt.work_threads) {
    db.file().set_auto_checkpoint(false);
    if (opt.security.enabled()) {
      auth = std::make_unique<wire::Authenticator>(context, opt.security, [this](const std::string& l) { log(l); });
    }
  }

  // A line of the coordinator's log (core/log.h), naming the job, task and worker it concerns.
  void log(const LogIds& ids, const std::string& line, LogLevel level = LogLevel::kInfo) const {
    const std::string text = format_log_line(level, "coordinator", ids, line, log_format());
    if (opt.log) opt.log(text);
    else std::fprintf(stderr, "%s\n", text.c_str());
  }
  void log(const std::string& line, LogLevel level = LogLevel::kInfo) const { log(LogIds{}, line, level); }

  void send(const std::string& identity, wire::Envelope e) {
    std::string bytes = wire::encode(std::move(e));
    if (holding) {  // inside a poll's transaction: sent once it commits (flush_held)
      unsent.emplace_back(identity, std::move(bytes));
      return;
    }
    socket.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  }
  // Sends what a poll's transaction held back, now that what it says is committed. A lease sent
  // before its commit could reach a worker and then vanish with a killed coordinator, its task id
  // given to another task by the next one.
  void flush_held() {
    holding = false;
    std::vector<std::pair<std::string, std::string>> out = std::move(unsent);
    unsent.clear();
    for (const auto& [identity, bytes] : out) {
      socket.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    }
  }
  // Why the database cannot be written (a full disk), empty while it can: meanwhile new work
  // (hellos, results, submissions, uploads, cancels) is refused with this, status and exports
  // are answered, nothing is leased, and a write is tried once a second to resume by itself.
  std::string unwritable;
  std::chrono::system_clock::time_point unwritable_since;
  Clock::time_point last_write_probe;
  std::string unwritable_warning() const {
    const std::time_t since = std::chrono::system_clock::to_time_t(unwritable_since);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&since));
    return "the coordinator cannot write its database since " + std::string(when) + " (" + unwritable +
           "): it takes no new work until it can";
  }
  bool holding = false;                                   // a poll's transaction is open
  std::vector<std::pair<std::string, std::string>> unsent;  // (peer, frame) to send after it commits
  void send_error(const std::string& identity, const std::string& message) {
    wire::Envelope e;
    e.mutable_error()->set_message(message);
    send(identity, std::move(e));
  }

  // ---- jobs ----

  // A job's model, imported, planned and lowered again from the files the database keeps: the
  // read here, the rest on the pool; `then` runs on the loop with the result, or the job fails.
  void load_model(const storage::JobRecord& rec, std::function<void(std::shared_ptr<Prepared>)> then) {
    const auto model = queue.model(rec.model_digest);
    check(model.has_value(), "job ", rec.id, ": model ", rec.model_digest.substr(0, 12), " is missing from the database");
    offload.post(
        [onnx = model->onnx, rec, then]() -> Offload::Completion {
          auto p = prepare(onnx, rec.model_name, rec.device.name, JobOptions::from_json(rec.options));
          if (!rec.search_state.empty()) p->asked_later = lower_asked_later(*p, rec.search_state);
          return [then, p] { then(p); };
        },
        [this, id = rec.id](const std::string& error) {
          loading.erase(id);
          waiting.erase(id);
          queue.set_job_state(id, storage::JobState::kFailed, error);
          log(LogIds{id, 0, ""}, "job " + std::to_string(id) + " cannot start: " + error, LogLevel::kWarn);
        });
  }

  // A bound job found unfinished at start-up: its model is prepared on the pool, then it starts
  // (unless it was cancelled meanwhile).
  void resume(const storage::JobRecord& rec) {
    loading.insert(rec.id);
    load_model(rec, [this, rec](std::shared_ptr<Prepared> p) {
      loading.erase(rec.id);
      const auto now = queue.job(rec.id);
      if (!now || (now->state != storage::JobState::kRunning && now->state != storage::JobState::kQueued)) return;
      try {
        start_job(rec, std::move(p));
      } catch (const Error& e) {
        queue.set_job_state(rec.id, storage::JobState::kFailed, e.what());
        log(LogIds{rec.id, 0, ""}, "job " + std::to_string(rec.id) + " cannot resume: " + e.what(), LogLevel::kWarn);
      }
    });
  }

  // Binds every queued job that waits for a device class some connected worker has to that
  // worker's identity (the identity most connected workers of the class share; the smallest, by
  // its text, of a tie) and starts it.
  void bind_waiting() {
    for (auto it = waiting.begin(); it != waiting.end();) {
      const auto rec = queue.job(it->first);
      if (!rec || rec->state != storage::JobState::kQueued) {
        it = waiting.erase(it);
        continue;
      }
      std::map<std::string, std::pair<int, const storage::DeviceKey*>> identities;  // by str()
      for (const auto& [identity, w] : workers) {
        if (!w.device.same_class(rec->device)) continue;
        auto& [count, key] = identities[w.device.str()];
        ++count;
        key = &w.device;
      }
      if (identities.empty() || loading.count(it->first) || (it->second && !it->second->lowered)) {
        ++it;
        continue;
      }
      if (!it->second) {  // resumed after a restart: prepared on the pool, then bound
        loading.insert(rec->id);
        try {
          load_model(*rec, [this, id = rec->id](std::shared_ptr<Prepared> p) {
            loading.erase(id);
            if (!waiting.count(id)) return;  // cancelled meanwhile
            waiting[id] = std::move(p);
            bind_waiting();
          });
        } catch (const Error& e) {
          loading.erase(rec->id);
          queue.set_job_state(rec->id, storage::JobState::kFailed, e.what());
          log(LogIds{rec->id, 0, ""}, "job " + std::to_string(rec->id) + " cannot start: " + e.what(), LogLevel::kWarn);
          it = waiting.erase(it);
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
      bound.identity = queue.bind_job(rec->id, *best->second.second);
      std::shared_ptr<Prepared> prepared = std::move(it->second);
      it = waiting.erase(it);
      try {
        start_job(bound, std::move(prepared));
      } catch (const Error& e) {
        queue.set_job_state(bound.id, storage::JobState::kFailed, e.what());
        log(LogIds{bound.id, 0, ""}, "job " + std::to_string(bound.id) + " cannot start: " + e.what(), LogLevel::kWarn);
      }
    }
  }

  // Makes a bound job's tasks (cache hits skipped) from its prepared model and marks it running.
  // Only measurements of the job's identity answer; those of near identities (the same device
  // class under another driver or toolkit) order each task's candidates. A job found running (a
  // coordinator restarted under it) is resumed instead: its tasks are those linked to it, its
  // cache hits those counted when it started, and its search (rounds, convergence, what each
  // group asked, elapsed time) the state save_search left.
  void start_job(const storage::JobRecord& rec, std::shared_ptr<Prepared> prepared) {
    check(rec.identity.has_value(), "job ", rec.id, " is not bound to a device identity");
    const storage::DeviceKey& device = *rec.identity;
    const bool resumed = rec.state == storage::JobState::kRunning;
    const nlohmann::json saved = nlohmann::json::parse(rec.search_state.empty() ? "{}" : rec.search_state, nullptr, false);
    const nlohmann::json saved_groups = saved.is_object() ? saved.value("groups", nlohmann::json::object()) : nlohmann::json::object();
    std::map<std::string, int64_t> linked;  // a resumed job's tasks, by signature
    if (resumed) {
      for (const storage::TaskRecord& t : queue.job_tasks(rec.id)) linked[t.signature] = t.id;
    }
    Job job;
    job.device = device;
    job.planner = prepared->planner;
    if (resumed) restore_search(job, rec, saved);
    size_t seeded = 0;
    db.file().write([&] {  // the job's tasks and its state: one transaction
      for (const TaskSpec& spec : prepared->tasks) {
        db.commit_workload(spec.signature, spec.canonical_form);
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
          ++counters.cache_hits;
          continue;
        }
        // Only what the database lacks is measured; a task measured before for fewer candidates
        // (another job's, with a smaller --candidates) is extended when it is done (maybe_finish).
        wire::Task todo = unmeasured(spec.task, device);
        seeded += seed_order(todo, device);
        const int64_t id = queue.ensure_task(spec.signature, device, codegen::kCodegenVersion, todo.SerializeAsString());
        queue.link_job_task(rec.id, id);
        job.tasks.push_back(id);
        group.task = id;
      }
      nlohmann::json progress = {{"cache_hits", job.cache_hits}};
      queue.set_job_state(rec.id, storage::JobState::kRunning, "", progress.dump());
    });
    log(LogIds{rec.id, 0, ""}, "job " + std::to_string(rec.id) + " (" + rec.model_name + " on " + device.str() + "): " +
        std::to_string(job.tasks.size()) + " tasks, " + std::to_string(job.cache_hits) + " answered by the database, " +
        std::to_string(seeded) + " ordered by measurements of near identities" +
        (resumed ? "; resumed after " + std::to_string(job.rounds) + " search rounds (" +
                       std::to_string(job.convergence.size()) + " recorded)"
                 : ""));
    jobs[rec.id] = std::move(job);
    maybe_finish(rec.id);
  }

  // A resumed job's figures as they were: the cache hits counted when it started (the job's
  // progress), and its search state (save_search).
  static void restore_search(Job& job, const storage::JobRecord& rec, const nlohmann::json& saved) {
    const nlohmann::json progress = nlohmann::json::parse(rec.summary.empty() ? "{}" : rec.summary, nullptr, false);
    if (progress.is_object()) job.cache_hits = progress.value("cache_hits", size_t{0});
    if (!saved.is_object()) return;
    job.rounds = saved.value("rounds", 0);
    job.search_over = saved.value("search_over", false);
    job.convergence = saved.value("convergence", nlohmann::json::array());
    job.group_convergence = saved.value("group_convergence", nlohmann::json::object());
    job.started = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(saved.value("elapsed_s", 0.0)));
  }

  // Stores what a restarted coordinator needs to resume the job's search where it is: its
  // rounds, convergence, elapsed time, and per group what it asked (configurations), whether its
  // leaders were compared and how often its task was extended. Called whenever one of them changes.
  void save_search(int64_t id, const Job& job) {
    nlohmann::json groups = nlohmann::json::object();
    for (const auto& [signature, group] : job.groups) {
      nlohmann::json asked = nlohmann::json::array();
      for (const wire::Candidate& c : group.asked.candidates()) asked.push_back(c.config());
      groups[signature] = {{"asked", std::move(asked)}, {"compared", group.compared}, {"extended", group.extended}};
    }
    const nlohmann::json state = {{"rounds", job.rounds},
                                  {"elapsed_s", std::chrono::duration<double>(Clock::now() - job.started).count()},
                                  {"search_over", job.search_over},
                                  {"convergence", job.convergence},
                                  {"group_convergence", job.group_convergence},
                                  {"groups", std::move(groups)}};
    queue.set_search_state(id, state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }

  // The task with only the candidates not measured yet (successfully or not) on this device.
  wire::Task unmeasured(const wire::Task& task, const storage::DeviceKey& d) {
    wire::Task todo = task;
    todo.clear_candidates();
    for (const wire::Candidate& c : task.candidates()) {
      if (!db.measured(task.signature(), d, codegen::kCodegenVersion, c.config())) *todo.add_candidates() = c;
    }
    return todo;
  }

  // Puts the candidates that near identities of `d` measured first, fastest first, the others
  // after them in the planner's order; returns 1 when the order came from such measurements.
  int seed_order(wire::Task& task, const storage::DeviceKey& d) {
    std::map<std::string, double> near;  // config -> fastest median on a near identity
    for (const storage::Measurement& m : db.near_top_k(task.signature(), d, codegen::kCodegenVersion, 1000)) {
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
  bool answered(const TaskSpec& spec, const storage::DeviceKey& d) {
    for (const wire::Candidate& c : spec.task.candidates()) {
      if (!db.measured(spec.signature, d, codegen::kCodegenVersion, c.config())) return false;
    }
    return true;
  }

  // What the database holds for the job's groups: times for final_plan (a candidate whose every
  // measurement failed is infinite) and the source digests of the kernels the times are of.
  struct Measured {
    planner::Measurements times;
    MeasuredDigests digests;
  };
  // The decision rule (search/decision.h) over a group's successful measurements on the job's
  // identity, the source digest each candidate was measured with, and every config with any
  // measurement. Read once and kept until a result for the signature arrives (on_result drops
  // it), as a job's settling asks for each group's several times.
  struct Decided {
    search::GroupDecision decision;
    std::map<std::string, std::string> digests;
    std::set<std::string> seen;
    std::set<std::pair<std::string, std::string>> interleaved;  // pairs measured in turn, both orders
  };
  std::map<std::pair<std::string, std::string>, Decided> decided;  // by signature and identity

  const Decided& decided_for(const Job& job, const std::string& signature) {
    const auto key = std::make_pair(signature, job.device.str());
    if (auto it = decided.find(key); it != decided.end()) return it->second;
    std::map<std::string, std::vector<storage::Measurement>> ok;
    Decided d;
    for (storage::Measurement& r : db.top_k(signature, job.device, codegen::kCodegenVersion, 100000)) {
      d.digests.emplace(r.config, r.source_digest);
      if (!r.interleaved_with.empty()) {
        d.interleaved.insert({r.config, r.interleaved_with});
        d.interleaved.insert({r.interleaved_with, r.config});
      }
      ok[r.config].push_back(std::move(r));
    }
    d.decision = search::decide_group(ok);
    d.seen = db.configs_measured(signature, job.device, codegen::kCodegenVersion);
    return decided[key] = std::move(d);
  }
  std::pair<search::GroupDecision, std::map<std::string, std::string>> decide(const Job& job, const std::string& signature) {
    const Decided& d = decided_for(job, signature);
    return {d.decision, d.digests};
  }

  Measured measured(const Job& job) {
    Measured m;
    for (const planner::GroupPlan& gp : job.planner->modeled().compared) {
      // What has any measurement is known, so the space's untried configurations (up to
      // kSearchSpace per group) cost no query each.
      const Decided& d = decided_for(job, gp.signature);
      for (const planner::Candidate& c : gp.candidates) {
        const std::string cfg = c.config.str();
        if (auto it = d.decision.time_us.find(cfg); it != d.decision.time_us.end()) {
          m.times[{gp.signature, cfg}] = it->second;
          m.digests[{gp.signature, cfg}] = d.digests.at(cfg);
        } else if (d.seen.count(cfg) && db.measured(gp.signature, job.device, codegen::kCodegenVersion, cfg)) {
          m.times[{gp.signature, cfg}] = INFINITY;
        }
      }
    }
    return m;
  }

  void maybe_finish(int64_t id) {
    auto it = jobs.find(id);
    if (it == jobs.end() || it->second.busy) return;
    const storage::JobProgress p = queue.job_progress(id);
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
      if (todo.candidates_size() > 0 && queue.extend_task(task_id, todo.SerializeAsString())) {
        ++group.extended;
        extending = true;
        log(LogIds{id, task_id, ""}, "job " + std::to_string(id) + ": task " + std::to_string(task_id) + " extended by " +
            std::to_string(todo.candidates_size()) + " candidates not settled");
      }
    }
    if (extending) return save_search(id, job);
    // Once per round, the round's convergence (it comes back here when recorded); then another
    // round, or the leaders within noise compared, or the end.
    if (job.convergence.size() == static_cast<size_t>(job.rounds)) return record_convergence(id, job);
    if (search_round(id, job) || compare_leaders(id, job)) return;
    finish(id, job, p);
  }

  // The job's plan chosen from its measurements on the pool; then the job is done (or failed,
  // when no plan can be made), with its summary.
  void finish(int64_t id, Job& job, const storage::JobProgress& p) {
    job.busy = true;
    auto m = std::make_shared<Measured>(measured(job));
    auto failed = [this, id](const std::string& error) {
      if (!jobs.count(id)) return;  // cancelled meanwhile
      queue.set_job_state(id, storage::JobState::kFailed, error);
      log(LogIds{id, 0, ""}, "job " + std::to_string(id) + " failed: " + error, LogLevel::kWarn);
      jobs.erase(id);
    };
    offload.post(
        [this, id, p, m, planner = job.planner]() -> Offload::Completion {
          auto s = std::make_shared<JobSummary>(planner->summary(planner->final_plan(m->times), &m->times));
          return [this, id, p, s] {
            auto it = jobs.find(id);
            if (it == jobs.end()) return;  // cancelled meanwhile
            const Job& done = it->second;
            s->tasks = done.tasks.size();
            s->cache_hits = done.cache_hits;
            s->candidates_measured = p.measurements;
            s->interleaved_pairs = static_cast<int>(
                std::count_if(done.groups.begin(), done.groups.end(), [](const auto& g) { return g.second.compared; }));
            s->search_rounds = done.rounds;
            s->convergence = done.convergence;
            s->group_convergence = done.group_convergence;
            queue.set_job_state(id, storage::JobState::kDone, p.failed ? std::to_string(p.failed) + " tasks failed" : "",
                                s->to_json());
            log(LogIds{id, 0, ""}, "job " + std::to_string(id) + " done: " + s->to_json());
            jobs.erase(it);
          };
        },
        failed);
  }

  // Queues a group's task with `todo` as its payload: extends the task when it is done, creates it
  // (linked to the job) for a group the database had answered. Returns the task's id when it is
  // queued, 0 when it is someone else's and in flight (it is then left alone).
  int64_t requeue_group(int64_t id, Job& job, Job::Group& group, const wire::Task& todo) {
    const std::string payload = todo.SerializeAsString();
    if (group.task == 0) {
      group.task = queue.ensure_task(todo.signature(), job.device, codegen::kCodegenVersion, payload);
      queue.link_job_task(id, group.task);
      job.tasks.push_back(group.task);
    }
    const bool queued = queue.extend_task(group.task, payload) || queue.task(group.task)->state == storage::TaskState::kQueued;
    return queued ? group.task : 0;
  }

  // The trials of the job's budget for one group: JobOptions::trials spread over the groups, or
  // kRoundsByDefault rounds of `candidates`; never fewer than one round.
  int group_budget(const Job& job) const {
    const JobOptions& o = job.planner->options();
    if (o.trials == 0) return kRoundsByDefault * o.candidates;
    return std::max(o.candidates, o.trials / std::max<int>(1, static_cast<int>(job.groups.size())));
  }

  // Appends the job's best so far (the plan its measurements choose now, chosen on the pool) and
  // each group's best after the round that just settled, then goes on with maybe_finish.
  void record_convergence(int64_t id, Job& job) {
    const double seconds = std::chrono::duration<double>(Clock::now() - job.started).count();
    int64_t trials = 0;
    for (const auto& [signature, group] : job.groups) {
      const search::GroupDecision d = decide(job, signature).first;
      int64_t tried = 0;
      for (const wire::Candidate& c : group.asked.candidates()) {
        tried += db.measured(signature, job.device, codegen::kCodegenVersion, c.config());
      }
      trials += tried;
      double best = INFINITY;
      for (const auto& [config, us] : d.time_us) best = std::min(best, us);
      job.group_convergence[signature].push_back(
          {tried, std::isfinite(best) ? nlohmann::json(best) : nlohmann::json(), seconds});
    }
    auto record = [this, id, trials, seconds](double tuned) {
      auto it = jobs.find(id);
      if (it == jobs.end()) return;  // cancelled meanwhile
      it->second.busy = false;
      it->second.convergence.push_back({{"round", it->second.rounds + 1},
                                        {"trials", trials},
                                        {"seconds", seconds},
                                        {"tuned_us", std::isfinite(tuned) ? nlohmann::json(tuned) : nlohmann::json()}});
      save_search(id, it->second);
      maybe_finish(id);
    };
    job.busy = true;
    auto m = std::make_shared<Measured>(measured(job));
    offload.post(
        [m, record, planner = job.planner]() -> Offload::Completion {
          const double tuned = planner->summary(planner->final_plan(m->times)).tuned_us;
          return [record, tuned] { record(tuned); };
        },
        [record](const std::string&) { record(NAN); });  // nothing measured works yet: no plan to report
  }

  // One round of the search for every group with budget left (and the job within its time): the
  // untried neighbors of its three best measured configurations, or else the best ranked untried
  // ones (search/mutation.h), ranked by the learned model once this identity's measurements of
  // the job's groups suffice and by the cost model before, as many as `candidates` and the budget
  // allow. What the model learns from is read on the loop; it is trained, and the trials picked and
  // lowered, on the pool (the job busy meanwhile); queue_round queues them on the groups' tasks
  // when they land, and a round that queues nothing ends the search. Returns whether a round was
  // started.
  bool search_round(int64_t id, Job& job) {
    if (job.search_over) return false;
    const JobOptions& o = job.planner->options();
    if (o.time_s > 0 && std::chrono::duration<double>(Clock::now() - job.started).count() >= o.time_s) return false;
    const int budget = group_budget(job);
    // The learned model's data: what this identity measured of the job's groups so far (the cost
    // model ranks while that is too little: LearnedModel::kMinGroups, kMinSamples).
    std::vector<search::MeasuredGroup> data;
    std::vector<RoundAsk> asks;
    for (auto& [signature, group] : job.groups) {
      const search::GroupDecision d = decide(job, signature).first;
      search::MeasuredGroup m;
      for (const planner::Candidate& c : job.planner->group(signature).candidates) {
        const auto it = d.time_us.find(c.config.str());
        if (it == d.time_us.end() || !c.config.library.empty()) continue;
        m.candidates.push_back(c);
        m.median_us.push_back(it->second);
      }
      data.push_back(std::move(m));
      // Tried: what this job asked, and whatever the database holds for the group on this identity
      // (another job's rounds count against the budget too).
      RoundAsk a{signature, group.asked, {}, decided_for(job, signature).seen, 0, {}};
      for (const wire::Candidate& c : group.asked.candidates()) a.tried.insert(c.config());
      int generated = 0;  // library calls are measured besides the budget
      for (const std::string& config : a.tried) generated += config.find("library=") == std::string::npos;
      if (generated >= budget) continue;
      std::vector<std::pair<double, std::string>> ranked;
      for (const auto& [config, us] : d.time_us) ranked.emplace_back(us, config);
      std::sort(ranked.begin(), ranked.end());
      for (size_t k = 0; k < ranked.size() && k < 3; ++k) a.parents.push_back(ranked[k].second);
      if (a.parents.empty()) continue;  // nothing works yet: no parent to mutate
      a.trials = static_cast<size_t>(std::min(o.candidates, budget - generated));
      asks.push_back(std::move(a));
    }
    if (asks.empty()) return false;
    job.busy = true;
    auto round = std::make_shared<std::vector<RoundAsk>>(std::move(asks));
    auto landed = [this, id, round](const std::string& ranked_by) {
      auto it = jobs.find(id);
      if (it == jobs.end()) return;  // cancelled meanwhile
      it->second.busy = false;
      if (ranked_by.empty() || !queue_round(it->second, id, *round, ranked_by)) {
        it->second.search_over = true;
        save_search(id, it->second);
        maybe_finish(id);
      }
    };
    offload.post(
        [round, data = std::move(data), planner = job.planner, landed]() -> Offload::Completion {
          search::LearnedModel model;
          model.train(data);
          parallel_for(round->size(), [&](size_t i) {
            RoundAsk& a = (*round)[i];
            const std::vector<planner::Candidate>& space = planner->group(a.signature).candidates;
            const std::vector<double> scores = model.trained() ? model.score(space) : std::vector<double>();
            a.offspring = planner->lower(a.asked, search::next_trials(space, a.parents, a.tried, a.trials,
                                                                     scores.empty() ? nullptr : &scores));
          });
          const std::string ranked_by =
              model.trained() ? "learned model (" + std::to_string(model.samples()) + " measurements)"
                              : "cost model (" + std::to_string(model.samples()) + " measurements: too few to learn from)";
          return [landed, ranked_by] { landed(ranked_by); };
        },
        [this, id, landed](const std::string& error) {
          log(LogIds{id, 0, ""}, "job " + std::to_string(id) + ": a search round failed, the search ends: " + error);
          landed("");
        });
    return true;
  }

  // A search round lowered: each group's offspring not measured or asked yet queued on its task.
  // A task in flight for another job (the round landed while a job sharing it measured its own)
  // gets them once it is done: they are asked, so maybe_finish extends the task with them. A round
  // that queues nothing (offspring the code generator cannot express, or all measured meanwhile)
  // ends the search; returns whether it queued any.
  bool queue_round(Job& job, int64_t id, std::vector<RoundAsk>& asks, const std::string& ranked_by) {
    int queued = 0, trials = 0;
    for (RoundAsk& a : asks) {
      Job::Group& group = job.groups.at(a.signature);
      // While the round was lowered, results went on arriving (another job's round on a shared
      // task may have measured the same configurations): what is measured or asked now is left out.
      std::set<std::string> settled = db.configs_measured(a.signature, job.device, codegen::kCodegenVersion);
      for (const wire::Candidate& c : group.asked.candidates()) settled.insert(c.config());
      wire::Task todo = group.asked;
      todo.clear_candidates();
      for (const wire::Candidate& c : a.offspring) {
        if (settled.count(c.config())) continue;
        *todo.add_candidates() = c;
        *group.asked.add_candidates() = c;
      }
      if (todo.candidates_size() == 0) continue;
      group.extended = 0;
      requeue_group(id, job, group, todo);  // 0: in flight for another job, extended after
      ++queued;
      trials += todo.candidates_size();
    }
    if (queued == 0) {
      job.search_over = true;
      return false;
    }
    ++job.rounds;
    save_search(id, job);
    log(LogIds{id, 0, ""}, "job " + std::to_string(id) + ": search round " + std::to_string(job.rounds + 1) + ": " + std::to_string(trials) +
        " mutations of the best measured configurations in " + std::to_string(queued) + " groups, ranked by the " +
        ranked_by);
    return true;
  }

  // For every group of the job whose two fastest candidates are within each other's noise and
  // not yet measured interleaved (search::decide_group), queues the group's task again with just
  // those two and Policy::interleave, once per group and job; returns whether it queued any (the
  // job then waits).
  bool compare_leaders(int64_t id, Job& job) {
    bool queued = false;
    for (auto& [signature, group] : job.groups) {
      if (group.compared) continue;
      const Decided& decided_now = decided_for(job, signature);
      const search::GroupDecision decision = decided_now.decision;
      const auto& pair = decision.to_interleave;
      if (!pair) continue;
      if (!decided_now.interleaved.empty()) {  // compared already, by a job sharing the task: once per group
        group.compared = true;
        continue;
      }
      wire::Task todo = group.asked;
      todo.clear_candidates();
      for (const std::string& config : {pair->first, pair->second}) {
        for (const wire::Candidate& c : group.asked.candidates()) {
          if (c.config() == config) *todo.add_candidates() = c;
        }
      }
      if (todo.candidates_size() != 2) continue;  // measured for another job's candidates: not ours to compare
      todo.mutable_policy()->set_interleave(true);
      group.compared = true;
      const int64_t task = requeue_group(id, job, group, todo);
      if (task == 0) continue;
      queued = true;
      const search::Estimate& a = decision.alone.at(pair->first);
      const search::Estimate& b = decision.alone.at(pair->second);
      char line[400];
      std::snprintf(line, sizeof line,
                    "job %lld: task %lld: %s (%.2f us, 95%% CI %.2f-%.2f) and %s (%.2f us, %.2f-%.2f) are within noise: "
                    "measured again, interleaved",
                    static_cast<long long>(id), static_cast<long long>(task), pair->first.c_str(), a.time_us,
                    a.ci_low_us, a.ci_high_us, pair->second.c_str(), b.time_us, b.ci_low_us, b.ci_high_us);
      log(LogIds{id, task, ""}, line);
    }
    if (queued) save_search(id, job);
    return queued;
  }

  // ---- workers and tasks ----

  bool alive(const Worker& w, Clock::time_point now) const {
    return now - w.last_seen < std::chrono::milliseconds(opt.worker_timeout_ms);
  }

  // Marks a task failed (its groups keep their modeled costs) and settles the jobs it belongs to.
  void fail_task(int64_t task, const std::string& why) {
    queue.finish_task(task, storage::TaskState::kFailed, why, {});
    log(LogIds{0, task, ""}, "task " + std::to_string(task) + " failed: " + why, LogLevel::kWarn);
    std::vector<int64_t> affected;  // first: maybe_finish erases finished jobs from `jobs`
    for (const auto& [id, job] : jobs) {
      if (std::find(job.tasks.begin(), job.tasks.end(), task) != job.tasks.end()) affected.push_back(id);
    }
    for (int64_t id : affected) maybe_finish(id);
  }

  void release(int64_t task, const std::string& why) {
    const auto t = queue.task(task);
    if (!t || t->state != storage::TaskState::kLeased) return;
    if (t->attempts >= opt.max_attempts) {
      fail_task(task, why + " after " + std::to_string(t->attempts) + " attempts");
      return;
    }
    queue.requeue_task(task);
    log(LogIds{0, task, ""}, "task " + std::to_string(task) + " re-queued: " + why);
  }

  void expire(Clock::time_point now) {
    for (auto it = workers.begin(); it != workers.end();) {
      if (alive(it->second, now)) {
        ++it;
        continue;
      }
      log(LogIds{0, 0, peer_name(it->first)}, "worker " + peer_name(it->first) + " went silent", LogLevel::kWarn);
      for (const auto& [task, deadline] : it->second.leases) {
        close_span(it->first, task, "lost");
        release(task, "worker " + it->first + " went silent");
      }
      it = workers.erase(it);
    }
    const int64_t ms = unix_ms();
    std::set<int64_t> held;
    for (auto& [identity, w] : workers) {
      for (auto l = w.leases.begin(); l != w.leases.end();) {
        if (l->second >= ms) {
          held.insert(l->first);
          ++l;
          continue;
        }
        const int64_t t = l->first;
        l = w.leases.erase(l);
        ++counters.lease_expiries;
        close_span(w.identity, t, "expired");
        release(t, "lease deadline passed");
      }
    }
    // A safety net: a lease no live worker holds (the paths above release them as they happen).
    for (int64_t id : queue.task_ids_in_state(storage::TaskState::kLeased)) {
      if (!held.count(id)) release(id, "its lease holder is gone");
    }
  }

  void dispatch() {
    // Workers with room for a task, the emptiest first: an idle one before one whose next task
    // would wait behind the one it measures.
    std::vector<Worker*> idle;
    const auto now = Clock::now();
    for (auto& [identity, w] : workers) {
      if (w.leases.size() < w.depth && !w.draining && now >= w.offer_after) idle.push_back(&w);
    }
    std::stable_sort(idle.begin(), idle.end(), [](const Worker* a, const Worker* b) { return a->leases.size() < b->leases.size(); });
    if (idle.empty() || jobs.empty()) return;
    if (!queue.any_in_state(storage::TaskState::kQueued)) return;
    // Asked of the database job by job (a job's first queued task), not as the list of every
    // queued task: with thousands queued, listing them for every result was the loop's largest
    // cost under bench/service_load. A job found empty is not asked again in this pass.
    std::set<int64_t> drained;
    for (Worker* w : idle) {
      // Jobs in turn, starting after the one served last.
      std::vector<int64_t> order;
      for (auto& [id, job] : jobs) {
        if (id > last_served_job) order.push_back(id);
      }
      for (auto& [id, job] : jobs) {
        if (id <= last_served_job) order.push_back(id);
      }
      for (int64_t id : order) {
        if (drained.count(id)) continue;
        Job& job = jobs.at(id);
        if (job.device != w->device) continue;  // only the job's identity measures for it
        const std::optional<int64_t> task = queue.first_queued_task(id);
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
        last_served_job = id;
        break;
      }
    }
  }

  void lease(Worker& w, int64_t task_id) {
    const auto t = queue.task(task_id);
    wire::Envelope e;
    wire::Task& task = *e.mutable_task();
    check(task.ParseFromString(t->payload), "task ", task_id, ": stored payload is unreadable");
    // Generous: compile, plus every candidate running to its timeout, twice over; a task queued
    // behind others the worker holds waits for theirs too.
    const int64_t now = unix_ms();
    int64_t deadline = now + 60000 + 2LL * task.candidates_size() * std::max(1000, task.policy().timeout_ms());
    for (const auto& [held, until] : w.leases) deadline += std::max<int64_t>(0, until - now);
    task.set_task_id(task_id);
    task.set_lease_deadline_ms(deadline);
    queue.lease_task(task_id, w.identity, deadline);
    w.leases[task_id] = deadline;
    send(w.identity, std::move(e));
    const auto now_c = Clock::now();
    ++counters.leases;
    leased_at[task_id] = now_c;
    std::deque<Span>& line = timelines[w.identity];
    line.push_back({task_id, now_c, now_c, ""});
    if (line.size() > kTimeline) line.pop_front();
    if (const auto f = slot_freed.find(w.identity); f != slot_freed.end()) {
      counters.dispatch_seconds.observe(std::chrono::duration<double>(now_c - f->second).count());
      slot_freed.erase(f);
    }
  }

  // A refused result changes nothing: one line in the log, a count by reason, an error to the peer.
  void refuse_result(const std::string& identity, int64_t task, const std::string& reason, const std::string& why) {
    ++counters.results_refused[reason];
    log(LogIds{0, task, peer_name(identity)},
        "result for task " + std::to_string(task) + " from " + peer_name(identity) + " refused: " + why, LogLevel::kWarn);
    send_error(identity, "result for task " + std::to_string(task) + " refused: " + why);
  }

  // Why a result may not be stored, or "" when it may: it counts only from the peer holding the
  // task's current lease, and only for candidates the task asked for, each once, with the source
  // digest it was sent with.
  static std::string result_refusal(const std::string& identity, const storage::TaskRecord& t, const wire::TaskResult& r,
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

  void on_result(const std::string& identity, const wire::TaskResult& r) {
    auto w = workers.find(identity);
    const auto t = queue.task(r.task_id());
    if (!t) return refuse_result(identity, r.task_id(), "unknown_task", "no such task");
    if (t->state == storage::TaskState::kDone && t->worker == identity && !r.abandoned()) {
      // Its own late duplicate (a resend after a reconnect): already stored once.
      log(LogIds{0, r.task_id(), peer_name(identity)}, "late result for task " + std::to_string(r.task_id()) + " from " + peer_name(identity) + " ignored (already done)");
      return;
    }
    std::string reason;
    if (const std::string why = result_refusal(identity, *t, r, &reason); !why.empty()) {
      return refuse_result(identity, r.task_id(), reason, why);
    }
    if (w != workers.end()) {
      Worker& holder = w->second;
      holder.leases.erase(r.task_id());
      slot_freed.emplace(identity, Clock::now());
      if (r.abandoned() && !holder.draining) {
        ++holder.handed_back;
        holder.offer_after = Clock::now() + std::chrono::milliseconds(std::min(5000, 100 << std::min(holder.handed_back - 1, 6)));
      } else if (!r.abandoned()) {
        holder.handed_back = 0;
        holder.offer_after = {};
      }
    }
    if (r.abandoned()) {
      close_span(identity, r.task_id(), "handed back");
    } else {
      const bool any_ok = std::any_of(r.results().begin(), r.results().end(),
                                      [](const wire::CandidateResult& c) { return c.status() == "ok"; });
      close_span(identity, r.task_id(), any_ok ? "ok" : "failed");
    }
    if (const auto l = leased_at.find(r.task_id()); l != leased_at.end()) {
      if (!r.abandoned()) counters.task_seconds.observe(std::chrono::duration<double>(Clock::now() - l->second).count());
      leased_at.erase(l);
    }
    if (r.abandoned()) {
      queue.requeue_task(r.task_id(), /*attempt_counts=*/false);
      log(LogIds{0, r.task_id(), peer_name(identity)}, "task " + std::to_string(r.task_id()) + " handed back by " + peer_name(identity));
      return;
    }
    const std::string worker_name = w != workers.end() ? w->second.hello.worker_id() : identity;
    std::vector<storage::Measurement> ms;
    for (const wire::CandidateResult& c : r.results()) {
      storage::Measurement m;
      m.signature = t->signature;
      m.device = t->device;
      m.codegen_version = t->codegen_version;
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
      m.worker = worker_name;
      m.detail = c.detail();
      ms.push_back(std::move(m));
    }
    // result_refusal saw the task leased to this peer: finish_task cannot find it done.
    check(queue.finish_task(r.task_id(), storage::TaskState::kDone, "", ms), "task ", r.task_id(), " was done while leased");
    ++counters.results;
    for (const wire::CandidateResult& c : r.results()) ++counters.candidates_by_status[c.status()];
    for (auto it = decided.begin(); it != decided.end();) {  // what was read of the signature is stale now
      it = it->first.first == t->signature ? decided.erase(it) : std::next(it);
    }
    // The worker's next task first; then what the result settles (a job's next round or its end
    // reads the database at length).
    dispatch();
    std::vector<int64_t> affected;
    for (auto& [id, job] : jobs) {
      if (std::find(job.tasks.begin(), job.tasks.end(), r.task_id()) != job.tasks.end()) affected.push_back(id);
    }
    for (int64_t id : affected) maybe_finish(id);
  }

  void on_hello(const std::string& identity, const wire::Hello& h, uint32_t version) {
    if (h.max_version() < wire::kMinProtocolVersion || h.min_version() > wire::kProtocolVersion) {
      wire::Envelope e;
      e.mutable_refused()->set_reason("this coordinator speaks protocol versions " + std::to_string(wire::kMinProtocolVersion) +
                                      " to " + std::to_string(wire::kProtocolVersion) + "; the worker speaks " +
                                      std::to_string(h.min_version()) + " to " + std::to_string(h.max_version()));
      send(identity, std::move(e));
      log(LogIds{0, 0, h.worker_id()}, "refused worker " + h.worker_id() + ": protocol " + std::to_string(h.min_version()) + ".." +
          std::to_string(h.max_version()) + " (envelope " + std::to_string(version) + ")");
      return;
    }
    if (h.codegen_version() != codegen::kCodegenVersion) {
      wire::Envelope e;
      e.mutable_refused()->set_reason("this coordinator generates code version " + std::to_string(codegen::kCodegenVersion) +
                                      "; the worker has " + std::to_string(h.codegen_version()));
      send(identity, std::move(e));
      return;
    }
    if (h.device().toolkit().empty()) {
      wire::Envelope e;
      e.mutable_refused()->set_reason("the worker does not report its toolkit (NVRTC, or the host compiler, and its "
                                      "version), which is part of its device identity: upgrade the worker");
      send(identity, std::move(e));
      log(LogIds{0, 0, h.worker_id()}, "refused worker " + h.worker_id() + ": no toolkit in its device identity");
      return;
    }
    Worker& w = workers[identity];
    const std::map<int64_t, int64_t> held = std::move(w.leases);
    w.leases.clear();
    w.identity = identity;
    w.hello = h;
    w.device = {h.device().name(),          h.device().arch(),           h.device().description(),
                h.device().compute_capability(), h.device().driver_version(), h.device().toolkit()};
    w.last_seen = Clock::now();
    w.depth = static_cast<size_t>(std::clamp(h.queue_depth(), 1, 4));
    w.draining = false;
    slot_freed[identity] = w.last_seen;
    for (const auto& [task, deadline] : held) release(task, "worker " + peer_name(identity) + " said hello again");
    wire::Envelope e;
    e.mutable_welcome()->set_coordinator_id(opt.id);
    e.mutable_welcome()->set_heartbeat_ms(opt.heartbeat_ms);
    send(identity, std::move(e));
    log(LogIds{0, 0, h.worker_id()}, "worker " + h.worker_id() + " joined: " + w.device.str() + ", " + h.backend());
    bind_waiting();
  }

  // What a message asks of its sender and of the coordinator: hello, heartbeats, results and bye
  // are a worker's, submissions, uploads, cancels and exports a client's, status anyone's; hellos,
  // results, submissions, uploads and cancels write the database (new work).
  struct MessageNeeds {
    unsigned role = wire::kEveryRole;
    bool writes = false;
  };
  static MessageNeeds needs_of(const wire::Envelope& e) {
    switch (e.body_case()) {
      case wire::Envelope::kHello:
      case wire::Envelope::kResult: return {wire::kWorkerRole, true};
      case wire::Envelope::kHeartbeat:
      case wire::Envelope::kBye: return {wire::kWorkerRole, false};
      case wire::Envelope::kSubmit:
      case wire::Envelope::kUpload:
      case wire::Envelope::kCancel: return {wire::kClientRole, true};
      case wire::Envelope::kExportRequest: return {wire::kClientRole, false};
      default: return {};
    }
  }

  // Whether a peer of `roles` may send `e` (needs_of). A refusal is logged and answered (a hello
  // with `refused`, so that the worker stops), and counted.
  bool allowed_by_role(const std::string& identity, const wire::Envelope& e, unsigned roles) {
    const unsigned needs = needs_of(e).role;
    if (roles & needs) return true;
    const std::string why = std::string("this peer's key is not a ") + (needs == wire::kWorkerRole ? "worker's" : "client's") +
                            " (--allow-" + (needs == wire::kWorkerRole ? "workers" : "clients") + "): it may not send " +
                            wire::body_name(e);
    ++counters.role_refusals;
    log(LogIds{0, 0, peer_name(identity)}, "refused " + wire::body_name(e) + " from " + peer_name(identity) + ": " + why, LogLevel::kWarn);
    if (e.has_hello()) {
      wire::Envelope r;
      r.mutable_refused()->set_reason(why);
      send(identity, std::move(r));
    } else {
      send_error(identity, why);
    }
    return false;
  }

  // The unfinished jobs as the database has them: a bound one resumed (prepared on the pool, with
  // its search state), an unbound one waiting for a worker of its class. Jobs being loaded already
  // are left to that.
  void load_unfinished_jobs() {
    for (const storage::JobRecord& rec : queue.jobs(true)) {
      if (rec.state == storage::JobState::kCancelled || loading.count(rec.id)) continue;
      if (!rec.identity) {  // bound when a worker of its class says hello
        waiting[rec.id] = nullptr;
        continue;
      }
      try {
        resume(rec);
      } catch (const Error& e) {
        loading.erase(rec.id);
        queue.set_job_state(rec.id, storage::JobState::kFailed, e.what());
        log(LogIds{rec.id, 0, ""}, "job " + std::to_string(rec.id) + " cannot resume: " + e.what(), LogLevel::kWarn);
      }
    }
  }

  // After a commit failed, memory may speak of what was rolled back (a lease ended, a round
  // queued): once writes work again, leases and jobs are taken from the database, as a restart
  // takes them. A connected worker keeps the leases the database gives it (its result is still
  // taken); a lease of a peer not connected goes back to the queue.
  void reload_from_database() {
    for (auto& [identity, w] : workers) w.leases.clear();
    for (const storage::TaskRecord& t : queue.tasks_in_state(storage::TaskState::kLeased)) {
      if (const auto w = workers.find(t.worker); w != workers.end()) {
        w->second.leases[t.id] = t.lease_deadline_ms;
      } else {
        queue.requeue_task(t.id, /*attempt_counts=*/false);
      }
    }
    jobs.clear();
    for (auto it = waiting.begin(); it != waiting.end();) it = loading.count(it->first) ? std::next(it) : waiting.erase(it);
    load_unfinished_jobs();
  }

  // Refuses, while the database cannot be written, what would write it; whether `e` may go on.
  bool writable_for(const std::string& identity, const wire::Envelope& e) {
    if (unwritable.empty() || !needs_of(e).writes) return true;
    send_error(identity, "the coordinator cannot write its database (" + unwritable +
                             "): it takes no new work until it can; status and exports are answered");
    return false;
  }

  void handle(const std::string& identity, wire::Envelope& e) {  // a submission's files are moved out
    auto w = workers.find(identity);
    if (w != workers.end()) w->second.last_seen = Clock::now();
    if (!writable_for(identity, e)) return;
    switch (e.body_case()) {
      case wire::Envelope::kHello: return on_hello(identity, e.hello(), e.version());
      case wire::Envelope::kHeartbeat:
        if (w == workers.end()) send_error(identity, "unknown worker: say hello");
        else if (e.heartbeat().draining() && !w->second.draining) {
          w->second.draining = true;
          log(LogIds{0, 0, peer_name(identity)}, "worker " + peer_name(identity) + " is stopping: it finishes what it measures and takes nothing more");
        }
        return;
      case wire::Envelope::kResult:
        if (w == workers.end()) return refuse_result(identity, e.result().task_id(), "unknown_peer", "unknown worker: say hello");
        return on_result(identity, e.result());
      case wire::Envelope::kBye:
        if (w != workers.end()) {
          const std::map<int64_t, int64_t> held = std::move(w->second.leases);
          for (const auto& [task, deadline] : held) close_span(identity, task, "lost");
          workers.erase(w);
          for (const auto& [task, deadline] : held) release(task, "worker " + peer_name(identity) + " left");
          log(LogIds{0, 0, peer_name(identity)}, "worker " + peer_name(identity) + " left");
        }
        return;
      case wire::Envelope::kSubmit: return submit_async(identity, std::move(*e.mutable_submit()));  // answered when planned
      case wire::Envelope::kUpload: return on_upload(identity, std::move(*e.mutable_upload()));  // answered when written
      case wire::Envelope::kStatus: {
        wire::Envelope r;
        for (wire::JobStatus& s : job_status(e.status().job_id())) *r.mutable_status_reply()->add_jobs() = std::move(s);
        r.mutable_status_reply()->set_workers(static_cast<int>(workers.size()));
        if (!unwritable.empty()) r.mutable_status_reply()->set_warning(unwritable_warning());
        return send(identity, std::move(r));
      }
      case wire::Envelope::kCancel: {
        cancel_job(e.cancel().job_id());
        wire::Envelope r;
        r.mutable_job()->set_job_id(e.cancel().job_id());
        return send(identity, std::move(r));
      }
      case wire::Envelope::kExportRequest: return export_async(identity, e.export_request().job_id());
      default: fail("unexpected ", wire::body_name(e), " message");
    }
  }

  // Models a schema 4 or older file stores as one blob (a serialized Submit) get their files laid
  // out like a new submission's, once, when the coordinator starts.
  void lay_out_legacy_models() {
    for (const std::string& digest : queue.legacy_models()) {
      wire::Submit stored;
      check(stored.ParseFromString(queue.legacy_model_bytes(digest)) && stored.files_size() > 0, opt.db.string(),
            ": the stored files of model ", digest.substr(0, 12), " are unreadable");
      storage::ModelFiles files;
      for (wire::ModelFile& f : *stored.mutable_files()) files.emplace_back(f.path(), std::move(*f.mutable_data()));
      queue.replace_legacy_model(digest, files);
      log("model " + digest.substr(0, 12) + " stored by an older fusetune: its files are laid out beside the database");
    }
  }

  // ---- the HTTP side (dashboards/http_server.h): answered here, on the loop ----

  // Peer text that is not UTF-8 (a path, an old database's names) becomes U+FFFD in the answer
  // instead of failing it.
  static constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  dashboards::HttpReply http_answer(const dashboards::HttpRequest& r) {
    if (r.path == "/metrics") return {200, "text/plain; version=0.0.4; charset=utf-8", metrics_text()};
    if (r.path == "/api/jobs") {
      return {200, "application/json",
              status_json(job_status(0), static_cast<int>(workers.size()), unwritable.empty() ? "" : unwritable_warning())
                  .dump(-1, ' ', false, kReplace)};
    }
    if (r.path == "/api/workers") return {200, "application/json", workers_json().dump(-1, ' ', false, kReplace)};
    if (r.path.rfind("/api/jobs/", 0) == 0) {
      std::string rest = r.path.substr(10);
      const bool tasks = rest.size() > 6 && rest.substr(rest.size() - 6) == "/tasks";
      if (tasks) rest.resize(rest.size() - 6);
      int64_t id = 0;
      try {
        size_t used = 0;
        id = std::stoll(rest, &used);
        if (used != rest.size()) id = 0;
      } catch (const std::exception&) {
      }
      if (id <= 0 || !queue.job(id)) return {404, "application/json", nlohmann::json{{"error", "no job " + rest}}.dump(-1, ' ', false, kReplace)};
      return {200, "application/json", (tasks ? tasks_json(id) : job_json(id)).dump(-1, ' ', false, kReplace)};
    }
    return {404, "application/json", nlohmann::json{{"error", "no such resource: " + r.path}}.dump(-1, ' ', false, kReplace)};
  }

  // A job as /api/jobs lists it, with its convergence so far: the running job's own, or the
  // finished job's from its summary (status_json.h).
  nlohmann::json job_json(int64_t id) {
    const auto live = jobs.find(id);
    const auto by_status = queue.job_measurements_by_status(id);
    if (live == jobs.end()) return job_detail_json(job_status(id).at(0), by_status);
    return job_detail_json(job_status(id).at(0), by_status, live->second.convergence, live->second.group_convergence);
  }

  // A job's tasks: {"tasks": [{"task_id", "signature", "state", "attempts", "worker", "error", "candidates"}]}.
  nlohmann::json tasks_json(int64_t id) {
    nlohmann::json out = nlohmann::json::array();
    for (const storage::TaskRecord& t : queue.job_tasks(id)) {
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
    return {{"job_id", id}, {"tasks", out}};
  }

  nlohmann::json workers_json() const {
    nlohmann::json out = nlohmann::json::array();
    const auto now = Clock::now();
    for (const auto& [identity, w] : workers) {
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
            {"candidates_by_status", counters.candidates_by_status},
            {"results", counters.results},
            {"results_refused", counters.results_refused},
            {"cache_hits", counters.cache_hits},
            {"lease_expiries", counters.lease_expiries}};
  }

  // A worker's recent leases as seconds before now: {"task", "from_s", "to_s" (0 while held), "outcome"}.
  nlohmann::json timeline_json(const std::string& identity, Clock::time_point now) const {
    nlohmann::json out = nlohmann::json::array();
    const auto t = timelines.find(identity);
    if (t == timelines.end()) return out;
    auto ago = [&](Clock::time_point p) { return std::chrono::duration<double>(now - p).count(); };
    for (const Span& sp : t->second) {
      out.push_back({{"task", sp.task},
                     {"from_s", ago(sp.from)},
                     {"to_s", sp.outcome.empty() ? 0.0 : ago(sp.to)},
                     {"outcome", sp.outcome.empty() ? "measuring" : sp.outcome}});
    }
    return out;
  }

  std::string metrics_text() {
    dashboards::Exposition x;
    std::map<std::string, double> job_states, task_states;
    for (const char* st : {"queued", "running", "done", "failed", "cancelled"}) job_states[st] = 0;
    for (const storage::JobRecord& j : queue.jobs(false)) ++job_states[storage::job_state_name(j.state)];
    for (const char* st : {"queued", "leased", "done", "failed"}) task_states[st] = 0;
    for (const auto& [st, n] : queue.task_counts()) task_states[st] = static_cast<double>(n);
    std::map<std::string, double> devices;
    for (const auto& [identity, w] : workers) ++devices[w.device.str()];
    auto by = [](const std::string& label, const auto& m) {
      std::vector<std::pair<dashboards::Labels, double>> out;
      for (const auto& [k, v] : m) out.push_back({{{label, k}}, static_cast<double>(v)});
      return out;
    };
    x.gauge("fusetune_jobs", "Jobs in the database, by state.", by("state", job_states));
    x.gauge("fusetune_tasks", "Measurement tasks in the database, by state.", by("state", task_states));
    x.gauge("fusetune_workers", "Workers connected, by device identity.", by("device", devices));
    x.counter("fusetune_candidates_measured", "Candidates whose results this coordinator stored, by status.",
              by("status", counters.candidates_by_status));
    x.counter("fusetune_results", "Task results this coordinator stored.", {{{}, static_cast<double>(counters.results)}});
    x.counter("fusetune_results_refused",
              "Task results refused: from a peer that said no hello, for an unknown task, from a peer not holding the "
              "task's lease, or for candidates the task did not ask for.",
              by("reason", counters.results_refused));
    x.counter("fusetune_role_refusals", "Messages refused because the peer's CURVE key lacks the role (worker or client).",
              {{{}, static_cast<double>(counters.role_refusals)}});
    x.counter("fusetune_leases", "Tasks leased to workers.", {{{}, static_cast<double>(counters.leases)}});
    x.counter("fusetune_lease_expiries", "Leases whose deadline passed.", {{{}, static_cast<double>(counters.lease_expiries)}});
    x.counter("fusetune_cache_hits", "Groups the search database answered without a measurement.",
              {{{}, static_cast<double>(counters.cache_hits)}});
    x.histogram("fusetune_dispatch_latency_seconds",
                "From a worker's slot freed (its result or hello) to its next lease sent, measured.", counters.dispatch_seconds);
    x.histogram("fusetune_task_duration_seconds", "From a task's lease to its result, measured.", counters.task_seconds);
    x.gauge("fusetune_database_writable", "1 while the search database can be written, 0 while it cannot (a full disk: no new work).",
            {{{}, unwritable.empty() ? 1.0 : 0.0}});
    x.gauge("fusetune_database_bytes", "The search database's file (without its WAL and model files).",
            {{{}, static_cast<double>(db.file().size_bytes())}});
    return x.text();
  }

  // ---- client requests ----

  // A submission's record: checked and filled on the loop (no file, an unknown device: refused
  // at once).
  storage::JobRecord job_record(const wire::Submit& s) {
    check(s.files_size() > 0, "submit: no model file");
    storage::JobRecord rec;
    rec.model_name = s.model_name().empty() ? s.files(0).path() : s.model_name();
    rec.device = job_device_key(s.device().empty() ? "host" : s.device());
    rec.options = JobOptions::from_json(s.options()).to_json();
    return rec;
  }

  // Stores a planned submission (its model's row, its files moved into place already by the
  // caller, then the job) and binds it when a worker can take it.
  int64_t accept_job(storage::JobRecord rec, const std::string& onnx, std::shared_ptr<Prepared> prepared) {
    rec.id = db.file().write([&] {  // the model and its job: one transaction
      queue.put_model_row(rec.model_digest, rec.model_name, onnx);
      return queue.create_job(rec);
    });
    if (!prepared->lowered) lower_later(rec.id, prepared);
    waiting[rec.id] = std::move(prepared);
    bind_waiting();
    if (waiting.count(rec.id)) log(LogIds{rec.id, 0, ""}, "job " + std::to_string(rec.id) + " (" + rec.model_name + ") waits for a worker of " + rec.device.str());
    return rec.id;
  }

  // A submitted job's tasks, lowered on the pool after its submission was answered; the job can
  // be bound once they are there.
  void lower_later(int64_t id, std::shared_ptr<Prepared> prepared) {
    loading.insert(id);
    offload.post(
        [this, id, prepared]() -> Offload::Completion {
          auto tasks = std::make_shared<std::vector<TaskSpec>>(prepared->planner->tasks());
          return [this, id, prepared, tasks] {
            loading.erase(id);
            auto it = waiting.find(id);
            if (it == waiting.end() || it->second != prepared) return;  // cancelled meanwhile
            prepared->tasks = std::move(*tasks);
            prepared->lowered = true;
            bind_waiting();
          };
        },
        [this, id](const std::string& error) {
          loading.erase(id);
          waiting.erase(id);
          queue.set_job_state(id, storage::JobState::kFailed, error);
          log(LogIds{id, 0, ""}, "job " + std::to_string(id) + " cannot start: " + error, LogLevel::kWarn);
        });
  }

  // In process (embedded `tune`, tests): plans on the caller's thread. Nothing is stored for a
  // model that does not import or plan; the error says why.
  int64_t submit_job(wire::Submit s) {
    check(s.upload().empty(), "submit: an upload is for a coordinator's clients, not in process");
    storage::JobRecord rec = job_record(s);
    const Staged staged = stage_inline(opt.db, s);
    Admitted a = admit(opt.db, s, staged, [&](const fs::path& onnx) {
      return prepare(onnx, rec.model_name, rec.device.name, JobOptions::from_json(rec.options));
    });
    rec.model_digest = a.digest;
    return accept_job(std::move(rec), a.onnx, std::move(a.prepared));
  }

  // From a client: the files (uploaded before in pieces, or carried by the Submit) are checked,
  // digested and stored, and the model imported and planned, on the pool while the loop goes on
  // serving workers; the client's answer (the job id, or the error) follows, and the tasks are
  // lowered after it (lower_later).
  void submit_async(const std::string& client, wire::Submit&& s) {
    storage::JobRecord rec = job_record(s);
    const Staged uploaded = s.upload().empty() ? Staged{} : uploads.take(client, s.upload());
    uint64_t bytes = 0;  // what the model store grows by when the submission is stored
    for (const wire::ModelFile& f : s.files()) bytes += s.upload().empty() ? f.data().size() : f.size();
    if (s.upload().empty()) uploads.check_quotas(client, "(inline)", 0, bytes, stored_bytes);
    auto submit = std::make_shared<wire::Submit>(std::move(s));
    offload.post(
        [this, client, rec, submit, uploaded, bytes, db_path = opt.db]() mutable -> Offload::Completion {
          const Staged staged = submit->upload().empty() ? stage_inline(db_path, *submit) : uploaded;
          Admitted a = admit(db_path, *submit, staged, [&](const fs::path& onnx) {
            return prepare(onnx, rec.model_name, rec.device.name, JobOptions::from_json(rec.options), false);
          });
          rec.model_digest = a.digest;
          return [this, client, rec, bytes, onnx = a.onnx, prepared = a.prepared] {
            stored_bytes += bytes;  // moved into the store by admit
            wire::Envelope r;
            try {
              r.mutable_job()->set_job_id(accept_job(rec, onnx, prepared));
            } catch (const Error& e) {
              log("submission of " + rec.model_name + " from " + peer_name(client) + " failed: " + e.what(), LogLevel::kWarn);
              return send_error(client, e.what());
            }
            send(client, std::move(r));
          };
        },
        [this, client, name = rec.model_name, dir = uploaded.dir](const std::string& error) {
          std::error_code ec;
          if (!dir.empty()) fs::remove_all(dir, ec);
          log("submission of " + name + " from " + peer_name(client) + " failed: " + error, LogLevel::kWarn);
          send_error(client, error);
        });
  }

  // A piece of an upload: written to its file under the staging directory by the disk thread,
  // acknowledged once it is there. Refused (one line naming the field) when its name, path or size
  // is out of bounds.
  void on_upload(const std::string& client, wire::Upload&& u) {
    const Uploads::Piece piece = uploads.accept(client, u, stored_bytes, Clock::now());
    if (piece.fresh) {
      std::error_code ec;
      fs::remove_all(piece.dir, ec);  // a previous upload of the same name and client, abandoned
    }
    auto data = std::make_shared<wire::Upload>(std::move(u));
    disk.post(
        [this, client, key = piece.key, file = piece.file, data]() -> Offload::Completion {
          Uploads::write_piece(file, data->offset(), data->data());
          return [this, client, key, data] {
            uploads.written(key);
            wire::Envelope r;
            wire::UploadAck& ack = *r.mutable_upload_ack();
            ack.set_upload(data->upload());
            ack.set_path(data->path());
            ack.set_offset(data->offset());
            send(client, std::move(r));
          };
        },
        [this, client, key = piece.key](const std::string& error) {
          uploads.failed(key, error);
          log("upload from " + peer_name(client) + " failed: " + error, LogLevel::kWarn);
          send_error(client, error);
        });
  }

  // Uploads nothing came for in Uploads::kIdle (a client gone) are dropped with their files.
  void drop_idle_uploads(Clock::time_point now) {
    for (const auto& [key, dir] : uploads.drop_idle(now)) {
      log("upload '" + key.second + "' from " + peer_name(key.first) + " dropped: nothing came for " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(Uploads::kIdle).count()) + " s");
      disk.post(
          [dir]() -> Offload::Completion {
            fs::remove_all(dir);
            return [] {};
          },
          [](const std::string&) {});
    }
  }

  std::vector<wire::JobStatus> job_status(int64_t id) {
    std::vector<storage::JobRecord> recs;
    if (id == 0) {
      recs = queue.jobs(false);
    } else {
      auto r = queue.job(id);
      check(r.has_value(), "no job ", id);
      recs.push_back(*r);
    }
    std::vector<wire::JobStatus> out;
    for (const storage::JobRecord& r : recs) out.push_back(job_status_of(r, queue.job_progress(r.id)));
    return out;
  }

  void cancel_job(int64_t id) {
    const auto r = queue.job(id);
    check(r.has_value(), "no job ", id);
    if (r->state == storage::JobState::kDone || r->state == storage::JobState::kFailed ||
        r->state == storage::JobState::kCancelled) {
      return;
    }
    queue.set_job_state(id, storage::JobState::kCancelled, "cancelled by a client");
    std::vector<int64_t> tasks;
    if (const auto j = jobs.find(id); j != jobs.end()) tasks = j->second.tasks;
    jobs.erase(id);
    waiting.erase(id);
    log(LogIds{id, 0, ""}, "job " + std::to_string(id) + " cancelled");
    revoke(tasks, "job " + std::to_string(id) + " was cancelled");
  }

  // Takes back the leases of `tasks` that no live job waits on: each goes back to the queue (no
  // attempt counted) and its holder is told to stop (Revoke), so that no worker goes on measuring
  // for nobody.
  void revoke(const std::vector<int64_t>& tasks, const std::string& reason) {
    std::set<int64_t> needed;
    for (const auto& [id, job] : jobs) needed.insert(job.tasks.begin(), job.tasks.end());
    std::map<std::string, wire::Envelope> by_holder;
    for (const int64_t t : tasks) {
      if (needed.count(t)) continue;
      const auto rec = queue.task(t);
      if (!rec || rec->state != storage::TaskState::kLeased) continue;
      if (const auto w = workers.find(rec->worker); w != workers.end()) {
        w->second.leases.erase(t);
        slot_freed.emplace(rec->worker, Clock::now());
      }
      close_span(rec->worker, t, "revoked");
      leased_at.erase(t);
      queue.requeue_task(t, /*attempt_counts=*/false);
      by_holder[rec->worker].mutable_revoke()->add_tasks(t);
    }
    for (auto& [holder, e] : by_holder) {
      e.mutable_revoke()->set_reason(reason);
      log(LogIds{0, 0, peer_name(holder)},
          std::to_string(e.revoke().tasks_size()) + " leases of " + peer_name(holder) + " revoked: " + reason);
      send(holder, std::move(e));
    }
    if (!by_holder.empty()) dispatch();
  }

  // A done job's record and the identity whose measurements decide it.
  storage::JobRecord exportable(int64_t id) {
    const auto r = queue.job(id);
    check(r.has_value(), "no job ", id);
    check(r->state == storage::JobState::kDone, "job ", id, " is ", storage::job_state_name(r->state),
          ", not done: nothing to export yet");
    return *r;
  }

  // The bundle of a job planned from `planner`, as files sorted by name.
  static std::vector<wire::ModelFile> bundle_of(const JobPlanner& planner, const Measured& m) {
    const runtime::Bundle bundle = planner.bundle(planner.final_plan(m.times), m.digests);
    std::vector<wire::ModelFile> out;
    for (const auto& [name, data] : runtime::bundle_files(bundle)) {
      wire::ModelFile& f = out.emplace_back();
      f.set_path(name);
      f.set_data(data.data(), data.size());
    }
    std::sort(out.begin(), out.end(), [](const wire::ModelFile& a, const wire::ModelFile& b) { return a.path() < b.path(); });
    return out;
  }

  // In process: on the caller's thread.
  std::vector<wire::ModelFile> export_job(int64_t id) {
    const storage::JobRecord r = exportable(id);
    const auto model = queue.model(r.model_digest);
    check(model.has_value(), "job ", id, ": model ", r.model_digest.substr(0, 12), " is missing from the database");
    Job job;
    job.device = r.identity.value_or(r.device);  // a job done before identities: its class's rows
    job.planner = std::make_shared<const JobPlanner>(model->onnx, r.model_name, r.device.name, JobOptions::from_json(r.options));
    return bundle_of(*job.planner, measured(job));
  }

  // From a client: the model is planned on the pool, the measurements read on the loop, the
  // bundle compiled on the pool; the client's answer follows.
  void export_async(const std::string& client, int64_t id) {
    const storage::JobRecord r = exportable(id);
    const auto model = queue.model(r.model_digest);
    check(model.has_value(), "job ", id, ": model ", r.model_digest.substr(0, 12), " is missing from the database");
    auto failed = [this, client, id](const std::string& error) {
      log(LogIds{id, 0, ""}, "export of job " + std::to_string(id) + " for " + peer_name(client) + " failed: " + error, LogLevel::kWarn);
      send_error(client, error);
    };
    offload.post(
        [this, client, id, r, onnx = model->onnx, failed]() -> Offload::Completion {
          auto planner = std::make_shared<const JobPlanner>(onnx, r.model_name, r.device.name, JobOptions::from_json(r.options));
          return [this, client, id, r, planner, failed] {
            Job job;
            job.device = r.identity.value_or(r.device);
            job.planner = planner;
            auto m = std::make_shared<Measured>(measured(job));
            offload.post(
                [this, client, id, planner, m]() -> Offload::Completion {
                  auto bundle = std::make_shared<std::vector<wire::ModelFile>>(bundle_of(*planner, *m));
                  return [this, client, id, bundle] {
                    wire::Envelope e;
                    e.mutable_export_reply()->set_job_id(id);
                    for (wire::ModelFile& f : *bundle) *e.mutable_export_reply()->add_files() = std::move(f);
                    send(client, std::move(e));
                  };
                },
                failed);
          };
        },
        failed);
  }
};

Server::Server(zmq::context_t& context, ServerOptions options)
    : s_(std::make_unique<State>(context, std::move(options))) {
  s_->socket.set(zmq::sockopt::linger, 0);
  s_->socket.set(zmq::sockopt::router_mandatory, false);
  s_->socket.set(zmq::sockopt::maxmsgsize, s_->opt.max_message_bytes);
  wire::apply_server_security(s_->socket, s_->opt.security);
  try {
    // Port 0: one the system chooses (ZeroMQ's wildcard), read back as the endpoint bound.
    const std::string& listen = s_->opt.listen;
    const bool any_port = listen.rfind("tcp://", 0) == 0 && listen.size() > 2 && listen.compare(listen.size() - 2, 2, ":0") == 0;
    s_->socket.bind(any_port ? listen.substr(0, listen.size() - 1) + "*" : listen);
    s_->opt.listen = any_port ? s_->socket.get(zmq::sockopt::last_endpoint) : listen;
  } catch (const zmq::error_t& e) {
    fail(s_->opt.listen, ": cannot listen (", e.what(), ")");
  }
  if (!s_->opt.http.address.empty()) s_->http = std::make_unique<dashboards::HttpServer>(s_->opt.http);
  std::error_code ec;
  fs::remove_all(storage::JobQueue::staging_dir(s_->opt.db), ec);  // uploads do not outlive a coordinator
  s_->lay_out_legacy_models();
  for (auto f = fs::recursive_directory_iterator(s_->queue.model_dir(), ec); !ec && f != fs::recursive_directory_iterator();
       f.increment(ec)) {
    if (f->is_regular_file(ec)) s_->stored_bytes += f->file_size(ec);
  }
  const int requeued = s_->queue.requeue_leased();
  s_->load_unfinished_jobs();
 s_->log(std::string(s_->opt.security.enabled() ? "CURVE: " + std::to_string(s_->opt.security.workers.size()) + " worker keys and " + std::to_string(s_->opt.security.clients.size()) + " client keys allowed; "
                                                : "no CURVE keys: peers are not authenticated (loopback or embedded use only); ") +
          "listening on " + s_->opt.listen +
          (s_->http ? " and http://" + s_->opt.http.address.substr(0, s_->opt.http.address.rfind(':')) + ":" + std::to_string(s_->http->port()) : "") +
          " with database " + s_->opt.db.string() + " (" +
          std::to_string(s_->loading.size()) + " unfinished jobs resuming, " + std::to_string(s_->waiting.size()) +
          " waiting for a worker, " + std::to_string(requeued) +
          " leases re-queued)");
}

Server::~Server() = default;

void Server::poll_once(int timeout_ms) {
  std::vector<zmq::pollitem_t> items = {{static_cast<void*>(s_->socket), 0, ZMQ_POLLIN, 0}};
  if (s_->auth) items.push_back({static_cast<void*>(s_->auth->socket()), 0, ZMQ_POLLIN, 0});
  if (s_->http) items.push_back({nullptr, s_->http->wake_fd(), ZMQ_POLLIN, 0});
  // While the pool works, look for its completions often.
  wire::poll(items.data(), items.size(),
             s_->offload.pending() + s_->disk.pending() > 0 ? std::min(timeout_ms, 5) : timeout_ms);
  s_->disk.run_completions();
  s_->offload.run_completions();
  if (s_->http) s_->http->answer_pending([this](const dashboards::HttpRequest& r) { return s_->http_answer(r); });
  if (s_->auth) s_->auth->handle();
  // Everything that is waiting, so heartbeats queued behind slow work are seen before expiry; and
  // the leases that follow, in one transaction: a result's rows and the next lease used to commit
  // one by one, and the commits were a quarter of the loop's time under bench/service_load. Each
  // handler's writes are a savepoint of it (storage::DbFile::write), so one that fails undoes
  // only its own.
  // What the handlers send goes out after the commit.
  auto receive_all = [&] {
    for (int handled = 0; handled < 10000; ++handled) {
      std::vector<zmq::message_t> parts;
      zmq::message_t part;
      if (!s_->socket.recv(part, zmq::recv_flags::dontwait)) break;
      parts.push_back(std::move(part));
      while (parts.back().more()) {
        zmq::message_t next;
        if (!s_->socket.recv(next, zmq::recv_flags::dontwait)) break;
        parts.push_back(std::move(next));
      }
      const std::string identity = parts[0].to_string();
      if (parts.size() != 2) {
        s_->log("ignored a message of " + std::to_string(parts.size() - 1) + " frames from " + peer_name(identity), LogLevel::kWarn);
        continue;
      }
      handle_frame(identity, parts[1].data(), parts[1].size(), wire::peer_roles(parts[1]));
    }
  };
  if (!s_->unwritable.empty()) {
    // The database cannot be written: what reads it is answered, the rest refused (State::
    // writable_for), nothing leased or expired; once a second a write is tried.
    receive_all();
    const auto now = Clock::now();
    if (now - s_->last_write_probe >= std::chrono::seconds(1)) {
      s_->last_write_probe = now;
      if (s_->db.file().write_probe().empty()) {
        s_->log("the database can be written again: new work is taken (it could not since: " + s_->unwritable + ")");
        s_->unwritable.clear();
        s_->unwritable_since = {};
        s_->reload_from_database();
      }
    }
    return;
  }
  s_->holding = true;
  try {
    s_->db.file().write([&] {
      receive_all();
      const auto now = Clock::now();
      if (now - s_->last_expiry > std::chrono::milliseconds(200)) {
        s_->expire(now);
        s_->drop_idle_uploads(now);
        s_->last_expiry = now;
      }
      s_->dispatch();
    });
  } catch (const Error& e) {
    s_->holding = false;
    // What was to be sent spoke of what was rolled back: each peer it was for hears that instead.
    std::set<std::string> answered;
    for (const auto& [peer, frame] : s_->unsent) answered.insert(peer);
    s_->unsent.clear();
    // A commit that fails because nothing can be written (a full disk) stops new work, not the
    // coordinator; any other failure is a bug and goes on up.
    const std::string why = s_->db.file().write_probe();
    if (why.empty()) throw;
    for (const std::string& peer : answered) {
      s_->send_error(peer, "the coordinator could not write its database (" + why + "): what you sent was not kept; try again");
    }
    s_->unwritable = why;
    s_->unwritable_since = std::chrono::system_clock::now();
    s_->last_write_probe = Clock::now();
    s_->log("the database cannot be written (" + why + "): new work is refused, status and exports answered, until it can",
            LogLevel::kError);
    return;
  } catch (...) {
    s_->holding = false;
    s_->unsent.clear();
    throw;
  }
  s_->flush_held();
  const auto now = Clock::now();
  if (!s_->checkpointing && now - s_->last_checkpoint > std::chrono::seconds(1)) {
    s_->checkpointing = true;
    s_->last_checkpoint = now;
    State* st = s_.get();
    s_->offload.post(
        [st, path = s_->opt.db, file = s_->checkpointer]() mutable -> Offload::Completion {
          if (!file) file = std::make_shared<storage::DbFile>(path);
          file->checkpoint();
          return [st, file] {
            st->checkpointer = file;
            st->checkpointing = false;
          };
        },
        [st](const std::string& error) {
          st->checkpointing = false;
          st->log("WAL checkpoint failed (the next one tries again): " + error, LogLevel::kWarn);
        });
  }
}

void Server::handle_frame(const std::string& identity, const void* data, size_t size, unsigned roles) {
  try {
    wire::Envelope e = wire::decode(data, size);
    if (!s_->allowed_by_role(identity, e, roles)) return;
    s_->handle(identity, e);
  } catch (const Error& err) {
    s_->log("request from " + peer_name(identity) + " failed: " + err.what(), LogLevel::kWarn);
    s_->send_error(identity, err.what());
  }
}

size_t Server::work_in_progress() const { return s_->offload.pending() + s_->disk.pending(); }

int Server::http_port() const { return s_->http ? s_->http->port() : 0; }

const std::string& Server::endpoint() const { return s_->opt.listen; }

void Server::run(const std::atomic<bool>& stop) {
  while (!stop.load()) poll_once(100);
}

int64_t Server::submit(const wire::Submit& submit) { return s_->submit_job(submit); }
std::vector<wire::JobStatus> Server::status(int64_t job) { return s_->job_status(job); }
void Server::cancel(int64_t job) { s_->cancel_job(job); }
std::vector<wire::ModelFile> Server::export_plan(int64_t job) { return s_->export_job(job); }
size_t Server::workers() const { return s_->workers.size(); }

}  // namespace fusetune::coordinator
