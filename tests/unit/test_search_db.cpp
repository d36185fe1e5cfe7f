// The search database on real SQLite files: records and best plans, failures kept, export/import
// merging without duplicates, refusal of foreign and newer files, the migration of a real version 1
// file, the tuning service's models, jobs and tasks, and no committed record lost (nor a partial
// one kept) when the writing process is killed with SIGKILL mid-stream.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "core/error.h"
#include "storage/job_queue.h"
#include "storage/search_db.h"
#include "unit/test_dir.h"

namespace fusetune::storage {
namespace {

namespace fs = std::filesystem;

// The version 1 schema exactly as the version 1 code created it: the migration's starting point.
constexpr const char* kV1Schema = R"SQL(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE workloads(signature TEXT PRIMARY KEY, canonical_form TEXT NOT NULL);
CREATE TABLE devices(id INTEGER PRIMARY KEY, name TEXT NOT NULL, arch TEXT NOT NULL, UNIQUE(name, arch));
CREATE TABLE measurements(
  id INTEGER PRIMARY KEY,
  signature TEXT NOT NULL,
  device_id INTEGER NOT NULL REFERENCES devices(id),
  codegen_version INTEGER NOT NULL,
  config TEXT NOT NULL,
  source_digest TEXT NOT NULL,
  status TEXT NOT NULL,
  median_us REAL NOT NULL, min_us REAL NOT NULL, max_us REAL NOT NULL, repeats INTEGER NOT NULL,
  registers INTEGER NOT NULL, shared_bytes INTEGER NOT NULL, spill_bytes INTEGER NOT NULL,
  compile_ms REAL NOT NULL, worker TEXT NOT NULL, detail TEXT NOT NULL, measured_at INTEGER NOT NULL);
CREATE INDEX measurements_key ON measurements(signature, device_id, codegen_version, config);
CREATE TABLE best_plans(
  signature TEXT NOT NULL, device_id INTEGER NOT NULL REFERENCES devices(id), codegen_version INTEGER NOT NULL,
  measurement_id INTEGER NOT NULL REFERENCES measurements(id), median_us REAL NOT NULL,
  PRIMARY KEY(signature, device_id, codegen_version));
INSERT INTO meta(key, value) VALUES('schema_version', '1');
)SQL";

// What version 2 added to it, as the version 2 code created it (its data-moving statements left out:
// they have nothing to move in a file made at version 1 for a test).
constexpr const char* kV2Additions = R"SQL(
CREATE TABLE candidates(
  id INTEGER PRIMARY KEY, signature TEXT NOT NULL, codegen_version INTEGER NOT NULL, config TEXT NOT NULL,
  source_digest TEXT NOT NULL, UNIQUE(signature, codegen_version, config, source_digest));
ALTER TABLE measurements ADD COLUMN candidate_id INTEGER REFERENCES candidates(id);
CREATE INDEX measurements_candidate ON measurements(candidate_id);
CREATE TABLE models(digest TEXT PRIMARY KEY, name TEXT NOT NULL, bytes BLOB NOT NULL);
CREATE TABLE jobs(
  id INTEGER PRIMARY KEY, model_digest TEXT NOT NULL REFERENCES models(digest), model_name TEXT NOT NULL,
  device_id INTEGER NOT NULL REFERENCES devices(id), options TEXT NOT NULL, state TEXT NOT NULL,
  error TEXT NOT NULL, created_at INTEGER NOT NULL, finished_at INTEGER NOT NULL, summary TEXT NOT NULL);
CREATE INDEX jobs_state ON jobs(state);
CREATE TABLE tasks(
  id INTEGER PRIMARY KEY, signature TEXT NOT NULL, device_id INTEGER NOT NULL REFERENCES devices(id),
  codegen_version INTEGER NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL, worker TEXT NOT NULL,
  lease_deadline_ms INTEGER NOT NULL, payload BLOB NOT NULL, error TEXT NOT NULL,
  UNIQUE(signature, device_id, codegen_version));
CREATE INDEX tasks_state ON tasks(state);
CREATE TABLE job_tasks(
  job_id INTEGER NOT NULL REFERENCES jobs(id), task_id INTEGER NOT NULL REFERENCES tasks(id),
  PRIMARY KEY(job_id, task_id)) WITHOUT ROWID;
CREATE INDEX job_tasks_task ON job_tasks(task_id);
UPDATE meta SET value='2' WHERE key='schema_version';
)SQL";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Raw SQLite access, independent of SearchDb.
class RawDb {
 public:
  explicit RawDb(const fs::path& file) {
    if (sqlite3_open(file.c_str(), &db_) != SQLITE_OK) throw std::runtime_error("cannot open " + file.string());
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;
  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string msg = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error(msg);
    }
  }
  // The first column of the first row, as text ("" when there is no row).
  std::string value(const std::string& sql) {
    sqlite3_stmt* q = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &q, nullptr) != SQLITE_OK) throw std::runtime_error(sqlite3_errmsg(db_));
    std::string out;
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0)) out = reinterpret_cast<const char*>(sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    return out;
  }
  int64_t count(const std::string& sql) { return std::stoll(value(sql)); }

 private:
  sqlite3* db_ = nullptr;
};

