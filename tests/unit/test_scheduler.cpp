// The scheduler alone (coordinator/scheduler.h), on a real search database, with a clock the test
// moves (core/clock.h): a lease ends at its deadline and its task fails at the attempt limit, a
// silent worker's lease goes back, and a worker that hands everything back is offered its next
// task only after its backoff. Nothing here waits for wall time.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.h"
#include "coordinator/scheduler.h"
#include "core/clock.h"
#include "proto/wire.h"
#include "storage/job_queue.h"
#include "storage/search_db.h"
#include "unit/manual_clock.h"
#include "unit/test_dir.h"

namespace fusetune {
namespace {

using std::chrono::milliseconds;

using testing::ManualClock;

// What the scheduler sends, kept in order.
class Recorder : public coordinator::Outbox {
 public:
  void send(const std::string& identity, wire::Envelope e) override { sent.emplace_back(identity, std::move(e)); }
  // The tasks leased to `identity` since the last call.
  std::vector<wire::Task> take_tasks(const std::string& identity) {
    std::vector<wire::Task> out;
    for (const auto& [peer, e] : sent) {
      if (peer == identity && e.has_task()) out.push_back(e.task());
    }
    sent.clear();
    return out;
  }
  std::vector<std::pair<std::string, wire::Envelope>> sent;
};

class SchedulerTest : public ::testing::Test {
 protected:
  static constexpr int kTimeoutMs = 1500;  // a worker unheard for this long is gone
  static constexpr int kMaxAttempts = 2;

  SchedulerTest()
      : dir_("scheduler"), db_(dir_ / "search.db"), queue_(db_), log_([](const std::string&) {}),
        scheduler_(queue_, out_, {"test", 250, kTimeoutMs, kMaxAttempts}, log_,
                   {[this] { return std::vector<std::pair<int64_t, storage::DeviceKey>>{{job_, worker_device_}}; },
                    [this](int64_t task) { settled_.push_back(task); }, [](const std::string&) {}, [] {}},
                   clock_) {
    queue_.put_model("sha256:model", "model.onnx", {{"model.onnx", "model bytes"}});
    storage::JobRecord j;
    j.model_digest = "sha256:model";
    j.model_name = "model.onnx";
    j.device = worker_device_.device_class();
    j.identity = worker_device_;
    job_ = queue_.create_job(j);
    wire::Task payload;
    payload.set_signature("v1:relu");
    payload.mutable_policy()->set_timeout_ms(1000);
    wire::Candidate& c = *payload.add_candidates();
    c.set_config("tile=128");
    c.set_source_digest("sha256:source");
    task_ = queue_.ensure_task("v1:relu", worker_device_, codegen::kCodegenVersion, payload.SerializeAsString());
    queue_.link_job_task(job_, task_);
  }

  void hello(const std::string& identity) {
    wire::Hello h;
    h.set_worker_id(identity);
    h.set_min_version(wire::kMinProtocolVersion);
    h.set_max_version(wire::kProtocolVersion);
    h.set_codegen_version(codegen::kCodegenVersion);
    h.mutable_device()->set_name(worker_device_.name);
    h.mutable_device()->set_arch(worker_device_.arch);
    h.mutable_device()->set_toolkit(worker_device_.toolkit);
    scheduler_.on_hello(identity, h, wire::kProtocolVersion);
    ASSERT_FALSE(out_.sent.empty());
    EXPECT_TRUE(out_.sent.back().second.has_welcome());
    out_.sent.clear();
  }
  // Moves the clock, the worker heard from just before (its heartbeats), and expires what is due.
  void advance(milliseconds d, const std::string& alive = "") {
    clock_.advance(d);
    if (!alive.empty()) scheduler_.heard_from(alive);
    scheduler_.expire();
  }
  storage::TaskRecord task() { return *queue_.task(task_); }

