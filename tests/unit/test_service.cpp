// The tuning service as users run it: a real coordinator process and real worker processes on
// loopback TCP, driven by a real client socket, with the search database inspected afterwards.
// Kill -9 a worker or the coordinator in the middle of a job; garbage frames; an incompatible
// worker; many jobs at once; models that share blocks.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "codegen/kernel_ir.h"
#include "coordinator/client.h"
#include "core/error.h"
#include "core/files.h"
#include "cli_run.h"
#include "core/inert_text.h"
#include "onnx_builder.h"
#include "proto/curve.h"
#include "proto/wire.h"
#include "storage/job_queue.h"
#include "storage/search_db.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;

// A child process running the fusetune executable (with `env` added to its environment), its
// stderr kept in a log file.
class Process {
 public:
  Process(const std::vector<std::string>& args, const fs::path& log,
          const std::vector<std::pair<std::string, std::string>>& env = {})
      : log_(log) {
    std::vector<std::string> all = {FUSETUNE_BINARY};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      ::execv(FUSETUNE_BINARY, argv.data());
      ::_exit(127);
    }
  }
  ~Process() {
    if (pid_ > 0) kill(SIGKILL);
  }
  int kill(int sig) {
    signal(sig);
    return wait();
  }
  void signal(int sig) const { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // Its exit code once it has exited within `limit`; nothing (it still runs) after that.
  std::optional<int> wait_for(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::string log() const {
    std::ifstream in(log_);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  pid_t pid_ = -1;
  fs::path log_;
};

// GET `path` from an HTTP server on 127.0.0.1:`port` (one request, Connection: close): the status
// code and the body; 0 and "" when nothing answers.
std::pair<int, std::string> http_get(int port, const std::string& path) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const timeval timeout{30, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return {0, ""};
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                              "\r\nConnection: close\r\n\r\n";
  if (::send(s, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(s);
    return {0, ""};
  }
  std::string reply;
  std::array<char, 4096> buf{};
  for (ssize_t n; (n = ::recv(s, buf.data(), buf.size(), 0)) > 0;) reply.append(buf.data(), static_cast<size_t>(n));
  ::close(s);
  const size_t body = reply.find("\r\n\r\n");
  if (reply.rfind("HTTP/1.", 0) != 0 || body == std::string::npos) return {0, ""};
  return {std::stoi(reply.substr(9, 3)), reply.substr(body + 4)};
}

// x[1, n] -> ops... -> y: small element-wise models; a model's fused group and its single-op
// parts are its tasks, so models with common ops share tasks.
fs::path write_model(const fs::path& dir, const std::string& name, int64_t n, const std::vector<std::string>& ops) {
  testing::OnnxBuilder b;
  b.input("x", 1, {1, n});
  std::string prev = "x";
  for (size_t k = 0; k < ops.size(); ++k) {
    const std::string out = k + 1 == ops.size() ? "y" : "t" + std::to_string(k);
    b.node(ops[k], {prev}, {out});
    prev = out;
  }
  b.output("y", 1, {1, n});
  const fs::path p = dir / (name + ".onnx");
  b.write(p);
  return p;
}

class Service : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fusetune-service-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ / "search.db";
  }
  void TearDown() override {
    workers_.clear();
    coordinator_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // The first start listens on a port the system chooses and reads it back from the coordinator's
  // --endpoint-file (as the HTTP port, where `extra` asks for one); a later start (a restart)
  // listens on that endpoint again, where the workers already look for it.
  // What a process's log reports, read as its JSON lines' events (core/log.h's LogEvent), never
  // from a message's words: the events named `name` (every event when empty), in order.
  static std::vector<nlohmann::json> events(const Process& p, const std::string& name) {
    std::vector<nlohmann::json> out;
    std::istringstream in(p.log());
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("event") && (name.empty() || j.value("event", "") == name)) out.push_back(j);
    }
    return out;
  }
  // Whether one of them has every member of `fields` with that value.
  static bool has_event(const Process& p, const std::string& name, const nlohmann::json& fields = nlohmann::json::object()) {
    for (const nlohmann::json& e : events(p, name)) {
      bool all = true;
      for (const auto& [key, value] : fields.items()) all = all && e.contains(key) && e[key] == value;
      if (all) return true;
    }
    return false;
  }

  void start_coordinator(const std::vector<std::string>& extra = {}) {
    const fs::path bound = dir_ / "endpoint.json";
    fs::remove(bound);
    std::vector<std::string> args = {"coordinator", "--listen", endpoint_.empty() ? "tcp://127.0.0.1:0" : endpoint_, "--db",
                                     db_.string(), "--worker-timeout-ms", "1500", "--heartbeat-ms", "250",
                                     "--endpoint-file", bound.string(), "--log-format", log_format_};
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ = std::make_unique<Process>(args, dir_ / "coordinator.log");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(bound)) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the coordinator never listened:\n" << coordinator_->log();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const nlohmann::json j = nlohmann::json::parse(read_file(bound, "endpoint file"));
    endpoint_ = j.at("listen").get<std::string>();
    http_port_ = j.at("http").is_null() ? 0 : j.at("http").get<int>();
    ASSERT_EQ(endpoint_.rfind("tcp://127.0.0.1:", 0), 0u) << endpoint_;
    ASSERT_NE(endpoint_, "tcp://127.0.0.1:0");
  }
  Process& start_worker(const std::string& id, const std::vector<std::string>& extra = {},
                        const std::vector<std::pair<std::string, std::string>>& env = {}) {
    std::vector<std::string> args = {"worker", "--coordinator", endpoint_, "--device", "host", "--compile-jobs", "1", "--id", id,
                                     "--log-format", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    workers_.push_back(std::make_unique<Process>(args, dir_ / (id + ".log"), env));
    return *workers_.back();
  }
  wire::Envelope request(wire::Envelope e) {
    coordinator::Client client(context_, endpoint_, 60000, security_);
    return client.request(std::move(e));
  }
  int64_t submit(const fs::path& model, int candidates = 2, const std::string& device = "host",
                 const std::string& timing = R"("min_repeats": 2, "max_repeats": 3, "min_time_ms": 0.1)") {
    return submit_reply(model, candidates, device, timing).job().job_id();
  }
  wire::Envelope submit_reply(const fs::path& model, int candidates, const std::string& device, const std::string& timing) {
    wire::Envelope e;
    wire::Submit& s = *e.mutable_submit();
    s.set_model_name(model.filename().string());
    wire::ModelFile& f = *s.add_files();
    f.set_path(model.filename().string());
    f.set_data(read_file(model, "model file"));
    s.set_device(device);
    s.set_options(R"({"candidates": )" + std::to_string(candidates) + ", " + timing + "}");
    return request(std::move(e));
  }
  wire::JobStatus status(int64_t job) {
    wire::Envelope e;
    e.mutable_status()->set_job_id(job);
    return request(std::move(e)).status_reply().jobs(0);
  }
  // Polls the coordinator until `done` holds (a deadline, not a sleep: fails with the logs).
  void wait_for(const std::function<bool()>& done, const std::string& what, int seconds = 180) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!done()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << "timed out waiting for " << what << "\ncoordinator log:\n" << coordinator_->log();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  // Every task of the job done, and each candidate it carries measured exactly once alone and at
  // most once interleaved with a rival.
  void expect_complete_without_duplicates(int64_t job) {
    storage::SearchDb db(db_);
    storage::JobQueue queue(db);
    for (const storage::TaskRecord& t : queue.job_tasks(job)) {
      EXPECT_EQ(t.state, storage::TaskState::kDone) << "task " << t.id << ": " << t.error;
      wire::Task payload;
      ASSERT_TRUE(payload.ParseFromString(t.payload));
      for (const wire::Candidate& c : payload.candidates()) {
        int rows[2] = {0, 0};  // alone, interleaved
        for (const storage::Measurement& m : db.top_k(t.signature, t.device, t.codegen_version, 1000)) {
          rows[m.interleaved_with.empty() ? 0 : 1] += m.config == c.config();
        }
        EXPECT_LE(rows[0], 1) << "candidate " << c.config() << " of task " << t.id << " measured " << rows[0] << " times";
        EXPECT_LE(rows[1], 1) << "candidate " << c.config() << " of task " << t.id << " interleaved " << rows[1] << " times";
        EXPECT_TRUE(db.measured(t.signature, t.device, t.codegen_version, c.config())) << c.config();
      }
    }
  }

  fs::path dir_;
  fs::path db_;
  std::string log_format_ = "json";  // the coordinator's: its events are what tests read
  std::string endpoint_;  // the coordinator's, once it first listens
  int http_port_ = 0;     // its HTTP side's, where it has one
  zmq::context_t context_;
  wire::ClientSecurity security_;  // this test's client keys, when the coordinator uses CURVE
  std::unique_ptr<Process> coordinator_;
  std::vector<std::unique_ptr<Process>> workers_;
};

// Job options for a search of one round: the trials of the first (2 or 3 per group here), no mutations.
constexpr const char* kOneRound = R"("min_repeats": 2, "max_repeats": 3, "min_time_ms": 0.1, "trials": 3)";

