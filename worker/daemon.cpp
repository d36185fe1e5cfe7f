#include "worker/daemon.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "backend/cuda.h"
#include "codegen/kernel_ir.h"
#include "core/error.h"
#include "core/log.h"
#include "planner/device_identity.h"
#include "proto/wire.h"
#include "worker/compile_pool.h"
#include "worker/sandbox.h"

namespace fusetune::worker {

namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  wire::TaskResult result;
  std::string note;  // a log line
  int candidates = 0, ok = 0;
  double compile_s = 0, measure_s = 0;
};

// A task compiled and ready for the measuring child: the request, which candidates it carries,
// and the results so far (compile errors filled in). A task whose graph does not rebuild is
// settled here: `done` holds its outcome.
struct PreparedTask {
  wire::Task task;
  std::vector<wire::CandidateResult> results;
  wire::ChildRequest request;
  std::vector<size_t> sent;  // candidate index of each child candidate
  double compile_s = 0;
  std::optional<Outcome> done;
};

PreparedTask prepare(const wire::Task& task, CompilePool& pool) {
  PreparedTask p;
  p.task = task;
  const auto t0 = Clock::now();
  std::vector<wire::Candidate> candidates(task.candidates().begin(), task.candidates().end());
  p.results.resize(candidates.size());
  for (size_t k = 0; k < candidates.size(); ++k) {
    p.results[k].set_config(candidates[k].config());
    p.results[k].set_source_digest(candidates[k].source_digest());
  }
  try {
    wire::from_subgraph(task.graph());  // a task whose graph does not rebuild fails as a whole, here
  } catch (const Error& e) {
    Outcome o;
    o.result.set_task_id(task.task_id());
    for (wire::CandidateResult& r : p.results) {
      r.set_status("runtime_fault");
      r.set_detail(std::string("bad task graph: ") + e.what());
      *o.result.add_results() = r;
    }
    o.candidates = static_cast<int>(candidates.size());
    o.note = "task " + std::to_string(task.task_id()) + ": bad graph: " + e.what();
    p.done = std::move(o);
    return p;
  }
  const std::vector<CompileOutput> compiled = pool.compile(candidates);
  *p.request.mutable_graph() = task.graph();
  *p.request.mutable_policy() = task.policy();
  for (size_t k = 0; k < candidates.size(); ++k) {
    wire::CandidateResult& r = p.results[k];
    r.set_compile_ms(compiled[k].compile_ms);
    r.set_registers(compiled[k].registers);
    r.set_shared_bytes(compiled[k].shared_bytes);
    r.set_spill_bytes(compiled[k].spill_bytes);
    if (!compiled[k].ok) {
      r.set_status("compile_error");
      r.set_detail(compiled[k].error.substr(0, 4000));
      continue;
    }
    wire::ChildCandidate& cc = *p.request.add_candidates();
    *cc.mutable_candidate() = candidates[k];
    cc.set_cubin(compiled[k].cubin);
    p.sent.push_back(k);
  }
  p.compile_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return p;
}

Outcome measure(PreparedTask p, Sandbox& sandbox, const std::atomic<bool>& cancel) {
  if (p.done) return std::move(*p.done);
  Outcome out;
  out.result.set_task_id(p.task.task_id());
  out.compile_s = p.compile_s;
  out.candidates = static_cast<int>(p.results.size());
  const auto t0 = Clock::now();
  // An interleaved pair sends its first result after both candidates are timed.
  const int timeout = (p.task.policy().timeout_ms() > 0 ? p.task.policy().timeout_ms() : 10000) *
                      (p.task.policy().interleave() ? 2 : 1);
  const std::vector<wire::CandidateResult> measured = sandbox.run(p.request, timeout, &cancel);
  out.measure_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (measured.size() < p.sent.size()) {  // cancelled: the lease goes back unfinished
    out.result.set_abandoned(true);
    out.note = "task " + std::to_string(p.task.task_id()) + " abandoned";
    return out;
  }
  for (size_t j = 0; j < p.sent.size(); ++j) {
    wire::CandidateResult& r = p.results[p.sent[j]];
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
    out.ok += m.status() == "ok";
  }
  for (auto& r : p.results) *out.result.add_results() = r;
  char line[200];
  std::snprintf(line, sizeof line,
                "task %lld: %d of %d candidates ok (compiled in %.1f s, measured in %.1f s, %.1f s of it the reference)",
                static_cast<long long>(p.task.task_id()), out.ok, out.candidates, out.compile_s, out.measure_s,
                sandbox.reference_s());
  out.note = line;
  return out;
}

}  // namespace

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
  info.set_name(planner_device_name(props));
  backend_name = "cuda";
  return info;
}