class SearchDbTest : public ::testing::Test {
 protected:
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
  // A stored model and a job for it on the h100.
  static int64_t new_job(JobQueue& queue, const std::string& digest = "sha256:model") {
    queue.put_model(digest, "model.onnx", {{"model.onnx", "model bytes"}});
    JobRecord j;
    j.model_digest = digest;
    j.model_name = "model.onnx";
    j.device = {"h100", "sm_90"};
    j.options = R"({"top_k": 4})";
    return queue.create_job(j);
  }
  // A measurement that belongs to the task of this signature on the h100, codegen 1.
  static Measurement for_sig(const std::string& signature, const std::string& config, double us,
                             Status st = Status::kOk) {
    Measurement x = m(config, us, st);
    x.signature = signature;
    return x;
  }
  const fusetune::testing::TestDir tmp_{"db"};
  const fs::path dir_ = tmp_.path();
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
  EXPECT_EQ(b.stats().candidates, 3);
  b.record(m("tile=64x64", 9.0));  // the same candidate measured again shares its candidate row
  EXPECT_EQ(b.stats().candidates, 3);
  EXPECT_EQ(b.stats().measurements, 4);
  {
    RawDb raw(dir_ / "b.db");
    EXPECT_EQ(raw.count("SELECT count(*) FROM measurements m JOIN candidates c ON c.id=m.candidate_id AND "
                        "c.config=m.config AND c.source_digest=m.source_digest"),
              4);
  }
  EXPECT_EQ(b.best("v1:abc", {"h100", "sm_90"}, 1)->config, "tile=64x64");
  std::ofstream(dir_ / "bad.jsonl") << "{\"type\": \"measurement\", \"signature\": \"x\"}\n";
  try {
    b.import_from(dir_ / "bad.jsonl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.stats().measurements, 4);  // nothing lost
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

TEST_F(SearchDbTest, MigratesAVersion1FileKeepingEveryRow) {
  const fs::path file = dir_ / "v1.db";
  {
    RawDb raw(file);
    raw.exec(kV1Schema);
    raw.exec(R"SQL(
INSERT INTO workloads VALUES('v1:abc', 'form');
INSERT INTO devices VALUES(1, 'h100', 'sm_90');
INSERT INTO devices VALUES(2, 'a100', 'sm_80');
INSERT INTO measurements VALUES(1, 'v1:abc', 1, 1, 'tile=32', 'd32', 'ok', 12, 11, 13, 10, 64, 4096, 0, 3.5, 'w1', '', 1000);
INSERT INTO measurements VALUES(2, 'v1:abc', 1, 1, 'tile=64', 'd64', 'ok', 9, 8, 10, 10, 96, 8192, 0, 4.5, 'w1', '', 1001);
INSERT INTO measurements VALUES(3, 'v1:abc', 2, 1, 'tile=64', 'd64', 'ok', 15, 14, 16, 10, 96, 8192, 0, 4.0, 'w2', '', 1002);
INSERT INTO measurements VALUES(4, 'v1:abc', 1, 1, 'tile=128', 'd128', 'compile_error', 0, 0, 0, 0, 0, 0, 0, 1.0, 'w1', 'too big', 1003);
INSERT INTO measurements VALUES(5, 'v1:abc', 1, 2, 'tile=64', 'd64-cg2', 'ok', 8, 8, 8, 10, 96, 8192, 0, 4.5, 'w1', '', 1004);
INSERT INTO best_plans VALUES('v1:abc', 1, 1, 2, 9);
INSERT INTO best_plans VALUES('v1:abc', 2, 1, 3, 15);
INSERT INTO best_plans VALUES('v1:abc', 1, 2, 5, 8);
)SQL");
  }
  {
    SearchDb db(file);
    const DbStats s = db.stats();
    EXPECT_EQ(s.schema_version, kSchemaVersion);
    EXPECT_EQ(s.workloads, 1);
    EXPECT_EQ(s.devices, 2);
    EXPECT_EQ(s.measurements, 5);
    EXPECT_EQ(s.failures, 1);
    EXPECT_EQ(s.best_plans, 3);
    // (signature, codegen, config, digest): tile=64 on two devices is one candidate.
    EXPECT_EQ(s.candidates, 4);
    EXPECT_EQ(JobQueue(db).stats().jobs, 0);
    EXPECT_EQ(JobQueue(db).stats().tasks, 0);
    EXPECT_EQ(db.best("v1:abc", {"h100", "sm_90"}, 1)->config, "tile=64");
    EXPECT_EQ(db.best("v1:abc", {"a100", "sm_80"}, 1)->median_us, 15);
    EXPECT_TRUE(db.measured("v1:abc", {"h100", "sm_90"}, 1, "tile=128"));
    const auto top = db.top_k("v1:abc", {"h100", "sm_90"}, 1, 5);
    ASSERT_EQ(top.size(), 2u);
    EXPECT_EQ(top[1].config, "tile=32");
    EXPECT_EQ(top[1].registers, 64);
    EXPECT_EQ(top[1].measured_at, 1000);
  }
  RawDb raw(file);
  EXPECT_EQ(raw.value("SELECT value FROM meta WHERE key='schema_version'"), std::to_string(kSchemaVersion));
  EXPECT_EQ(raw.count("SELECT count(*) FROM measurements WHERE candidate_id IS NULL"), 0);
  EXPECT_EQ(raw.count("SELECT count(*) FROM measurements m JOIN candidates c ON c.id=m.candidate_id AND "
                      "c.signature=m.signature AND c.codegen_version=m.codegen_version AND c.config=m.config AND "
                      "c.source_digest=m.source_digest"),
            5);
  EXPECT_EQ(raw.value("SELECT group_concat(candidate_id) FROM (SELECT candidate_id FROM measurements ORDER BY id)"),
            "1,2,2,3,4");  // first-measured order
  const std::string schema_before = raw.value("SELECT group_concat(sql, ';') FROM sqlite_master");
  {
    SearchDb again(file);  // reopening is a no-op
    EXPECT_EQ(again.stats().candidates, 4);
    EXPECT_EQ(again.stats().measurements, 5);
    Measurement same = for_sig("v1:abc", "tile=32", 11.0);  // a migrated candidate measured again
    same.source_digest = "d32";
    again.record(same);
    EXPECT_EQ(again.stats().candidates, 4);
  }
  EXPECT_EQ(raw.value("SELECT group_concat(sql, ';') FROM sqlite_master"), schema_before);
  EXPECT_EQ(raw.value("SELECT candidate_id FROM measurements WHERE id=6"), "1");
}

// Version 2 keyed devices by (name, arch): its rows become identities of unknown product, driver
// and toolkit, kept with their ids, which no worker's identity matches but which seed rankings;
// a done job keeps its tasks and exports from those rows; an unfinished one goes back to the
// queue without tasks (they were keyed by the device class).
TEST_F(SearchDbTest, MigratesAVersion2FileIntoDeviceIdentities) {
  const fs::path file = dir_ / "v2.db";
  {
    RawDb raw(file);
    raw.exec(kV1Schema);
    raw.exec(kV2Additions);
    raw.exec(R"SQL(
INSERT INTO workloads VALUES('v1:abc', 'form');
INSERT INTO devices VALUES(7, 'h100', 'sm_90');
INSERT INTO candidates VALUES(1, 'v1:abc', 1, 'tile=32', 'd32');
INSERT INTO candidates VALUES(2, 'v1:abc', 1, 'tile=64', 'd64');
INSERT INTO measurements VALUES(1, 'v1:abc', 7, 1, 'tile=32', 'd32', 'ok', 12, 11, 13, 10, 64, 4096, 0, 3.5, 'w1', '', 1000, 1);
INSERT INTO measurements VALUES(2, 'v1:abc', 7, 1, 'tile=64', 'd64', 'ok', 9, 8, 10, 10, 96, 8192, 0, 4.5, 'w1', '', 1001, 2);
INSERT INTO best_plans VALUES('v1:abc', 7, 1, 2, 9);
INSERT INTO models VALUES('sha256:m', 'model.onnx', x'00');
INSERT INTO jobs VALUES(1, 'sha256:m', 'model.onnx', 7, '{}', 'done', '', 10, 20, '{"groups": 1}');
INSERT INTO jobs VALUES(2, 'sha256:m', 'model.onnx', 7, '{}', 'running', '', 30, 0, '{"cache_hits": 0}');
INSERT INTO tasks VALUES(1, 'v1:abc', 7, 1, 'done', 1, 'w1', 0, x'01', '');
INSERT INTO tasks VALUES(2, 'v1:def', 7, 1, 'leased', 1, 'w1', 99, x'02', '');
INSERT INTO job_tasks VALUES(1, 1);
INSERT INTO job_tasks VALUES(2, 1);
INSERT INTO job_tasks VALUES(2, 2);
)SQL");
  }
  SearchDb db(file);
  JobQueue queue(db);
  const DbStats s = db.stats();
  EXPECT_EQ(s.schema_version, kSchemaVersion);
  EXPECT_EQ(s.measurements, 2);
  EXPECT_EQ(s.best_plans, 1);
  ASSERT_EQ(s.identities.size(), 1u);
  EXPECT_EQ(s.identities[0].device, DeviceKey("h100", "sm_90"));  // identity fields unknown
  EXPECT_EQ(s.identities[0].measurements, 2);
  const DeviceKey now("h100", "sm_90", "NVIDIA H100 80GB HBM3", 90, "12.8", "nvrtc 13.0");
  EXPECT_FALSE(db.measured("v1:abc", now, 1, "tile=64"));  // answers no identity but its own
  EXPECT_FALSE(db.best("v1:abc", now, 1).has_value());
  const auto seeds = db.near_top_k("v1:abc", now, 1, 5);  // but seeds
  ASSERT_EQ(seeds.size(), 2u);
  EXPECT_EQ(seeds[0].config, "tile=64");
  EXPECT_EQ(db.best("v1:abc", {"h100", "sm_90"}, 1)->config, "tile=64");  // the done job's export reads these
  const auto done = queue.job(1), running = queue.job(2);
  EXPECT_EQ(done->state, JobState::kDone);
  EXPECT_EQ(done->summary, R"({"groups": 1})");
  EXPECT_FALSE(done->identity.has_value());
  EXPECT_EQ(queue.job_tasks(1).size(), 1u);
  EXPECT_EQ(running->state, JobState::kQueued);
  EXPECT_FALSE(running->identity.has_value());
  EXPECT_TRUE(queue.job_tasks(2).empty());
  EXPECT_FALSE(queue.task(2).has_value());  // the leased task, keyed by the class, is gone
  EXPECT_TRUE(queue.task(1).has_value());   // the done one stays (job 1's)
  EXPECT_EQ(queue.bind_job(2, now), now);
  EXPECT_EQ(queue.job(2)->identity, now);
  EXPECT_EQ(queue.bind_job(2, DeviceKey("h100", "sm_90", "other", 90, "13.0", "nvrtc 13.1")), now);  // bound once
  EXPECT_THROW(queue.bind_job(1, DeviceKey("a100", "sm_80", "NVIDIA A100", 80, "12.8", "nvrtc 13.0")), Error);
  RawDb raw(file);
  EXPECT_EQ(raw.value("SELECT id FROM devices WHERE name='h100' AND product=''"), "7");  // ids kept
  EXPECT_EQ(raw.count("SELECT count(*) FROM measurements WHERE device_id=7"), 2);
}

// Measurements under one identity answer only it; the others of the class see them as near.
TEST_F(SearchDbTest, AnIdentityIsTheWholeKeyAndNearIdentitiesOnlySeed) {
  SearchDb db(dir_ / "search.db");
  const DeviceKey a("h100", "sm_90", "NVIDIA H100 80GB HBM3", 90, "12.8", "nvrtc 13.0");
  DeviceKey b = a;
  b.driver = "13.0";
  const DeviceKey other_class("a100", "sm_80", "NVIDIA A100-SXM4-80GB", 80, "12.8", "nvrtc 13.0");
  for (const auto& [dev, cfg, us] : {std::tuple{a, "tile=32", 10.0}, {a, "tile=64", 8.0}, {b, "tile=16", 5.0},
                                     {other_class, "tile=8", 1.0}}) {
    Measurement x = m(cfg, us);
    x.device = dev;
    db.record(x);
  }
  EXPECT_TRUE(db.measured("v1:abc", a, 1, "tile=32"));
  EXPECT_FALSE(db.measured("v1:abc", b, 1, "tile=32"));
  EXPECT_EQ(db.best("v1:abc", a, 1)->config, "tile=64");
  EXPECT_EQ(db.best("v1:abc", b, 1)->config, "tile=16");
  ASSERT_EQ(db.top_k("v1:abc", a, 1, 10).size(), 2u);
  EXPECT_EQ(db.top_k("v1:abc", a, 1, 10)[0].device, a);  // read back whole
  const auto near_a = db.near_top_k("v1:abc", a, 1, 10);
  ASSERT_EQ(near_a.size(), 1u);  // b's, not a's own nor the a100's
  EXPECT_EQ(near_a[0].config, "tile=16");
  EXPECT_EQ(near_a[0].device, b);
  EXPECT_EQ(db.near_top_k("v1:abc", b, 1, 10).size(), 2u);
  const DbStats s = db.stats();
  EXPECT_EQ(s.devices, 3);
  ASSERT_EQ(s.identities.size(), 3u);
  EXPECT_EQ(s.identities[0].device, other_class);  // ordered by name first
  // The export carries identities whole; importing it elsewhere keeps them apart.
  const fs::path file = dir_ / "export.jsonl";
  EXPECT_EQ(db.export_to(file), 4);
  SearchDb copy(dir_ / "copy.db");
  EXPECT_EQ(copy.import_from(file), 4);
  EXPECT_EQ(copy.best("v1:abc", b, 1)->config, "tile=16");
  EXPECT_EQ(copy.best("v1:abc", a, 1)->config, "tile=64");
  EXPECT_EQ(copy.import_from(file), 0);  // merging again adds nothing
}

TEST_F(SearchDbTest, AnExportNamesItsFormatAndANewerFormatIsRefused) {
  SearchDb db(dir_ / "search.db");
  db.record(m("tile=32", 3.0));
  const fs::path file = dir_ / "export.jsonl";
  db.export_to(file);
  std::ifstream in(file);
  std::string header;
  std::getline(in, header);
  EXPECT_NE(header.find(R"("type":"header")"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("fusetune_version":")"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("schema_version":)" + std::to_string(kSchemaVersion)), std::string::npos) << header;
  const fs::path future = dir_ / "future.jsonl";
  std::ofstream(future) << R"({"type":"header","format":"fusetune search export","format_version":99,"fusetune_version":"9.0"})"
                        << "\n";
  try {
    SearchDb(dir_ / "other.db").import_from(future);
    FAIL();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("future.jsonl:1"), std::string::npos) << what;
    EXPECT_NE(what.find("format version 99 (written by fusetune 9.0)"), std::string::npos) << what;
  }
  // A file of format 1 (no header, no identity fields) still imports, under the device class.
  const fs::path old = dir_ / "old.jsonl";
  std::ofstream(old) << R"({"type":"measurement","signature":"v1:x","device":"h100","arch":"sm_90","codegen_version":1,)"
                     << R"("config":"tile=8","source_digest":"d","status":"ok","median_us":2.0,"min_us":2.0,"max_us":2.0,)"
                     << R"("repeats":3,"registers":0,"shared_bytes":0,"spill_bytes":0,"compile_ms":1.0,"worker":"w",)"
                     << R"("detail":"","measured_at":5})" << "\n";
  SearchDb other(dir_ / "other.db");
  EXPECT_EQ(other.import_from(old), 1);
  EXPECT_EQ(other.best("v1:x", {"h100", "sm_90"}, 1)->config, "tile=8");
}

// gc drops the payloads of done tasks no unfinished job links, never a measurement, job or model;
// vacuum gives the pages back; a task cleared by gc takes a new payload when a job needs it again.
TEST_F(SearchDbTest, GcClearsFinishedTaskPayloadsAndVacuumShrinksTheFile) {
  const fs::path file = dir_ / "search.db";
  SearchDb db(file);
  JobQueue queue(db);
  const int64_t finished = new_job(queue), running = new_job(queue);
  const std::string big(2 << 20, 'w');  // a task's payload: the group's constants
  const DeviceKey h100{"h100", "sm_90"};
  const int64_t t1 = queue.ensure_task("v1:one", h100, 1, big);
  const int64_t t2 = queue.ensure_task("v1:two", h100, 1, big);
  const int64_t t3 = queue.ensure_task("v1:three", h100, 1, big);
  queue.link_job_task(finished, t1);
  queue.link_job_task(running, t2);
  queue.link_job_task(running, t3);
  for (int64_t t : {t1, t2}) {
    queue.lease_task(t, "w1", 1);
    queue.finish_task(t, TaskState::kDone, "", {for_sig(t == t1 ? "v1:one" : "v1:two", "tile=8", 2.0)});
  }
  queue.set_job_state(finished, JobState::kDone, "", R"({"groups": 1})");
  queue.set_job_state(running, JobState::kRunning);
  const int64_t before = db.file().size_bytes();
  EXPECT_GE(queue.stats().payload_bytes, 3 * static_cast<int64_t>(big.size()));
  const GcResult r = queue.gc();
  EXPECT_EQ(r.tasks_cleared, 1);  // t2 is done but a running job links it; t3 is queued
  EXPECT_EQ(r.bytes_cleared, static_cast<int64_t>(big.size()));
  EXPECT_EQ(queue.task(t1)->payload, "");
  EXPECT_EQ(queue.task(t1)->state, TaskState::kDone);
  EXPECT_EQ(queue.task(t2)->payload, big);
  EXPECT_EQ(queue.task(t3)->payload, big);
  EXPECT_EQ(queue.gc().tasks_cleared, 0);  // nothing left to clear
  EXPECT_EQ(db.stats().measurements, 2);
  EXPECT_EQ(queue.stats().jobs, 2);
  EXPECT_EQ(queue.job(finished)->summary, R"({"groups": 1})");
  EXPECT_TRUE(queue.model("sha256:model").has_value());
  db.file().vacuum();
  const int64_t after = db.file().size_bytes();
  EXPECT_LE(after, before - static_cast<int64_t>(big.size()) / 2) << before << " -> " << after;
  EXPECT_TRUE(queue.extend_task(t1, "new payload"));  // needed again: it takes a new one
  EXPECT_EQ(queue.task(t1)->payload, "new payload");
}

TEST_F(SearchDbTest, AFailedMigrationLeavesTheFileAsItWas) {
  const fs::path file = dir_ / "broken_v1.db";
  {
    RawDb raw(file);  // claims version 1 but lacks the measurements table
    raw.exec("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
             "INSERT INTO meta(key, value) VALUES('schema_version', '1');");
  }
  try {
    SearchDb db(file);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken_v1.db"), std::string::npos) << e.what();
  }
  RawDb raw(file);
  EXPECT_EQ(raw.value("SELECT value FROM meta WHERE key='schema_version'"), "1");
  EXPECT_EQ(raw.count("SELECT count(*) FROM sqlite_master WHERE name='candidates'"), 0);
}

TEST_F(SearchDbTest, RefusesANewerSchemaNamingTheFile) {
  const fs::path file = dir_ / "future.db";
  {
    SearchDb db(file);
    db.record(m("tile=32x32", 12.0));
  }
  {
    RawDb raw(file);
    raw.exec("UPDATE meta SET value='" + std::to_string(kSchemaVersion + 1) + "' WHERE key='schema_version'");
  }
  try {
    SearchDb db(file);
    FAIL();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("future.db"), std::string::npos) << what;
    EXPECT_NE(what.find("schema version " + std::to_string(kSchemaVersion + 1)), std::string::npos) << what;
  }
  RawDb raw(file);  // untouched
  EXPECT_EQ(raw.value("SELECT value FROM meta WHERE key='schema_version'"), std::to_string(kSchemaVersion + 1));
  EXPECT_EQ(raw.count("SELECT count(*) FROM measurements"), 1);
}

TEST_F(SearchDbTest, JobLifecycle) {
  const fs::path file = dir_ / "search.db";
  int64_t a = 0, b = 0;
  {
    SearchDb db(file);
    JobQueue queue(db);
    JobRecord orphan;
    orphan.model_digest = "sha256:missing";
    EXPECT_THROW(queue.create_job(orphan), Error);  // the model must be stored first
    a = new_job(queue);
    b = new_job(queue);
    EXPECT_LT(a, b);
    const auto ja = queue.job(a);
    ASSERT_TRUE(ja.has_value());
    EXPECT_EQ(ja->model_digest, "sha256:model");
    EXPECT_EQ(ja->model_name, "model.onnx");
    EXPECT_EQ(ja->device.name, "h100");
    EXPECT_EQ(ja->device.arch, "sm_90");
    EXPECT_EQ(ja->options, R"({"top_k": 4})");
    EXPECT_EQ(ja->state, JobState::kQueued);
    EXPECT_GT(ja->created_at, 0);
    EXPECT_EQ(ja->finished_at, 0);
    queue.set_job_state(a, JobState::kRunning);
    EXPECT_EQ(queue.job(a)->finished_at, 0);
    queue.set_job_state(b, JobState::kFailed, "no worker has an sm_90");
    EXPECT_FALSE(queue.job(999).has_value());
    EXPECT_THROW(queue.set_job_state(999, JobState::kDone), Error);
    EXPECT_EQ(queue.stats().jobs, 2);
    EXPECT_EQ(queue.stats().unfinished_jobs, 1);
  }
  SearchDb db(file);  // a restarted coordinator
  JobQueue queue(db);
  const auto unfinished = queue.jobs(true);
  ASSERT_EQ(unfinished.size(), 1u);
  EXPECT_EQ(unfinished[0].id, a);
  EXPECT_EQ(unfinished[0].state, JobState::kRunning);
  const auto all = queue.jobs(false);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].id, b);
  EXPECT_EQ(all[1].state, JobState::kFailed);
  EXPECT_EQ(all[1].error, "no worker has an sm_90");
  EXPECT_GT(all[1].finished_at, 0);
  queue.set_job_state(a, JobState::kDone, "", R"({"speedup": 1.7})");
  EXPECT_EQ(queue.job(a)->summary, R"({"speedup": 1.7})");
  EXPECT_GE(queue.job(a)->finished_at, queue.job(a)->created_at);
  EXPECT_TRUE(queue.jobs(true).empty());
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kFailed, JobState::kCancelled}) {
    EXPECT_EQ(job_state_from_name(job_state_name(s)), s);
  }
  EXPECT_THROW(job_state_from_name("paused"), Error);
  for (TaskState s : {TaskState::kQueued, TaskState::kLeased, TaskState::kDone, TaskState::kFailed}) {
    EXPECT_EQ(task_state_from_name(task_state_name(s)), s);
  }
  EXPECT_THROW(task_state_from_name("lost"), Error);
}