fs::path bundled_model(const std::string& name) { return fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models" / name / "model.onnx"; }

TEST_F(Service, AWorkerKilledMidJobLosesNothingAndDuplicatesNothing) {
  start_coordinator();
  start_worker("w1");
  start_worker("w2");
  const int64_t job = submit(bundled_model("cnn_small"));
  wait_for([&] { const auto s = status(job); return s.tasks_done() >= 2 || s.state() == "done"; }, "two finished tasks");
  ASSERT_NE(status(job).state(), "done") << "the job finished before a worker could be killed";
  EXPECT_EQ(workers_[0]->kill(SIGKILL), 128 + SIGKILL);
  wait_for([&] { return status(job).state() == "done"; }, "the job to finish on the surviving worker");
  const wire::JobStatus s = status(job);
  EXPECT_EQ(s.tasks_failed(), 0);
  EXPECT_EQ(s.tasks_done(), s.tasks());
  expect_complete_without_duplicates(job);
  EXPECT_TRUE(has_event(*coordinator_, "job_done", {{"job", job}, {"tasks", s.tasks()}, {"tasks_failed", 0}})) << coordinator_->log();
}

TEST_F(Service, ACoordinatorKilledMidJobResumesAfterRestart) {
  start_coordinator();
  start_worker("w1");
  const int64_t job = submit(bundled_model("cnn_small"));
  wait_for([&] { const auto s = status(job); return s.tasks_done() >= 2 || s.state() == "done"; }, "two finished tasks");
  ASSERT_NE(status(job).state(), "done");
  EXPECT_EQ(coordinator_->kill(SIGKILL), 128 + SIGKILL);
  start_coordinator();  // same port, same database: it resumes, and the worker says hello again
  wait_for([&] { return status(job).state() == "done"; }, "the resumed job to finish");
  EXPECT_TRUE(has_event(*coordinator_, "listening", {{"jobs_resuming", 1}})) << coordinator_->log();
  expect_complete_without_duplicates(job);
}

// A worker played by the test: it says hello as a host worker and answers tasks with the times it is
// told, so that the coordinator's decisions can be checked against known measurements.
class ScriptedWorker {
 public:
  ScriptedWorker(zmq::context_t& context, const std::string& endpoint, const std::string& id = "scripted", bool say_hello = true)
      : socket_(context, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::routing_id, id);
    socket_.connect(endpoint);
    wire::Envelope hello;
    wire::Hello& h = *hello.mutable_hello();
    h.set_worker_id(id);
    h.set_min_version(wire::kMinProtocolVersion);
    h.set_max_version(wire::kProtocolVersion);
    h.set_codegen_version(codegen::kCodegenVersion);
    h.mutable_device()->set_name("host");
    h.mutable_device()->set_arch("host");
    h.mutable_device()->set_toolkit("scripted: no compiler");
    hello_ = hello;
    if (say_hello) send(hello);
  }
  // Says hello again, as a restarted worker does (what it held is released).
  void hello_again() { send(hello_); }
  void heartbeat() {
    wire::Envelope hb;
    hb.mutable_heartbeat();
    send(hb);
  }
  // The next task the coordinator leases (heartbeats sent while waiting).
  wire::Task next_task(int seconds = 60) {
    const wire::Task t = try_task(seconds * 1000);
    if (t.task_id() == 0) ADD_FAILURE() << "no task within " << seconds << " s";
    return t;
  }
  // The next task leased within `ms` milliseconds, or none (task_id 0).
  wire::Task try_task(int ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    do {
      zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(std::min(ms, 200)));
      zmq::message_t msg;
      if (!socket_.recv(msg, zmq::recv_flags::dontwait)) {
        heartbeat();
        continue;
      }
      const wire::Envelope e = wire::decode(msg.data(), msg.size());
      if (e.has_task()) return e.task();
    } while (std::chrono::steady_clock::now() < deadline);
    return {};
  }
  // The next error the coordinator sends within `ms` milliseconds (tasks are dropped), or "".
  std::string next_error(int ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    do {
      zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
      zmq::message_t msg;
      if (socket_.recv(msg, zmq::recv_flags::dontwait)) {
        const wire::Envelope e = wire::decode(msg.data(), msg.size());
        if (e.has_error()) return e.error().message();
      }
    } while (std::chrono::steady_clock::now() < deadline);
    return "";
  }
  // Answers a task: each candidate's (median, CI low, CI high) by config, "ok", and interleaved with
  // the other candidate when the task asked for it.
  void answer(const wire::Task& t, const std::map<std::string, std::array<double, 3>>& times) {
    send(result(t, times));
  }
  // The result answer() sends, for a test to forge.
  wire::Envelope result(const wire::Task& t, const std::map<std::string, std::array<double, 3>>& times) const {
    wire::Envelope r;
    r.mutable_result()->set_task_id(t.task_id());
    for (const wire::Candidate& c : t.candidates()) {
      wire::CandidateResult& cr = *r.mutable_result()->add_results();
      const std::array<double, 3> x = times.at(c.config());
      cr.set_config(c.config());
      cr.set_source_digest(c.source_digest());
      cr.set_status("ok");
      cr.set_median_us(x[0]);
      cr.set_min_us(x[1]);
      cr.set_max_us(x[2]);
      cr.set_ci_low_us(x[1]);
      cr.set_ci_high_us(x[2]);
      cr.set_repeats(20);
      if (t.policy().interleave()) cr.set_interleaved_with(t.candidates(c.config() == t.candidates(0).config()).config());
    }
    return r;
  }
  void send(const wire::Envelope& e) {
    const std::string bytes = wire::encode(e);
    socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }

 private:
  zmq::socket_t socket_;
  wire::Envelope hello_;
};

// Only the peer holding a task's lease may answer it, and only for the candidates it was sent: a
// peer that said no hello, another worker, a configuration the task did not ask for, another
// source digest and a configuration sent twice are each refused with an error naming why, and
// none of them stores a row or ends the lease; the holder's own result then decides the job.
TEST_F(Service, OnlyTheLeaseHolderAnswersAndOnlyForTheCandidatesItWasSent) {
  start_coordinator();
  ScriptedWorker holder(context_, endpoint_, "holder");
  const int64_t job = submit(write_model(dir_, "relu", 4096, {"Relu"}), 2, "host", kOneRound);
  const wire::Task t = holder.next_task();
  ASSERT_GT(t.task_id(), 0) << coordinator_->log();
  ASSERT_GE(t.candidates_size(), 1);
  std::map<std::string, std::array<double, 3>> forged, honest;
  for (const wire::Candidate& c : t.candidates()) {
    forged[c.config()] = {0.001, 0.001, 0.001};
    honest[c.config()] = {10.0, 9.9, 10.1};
  }
  ScriptedWorker other(context_, endpoint_, "other");
  ScriptedWorker stranger(context_, endpoint_, "stranger", /*say_hello=*/false);
  stranger.send(holder.result(t, forged));
  EXPECT_NE(stranger.next_error(5000).find("unknown worker"), std::string::npos);
  other.send(other.result(t, forged));
  EXPECT_NE(other.next_error(5000).find("does not hold the task's lease"), std::string::npos);
  wire::Envelope foreign = holder.result(t, forged);
  foreign.mutable_result()->mutable_results(0)->set_config("tile=1x1 threads=32 injected");
  holder.send(foreign);
  EXPECT_NE(holder.next_error(5000).find("was not asked for"), std::string::npos);
  wire::Envelope other_source = holder.result(t, forged);
  other_source.mutable_result()->mutable_results(0)->set_source_digest("0000");
  holder.send(other_source);
  EXPECT_NE(holder.next_error(5000).find("another source digest"), std::string::npos);
  wire::Envelope twice = holder.result(t, forged);
  *twice.mutable_result()->add_results() = twice.result().results(0);
  holder.send(twice);
  EXPECT_NE(holder.next_error(5000).find("came twice"), std::string::npos);
  {
    storage::SearchDb db(db_);
    storage::JobQueue queue(db);
    const auto task = queue.task(t.task_id());
    ASSERT_TRUE(task.has_value());
    EXPECT_EQ(task->state, storage::TaskState::kLeased);
    EXPECT_EQ(task->worker, "holder");
    EXPECT_TRUE(db.top_k(task->signature, task->device, task->codegen_version, 100).empty()) << "a refused result was stored";
  }
  holder.answer(t, honest);
  for (wire::Task more = holder.try_task(3000); more.task_id() > 0; more = holder.try_task(3000)) {
    std::map<std::string, std::array<double, 3>> times;
    for (const wire::Candidate& c : more.candidates()) times[c.config()] = {10.0, 9.9, 10.1};
    holder.answer(more, times);
  }
  wait_for([&] { holder.heartbeat(); return status(job).state() == "done"; }, "the job to finish on the holder's result");
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  const auto task = queue.task(t.task_id());
  for (const storage::Measurement& m : db.top_k(task->signature, task->device, task->codegen_version, 100)) {
    EXPECT_GT(m.median_us, 1.0) << "a forged time was stored for " << m.config;
    EXPECT_EQ(m.worker, "holder");
  }
}

// A task whose lease ends without a result max_attempts times (here: its worker restarts while
// holding it) fails; the job still finishes, naming the failure, and the group keeps its modeled
// cost; no lease is handed out beyond the limit.
TEST_F(Service, ATaskLeasedMaxAttemptsTimesWithoutAResultFails) {
  start_coordinator({"--max-attempts", "2"});
  ScriptedWorker w(context_, endpoint_);
  const int64_t job = submit(write_model(dir_, "relu", 4096, {"Relu"}), 2, "host", kOneRound);
  const wire::Task first = w.next_task();
  ASSERT_GT(first.task_id(), 0) << coordinator_->log();
  w.hello_again();  // attempt 1 ends
  const wire::Task second = w.next_task();
  EXPECT_EQ(second.task_id(), first.task_id());
  w.hello_again();  // attempt 2 ends: the limit
  wait_for([&] { return status(job).state() == "done"; }, "the job to finish without the task");
  const wire::JobStatus st = status(job);
  EXPECT_EQ(st.tasks_failed(), 1);
  EXPECT_EQ(st.error(), "1 tasks failed");
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  const auto t = queue.task(first.task_id());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->state, storage::TaskState::kFailed);
  EXPECT_EQ(t->attempts, 2);
  EXPECT_NE(t->error.find("after 2 attempts"), std::string::npos) << t->error;
  EXPECT_TRUE(has_event(*coordinator_, "task_failed", {{"task", first.task_id()}})) << coordinator_->log();
}

