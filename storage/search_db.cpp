#include "storage/search_db.h"

#include <sqlite3.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

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

Measurement row_to_measurement(const Stmt& q) {
  Measurement m;
  m.signature = q.text(0);
  m.device = {q.text(1), q.text(2)};
  m.codegen_version = static_cast<int>(q.i64(3));
  m.config = q.text(4);
  m.source_digest = q.text(5);
  m.status = status_from_name(q.text(6));
  m.median_us = q.f64(7);
  m.min_us = q.f64(8);
  m.max_us = q.f64(9);
  m.repeats = static_cast<int>(q.i64(10));
  m.registers = static_cast<int>(q.i64(11));
  m.shared_bytes = q.i64(12);
  m.spill_bytes = static_cast<int>(q.i64(13));
  m.compile_ms = q.f64(14);
  m.worker = q.text(15);
  m.detail = q.text(16);
  m.measured_at = q.i64(17);
  return m;
}

constexpr const char* kMeasurementColumns =
    "m.signature, d.name, d.arch, m.codegen_version, m.config, m.source_digest, m.status, m.median_us, m.min_us, "
    "m.max_us, m.repeats, m.registers, m.shared_bytes, m.spill_bytes, m.compile_ms, m.worker, m.detail, m.measured_at";

}  // namespace

std::string status_name(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kCompileError: return "compile_error";
    case Status::kRuntimeFault: return "runtime_fault";
    case Status::kWrongResult: return "wrong_result";
    case Status::kTimeout: return "timeout";
    case Status::kResourceLimit: return "resource_limit";
  }
  return "?";
}

