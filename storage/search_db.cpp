#include "storage/search_db.h"

#include <sqlite3.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "core/error.h"

namespace fusetune::storage {

namespace {

// One prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql, const std::string& file) : db_(db), file_(file) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr) != SQLITE_OK) {
      fail(file_, ": ", sqlite3_errmsg(db), " (in: ", sql.substr(0, 80), ")");
    }
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind_blob(int i, const std::string& v) {
    sqlite3_bind_blob64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  bool step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(file_, ": ", sqlite3_errmsg(db_));
  }
  int64_t i64(int c) const { return sqlite3_column_int64(s_, c); }
  double f64(int c) const { return sqlite3_column_double(s_, c); }
  std::string text(int c) const {
    const auto* t = sqlite3_column_text(s_, c);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  std::string blob(int c) const {
    const auto* b = static_cast<const char*>(sqlite3_column_blob(s_, c));
    return b ? std::string(b, static_cast<size_t>(sqlite3_column_bytes(s_, c))) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  std::string file_;
};

constexpr const char* kSchemaV1 = R"SQL(
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

// Version 2: candidates (filled from the measurements already there, in first-measured order),
// and the tuning service's state: models, jobs, tasks shared between jobs.
constexpr const char* kMigrateToV2 = R"SQL(
CREATE TABLE candidates(
  id INTEGER PRIMARY KEY, signature TEXT NOT NULL, codegen_version INTEGER NOT NULL, config TEXT NOT NULL,
  source_digest TEXT NOT NULL, UNIQUE(signature, codegen_version, config, source_digest));
INSERT INTO candidates(signature, codegen_version, config, source_digest)
  SELECT signature, codegen_version, config, source_digest FROM measurements
  GROUP BY signature, codegen_version, config, source_digest ORDER BY min(id);
ALTER TABLE measurements ADD COLUMN candidate_id INTEGER REFERENCES candidates(id);
UPDATE measurements SET candidate_id=(SELECT c.id FROM candidates c WHERE c.signature=measurements.signature AND
  c.codegen_version=measurements.codegen_version AND c.config=measurements.config AND
  c.source_digest=measurements.source_digest);
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

// Version 3: devices become identities (product, compute capability, driver, toolkit; a row of
// version 2 keeps them empty: recorded before identities, it matches no worker's identity),
// measurements gain the median's confidence interval (the widest one, [min, max], for the rows
// there) and the config of the rival they were interleaved with (none for those), a job
// is bound to the identity that measures it, and the unfinished jobs' tasks, keyed by the device
// class, are dropped (they are made again, per identity, when the job is bound). Rebuilding the
// devices table needs foreign keys off (open_schema) and keeps every id.
constexpr const char* kMigrateToV3 = R"SQL(
CREATE TABLE devices_v3(
  id INTEGER PRIMARY KEY, name TEXT NOT NULL, arch TEXT NOT NULL, product TEXT NOT NULL,
  compute_capability INTEGER NOT NULL, driver TEXT NOT NULL, toolkit TEXT NOT NULL,
  UNIQUE(name, arch, product, compute_capability, driver, toolkit));
INSERT INTO devices_v3(id, name, arch, product, compute_capability, driver, toolkit)
  SELECT id, name, arch, '', 0, '', '' FROM devices;
DROP TABLE devices;
ALTER TABLE devices_v3 RENAME TO devices;
ALTER TABLE jobs ADD COLUMN identity_id INTEGER REFERENCES devices(id);
DELETE FROM job_tasks WHERE job_id IN (SELECT id FROM jobs WHERE state IN ('queued', 'running'));
DELETE FROM tasks WHERE state <> 'done' AND id NOT IN (SELECT task_id FROM job_tasks);
UPDATE jobs SET state='queued', summary='' WHERE state IN ('queued', 'running');
ALTER TABLE measurements ADD COLUMN ci_low_us REAL NOT NULL DEFAULT 0;
ALTER TABLE measurements ADD COLUMN ci_high_us REAL NOT NULL DEFAULT 0;
ALTER TABLE measurements ADD COLUMN interleaved_with TEXT NOT NULL DEFAULT '';
UPDATE measurements SET ci_low_us=min_us, ci_high_us=max_us;
UPDATE meta SET value='3' WHERE key='schema_version';
)SQL";

// Schema steps in order: a new file is created at version 1 and migrated like any version 1 file.
struct Migration {
  int to;
  const char* sql;
};
constexpr Migration kMigrations[] = {{2, kMigrateToV2}, {3, kMigrateToV3}};
static_assert(std::size(kMigrations) > 0 && std::end(kMigrations)[-1].to == kSchemaVersion,
              "the last migration must reach kSchemaVersion");

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool is_terminal(JobState s) { return s == JobState::kDone || s == JobState::kFailed || s == JobState::kCancelled; }

// A device identity's columns in a table aliased `alias`, read back by read_device from column `at`.
std::string device_columns(const std::string& alias) {
  return alias + ".name, " + alias + ".arch, " + alias + ".product, " + alias + ".compute_capability, " + alias +
         ".driver, " + alias + ".toolkit";
}
constexpr int kDeviceColumnCount = 6;

DeviceKey read_device(const Stmt& q, int at) {
  return {q.text(at), q.text(at + 1), q.text(at + 2), static_cast<int>(q.i64(at + 3)), q.text(at + 4), q.text(at + 5)};
}

const std::string kJobColumns =
    "SELECT j.id, j.model_digest, j.model_name, j.options, j.state, j.error, j.created_at, j.finished_at, j.summary, " +
    device_columns("d") + ", j.identity_id, " + device_columns("i") +
    " FROM jobs j JOIN devices d ON d.id=j.device_id LEFT JOIN devices i ON i.id=j.identity_id ";

JobRecord row_to_job(const Stmt& q) {
  JobRecord j;
  j.id = q.i64(0);
  j.model_digest = q.text(1);
  j.model_name = q.text(2);
  j.options = q.text(3);
  j.state = job_state_from_name(q.text(4));
  j.error = q.text(5);
  j.created_at = q.i64(6);
  j.finished_at = q.i64(7);
  j.summary = q.text(8);
  j.device = read_device(q, 9);
  if (q.i64(9 + kDeviceColumnCount) != 0) j.identity = read_device(q, 10 + kDeviceColumnCount);
  return j;
}

const std::string kTaskColumns =
    "SELECT t.id, t.signature, t.codegen_version, t.state, t.attempts, t.worker, t.lease_deadline_ms, t.payload, "
    "t.error, " + device_columns("d") + " FROM tasks t JOIN devices d ON d.id=t.device_id ";

std::vector<TaskRecord> read_tasks(Stmt& q) {
  std::vector<TaskRecord> out;
  while (q.step()) {
    TaskRecord t;
    t.id = q.i64(0);
    t.signature = q.text(1);
    t.codegen_version = static_cast<int>(q.i64(2));
    t.state = task_state_from_name(q.text(3));
    t.attempts = static_cast<int>(q.i64(4));
    t.worker = q.text(5);
    t.lease_deadline_ms = q.i64(6);
    t.payload = q.blob(7);
    t.error = q.text(8);
    t.device = read_device(q, 9);
    out.push_back(std::move(t));
  }
  return out;
}

Measurement row_to_measurement(const Stmt& q) {
  Measurement m;
  m.signature = q.text(0);
  m.codegen_version = static_cast<int>(q.i64(1));
  m.config = q.text(2);
  m.source_digest = q.text(3);
  m.status = status_from_name(q.text(4));
  m.median_us = q.f64(5);
  m.min_us = q.f64(6);
  m.max_us = q.f64(7);
  m.repeats = static_cast<int>(q.i64(8));
  m.registers = static_cast<int>(q.i64(9));
  m.shared_bytes = q.i64(10);
  m.spill_bytes = static_cast<int>(q.i64(11));
  m.compile_ms = q.f64(12);
  m.worker = q.text(13);
  m.detail = q.text(14);
  m.measured_at = q.i64(15);
  m.ci_low_us = q.f64(16);
  m.ci_high_us = q.f64(17);
  m.interleaved_with = q.text(18);
  m.device = read_device(q, 19);
  return m;
}

const std::string kMeasurementColumns =
    "m.signature, m.codegen_version, m.config, m.source_digest, m.status, m.median_us, m.min_us, m.max_us, m.repeats, "
    "m.registers, m.shared_bytes, m.spill_bytes, m.compile_ms, m.worker, m.detail, m.measured_at, m.ci_low_us, "
    "m.ci_high_us, m.interleaved_with, " +
    device_columns("d");

// The export file's first line names its format; a file without one is format 1 (no identities).
constexpr int kExportFormat = 2;

nlohmann::json device_json(const DeviceKey& d) {
  return {{"device", d.name}, {"arch", d.arch}, {"product", d.product}, {"compute_capability", d.compute_capability},
          {"driver", d.driver}, {"toolkit", d.toolkit}};
}

DeviceKey device_from_json(const nlohmann::json& j) {
  return {j.at("device"), j.at("arch"), j.value("product", ""), j.value("compute_capability", 0),
          j.value("driver", ""), j.value("toolkit", "")};
}

}  // namespace