TEST_F(SearchDbTest, JobsShareTasks) {
  SearchDb db(dir_ / "search.db");
  JobQueue queue(db);
  const int64_t a = new_job(queue), b = new_job(queue);
  const DeviceKey h100{"h100", "sm_90"};
  const std::string payload("task\0payload", 12);  // binary: a serialized protobuf
  const int64_t t1 = queue.ensure_task("v1:abc", h100, 1, payload);
  const int64_t t2 = queue.ensure_task("v1:def", h100, 1, payload);
  queue.link_job_task(a, t1);
  queue.link_job_task(a, t2);
  queue.link_job_task(a, t2);  // idempotent
  EXPECT_EQ(queue.ensure_task("v1:abc", h100, 1, "other payload"), t1);  // the same key is the same task
  EXPECT_NE(queue.ensure_task("v1:abc", h100, 2, payload), t1);          // the codegen version is part of the key
  EXPECT_NE(queue.ensure_task("v1:abc", {"a100", "sm_80"}, 1, payload), t1);  // so is the device
  queue.link_job_task(b, t1);
  EXPECT_THROW(queue.link_job_task(b, 999), Error);
  EXPECT_THROW(queue.link_job_task(999, t1), Error);
  const auto ta = queue.job_tasks(a), tb = queue.job_tasks(b);
  ASSERT_EQ(ta.size(), 2u);
  ASSERT_EQ(tb.size(), 1u);
  EXPECT_EQ(ta[0].id, t1);
  EXPECT_EQ(ta[1].id, t2);
  EXPECT_EQ(tb[0].id, t1);
  EXPECT_EQ(tb[0].payload, payload);  // the existing task kept its payload
  EXPECT_EQ(tb[0].signature, "v1:abc");
  EXPECT_EQ(tb[0].device.name, "h100");
  EXPECT_EQ(tb[0].codegen_version, 1);
  EXPECT_EQ(tb[0].state, TaskState::kQueued);
  EXPECT_EQ(queue.stats().tasks, 4);
  // One result finishes the task for both jobs.
  queue.lease_task(t1, "w1", 5000);
  EXPECT_TRUE(queue.finish_task(t1, TaskState::kDone, "", {m("tile=32x32", 12.0)}));
  EXPECT_EQ(queue.job_progress(a).done, 1);
  EXPECT_EQ(queue.job_progress(b).done, 1);
  EXPECT_EQ(queue.job_progress(b).tasks, 1);
}