// A worker that hands every lease straight back (its hand full of tasks it held before the
// coordinator restarted, say) is offered tasks ever later (0.1 s, 0.2 s, 0.4 s, ... up to 5 s after
// each hand-back), not thousands of times a second; a real result ends the backoff. The gaps are
// measured from the hand-back's sending to the next offer's arrival, so a loaded machine can only
// lengthen them: the test asserts their lower bounds, which no schedule can fake.
TEST_F(Service, AWorkerThatHandsLeasesBackIsOfferedTasksWithBackoff) {
  start_coordinator();
  ScriptedWorker w(context_, endpoint_);
  const int64_t job = submit(write_model(dir_, "relu", 4096, {"Relu"}), 2, "host", kOneRound);
  wire::Task t = w.try_task(30'000);
  ASSERT_GT(t.task_id(), 0) << "no first offer in 30 s\n" << coordinator_->log();
  for (int handed_back = 1; handed_back <= 4; ++handed_back) {
    wire::Envelope back;
    back.mutable_result()->set_task_id(t.task_id());
    back.mutable_result()->set_abandoned(true);
    const auto sent = std::chrono::steady_clock::now();
    w.send(back);
    t = w.try_task(30'000);
    ASSERT_GT(t.task_id(), 0) << "no offer in 30 s after hand-back " << handed_back << "\n" << coordinator_->log();
    const auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - sent);
    EXPECT_GE(gap.count(), 100 << (handed_back - 1)) << "offer after hand-back " << handed_back << " came too soon";
  }
  // Answered at last: the lease in hand, then each later round offered at once (a real result ends the backoff).
  for (; t.task_id() > 0; t = w.try_task(2'000)) {
    std::map<std::string, std::array<double, 3>> times;
    for (const wire::Candidate& c : t.candidates()) times[c.config()] = {10.0, 9.9, 10.1};
    w.answer(t, times);
  }
  wait_for([&] { w.heartbeat(); return status(job).state() == "done"; }, "the job, answered at last");
}

// A task whose stored payload cannot be read (a damaged file) fails when it would be leased, with
// the reason; the coordinator goes on serving and the job finishes, naming the failures.
TEST_F(Service, ATaskThatCannotBeReadFailsAndTheCoordinatorGoesOn) {
  start_coordinator();
  ScriptedWorker w(context_, endpoint_);
  const int64_t job = submit(write_model(dir_, "chain", 4096, {"Relu", "Sigmoid"}), 2, "host", kOneRound);
  const wire::Task held = w.next_task();  // the others stay queued
  ASSERT_GT(held.task_id(), 0) << coordinator_->log();
  EXPECT_EQ(coordinator_->kill(SIGKILL), 128 + SIGKILL);
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "UPDATE tasks SET payload=x'ffffffff' WHERE state='queued'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  const int damaged = sqlite3_changes(raw);
  sqlite3_close(raw);
  ASSERT_GT(damaged, 0);
  start_coordinator();
  w.hello_again();
  for (wire::Task t = w.try_task(5000); t.task_id() > 0; t = w.try_task(5000)) {  // the readable ones
    std::map<std::string, std::array<double, 3>> times;
    for (const wire::Candidate& c : t.candidates()) times[c.config()] = {10.0, 9.9, 10.1};
    w.answer(t, times);
  }
  wait_for([&] { w.heartbeat(); return status(job).state() == "done"; }, "the job to finish without the damaged tasks");
  EXPECT_EQ(status(job).tasks_failed(), damaged);
  EXPECT_EQ(events(*coordinator_, "task_failed").size(), static_cast<size_t>(damaged)) << coordinator_->log();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// While a large model (BERT, 1x64, 16 candidates per group) is imported and planned (then the
// submission is answered), and its tasks lowered, the event loop goes on: a client's requests
// (which take the same path as a worker's heartbeats) are answered and a worker's results are
// followed by its next task at once, at p99 within a fiftieth of the time the work takes.
TEST_F(Service, TheEventLoopServesWorkersAndClientsWhileALargeModelIsSubmitted) {
  start_coordinator();
  std::vector<int64_t> small;  // the worker's work meanwhile: small models' tasks, one round each
  for (const char* name : {"cnn_small", "resnet_small", "nerf_mlp", "vit", "mobilenet_v2", "efficientnet_b0"}) {
    small.push_back(submit(bundled_model(name), 8, "host", kOneRound));
  }
  // The worker joins once the submissions are answered: they block this thread, which also sends
  // its heartbeats, for longer than the coordinator's worker timeout on a slow machine.
  ScriptedWorker w(context_, endpoint_);
  for (int64_t job : small) {  // lowered after their answers: wait until their tasks exist
    wait_for([&] { w.heartbeat(); return status(job).tasks() > 0; }, "a small job's tasks");
  }
  wire::Task task = w.next_task();
  ASSERT_GT(task.task_id(), 0) << coordinator_->log();
  // The large submission, from a socket of its own, answered later.
  zmq::socket_t big(context_, zmq::socket_type::dealer);
  big.set(zmq::sockopt::linger, 0);
  big.connect(endpoint_);
  {
    wire::Envelope e;
    wire::Submit& s = *e.mutable_submit();
    const fs::path model = bundled_model("bert");
    s.set_model_name("bert");
    wire::ModelFile& f = *s.add_files();
    f.set_path(model.filename().string());
    f.set_data(read_file(model, "model file"));
    s.set_device("host");
    s.set_options(R"({"candidates": 16, "shapes": {"input_ids": [1, 64], "attention_mask": [1, 64]}})");
    const std::string bytes = wire::encode(e);
    big.send(zmq::buffer(bytes), zmq::send_flags::none);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> request_ms, dispatch_ms;
  int64_t big_job = 0;
  double answered_s = 0;
  for (;;) {  // until the large job is answered, lowered and bound: its tasks exist
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60)) << coordinator_->log();
    zmq::message_t reply;
    if (big_job == 0 && big.recv(reply, zmq::recv_flags::dontwait)) {
      const wire::Envelope r = wire::decode(reply.data(), reply.size());
      ASSERT_TRUE(r.has_job()) << r.DebugString();
      big_job = r.job().job_id();
      answered_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    w.heartbeat();  // idle or not, the worker stays connected: the large job is bound to it
    if (big_job != 0) {
      const auto r0 = std::chrono::steady_clock::now();
      const bool started = status(big_job).tasks() > 0;
      request_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count());
      if (started) break;
    }
    int remaining = 0;  // the small jobs' tasks not done
    for (int64_t job : small) {
      const auto r0 = std::chrono::steady_clock::now();
      const wire::JobStatus st = status(job);
      request_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count());
      remaining += st.tasks() - st.tasks_done();
    }
    if (task.task_id() > 0) {  // the worker's result, then its next task while a small job has one queued
      std::map<std::string, std::array<double, 3>> times;
      for (const wire::Candidate& c : task.candidates()) {  // clearly apart: nothing to interleave
        const double us = 10.0 * static_cast<double>(times.size() + 1);
        times[c.config()] = {us, us - 0.1, us + 0.1};
      }
      const auto r0 = std::chrono::steady_clock::now();
      w.answer(task, times);
      task = remaining > 1 ? w.try_task(1000) : wire::Task();
      if (task.task_id() > 0) {
        dispatch_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count());
      }
    } else {
      task = w.try_task(0);  // one leased while none was held (not a dispatch after a result)
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const double submit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("large submission answered after %.2f s, its tasks made after %.2f s; meanwhile %zu client requests (p50 "
              "%.2f ms, p99 %.2f ms, max %.2f ms) and %zu dispatches (p50 %.2f ms, p99 %.2f ms, max %.2f ms)\n",
              answered_s, submit_s, request_ms.size(), percentile(request_ms, 0.5), percentile(request_ms, 0.99),
              percentile(request_ms, 1.0), dispatch_ms.size(), percentile(dispatch_ms, 0.5), percentile(dispatch_ms, 0.99),
              percentile(dispatch_ms, 1.0));
  ASSERT_GT(big_job, small.back());
  ASSERT_GE(submit_s, 1.0) << "the large model planned too fast to show anything";
  ASSERT_GE(request_ms.size(), 20u);
  ASSERT_GE(dispatch_ms.size(), 200u);
  // Ratios within the run, not wall-clock bounds (this machine is shared and noisy): a loop that
  // waited for the work would answer at p99 in the order of the work's seconds; this one answers
  // within a fiftieth of it (220 ms for 11 s), and no answer waits a fifth of it. The figures
  // themselves (p99 4 to 9 ms here) are printed above and kept in docs/protocol.md.
  const double work_ms = 1000 * submit_s;
  EXPECT_LE(percentile(request_ms, 0.99), work_ms / 50);
  EXPECT_LE(percentile(dispatch_ms, 0.99), work_ms / 50);
  EXPECT_LE(percentile(request_ms, 1.0), work_ms / 5);
  EXPECT_LE(percentile(dispatch_ms, 1.0), work_ms / 5);
}

// The two fastest candidates' confidence intervals overlap: the coordinator sends just those two
// back, interleaved, and the interleaved run orders them (the one slower alone wins, with the
// pair's mean time alone split in the interleaved ratio: search/decision.h).
TEST_F(Service, TwoCandidatesWithinNoiseAreMeasuredAgainInterleavedAndTheInterleavedTimesDecide) {
  start_coordinator();
  ScriptedWorker w(context_, endpoint_);
  const int64_t job = submit(write_model(dir_, "relu", 4096, {"Relu"}), 3, "host", kOneRound);
  const wire::Task first = w.next_task();
  ASSERT_GE(first.candidates_size(), 3) << coordinator_->log();
  EXPECT_FALSE(first.policy().interleave());
  const std::string a = first.candidates(0).config(), b = first.candidates(1).config();
  std::map<std::string, std::array<double, 3>> alone;
  for (const wire::Candidate& c : first.candidates()) alone[c.config()] = {50.0, 48.0, 52.0};  // clearly slower
  alone[a] = {10.0, 9.0, 11.0};
  alone[b] = {10.5, 9.5, 11.5};  // within a's interval
  w.answer(first, alone);
  const wire::Task pair = w.next_task();
  EXPECT_EQ(pair.task_id(), first.task_id());
  EXPECT_TRUE(pair.policy().interleave());
  ASSERT_EQ(pair.candidates_size(), 2);
  EXPECT_EQ(pair.candidates(0).config(), a);  // the faster alone first
  EXPECT_EQ(pair.candidates(1).config(), b);
  w.answer(pair, {{a, {12.0, 11.8, 12.2}}, {b, {9.0, 8.8, 9.2}}});
  // The worker stays alive (heartbeats) so that the second job finds a worker of its class.
  wait_for([&] { w.heartbeat(); return status(job).state() == "done"; }, "the decision");
  const auto summary = nlohmann::json::parse(status(job).summary());
  EXPECT_EQ(summary["interleaved_pairs"], 1) << summary.dump();
  const double b_time = (10.0 + 10.5) / 2 * 2 * 9.0 / (12.0 + 9.0);
  EXPECT_NEAR(summary["tuned_us"].get<double>(), b_time, 1e-9) << summary.dump();  // b
  EXPECT_TRUE(has_event(*coordinator_, "leaders_interleaved", {{"job", job}})) << coordinator_->log();
  // The database answers a second job with no new comparison: both were interleaved.
  const int64_t again = submit(write_model(dir_, "relu", 4096, {"Relu"}), 3, "host", kOneRound);
  wait_for([&] { w.heartbeat(); return status(again).state() == "done"; }, "the second job");
  EXPECT_EQ(status(again).tasks(), 0);
  EXPECT_NEAR(nlohmann::json::parse(status(again).summary())["tuned_us"].get<double>(), b_time, 1e-9);
}

// The search with a budget: after the cost model's best (round 1), each round queues untried
// mutations of the best measured configurations until the group's trials are spent; the summary
// keeps the best so far after each round.
TEST_F(Service, TheSearchMutatesTheBestMeasuredUntilItsBudgetIsSpent) {
  start_coordinator();
  ScriptedWorker w(context_, endpoint_);
  // One group (a Relu), 3 candidates a round, 9 trials: three rounds.
  const int64_t job = submit(write_model(dir_, "relu", 4096, {"Relu"}), 3, "host",
                             R"("min_repeats": 2, "max_repeats": 3, "min_time_ms": 0.1, "trials": 9)");
  std::set<std::string> seen;
  double next_time = 30;  // each new candidate a little faster than the last: the best so far improves
  for (int round = 1; round <= 3; ++round) {
    const wire::Task t = w.next_task();
    ASSERT_GT(t.candidates_size(), 0) << "round " << round << "\n" << coordinator_->log();
    EXPECT_LE(t.candidates_size(), 3);
    EXPECT_FALSE(t.policy().interleave());
    std::map<std::string, std::array<double, 3>> times;
    for (const wire::Candidate& c : t.candidates()) {
      EXPECT_TRUE(seen.insert(c.config()).second) << c.config() << " asked twice";
      next_time -= 1;
      times[c.config()] = {next_time, next_time - 0.01, next_time + 0.01};  // intervals apart: no comparison
    }
    w.answer(t, times);
  }
  wait_for([&] { return status(job).state() == "done"; }, "the search to end");
  EXPECT_EQ(seen.size(), 9u);
  const auto summary = nlohmann::json::parse(status(job).summary());
  EXPECT_EQ(summary["search_rounds"], 2) << summary.dump();
  EXPECT_EQ(summary["interleaved_pairs"], 0) << summary.dump();
  EXPECT_DOUBLE_EQ(summary["tuned_us"].get<double>(), next_time);  // the last and fastest
  const auto& convergence = summary["convergence"];
  ASSERT_EQ(convergence.size(), 3u) << summary.dump();
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(convergence[r]["round"], r + 1);
    EXPECT_EQ(convergence[r]["trials"], 3 * (r + 1));
    if (r > 0) {
      EXPECT_LT(convergence[r]["tuned_us"].get<double>(), convergence[r - 1]["tuned_us"].get<double>());
      EXPECT_GE(convergence[r]["seconds"].get<double>(), convergence[r - 1]["seconds"].get<double>());
    }
  }
  ASSERT_EQ(summary["group_convergence"].size(), 1u);
  EXPECT_EQ(summary["group_convergence"].begin()->size(), 3u);
  for (const auto& point : *summary["group_convergence"].begin()) {  // [trials, best us, seconds]
    ASSERT_EQ(point.size(), 3u) << point.dump();
    EXPECT_GT(point[0].get<int>(), 0);
    EXPECT_GE(point[2].get<double>(), 0.0);
  }
  EXPECT_TRUE(has_event(*coordinator_, "search_round", {{"round", 3}, {"trials", 3}})) << coordinator_->log();
  // Another job over the same group finds the budget spent by the first: the database answers.
  const int64_t again = submit(write_model(dir_, "relu", 4096, {"Relu"}), 3, "host",
                               R"("min_repeats": 2, "max_repeats": 3, "min_time_ms": 0.1, "trials": 9)");
  wait_for([&] { return status(again).state() == "done"; }, "the second job");
  EXPECT_EQ(status(again).tasks(), 0);
  // A larger budget on the same database measures more: one more round of 3.
  const int64_t larger = submit(write_model(dir_, "relu", 4096, {"Relu"}), 3, "host",
                                R"("min_repeats": 2, "max_repeats": 3, "min_time_ms": 0.1, "trials": 12)");
  const wire::Task more = w.next_task();
  EXPECT_EQ(more.candidates_size(), 3);
  std::map<std::string, std::array<double, 3>> times;
  for (const wire::Candidate& c : more.candidates()) {
    EXPECT_TRUE(seen.insert(c.config()).second) << c.config() << " asked again";
    times[c.config()] = {100.0, 99.9, 100.1};
  }
  w.answer(more, times);
  wait_for([&] { return status(larger).state() == "done"; }, "the larger job");
  EXPECT_EQ(seen.size(), 12u);
}

// A coordinator killed in the middle of a search round, twice, resumes the round where it was:
// the round's task is leased again with the same candidates, the next round follows, and the job
// finishes with its whole history (three rounds of convergence, its cache hits as counted at its
// start, every candidate asked once).
TEST_F(Service, ACoordinatorKilledInASearchRoundResumesTheRoundWithTheJobsHistory) {
  start_coordinator();
  ScriptedWorker w(context_, endpoint_);
  const int64_t job = submit(write_model(dir_, "relu", 4096, {"Relu"}), 3, "host",
                             R"("min_repeats": 2, "max_repeats": 3, "min_time_ms": 0.1, "trials": 9)");
  std::set<std::string> seen;
  double next_time = 30;
  auto answer = [&](const wire::Task& t) {
    std::map<std::string, std::array<double, 3>> times;
    for (const wire::Candidate& c : t.candidates()) {
      next_time -= 1;
      times[c.config()] = {next_time, next_time - 0.01, next_time + 0.01};
    }
    w.answer(t, times);
  };
  for (int round = 1; round <= 3; ++round) {
    const wire::Task t = w.next_task();
    ASSERT_GT(t.candidates_size(), 0) << "round " << round << "\n" << coordinator_->log();
    for (const wire::Candidate& c : t.candidates()) EXPECT_TRUE(seen.insert(c.config()).second) << c.config() << " asked twice";
    if (round >= 2) {  // killed while the worker holds the round's lease
      EXPECT_EQ(coordinator_->kill(SIGKILL), 128 + SIGKILL);
      start_coordinator();
      w.hello_again();
      const wire::Task again = w.next_task();
      ASSERT_EQ(again.task_id(), t.task_id()) << coordinator_->log();
      std::set<std::string> before, after;
      for (const wire::Candidate& c : t.candidates()) before.insert(c.config());
      for (const wire::Candidate& c : again.candidates()) after.insert(c.config());
      EXPECT_EQ(after, before) << "round " << round << " was not resumed as it was";
      EXPECT_TRUE(has_event(*coordinator_, "job_started", {{"job", job}, {"resumed_rounds", round - 1}})) << coordinator_->log();
      answer(again);
    } else {
      answer(t);
    }
  }
  wait_for([&] { return status(job).state() == "done"; }, "the resumed search to end");
  EXPECT_EQ(seen.size(), 9u);
  const wire::JobStatus st = status(job);
  EXPECT_EQ(st.cache_hits(), 0);
  EXPECT_EQ(st.candidates_measured(), 9);
  const auto summary = nlohmann::json::parse(st.summary());
  EXPECT_EQ(summary["search_rounds"], 2) << summary.dump();
  EXPECT_EQ(summary["cache_hits"], 0) << summary.dump();
  const auto& convergence = summary["convergence"];
  ASSERT_EQ(convergence.size(), 3u) << summary.dump();
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(convergence[r]["round"], r + 1) << summary.dump();
    EXPECT_EQ(convergence[r]["trials"], 3 * (r + 1)) << summary.dump();
  }
  EXPECT_EQ(summary["group_convergence"].begin()->size(), 3u) << summary.dump();
  expect_complete_without_duplicates(job);
}

