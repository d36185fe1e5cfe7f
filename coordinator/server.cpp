#include "coordinator/server.h"

#include <chrono>
#include <ctime>
#include <set>

#include "coordinator/decisions.h"
#include "coordinator/event_log.h"
#include "coordinator/exporter.h"
#include "coordinator/job_manager.h"
#include "coordinator/offload.h"
#include "coordinator/scheduler.h"
#include "coordinator/service_view.h"
#include "coordinator/submissions.h"
#include "coordinator/transport.h"
#include "core/error.h"
#include "dashboards/api.h"
#include "proto/wire.h"
#include "storage/job_queue.h"
#include "storage/search_db.h"

namespace fusetune::coordinator {

using Clock = std::chrono::steady_clock;

// The parts, in the order they are made: each takes references to those it works with (the
// pools are only used once all are made). The pools come last, so that they are destroyed first
// and no pool thread outlives what it was given.
struct Server::State {
  ServerOptions opt;
  EventLog log;
  storage::SearchDb db;     // the tuning records
  storage::JobQueue queue;  // jobs and tasks, in the same file
  Transport transport;
  Decisions decisions;
  Scheduler scheduler;
  JobManager jobs;
  Submissions submissions;
  Exporter exporter;
  CoordinatorView view;
  std::unique_ptr<dashboards::HttpServer> http;
  Offload offload;
  Offload disk{1};  // writes upload pieces, never behind the pool's planning
  Clock::time_point last_expiry = Clock::now();
  // The WAL is copied back into the file by the pool, through a connection of its own, once a
  // second: a commit on the loop never waits for that copy's syncs.
  std::shared_ptr<storage::DbFile> checkpointer;
  Clock::time_point last_checkpoint = Clock::now();
  bool checkpointing = false;
  // Why the database cannot be written (a full disk), empty while it can: meanwhile new work
  // (hellos, results, submissions, uploads, cancels) is refused with this, status and exports
  // are answered, nothing is leased, and a write is tried once a second to resume by itself.
  std::string unwritable;
  std::chrono::system_clock::time_point unwritable_since;
  Clock::time_point last_write_probe;

  State(zmq::context_t& context, ServerOptions o)
      : opt(std::move(o)),
        log(opt.log),
        db(opt.db),
        queue(db),
        transport(context, opt.listen, opt.max_message_bytes, opt.security, log),
        decisions(db),
        scheduler(queue, transport, {opt.id, opt.heartbeat_ms, opt.worker_timeout_ms, opt.max_attempts}, log,
                  {[this] { return jobs.running(); }, [this](int64_t task) { jobs.settled(task); },
                   [this](const std::string& signature) { decisions.forget(signature); }, [this] { jobs.bind_waiting(); }}),
        jobs(db, queue, offload, decisions, scheduler, log),
        submissions(opt.db, {opt.max_upload_bytes, opt.max_client_upload_bytes, opt.max_store_bytes}, queue, jobs, transport,
                    offload, disk, log),
        exporter(queue, decisions, offload, transport, log),
        view(db, queue, jobs, scheduler, decisions, transport, [this] { return unwritable_warning(); }),
        offload(opt.work_threads) {
    db.file().set_auto_checkpoint(false);
    if (!opt.http.address.empty()) http = std::make_unique<dashboards::HttpServer>(opt.http);
  }

