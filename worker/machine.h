// WorkerMachine: `fusetune worker --device all` (or a list: `--device 0,1`, `--device host,host`),
// every device of a lab machine served by one process.
//
// Takes the worker's options and a device list. Each device is a WorkerDaemon (worker/daemon.h)
// on its own thread: its own DEALER socket and worker id (ID/gpuN for CUDA device N, ID/hostK for
// the K-th entry of a list where the host stands in; the coordinator leases, times out and reports
// each device apart), its own measuring child on that device, its
// own tasks in hand (the next compiling while one is measured). The devices of one architecture
// share one compile pool of `compile_jobs` threads, so a machine of eight GPUs does not start
// eight times the compilations its cores can run. Guarantees: a device that fails to start or
// stops with an error leaves the others serving; on stop every daemon drains as it does alone;
// run() returns the worst exit status (0 when all stopped cleanly) and reports() what each device
// did (as lines, or as metrics). resolve_devices() turns the flag into the list, naming the culprit
// when a device is absent.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "worker/daemon.h"

namespace fusetune::worker {

// "all": every CUDA device the driver reports (an error naming why when there is none);
// otherwise a comma-separated list of "host" and CUDA ordinals, each checked to exist.
std::vector<std::string> resolve_devices(const std::string& spec);

class WorkerMachine {
 public:
  WorkerMachine(zmq::context_t& context, WorkerOptions options, std::vector<std::string> devices);
  int run(const std::atomic<bool>& stop);
  std::vector<DeviceReport> reports() const;  // safe from any thread, while run() runs too
  // One line per device: tasks, candidates, handed back, compile and measure time, share busy.
  static std::string format(const std::vector<DeviceReport>& reports);
  // The same figures in Prometheus's text format, per device (`fusetune worker --metrics`).
  static std::string metrics(const std::vector<DeviceReport>& reports);

 private:
  zmq::context_t& context_;
  WorkerOptions opt_;
  std::vector<std::string> devices_;
  mutable std::mutex daemons_mutex_;  // daemons_ grows in run() while reports() may read it
  std::vector<std::unique_ptr<WorkerDaemon>> daemons_;
};

}  // namespace fusetune::worker
