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
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "coordinator/client.h"
#include "core/error.h"
#include "core/files.h"
#include "onnx_builder.h"
#include "proto/curve.h"
#include "proto/wire.h"
#include "storage/search_db.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;

// A child process running the fusetune executable, its stderr kept in a log file.
class Process {
 public:
  Process(const std::vector<std::string>& args, const fs::path& log) : log_(log) {
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
      ::execv(FUSETUNE_BINARY, argv.data());
      ::_exit(127);
    }
  }
  ~Process() {
    if (pid_ > 0) kill(SIGKILL);
  }
  int kill(int sig) {
    ::kill(pid_, sig);
    return wait();
  }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
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
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(free_port());
  }
  void TearDown() override {
    workers_.clear();
    coordinator_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  void start_coordinator(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"coordinator", "--listen", endpoint_, "--db", db_.string(), "--worker-timeout-ms",
                                     "1500", "--heartbeat-ms", "250"};
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ = std::make_unique<Process>(args, dir_ / "coordinator.log");
  }
  Process& start_worker(const std::string& id, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"worker", "--coordinator", endpoint_, "--device", "host", "--compile-jobs", "1", "--id", id};
    args.insert(args.end(), extra.begin(), extra.end());
    workers_.push_back(std::make_unique<Process>(args, dir_ / (id + ".log")));
    return *workers_.back();
  }
  wire::Envelope request(wire::Envelope e) {
    coordinator::Client client(context_, endpoint_, 60000, security_);
    return client.request(std::move(e));
  }
  int64_t submit(const fs::path& model, int candidates = 2, const std::string& device = "host",
                 const std::string& timing = R"("min_repeats": 2, "max_repeats": 3, "min_time_ms": 0.1)") {
    wire::Envelope e;
    wire::Submit& s = *e.mutable_submit();
    s.set_model_name(model.filename().string());
    wire::ModelFile& f = *s.add_files();
    f.set_path(model.filename().string());
    f.set_data(read_file(model, "model file"));
    s.set_device(device);
    s.set_options(R"({"candidates": )" + std::to_string(candidates) + ", " + timing + "}");
    return request(std::move(e)).job().job_id();
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
  // Every task of the job done, and each measured exactly once per candidate it carries.
  void expect_complete_without_duplicates(int64_t job) {
    storage::SearchDb db(db_);
    for (const storage::TaskRecord& t : db.job_tasks(job)) {
      EXPECT_EQ(t.state, storage::TaskState::kDone) << "task " << t.id << ": " << t.error;
      wire::Task payload;
      ASSERT_TRUE(payload.ParseFromString(t.payload));
      for (const wire::Candidate& c : payload.candidates()) {
        int rows = 0;
        for (const storage::Measurement& m : db.top_k(t.signature, t.device, t.codegen_version, 1000)) rows += m.config == c.config();
        EXPECT_LE(rows, 1) << "candidate " << c.config() << " of task " << t.id << " measured " << rows << " times";
        EXPECT_TRUE(db.measured(t.signature, t.device, t.codegen_version, c.config())) << c.config();
      }
    }
  }

  fs::path dir_;
  fs::path db_;
  std::string endpoint_;
  zmq::context_t context_;
  wire::ClientSecurity security_;  // this test's client keys, when the coordinator uses CURVE
  std::unique_ptr<Process> coordinator_;
  std::vector<std::unique_ptr<Process>> workers_;
};

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
  EXPECT_NE(coordinator_->log().find("unfinished jobs resumed"), std::string::npos);
  expect_complete_without_duplicates(job);
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
  start_worker("w1");
  start_worker("w2");
  // Ten models, five jobs each; the Relu/Sigmoid ops recur across models of the same width.
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
  wait_for([&] {
    for (int64_t j : jobs) {
      if (status(j).state() != "done") return false;
    }
    return true;
  }, "50 jobs");
  storage::SearchDb db(db_);
  std::set<int64_t> a, b;
  for (const auto& t : db.job_tasks(jobs[0])) a.insert(t.id);
  for (const auto& t : db.job_tasks(jobs[1])) b.insert(t.id);  // the same width, one more op
  std::vector<int64_t> common;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
  EXPECT_FALSE(common.empty()) << "models m0 and m1 share the Relu and Sigmoid blocks but no task";
  // Repeats of a model are answered by the database or share the first job's tasks.
  for (size_t k = models.size(); k < jobs.size(); ++k) {
    for (const auto& t : db.job_tasks(jobs[k])) {
      std::set<int64_t> first;
      for (const auto& f : db.job_tasks(jobs[k % models.size()])) first.insert(f.id);
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
  const storage::DbStats stats = db.stats();
  EXPECT_GT(stats.candidates, 0);
  EXPECT_EQ(stats.failures, stats.measurements);
  EXPECT_EQ(stats.measurements, storage::kMaxTransientFailures * stats.candidates) << coordinator_->log();
  EXPECT_NE(coordinator_->log().find("candidates not settled"), std::string::npos) << coordinator_->log();
  for (const storage::TaskRecord& t : db.job_tasks(job)) EXPECT_EQ(t.state, storage::TaskState::kDone) << t.error;
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
  wait_for([&] { return storage::SearchDb(db_).task_ids_in_state(storage::TaskState::kLeased).size() == 1; }, "a lease");
  EXPECT_EQ(w1.kill(SIGKILL), 128 + SIGKILL);
  wait_for([&] { return status(first).state() == "done" && status(second).state() == "done"; }, "both jobs to finish");
  for (int64_t job : {first, second}) {
    const wire::JobStatus s = status(job);
    EXPECT_EQ(s.tasks_failed(), 1) << s.error();
    EXPECT_NE(s.error().find("1 tasks failed"), std::string::npos) << s.error();
  }
  storage::SearchDb db(db_);
  const std::vector<storage::TaskRecord> tasks = db.job_tasks(first);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].state, storage::TaskState::kFailed);
  EXPECT_EQ(tasks[0].attempts, 1);
  EXPECT_NE(tasks[0].error.find("after 1 attempts"), std::string::npos) << tasks[0].error;
  EXPECT_NE(coordinator_->log().find("went silent"), std::string::npos) << coordinator_->log();
}