TEST_F(SearchDbTest, EnsureTaskRequeuesAFailedTaskAndExtendTaskADoneOne) {
  SearchDb db(dir_ / "search.db");
  JobQueue queue(db);
  const DeviceKey h100{"h100", "sm_90"};
  const int64_t t = queue.ensure_task("v1:abc", h100, 1, "old");
  queue.lease_task(t, "w1", 1000);
  EXPECT_TRUE(queue.finish_task(t, TaskState::kFailed, "worker lost the GPU", {m("tile=32x32", 0, Status::kRuntimeFault)}));
  auto failed = queue.task(t);
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->state, TaskState::kFailed);
  EXPECT_EQ(failed->error, "worker lost the GPU");
  EXPECT_EQ(failed->attempts, 1);
  EXPECT_EQ(db.stats().measurements, 1);  // a failed task's measurements are kept
  EXPECT_EQ(queue.tasks_in_state(TaskState::kFailed).size(), 1u);
  EXPECT_EQ(queue.ensure_task("v1:abc", h100, 1, "new"), t);  // a new job retries it
  const auto again = queue.task(t);
  EXPECT_EQ(again->state, TaskState::kQueued);
  EXPECT_EQ(again->payload, "new");
  EXPECT_EQ(again->attempts, 0);
  EXPECT_EQ(again->error, "");
  EXPECT_EQ(again->worker, "");
  EXPECT_TRUE(queue.tasks_in_state(TaskState::kFailed).empty());
  // A done task is not re-queued by a new job.
  queue.lease_task(t, "w2", 2000);
  EXPECT_TRUE(queue.finish_task(t, TaskState::kDone, "", {m("tile=32x32", 12.0)}));
  EXPECT_EQ(queue.ensure_task("v1:abc", h100, 1, "newer"), t);
  EXPECT_EQ(queue.task(t)->state, TaskState::kDone);
  EXPECT_EQ(queue.task(t)->payload, "new");
  EXPECT_EQ(queue.task(t)->worker, "w2");
  // A job asking for more candidates extends it: queued again with the rest, the measurements kept.
  EXPECT_TRUE(queue.extend_task(t, "the rest"));
  const auto extended = queue.task(t);
  EXPECT_EQ(extended->state, TaskState::kQueued);
  EXPECT_EQ(extended->payload, "the rest");
  EXPECT_EQ(extended->attempts, 0);
  EXPECT_EQ(extended->worker, "");
  EXPECT_EQ(db.stats().measurements, 2);
  EXPECT_FALSE(queue.extend_task(t, "twice"));  // only a done task is extended
  EXPECT_EQ(queue.task(t)->payload, "the rest");
  EXPECT_THROW(queue.extend_task(t + 100, "x"), Error);
}