// --time: no new round once the job has run that long (here at once: the first round only).
TEST_F(Service, TheSearchStartsNoRoundAfterItsTime) {
  start_coordinator();
  ScriptedWorker w(context_, endpoint_);
  const int64_t job = submit(write_model(dir_, "relu", 4096, {"Relu"}), 3, "host",
                             R"("min_repeats": 2, "max_repeats": 3, "min_time_ms": 0.1, "trials": 9, "time_s": 0.001)");
  const wire::Task first = w.next_task();
  std::map<std::string, std::array<double, 3>> times;
  double t = 10;
  for (const wire::Candidate& c : first.candidates()) {
    times[c.config()] = {t, t - 0.01, t + 0.01};
    t += 1;
  }
  w.answer(first, times);
  wait_for([&] { return status(job).state() == "done"; }, "the job");
  const auto summary = nlohmann::json::parse(status(job).summary());
  EXPECT_EQ(summary["search_rounds"], 0) << summary.dump();
  EXPECT_EQ(status(job).candidates_measured(), first.candidates_size());
}

// A model whose weights are external data travels in Upload pieces (several for its weight file),
// is stored as the files the client had, and what a bad upload does is refused in one line naming
// the file or field while the coordinator goes on serving.
TEST_F(Service, AModelWithExternalDataTravelsInPiecesAndIsStoredAsItsFiles) {
  constexpr int64_t n = 1200;  // the weight: 5.8 MB, two pieces of wire::kUploadChunk
  const fs::path model_dir = dir_ / "model";
  fs::create_directories(model_dir);
  std::vector<float> w(static_cast<size_t>(n * n));
  const uint32_t seed = static_cast<uint32_t>(std::random_device{}());
  std::printf("weights seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (float& x : w) x = u(rng);
  {
    std::ofstream out(model_dir / "w.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(float)));
  }
  testing::OnnxBuilder b;
  b.input("x", 1, {1, n}).output("y", 1, {1, n});
  b.external_initializer("w", {n, n}, {{"location", "w.bin"}});
  b.node("MatMul", {"x", "w"}, {"y"});
  b.write(model_dir / "m.onnx");
  ASSERT_GT(fs::file_size(model_dir / "w.bin"), wire::kUploadChunk);
  start_coordinator();
  const std::vector<coordinator::UploadFile> files = {{"m.onnx", model_dir / "m.onnx"}, {"w.bin", model_dir / "w.bin"}};
  auto submit_of = [&](const std::string& upload, const std::vector<wire::ModelFile>& named) {
    wire::Envelope e;
    wire::Submit& s = *e.mutable_submit();
    s.set_model_name("m.onnx");
    s.set_upload(upload);
    for (const wire::ModelFile& f : named) *s.add_files() = f;
    s.set_device("h100");  // no such worker: the job waits, and its model is what is checked here
    return e;
  };
  auto refusal = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no refusal");
  };
  coordinator::Client client(context_, endpoint_, 60000, security_);
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  const std::vector<wire::ModelFile> named =
      client.upload("first", files, [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); });
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[1].size(), fs::file_size(model_dir / "w.bin"));
  EXPECT_TRUE(named[1].data().empty());
  ASSERT_GE(progress.size(), 3u);  // one per piece acknowledged
  EXPECT_EQ(progress.back().first, progress.back().second);
  const int64_t job = client.request(submit_of("first", named)).job().job_id();
  ASSERT_GT(job, 0);
  {
    storage::SearchDb db(db_);
    storage::JobQueue queue(db);
    const auto rec = queue.job(job);
    ASSERT_TRUE(rec.has_value());
    const auto stored = queue.model(rec->model_digest);
    ASSERT_TRUE(stored.has_value());
    EXPECT_EQ(stored->onnx.filename(), "m.onnx");
    EXPECT_TRUE(read_file(stored->onnx.parent_path() / "w.bin", "stored weights") == read_file(model_dir / "w.bin", "weights"));
    EXPECT_TRUE(read_file(stored->onnx, "stored model") == read_file(model_dir / "m.onnx", "model"));
  }
  // A piece whose path leaves the model's directory, a piece too large.
  wire::Envelope escape;
  escape.mutable_upload()->set_upload("bad");
  escape.mutable_upload()->set_path("../../escape.bin");
  escape.mutable_upload()->set_data("x");
  EXPECT_NE(refusal([&] { client.request(escape); }).find("'../../escape.bin' must name a file inside"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "escape.bin"));
  EXPECT_FALSE(fs::exists(db_.parent_path().parent_path() / "escape.bin"));
  // A submission naming more than arrived, an upload nobody sent, a file nobody named.
  client.upload("short", {files[0]});
  std::vector<wire::ModelFile> longer = named;
  EXPECT_NE(refusal([&] { client.request(submit_of("short", longer)); }).find("'w.bin' was not uploaded"), std::string::npos);
  client.upload("cut", files);
  longer[1].set_size(longer[1].size() + 1);
  EXPECT_NE(refusal([&] { client.request(submit_of("cut", longer)); }).find("cut short"), std::string::npos);
  EXPECT_NE(refusal([&] { client.request(submit_of("never", named)); }).find("no upload 'never'"), std::string::npos);
  client.upload("extra", files);
  EXPECT_NE(refusal([&] { client.request(submit_of("extra", {named[0]})); }).find("not named by the submission"),
            std::string::npos);
  // Nothing of the refused uploads is left, and the coordinator serves on.
  wait_for([&] {
    const fs::path staging = storage::JobQueue::staging_dir(db_);
    return !fs::exists(staging) || fs::is_empty(staging);
  }, "the staging directory to empty");
  EXPECT_EQ(status(job).state(), "queued");
}

// A frame over --max-message-mb is dropped by ZeroMQ, with its connection, before it is buffered
// or handled; a garbage frame under the limit is handled (answered with an error), and the
// coordinator goes on serving.
// A full disk (here a file-size limit of one byte on the coordinator: every write fails, as on a
// full disk) stops new work, not the coordinator: a result cannot be stored and a submission is
// refused naming the cause, status still answers and says why; when writes work again the
// coordinator takes work by itself, and the job finishes with nothing lost or stored twice.
TEST_F(Service, AFullDiskStopsNewWorkNotTheCoordinatorWhichResumesByItself) {
  start_coordinator();
  ScriptedWorker w(context_, endpoint_);
  const int64_t job = submit(write_model(dir_, "relu", 4096, {"Relu"}), 2, "host", R"("min_repeats": 2, "max_repeats": 3, "min_time_ms": 0.1, "trials": 2)");
  const wire::Task t = w.next_task();
  ASSERT_GT(t.task_id(), 0) << coordinator_->log();
  std::map<std::string, std::array<double, 3>> times;
  double us = 10;  // apart: no pair within noise to compare again
  for (const wire::Candidate& c : t.candidates()) times[c.config()] = {us, us - 0.1, us + 0.1}, us += 10;
  rlimit full{1, RLIM_INFINITY};
  ASSERT_EQ(::prlimit(coordinator_->pid(), RLIMIT_FSIZE, &full, nullptr), 0) << std::strerror(errno);
  // The worker's heartbeats go on meanwhile (it is alive); a request answered with the error of
  // the failed commit is asked again.
  auto warning = [&] {
    w.heartbeat();
    wire::Envelope e;
    e.mutable_status()->set_job_id(0);
    try {
      return request(std::move(e)).status_reply().warning();
    } catch (const Error& err) {
      return std::string("(asked again) ") + err.what();
    }
  };
  w.answer(t, times);  // its commit fails
  wait_for([&] { const std::string now = warning(); return !now.empty() && now.rfind("(asked again)", 0) != 0; },
           "status to say the database cannot be written", 30);
  wire::Envelope all;
  all.mutable_status()->set_job_id(0);
  const wire::StatusReply full_status = request(std::move(all)).status_reply();
  EXPECT_NE(full_status.warning().find("cannot write its database"), std::string::npos) << full_status.warning();
  EXPECT_EQ(full_status.jobs_size(), 1);
  w.heartbeat();
  EXPECT_NE(status(job).state(), "done");
  try {
    submit(write_model(dir_, "sigmoid", 4096, {"Sigmoid"}), 2, "host", kOneRound);
    ADD_FAILURE() << "a submission was taken while the database could not be written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write its database"), std::string::npos) << e.what();
  }
  rlimit room{RLIM_INFINITY, RLIM_INFINITY};
  ASSERT_EQ(::prlimit(coordinator_->pid(), RLIMIT_FSIZE, &room, nullptr), 0) << std::strerror(errno);
  wait_for([&] { return warning().empty(); }, "the coordinator to take work again by itself", 30);
  EXPECT_TRUE(has_event(*coordinator_, "database_writable")) << coordinator_->log();
  w.answer(t, times);  // the worker still holds the lease: its result is stored now
  wait_for([&] { w.heartbeat(); return status(job).state() == "done"; }, "the job after the disk had room again", 60);
  EXPECT_GT(submit(write_model(dir_, "sigmoid", 4096, {"Sigmoid"}), 2, "host", kOneRound), 0);
  expect_complete_without_duplicates(job);
}