std::string DeviceKey::str() const {
  std::string s = name + " (" + arch;
  if (!product.empty()) s += ", " + product;
  if (compute_capability != 0) s += ", cc " + std::to_string(compute_capability);
  if (!driver.empty()) s += ", driver " + driver;
  if (!toolkit.empty()) s += ", " + toolkit;
  return s + ")";
}

std::string status_name(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kCompileError: return "compile_error";
    case Status::kRuntimeFault: return "runtime_fault";
    case Status::kWrongResult: return "wrong_result";
    case Status::kTimeout: return "timeout";
    case Status::kResourceLimit: return "resource_limit";
    case Status::kCheckFailed: return "check_failed";
  }
  return "?";
}

Status status_from_name(const std::string& name) {
  for (Status s : {Status::kOk, Status::kCompileError, Status::kRuntimeFault, Status::kWrongResult, Status::kTimeout,
                   Status::kResourceLimit, Status::kCheckFailed}) {
    if (status_name(s) == name) return s;
  }
  fail("unknown measurement status '", name, "'");
}

std::string job_state_name(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kDone: return "done";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "?";
}

JobState job_state_from_name(const std::string& name) {
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kFailed, JobState::kCancelled}) {
    if (job_state_name(s) == name) return s;
  }
  fail("unknown job state '", name, "'");
}