TEST_F(SearchDbTest, TransientFailuresAreRetriedDeterministicOnesAreNot) {
  SearchDb db(dir_ / "search.db");
  const DeviceKey h100{"h100", "sm_90"};
  // measured() and configs_settled() state one rule: they agree on every config, every time.
  auto settled = [&](const std::string& config) {
    const bool one = db.measured("v1:abc", h100, 1, config);
    EXPECT_EQ(db.configs_settled("v1:abc", h100, 1).count(config) == 1, one) << config;
    return one;
  };
  // deterministic failures settle a candidate at once
  for (Status st : {Status::kCompileError, Status::kWrongResult, Status::kCheckFailed, Status::kResourceLimit}) {
    const std::string config = "tile=" + status_name(st);
    db.record(m(config, 0, st));
    EXPECT_TRUE(settled(config)) << status_name(st);
  }
  // a timeout or a crash of the measuring child may not reproduce: measured again, up to the limit
  for (Status st : {Status::kTimeout, Status::kRuntimeFault}) {
    const std::string config = "tile=" + status_name(st);
    for (int k = 1; k < kMaxTransientFailures; ++k) {
      db.record(m(config, 0, st));
      EXPECT_FALSE(settled(config)) << status_name(st) << " after " << k;
    }
    db.record(m(config, 0, st));
    EXPECT_TRUE(settled(config)) << status_name(st) << " after " << kMaxTransientFailures;
  }
  // a transient failure then a success: settled by the success, which is the best plan
  db.record(m("tile=retried", 0, Status::kTimeout));
  EXPECT_FALSE(settled("tile=retried"));
  db.record(m("tile=retried", 7.0));
  EXPECT_TRUE(settled("tile=retried"));
  EXPECT_EQ(db.best("v1:abc", h100, 1)->config, "tile=retried");
  EXPECT_FALSE(db.measured("v1:abc", {"a100", "sm_80"}, 1, "tile=retried"));  // per device
}

