#include "worker/machine.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <thread>

#include "backend/cuda.h"
#include "core/error.h"
#include "core/log.h"
#include "dashboards/metrics.h"
#include "worker/compile_pool.h"

namespace fusetune::worker {

std::vector<std::string> resolve_devices(const std::string& spec) {
  std::vector<std::string> out;
  if (spec == "all") {
    std::string why;
    const int n = backend::cuda_device_count(&why);
    check(n > 0, "--device all: no CUDA device on this machine (", why, "); --device host measures on the host");
    for (int k = 0; k < n; ++k) out.push_back(std::to_string(k));
    return out;
  }
  std::string why;
  int count = -1;  // asked of the driver once, when a list names an ordinal
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string d = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (d == "host") {
      out.push_back(d);
      continue;
    }
    check(!d.empty() && d.find_first_not_of("0123456789") == std::string::npos, "--device '", spec, "': '", d,
          "' is neither 'host', 'all' nor a CUDA device ordinal");
    if (count < 0) count = backend::cuda_device_count(&why);
    check(std::stoi(d) < count, "--device '", spec, "': no CUDA device ", d, " (", count, " found",
          count == 0 ? ": " + why : std::string(), ")");
    out.push_back(d);
  }
  return out;
}

WorkerMachine::WorkerMachine(zmq::context_t& context, WorkerOptions options, std::vector<std::string> devices)
    : context_(context), opt_(std::move(options)), devices_(std::move(devices)) {
  check(!devices_.empty(), "a worker machine needs a device");
}

int WorkerMachine::run(const std::atomic<bool>& stop) {
  if (opt_.worker_id.empty()) opt_.worker_id = default_worker_id();
  // One compile pool per architecture, shared by that architecture's devices.
  std::map<std::string, std::unique_ptr<CompilePool>> pools;
  std::vector<std::string> archs(devices_.size());
  for (size_t k = 0; k < devices_.size(); ++k) {
    std::string backend_name;
    try {
      archs[k] = probe_device(devices_[k], backend_name).arch();
    } catch (const Error& e) {
      write_log(LogLevel::kError, "worker", {0, 0, opt_.worker_id}, "device " + devices_[k] + " not served: " + e.what());
      continue;
    }
    if (!pools.count(archs[k])) pools[archs[k]] = std::make_unique<CompilePool>(archs[k], opt_.compile_jobs);
  }
  std::vector<int> status(devices_.size(), 3);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < devices_.size(); ++k) {
    if (archs[k].empty()) continue;
    WorkerOptions o = opt_;
    o.device = devices_[k];
    o.worker_id = devices_.size() == 1 ? opt_.worker_id
                                       : opt_.worker_id + "/" + (devices_[k] == "host" ? "host" + std::to_string(k) : "gpu" + devices_[k]);
    o.pool = pools.at(archs[k]).get();
    WorkerDaemon* d = nullptr;
    {
      const std::lock_guard<std::mutex> lock(daemons_mutex_);
      daemons_.push_back(std::make_unique<WorkerDaemon>(context_, o));
      d = daemons_.back().get();
    }
    threads.emplace_back([d, &stop, &status, k, id = o.worker_id] {
      try {
        status[k] = d->run(stop);
      } catch (const std::exception& e) {  // one device's failure leaves the others serving
        write_log(LogLevel::kError, "worker", {0, 0, id}, "device " + std::to_string(k) + " stopped: " + e.what());
        status[k] = 1;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int worst = 0;
  for (int s : status) worst = std::max(worst, s);
  return worst;
}

std::vector<DeviceReport> WorkerMachine::reports() const {
  const std::lock_guard<std::mutex> lock(daemons_mutex_);
  std::vector<DeviceReport> out;
  for (const auto& d : daemons_) out.push_back(d->report());
  return out;
}

std::string WorkerMachine::format(const std::vector<DeviceReport>& reports) {
  std::string out;
  char line[400];
  for (const DeviceReport& r : reports) {
    std::snprintf(line, sizeof line,
                  "device %s (%s) as %s: %d tasks, %d candidates (%d ok), %d handed back; compiling %.1f s, "
                  "measuring %.1f s (%.0f%% of %.1f s connected)\n",
                  r.device.c_str(), r.description.c_str(), r.worker_id.c_str(), r.tasks, r.candidates, r.ok,
                  r.handed_back, r.compile_s, r.measure_s, r.wall_s > 0 ? 100 * r.measure_s / r.wall_s : 0.0, r.wall_s);
    out += line;
  }
  return out;
}

std::string WorkerMachine::metrics(const std::vector<DeviceReport>& reports) {
  using Samples = std::vector<std::pair<dashboards::Labels, double>>;
  Samples tasks, handed_back, candidates, compile_s, measure_s, in_hand, measuring, connected;
  for (const DeviceReport& r : reports) {
    const dashboards::Labels device = {{"worker", r.worker_id}, {"device", r.device}};
    tasks.push_back({device, static_cast<double>(r.tasks)});
    handed_back.push_back({device, static_cast<double>(r.handed_back)});
    dashboards::Labels ok = device, failed = device;
    ok["outcome"] = "ok";
    failed["outcome"] = "failed";
    candidates.push_back({ok, static_cast<double>(r.ok)});
    candidates.push_back({failed, static_cast<double>(r.candidates - r.ok)});
    compile_s.push_back({device, r.compile_s});
    measure_s.push_back({device, r.measure_s});
    in_hand.push_back({device, static_cast<double>(r.in_hand)});
    measuring.push_back({device, r.measuring ? 1.0 : 0.0});
    connected.push_back({device, r.wall_s});
  }
  dashboards::Exposition x;
  x.counter("fusetune_worker_tasks", "Task results sent, per device.", tasks);
  x.counter("fusetune_worker_handed_back", "Leases handed back unfinished, per device.", handed_back);
  x.counter("fusetune_worker_candidates", "Candidates measured, per device and outcome.", candidates);
  x.counter("fusetune_worker_compile_seconds", "Seconds spent compiling tasks, per device (measured).", compile_s);
  x.counter("fusetune_worker_measure_seconds", "Seconds the measuring child worked, per device (measured).", measure_s);
  x.gauge("fusetune_worker_queue_depth", "Tasks held now: the one measured and the one compiling behind it.", in_hand);
  x.gauge("fusetune_worker_measuring", "1 while the device's measuring child is at work.", measuring);
  x.gauge("fusetune_worker_connected_seconds", "Seconds since the device's daemon started.", connected);
  return x.text();
}

}  // namespace fusetune::worker
