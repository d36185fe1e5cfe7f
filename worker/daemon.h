// WorkerDaemon: `fusetune worker`, the process on each lab machine that measures candidates.
//
// Takes a ZeroMQ context, the coordinator's endpoint and the device to measure on. It connects a
// DEALER socket, says hello (protocol versions, device as the driver reports it, backend,
// compiler), and then serves tasks one at a time: compile every candidate on the compile pool
// (worker/compile_pool.h), verify and time the compiled ones in the supervised child
// (worker/sandbox.h), and send one result per candidate, failures included. A heartbeat goes out
// every heartbeat interval while it works, so the coordinator can tell a slow task from a dead
// worker. Guarantees: a bad task (unparsable graph, a candidate that crashes or hangs) yields
// failure statuses, never a dead daemon; when the coordinator restarts, the socket reconnects
// and the daemon says hello again when the new coordinator does not know it; when `stop` becomes
// true (SIGTERM) the task in hand is abandoned at once (its child killed, the lease handed back
// with an `abandoned` result), a bye is sent, and run() returns 0. A refusal (incompatible
// protocol, or a CURVE handshake the coordinator rejects) makes run() return 3 after logging why.
#pragma once

#include <atomic>
#include <string>
#include <zmq.hpp>

#include "proto/curve.h"

namespace fusetune::worker {

struct WorkerOptions {
  std::string coordinator;   // "tcp://host:port" or "inproc://..."
  std::string device = "host";  // "host" or a CUDA device ordinal
  int compile_jobs = 2;
  std::string executable;    // the fusetune binary that runs `worker-child`
  std::string worker_id;     // default: hostname:pid
  int hello_retry_ms = 2000;
  wire::ClientSecurity security;  // CURVE: the coordinator's public key and this worker's pair
  bool quiet = false;        // no log lines (the embedded `tune` shows a progress bar instead)
};

// The planner's name for a GPU the driver describes ("NVIDIA H100 80GB HBM3" -> "h100"); the
// architecture ("sm_86") for one the planner has no description of.
std::string planner_device_name(const std::string& description, const std::string& arch);

class WorkerDaemon {
 public:
  WorkerDaemon(zmq::context_t& context, WorkerOptions options);
  int run(const std::atomic<bool>& stop);
  int tasks_done() const { return tasks_done_; }

 private:
  zmq::context_t& context_;
  WorkerOptions opt_;
  int tasks_done_ = 0;
};

}  // namespace fusetune::worker