std::string planner_device_name(const backend::DeviceProperties& props) {
  if (props.arch == "host") return "host";
  const std::string name = planner::identify_device(props.attributes);
  if (!name.empty()) return name;
  try {
    const planner::Device described = planner::describe_device(props.attributes);
    planner::register_device(described);
    return described.name;
  } catch (const Error&) {
    return props.arch;  // nothing to describe it from
  }
}

std::string default_worker_id() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

WorkerDaemon::WorkerDaemon(zmq::context_t& context, WorkerOptions options)
    : context_(context), opt_(std::move(options)) {
  if (opt_.worker_id.empty()) opt_.worker_id = default_worker_id();
}

int WorkerDaemon::tasks_done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return report_.tasks;
}

DeviceReport WorkerDaemon::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return report_;
}

int WorkerDaemon::run(const std::atomic<bool>& stop) {
  // A line of the worker's log (core/log.h), naming this worker, the task it concerns and, where
  // it reports one, its event.
  auto log = [&](const std::string& line, int64_t task = 0, LogLevel level = LogLevel::kInfo, const LogEvent& event = {}) {
    if (!opt_.quiet) write_log(level, "worker", LogIds{0, task, opt_.worker_id}, line, event);
  };
  const auto started = Clock::now();
  std::string backend_name;
  const wire::DeviceInfo device = probe_device(opt_.device, backend_name);
  std::unique_ptr<CompilePool> own_pool;
  if (opt_.pool == nullptr) own_pool = std::make_unique<CompilePool>(device.arch(), opt_.compile_jobs);
  CompilePool& pool = opt_.pool ? *opt_.pool : *own_pool;
  Sandbox sandbox(opt_.executable, opt_.device);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    report_.worker_id = opt_.worker_id;
    report_.device = opt_.device;
    report_.description = device.description();
  }
  const size_t depth = static_cast<size_t>(std::clamp(opt_.queue_depth, 1, 4));

  zmq::socket_t socket(context_, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::routing_id, opt_.worker_id);
  socket.set(zmq::sockopt::linger, 2000);
  socket.set(zmq::sockopt::reconnect_ivl, 200);
  socket.set(zmq::sockopt::reconnect_ivl_max, 5000);  // ZeroMQ doubles the interval between tries up to this
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
    h.set_queue_depth(static_cast<int>(depth));
    send(std::move(e));
  };
  auto hand_back = [&](int64_t task_id) {
    wire::Envelope back;
    back.mutable_result()->set_task_id(task_id);
    back.mutable_result()->set_abandoned(true);
    send(std::move(back));
    std::lock_guard<std::mutex> lock(mutex_);
    ++report_.handed_back;
  };

  // Hellos nobody answers back off: doubled each time up to the maximum, with +-20% jitter so that
  // a machine's devices (and a lab's machines) do not all knock at once when a coordinator returns.
  std::mt19937 jitter(static_cast<unsigned>(std::hash<std::string>{}(opt_.worker_id)) ^ static_cast<unsigned>(::getpid()));
  int hello_wait_ms = opt_.hello_retry_ms;
  auto next_hello_wait = [&] {
    const int wait = static_cast<int>(hello_wait_ms * std::uniform_real_distribution<double>(0.8, 1.2)(jitter));
    hello_wait_ms = std::min(hello_wait_ms * 2, std::max(opt_.hello_retry_ms, opt_.hello_retry_max_ms));
    return std::chrono::milliseconds(wait);
  };

  bool welcomed = false;
  int heartbeat_ms = 1000;
  const fusetune::Clock& time = opt_.clock ? *opt_.clock : system_clock();  // hellos, heartbeats, the drain
  auto hello_due = time.now() + next_hello_wait();
  auto last_beat = time.now();
  hello();
  // The tasks in hand, in arrival order: each compiles as soon as it arrives; the first one
  // compiled is measured while the next compiles.
  struct InHand {
    int64_t id;
    std::future<PreparedTask> compiled;
  };
  std::deque<InHand> hand;
  std::future<Outcome> measuring;  // of hand.front(), when valid
  std::vector<std::future<PreparedTask>> orphans;  // compilations of tasks handed back, joined at the end
  std::atomic<bool> cancel{false};
  std::set<int64_t> revoked;  // the task being measured, when the coordinator took it back
  bool draining = false;
  Clock::time_point drain_deadline;
  while (true) {
    if (stop.load() && !draining) {
      draining = true;
      drain_deadline = time.now() + std::chrono::milliseconds(std::max(0, opt_.drain_ms));
      // First, so that the coordinator sends nothing more before it reads the hand-backs below.
      wire::Envelope e;
      e.mutable_heartbeat()->set_draining(true);
      for (const InHand& h : hand) e.mutable_heartbeat()->add_tasks(h.id);
      send(std::move(e));
      // Hand back what is not yet being measured; the task being measured may finish.
      while (hand.size() > (measuring.valid() ? 1u : 0u)) {
        hand_back(hand.back().id);
        log("task " + std::to_string(hand.back().id) + " handed back (stopping)", hand.back().id, LogLevel::kInfo,
            LogEvent{"handed_back", {}});
        orphans.push_back(std::move(hand.back().compiled));
        hand.pop_back();
      }
      if (measuring.valid()) {
        char line[160];
        std::snprintf(line, sizeof line, "stopping: task %lld may finish within %.1f s",
                      static_cast<long long>(hand.front().id), opt_.drain_ms / 1000.0);
        log(line, hand.front().id, LogLevel::kInfo, LogEvent{"draining", {{"drain_ms", static_cast<int64_t>(opt_.drain_ms)}}});
      }
    }
    if (draining) {
      if (!measuring.valid()) break;
      if (!cancel.load() && (time.now() >= drain_deadline || (opt_.abort && opt_.abort->load()))) cancel = true;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      report_.in_hand = static_cast<int>(hand.size());
      report_.measuring = measuring.valid();
      report_.wall_s = std::chrono::duration<double>(Clock::now() - started).count();
    }
    zmq::pollitem_t items[] = {{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0},
                               {static_cast<void*>(monitor), 0, ZMQ_POLLIN, 0}};
    wire::poll(items, 2, 20);
    if (items[1].revents & ZMQ_POLLIN) {
      zmq::message_t event, address;
      if (monitor.recv(event, zmq::recv_flags::dontwait) && event.more()) (void)monitor.recv(address, zmq::recv_flags::none);
      log("refused by the coordinator: CURVE handshake failed (is this worker's public key among the coordinator's "
          "allowed keys, and --coordinator-key the coordinator's?)",
          0, LogLevel::kInfo, LogEvent{"refused", {{"reason", "curve_handshake"}}});
      cancel = true;
      return 3;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t msg;
      if (socket.recv(msg, zmq::recv_flags::dontwait)) {
        try {
          const wire::Envelope e = wire::decode(msg.data(), msg.size());
          if (e.has_welcome()) {
            welcomed = true;
            hello_wait_ms = opt_.hello_retry_ms;
            heartbeat_ms = std::max(100, e.welcome().heartbeat_ms());
            log("registered with coordinator " + e.welcome().coordinator_id());
          } else if (e.has_refused()) {
            log("refused: " + e.refused().reason(), 0, LogLevel::kInfo, LogEvent{"refused", {{"reason", e.refused().reason()}}});
            cancel = true;
            return 3;
          } else if (e.has_error() && e.error().message().find("unknown worker") != std::string::npos) {
            // A coordinator that does not know us (it restarted): one hello for the burst of errors
            // our queued messages get, since each hello releases what the coordinator leased us
            // since the last (a task's attempts spent by our own retries); the timer repeats it.
            if (welcomed) {
              welcomed = false;
              hello();
              hello_due = time.now() + next_hello_wait();
            }
          } else if (e.has_error()) {  // a refusal of one message (a late result, say): the rest goes on
            log("coordinator: " + e.error().message());
          } else if (e.has_revoke()) {
            for (const int64_t t : e.revoke().tasks()) {
              const auto h = std::find_if(hand.begin(), hand.end(), [t](const InHand& x) { return x.id == t; });
              if (h == hand.end()) continue;
              if (h == hand.begin() && measuring.valid()) {  // the child is killed; no result follows
                revoked.insert(t);
                cancel = true;
                log("task " + std::to_string(t) + " revoked (" + e.revoke().reason() + "): stopping its measurement", t,
                    LogLevel::kInfo, LogEvent{"revoked", {{"measuring", int64_t{1}}, {"reason", e.revoke().reason()}}});
              } else {
                orphans.push_back(std::move(h->compiled));
                hand.erase(h);
                log("task " + std::to_string(t) + " revoked (" + e.revoke().reason() + "): dropped", t, LogLevel::kInfo,
                    LogEvent{"revoked", {{"measuring", int64_t{0}}, {"reason", e.revoke().reason()}}});
              }
            }
          } else if (e.has_task()) {
            if (hand.size() >= depth || draining) {  // full or stopping: hand it straight back
              hand_back(e.task().task_id());
            } else {
              hand.push_back({e.task().task_id(), std::async(std::launch::async, [&pool, task = e.task()] {
                                return prepare(task, pool);
                              })});
              log("task " + std::to_string(e.task().task_id()) + ": " + std::to_string(e.task().candidates_size()) +
                      " candidates" + (hand.size() > 1 ? " (compiling while the one before is measured)" : ""),
                  e.task().task_id(), LogLevel::kInfo,
                  LogEvent{"compiling",
                           {{"candidates", static_cast<int64_t>(e.task().candidates_size())},
                            {"ahead", static_cast<int64_t>(hand.size() - 1)}}});
            }
          }
        } catch (const Error& err) {
          log(std::string("ignored a message: ") + err.what(), 0, LogLevel::kWarn);
        }
      }
    }
    // The first task in hand, once compiled, goes to the measuring child.
    if (!measuring.valid() && !hand.empty() && !draining &&
        hand.front().compiled.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      std::future<PreparedTask> compiled = std::move(hand.front().compiled);
      log("task " + std::to_string(hand.front().id) + ": compiled, measuring", hand.front().id, LogLevel::kInfo,
          LogEvent{"measuring", {}});
      measuring = std::async(std::launch::async, [&sandbox, &cancel, compiled = std::move(compiled)]() mutable {
        return measure(compiled.get(), sandbox, cancel);
      });
    }
    if (measuring.valid() && measuring.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      const int64_t id = hand.front().id;
      Outcome o;
      try {
        o = measuring.get();
      } catch (const std::exception& err) {  // never lose the lease silently
        o = Outcome{};
        o.result.set_task_id(id);
        o.result.set_abandoned(true);
        o.note = std::string("task failed: ") + err.what();
      }
      hand.pop_front();
      if (revoked.erase(id)) {
        if (!draining) cancel = false;
        log("task " + std::to_string(id) + " revoked: measuring stopped, no result sent", id, LogLevel::kInfo,
            LogEvent{"measuring_stopped", {}});
        if (draining) break;
        continue;
      }
      log(o.note, id, o.result.abandoned() ? LogLevel::kWarn : LogLevel::kInfo,
          LogEvent{o.result.abandoned() ? "task_abandoned" : "task_measured", {}});
      wire::Envelope e;
      *e.mutable_result() = o.result;
      send(std::move(e));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (o.result.abandoned()) {
          ++report_.handed_back;
        } else {
          ++report_.tasks;
          report_.candidates += o.candidates;
          report_.ok += o.ok;
        }
        report_.compile_s += o.compile_s;
        report_.measure_s += o.measure_s;
      }
      if (draining) break;
    }
    const auto now = time.now();
    if (!welcomed && now >= hello_due) {
      hello();
      hello_due = now + next_hello_wait();
    }
    if (welcomed && now - last_beat > std::chrono::milliseconds(heartbeat_ms)) {
      wire::Envelope e;
      for (const InHand& h : hand) e.mutable_heartbeat()->add_tasks(h.id);
      e.mutable_heartbeat()->set_draining(draining);
      send(std::move(e));
      last_beat = now;
    }
  }
  wire::Envelope bye;
  bye.mutable_bye()->set_reason("stopping");
  send(std::move(bye));
  for (std::future<PreparedTask>& f : orphans) f.wait();
  const DeviceReport r = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    report_.wall_s = std::chrono::duration<double>(Clock::now() - started).count();
    return report_;
  }();
  log("stopped after " + std::to_string(r.tasks) + " tasks");
  return 0;
}

}  // namespace fusetune::worker
