#include "storage/db_file.h"

#include <sqlite3.h>

#include <chrono>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "storage/statement.h"

namespace fusetune::storage {

namespace {

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

// Version 4: a model's files live beside the database (JobQueue::put_model), the row names them;
// models stored before keep their bytes in the row (an empty `file`).
constexpr const char* kMigrateToV4 = R"SQL(
ALTER TABLE models ADD COLUMN file TEXT NOT NULL DEFAULT '';
UPDATE meta SET value='4' WHERE key='schema_version';
)SQL";

// Version 5: a model's files are laid out in a directory beside the database
// (FILE.models/DIGEST.files/), the row's `file` names its .onnx there; rows of older versions keep
// one blob (in the row, or in the file `file` names) until a coordinator lays their files out
// (JobQueue::replace_legacy_model). Only the meaning of `file` changes: an older fusetune must
// not read it.
constexpr const char* kMigrateToV5 = R"SQL(
UPDATE meta SET value='5' WHERE key='schema_version';
)SQL";

// Version 6: a running job's search state (JobQueue::set_search_state: its rounds, convergence and
// what each group asked), so that a coordinator restarted in the middle of a search round resumes
// the round with the job's history.
constexpr const char* kMigrateToV6 = R"SQL(
ALTER TABLE jobs ADD COLUMN search_state TEXT NOT NULL DEFAULT '';
UPDATE meta SET value='6' WHERE key='schema_version';
)SQL";

// Schema steps in order: a new file is created at version 1 and migrated like any version 1 file.
struct Migration {
  int to;
  const char* sql;
};
constexpr Migration kMigrations[] = {{2, kMigrateToV2}, {3, kMigrateToV3}, {4, kMigrateToV4}, {5, kMigrateToV5}, {6, kMigrateToV6}};
static_assert(std::size(kMigrations) > 0 && std::end(kMigrations)[-1].to == kSchemaVersion,
              "the last migration must reach kSchemaVersion");

}  // namespace

DbFile::DbFile(const std::filesystem::path& path) : path_(path) {
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
    finalize_statements(db_);
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  } catch (const std::exception& e) {
    finalize_statements(db_);
    sqlite3_close(db_);
    db_ = nullptr;
    fail(path.string(), ": not a fusetune search database (", e.what(), ")");
  }
}

DbFile::~DbFile() {
  finalize_statements(db_);
  sqlite3_close(db_);
}

namespace {

// Kept statements, by connection and SQL text; each connection is used by one thread at a time,
// the mutex guards the map across connections.
struct StatementCache {
  std::mutex mutex;
  std::map<sqlite3*, std::map<std::string, std::vector<sqlite3_stmt*>>> kept;
};
StatementCache& statement_cache() {
  static StatementCache cache;
  return cache;
}
constexpr size_t kMaxKeptPerConnection = 256;

}  // namespace

sqlite3_stmt* take_statement(sqlite3* db, const std::string& sql) {
  {
    StatementCache& c = statement_cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto conn = c.kept.find(db);
    if (conn != c.kept.end()) {
      auto it = conn->second.find(sql);
      if (it != conn->second.end() && !it->second.empty()) {
        sqlite3_stmt* s = it->second.back();
        it->second.pop_back();
        return s;
      }
    }
  }
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
    sqlite3_finalize(s);
    return nullptr;
  }
  return s;
}

void give_back_statement(sqlite3* db, const std::string& sql, sqlite3_stmt* s) {
  if (s == nullptr) return;
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  StatementCache& c = statement_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto& conn = c.kept[db];
  size_t kept = 0;
  for (const auto& [text, list] : conn) kept += list.size();
  if (kept >= kMaxKeptPerConnection) {
    sqlite3_finalize(s);
    return;
  }
  conn[sql].push_back(s);
}

void finalize_statements(sqlite3* db) {
  StatementCache& c = statement_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto conn = c.kept.find(db);
  if (conn == c.kept.end()) return;
  for (auto& [text, list] : conn->second) {
    for (sqlite3_stmt* s : list) sqlite3_finalize(s);
  }
  c.kept.erase(conn);
}

void DbFile::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    fail(path_.string(), ": ", msg == "file is not a database" ? "not a fusetune search database (" + msg + ")" : msg);
  }
}

void DbFile::open_schema() {
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

int64_t DbFile::scalar(const std::string& sql) {
  Stmt q(db_, sql, path_.string());
  return q.step() ? q.i64(0) : 0;
}

int DbFile::schema_version() {
  return static_cast<int>(scalar("SELECT CAST(value AS INTEGER) FROM meta WHERE key='schema_version'"));
}

int64_t DbFile::size_bytes() { return scalar("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"); }

void DbFile::vacuum() {
  exec("VACUUM");
  exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

void DbFile::set_auto_checkpoint(bool on) { exec(on ? "PRAGMA wal_autocheckpoint=1000" : "PRAGMA wal_autocheckpoint=0"); }

std::string DbFile::write_probe() {
  try {
    write([&] {
      Stmt q(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES('write_probe', ?)", path_.string());
      q.bind(1, std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count()))
          .step();
    });
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

void DbFile::checkpoint() { exec("PRAGMA wal_checkpoint(PASSIVE)"); }

void DbFile::rollback() { sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr); }

void DbFile::rollback_to(const std::string& savepoint) {
  sqlite3_exec(db_, ("ROLLBACK TO " + savepoint + "; RELEASE " + savepoint).c_str(), nullptr, nullptr, nullptr);
}

int64_t DbFile::last_insert_id() const { return sqlite3_last_insert_rowid(db_); }

int DbFile::changes() const { return sqlite3_changes(db_); }

}  // namespace fusetune::storage