  std::string unwritable_warning() const {
    if (unwritable.empty()) return "";
    const std::time_t since = std::chrono::system_clock::to_time_t(unwritable_since);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&since));
    return "the coordinator cannot write its database since " + std::string(when) + " (" + unwritable +
           "): it takes no new work until it can";
  }

  // Refuses, while the database cannot be written, what would write it; whether `e` may go on.
  bool writable_for(const std::string& identity, const wire::Envelope& e) {
    if (unwritable.empty() || !needs_of(e).writes) return true;
    transport.send_error(identity, "the coordinator cannot write its database (" + unwritable +
                                       "): it takes no new work until it can; status and exports are answered");
    return false;
  }

  // One message, routed to the part it is for; a submission's files are moved out of it.
  void handle(const std::string& identity, wire::Envelope& e) {
    scheduler.heard_from(identity);
    if (!writable_for(identity, e)) return;
    switch (e.body_case()) {
      case wire::Envelope::kHello: return scheduler.on_hello(identity, e.hello(), e.version());
      case wire::Envelope::kHeartbeat: return scheduler.on_heartbeat(identity, e.heartbeat());
      case wire::Envelope::kResult: return scheduler.on_result(identity, e.result());
      case wire::Envelope::kBye: return scheduler.on_bye(identity);
      case wire::Envelope::kSubmit: return submissions.submit_async(identity, std::move(*e.mutable_submit()));  // answered when planned
      case wire::Envelope::kUpload: return submissions.on_upload(identity, std::move(*e.mutable_upload()));  // answered when written
      case wire::Envelope::kStatus: {
        wire::Envelope r;
        for (wire::JobStatus& s : jobs.status(e.status().job_id())) *r.mutable_status_reply()->add_jobs() = std::move(s);
        r.mutable_status_reply()->set_workers(static_cast<int>(scheduler.size()));
        if (!unwritable.empty()) r.mutable_status_reply()->set_warning(unwritable_warning());
        return transport.send(identity, std::move(r));
      }
      case wire::Envelope::kCancel: {
        jobs.cancel(e.cancel().job_id());
        wire::Envelope r;
        r.mutable_job()->set_job_id(e.cancel().job_id());
        return transport.send(identity, std::move(r));
      }
      case wire::Envelope::kExportRequest: return exporter.export_async(identity, e.export_request().job_id());
      default: fail("unexpected ", wire::body_name(e), " message");
    }
  }

  // A commit failed: when nothing can be written (a full disk) new work stops, not the
  // coordinator, and each peer that was to hear of what was rolled back hears that instead; any
  // other failure is a bug and goes on up (rethrown by the caller).
  bool stop_writing(const std::set<std::string>& answered) {
    const std::string why = db.file().write_probe();
    if (why.empty()) return false;
    for (const std::string& peer : answered) {
      transport.send_error(peer, "the coordinator could not write its database (" + why + "): what you sent was not kept; try again");
    }
    unwritable = why;
    unwritable_since = std::chrono::system_clock::now();
    last_write_probe = Clock::now();
    log(LogIds{}, LogEvent{"database_unwritable", {{"error", why}}},
        "the database cannot be written (" + why + "): new work is refused, status and exports answered, until it can",
        LogLevel::kError);
    return true;
  }

  // While the database cannot be written, once a second a write is tried; when it works, leases
  // and jobs are taken from the database again, as a restart takes them.
  void probe_writes() {
    const auto now = Clock::now();
    if (now - last_write_probe < std::chrono::seconds(1)) return;
    last_write_probe = now;
    if (!db.file().write_probe().empty()) return;
    log(LogIds{}, LogEvent{"database_writable", {{"since", unwritable}}},
        "the database can be written again: new work is taken (it could not since: " + unwritable + ")");
    unwritable.clear();
    unwritable_since = {};
    scheduler.reload_leases();
    jobs.reload();
  }

  void checkpoint_later() {
    const auto now = Clock::now();
    if (checkpointing || now - last_checkpoint <= std::chrono::seconds(1)) return;
    checkpointing = true;
    last_checkpoint = now;
    offload.post(
        [this, path = opt.db, file = checkpointer]() mutable -> Offload::Completion {
          if (!file) file = std::make_shared<storage::DbFile>(path);
          file->checkpoint();
          return [this, file] {
            checkpointer = file;
            checkpointing = false;
          };
        },
        [this](const std::string& error) {
          checkpointing = false;
          log("WAL checkpoint failed (the next one tries again): " + error, LogLevel::kWarn);
        });
  }
};