std::string task_state_name(TaskState s) {
  switch (s) {
    case TaskState::kQueued: return "queued";
    case TaskState::kLeased: return "leased";
    case TaskState::kDone: return "done";
    case TaskState::kFailed: return "failed";
  }
  return "?";
}

TaskState task_state_from_name(const std::string& name) {
  for (TaskState s : {TaskState::kQueued, TaskState::kLeased, TaskState::kDone, TaskState::kFailed}) {
    if (task_state_name(s) == name) return s;
  }
  fail("unknown task state '", name, "'");
}

SearchDb::SearchDb(const std::filesystem::path& path) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    fail(path.string(), ": cannot open the search database (", msg, ")");
  }
  try {
    sqlite3_busy_timeout(db_, 10000);
    // WAL: readers never block the writer, and a killed process leaves the database consistent;
    // synchronous=NORMAL keeps every committed transaction across process crashes.
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    open_schema();
    exec("PRAGMA foreign_keys=ON");
  } catch (const Error&) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  } catch (const std::exception& e) {
    sqlite3_close(db_);
    db_ = nullptr;
    fail(path.string(), ": not a fusetune search database (", e.what(), ")");
  }
}

SearchDb::~SearchDb() { sqlite3_close(db_); }

void SearchDb::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    fail(path_.string(), ": ", msg == "file is not a database" ? "not a fusetune search database (" + msg + ")" : msg);
  }
}

template <typename Fn>
auto SearchDb::write(Fn&& fn) {
  exec("BEGIN IMMEDIATE");
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
      fn();
      exec("COMMIT");
    } else {
      auto result = fn();
      exec("COMMIT");
      return result;
    }
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

