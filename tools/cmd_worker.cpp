// fusetune worker (its options: tools/command_table.cpp): the GPU worker daemon (worker/daemon.h), one per device of the list
// (worker/machine.h); prints what each device did when it stops. The first SIGTERM drains (the
// tasks being measured may finish for S seconds, default 30; the others go back), a second one
// hands everything back at once. fusetune worker-child --device D is its measuring
// child process (worker/measure.h), started by the daemon, not by people.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "backend/cuda.h"
#include "core/error.h"
#include "core/log.h"
#include "dashboards/http_server.h"
#include "simt/module.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"
#include "tools/service_common.h"
#include "worker/confine.h"
#include "worker/daemon.h"
#include "worker/machine.h"
#include "worker/measure.h"

namespace fusetune::cli {

int cmd_worker(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("worker");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().empty(), spec);
  set_log_format(parse_log_format(args.get("log-format", "text")));
  worker::WorkerOptions opt;
  opt.coordinator = args.get("coordinator");
  opt.device = args.get("device", "host");
  opt.compile_jobs = static_cast<int>(args.number("compile-jobs", std::max(1u, std::thread::hardware_concurrency())));
  opt.worker_id = args.get("id", worker::default_worker_id());
  opt.executable = self_executable();
  opt.quiet = args.has("quiet");
  opt.security = client_security(args);
  const double drain = args.number("drain-seconds", 30);
  check(drain >= 0, "--drain-seconds ", drain, ": a number of seconds, 0 to hand tasks back at once");
  opt.drain_ms = static_cast<int>(drain * 1000);
  const std::atomic<bool>& stop = stop_on_signals();
  opt.abort = &stopped_twice();
  zmq::context_t context;
  worker::WorkerMachine machine(context, opt, worker::resolve_devices(opt.device));
  // --metrics: the devices' figures for Prometheus, answered on the HTTP threads from the reports.
  std::unique_ptr<dashboards::HttpServer> http;
  if (args.has("metrics")) {
    http = std::make_unique<dashboards::HttpServer>(http_options(args, "metrics", "metrics-token-file"));
    http->answer_directly([&machine](const dashboards::HttpRequest& r) -> dashboards::HttpReply {
      if (r.path != "/metrics") return {404, "text/plain", "a worker serves /metrics only\n"};
      return {200, "text/plain; version=0.0.4; charset=utf-8", worker::WorkerMachine::metrics(machine.reports())};
    });
    write_log(LogLevel::kInfo, "worker", {0, 0, opt.worker_id}, "metrics on http://" + args.get("metrics").substr(0, args.get("metrics").rfind(':')) +
                                                  ":" + std::to_string(http->port()) + "/metrics");
  }
  const int rc = machine.run(stop);
  if (!opt.quiet) std::fputs(worker::WorkerMachine::format(machine.reports()).c_str(), stderr);
  return rc;
}

int cmd_worker_child(const std::vector<std::string>& argv) {
  const Args args = parse_args(command_spec("worker-child"), argv);
  const std::string device = args.get("device", "host");
  // Frames go to the pipe the daemon gave as stdout; anything else printed goes to stderr.
  const int frames_out = ::dup(1);
  ::dup2(2, 1);
  std::unique_ptr<backend::Backend> b;
  if (device == "host") {
    simt::Options verify;  // the executor's checks, not its memory counters (nothing here reads them)
    verify.counters = false;
    b = backend::make_host_backend("", verify);
  } else {
    std::string why;
    b = backend::make_cuda_backend(std::stoi(device), &why);
    check(b != nullptr, "worker-child --device ", device, ": ", why);
  }
  // A host candidate is built by the daemon's compile pool; the child loads it from the kernel
  // cache, whose key holds the compiler's identity: that is asked now, while the child may still
  // start a program.
  if (device == "host") simt::compiler_identity(simt::default_compiler());
  worker::confine_measuring_child();
  return worker::serve_measurements(0, frames_out, *b);
}

}  // namespace fusetune::cli
