// Storage's private SQL helpers, shared by its units (db_file, search_db, job_queue): one prepared
// statement (Stmt: binds, steps, reads columns; errors throw Error naming the file), and the
// columns of a device identity as the devices table holds them. Not a public header.
//
// Prepared statements are kept per connection and reused: the coordinator runs the same few dozen
// statements for every result, and preparing them again took a sixth of its event loop's time
// under bench/service_load. A Stmt takes a reset statement of its connection and SQL text, or
// prepares one, and gives it back reset and unbound when it goes out of scope (a statement in use
// is never shared: a second Stmt of the same text prepares its own). DbFile finalizes a
// connection's statements before closing it.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "storage/search_db.h"

namespace fusetune::storage {

// A kept statement of `db` for `sql`, reset, or a new one (nullptr and SQLite's error on failure).
sqlite3_stmt* take_statement(sqlite3* db, const std::string& sql);
// Resets and unbinds `s` and keeps it for the next Stmt of `db` and `sql` (finalizes it past a
// bound on what one connection keeps).
void give_back_statement(sqlite3* db, const std::string& sql, sqlite3_stmt* s);
// Finalizes every statement kept for `db` (before it closes).
void finalize_statements(sqlite3* db);

// One prepared statement of a connection, given back for reuse on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql, const std::string& file) : db_(db), sql_(sql), file_(file) {
    s_ = take_statement(db, sql);
    if (s_ == nullptr) fail(file_, ": ", sqlite3_errmsg(db), " (in: ", sql.substr(0, 80), ")");
  }
  ~Stmt() { give_back_statement(db_, sql_, s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
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
  std::string sql_;
  std::string file_;
};


// A device identity's columns in a table aliased `alias`, read back by read_device from column `at`.
inline std::string device_columns(const std::string& alias) {
  return alias + ".name, " + alias + ".arch, " + alias + ".product, " + alias + ".compute_capability, " + alias +
         ".driver, " + alias + ".toolkit";
}
inline constexpr int kDeviceColumnCount = 6;

inline DeviceKey read_device(const Stmt& q, int at) {
  return {q.text(at), q.text(at + 1), q.text(at + 2), static_cast<int>(q.i64(at + 3)), q.text(at + 4), q.text(at + 5)};
}

inline int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace fusetune::storage