void SearchDb::open_schema() {
  // The file's schema version; 0 for an empty file (a new one).
  auto file_version = [&] {
    {
      Stmt q(db_, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta'", path_.string());
      if (!(q.step() && q.i64(0) > 0)) {
        Stmt all(db_, "SELECT count(*) FROM sqlite_master", path_.string());
        check(all.step() && all.i64(0) == 0, path_.string(), ": an SQLite file, but not a fusetune search database");
        return 0;
      }
    }
    Stmt v(db_, "SELECT value FROM meta WHERE key='schema_version'", path_.string());
    check(v.step(), path_.string(), ": the search database has no schema version");
    const int version = std::stoi(v.text(0));
    check(version >= 1, path_.string(), ": schema version ", version, " is not valid");
    check(version <= kSchemaVersion, path_.string(), ": schema version ", version, " is newer than this fusetune's (",
          kSchemaVersion, "); upgrade fusetune");
    return version;
  };
  if (file_version() == kSchemaVersion) return;
  // Foreign keys stay off while migrating (a table rebuild drops a referenced table); the
  // migrated file must then hold no dangling reference.
  exec("PRAGMA foreign_keys=OFF");
  write([&] {
    int version = file_version();  // again, under the write lock: another process may have migrated it
    if (version == 0) {
      exec(kSchemaV1);
      version = 1;
    }
    for (const Migration& step : kMigrations) {
      if (version < step.to) {
        exec(step.sql);
        version = step.to;
      }
    }
    Stmt fk(db_, "PRAGMA foreign_key_check", path_.string());
    check(!fk.step(), path_.string(), ": migration to schema ", kSchemaVersion, " left a dangling reference in table ",
          fk.text(0));
  });
}

std::optional<int64_t> SearchDb::find_device(const DeviceKey& d) {
  Stmt q(db_,
         "SELECT id FROM devices WHERE name=? AND arch=? AND product=? AND compute_capability=? AND driver=? AND "
         "toolkit=?",
         path_.string());
  q.bind(1, d.name).bind(2, d.arch).bind(3, d.product).bind(4, d.compute_capability).bind(5, d.driver).bind(6, d.toolkit);
  if (!q.step()) return std::nullopt;
  return q.i64(0);
}

int64_t SearchDb::device_id(const DeviceKey& d) {
  if (auto id = find_device(d)) return *id;
  Stmt ins(db_,
           "INSERT INTO devices(name, arch, product, compute_capability, driver, toolkit) VALUES(?, ?, ?, ?, ?, ?)",
           path_.string());
  ins.bind(1, d.name).bind(2, d.arch).bind(3, d.product).bind(4, d.compute_capability).bind(5, d.driver).bind(6, d.toolkit);
  ins.step();
  return sqlite3_last_insert_rowid(db_);
}

void SearchDb::commit_workload(const std::string& signature, const std::string& canonical_form) {
  write([&] {
    Stmt q(db_, "INSERT OR IGNORE INTO workloads(signature, canonical_form) VALUES(?, ?)", path_.string());
    q.bind(1, signature).bind(2, canonical_form).step();
  });
}

int64_t SearchDb::insert_measurement(const Measurement& m) {
  const int64_t dev = device_id(m.device);
  Stmt cand(db_,
            "INSERT OR IGNORE INTO candidates(signature, codegen_version, config, source_digest) VALUES(?,?,?,?)",
            path_.string());
  cand.bind(1, m.signature).bind(2, m.codegen_version).bind(3, m.config).bind(4, m.source_digest).step();
  Stmt cq(db_, "SELECT id FROM candidates WHERE signature=? AND codegen_version=? AND config=? AND source_digest=?",
          path_.string());
  cq.bind(1, m.signature).bind(2, m.codegen_version).bind(3, m.config).bind(4, m.source_digest);
  check(cq.step(), path_.string(), ": candidate lookup failed");
  const int64_t candidate = cq.i64(0);
  Stmt ins(db_,
           "INSERT INTO measurements(signature, device_id, codegen_version, config, source_digest, status, median_us, "
           "min_us, max_us, repeats, registers, shared_bytes, spill_bytes, compile_ms, worker, detail, measured_at, "
           "candidate_id, ci_low_us, ci_high_us, interleaved_with) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
           path_.string());
  ins.bind(1, m.signature).bind(2, dev).bind(3, m.codegen_version).bind(4, m.config);
  ins.bind(5, m.source_digest).bind(6, status_name(m.status)).bind(7, m.median_us).bind(8, m.min_us);
  ins.bind(9, m.max_us).bind(10, m.repeats).bind(11, m.registers);
  ins.bind(12, m.shared_bytes).bind(13, m.spill_bytes).bind(14, m.compile_ms);
  ins.bind(15, m.worker).bind(16, m.detail).bind(17, m.measured_at != 0 ? m.measured_at : now_s());
  ins.bind(18, candidate).bind(19, m.ci_low_us).bind(20, m.ci_high_us).bind(21, m.interleaved_with);
  ins.step();
  const int64_t id = sqlite3_last_insert_rowid(db_);
  if (m.status == Status::kOk) {
    Stmt best(db_,
              "INSERT INTO best_plans(signature, device_id, codegen_version, measurement_id, median_us) "
              "VALUES(?,?,?,?,?) ON CONFLICT(signature, device_id, codegen_version) DO UPDATE SET "
              "measurement_id=excluded.measurement_id, median_us=excluded.median_us "
              "WHERE excluded.median_us < best_plans.median_us",
              path_.string());
    best.bind(1, m.signature).bind(2, dev).bind(3, m.codegen_version).bind(4, id).bind(5, m.median_us);
    best.step();
  }
  return id;
}

int64_t SearchDb::record(const Measurement& m) {
  return write([&] { return insert_measurement(m); });
}

bool SearchDb::measured(const std::string& signature, const DeviceKey& d, int codegen_version, const std::string& config) {
  const auto dev = find_device(d);
  if (!dev) return false;
  Stmt q(db_,
         "SELECT count(*) FILTER (WHERE status NOT IN (?6, ?7)), count(*) FILTER (WHERE status IN (?6, ?7)) "
         "FROM measurements WHERE signature=?1 AND device_id=?2 AND codegen_version=?4 AND config=?5",
         path_.string());
  q.bind(1, signature).bind(2, *dev).bind(4, static_cast<int64_t>(codegen_version)).bind(5, config);
  q.bind(6, status_name(Status::kTimeout)).bind(7, status_name(Status::kRuntimeFault));
  return q.step() && (q.i64(0) > 0 || q.i64(1) >= kMaxTransientFailures);
}

std::optional<BestPlan> SearchDb::best(const std::string& signature, const DeviceKey& d, int codegen_version) {
  const auto dev = find_device(d);
  if (!dev) return std::nullopt;
  Stmt q(db_,
         "SELECT m.config, b.median_us, b.measurement_id FROM best_plans b JOIN measurements m ON "
         "m.id=b.measurement_id WHERE b.signature=? AND b.device_id=? AND b.codegen_version=?",
         path_.string());
  q.bind(1, signature).bind(2, *dev).bind(3, static_cast<int64_t>(codegen_version));
  if (!q.step()) return std::nullopt;
  return BestPlan{q.text(0), q.f64(1), q.i64(2)};
}

std::vector<Measurement> SearchDb::top_k(const std::string& signature, const DeviceKey& d, int codegen_version, int k) {
  std::vector<Measurement> out;
  const auto dev = find_device(d);
  if (!dev) return out;
  Stmt q(db_,
         "SELECT " + kMeasurementColumns +
             " FROM measurements m JOIN devices d ON d.id=m.device_id WHERE m.signature=? AND m.device_id=? "
             "AND m.codegen_version=? AND m.status='ok' ORDER BY m.median_us, m.id LIMIT ?",
         path_.string());
  q.bind(1, signature).bind(2, *dev).bind(3, static_cast<int64_t>(codegen_version)).bind(4, static_cast<int64_t>(k));
  while (q.step()) out.push_back(row_to_measurement(q));
  return out;
}

std::vector<Measurement> SearchDb::near_top_k(const std::string& signature, const DeviceKey& d, int codegen_version,
                                              int k) {
  Stmt q(db_,
         "SELECT " + kMeasurementColumns +
             " FROM measurements m JOIN devices d ON d.id=m.device_id WHERE m.signature=? AND d.name=? AND d.arch=? "
             "AND NOT (d.product=? AND d.compute_capability=? AND d.driver=? AND d.toolkit=?) "
             "AND m.codegen_version=? AND m.status='ok' ORDER BY m.median_us, m.id LIMIT ?",
         path_.string());
  q.bind(1, signature).bind(2, d.name).bind(3, d.arch).bind(4, d.product).bind(5, d.compute_capability);
  q.bind(6, d.driver).bind(7, d.toolkit).bind(8, static_cast<int64_t>(codegen_version)).bind(9, static_cast<int64_t>(k));
  std::vector<Measurement> out;
  while (q.step()) out.push_back(row_to_measurement(q));
  return out;
}

DbStats SearchDb::stats() {
  DbStats s;
  auto count = [&](const char* sql) {
    Stmt q(db_, sql, path_.string());
    return q.step() ? q.i64(0) : 0;
  };
  s.workloads = count("SELECT count(*) FROM workloads");
  s.devices = count("SELECT count(*) FROM devices");
  s.candidates = count("SELECT count(*) FROM candidates");
  s.measurements = count("SELECT count(*) FROM measurements");
  s.failures = count("SELECT count(*) FROM measurements WHERE status <> 'ok'");
  s.interleaved = count("SELECT count(*) FROM measurements WHERE interleaved_with <> ''");
  s.best_plans = count("SELECT count(*) FROM best_plans");
  s.models = count("SELECT count(*) FROM models");
  s.jobs = count("SELECT count(*) FROM jobs");
  s.unfinished_jobs = count("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')");
  s.tasks = count("SELECT count(*) FROM tasks");
  s.open_tasks = count("SELECT count(*) FROM tasks WHERE state IN ('queued', 'leased')");
  s.schema_version = static_cast<int>(count("SELECT CAST(value AS INTEGER) FROM meta WHERE key='schema_version'"));
  Stmt q(db_,
         "SELECT " + device_columns("d") +
             ", m.codegen_version, count(*), (SELECT count(*) FROM best_plans b WHERE b.device_id=m.device_id AND "
             "b.codegen_version=m.codegen_version) FROM measurements m JOIN devices d ON d.id=m.device_id "
             "GROUP BY m.device_id, m.codegen_version ORDER BY d.name, d.arch, d.product, d.driver, d.toolkit, "
             "m.codegen_version",
         path_.string());
  while (q.step()) {
    s.identities.push_back({read_device(q, 0), static_cast<int>(q.i64(kDeviceColumnCount)),
                            q.i64(kDeviceColumnCount + 1), q.i64(kDeviceColumnCount + 2)});
  }
  return s;
}

int64_t SearchDb::export_to(const std::filesystem::path& file) {
  std::ofstream out(file, std::ios::trunc);
  check(out.good(), file.string(), ": cannot write the export");
  int64_t n = 0;
  out << nlohmann::json{{"type", "header"}, {"format", "fusetune search export"}, {"format_version", kExportFormat},
                        {"schema_version", kSchemaVersion}, {"fusetune_version", FUSETUNE_VERSION}}
             .dump()
      << "\n";
  {
    Stmt q(db_, "SELECT signature, canonical_form FROM workloads ORDER BY signature", path_.string());
    while (q.step()) {
      out << nlohmann::json{{"type", "workload"}, {"signature", q.text(0)}, {"canonical_form", q.text(1)}}.dump() << "\n";
      ++n;
    }
  }
  Stmt q(db_, "SELECT " + kMeasurementColumns + " FROM measurements m JOIN devices d ON d.id=m.device_id ORDER BY m.id",
         path_.string());
  while (q.step()) {
    const Measurement m = row_to_measurement(q);
    nlohmann::json j = {{"type", "measurement"}, {"signature", m.signature}, {"codegen_version", m.codegen_version},
                        {"config", m.config}, {"source_digest", m.source_digest}, {"status", status_name(m.status)},
                        {"median_us", m.median_us}, {"min_us", m.min_us}, {"max_us", m.max_us},
                        {"repeats", m.repeats}, {"ci_low_us", m.ci_low_us}, {"ci_high_us", m.ci_high_us},
                        {"interleaved_with", m.interleaved_with}, {"registers", m.registers}, {"shared_bytes", m.shared_bytes},
                        {"spill_bytes", m.spill_bytes}, {"compile_ms", m.compile_ms}, {"worker", m.worker},
                        {"detail", m.detail}, {"measured_at", m.measured_at}};
    j.update(device_json(m.device));
    out << j.dump() << "\n";
    ++n;
  }
  check(out.good(), file.string(), ": writing the export failed");
  return n;
}

int64_t SearchDb::import_from(const std::filesystem::path& file) {
  std::ifstream in(file);
  check(in.good(), file.string(), ": cannot read the import");
  std::string line;
  int64_t lineno = 0, added = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      const std::string type = j.at("type");
      if (type == "header") {
        check(lineno == 1, "a header after the first line");
        check(j.value("format", "") == "fusetune search export", "not a fusetune search export (format '",
              j.value("format", ""), "')");
        const int format = j.at("format_version");
        check(format >= 1 && format <= kExportFormat, "export format version ", format, " (written by fusetune ",
              j.value("fusetune_version", "?"), ") is not one this fusetune reads (1 to ", kExportFormat,
              "); upgrade fusetune");
        continue;
      }
      if (type == "workload") {
        auto workloads = [&] {
          Stmt q(db_, "SELECT count(*) FROM workloads", path_.string());
          return q.step() ? q.i64(0) : 0;
        };
        const int64_t before = workloads();
        commit_workload(j.at("signature"), j.at("canonical_form"));
        added += workloads() - before;
        continue;
      }
      check(type == "measurement", "unknown record type '", type, "'");
      Measurement m;
      m.signature = j.at("signature");
      m.device = device_from_json(j);
      m.codegen_version = j.at("codegen_version");
      m.config = j.at("config");
      m.source_digest = j.at("source_digest");
      m.status = status_from_name(j.at("status"));
      m.median_us = j.at("median_us");
      m.min_us = j.at("min_us");
      m.max_us = j.at("max_us");
      m.repeats = j.at("repeats");
      m.ci_low_us = j.value("ci_low_us", m.min_us);  // format 1: the widest interval
      m.ci_high_us = j.value("ci_high_us", m.max_us);
      m.interleaved_with = j.value("interleaved_with", "");
      m.registers = j.at("registers");
      m.shared_bytes = j.at("shared_bytes");
      m.spill_bytes = j.at("spill_bytes");
      m.compile_ms = j.at("compile_ms");
      m.worker = j.at("worker");
      m.detail = j.at("detail");
      m.measured_at = j.at("measured_at");
      if (const auto dev = find_device(m.device)) {
        Stmt dup(db_,
                 "SELECT count(*) FROM measurements WHERE signature=? AND device_id=? AND codegen_version=? AND "
                 "config=? AND measured_at=? AND worker=?",
                 path_.string());
        dup.bind(1, m.signature).bind(2, *dev).bind(3, static_cast<int64_t>(m.codegen_version)).bind(4, m.config);
        dup.bind(5, m.measured_at).bind(6, m.worker);
        if (dup.step() && dup.i64(0) > 0) continue;
      }
      record(m);
      ++added;
    } catch (const nlohmann::json::exception& e) {
      fail(file.string(), ":", lineno, ": ", e.what());
    } catch (const Error& e) {
      fail(file.string(), ":", lineno, ": ", e.what());
    }
  }
  return added;
}