// A write inside another's is a savepoint: it commits with the outer one, and when it throws only
// its own changes are undone; the outer transaction goes on and commits what it wrote.
TEST_F(SearchDbTest, ANestedWriteThatFailsUndoesOnlyItsOwnChanges) {
  SearchDb db(dir_ / "search.db");
  JobQueue queue(db);
  int64_t kept = 0, undone = 0, inner = 0;
  db.file().write([&] {
    kept = queue.ensure_task("v1:kept", {"h100", "sm_90"}, 1, "p");
    db.file().write([&] { inner = queue.ensure_task("v1:inner", {"h100", "sm_90"}, 1, "p"); });  // returns nothing
    try {
      db.file().write([&] {
        undone = queue.ensure_task("v1:undone", {"h100", "sm_90"}, 1, "p");
        throw Error("a handler failed");
      });
    } catch (const Error&) {
    }
    EXPECT_FALSE(queue.task(undone).has_value());
  });
  EXPECT_TRUE(queue.task(kept).has_value());
  EXPECT_TRUE(queue.task(inner).has_value());
  EXPECT_FALSE(queue.task(undone).has_value());
  // The connection is out of its transaction: a new write begins and commits.
  const int64_t after = db.file().write([&] { return queue.ensure_task("v1:after", {"h100", "sm_90"}, 1, "p"); });
  EXPECT_TRUE(queue.task(after).has_value());
}

TEST_F(SearchDbTest, FinishTaskTwiceRecordsOnce) {
  SearchDb db(dir_ / "search.db");
  JobQueue queue(db);
  const int64_t t = queue.ensure_task("v1:abc", {"h100", "sm_90"}, 1, "p");
  const std::vector<Measurement> results = {m("tile=32x32", 12.0), m("tile=64x64", 9.5),
                                            m("tile=128x128", 0, Status::kCompileError)};
  queue.lease_task(t, "w1", 1000);
  queue.requeue_task(t);  // w1's lease expired ...
  queue.lease_task(t, "w2", 2000);
  EXPECT_EQ(queue.task(t)->attempts, 2);
  EXPECT_TRUE(queue.finish_task(t, TaskState::kDone, "", results));    // ... w2 finished it ...
  EXPECT_FALSE(queue.finish_task(t, TaskState::kDone, "", results));   // ... then w1's late result arrives
  EXPECT_FALSE(queue.finish_task(t, TaskState::kFailed, "late", results));
  EXPECT_EQ(db.stats().measurements, 3);
  EXPECT_EQ(db.stats().candidates, 3);
  EXPECT_EQ(queue.task(t)->state, TaskState::kDone);
  EXPECT_EQ(queue.task(t)->error, "");
  EXPECT_EQ(db.best("v1:abc", {"h100", "sm_90"}, 1)->config, "tile=64x64");
  EXPECT_THROW(queue.lease_task(t, "w3", 3000), Error);  // done: nothing to lease
  queue.requeue_task(t);                                   // done: left as it is
  EXPECT_EQ(queue.task(t)->state, TaskState::kDone);
  EXPECT_THROW(queue.finish_task(999, TaskState::kDone, "", {}), Error);
  EXPECT_THROW(queue.finish_task(t, TaskState::kLeased, "", {}), Error);
  // A measurement of another workload is refused, and nothing of the result is kept.
  const int64_t u = queue.ensure_task("v1:def", {"h100", "sm_90"}, 1, "p");
  EXPECT_THROW(queue.finish_task(u, TaskState::kDone, "", {for_sig("v1:def", "tile=8", 3.0), m("tile=8", 3.0)}), Error);
  EXPECT_EQ(db.stats().measurements, 3);
  EXPECT_EQ(queue.task(u)->state, TaskState::kQueued);
}

TEST_F(SearchDbTest, RequeueLeasedAfterARestart) {
  const fs::path file = dir_ / "search.db";
  std::vector<int64_t> ids;
  {
    SearchDb db(file);
    JobQueue queue(db);
    for (const char* sig : {"v1:a", "v1:b", "v1:c", "v1:d"}) ids.push_back(queue.ensure_task(sig, {"h100", "sm_90"}, 1, sig));
    queue.lease_task(ids[0], "w1", 1000);
    queue.lease_task(ids[1], "w2", 2000);
    queue.lease_task(ids[2], "w1", 3000);
    EXPECT_TRUE(queue.finish_task(ids[2], TaskState::kDone, "", {for_sig("v1:c", "tile=1", 1.0)}));
    EXPECT_EQ(queue.task(ids[1])->worker, "w2");
    EXPECT_EQ(queue.task(ids[1])->lease_deadline_ms, 2000);
    EXPECT_EQ(queue.tasks_in_state(TaskState::kLeased).size(), 2u);
  }
  SearchDb db(file);  // the coordinator restarted: no lease survives it
  JobQueue queue(db);
  EXPECT_EQ(queue.requeue_leased(), 2);
  EXPECT_EQ(queue.requeue_leased(), 0);
  const auto queued = queue.tasks_in_state(TaskState::kQueued);
  ASSERT_EQ(queued.size(), 3u);
  EXPECT_EQ(queued[0].id, ids[0]);
  EXPECT_EQ(queued[1].id, ids[1]);
  EXPECT_EQ(queued[2].id, ids[3]);
  EXPECT_EQ(queued[1].worker, "");
  EXPECT_EQ(queued[1].lease_deadline_ms, 0);
  EXPECT_EQ(queued[1].attempts, 0);  // a lease lost with its coordinator is not an attempt
  EXPECT_EQ(queued[1].payload, "v1:b");
  // Nor is a lease its worker handed back unstarted; an expired one is.
  queue.lease_task(ids[0], "w3", 4000);
  queue.requeue_task(ids[0], /*attempt_counts=*/false);
  EXPECT_EQ(queue.task(ids[0])->attempts, 0);
  queue.lease_task(ids[0], "w3", 5000);
  queue.requeue_task(ids[0]);
  EXPECT_EQ(queue.task(ids[0])->attempts, 1);
  EXPECT_EQ(queue.tasks_in_state(TaskState::kDone).size(), 1u);
  EXPECT_FALSE(queue.task(999).has_value());
  EXPECT_THROW(queue.requeue_task(999), Error);
  EXPECT_EQ(queue.stats().open_tasks, 3);
}