Server::Server(zmq::context_t& context, ServerOptions options)
    : s_(std::make_unique<State>(context, std::move(options))) {
  const int requeued = s_->queue.requeue_leased();
  s_->jobs.load_unfinished();
  const ServerOptions& o = s_->opt;
  s_->log(LogIds{},
          LogEvent{"listening",
                   {{"endpoint", endpoint()},
                    {"jobs_resuming", static_cast<int64_t>(s_->jobs.loading())},
                    {"jobs_waiting", static_cast<int64_t>(s_->jobs.waiting())},
                    {"leases_requeued", static_cast<int64_t>(requeued)}}},
          std::string(o.security.enabled() ? "CURVE: " + std::to_string(o.security.workers.size()) + " worker keys and " +
                                                 std::to_string(o.security.clients.size()) + " client keys allowed; "
                                           : "no CURVE keys: peers are not authenticated (loopback or embedded use only); ") +
          "listening on " + endpoint() +
          (s_->http ? " and http://" + o.http.address.substr(0, o.http.address.rfind(':')) + ":" + std::to_string(s_->http->port()) : "") +
          " with database " + o.db.string() + " (" + std::to_string(s_->jobs.loading()) + " unfinished jobs resuming, " +
          std::to_string(s_->jobs.waiting()) + " waiting for a worker, " + std::to_string(requeued) + " leases re-queued)");
}

Server::~Server() = default;

void Server::poll_once(int timeout_ms) {
  std::vector<zmq::pollitem_t> items;
  s_->transport.poll_items(items);
  if (s_->http) items.push_back({nullptr, s_->http->wake_fd(), ZMQ_POLLIN, 0});
  // While the pool works, look for its completions often.
  wire::poll(items.data(), items.size(), work_in_progress() > 0 ? std::min(timeout_ms, 5) : timeout_ms);
  s_->disk.run_completions();
  s_->offload.run_completions();
  if (s_->http) s_->http->answer_pending([this](const dashboards::HttpRequest& r) { return dashboards::answer(s_->view, r); });
  s_->transport.authenticate();
  // Everything that is waiting, so heartbeats queued behind slow work are seen before expiry; and
  // the leases that follow, in one transaction: a result's rows and the next lease used to commit
  // one by one, and the commits were a quarter of the loop's time under bench/service_load. Each
  // handler's writes are a savepoint of it (storage::DbFile::write), so one that fails undoes
  // only its own. What the handlers send goes out after the commit.
  auto receive_all = [this] {
    s_->transport.receive_all([this](const std::string& identity, const void* data, size_t size, unsigned roles) {
      handle_frame(identity, data, size, roles);
    });
  };
  if (!s_->unwritable.empty()) {  // what reads the database is answered, the rest refused, nothing leased
    receive_all();
    s_->probe_writes();
    return;
  }
  s_->transport.hold();
  try {
    s_->db.file().write([&] {
      receive_all();
      const auto now = Clock::now();
      if (now - s_->last_expiry > std::chrono::milliseconds(200)) {
        s_->scheduler.expire();
        s_->submissions.drop_idle(now);
        s_->last_expiry = now;
      }
      s_->scheduler.dispatch();
    });
  } catch (const Error& e) {
    if (!s_->stop_writing(s_->transport.drop_held())) throw;
    return;
  } catch (...) {
    s_->transport.drop_held();
    throw;
  }
  s_->transport.release();
  s_->checkpoint_later();
}

void Server::handle_frame(const std::string& identity, const void* data, size_t size, unsigned roles) {
  try {
    wire::Envelope e = wire::decode(data, size);
    if (!s_->transport.allowed(identity, e, roles)) return;
    s_->handle(identity, e);
  } catch (const Error& err) {
    s_->log(LogIds{},
            LogEvent{"request_failed",
                     {{"peer", peer_name(identity)}, {"bytes", static_cast<int64_t>(size)}, {"error", std::string(err.what())}}},
            "request from " + peer_name(identity) + " failed: " + err.what(), LogLevel::kWarn);
    s_->transport.send_error(identity, err.what());
  }
}

size_t Server::work_in_progress() const { return s_->offload.pending() + s_->disk.pending(); }

int Server::http_port() const { return s_->http ? s_->http->port() : 0; }

const std::string& Server::endpoint() const { return s_->transport.endpoint(); }

void Server::run(const std::atomic<bool>& stop) {
  while (!stop.load()) poll_once(100);
}

int64_t Server::submit(const wire::Submit& submit) { return s_->submissions.submit(submit); }
std::vector<wire::JobStatus> Server::status(int64_t job) { return s_->jobs.status(job); }
void Server::cancel(int64_t job, const std::string& reason) { s_->jobs.cancel(job, reason); }
std::vector<wire::ModelFile> Server::export_plan(int64_t job) { return s_->exporter.export_job(job); }
size_t Server::workers() const { return s_->scheduler.size(); }

}  // namespace fusetune::coordinator