TEST_F(Service, ASigtermedWorkerHandsItsLeaseBackAndTasksGoOnlyToMatchingDevices) {
  start_coordinator();
  const int64_t gpu_job = submit(bundled_model("cnn_small"), 1, "h100");  // no H100 worker: never dispatched
  Process& w1 = start_worker("w1");
  // Slow timing (0.8 s per candidate), so w1 is surely inside a task when it is told to stop.
  const int64_t job = submit(write_model(dir_, "chain", 48, {"Relu", "Sigmoid", "Tanh"}), 2, "host",
                             R"("min_repeats": 2, "max_repeats": 100000, "min_time_ms": 800)");
  storage::SearchDb db(db_);
  wait_for([&] { return !db.tasks_in_state(storage::TaskState::kLeased).empty(); }, "a lease");
  const int64_t leased = db.tasks_in_state(storage::TaskState::kLeased).at(0).id;
  EXPECT_EQ(w1.kill(SIGTERM), 0) << w1.log();
  wait_for([&] { return db.task(leased)->state == storage::TaskState::kQueued; }, "the lease handed back");
  EXPECT_NE(coordinator_->log().find("handed back by w1"), std::string::npos) << coordinator_->log();
  EXPECT_NE(w1.log().find("abandoned"), std::string::npos) << w1.log();
  start_worker("w2");
  wait_for([&] { return status(job).state() == "done"; }, "the job on the second worker");
  expect_complete_without_duplicates(job);
  EXPECT_EQ(status(gpu_job).state(), "running");
  for (const storage::TaskRecord& t : db.job_tasks(gpu_job)) {
    EXPECT_EQ(t.state, storage::TaskState::kQueued);
    EXPECT_EQ(t.attempts, 0) << "an h100 task was leased to a host worker";
  }
}

TEST_F(Service, WithCurveKeysOnlyAllowedWorkersAndClientsAreServed) {
  const fs::path keys = dir_ / "keys", allowed = dir_ / "allowed";
  for (const char* name : {"coordinator", "good", "client", "intruder"}) {
    Process gen({"keys", "generate", name, "--out", keys.string()}, dir_ / "keys.log");
    ASSERT_EQ(gen.wait(), 0) << gen.log();
  }
  fs::create_directories(allowed);
  fs::copy_file(keys / "good.pub", allowed / "good.pub");
  fs::copy_file(keys / "client.pub", allowed / "client.pub");
  start_coordinator({"--key", (keys / "coordinator.key").string(), "--allow", allowed.string()});
  Process& intruder = start_worker("intruder", {"--key", (keys / "intruder.key").string(), "--coordinator-key",
                                                (keys / "coordinator.pub").string()});
  EXPECT_EQ(intruder.wait(), 3) << intruder.log();  // refused at the handshake, and says why
  EXPECT_NE(intruder.log().find("CURVE handshake failed"), std::string::npos) << intruder.log();
  EXPECT_NE(coordinator_->log().find("not among the allowed public keys"), std::string::npos) << coordinator_->log();
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
}

}  // namespace
}  // namespace fusetune