TEST_F(SearchDbTest, JobProgressCountsTasksAndMeasurements) {
  SearchDb db(dir_ / "search.db");
  JobQueue queue(db);
  const int64_t job = new_job(queue);
  const DeviceKey h100{"h100", "sm_90"};
  std::vector<int64_t> t;
  for (const char* sig : {"v1:a", "v1:b", "v1:c", "v1:d", "v1:e"}) {
    t.push_back(queue.ensure_task(sig, h100, 1, "p"));
    queue.link_job_task(job, t.back());
  }
  JobProgress p = queue.job_progress(job);
  EXPECT_EQ(p.tasks, 5);
  EXPECT_EQ(p.queued, 5);
  EXPECT_EQ(p.measurements, 0);
  queue.lease_task(t[0], "w1", 1);
  queue.lease_task(t[1], "w1", 1);
  queue.lease_task(t[2], "w2", 1);
  queue.finish_task(t[1], TaskState::kDone, "", {for_sig("v1:b", "x=1", 1.0), for_sig("v1:b", "x=2", 2.0)});
  queue.finish_task(t[2], TaskState::kFailed, "compiler crashed", {for_sig("v1:c", "x=1", 0, Status::kCompileError)});
  db.record(for_sig("v1:z", "x=1", 1.0));  // another workload: not this job's
  p = queue.job_progress(job);
  EXPECT_EQ(p.tasks, 5);
  EXPECT_EQ(p.queued, 2);
  EXPECT_EQ(p.leased, 1);
  EXPECT_EQ(p.done, 1);
  EXPECT_EQ(p.failed, 1);
  EXPECT_EQ(p.measurements, 3);
  const int64_t empty = new_job(queue);
  EXPECT_EQ(queue.job_progress(empty).tasks, 0);
  EXPECT_EQ(queue.job_progress(empty).measurements, 0);
  EXPECT_THROW(queue.job_progress(999), Error);
}

TEST_F(SearchDbTest, AModelsFilesAreStoredBesideTheDatabaseAsTheClientLaidThemOut) {
  const fs::path file = dir_ / "search.db";
  std::string weights(6 << 20, '\0');
  std::mt19937 rng(7);
  for (char& c : weights) c = static_cast<char>(rng() & 0xff);  // NUL bytes included
  {
    SearchDb db(file);
    JobQueue queue(db);
    EXPECT_FALSE(queue.model("sha256:big").has_value());
    queue.put_model("sha256:big", "big.onnx", {{"big.onnx", "graph"}, {"data/w.bin", weights}});
    queue.put_model("sha256:big", "renamed.onnx", {{"other.onnx", "other bytes"}});  // idempotent: the first stays
    queue.put_model("sha256:empty", "empty.onnx", {{"empty.onnx", ""}});
  }
  SearchDb db(file);
  JobQueue queue(db);
  const auto big = queue.model("sha256:big");
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->name, "big.onnx");
  EXPECT_EQ(big->onnx, queue.model_dir() / "sha256:big.files" / "big.onnx");
  EXPECT_EQ(read_bytes(big->onnx), "graph");
  EXPECT_TRUE(read_bytes(big->onnx.parent_path() / "data" / "w.bin") == weights);  // external data beside it
  ASSERT_TRUE(queue.model("sha256:empty").has_value());
  EXPECT_EQ(read_bytes(queue.model("sha256:empty")->onnx), "");
  EXPECT_EQ(queue.stats().models, 2);
  // The bytes live beside the database, not in it; nothing is left staged.
  EXPECT_EQ(queue.model_dir(), fs::path(file.string() + ".models"));
  EXPECT_EQ(queue.stats().model_bytes, static_cast<int64_t>(weights.size() + 5));
  EXPECT_LT(db.stats().file_bytes, 1 << 20);
  EXPECT_TRUE(!fs::exists(JobQueue::staging_dir(file)) || fs::is_empty(JobQueue::staging_dir(file)));
  // A digest or a file path that could name another file is refused; a model whose files are gone says so.
  for (const std::string bad : {"../escape", "a/b", ".hidden", ""}) {
    EXPECT_THROW(queue.put_model(bad, "x.onnx", {{"x.onnx", "x"}}), Error) << bad;
  }
  for (const std::string bad : {"../escape.onnx", "/abs.onnx", "", "d/"}) {
    EXPECT_THROW(queue.put_model("sha256:bad", "x.onnx", {{bad, "x"}}), Error) << bad;
  }
  EXPECT_FALSE(queue.model("sha256:bad").has_value());
  EXPECT_FALSE(fs::exists(dir_ / "escape"));
  EXPECT_FALSE(fs::exists(dir_ / "escape.onnx"));
  fs::remove_all(queue.model_dir() / "sha256:big.files");
  try {
    queue.model("sha256:big");
    ADD_FAILURE() << "a missing model file was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("big.onnx"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("are missing"), std::string::npos) << e.what();
  }
}

