// WorkerDaemon: `fusetune worker` for one device, the process (or, on a machine of several GPUs,
// one of its threads: worker/machine.h) that measures candidates there.
//
// Takes a ZeroMQ context, the coordinator's endpoint and the device to measure on. It connects a
// DEALER socket, says hello (protocol versions, device as the driver reports it, backend,
// compiler, how many tasks it takes at once), and then serves tasks: compile every candidate on
// the compile pool (worker/compile_pool.h), verify and time the compiled ones in the supervised
// child (worker/sandbox.h), one task at a time, and send one result per candidate, failures
// included. With queue_depth 2 (the default) it holds a second task and compiles it while the
// first is measured. A heartbeat names the tasks in hand every heartbeat interval, so the
// coordinator can tell a slow task from a dead worker. Guarantees: a bad task (unparsable graph, a
// candidate that crashes or hangs) yields failure statuses, never a dead daemon; when the
// coordinator restarts, the socket reconnects and the daemon says hello again when the new
// coordinator does not know it, its hellos backing off (doubling, with jitter, up to
// hello_retry_max_ms) while no coordinator answers; when `stop` becomes true (SIGTERM) it drains:
// tasks not yet being measured are handed back at once (an `abandoned` result), the one being
// measured may finish for drain_ms and is then abandoned (its child killed) as it is at once when
// `abort` becomes true (a second SIGTERM); then a bye goes out and run() returns 0. A refusal
// (incompatible protocol, or a CURVE handshake the coordinator rejects) makes run() return 3
// after logging why. report() says what the device did.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <zmq.hpp>

#include "backend/backend.h"
#include "core/clock.h"
#include "fusetune_proto/service.pb.h"
#include "proto/curve.h"

namespace fusetune::worker {

class CompilePool;

struct WorkerOptions {
  std::string coordinator;   // "tcp://host:port" or "inproc://..."
  std::string device = "host";  // "host" or a CUDA device ordinal
  int compile_jobs = 2;
  std::string executable;    // the fusetune binary that runs `worker-child`
  std::string worker_id;     // default: hostname:pid
  int hello_retry_ms = 2000;       // the first retry of an unanswered hello; doubled up to the maximum
  int hello_retry_max_ms = 30000;
  int queue_depth = 2;             // tasks held at once: the next one compiles while one is measured
  int drain_ms = 0;                // on stop: how long the task being measured may still take
  const std::atomic<bool>* abort = nullptr;  // when true: abandon the task being measured at once
  CompilePool* pool = nullptr;     // shared with the machine's other devices; null: the daemon's own
  wire::ClientSecurity security;  // CURVE: the coordinator's public key and this worker's pair
  bool quiet = false;        // no log lines (the embedded `tune` shows a progress bar instead)
  // What times hellos, heartbeats and the drain (core/clock.h); null: system_clock(). How long a
  // compilation or a measurement took is always read from the system's clock.
  const fusetune::Clock* clock = nullptr;
};

// What one device did, for the report at the end (`fusetune worker` prints one line per device).
struct DeviceReport {
  std::string worker_id, device, description;
  int tasks = 0;          // results sent
  int handed_back = 0;    // leases returned unfinished
  int candidates = 0, ok = 0;
  double compile_s = 0;   // the tasks' compile phases (overlapping the measurements when prefetched)
  double measure_s = 0;   // the measuring child at work
  double wall_s = 0;      // connected
  int in_hand = 0;        // tasks held now: the one measured and the one compiling behind it
  bool measuring = false; // the measuring child is at work now
};

// The id a worker takes when given none: HOST:PID.
std::string default_worker_id();

// The device as its driver (or the host) reports it; `backend_name` gets "cuda" or "host".
wire::DeviceInfo probe_device(const std::string& device, std::string& backend_name);

// The planner's name for the device a backend runs on: the built-in description its driver's
// attributes identify (planner/device_identity.h: "NVIDIA H100 PCIe" with 114 SMs -> "h100-pcie");
// for a GPU none describes, the description made from its attributes ("sm_90-132sm"), registered
// in this process (planner::register_device: an embedded coordinator plans for it; another
// process does not know it), or its architecture when the driver reported too little; "host"
// for the host.
std::string planner_device_name(const backend::DeviceProperties& props);

class WorkerDaemon {
 public:
  WorkerDaemon(zmq::context_t& context, WorkerOptions options);
  int run(const std::atomic<bool>& stop);
  int tasks_done() const;
  DeviceReport report() const;

 private:
  zmq::context_t& context_;
  WorkerOptions opt_;
  mutable std::mutex mutex_;  // guards report_ (read by other threads while run() works)
  DeviceReport report_;
};

}  // namespace fusetune::worker
