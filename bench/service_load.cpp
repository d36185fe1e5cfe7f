// service_load: the coordinator under a lab's load, and killed under it (issue 11, bench/README.md).
//
// A real coordinator process (`fusetune coordinator`, TCP on loopback, a database of its own)
// serves W workers (default 64): DEALER sockets in this process that speak the worker protocol
// (hello, heartbeats, results, hello again when a restarted coordinator does not know them) and
// answer each task at once with made-up timings, so what is measured is the coordinator and its
// database, not kernels. The work: jobs of a generated model whose every MatMul has its own shape
// (one task each, distinct signatures), about T tasks in all (default 10,000). Printed: results
// ingested per second, dispatch latency (a worker's result sent -> its next task received) median
// and p99, the coordinator's CPU time and peak resident memory, the database's size, and the
// counts that show nothing lost or measured twice: every task done, every candidate stored once.
// With --kills K the coordinator is killed with SIGKILL at K random moments (points in the stream
// of results, drawn from the printed seed) and restarted on the same database at once.
//
// usage: service_load [--workers W] [--tasks T] [--kills K] [--seed S] [--fusetune PATH] [--dir DIR]
// Exit status 0 when every task ended exactly once, 1 when one did not, 2 on an error.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "codegen/kernel_ir.h"
#include "coordinator/client.h"
#include "core/error.h"
#include "core/tensor.h"
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

// The coordinator process: started, killed, restarted; its CPU time and peak RSS summed and
// maximised over its lives (read from /proc before each end). Its first life listens on a port the
// system chooses, read back from its --endpoint-file; the later ones on that endpoint again, where
// the workers look for it.
class Coordinator {
 public:
  Coordinator(std::string binary, fs::path db, fs::path log)
      : binary_(std::move(binary)), db_(std::move(db)), log_(std::move(log)) {}
  ~Coordinator() {
    if (pid_ > 0) end(SIGKILL);
  }
  void start() {
    const fs::path bound = log_.string() + ".endpoint.json";
    fs::remove(bound);
    const std::string listen = endpoint_.empty() ? "tcp://127.0.0.1:0" : endpoint_;
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execl(binary_.c_str(), binary_.c_str(), "coordinator", "--listen", listen.c_str(), "--db", db_.c_str(),
              "--endpoint-file", bound.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ++lives_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(bound)) {
      check(std::chrono::steady_clock::now() < deadline, "the coordinator did not listen within 60 s (its log: ", log_.string(), ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream in(bound);
    endpoint_ = nlohmann::json::parse(in).at("listen").get<std::string>();
  }
  const std::string& endpoint() const { return endpoint_; }
  void end(int sig) {
    sample();
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  void sample() {  // CPU seconds and peak RSS of the life so far
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos) return;
    std::istringstream fields(text.substr(close + 2));
    std::string f;
    std::vector<std::string> v;
    while (fields >> f) v.push_back(f);
    if (v.size() > 12) life_cpu_s_ = (std::stod(v[11]) + std::stod(v[12])) / static_cast<double>(::sysconf(_SC_CLK_TCK));
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmHWM:", 0) == 0) peak_kb_ = std::max(peak_kb_, std::stol(line.substr(6)));
    }
  }
  void life_ended() {
    cpu_s_ += life_cpu_s_;
    life_cpu_s_ = 0;
  }
  double cpu_s() const { return cpu_s_ + life_cpu_s_; }
  long peak_kb() const { return peak_kb_; }
  int lives() const { return lives_; }

 private:
  std::string binary_, endpoint_;
  fs::path db_, log_;
  pid_t pid_ = -1;
  int lives_ = 0;
  double cpu_s_ = 0, life_cpu_s_ = 0;
  long peak_kb_ = 0;
};

// One job's model: `groups` MatMuls, each from its own input, with a shape no other MatMul of the
// run has (K and N from the global index), so that every one is a task of its own.
std::string model_bytes(int job, int groups) {
  testing::OnnxBuilder b;
  for (int i = 0; i < groups; ++i) {
    const int g = job * groups + i;
    const int64_t k = 4 + g % 100, n = 4 + g / 100;
    const std::string s = std::to_string(i);
    std::vector<float> w(static_cast<size_t>(k * n));
    for (size_t e = 0; e < w.size(); ++e) w[e] = static_cast<float>((e * 37 + static_cast<size_t>(g)) % 11) / 11.0f - 0.5f;
    b.input("x" + s, 1, {1, k});
    b.initializer("w" + s, Tensor::from_floats(DType::kF32, {k, n}, w));
    b.node("MatMul", {"x" + s, "w" + s}, {"y" + s});
    b.output("y" + s, 1, {1, n});
  }
  return b.bytes();
}

struct Worker {
  std::unique_ptr<zmq::socket_t> socket;
  std::string id;
  Clock::time_point result_sent{}, last_beat{};
  bool waiting = false;             // sent a result, no task since
  std::vector<wire::Task> held;     // tasks received before the start: answered once it is given
};

}  // namespace