void SearchDb::put_model(const std::string& digest, const std::string& name, const std::string& bytes) {
  write([&] {
    Stmt q(db_, "INSERT OR IGNORE INTO models(digest, name, bytes) VALUES(?, ?, ?)", path_.string());
    q.bind(1, digest).bind(2, name).bind_blob(3, bytes).step();
  });
}

std::optional<ModelBlob> SearchDb::model(const std::string& digest) {
  Stmt q(db_, "SELECT name, bytes FROM models WHERE digest=?", path_.string());
  q.bind(1, digest);
  if (!q.step()) return std::nullopt;
  return ModelBlob{q.text(0), q.blob(1)};
}

int64_t SearchDb::create_job(const JobRecord& job) {
  return write([&] {
    Stmt m(db_, "SELECT count(*) FROM models WHERE digest=?", path_.string());
    m.bind(1, job.model_digest);
    check(m.step() && m.i64(0) > 0, path_.string(), ": job for model ", job.model_digest,
          ": the model is not stored (put_model first)");
    const int64_t dev = device_id(job.device.device_class());
    if (job.identity) {
      check(job.identity->same_class(job.device), path_.string(), ": a job for ", job.device.str(), " bound to ",
            job.identity->str());
    }
    Stmt q(db_,
           "INSERT INTO jobs(model_digest, model_name, device_id, options, state, error, created_at, finished_at, "
           "summary, identity_id) VALUES(?,?,?,?,?,?,?,?,?,?)",
           path_.string());
    q.bind(1, job.model_digest).bind(2, job.model_name).bind(3, dev).bind(4, job.options);
    q.bind(5, job_state_name(job.state)).bind(6, job.error).bind(7, job.created_at != 0 ? job.created_at : now_s());
    q.bind(8, job.finished_at).bind(9, job.summary);
    if (job.identity) q.bind(10, device_id(*job.identity));
    q.step();
    return sqlite3_last_insert_rowid(db_);
  });
}