// A model's stored files are the owner's only whatever the umask: the store, each model's
// directory and every directory in it 0700, every file 0600; the staging directory too. A store an
// older fusetune left 0755 with 0644 files is made owner-only throughout.
TEST_F(SearchDbTest, StoredModelFilesAreTheOwnersOnlyWhateverTheUmask) {
  const fs::path file = dir_ / "search.db";
  auto mode = [](const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  const mode_t old_umask = ::umask(0);  // the most permissive: every mode below is fusetune's own
  {
    SearchDb db(file);
    JobQueue queue(db);
    queue.put_model("sha256:m", "m.onnx", {{"m.onnx", "graph"}, {"data/deep/w.bin", "weights"}});
    const fs::path files = queue.model_dir() / "sha256:m.files";
    EXPECT_EQ(mode(queue.model_dir()), 0700u);
    EXPECT_EQ(mode(files), 0700u);
    EXPECT_EQ(mode(files / "data"), 0700u);
    EXPECT_EQ(mode(files / "data" / "deep"), 0700u);
    EXPECT_EQ(mode(files / "m.onnx"), 0600u);
    EXPECT_EQ(mode(files / "data" / "deep" / "w.bin"), 0600u);
    EXPECT_EQ(mode(JobQueue::staging_dir(file)), 0700u);
    // As an older fusetune left it.
    fs::permissions(queue.model_dir(), fs::perms(0755));
    fs::permissions(files, fs::perms(0755));
    fs::permissions(files / "m.onnx", fs::perms(0644));
  }
  const fs::path staging = JobQueue::staging_dir(file);
  ::umask(old_umask);
  const fs::path store = staging.parent_path();
  EXPECT_EQ(mode(staging), 0700u);
  EXPECT_EQ(mode(store), 0700u);
  EXPECT_EQ(mode(store / "sha256:m.files"), 0700u);
  EXPECT_EQ(mode(store / "sha256:m.files" / "m.onnx"), 0600u);
}

// The export is valid UTF-8, one JSON object a line, whatever the database holds: a worker's name
// and a detail that are not UTF-8 (written by an older fusetune, or straight into the file) become
// U+FFFD in their record, and the other records are exported as they are.
TEST_F(SearchDbTest, AnExportIsValidTextWhateverTheDatabaseHolds) {
  SearchDb db(dir_ / "search.db");
  db.commit_workload("v1:abc", "form \xff");
  Measurement bad = m("tile=32x32", 12.0);
  bad.worker = "peer\xff\xfe\n";
  bad.detail = "node '\xc0\xaf' failed";
  db.record(bad);
  db.record(m("tile=64x64", 9.5));
  ASSERT_EQ(db.export_to(dir_ / "out.jsonl"), 3);
  std::ifstream in(dir_ / "out.jsonl");
  std::string line;
  std::vector<nlohmann::json> records;
  while (std::getline(in, line)) records.push_back(nlohmann::json::parse(line));  // throws on invalid UTF-8
  ASSERT_EQ(records.size(), 4u);  // the header, the workload, two measurements
  EXPECT_EQ(records[2]["worker"], "peer\ufffd\ufffd\n");
  EXPECT_EQ(records[2]["detail"], "node '\ufffd\ufffd' failed");
  EXPECT_EQ(records[3]["worker"], "w1");
  SearchDb other(dir_ / "other.db");
  EXPECT_EQ(other.import_from(dir_ / "out.jsonl"), 3);  // and it imports
}

TEST_F(SearchDbTest, AModelStoredAsOneBlobByAnOlderSchemaIsLaidOutOnce) {
  const fs::path file = dir_ / "search.db";
  {
    SearchDb db(file);
    JobQueue queue(db);
    queue.put_model("sha256:new", "new.onnx", {{"new.onnx", "n"}});
  }
  {  // as schema 3 wrote it (bytes in the row) and as schema 4 did (a file of the digest's name)
    RawDb raw(file);
    raw.exec("INSERT INTO models(digest, name, bytes, file) VALUES('sha256:v3', 'v3.onnx', x'0102', '')");
    raw.exec("INSERT INTO models(digest, name, bytes, file) VALUES('sha256:v4', 'v4.onnx', x'', 'sha256:v4')");
  }
  std::ofstream(file.string() + ".models/sha256:v4", std::ios::binary) << "blob of v4";
  SearchDb db(file);
  JobQueue queue(db);
  EXPECT_EQ(queue.legacy_models(), (std::vector<std::string>{"sha256:v3", "sha256:v4"}));
  EXPECT_EQ(queue.legacy_model_bytes("sha256:v3"), std::string("\x01\x02"));
  EXPECT_EQ(queue.legacy_model_bytes("sha256:v4"), "blob of v4");
  EXPECT_THROW(queue.model("sha256:v4"), Error);  // not readable as files until laid out
  queue.replace_legacy_model("sha256:v4", {{"v4.onnx", "graph"}, {"w.bin", "weights"}});
  queue.replace_legacy_model("sha256:v3", {{"v3.onnx", "graph 3"}});
  EXPECT_TRUE(queue.legacy_models().empty());
  EXPECT_EQ(read_bytes(queue.model("sha256:v4")->onnx), "graph");
  EXPECT_EQ(read_bytes(queue.model("sha256:v4")->onnx.parent_path() / "w.bin"), "weights");
  EXPECT_EQ(read_bytes(queue.model("sha256:v3")->onnx), "graph 3");
  EXPECT_FALSE(fs::exists(file.string() + ".models/sha256:v4"));  // the blob is gone once the row names the files
  EXPECT_EQ(queue.stats().model_bytes, static_cast<int64_t>(1 + 5 + 7 + 7));
}

// A coordinator that is killed while finishing tasks: every task marked done has exactly its
// measurements, every other task none, and the job's progress agrees.
TEST_F(SearchDbTest, SigkillDuringFinishTaskLeavesNoPartialTask) {
  const fs::path file = dir_ / "search.db";
  int64_t job = 0;
  {
    SearchDb init(file);
    JobQueue init_queue(init);
    job = new_job(init_queue);
  }
  constexpr int kPerTask = 5;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the writer: report each finished task's count, forever
    close(fds[0]);
    SearchDb db(file);
    JobQueue queue(db);
    for (int64_t i = 1;; ++i) {
      const std::string sig = "v1:task" + std::to_string(i);
      const int64_t t = queue.ensure_task(sig, {"h100", "sm_90"}, 1, std::string(256, 'p'));
      queue.link_job_task(job, t);
      queue.lease_task(t, "w1", i);
      std::vector<Measurement> results;
      for (int k = 0; k < kPerTask; ++k) {
        results.push_back(for_sig(sig, "tile=" + std::to_string(k), 1.0 + k, k == 0 ? Status::kTimeout : Status::kOk));
      }
      queue.finish_task(t, TaskState::kDone, "", results);
      if (write(fds[1], &i, sizeof i) != sizeof i) _exit(1);
    }
  }
  close(fds[1]);
  int64_t finished = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (finished < 200 && std::chrono::steady_clock::now() < deadline) {
    int64_t n = 0;
    if (read(fds[0], &n, sizeof n) != sizeof n) break;
    finished = n;
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_GT(finished, 0);
  {
    RawDb raw(file);
    EXPECT_EQ(raw.value("PRAGMA integrity_check"), "ok");
    // Per task: done with exactly kPerTask measurements, or not done with none.
    EXPECT_EQ(raw.count("SELECT count(*) FROM tasks t WHERE (SELECT count(*) FROM measurements m WHERE "
                        "m.signature=t.signature) <> CASE t.state WHEN 'done' THEN " +
                        std::to_string(kPerTask) + " ELSE 0 END"),
              0);
    EXPECT_EQ(raw.count("SELECT count(*) FROM measurements WHERE candidate_id IS NULL"), 0);
  }
  SearchDb after(file);
  JobQueue after_queue(after);
  const auto done = after_queue.tasks_in_state(TaskState::kDone);
  EXPECT_GE(static_cast<int64_t>(done.size()), finished);
  EXPECT_EQ(after.stats().measurements, static_cast<int64_t>(done.size()) * kPerTask);
  const JobProgress p = after_queue.job_progress(job);
  EXPECT_EQ(p.done, static_cast<int>(done.size()));
  EXPECT_EQ(p.measurements, static_cast<int64_t>(done.size()) * kPerTask);
  EXPECT_LE(p.tasks - p.done, 1);  // at most the task in flight
  EXPECT_EQ(after.best("v1:task" + std::to_string(finished), {"h100", "sm_90"}, 1)->config, "tile=1");
  after_queue.requeue_leased();
  EXPECT_TRUE(after_queue.tasks_in_state(TaskState::kLeased).empty());
}

}  // namespace
}  // namespace fusetune::storage
