// service_bench: the tuning service's own overheads, printed as a table (bench/README.md).
//   1. cache lookup: a search database holding N measurements (default one million), and the
//      time of the lookups a coordinator makes per candidate (measured?) and per group (best);
//   2. ingest and dispatch: a coordinator (in process, inproc transport) serving a synthetic
//      worker that answers every task at once with made-up timings: results stored per second,
//      and the dispatch latency (worker's result sent -> its next task received), median and p99.
// The synthetic worker does no compiling or running: what is measured is the coordinator and the
// database alone. usage: service_bench [--measurements N] [--jobs J] [--dir DIR]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codegen/kernel_ir.h"
#include "coordinator/server.h"
#include "core/error.h"
#include "proto/wire.h"
#include "storage/job_queue.h"
#include "storage/search_db.h"
#include "synthetic_worker.h"
#include "tests/unit/onnx_builder.h"

namespace fs = std::filesystem;
using namespace fusetune;
using fusetune::bench::Clock;
using fusetune::bench::ms_since;
using fusetune::bench::percentile;

namespace {

void bench_lookup(const fs::path& dir, int64_t n) {
  const fs::path file = dir / "lookup.db";
  fs::remove(file);
  storage::SearchDb db(file);
  storage::JobQueue queue(db);
  const storage::DeviceKey dev{"h100", "sm_90"};
  const int per_task = 100;
  const int64_t tasks = std::max<int64_t>(1, n / per_task);
  auto sig = [](int64_t k) { return "v1:" + std::to_string(1000000007LL * (k + 1) % 998244353); };
  auto t0 = Clock::now();
  storage::JobRecord job;
  for (int64_t k = 0; k < tasks; ++k) {
    const int64_t id = queue.ensure_task(sig(k), dev, 1, "");
    std::vector<storage::Measurement> ms;
    for (int c = 0; c < per_task; ++c) {
      storage::Measurement m;
      m.signature = sig(k);
      m.device = dev;
      m.codegen_version = 1;
      m.config = "tile=" + std::to_string(c);
      m.source_digest = "d";
      m.median_us = m.min_us = m.max_us = 1 + c;
      m.repeats = 1;
      ms.push_back(std::move(m));
    }
    queue.finish_task(id, storage::TaskState::kDone, "", ms);
  }
  const double fill_s = ms_since(t0) / 1000;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> pick(0, tasks - 1);
  const int lookups = 20000;
  t0 = Clock::now();
  int hits = 0;
  for (int k = 0; k < lookups; ++k) hits += db.measured(sig(pick(rng)), dev, 1, "tile=" + std::to_string(k % per_task));
  const double measured_us = ms_since(t0) * 1000 / lookups;
  t0 = Clock::now();
  for (int k = 0; k < lookups; ++k) hits += db.best(sig(pick(rng)), dev, 1).has_value();
  const double best_us = ms_since(t0) * 1000 / lookups;
  std::printf("| stored measurements | %lld (%lld tasks of %d, stored in %.1f s: %.0f results/s) |\n",
              static_cast<long long>(tasks * per_task), static_cast<long long>(tasks), per_task, fill_s,
              static_cast<double>(tasks * per_task) / fill_s);
  std::printf("| lookup: measured(signature, device, config) | %.1f us |\n", measured_us);
  std::printf("| lookup: best(signature, device) | %.1f us |\n", best_us);
  if (hits != 2 * lookups) std::printf("| WARNING | %d of %d lookups missed |\n", 2 * lookups - hits, 2 * lookups);
}

void bench_service(const fs::path& dir, int jobs) {
  const fs::path file = dir / "service.db";
  fs::remove(file);
  zmq::context_t context;
  coordinator::ServerOptions opt;
  opt.listen = "inproc://service-bench";
  opt.db = file;
  opt.log = [](const std::string&) {};
  coordinator::Server server(context, opt);
  std::atomic<bool> stop{false};
  std::vector<double> dispatch_ms;
  int64_t results = 0;
  std::thread fake([&] {
    zmq::socket_t w(context, zmq::socket_type::dealer);
    w.set(zmq::sockopt::routing_id, std::string("bench-worker"));
    w.connect(opt.listen);
    wire::Envelope hello;
    hello.mutable_hello()->set_worker_id("bench-worker");
    hello.mutable_hello()->set_min_version(wire::kMinProtocolVersion);
    hello.mutable_hello()->set_max_version(wire::kProtocolVersion);
    hello.mutable_hello()->set_codegen_version(codegen::kCodegenVersion);
    hello.mutable_hello()->mutable_device()->set_name("host");
    hello.mutable_hello()->mutable_device()->set_arch("host");
    hello.mutable_hello()->mutable_device()->set_toolkit("service bench: answers without compiling");
    const std::string hb = wire::encode(hello);
    w.send(zmq::buffer(hb), zmq::send_flags::none);
    Clock::time_point sent{};
    while (!stop.load()) {
      zmq::pollitem_t item{static_cast<void*>(w), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      zmq::message_t msg;
      if (!w.recv(msg, zmq::recv_flags::dontwait)) continue;
      const wire::Envelope e = wire::decode(msg.data(), msg.size());
      if (!e.has_task()) continue;
      if (sent != Clock::time_point{}) dispatch_ms.push_back(ms_since(sent));
      const wire::Envelope r = bench::instant_result(e.task());
      results += r.result().results_size();
      const std::string bytes = wire::encode(r);
      sent = Clock::now();
      w.send(zmq::buffer(bytes), zmq::send_flags::none);
    }
  });
  // The worker is there first, so that each submission binds its job and makes its tasks.
  while (server.workers() == 0) server.poll_once(5);
  // Distinct small models (a Relu/Sigmoid chain of growing width): one job, a few tasks each.
  std::vector<int64_t> ids;
  Clock::time_point t0 = Clock::now();
  for (int k = 0; k < jobs; ++k) {
    testing::OnnxBuilder b;
    b.input("x", 1, {1, 8 + k});
    b.node("Relu", {"x"}, {"t"});
    b.node("Sigmoid", {"t"}, {"y"});
    b.output("y", 1, {1, 8 + k});
    wire::Submit s;
    s.set_model_name("m" + std::to_string(k));
    s.set_device("host");
    s.set_options(R"({"candidates": 8})");
    wire::ModelFile& f = *s.add_files();
    f.set_path("m.onnx");
    f.set_data(b.bytes());
    ids.push_back(server.submit(s));
  }
  const double submit_ms = ms_since(t0) / jobs;
  t0 = Clock::now();
  auto checked = Clock::now();
  while (true) {
    server.poll_once(5);
    if (ms_since(checked) < 100) continue;  // the bench's own status queries, kept out of the way
    checked = Clock::now();
    bool all = true;
    for (const wire::JobStatus& s : server.status(0)) all = all && s.state() == "done";
    if (all) break;
  }
  const double run_s = ms_since(t0) / 1000;
  stop = true;
  fake.join();
  std::printf("| jobs submitted (import + plan + tasks, each) | %d (%.1f ms each) |\n", jobs, submit_ms);
  std::printf("| results ingested | %lld in %.2f s: %.0f results/s |\n", static_cast<long long>(results), run_s,
              static_cast<double>(results) / run_s);
  std::printf("| dispatch latency (result sent -> next task) | median %.2f ms, p99 %.2f ms (%zu dispatches) |\n",
              percentile(dispatch_ms, 0.5), percentile(dispatch_ms, 0.99), dispatch_ms.size());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t measurements = 1000000;
  int jobs = 200;
  fs::path dir = fs::temp_directory_path() / ("fusetune-service-bench-" + std::to_string(::getpid()));
  for (int k = 1; k + 1 < argc; k += 2) {
    const std::string a = argv[k];
    if (a == "--measurements") measurements = std::stoll(argv[k + 1]);
    else if (a == "--jobs") jobs = std::stoi(argv[k + 1]);
    else if (a == "--dir") dir = argv[k + 1];
  }
  fs::create_directories(dir);
  try {
    std::printf("| figure | value |\n|---|---|\n");
    bench_lookup(dir, measurements);
    bench_service(dir, jobs);
  } catch (const Error& e) {
    std::fprintf(stderr, "service_bench: %s\n", e.what());
    return 2;
  }
  fs::remove_all(dir);
  return 0;
}