// Upload quotas: one job's files, one client's uploads under way, and the model store each take
// so much (here about 2, 3 and 4 MiB); a piece past one is refused naming its flag, a piece far
// past a file's end counts the whole gap, and the coordinator goes on serving.
TEST_F(Service, UploadsPastTheirQuotasAreRefusedNamingTheQuota) {
  start_coordinator({"--max-upload-gb", std::to_string(2.0 / 1024), "--max-client-upload-gb", std::to_string(3.0 / 1024),
                     "--max-store-gb", std::to_string(4.0 / 1024)});
  const std::string megabyte(1'000'000, 'x');
  auto piece = [&](coordinator::Client& client, const std::string& upload, uint64_t offset, const std::string& data) {
    wire::Envelope e;
    e.mutable_upload()->set_upload(upload);
    e.mutable_upload()->set_path("model.onnx");
    e.mutable_upload()->set_offset(offset);
    e.mutable_upload()->set_data(data);
    return client.request(std::move(e));
  };
  auto refused = [&](coordinator::Client& client, const std::string& upload, uint64_t offset, const std::string& data,
                     const std::string& quota) {
    try {
      piece(client, upload, offset, data);
      ADD_FAILURE() << "a piece of upload " << upload << " at " << offset << " passed " << quota;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("would pass " + quota), std::string::npos) << e.what();
    }
  };
  coordinator::Client one(context_, endpoint_, 60000, security_), two(context_, endpoint_, 60000, security_);
  EXPECT_TRUE(piece(one, "a", 0, megabyte).has_upload_ack());
  EXPECT_TRUE(piece(one, "a", 1'000'000, megabyte).has_upload_ack());
  refused(one, "a", 2'000'000, megabyte, "the quota of one job's files");
  EXPECT_TRUE(piece(one, "a", 0, megabyte).has_upload_ack()) << "a piece written again counts once";
  refused(one, "sparse", 1'000'000'000, "ten bytes!", "the quota of one job's files");
  EXPECT_TRUE(piece(one, "b", 0, megabyte).has_upload_ack());
  refused(one, "b", 1'000'000, megabyte, "the quota of one client's uploads under way");
  EXPECT_TRUE(piece(two, "c", 0, megabyte).has_upload_ack());
  refused(two, "c", 1'000'000, megabyte, "the model store's quota");
  wire::Envelope all;
  all.mutable_status()->set_job_id(0);
  EXPECT_EQ(request(std::move(all)).status_reply().jobs_size(), 0);
}

TEST_F(Service, AFrameOverTheMessageLimitIsDroppedUnreadAndTheServiceGoesOn) {
  start_coordinator({"--max-message-mb", "5"});
  auto garbage_socket = [&] {
    zmq::socket_t raw(context_, zmq::socket_type::dealer);
    raw.set(zmq::sockopt::linger, 0);
    raw.connect(endpoint_);
    return raw;
  };
  auto reply_within = [](zmq::socket_t& raw, int ms) {
    zmq::pollitem_t item{static_cast<void*>(raw), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(ms));
    zmq::message_t reply;
    return raw.recv(reply, zmq::recv_flags::dontwait).has_value();
  };
  zmq::socket_t over = garbage_socket();
  over.send(zmq::buffer(std::string((6u << 20) + 1, 'x')), zmq::send_flags::none);
  zmq::socket_t under = garbage_socket();
  under.send(zmq::buffer(std::string(4u << 20, 'x')), zmq::send_flags::none);
  EXPECT_TRUE(reply_within(under, 20000)) << "a 4 MB garbage frame was not answered\n" << coordinator_->log();
  // The loop has handled what reached it by now, and a status request after it is answered: the
  // frame over the limit never reached it (handled, it would have been answered as the other was).
  EXPECT_GE(status(submit(write_model(dir_, "relu", 33, {"Relu"}), 1)).tasks(), 0);
  EXPECT_FALSE(reply_within(over, 1000)) << "a frame over the limit was read and answered";
  // A malformed frame that is read is logged with its size: the one under the limit, never the other.
  EXPECT_TRUE(has_event(*coordinator_, "request_failed", {{"bytes", 4194304}})) << coordinator_->log();
  EXPECT_FALSE(has_event(*coordinator_, "request_failed", {{"bytes", 6291457}})) << coordinator_->log();
}

TEST_F(Service, GarbageFramesAndIncompatibleWorkersAreHandledAndTheServiceGoesOn) {
  start_coordinator();
  zmq::socket_t raw(context_, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(endpoint_);
  raw.send(zmq::str_buffer("definitely not protobuf \xff\xfe"), zmq::send_flags::none);
  raw.send(zmq::str_buffer("two"), zmq::send_flags::sndmore);
  raw.send(zmq::str_buffer("frames"), zmq::send_flags::none);
  raw.send(zmq::message_t(), zmq::send_flags::none);
  wire::Envelope hello;
  hello.mutable_hello()->set_worker_id("from-the-future");
  hello.mutable_hello()->set_min_version(wire::kProtocolVersion + 5);
  hello.mutable_hello()->set_max_version(wire::kProtocolVersion + 9);
  const std::string bytes = wire::encode(hello);
  raw.send(zmq::buffer(bytes), zmq::send_flags::none);
  // The coordinator answers each bad single-frame message with an error, and the hello with a refusal.
  bool refused = false;
  for (int k = 0; k < 3 && !refused; ++k) {
    zmq::pollitem_t item{static_cast<void*>(raw), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20000));
    zmq::message_t reply;
    ASSERT_TRUE(raw.recv(reply, zmq::recv_flags::dontwait)) << coordinator_->log();
    const wire::Envelope e = wire::decode(reply.data(), reply.size());
    if (e.has_refused()) {
      refused = true;
      EXPECT_NE(e.refused().reason().find("speaks protocol versions"), std::string::npos) << e.refused().reason();
    }
  }
  EXPECT_TRUE(refused);
  // Still serving: a real job completes.
  start_worker("w1");
  const int64_t job = submit(write_model(dir_, "relu", 33, {"Relu"}), 1);
  wait_for([&] { return status(job).state() == "done"; }, "a job after the garbage");
  const std::string log = coordinator_->log();
  EXPECT_NE(log.find("malformed message"), std::string::npos) << log;
  EXPECT_NE(log.find("2 frames"), std::string::npos) << log;
  EXPECT_NE(log.find("refused worker from-the-future"), std::string::npos) << log;
}

TEST_F(Service, FiftyJobsAtOnceAllCompleteAndModelsSharingBlocksShareTasks) {
  start_coordinator();
  // Ten models, five jobs each; the Relu/Sigmoid ops recur across models of the same width. The
  // workers come after the submissions, so that every job is bound while the others' tasks are
  // open (a worker there first could finish a model's tasks before the next model's job starts,
  // which then finds them answered instead of shared).
  std::vector<fs::path> models;
  for (int k = 0; k < 10; ++k) {
    const std::vector<std::string> ops = k % 2 ? std::vector<std::string>{"Relu", "Sigmoid", "Tanh"}
                                               : std::vector<std::string>{"Relu", "Sigmoid"};
    models.push_back(write_model(dir_, "m" + std::to_string(k), 16 + k / 2, ops));
  }
  std::vector<int64_t> jobs;
  for (int r = 0; r < 5; ++r) {
    for (const fs::path& m : models) jobs.push_back(submit(m, 1));
  }
  start_worker("w1");
  start_worker("w2");
  wait_for([&] {
    for (int64_t j : jobs) {
      if (status(j).state() != "done") return false;
    }
    return true;
  }, "50 jobs");
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  std::set<int64_t> a, b;
  for (const auto& t : queue.job_tasks(jobs[0])) a.insert(t.id);
  for (const auto& t : queue.job_tasks(jobs[1])) b.insert(t.id);  // the same width, one more op
  std::vector<int64_t> common;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
  EXPECT_FALSE(common.empty()) << "models m0 and m1 share the Relu and Sigmoid blocks but no task";
  // Repeats of a model are answered by the database or share the first job's tasks.
  for (size_t k = models.size(); k < jobs.size(); ++k) {
    for (const auto& t : queue.job_tasks(jobs[k])) {
      std::set<int64_t> first;
      for (const auto& f : queue.job_tasks(jobs[k % models.size()])) first.insert(f.id);
      EXPECT_TRUE(first.count(t.id)) << "job " << jobs[k] << " measured task " << t.id << " again";
    }
  }
  for (int64_t j : jobs) expect_complete_without_duplicates(j);
}

TEST_F(Service, ATimedOutCandidateIsMeasuredAgainUpToTheLimit) {
  // Every candidate times out (it would time for a minute; the limit is 200 ms): a timeout may not
  // reproduce, so the job queues the task again until each candidate has failed
  // kMaxTransientFailures times, no more, and then finishes.
  start_coordinator();
  start_worker("w1");
  const int64_t job = submit(write_model(dir_, "slow", 64, {"Relu", "Sigmoid"}), 2, "host",
                             R"("min_repeats": 5, "max_repeats": 100000, "min_time_ms": 60000, "timeout_ms": 200)");
  wait_for([&] { return status(job).state() == "done"; }, "the job to finish");
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  const storage::DbStats stats = db.stats();
  EXPECT_GT(stats.candidates, 0);
  EXPECT_EQ(stats.failures, stats.measurements);
  EXPECT_EQ(stats.measurements, storage::kMaxTransientFailures * stats.candidates) << coordinator_->log();
  EXPECT_TRUE(has_event(*coordinator_, "task_extended", {{"job", job}})) << coordinator_->log();
  for (const storage::TaskRecord& t : queue.job_tasks(job)) EXPECT_EQ(t.state, storage::TaskState::kDone) << t.error;
}

TEST_F(Service, ATaskWhoseLeasesAllDieFailsAtTheAttemptLimitAndItsJobsFinish) {
  // --max-attempts 1: the one lease of the task dies with its worker (SIGKILL mid-measurement),
  // so the task fails, and the two jobs waiting on it finish (the second one's finish erases it
  // from the coordinator's job map while the first is being finished).
  start_coordinator({"--max-attempts", "1"});
  const fs::path model = write_model(dir_, "one", 64, {"Relu"});
  const std::string slow = R"("min_repeats": 5, "max_repeats": 100000, "min_time_ms": 60000, "timeout_ms": 30000)";
  const int64_t first = submit(model, 1, "host", slow);
  const int64_t second = submit(model, 1, "host", slow);
  Process& w1 = start_worker("w1");
  wait_for([&] {
    storage::SearchDb db(db_);
    return storage::JobQueue(db).task_ids_in_state(storage::TaskState::kLeased).size() == 1;
  }, "a lease");
  EXPECT_EQ(w1.kill(SIGKILL), 128 + SIGKILL);
  wait_for([&] { return status(first).state() == "done" && status(second).state() == "done"; }, "both jobs to finish");
  for (int64_t job : {first, second}) {
    const wire::JobStatus s = status(job);
    EXPECT_EQ(s.tasks_failed(), 1) << s.error();
    EXPECT_NE(s.error().find("1 tasks failed"), std::string::npos) << s.error();
  }
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  const std::vector<storage::TaskRecord> tasks = queue.job_tasks(first);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].state, storage::TaskState::kFailed);
  EXPECT_EQ(tasks[0].attempts, 1);
  EXPECT_NE(tasks[0].error.find("after 1 attempts"), std::string::npos) << tasks[0].error;
  EXPECT_TRUE(has_event(*coordinator_, "worker_silent")) << coordinator_->log();
}

