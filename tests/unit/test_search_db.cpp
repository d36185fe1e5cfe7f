// The search database on real SQLite files: records and best plans, failures kept, export/import
// merging without duplicates, refusal of foreign files, and no committed record lost when the
// writing process is killed with SIGKILL mid-stream.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "storage/search_db.h"

namespace fusetune::storage {
namespace {

namespace fs = std::filesystem;

class SearchDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fusetune_db_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static Measurement m(const std::string& config, double us, Status st = Status::kOk) {
    Measurement x;
    x.signature = "v1:abc";
    x.device = {"h100", "sm_90"};
    x.codegen_version = 1;
    x.config = config;
    x.source_digest = "digest-" + config;
    x.status = st;
    x.median_us = x.min_us = x.max_us = us;
    x.repeats = 10;
    x.worker = "w1";
    return x;
  }
  fs::path dir_;
};

TEST_F(SearchDbTest, KeepsEveryMeasurementAndTheBestPlan) {
  SearchDb db(dir_ / "search.db");
  db.commit_workload("v1:abc", "fusetune-signature v1\n...");
  db.record(m("tile=32x32", 12.0));
  db.record(m("tile=64x64", 9.5));
  db.record(m("tile=128x128", 1.0, Status::kWrongResult));  // fast but wrong: never best
  db.record(m("tile=16x16", 20.0));
  const auto best = db.best("v1:abc", {"h100", "sm_90"}, 1);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->config, "tile=64x64");
  EXPECT_DOUBLE_EQ(best->median_us, 9.5);
  EXPECT_FALSE(db.best("v1:abc", {"a100", "sm_80"}, 1).has_value());  // the device is part of the key
  EXPECT_FALSE(db.best("v1:abc", {"h100", "sm_90"}, 2).has_value());  // so is the codegen version
  EXPECT_TRUE(db.measured("v1:abc", {"h100", "sm_90"}, 1, "tile=128x128"));
  EXPECT_FALSE(db.measured("v1:abc", {"h100", "sm_90"}, 1, "tile=8x8"));
  const auto top = db.top_k("v1:abc", {"h100", "sm_90"}, 1, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].config, "tile=64x64");
  EXPECT_EQ(top[1].config, "tile=32x32");
  const DbStats s = db.stats();
  EXPECT_EQ(s.measurements, 4);
  EXPECT_EQ(s.failures, 1);
  EXPECT_EQ(s.best_plans, 1);
  EXPECT_EQ(s.workloads, 1);
}

TEST_F(SearchDbTest, ExportImportMergesWithoutDuplicates) {
  {
    SearchDb a(dir_ / "a.db");
    a.commit_workload("v1:abc", "form");
    a.record(m("tile=32x32", 12.0));
    a.record(m("tile=64x64", 9.5));
    EXPECT_EQ(a.export_to(dir_ / "a.jsonl"), 3);
  }
  SearchDb b(dir_ / "b.db");
  b.record(m("tile=8x8", 30.0));
  EXPECT_EQ(b.import_from(dir_ / "a.jsonl"), 3);
  EXPECT_EQ(b.import_from(dir_ / "a.jsonl"), 0);  // merging twice adds nothing
  EXPECT_EQ(b.stats().measurements, 3);
  EXPECT_EQ(b.best("v1:abc", {"h100", "sm_90"}, 1)->config, "tile=64x64");
  std::ofstream(dir_ / "bad.jsonl") << "{\"type\": \"measurement\", \"signature\": \"x\"}\n";
  try {
    b.import_from(dir_ / "bad.jsonl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.stats().measurements, 3);  // nothing lost
}

TEST_F(SearchDbTest, RefusesFilesThatAreNotSearchDatabases) {
  std::ofstream(dir_ / "notes.db") << "these are notes, not a database, and they are long enough to have a header";
  try {
    SearchDb db(dir_ / "notes.db");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("notes.db"), std::string::npos) << e.what();
  }
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "other.db").c_str(), &other), SQLITE_OK);
  sqlite3_exec(other, "CREATE TABLE t(x); INSERT INTO t VALUES(1);", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  EXPECT_THROW(SearchDb((dir_ / "other.db")), Error);
}

TEST_F(SearchDbTest, SigkillLosesNoCommittedRecord) {
  const fs::path file = dir_ / "search.db";
  { SearchDb init(file); }
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the writer: report each committed record's count, forever
    close(fds[0]);
    SearchDb db(file);
    for (int64_t i = 1;; ++i) {
      db.record(m("tile=" + std::to_string(i), static_cast<double>(i)));
      if (write(fds[1], &i, sizeof i) != sizeof i) _exit(1);
    }
  }
  close(fds[1]);
  int64_t committed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (committed < 300 && std::chrono::steady_clock::now() < deadline) {
    int64_t n = 0;
    if (read(fds[0], &n, sizeof n) != sizeof n) break;
    committed = n;
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_GT(committed, 0);
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &q, nullptr);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(q, 0)), "ok");
  sqlite3_finalize(q);
  sqlite3_close(raw);
  SearchDb after(file);
  EXPECT_GE(after.stats().measurements, committed);
  EXPECT_TRUE(after.measured("v1:abc", {"h100", "sm_90"}, 1, "tile=" + std::to_string(committed)));
  EXPECT_EQ(after.best("v1:abc", {"h100", "sm_90"}, 1)->config, "tile=1");
}

}  // namespace
}  // namespace fusetune::storage