Status status_from_name(const std::string& name) {
  for (Status s : {Status::kOk, Status::kCompileError, Status::kRuntimeFault, Status::kWrongResult, Status::kTimeout,
                   Status::kResourceLimit}) {
    if (status_name(s) == name) return s;
  }
  fail("unknown measurement status '", name, "'");
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
    exec("PRAGMA foreign_keys=ON");
    bool has_meta = false;
    {
      Stmt q(db_, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta'", path_.string());
      has_meta = q.step() && q.i64(0) > 0;
    }
    if (!has_meta) {
      Stmt q(db_, "SELECT count(*) FROM sqlite_master", path_.string());
      check(q.step() && q.i64(0) == 0, path_.string(), ": an SQLite file, but not a fusetune search database");
      exec(std::string("BEGIN IMMEDIATE;") + kSchemaV1 + "COMMIT;");
    }
    Stmt v(db_, "SELECT value FROM meta WHERE key='schema_version'", path_.string());
    check(v.step(), path_.string(), ": the search database has no schema version");
    const int version = std::stoi(v.text(0));
    check(version <= kSchemaVersion, path_.string(), ": schema version ", version, " is newer than this fusetune (",
          kSchemaVersion, "); upgrade fusetune");
    // Migrations from older versions go here, one transaction per step, when the schema changes.
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

int64_t SearchDb::device_id(const DeviceKey& d) {
  Stmt ins(db_, "INSERT OR IGNORE INTO devices(name, arch) VALUES(?, ?)", path_.string());
  ins.bind(1, d.name).bind(2, d.arch).step();
  Stmt q(db_, "SELECT id FROM devices WHERE name=? AND arch=?", path_.string());
  q.bind(1, d.name).bind(2, d.arch);
  check(q.step(), path_.string(), ": device lookup failed");
  return q.i64(0);
}

void SearchDb::commit_workload(const std::string& signature, const std::string& canonical_form) {
  Stmt q(db_, "INSERT OR IGNORE INTO workloads(signature, canonical_form) VALUES(?, ?)", path_.string());
  q.bind(1, signature).bind(2, canonical_form).step();
}

int64_t SearchDb::record(const Measurement& m) {
  exec("BEGIN IMMEDIATE");
  try {
    const int64_t dev = device_id(m.device);
    const int64_t at = m.measured_at != 0 ? m.measured_at
                                          : std::chrono::duration_cast<std::chrono::seconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count();
    Stmt ins(db_,
             "INSERT INTO measurements(signature, device_id, codegen_version, config, source_digest, status, median_us, "
             "min_us, max_us, repeats, registers, shared_bytes, spill_bytes, compile_ms, worker, detail, measured_at) "
             "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
             path_.string());
    ins.bind(1, m.signature).bind(2, dev).bind(3, static_cast<int64_t>(m.codegen_version)).bind(4, m.config);
    ins.bind(5, m.source_digest).bind(6, status_name(m.status)).bind(7, m.median_us).bind(8, m.min_us);
    ins.bind(9, m.max_us).bind(10, static_cast<int64_t>(m.repeats)).bind(11, static_cast<int64_t>(m.registers));
    ins.bind(12, m.shared_bytes).bind(13, static_cast<int64_t>(m.spill_bytes)).bind(14, m.compile_ms);
    ins.bind(15, m.worker).bind(16, m.detail).bind(17, at);
    ins.step();
    const int64_t id = sqlite3_last_insert_rowid(db_);
    if (m.status == Status::kOk) {
      Stmt best(db_,
                "INSERT INTO best_plans(signature, device_id, codegen_version, measurement_id, median_us) "
                "VALUES(?,?,?,?,?) ON CONFLICT(signature, device_id, codegen_version) DO UPDATE SET "
                "measurement_id=excluded.measurement_id, median_us=excluded.median_us "
                "WHERE excluded.median_us < best_plans.median_us",
                path_.string());
      best.bind(1, m.signature).bind(2, dev).bind(3, static_cast<int64_t>(m.codegen_version)).bind(4, id).bind(5, m.median_us);
      best.step();
    }
    exec("COMMIT");
    return id;
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

bool SearchDb::measured(const std::string& signature, const DeviceKey& d, int codegen_version, const std::string& config) {
  Stmt q(db_,
         "SELECT count(*) FROM measurements m JOIN devices d ON d.id=m.device_id WHERE m.signature=? AND d.name=? AND "
         "d.arch=? AND m.codegen_version=? AND m.config=?",
         path_.string());
  q.bind(1, signature).bind(2, d.name).bind(3, d.arch).bind(4, static_cast<int64_t>(codegen_version)).bind(5, config);
  return q.step() && q.i64(0) > 0;
}

std::optional<BestPlan> SearchDb::best(const std::string& signature, const DeviceKey& d, int codegen_version) {
  Stmt q(db_,
         "SELECT m.config, b.median_us, b.measurement_id FROM best_plans b JOIN devices d ON d.id=b.device_id "
         "JOIN measurements m ON m.id=b.measurement_id WHERE b.signature=? AND d.name=? AND d.arch=? AND "
         "b.codegen_version=?",
         path_.string());
  q.bind(1, signature).bind(2, d.name).bind(3, d.arch).bind(4, static_cast<int64_t>(codegen_version));
  if (!q.step()) return std::nullopt;
  return BestPlan{q.text(0), q.f64(1), q.i64(2)};
}

std::vector<Measurement> SearchDb::top_k(const std::string& signature, const DeviceKey& d, int codegen_version, int k) {
  Stmt q(db_,
         std::string("SELECT ") + kMeasurementColumns +
             " FROM measurements m JOIN devices d ON d.id=m.device_id WHERE m.signature=? AND d.name=? AND d.arch=? "
             "AND m.codegen_version=? AND m.status='ok' ORDER BY m.median_us, m.id LIMIT ?",
         path_.string());
  q.bind(1, signature).bind(2, d.name).bind(3, d.arch).bind(4, static_cast<int64_t>(codegen_version));
  q.bind(5, static_cast<int64_t>(k));
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
  s.measurements = count("SELECT count(*) FROM measurements");
  s.failures = count("SELECT count(*) FROM measurements WHERE status <> 'ok'");
  s.best_plans = count("SELECT count(*) FROM best_plans");
  s.schema_version = kSchemaVersion;
  return s;
}

int64_t SearchDb::export_to(const std::filesystem::path& file) {
  std::ofstream out(file, std::ios::trunc);
  check(out.good(), file.string(), ": cannot write the export");
  int64_t n = 0;
  {
    Stmt q(db_, "SELECT signature, canonical_form FROM workloads ORDER BY signature", path_.string());
    while (q.step()) {
      out << nlohmann::json{{"type", "workload"}, {"signature", q.text(0)}, {"canonical_form", q.text(1)}}.dump() << "\n";
      ++n;
    }
  }
  Stmt q(db_, std::string("SELECT ") + kMeasurementColumns + " FROM measurements m JOIN devices d ON d.id=m.device_id ORDER BY m.id",
         path_.string());
  while (q.step()) {
    const Measurement m = row_to_measurement(q);
    out << nlohmann::json{{"type", "measurement"}, {"signature", m.signature}, {"device", m.device.name},
                          {"arch", m.device.arch}, {"codegen_version", m.codegen_version}, {"config", m.config},
                          {"source_digest", m.source_digest}, {"status", status_name(m.status)},
                          {"median_us", m.median_us}, {"min_us", m.min_us}, {"max_us", m.max_us},
                          {"repeats", m.repeats}, {"registers", m.registers}, {"shared_bytes", m.shared_bytes},
                          {"spill_bytes", m.spill_bytes}, {"compile_ms", m.compile_ms}, {"worker", m.worker},
                          {"detail", m.detail}, {"measured_at", m.measured_at}}
               .dump()
        << "\n";
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
      if (type == "workload") {
        const int64_t before = stats().workloads;
        commit_workload(j.at("signature"), j.at("canonical_form"));
        added += stats().workloads - before;
        continue;
      }
      check(type == "measurement", "unknown record type '", type, "'");
      Measurement m;
      m.signature = j.at("signature");
      m.device = {j.at("device"), j.at("arch")};
      m.codegen_version = j.at("codegen_version");
      m.config = j.at("config");
      m.source_digest = j.at("source_digest");
      m.status = status_from_name(j.at("status"));
      m.median_us = j.at("median_us");
      m.min_us = j.at("min_us");
      m.max_us = j.at("max_us");
      m.repeats = j.at("repeats");
      m.registers = j.at("registers");
      m.shared_bytes = j.at("shared_bytes");
      m.spill_bytes = j.at("spill_bytes");
      m.compile_ms = j.at("compile_ms");
      m.worker = j.at("worker");
      m.detail = j.at("detail");
      m.measured_at = j.at("measured_at");
      Stmt dup(db_,
               "SELECT count(*) FROM measurements m JOIN devices d ON d.id=m.device_id WHERE m.signature=? AND "
               "d.name=? AND d.arch=? AND m.codegen_version=? AND m.config=? AND m.measured_at=? AND m.worker=?",
               path_.string());
      dup.bind(1, m.signature).bind(2, m.device.name).bind(3, m.device.arch);
      dup.bind(4, static_cast<int64_t>(m.codegen_version)).bind(5, m.config).bind(6, m.measured_at).bind(7, m.worker);
      if (dup.step() && dup.i64(0) > 0) continue;
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

}  // namespace fusetune::storage