TEST_F(Service, ASigtermedWorkerHandsItsLeaseBackAndTasksGoOnlyToMatchingDevices) {
  start_coordinator();
  const int64_t gpu_job = submit(bundled_model("cnn_small"), 1, "h100");  // no H100 worker: never bound
  Process& w1 = start_worker("w1", {"--drain-seconds", "600"});
  // Slow timing (0.8 s per candidate), so w1 is surely inside a task when it is told to stop.
  const int64_t job = submit(write_model(dir_, "chain", 48, {"Relu", "Sigmoid", "Tanh"}), 2, "host",
                             R"("min_repeats": 2, "max_repeats": 100000, "min_time_ms": 800)");
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  wait_for([&] { return !queue.tasks_in_state(storage::TaskState::kLeased).empty(); }, "a lease");
  const int64_t leased = queue.tasks_in_state(storage::TaskState::kLeased).at(0).id;
  // Leased in the database is not yet measured: wait until w1 measures it.
  wait_for([&] { return has_event(w1, "measuring", {{"task", leased}}); }, "w1 at work");
  // The first SIGTERM drains (the task may finish within 600 s); the second hands it back at once.
  w1.signal(SIGTERM);
  wait_for([&] { return has_event(w1, "draining"); }, "w1 draining");
  EXPECT_EQ(w1.kill(SIGTERM), 0) << w1.log();
  wait_for([&] { return queue.task(leased)->state == storage::TaskState::kQueued; }, "the lease handed back");
  EXPECT_TRUE(has_event(*coordinator_, "lease_handed_back", {{"task", leased}, {"worker", "w1"}})) << coordinator_->log();
  EXPECT_TRUE(has_event(w1, "task_abandoned", {{"task", leased}})) << w1.log();
  start_worker("w2");
  wait_for([&] { return status(job).state() == "done"; }, "the job on the second worker");
  expect_complete_without_duplicates(job);
  const wire::JobStatus gpu = status(gpu_job);
  EXPECT_EQ(gpu.state(), "queued");
  EXPECT_EQ(gpu.identity(), "") << "an h100 job was bound to a host worker";
  EXPECT_TRUE(queue.job_tasks(gpu_job).empty());
  EXPECT_TRUE(has_event(*coordinator_, "job_waiting", {{"job", gpu_job}, {"device", storage::DeviceKey("h100", "sm_90").str()}}))
      << coordinator_->log();
}

// `worker --device host,host,host`: one process serving three devices, the host standing in for a
// machine's GPUs. Three workers join under their own ids; each device measures tasks and holds a
// second one that compiles while the first is measured; the job completes with nothing lost or
// measured twice; SIGTERM stops them all and the report names what each device did.
TEST_F(Service, AWorkerOfSeveralDevicesServesEveryDeviceAndReportsWhatEachDid) {
  start_coordinator();
  Process& machine = start_worker("lab", {"--device", "host,host,host", "--compile-jobs", "2"});
  for (const char* id : {"lab/host0", "lab/host1", "lab/host2"}) {
    wait_for([&] { return has_event(*coordinator_, "worker_joined", {{"worker", id}}); }, std::string(id) + " joining");
  }
  const int64_t job = submit(bundled_model("cnn_small"), 2, "host", kOneRound);
  wait_for([&] { return status(job).state() == "done"; }, "the job on three devices");
  expect_complete_without_duplicates(job);
  EXPECT_TRUE(has_event(machine, "compiling", {{"ahead", 1}})) << machine.log();
  EXPECT_EQ(machine.kill(SIGTERM), 0) << machine.log();
  const std::string log = machine.log();
  int tasks_in_reports = 0;
  for (const char* id : {"lab/host0", "lab/host1", "lab/host2"}) {
    const std::string marker = std::string(" as ") + id + ": ";
    const size_t at = log.find(marker);
    ASSERT_NE(at, std::string::npos) << "no report line for " << id << "\n" << log;
    const int tasks = std::stoi(log.substr(at + marker.size()));
    EXPECT_GE(tasks, 1) << id << " measured nothing\n" << log;
    tasks_in_reports += tasks;
    // The per-task events carry the device's id: the report counts what that device measured.
    int logged = 0;
    for (const nlohmann::json& e : events(machine, "task_measured")) logged += e.value("worker", "") == id;
    EXPECT_EQ(logged, tasks) << id << "\n" << log;
  }
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  EXPECT_GE(tasks_in_reports, static_cast<int>(queue.job_tasks(job).size())) << log;
}

// The first SIGTERM drains: the task being measured finishes and its result is stored, a task
// held behind it goes back at once, and the worker exits 0.
TEST_F(Service, ASigtermedWorkerFinishesTheTaskItMeasuresAndHandsTheNextBack) {
  start_coordinator();
  Process& w1 = start_worker("w1", {"--drain-seconds", "600"});
  // 0.25 s per candidate: a task is measured for half a second or more, long enough to be stopped in.
  const int64_t job = submit(bundled_model("cnn_small"), 2, "host",
                             R"("min_repeats": 2, "max_repeats": 100000, "min_time_ms": 250, "trials": 3)");
  wait_for([&] { return has_event(w1, "compiling", {{"ahead", 1}}); }, "w1 holding a second task");
  wait_for([&] { return has_event(w1, "measuring"); }, "w1 measuring");
  EXPECT_EQ(w1.kill(SIGTERM), 0) << w1.log();
  const std::vector<nlohmann::json> draining = events(w1, "draining");
  ASSERT_EQ(draining.size(), 1u) << w1.log();
  const int64_t measured = draining[0].value("task", int64_t{0});
  // It finished after the stop (its result was sent: the events come in order, so the draining
  // one was written first), and was not handed back; the task held behind it was.
  std::vector<std::string> order;  // w1's events, as written
  for (const nlohmann::json& e : events(w1, "")) {
    if (e.value("task", int64_t{0}) == measured) order.push_back(e.value("event", ""));
  }
  const auto at = [&](const std::string& name) { return std::find(order.begin(), order.end(), name) - order.begin(); };
  EXPECT_LT(at("draining"), at("task_measured")) << w1.log();
  EXPECT_LT(at("task_measured"), static_cast<std::ptrdiff_t>(order.size())) << w1.log();
  EXPECT_FALSE(has_event(w1, "task_abandoned", {{"task", measured}})) << w1.log();
  EXPECT_FALSE(has_event(*coordinator_, "lease_handed_back", {{"task", measured}, {"worker", "w1"}})) << coordinator_->log();
  EXPECT_TRUE(has_event(w1, "handed_back")) << w1.log();
  start_worker("w2");
  wait_for([&] { return status(job).state() == "done"; }, "the job on the second worker");
  expect_complete_without_duplicates(job);
}

// A cancelled job's task is taken back from the worker measuring it: the worker stops measuring
// (its measuring child is killed), sends no result, and is free for the next job at once.
TEST_F(Service, CancelReachesTheWorkerWhichStopsMeasuringTheJobsTask) {
  start_coordinator();
  Process& w1 = start_worker("w1");
  // 10 s per candidate: the task would be measured for 20 s or more.
  const int64_t slow = submit(write_model(dir_, "slow", 4096, {"Relu"}), 2, "host",
                              R"("min_repeats": 2, "max_repeats": 10000, "min_time_ms": 10000, "trials": 2)");
  ASSERT_GT(slow, 0) << coordinator_->log();
  wait_for([&] { return has_event(w1, "measuring"); }, "w1 measuring");
  wire::Envelope cancel;
  cancel.mutable_cancel()->set_job_id(slow);
  ASSERT_EQ(request(std::move(cancel)).job().job_id(), slow);
  EXPECT_EQ(status(slow).state(), "cancelled");
  EXPECT_TRUE(has_event(*coordinator_, "job_cancelled", {{"job", slow}})) << coordinator_->log();
  wait_for([&] { return has_event(w1, "measuring_stopped"); }, "w1 to stop measuring the cancelled job's task", 15);
  const std::string reason = "job " + std::to_string(slow) + " was cancelled";
  EXPECT_TRUE(has_event(w1, "revoked", {{"measuring", 1}, {"reason", reason}})) << w1.log();
  EXPECT_TRUE(has_event(*coordinator_, "leases_revoked", {{"leases", 1}, {"reason", reason}, {"worker", "w1"}}))
      << coordinator_->log();
  // The worker is free for the next job, and nothing of the revoked task was stored or refused.
  const int64_t quick = submit(write_model(dir_, "quick", 4096, {"Sigmoid"}), 2, "host", kOneRound);
  wait_for([&] { return status(quick).state() == "done"; }, "the next job on the same worker");
  for (const char* refusal : {"result_refused", "message_refused", "worker_refused"}) {
    EXPECT_TRUE(events(*coordinator_, refusal).empty()) << refusal << "\n" << coordinator_->log();
  }
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  for (const storage::TaskRecord& t : queue.job_tasks(slow)) {
    EXPECT_EQ(t.state, storage::TaskState::kQueued) << "task " << t.id;
    EXPECT_EQ(t.attempts, 0) << "a revoked lease counted as an attempt";
    EXPECT_TRUE(db.top_k(t.signature, t.device, t.codegen_version, 10).empty()) << "task " << t.id << " has measurements";
  }
}

