#include "worker/daemon.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>

#include "backend/cuda.h"
#include "codegen/kernel_ir.h"
#include "core/error.h"
#include "proto/wire.h"
#include "worker/compile_pool.h"
#include "worker/sandbox.h"

namespace fusetune::worker {

namespace {

using Clock = std::chrono::steady_clock;

wire::DeviceInfo probe_device(const std::string& device, std::string& backend_name) {
  wire::DeviceInfo info;
  if (device == "host") {
    const auto props = backend::make_host_backend()->properties();
    info.set_name("host");
    info.set_arch("host");
    info.set_description(props.description);
    info.set_sms(props.multiprocessors);
    info.set_toolkit(props.toolkit);
    backend_name = "host";
    return info;
  }
  int ordinal = 0;
  try {
    ordinal = std::stoi(device);
  } catch (const std::exception&) {
    fail("--device '", device, "': expected 'host' or a CUDA device ordinal");
  }
  std::string why;
  std::unique_ptr<backend::Backend> b = backend::make_cuda_backend(ordinal, &why);
  check(b != nullptr, "--device ", device, ": ", why);
  const auto props = b->properties();
  info.set_arch(props.arch);
  info.set_description(props.description);
  info.set_sms(props.multiprocessors);
  info.set_compute_capability(props.compute_capability);
  info.set_driver_version(props.driver);
  info.set_toolkit(props.toolkit);
  info.set_name(planner_device_name(props.description, props.arch));
  backend_name = "cuda";
  return info;
}

struct Outcome {
  wire::TaskResult result;
  std::string note;  // a log line
};

Outcome process(const wire::Task& task, CompilePool& pool, Sandbox& sandbox, const std::atomic<bool>& cancel) {
  Outcome out;
  out.result.set_task_id(task.task_id());
  const auto t0 = Clock::now();
  std::vector<wire::Candidate> candidates(task.candidates().begin(), task.candidates().end());
  std::vector<wire::CandidateResult> results(candidates.size());
  try {
    wire::from_subgraph(task.graph());  // a task whose graph does not rebuild fails as a whole, here
  } catch (const Error& e) {
    for (size_t k = 0; k < candidates.size(); ++k) {
      results[k].set_config(candidates[k].config());
      results[k].set_source_digest(candidates[k].source_digest());
      results[k].set_status("runtime_fault");
      results[k].set_detail(std::string("bad task graph: ") + e.what());
    }
    for (auto& r : results) *out.result.add_results() = r;
    out.note = "task " + std::to_string(task.task_id()) + ": bad graph: " + e.what();
    return out;
  }
  const std::vector<CompileOutput> compiled = pool.compile(candidates);
  wire::ChildRequest req;
  *req.mutable_graph() = task.graph();
  *req.mutable_policy() = task.policy();
  std::vector<size_t> sent;  // candidate index of each child candidate
  for (size_t k = 0; k < candidates.size(); ++k) {
    wire::CandidateResult& r = results[k];
    r.set_config(candidates[k].config());
    r.set_source_digest(candidates[k].source_digest());
    r.set_compile_ms(compiled[k].compile_ms);
    r.set_registers(compiled[k].registers);
    r.set_shared_bytes(compiled[k].shared_bytes);
    r.set_spill_bytes(compiled[k].spill_bytes);
    if (!compiled[k].ok) {
      r.set_status("compile_error");
      r.set_detail(compiled[k].error.substr(0, 4000));
      continue;
    }
    wire::ChildCandidate& cc = *req.add_candidates();
    *cc.mutable_candidate() = candidates[k];
    cc.set_cubin(compiled[k].cubin);
    sent.push_back(k);
  }
  // An interleaved pair sends its first result after both candidates are timed.
  const int timeout = (task.policy().timeout_ms() > 0 ? task.policy().timeout_ms() : 10000) *
                      (task.policy().interleave() ? 2 : 1);
  const std::vector<wire::CandidateResult> measured = sandbox.run(req, timeout, &cancel);
  if (measured.size() < sent.size()) {  // cancelled: the lease goes back unfinished
    out.result.set_abandoned(true);
    out.note = "task " + std::to_string(task.task_id()) + " abandoned";
    return out;
  }
  int ok = 0;
  for (size_t j = 0; j < sent.size(); ++j) {
    wire::CandidateResult& r = results[sent[j]];
    const wire::CandidateResult& m = measured[j];
    r.set_status(m.status());
    r.set_detail(m.detail());
    r.set_median_us(m.median_us());
    r.set_min_us(m.min_us());
    r.set_max_us(m.max_us());
    r.set_repeats(m.repeats());
    r.set_ci_low_us(m.ci_low_us());
    r.set_ci_high_us(m.ci_high_us());
    r.set_interleaved_with(m.interleaved_with());
    r.set_max_abs_error(m.max_abs_error());
    ok += m.status() == "ok";
  }
  for (auto& r : results) *out.result.add_results() = r;
  char line[200];
  std::snprintf(line, sizeof line, "task %lld: %d of %zu candidates ok in %.1f s", static_cast<long long>(task.task_id()),
                ok, candidates.size(), std::chrono::duration<double>(Clock::now() - t0).count());
  out.note = line;
  return out;
}

}  // namespace

std::string planner_device_name(const std::string& description, const std::string& arch) {
  for (const auto& [marker, name] : std::vector<std::pair<std::string, std::string>>{
           {"H200", "h200"}, {"H100", "h100"}, {"A100", "a100"}, {"L4", "l4"}, {"4090", "rtx4090"}}) {
    if (description.find(marker) != std::string::npos) return name;
  }
  return arch;
}

WorkerDaemon::WorkerDaemon(zmq::context_t& context, WorkerOptions options)
    : context_(context), opt_(std::move(options)) {
  if (opt_.worker_id.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    opt_.worker_id = std::string(host) + ":" + std::to_string(::getpid());
  }
}

int WorkerDaemon::run(const std::atomic<bool>& stop) {
  auto log = [&](const std::string& line) {
    if (!opt_.quiet) std::fprintf(stderr, "fusetune worker %s: %s\n", opt_.worker_id.c_str(), line.c_str());
  };
  std::string backend_name;
  const wire::DeviceInfo device = probe_device(opt_.device, backend_name);
  CompilePool pool(device.arch(), opt_.compile_jobs);
  Sandbox sandbox(opt_.executable, opt_.device);

  zmq::socket_t socket(context_, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::routing_id, opt_.worker_id);
  socket.set(zmq::sockopt::linger, 2000);
  socket.set(zmq::sockopt::reconnect_ivl, 200);
  socket.set(zmq::sockopt::reconnect_ivl_max, 2000);
  wire::apply_client_security(socket, opt_.security);
  // A rejected CURVE handshake shows only as a socket event: watch for it.
  const std::string monitor_endpoint = "inproc://fusetune-worker-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  check(zmq_socket_monitor(socket.handle(), monitor_endpoint.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) == 0,
        "cannot monitor the worker's socket");
  zmq::socket_t monitor(context_, zmq::socket_type::pair);
  monitor.connect(monitor_endpoint);
  socket.connect(opt_.coordinator);
  log("connecting to " + opt_.coordinator + " (" + device.description() + ", " + backend_name + ", " +
      pool.compiler() + ")" + (opt_.security.enabled() ? ", CURVE" : ", no CURVE keys (loopback or embedded use only)"));

