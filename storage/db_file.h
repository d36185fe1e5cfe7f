// DbFile: the search database's SQLite file, open, with its schema: what SearchDb (the tuning
// records) and JobQueue (the service's jobs and tasks) share.
//
// Takes a path (created when absent). Guarantees: the schema is versioned (kSchemaVersion) and an
// older file is migrated forward on open, in one transaction, keeping every row (the steps and
// what each keeps are in db_file.cpp); a file newer than this build knows is refused. The file is
// in WAL mode with a busy timeout, and every write() is one transaction (BEGIN IMMEDIATE ...
// COMMIT, rolled back when it throws), so a process killed at any moment (kill -9) loses no
// committed record and leaves no partial one. Errors (an unreadable or foreign file, a newer
// schema, a constraint violation) throw Error naming the file. Not thread-safe: one DbFile per
// thread; several processes may share a file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <type_traits>

struct sqlite3;

namespace fusetune::storage {

inline constexpr int kSchemaVersion = 6;

class DbFile {
 public:
  explicit DbFile(const std::filesystem::path& path);
  ~DbFile();
  DbFile(const DbFile&) = delete;
  DbFile& operator=(const DbFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  sqlite3* handle() const { return db_; }
  void exec(const std::string& sql);
  // Runs fn inside BEGIN IMMEDIATE ... COMMIT, rolling back when it throws; returns fn's result.
  // A write() inside another's fn joins the outer transaction as a savepoint: it commits with the
  // outer one, and when its fn throws only its own changes are undone (the outer transaction goes
  // on: a caller that catches the error keeps what was written before).
  template <typename Fn>
  auto write(Fn&& fn);
  int64_t last_insert_id() const;
  // The first column of a query's first row as an integer; 0 when it returns no row.
  int64_t scalar(const std::string& sql);
  // Whether a write commits now (a row of meta rewritten): "" when it does, else why not (a full
  // disk, a file-size limit, an I/O error), in SQLite's words.
  std::string write_probe();
  int changes() const;  // rows the last statement changed

  int schema_version();
  int64_t size_bytes();  // pages in use times page size (the WAL not counted)
  // Rebuilds the file without its free pages and truncates the WAL: what `fusetune db vacuum` runs.
  void vacuum();
  // Whether a commit on this connection copies the WAL back into the file when it has grown past
  // 1000 pages (SQLite's default, on). A process that must not wait for that (the coordinator's
  // event loop: the copy syncs the file) turns it off and calls checkpoint() from a connection of
  // another thread instead.
  void set_auto_checkpoint(bool on);
  // Copies what the WAL holds back into the file as far as no reader needs it (never waits).
  void checkpoint();

 private:
  void open_schema();
  void rollback();
  void rollback_to(const std::string& savepoint);
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
  int depth_ = 0;  // write() calls in progress: only the outermost begins and commits
};

template <typename Fn>
auto DbFile::write(Fn&& fn) {
  if (depth_ > 0) {
    const std::string savepoint = "fusetune_write_" + std::to_string(depth_);
    exec("SAVEPOINT " + savepoint);
    ++depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    try {
      if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
        fn();
        exec("RELEASE " + savepoint);
        return;
      } else {
        auto result = fn();
        exec("RELEASE " + savepoint);
        return result;
      }
    } catch (...) {
      rollback_to(savepoint);
      throw;
    }
  }
  exec("BEGIN IMMEDIATE");
  ++depth_;
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{depth_};
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
    rollback();
    throw;
  }
}

}  // namespace fusetune::storage