// Job options outside their documented ranges (a lease due in days, a run of hours) are refused
// at submission, naming the option; nothing is stored and the coordinator goes on.
TEST_F(Service, JobOptionsOutsideTheirRangesAreRefusedNamingTheOption) {
  start_coordinator();
  const fs::path model = write_model(dir_, "relu", 64, {"Relu"});
  for (const auto& [timing, named] : std::vector<std::pair<std::string, std::string>>{
           {R"("timeout_ms": 2147483647)", "job option 'timeout_ms' must be from 100 to 120000"},
           {R"("min_time_ms": 1e12)", "job option 'min_time_ms' must be from 0 to 600000, not 1000000000000"},
           {R"("max_repeats": 100000000)", "job option 'max_repeats' must be from 1 to 1000000"},
           {R"("shapes": {"x": [1, 4294967296]})", "input 'x' has a dimension of 4294967296"}}) {
    try {
      submit_reply(model, 2, "host", timing);
      ADD_FAILURE() << timing << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  }
  wire::Envelope all;
  all.mutable_status()->set_job_id(0);
  EXPECT_EQ(request(std::move(all)).status_reply().jobs_size(), 0);
  EXPECT_GT(submit(model, 2, "host", kOneRound), 0) << coordinator_->log();
}

// Two host workers whose C++ compilers differ are two device identities: a job is decided by the
// measurements of the identity it is bound to; the other's measurements seed its candidates' order
// but answer nothing; a third job on the first identity is answered by the database.
TEST_F(Service, MeasurementsAnswerOnlyTheirOwnDeviceIdentity) {
  start_coordinator();
  const fs::path model = write_model(dir_, "chain", 64, {"Relu", "Sigmoid"});
  Process& cxx = start_worker("cxx", {}, {{"CXX", "c++"}});
  const int64_t first = submit(model, 2, "host", kOneRound);
  wait_for([&] { return status(first).state() == "done"; }, "the job on the c++ worker");
  const wire::JobStatus a = status(first);
  EXPECT_EQ(a.identity().find("host (host, "), 0u) << a.identity();
  EXPECT_NE(a.identity().find("c++: "), std::string::npos) << a.identity();
  EXPECT_EQ(a.cache_hits(), 0);
  EXPECT_EQ(cxx.kill(SIGTERM), 0) << cxx.log();

  start_worker("gxx", {}, {{"CXX", "g++"}});
  const int64_t second = submit(model, 2, "host", kOneRound);
  wait_for([&] { return status(second).state() == "done"; }, "the job on the g++ worker");
  const wire::JobStatus b = status(second);
  EXPECT_NE(b.identity().find("g++: "), std::string::npos) << b.identity();
  EXPECT_NE(b.identity(), a.identity());
  EXPECT_EQ(b.cache_hits(), 0) << "another identity's measurements answered";
  EXPECT_EQ(b.tasks(), a.tasks());
  // Every candidate measured alone on each identity; leaders within noise (timing decides how
  // many) add an interleaved pair each.
  const auto alone = [](const wire::JobStatus& s) {
    return s.candidates_measured() - 2 * nlohmann::json::parse(s.summary())["interleaved_pairs"].get<int64_t>();
  };
  EXPECT_EQ(alone(b), alone(a));
  EXPECT_TRUE(has_event(*coordinator_, "job_started", {{"job", second}, {"cache_hits", 0}, {"seeded", b.tasks()}}))
      << coordinator_->log();

  const int64_t third = submit(model, 2, "host", kOneRound);
  wait_for([&] { return status(third).state() == "done"; }, "the job answered by the database");
  const wire::JobStatus c = status(third);
  EXPECT_EQ(c.identity(), b.identity());
  EXPECT_EQ(c.tasks(), 0);
  EXPECT_EQ(c.cache_hits(), b.tasks());

  storage::SearchDb db(db_);
  const storage::DbStats stats = db.stats();
  ASSERT_EQ(stats.identities.size(), 2u);
  EXPECT_EQ(stats.identities[0].measurements + stats.identities[1].measurements, stats.measurements);
  EXPECT_EQ(stats.measurements - stats.interleaved, 2 * alone(a));
}

TEST_F(Service, WithCurveKeysOnlyAllowedWorkersAndClientsAreServedEachInItsRole) {
  const fs::path keys = dir_ / "keys", allowed = dir_ / "allowed";
  for (const char* name : {"coordinator", "good", "client", "intruder"}) {
    Process gen({"keys", "generate", name, "--out", keys.string()}, dir_ / "keys.log");
    ASSERT_EQ(gen.wait(), 0) << gen.log();
  }
  fs::create_directories(allowed / "workers");
  fs::create_directories(allowed / "clients");
  fs::copy_file(keys / "good.pub", allowed / "workers" / "good.pub");
  fs::copy_file(keys / "client.pub", allowed / "clients" / "client.pub");
  start_coordinator({"--key", (keys / "coordinator.key").string(), "--allow-workers", (allowed / "workers").string(),
                     "--allow-clients", (allowed / "clients").string()});
  Process& intruder = start_worker("intruder", {"--key", (keys / "intruder.key").string(), "--coordinator-key",
                                                (keys / "coordinator.pub").string()});
  EXPECT_EQ(intruder.wait(), 3) << intruder.log();  // refused at the handshake, and says why
  EXPECT_TRUE(has_event(intruder, "refused", {{"reason", "curve_handshake"}})) << intruder.log();
  EXPECT_FALSE(events(*coordinator_, "key_refused").empty()) << coordinator_->log();
  start_worker("good", {"--key", (keys / "good.key").string(), "--coordinator-key", (keys / "coordinator.pub").string()});
  security_.own = wire::read_key_file(keys / "client.key");
  security_.server_public = wire::read_key_file(keys / "coordinator.pub").public_key;
  const int64_t job = submit(write_model(dir_, "relu", 40, {"Relu"}), 1);
  wait_for([&] { return status(job).state() == "done"; }, "a job served over CURVE");
  // A client without keys gets nothing from a CURVE coordinator.
  coordinator::Client plain(context_, endpoint_, 1500);
  wire::Envelope e;
  e.mutable_status();
  EXPECT_THROW(plain.request(std::move(e)), Error);
  // Roles: the client's key cannot serve as a worker (its hello is refused and the worker stops),
  // and the worker's key cannot submit; both may ask for status.
  Process& posing = start_worker("posing", {"--key", (keys / "client.key").string(), "--coordinator-key",
                                           (keys / "coordinator.pub").string()});
  EXPECT_EQ(posing.wait(), 3) << posing.log();
  EXPECT_TRUE(has_event(posing, "refused", {{"reason", "this peer's key is not a worker's (--allow-workers): it may not send hello"}}))
      << posing.log();
  EXPECT_TRUE(has_event(*coordinator_, "message_refused", {{"message", "hello"}})) << coordinator_->log();
  security_.own = wire::read_key_file(keys / "good.key");
  EXPECT_EQ(status(job).state(), "done");
  try {
    submit(write_model(dir_, "sigmoid", 40, {"Sigmoid"}), 1);
    ADD_FAILURE() << "a worker's key submitted a job";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("this peer's key is not a client's (--allow-clients): it may not send submit"),
              std::string::npos)
        << err.what();
  }
  wire::Envelope all;
  all.mutable_status()->set_job_id(0);
  EXPECT_EQ(request(std::move(all)).status_reply().jobs_size(), 1) << "the refused submission was stored";
}


// Every regular file under `dir`, by its path relative to `dir`, with its bytes.
std::map<std::string, std::string> files_under(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_file(e.path(), "a stored file");
  }
  return out;
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

// `fusetune submit` sends the model and exactly the external data its tensors name (an
// initializer, a Constant's value tensor in a subfolder, and a symlink to a file in the folder):
// not the `.netrc` and `id_ed25519` lying beside it that its doc string and a node's name name.
// What the coordinator stored is its files only, the owner's only although the coordinator runs
// under umask 0 (files 0600, folders 0700). A symlink leading out of the folder, an absolute
// location and one leaving the folder are each refused in one line naming the file, and nothing
// of them is stored.
TEST_F(Service, SubmitSendsTheModelAndExactlyTheExternalDataItsTensorsName) {
  constexpr int64_t n = 8;
  const fs::path model_dir = dir_ / "model";
  fs::create_directories(model_dir / "weights");
  fs::create_directories(dir_ / "outside");
  auto write = [](const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; };
  write(model_dir / ".netrc", "machine lab login me password hunter2");
  write(model_dir / "id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY----- secret");
  write(dir_ / "outside" / "passwd", "root:x:0:0:root:/root:/bin/bash");
  auto floats = [](int64_t count, float scale) {
    std::string bytes(static_cast<size_t>(count) * sizeof(float), '\0');
    for (int64_t i = 0; i < count; ++i) {
      const float v = scale * static_cast<float>(i % 7 - 3);
      std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof v);
    }
    return bytes;
  };
  write(model_dir / "w.bin", floats(n * n, 0.01f));
  write(model_dir / "weights" / "c.bin", floats(n, 0.5f));
  fs::create_symlink("w.bin", model_dir / "alias.bin");
  fs::create_symlink(dir_ / "outside" / "passwd", model_dir / "link.bin");
  // x[1,n] @ w + c (a Constant whose value tensor is external data) @ w2 (through alias.bin) -> y;
  // its doc string and an attribute name the secrets.
  auto model = [&](const std::string& file, const std::string& second_location) {
    testing::OnnxBuilder b;
    b.input("x", testing::kFloat, {1, n}).output("y", testing::kFloat, {1, n});
    b.external_initializer("w", {n, n}, {{"location", "w.bin"}});
    b.external_initializer("w2", {n, n}, {{"location", second_location}});
    onnx::NodeProto& c = b.node("Constant", {}, {"c"}, "keys in id_ed25519, login in .netrc");
    onnx::AttributeProto& value = *c.add_attribute();
    value.set_name("value");
    value.set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto& t = *value.mutable_t();
    t.set_name("c");
    t.set_data_type(testing::kFloat);
    t.add_dims(n);
    t.set_data_location(1);
    t.add_external_data()->set_key("location");
    t.mutable_external_data(0)->set_value("weights/c.bin");
    b.node("MatMul", {"x", "w"}, {"xw"});
    b.node("Add", {"xw", "c"}, {"xwc"});
    b.node("MatMul", {"xwc", "w2"}, {"y"});
    const std::string doc = "Trained with the credentials in .netrc; deploy with id_ed25519.";
    std::string bytes = b.bytes();
    bytes += '\x32';  // ModelProto.doc_string: field 6, length-delimited
    bytes += static_cast<char>(doc.size());
    bytes += doc;
    write(model_dir / file, bytes);
    return model_dir / file;
  };
  const fs::path good = model("m.onnx", "alias.bin");
  ASSERT_NE(read_file(good, "model").find("id_ed25519"), std::string::npos);
  const mode_t old_umask = ::umask(0);
  start_coordinator();
  ::umask(old_umask);
  auto submit_cli = [&](const fs::path& m) {
    return testing::run_cli("submit " + m.string() + " --coordinator " + endpoint_ + " --device h100");
  };
  const testing::Outcome ok = submit_cli(good);
  ASSERT_EQ(ok.exit_code, 0) << ok.output << coordinator_->log();
  const int64_t job = std::stoll(ok.output.substr(ok.output.find_last_of('\n', ok.output.size() - 2) + 1));
  fs::path stored;
  {
    storage::SearchDb db(db_);
    storage::JobQueue queue(db);
    const auto rec = queue.job(job);
    ASSERT_TRUE(rec.has_value()) << ok.output;
    const auto model_rec = queue.model(rec->model_digest);
    ASSERT_TRUE(model_rec.has_value());
    stored = model_rec->onnx.parent_path();
  }
  const std::map<std::string, std::string> files = files_under(stored);
  std::vector<std::string> names;
  for (const auto& [name, bytes] : files) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"alias.bin", "m.onnx", "w.bin", "weights/c.bin"}));
  EXPECT_TRUE(files.at("w.bin") == read_file(model_dir / "w.bin", "w.bin"));
  EXPECT_TRUE(files.at("alias.bin") == read_file(model_dir / "w.bin", "w.bin"));
  EXPECT_TRUE(files.at("weights/c.bin") == read_file(model_dir / "weights" / "c.bin", "c.bin"));
  // Modes, with stat.
  const fs::path store = stored.parent_path();
  EXPECT_EQ(mode_of(store), 0700u);
  EXPECT_EQ(mode_of(stored), 0700u);
  EXPECT_EQ(mode_of(stored / "weights"), 0700u);
  for (const auto& [name, bytes] : files) EXPECT_EQ(mode_of(stored / name), 0600u) << name;
  // Refusals: each one line naming the file, nothing sent.
  const std::vector<std::pair<fs::path, std::string>> refused = {
      {model("out.onnx", "link.bin"), "'link.bin' is a symlink leading out of the model's folder"},
      {model("abs.onnx", (dir_ / "outside" / "passwd").string()), "'" + (dir_ / "outside" / "passwd").string() + "'"},
      {model("up.onnx", "../outside/passwd"), "'../outside/passwd'"},
      {model("gone.onnx", "missing.bin"), "'missing.bin' is missing"},
  };
  for (const auto& [m, says] : refused) {
    const testing::Outcome o = submit_cli(m);
    EXPECT_EQ(o.exit_code, 2) << o.output;
    EXPECT_NE(o.output.find(says), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("tensor 'w2'"), std::string::npos) << o.output;
    EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
  }
  // Nothing but the first model is stored; no secret and no outside file anywhere in the store.
  for (const auto& [name, bytes] : files_under(store)) {
    EXPECT_EQ(name.find(".netrc"), std::string::npos) << name;
    EXPECT_EQ(name.find("id_ed25519"), std::string::npos) << name;
    EXPECT_EQ(bytes.find("root:x:0:0"), std::string::npos) << name;
    EXPECT_EQ(bytes.find("hunter2"), std::string::npos) << name;
    EXPECT_EQ(bytes.find("OPENSSH PRIVATE KEY"), std::string::npos) << name;
  }
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  EXPECT_EQ(queue.stats().models, 1);
}