  auto send = [&](wire::Envelope e) {
    const std::string bytes = wire::encode(std::move(e));
    socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  };
  auto hello = [&] {
    wire::Envelope e;
    wire::Hello& h = *e.mutable_hello();
    h.set_worker_id(opt_.worker_id);
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    h.set_host(host);
    *h.mutable_device() = device;
    h.set_backend(backend_name);
    h.set_compiler(pool.compiler());
    h.set_min_version(wire::kMinProtocolVersion);
    h.set_max_version(wire::kProtocolVersion);
    h.set_codegen_version(codegen::kCodegenVersion);
    h.set_compile_jobs(pool.jobs());
    send(std::move(e));
  };

  bool welcomed = false;
  int heartbeat_ms = 1000;
  auto last_hello = Clock::now();
  auto last_beat = Clock::now();
  hello();
  std::atomic<bool> cancel{false};
  int64_t current = 0;  // the task in hand, 0 when idle
  std::future<Outcome> work;
  while (true) {
    if (stop.load() && !cancel.load()) {
      cancel = true;
      if (current == 0) break;
    }
    zmq::pollitem_t items[] = {{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0},
                               {static_cast<void*>(monitor), 0, ZMQ_POLLIN, 0}};
    wire::poll(items, 2, 50);
    if (items[1].revents & ZMQ_POLLIN) {
      zmq::message_t event, address;
      if (monitor.recv(event, zmq::recv_flags::dontwait) && event.more()) (void)monitor.recv(address, zmq::recv_flags::none);
      log("refused by the coordinator: CURVE handshake failed (is this worker's public key among the coordinator's "
          "allowed keys, and --coordinator-key the coordinator's?)");
      return 3;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t msg;
      if (socket.recv(msg, zmq::recv_flags::dontwait)) {
        try {
          const wire::Envelope e = wire::decode(msg.data(), msg.size());
          if (e.has_welcome()) {
            welcomed = true;
            heartbeat_ms = std::max(100, e.welcome().heartbeat_ms());
            log("registered with coordinator " + e.welcome().coordinator_id());
          } else if (e.has_refused()) {
            log("refused: " + e.refused().reason());
            return 3;
          } else if (e.has_error()) {  // a coordinator that does not know us (it restarted)
            welcomed = false;
            hello();
            last_hello = Clock::now();
          } else if (e.has_task()) {
            if (current != 0 || cancel.load()) {  // busy or stopping: hand it straight back
              wire::Envelope back;
              back.mutable_result()->set_task_id(e.task().task_id());
              back.mutable_result()->set_abandoned(true);
              send(std::move(back));
            } else {
              current = e.task().task_id();
              log("task " + std::to_string(current) + ": " + std::to_string(e.task().candidates_size()) + " candidates");
              work = std::async(std::launch::async, [&, task = e.task()] { return process(task, pool, sandbox, cancel); });
            }
          }
        } catch (const Error& err) {
          log(std::string("ignored a message: ") + err.what());
        }
      }
    }
    if (current != 0 && work.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      Outcome o;
      try {
        o = work.get();
      } catch (const std::exception& err) {  // never lose the lease silently
        o.result.set_task_id(current);
        o.result.set_abandoned(true);
        o.note = std::string("task failed: ") + err.what();
      }
      log(o.note);
      wire::Envelope e;
      *e.mutable_result() = o.result;
      send(std::move(e));
      if (!o.result.abandoned()) ++tasks_done_;
      current = 0;
      if (cancel.load()) break;
    }
    const auto now = Clock::now();
    if (!welcomed && now - last_hello > std::chrono::milliseconds(opt_.hello_retry_ms)) {
      hello();
      last_hello = now;
    }
    if (welcomed && now - last_beat > std::chrono::milliseconds(heartbeat_ms)) {
      wire::Envelope e;
      e.mutable_heartbeat();
      if (current != 0) e.mutable_heartbeat()->add_tasks(current);
      send(std::move(e));
      last_beat = now;
    }
  }
  wire::Envelope bye;
  bye.mutable_bye()->set_reason("stopping");
  send(std::move(bye));
  log("stopped after " + std::to_string(tasks_done_) + " tasks");
  return 0;
}

}  // namespace fusetune::worker