void SearchDb::set_job_state(int64_t id, JobState state, const std::string& error, const std::string& summary) {
  write([&] {
    Stmt q(db_, "UPDATE jobs SET state=?, error=?, summary=?, finished_at=? WHERE id=?", path_.string());
    q.bind(1, job_state_name(state)).bind(2, error).bind(3, summary).bind(4, is_terminal(state) ? now_s() : 0);
    q.bind(5, id).step();
    check(sqlite3_changes(db_) == 1, path_.string(), ": no job ", id);
  });
}

DeviceKey SearchDb::bind_job(int64_t id, const DeviceKey& identity) {
  return write([&] {
    Stmt q(db_, kJobColumns + "WHERE j.id=?", path_.string());
    check(q.bind(1, id).step(), path_.string(), ": no job ", id);
    const JobRecord job = row_to_job(q);
    if (job.identity) return *job.identity;
    check(job.device.same_class(identity), path_.string(), ": job ", id, " asks for ", job.device.str(),
          ", not for ", identity.str());
    Stmt u(db_, "UPDATE jobs SET identity_id=? WHERE id=?", path_.string());
    u.bind(1, device_id(identity)).bind(2, id).step();
    return identity;
  });
}

std::optional<JobRecord> SearchDb::job(int64_t id) {
  Stmt q(db_, kJobColumns + "WHERE j.id=?", path_.string());
  q.bind(1, id);
  if (!q.step()) return std::nullopt;
  return row_to_job(q);
}