  testing::TestDir dir_;
  storage::SearchDb db_;
  storage::JobQueue queue_;
  coordinator::EventLog log_;
  ManualClock clock_;
  Recorder out_;
  const storage::DeviceKey worker_device_{"host", "host", "", 0, "", "test toolkit"};
  int64_t job_ = 0, task_ = 0;
  std::vector<int64_t> settled_;
  coordinator::Scheduler scheduler_;
};

TEST_F(SchedulerTest, ALeaseEndsAtItsDeadlineAndItsTaskFailsAtTheAttemptLimit) {
  hello("w");
  for (int attempt = 1; attempt <= kMaxAttempts; ++attempt) {
    scheduler_.dispatch();
    const std::vector<wire::Task> leased = out_.take_tasks("w");
    ASSERT_EQ(leased.size(), 1u) << "attempt " << attempt;
    EXPECT_EQ(leased[0].task_id(), task_);
    // Compile and the reference values to their limit, plus each candidate to its timeout twice
    // over: 60 s + 300 s + 2 x 1 x 1 s.
    const int64_t left = leased[0].lease_deadline_ms() - clock_.unix_ms();
    EXPECT_EQ(left, 60000 + wire::kReferenceTimeoutMs + 2000);
    EXPECT_EQ(task().state, storage::TaskState::kLeased);
    advance(milliseconds(left), "w");  // at the deadline: still held
    EXPECT_EQ(task().state, storage::TaskState::kLeased) << "attempt " << attempt;
    EXPECT_EQ(task().attempts, attempt);
    advance(milliseconds(1), "w");  // past it
    EXPECT_EQ(scheduler_.counters().lease_expiries, static_cast<uint64_t>(attempt));
  }
  EXPECT_EQ(task().state, storage::TaskState::kFailed);
  EXPECT_EQ(settled_, std::vector<int64_t>{task_});
  EXPECT_EQ(scheduler_.size(), 1u);  // the worker itself stayed
}

TEST_F(SchedulerTest, ASilentWorkersLeaseGoesBackAndTheWorkerIsForgotten) {
  hello("w");
  scheduler_.dispatch();
  ASSERT_EQ(out_.take_tasks("w").size(), 1u);
  advance(milliseconds(kTimeoutMs - 1));  // no heartbeat, not yet silent
  EXPECT_EQ(scheduler_.size(), 1u);
  EXPECT_EQ(task().state, storage::TaskState::kLeased);
  advance(milliseconds(1));
  EXPECT_EQ(scheduler_.size(), 0u);
  EXPECT_EQ(task().state, storage::TaskState::kQueued);
  EXPECT_EQ(task().attempts, 1);
  EXPECT_TRUE(settled_.empty());
  scheduler_.dispatch();  // nobody to lease it to
  EXPECT_TRUE(out_.take_tasks("w").empty());
}

TEST_F(SchedulerTest, AWorkerThatHandsTasksBackIsOfferedTheNextAfterADoublingBackoff) {
  hello("w");
  for (const int backoff_ms : {100, 200, 400}) {
    scheduler_.dispatch();
    const std::vector<wire::Task> leased = out_.take_tasks("w");
    ASSERT_EQ(leased.size(), 1u) << "before the " << backoff_ms << " ms backoff";
    wire::TaskResult back;
    back.set_task_id(task_);
    back.set_abandoned(true);
    scheduler_.on_result("w", back);
    EXPECT_EQ(task().state, storage::TaskState::kQueued);
    EXPECT_EQ(task().attempts, 0) << "a lease handed back counts no attempt";
    scheduler_.dispatch();
    EXPECT_TRUE(out_.take_tasks("w").empty()) << "offered again at once after handing back";
    advance(milliseconds(backoff_ms - 1), "w");
    scheduler_.dispatch();
    EXPECT_TRUE(out_.take_tasks("w").empty()) << "offered again before " << backoff_ms << " ms";
    advance(milliseconds(1), "w");
  }
  scheduler_.dispatch();
  EXPECT_EQ(out_.take_tasks("w").size(), 1u);
}

}  // namespace
}  // namespace fusetune
