// Server: `fusetune coordinator`, the tuning service's brain, and the engine of embedded `tune`.
//
// Takes a ZeroMQ context, an endpoint to bind a ROUTER socket on, and the search database
// (storage/search_db.h). Workers and clients connect with DEALER sockets and speak
// proto/service.proto. The server makes the coordinator's parts and runs their event loop:
// transport.h (the socket), scheduler.h (workers, leases, dispatch), job_manager.h (a job's
// lifecycle) with job_search.h (its search rounds), submissions.h (uploads and submissions),
// exporter.h (bundles), service_view.h (what the HTTP API, dashboards/api.h, reads). A job (a
// model's files, a device, options) is planned by a JobPlanner into tasks, one per unique group
// signature: tasks the database already answers are cache hits, and jobs that share a signature
// share its task. Tasks are leased to idle workers whose device matches, taking jobs in turn
// (round robin) so several jobs progress fairly; a lease ends with the worker's result, or is
// re-queued when its deadline passes or its worker falls silent (no heartbeat for
// worker_timeout_ms) or gives it back; after max_attempts a task fails and its groups keep
// modeled costs. When a job's tasks are all settled, its plan is chosen from the measurements and
// the job is done, with a summary.
// The event loop only moves messages and database rows: importing, planning and lowering a
// submitted model, a resumed job's model, round and final plans and an export's bundle run
// on a pool of `work_threads` (coordinator/offload.h), and a client's submit or export is answered
// when its work is done, while workers' heartbeats, results and leases go on being served. The
// in-process calls (submit, export_plan) do the same work on the caller's thread.
// Guarantees: every state that matters (jobs, tasks, models, results) is in the database, in one
// transaction per change, so a server started on the same file resumes every unfinished job
// (leases of the previous process are re-queued); a poll's messages, expiry and dispatch commit
// as one transaction and what they send leaves after it; a result arriving for a task already
// done (a late duplicate) records nothing; malformed frames, unknown peers and failing requests
// are logged and answered with an error or ignored, never fatal; a database that cannot be
// written (a full disk) stops new work, not the coordinator, until a write works again; a worker
// of an incompatible protocol version is refused with the versions this coordinator speaks; with
// CURVE keys, a peer whose public key is not allowed is refused at the handshake (proto/curve.h)
// and never heard.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "dashboards/http_server.h"
#include "fusetune_proto/service.pb.h"
#include "proto/curve.h"

namespace fusetune::coordinator {

struct ServerOptions {
  std::string listen = "tcp://127.0.0.1:5555";
  std::filesystem::path db;
  int heartbeat_ms = 1000;
  int worker_timeout_ms = 5000;
  int max_attempts = 3;
  int work_threads = 2;  // the pool that imports, plans, lowers and exports off the event loop
  // The largest message a peer may send (ZMQ_MAXMSGSIZE): a peer sending more is disconnected by
  // ZeroMQ before the message is buffered. Model files travel in 4 MB upload pieces; 64 MiB
  // leaves room for a model sent inline in its submission.
  int64_t max_message_bytes = 64LL << 20;
  // Upload quotas, in bytes: the files of one job's upload, what one client's uploads under way
  // hold together, and the model store (the models stored beside the database and every upload
  // under way). A piece that would pass one is refused, naming the quota's flag.
  int64_t max_upload_bytes = 256LL << 30;
  int64_t max_client_upload_bytes = 256LL << 30;
  int64_t max_store_bytes = 1LL << 40;
  std::string id = "coordinator";
  wire::ServerSecurity security;  // CURVE: this coordinator's key pair and the keys it accepts
  std::function<void(const std::string&)> log;  // default: stderr
  // The HTTP side (dashboards/http_server.h: /metrics, /api/, the dashboard); none when its
  // address is empty. A token is required beyond loopback.
  dashboards::HttpOptions http;
};

class Server {
 public:
  Server(zmq::context_t& context, ServerOptions options);
  ~Server();

  // Handles what arrives within `timeout_ms`, then expires leases and dispatches.
  void poll_once(int timeout_ms);
  // poll_once until `stop` becomes true.
  void run(const std::atomic<bool>& stop);
  // One message's frame as received from peer `identity` (what poll_once does with each; the
  // request fuzzer calls it directly): handled, or logged and answered with an error.
  // `roles` (wire::PeerRole): what the peer's key may do; a message of another role is refused.
  void handle_frame(const std::string& identity, const void* data, size_t size, unsigned roles = wire::kEveryRole);
  // Work on the pool whose completion has not run yet (poll_once runs what is done).
  size_t work_in_progress() const;
  // The port the HTTP side listens on (ServerOptions::http; port 0 there: the one chosen); 0
  // without one.
  int http_port() const;
  // The endpoint the socket is bound to: ServerOptions::listen, with the port the system chose
  // where it asked for port 0 ("tcp://127.0.0.1:0").
  const std::string& endpoint() const;

  // The requests clients make over the socket, also callable in process (embedded `tune`).
  int64_t submit(const wire::Submit& submit);
  std::vector<wire::JobStatus> status(int64_t job);  // job 0: every job
  void cancel(int64_t job, const std::string& reason = "cancelled by a client");
  std::vector<wire::ModelFile> export_plan(int64_t job);
  size_t workers() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace fusetune::coordinator