std::vector<JobRecord> SearchDb::jobs(bool unfinished_only) {
  Stmt q(db_,
         kJobColumns + (unfinished_only ? "WHERE j.state IN ('queued', 'running') " : "") + "ORDER BY j.id",
         path_.string());
  std::vector<JobRecord> out;
  while (q.step()) out.push_back(row_to_job(q));
  return out;
}

int64_t SearchDb::ensure_task(const std::string& signature, const DeviceKey& d, int codegen_version,
                              const std::string& payload) {
  return write([&] {
    const int64_t dev = device_id(d);
    Stmt ins(db_,
             "INSERT INTO tasks(signature, device_id, codegen_version, state, attempts, worker, lease_deadline_ms, "
             "payload, error) VALUES(?, ?, ?, 'queued', 0, '', 0, ?, '') "
             "ON CONFLICT(signature, device_id, codegen_version) DO UPDATE SET state='queued', attempts=0, worker='', "
             "lease_deadline_ms=0, payload=excluded.payload, error='' WHERE tasks.state='failed'",
             path_.string());
    ins.bind(1, signature).bind(2, dev).bind(3, codegen_version).bind_blob(4, payload).step();
    Stmt q(db_, "SELECT id FROM tasks WHERE signature=? AND device_id=? AND codegen_version=?", path_.string());
    q.bind(1, signature).bind(2, dev).bind(3, codegen_version);
    check(q.step(), path_.string(), ": task lookup failed");
    return q.i64(0);
  });
}

void SearchDb::link_job_task(int64_t job, int64_t task) {
  write([&] {
    Stmt j(db_, "SELECT count(*) FROM jobs WHERE id=?", path_.string());
    check(j.bind(1, job).step() && j.i64(0) > 0, path_.string(), ": no job ", job);
    Stmt t(db_, "SELECT count(*) FROM tasks WHERE id=?", path_.string());
    check(t.bind(1, task).step() && t.i64(0) > 0, path_.string(), ": no task ", task);
    Stmt q(db_, "INSERT OR IGNORE INTO job_tasks(job_id, task_id) VALUES(?, ?)", path_.string());
    q.bind(1, job).bind(2, task).step();
  });
}

std::vector<TaskRecord> SearchDb::job_tasks(int64_t job) {
  Stmt q(db_, kTaskColumns + "JOIN job_tasks jt ON jt.task_id=t.id WHERE jt.job_id=? ORDER BY t.id",
         path_.string());
  q.bind(1, job);
  return read_tasks(q);
}

std::optional<TaskRecord> SearchDb::task(int64_t id) {
  Stmt q(db_, kTaskColumns + "WHERE t.id=?", path_.string());
  q.bind(1, id);
  auto found = read_tasks(q);
  if (found.empty()) return std::nullopt;
  return std::move(found.front());
}

std::vector<TaskRecord> SearchDb::tasks_in_state(TaskState state) {
  Stmt q(db_, kTaskColumns + "WHERE t.state=? ORDER BY t.id", path_.string());
  q.bind(1, task_state_name(state));
  return read_tasks(q);
}