// A worker whose ZeroMQ routing id is binary (not UTF-8, with a newline) measures a job; its name
// stays valid text: /api/jobs/ID/tasks and /api/workers answer 200 with JSON that parses, and
// `fusetune db export` exports the whole database.
TEST_F(Service, AWorkerWithABinaryRoutingIdLeavesTheApiAndTheExportValid) {
  start_coordinator({"--http", "127.0.0.1:0"});
  const int http_port = http_port_;
  ASSERT_GT(http_port, 0);
  const std::string id = "\xff\xfe\n<w>\xc0\xaf";
  ScriptedWorker w(context_, endpoint_, id);
  const int64_t job = submit(write_model(dir_, "relu", 4096, {"Relu"}), 2, "host", kOneRound);
  for (wire::Task t = w.next_task(); t.task_id() > 0; t = w.try_task(3000)) {
    std::map<std::string, std::array<double, 3>> times;
    for (const wire::Candidate& c : t.candidates()) times[c.config()] = {10.0, 9.9, 10.1};
    w.answer(t, times);
  }
  wait_for([&] { w.heartbeat(); return status(job).state() == "done"; }, "the job to finish on the binary peer's results");
  const std::string name = valid_utf8(id);
  wait_for([&] { return http_get(http_port, "/api/workers").first == 200; }, "the HTTP side to answer");
  const auto [code, body] = http_get(http_port, "/api/jobs/" + std::to_string(job) + "/tasks");
  ASSERT_EQ(code, 200) << body << coordinator_->log();
  const nlohmann::json tasks = nlohmann::json::parse(body);
  ASSERT_FALSE(tasks["tasks"].empty());
  for (const auto& t : tasks["tasks"]) EXPECT_EQ(t["worker"], name) << t.dump();
  const auto [workers_code, workers_body] = http_get(http_port, "/api/workers");
  ASSERT_EQ(workers_code, 200) << workers_body;
  EXPECT_EQ(nlohmann::json::parse(workers_body)["workers"][0]["worker_id"], name);
  const testing::Outcome exported = testing::run_cli("db export " + (dir_ / "out.jsonl").string() + " --db " + db_.string());
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  std::ifstream in(dir_ / "out.jsonl");
  int measurements = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r["type"] == "measurement") {
      ++measurements;
      EXPECT_EQ(r["worker"], name);
    }
  }
  EXPECT_GT(measurements, 0);
}

// The live page is live: while a job runs, /api/jobs/ID gives each group whose task is done its best
// measured time (the group's last convergence point) before the job's round ends; a group nothing
// was measured for has no point yet.
TEST_F(Service, ARunningJobsPageShowsEachFinishedGroupsBestBeforeItsRoundEnds) {
  start_coordinator({"--http", "127.0.0.1:0"});
  ASSERT_GT(http_port_, 0);
  const int64_t job = submit(write_model(dir_, "relu_neg", 4096, {"Relu", "Neg"}), 2, "host", kOneRound);
  ScriptedWorker w(context_, endpoint_);  // after the submission: no heartbeat is due while it is planned
  auto answer = [&](const wire::Task& t, double us) {
    std::map<std::string, std::array<double, 3>> times;
    for (const wire::Candidate& c : t.candidates()) times[c.config()] = {us, us - 0.01, us + 0.01};
    w.answer(t, times);
  };
  const wire::Task first = w.next_task();
  answer(first, 7.5);
  const wire::Task second = w.next_task();  // leased after the first result was stored
  ASSERT_NE(second.signature(), first.signature());
  const auto [code, body] = http_get(http_port_, "/api/jobs/" + std::to_string(job));
  ASSERT_EQ(code, 200) << body << coordinator_->log();
  const nlohmann::json page = nlohmann::json::parse(body);
  EXPECT_EQ(page["state"], "running") << page.dump();
  EXPECT_TRUE(page["convergence"].empty()) << "no round has ended yet: " << page.dump();
  const nlohmann::json& groups = page["group_convergence"];
  ASSERT_TRUE(groups.contains(first.signature())) << page.dump();
  const nlohmann::json& last = groups[first.signature()].back();  // [trials, best us, seconds]
  EXPECT_EQ(last[0], first.candidates_size()) << page.dump();
  EXPECT_NEAR(last[1].get<double>(), 7.5, 0.05) << page.dump();
  EXPECT_FALSE(groups.contains(second.signature())) << page.dump();
  answer(second, 5.0);
  for (wire::Task t = w.try_task(3000); t.task_id() > 0; t = w.try_task(3000)) answer(t, 6.0);
  wait_for([&] { w.heartbeat(); return status(job).state() == "done"; }, "the job to finish");
}

// A model whose tasks take long to lower: two softmaxes over `rows` rows of 1,024, one block a row
// each, whose barrier analysis goes over every block (about 100 s at 65,536 rows on two cores).
fs::path slow_to_lower_model(const fs::path& dir, int64_t rows) {
  testing::OnnxBuilder b;
  b.input("x", 1, {rows, 1024});
  b.node("Softmax", {"x"}, {"s"});
  b.node("Relu", {"s"}, {"r"});
  b.node("Softmax", {"r"}, {"y"});
  b.output("y", 1, {rows, 1024});
  const fs::path p = dir / "slow_to_lower.onnx";
  b.write(p);
  return p;
}

// Stopping promptly: SIGTERM to a coordinator whose pool lowers a submitted model's tasks, and to
// `tune` while it plans a model on its own thread, ends each within seconds, the planning given up
// (it would take minutes). The coordinator's job stays queued in the database, to be prepared
// again when a worker can take it; nothing of tune's is stored.
TEST_F(Service, ACoordinatorAndTuneStopWithinSecondsOfSigtermWhilePlanning) {
  const fs::path model = slow_to_lower_model(dir_, 32768);
  constexpr auto kPrompt = std::chrono::seconds(15);
  start_coordinator();
  const int64_t job = submit(model, 2, "h100");  // answered once planned; the lowering follows on the pool
  ASSERT_GT(job, 0) << coordinator_->log();
  coordinator_->signal(SIGTERM);
  const std::optional<int> code = coordinator_->wait_for(kPrompt);
  ASSERT_TRUE(code.has_value()) << "the coordinator still ran " << kPrompt.count() << " s after SIGTERM:\n" << coordinator_->log();
  EXPECT_EQ(*code, 0) << coordinator_->log();
  EXPECT_TRUE(events(*coordinator_, "tasks_lowered").empty()) << "the lowering finished first:\n" << coordinator_->log();
  start_coordinator();
  EXPECT_EQ(status(job).state(), "queued") << coordinator_->log();

  const fs::path tune_db = dir_ / "tune.db";
  Process tune({"tune", model.string(), "--device", "host", "--db", tune_db.string()}, dir_ / "tune.log");
  wait_for([&] { return tune.log().find("tuning ") != std::string::npos; }, "tune to start planning", 60);
  tune.signal(SIGTERM);
  const std::optional<int> tuned = tune.wait_for(kPrompt);
  ASSERT_TRUE(tuned.has_value()) << "tune still ran " << kPrompt.count() << " s after SIGTERM:\n" << tune.log();
  EXPECT_EQ(*tuned, 1) << tune.log();
  EXPECT_NE(tune.log().find("interrupted while planning"), std::string::npos) << tune.log();
  storage::SearchDb db(tune_db);
  storage::JobQueue queue(db);
  EXPECT_TRUE(queue.jobs(false).empty());
}

// Node and value names that are not UTF-8 (a stray continuation byte, 0xFF, an overlong '/') travel
// to a real worker, whose tasks all succeed, and the job is done with every group measured. A
// refusal quoting such a name reaches `fusetune submit` as one readable line naming the node.
TEST_F(Service, AModelWhoseNodeNamesAreNotUtf8TunesToDoneWithEveryTaskSucceeding) {
  testing::OnnxBuilder b;
  b.input("x", testing::kFloat, {1, 256}).output("y", testing::kFloat, {1, 256});
  b.node("Relu", {"x"}, {"\xff\x80value"}, "\xff\xfe node");
  b.node("Sigmoid", {"\xff\x80value"}, {"\xc0\xafvalue"}, "n\xc0\xaf\xed\xa0\x80");
  b.node("Tanh", {"\xc0\xafvalue"}, {"y"}, "\x80\x80\n");
  const fs::path model = dir_ / "names.onnx";
  b.write(model);
  start_coordinator();
  start_worker("w1");
  const int64_t job = submit(model, 2, "host", kOneRound);
  wait_for([&] {
    const std::string state = status(job).state();
    return state != "queued" && state != "running";
  }, "the job to end");
  EXPECT_EQ(status(job).state(), "done") << status(job).error() << coordinator_->log();
  expect_complete_without_duplicates(job);
  storage::SearchDb db(db_);
  storage::JobQueue queue(db);
  const auto tasks = queue.job_tasks(job);
  ASSERT_FALSE(tasks.empty());
  for (const storage::TaskRecord& t : tasks) {
    bool any_ok = false;
    for (const storage::Measurement& m : db.top_k(t.signature, t.device, t.codegen_version, 100)) {
      any_ok = any_ok || m.status == storage::Status::kOk;
    }
    EXPECT_TRUE(any_ok) << "task " << t.id << " has no working candidate: " << t.error;
  }
  testing::OnnxBuilder refused;
  refused.input("x", testing::kFloat, {1, 256}).output("y", testing::kFloat, {1, 256});
  testing::OnnxBuilder::attr_i(refused.node("Relu", {"x"}, {"y"}, "\xff\xfe node"), "bogus", 1);
  refused.write(dir_ / "refused.onnx");
  const testing::Outcome o =
      testing::run_cli("submit " + (dir_ / "refused.onnx").string() + " --coordinator " + endpoint_ + " --device host");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("node '\\xFF\\xFE node' (Relu): attribute 'bogus'"), std::string::npos) << o.output;
  // One line of fusetune's (a debug build's protobuf adds lines of its own about the bytes).
  std::istringstream lines(o.output);
  int ours = 0;
  for (std::string line; std::getline(lines, line);) ours += line.rfind("[libprotobuf", 0) != 0;
  EXPECT_EQ(ours, 1) << o.output;
}

// A model's name is the client's text: one with a newline and a forged log line after it, or with
// bytes that are not UTF-8, is one line of valid UTF-8 in the coordinator's log.
TEST_F(Service, AModelNameWithANewlineIsOneLogLine) {
  log_format_ = "text";  // the format a forged line would pass for
  start_coordinator();
  const fs::path model = write_model(dir_, "relu", 64, {"Relu"});
  wire::Envelope e;
  wire::Submit& s = *e.mutable_submit();
  s.set_model_name("evil.onnx\n2026-01-01T00:00:00.000Z INFO coordinator: FORGED worker joined\r");
  wire::ModelFile& f = *s.add_files();
  f.set_path("relu.onnx");
  f.set_data(read_file(model, "model file"));
  s.set_device("h100");  // no such worker: the job waits, and says so in the log
  const int64_t job = request(std::move(e)).job().job_id();
  ASSERT_GT(job, 0);
  wait_for([&] { return coordinator_->log().find("FORGED") != std::string::npos; }, "the model's name in the log");
  std::istringstream log(coordinator_->log());
  int lines = 0;
  for (std::string line; std::getline(log, line);) {
    if (line.find("FORGED") == std::string::npos) continue;
    ++lines;
    EXPECT_EQ(line.rfind("2026-01-01", 0), std::string::npos) << line;
    EXPECT_NE(line.find("evil.onnx\\n2026-01-01T00:00:00.000Z INFO coordinator: FORGED worker joined\\r"),
              std::string::npos) << line;
  }
  EXPECT_GE(lines, 1);
}

}  // namespace
}  // namespace fusetune