int main(int argc, char** argv) {
  int n_workers = 64, kills = 0, per_job = 100;
  int64_t want_tasks = 10000;
  unsigned seed = static_cast<unsigned>(std::random_device{}());
  fs::path fusetune = fs::path(argv[0]).parent_path() / "fusetune";
  fs::path dir = fs::temp_directory_path() / ("fusetune-service-load-" + std::to_string(::getpid()));
  bool keep = false;  // --dir: the caller's directory is left as it is
  for (int k = 1; k + 1 < argc; k += 2) {
    const std::string a = argv[k];
    if (a == "--workers") n_workers = std::stoi(argv[k + 1]);
    else if (a == "--tasks") want_tasks = std::stoll(argv[k + 1]);
    else if (a == "--kills") kills = std::stoi(argv[k + 1]);
    else if (a == "--seed") seed = static_cast<unsigned>(std::stoul(argv[k + 1]));
    else if (a == "--fusetune") fusetune = argv[k + 1];
    else if (a == "--dir") dir = argv[k + 1], keep = true;
    else {
      std::fprintf(stderr, "service_load: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    fs::create_directories(dir);
    const fs::path db = dir / "load.db";
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db.string() + suffix);
    fs::remove_all(db.string() + ".models");
    const int jobs = static_cast<int>(std::max<int64_t>(1, (want_tasks + per_job - 1) / per_job));
    Coordinator coord(fusetune.string(), db, dir / "coordinator.log");
    coord.start();
    const std::string endpoint = coord.endpoint();
    std::printf("service_load: %d workers, %d jobs of %d MatMul groups, %d kills, seed %u (replay with --seed %u); "
                "coordinator %s, database %s\n",
                n_workers, jobs, per_job, kills, seed, seed, endpoint.c_str(), db.c_str());
    std::fflush(stdout);

    zmq::context_t context;
    std::vector<Worker> workers(static_cast<size_t>(n_workers));
    wire::Envelope hello_env;
    wire::Hello& h = *hello_env.mutable_hello();
    h.set_min_version(wire::kMinProtocolVersion);
    h.set_max_version(wire::kProtocolVersion);
    h.set_codegen_version(codegen::kCodegenVersion);
    h.mutable_device()->set_name("host");
    h.mutable_device()->set_arch("host");
    h.mutable_device()->set_toolkit("service_load: answers without compiling");
    h.set_queue_depth(1);
    auto send = [](Worker& w, const wire::Envelope& e) {
      const std::string bytes = wire::encode(e);
      w.socket->send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    };
    auto hello = [&](Worker& w) {
      wire::Envelope e = hello_env;
      e.mutable_hello()->set_worker_id(w.id);
      send(w, e);
    };
    for (int k = 0; k < n_workers; ++k) {
      Worker& w = workers[static_cast<size_t>(k)];
      w.id = "load-" + std::to_string(k);
      w.socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
      w.socket->set(zmq::sockopt::routing_id, w.id);
      w.socket->set(zmq::sockopt::linger, 0);
      w.socket->set(zmq::sockopt::reconnect_ivl, 100);
      w.socket->connect(endpoint);
      hello(w);
    }
    // The workers answer on a thread of their own while this one submits, watches and kills.
    std::atomic<bool> stop{false};
    std::atomic<int64_t> results_sent{0};
    std::vector<double> dispatch_ms;
    Clock::time_point first_task{}, last_result{};  // the span over which results are ingested
    std::atomic<bool> go{false};  // every job submitted and its tasks queued
    std::mutex refusal_mutex;
    std::string refusal;  // why the coordinator refused a worker's hello (another codegen version, ...)
    auto answer = [&](Worker& w, const wire::Task& task) {
      const wire::Envelope r = bench::instant_result(task);
      results_sent += r.result().results_size();
      w.result_sent = last_result = Clock::now();
      w.waiting = true;
      send(w, r);
    };
    std::thread serve([&] {
      std::vector<zmq::pollitem_t> items(workers.size());
      while (!stop.load()) {
        for (size_t k = 0; k < workers.size(); ++k) items[k] = {static_cast<void*>(*workers[k].socket), 0, ZMQ_POLLIN, 0};
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(20));
        const auto now = Clock::now();
        for (size_t k = 0; k < workers.size(); ++k) {
          Worker& w = workers[k];
          zmq::message_t msg;
          while (w.socket->recv(msg, zmq::recv_flags::dontwait)) {
            wire::Envelope e;
            try {
              e = wire::decode(msg.data(), msg.size());
            } catch (const Error&) {
              continue;
            }
            if (e.has_error()) {  // a restarted coordinator that does not know this worker
              hello(w);
              continue;
            }
            if (e.has_refused()) {
              const std::lock_guard<std::mutex> lock(refusal_mutex);
              refusal = "worker " + w.id + " refused: " + e.refused().reason();
              continue;
            }
            if (!e.has_task()) continue;
            if (!go.load()) {  // submissions still coming: hold it
              w.held.push_back(e.task());
              continue;
            }
            if (first_task == Clock::time_point{}) first_task = now;
            if (w.waiting) dispatch_ms.push_back(std::chrono::duration<double, std::milli>(now - w.result_sent).count());
            answer(w, e.task());
          }
          if (go.load() && !w.held.empty()) {
            if (first_task == Clock::time_point{}) first_task = now;
            for (const wire::Task& t : w.held) answer(w, t);
            w.held.clear();
          }
          if (now - w.last_beat > std::chrono::milliseconds(500)) {
            wire::Envelope b;
            b.mutable_heartbeat();
            send(w, b);
            w.last_beat = now;
          }
        }
      }
    });

    auto request = [&](wire::Envelope e) {
      coordinator::Client client(context, endpoint, 120000);
      return client.request(std::move(e));
    };
    auto status = [&] {
      wire::Envelope e;
      e.mutable_status()->set_job_id(0);
      return request(std::move(e)).status_reply();
    };
    // Workers first, so that each submission binds its job and makes its tasks at once.
    while (status().workers() < n_workers) {
      std::string why;
      {
        const std::lock_guard<std::mutex> lock(refusal_mutex);
        why = refusal;
      }
      if (!why.empty()) {
        stop = true;
        serve.join();
        throw Error(why);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const auto t0 = Clock::now();
    std::vector<int64_t> ids;
    for (int j = 0; j < jobs; ++j) {
      wire::Envelope e;
      wire::Submit& s = *e.mutable_submit();
      s.set_model_name("load" + std::to_string(j));
      s.set_device("host");
      s.set_options(R"({"candidates": 2, "trials": 2})");
      wire::ModelFile& f = *s.add_files();
      f.set_path("model.onnx");
      f.set_data(model_bytes(j, per_job));
      ids.push_back(request(std::move(e)).job().job_id());
    }
    // Then until every job's tasks are queued (they are lowered after the submission's answer).
    while (true) {
      int64_t tasks = 0;
      const wire::StatusReply st = status();
      for (const wire::JobStatus& j : st.jobs()) tasks += j.tasks();
      if (tasks >= static_cast<int64_t>(jobs) * per_job) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const double submit_s = ms_since(t0) / 1000;
    std::printf("submitted %d jobs, their tasks queued, in %.1f s; the workers start\n", jobs, submit_s);
    std::fflush(stdout);
    go = true;

    // Kill points: K positions in the stream of results, drawn from the seed.
    std::mt19937 rng(seed);
    const int64_t expected_results = 2LL * jobs * per_job;
    std::vector<int64_t> kill_at;
    for (int k = 0; k < kills; ++k) kill_at.push_back(std::uniform_int_distribution<int64_t>(1, expected_results - 1)(rng));
    std::sort(kill_at.begin(), kill_at.end());
    size_t next_kill = 0;
    int64_t restarted_at = -1;  // results sent when the coordinator last restarted
    const auto run0 = Clock::now();
    auto last_progress = Clock::now();
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      // A kill point passed while the coordinator restarted waits until the new one has served.
      if (next_kill < kill_at.size() && results_sent.load() >= kill_at[next_kill] && results_sent.load() > restarted_at) {
        coord.end(SIGKILL);
        coord.life_ended();
        coord.start();
        restarted_at = results_sent.load();
        std::printf("killed the coordinator (SIGKILL) after %lld results; restarted (life %d)\n",
                    static_cast<long long>(restarted_at), coord.lives());
        std::fflush(stdout);
        ++next_kill;
        continue;
      }
      if (ms_since(last_progress) < 1000) continue;
      last_progress = Clock::now();
      coord.sample();
      wire::StatusReply st;
      try {
        st = status();
      } catch (const Error&) {
        continue;  // restarting
      }
      int done = 0;
      for (const wire::JobStatus& j : st.jobs()) done += j.state() == "done";
      std::printf("%d of %d jobs done, %lld results sent, %.0f s\n", done, jobs, static_cast<long long>(results_sent.load()),
                  ms_since(run0) / 1000);
      std::fflush(stdout);
      if (done == jobs && next_kill == kill_at.size()) break;
    }
    coord.end(SIGTERM);
    coord.life_ended();
    stop = true;
    serve.join();
    const double run_s = std::chrono::duration<double>(last_result - first_task).count();

    // Every task ended exactly once: done, and each of its candidates stored once.
    storage::SearchDb sdb(db);
    storage::JobQueue queue(sdb);
    int64_t tasks = 0, not_done = 0, candidates = 0, missing = 0, duplicated = 0;
    for (int64_t job : ids) {
      for (const storage::TaskRecord& t : queue.job_tasks(job)) {
        ++tasks;
        not_done += t.state != storage::TaskState::kDone;
        wire::Task payload;
        check(payload.ParseFromString(t.payload), "task ", t.id, ": unreadable payload");
        // Per candidate: one row measured alone, and at most one timed in turn with its rival.
        std::map<std::string, int> alone, interleaved;
        for (const storage::Measurement& m : sdb.top_k(t.signature, t.device, t.codegen_version, 1000)) {
          ++(m.interleaved_with.empty() ? alone : interleaved)[m.config];
        }
        for (const wire::Candidate& c : payload.candidates()) {
          ++candidates;
          missing += alone[c.config()] == 0;
          duplicated += alone[c.config()] > 1 || interleaved[c.config()] > 1;
        }
      }
    }
    uint64_t db_bytes = 0;
    for (const char* suffix : {"", "-wal"}) {
      std::error_code ec;
      const auto n = fs::file_size(db.string() + suffix, ec);
      if (!ec) db_bytes += n;
    }
    uint64_t model_bytes_total = 0;
    if (fs::exists(db.string() + ".models")) {
      for (const auto& e : fs::recursive_directory_iterator(db.string() + ".models")) {
        if (e.is_regular_file()) model_bytes_total += e.file_size();
      }
    }
    std::printf("\n| figure | value |\n|---|---|\n");
    std::printf("| workers, jobs, tasks | %d, %d, %lld |\n", n_workers, jobs, static_cast<long long>(tasks));
    std::printf("| coordinator killed and restarted | %d times (seed %u) |\n", coord.lives() - 1, seed);
    std::printf("| submissions | %.1f s for %d jobs (%.0f ms each) |\n", submit_s, jobs, 1000 * submit_s / jobs);
    std::printf("| results ingested (measured: first task to last result) | %lld sent in %.2f s: %.0f results/s |\n",
                static_cast<long long>(results_sent.load()), run_s, static_cast<double>(results_sent.load()) / run_s);
    std::printf("| dispatch latency (result sent -> next task, measured) | median %.2f ms, p99 %.2f ms (%zu dispatches) |\n",
                percentile(dispatch_ms, 0.5), percentile(dispatch_ms, 0.99), dispatch_ms.size());
    std::printf("| coordinator CPU time, peak RSS (measured) | %.1f s, %.0f MB |\n", coord.cpu_s(), coord.peak_kb() / 1024.0);
    std::printf("| database (with WAL), models beside it | %.1f MB, %.1f MB |\n", db_bytes / 1e6, model_bytes_total / 1e6);
    std::printf("| tasks not done | %lld of %lld |\n", static_cast<long long>(not_done), static_cast<long long>(tasks));
    std::printf("| candidates stored once / missing / more than once | %lld / %lld / %lld |\n",
                static_cast<long long>(candidates - missing - duplicated), static_cast<long long>(missing),
                static_cast<long long>(duplicated));
    const bool exact = not_done == 0 && missing == 0 && duplicated == 0 && tasks > 0;
    std::printf("%s\n", exact ? "every task ended exactly once" : "SOME TASK DID NOT END EXACTLY ONCE");
    if (exact && !keep) fs::remove_all(dir);
    if (!exact) std::printf("the database and the coordinator's log are kept in %s\n", dir.c_str());
    return exact ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "service_load: %s\n", e.what());
    return 2;
  }
}