std::vector<int64_t> SearchDb::task_ids_in_state(TaskState state) {
  Stmt q(db_, "SELECT id FROM tasks WHERE state=? ORDER BY id", path_.string());
  q.bind(1, task_state_name(state));
  std::vector<int64_t> ids;
  while (q.step()) ids.push_back(q.i64(0));
  return ids;
}

void SearchDb::lease_task(int64_t id, const std::string& worker, int64_t deadline_ms) {
  write([&] {
    Stmt q(db_,
           "UPDATE tasks SET state='leased', worker=?, lease_deadline_ms=?, attempts=attempts+1 WHERE id=? AND "
           "state='queued'",
           path_.string());
    q.bind(1, worker).bind(2, deadline_ms).bind(3, id).step();
    if (sqlite3_changes(db_) == 1) return;
    Stmt s(db_, "SELECT state FROM tasks WHERE id=?", path_.string());
    check(s.bind(1, id).step(), path_.string(), ": no task ", id);
    fail(path_.string(), ": task ", id, " is ", s.text(0), ", not queued: it cannot be leased");
  });
}

void SearchDb::requeue_task(int64_t id) {
  write([&] {
    Stmt s(db_, "SELECT count(*) FROM tasks WHERE id=?", path_.string());
    check(s.bind(1, id).step() && s.i64(0) > 0, path_.string(), ": no task ", id);
    Stmt q(db_,
           "UPDATE tasks SET state='queued', worker='', lease_deadline_ms=0, error='' WHERE id=? AND "
           "state IN ('leased', 'failed')",
           path_.string());
    q.bind(1, id).step();
  });
}

bool SearchDb::extend_task(int64_t id, const std::string& payload) {
  return write([&] {
    Stmt s(db_, "SELECT count(*) FROM tasks WHERE id=?", path_.string());
    check(s.bind(1, id).step() && s.i64(0) > 0, path_.string(), ": no task ", id);
    Stmt q(db_,
           "UPDATE tasks SET state='queued', attempts=0, worker='', lease_deadline_ms=0, error='', payload=? WHERE id=? "
           "AND state='done'",
           path_.string());
    q.bind_blob(1, payload).bind(2, id).step();
    return sqlite3_changes(db_) == 1;
  });
}

int SearchDb::requeue_leased() {
  return write([&] {
    Stmt q(db_, "UPDATE tasks SET state='queued', worker='', lease_deadline_ms=0 WHERE state='leased'", path_.string());
    q.step();
    return sqlite3_changes(db_);
  });
}

bool SearchDb::finish_task(int64_t id, TaskState state, const std::string& error,
                           const std::vector<Measurement>& results) {
  check(state == TaskState::kDone || state == TaskState::kFailed, path_.string(), ": task ", id, " cannot finish as ",
        task_state_name(state));
  return write([&] {
    Stmt t(db_, kTaskColumns + "WHERE t.id=?", path_.string());
    t.bind(1, id);
    const auto found = read_tasks(t);
    check(!found.empty(), path_.string(), ": no task ", id);
    const TaskRecord& task = found.front();
    if (task.state == TaskState::kDone) return false;
    for (const Measurement& m : results) {
      check(m.signature == task.signature && m.device == task.device && m.codegen_version == task.codegen_version,
            path_.string(), ": task ", id, " (", task.signature, " on ", task.device.str(), ", codegen ",
            task.codegen_version, ") got a measurement of ", m.signature, " on ", m.device.str(), ", codegen ",
            m.codegen_version);
      insert_measurement(m);
    }
    Stmt q(db_, "UPDATE tasks SET state=?, error=?, lease_deadline_ms=0 WHERE id=?", path_.string());
    q.bind(1, task_state_name(state)).bind(2, error).bind(3, id).step();
    return true;
  });
}

JobProgress SearchDb::job_progress(int64_t job) {
  Stmt j(db_, "SELECT count(*) FROM jobs WHERE id=?", path_.string());
  check(j.bind(1, job).step() && j.i64(0) > 0, path_.string(), ": no job ", job);
  JobProgress p;
  Stmt q(db_,
         "SELECT count(*), sum(t.state='queued'), sum(t.state='leased'), sum(t.state='done'), sum(t.state='failed') "
         "FROM job_tasks jt JOIN tasks t ON t.id=jt.task_id WHERE jt.job_id=?",
         path_.string());
  if (q.bind(1, job).step()) {
    p.tasks = static_cast<int>(q.i64(0));
    p.queued = static_cast<int>(q.i64(1));
    p.leased = static_cast<int>(q.i64(2));
    p.done = static_cast<int>(q.i64(3));
    p.failed = static_cast<int>(q.i64(4));
  }
  Stmt m(db_,
         "SELECT count(*) FROM job_tasks jt JOIN tasks t ON t.id=jt.task_id JOIN measurements m ON "
         "m.signature=t.signature AND m.device_id=t.device_id AND m.codegen_version=t.codegen_version "
         "WHERE jt.job_id=?",
         path_.string());
  if (m.bind(1, job).step()) p.measurements = m.i64(0);
  return p;
}

}  // namespace fusetune::storage
