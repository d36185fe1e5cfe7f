#include "storage/job_queue.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/files.h"
#include "storage/statement.h"

namespace fusetune::storage {

namespace {

bool is_terminal(JobState s) { return s == JobState::kDone || s == JobState::kFailed || s == JobState::kCancelled; }

const std::string kJobColumns =
    "SELECT j.id, j.model_digest, j.model_name, j.options, j.state, j.error, j.created_at, j.finished_at, j.summary, " +
    device_columns("d") + ", j.identity_id, " + device_columns("i") + ", j.search_state" +
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
  j.search_state = q.text(10 + 2 * kDeviceColumnCount);
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

}  // namespace

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

JobQueue::JobQueue(SearchDb& records) : records_(records), file_(records.file()) {}

namespace {

std::filesystem::path model_dir_of(const std::filesystem::path& db) { return db.string() + ".models"; }

void set_mode(const std::filesystem::path& path, mode_t mode) {
  check(::chmod(path.c_str(), mode) == 0, path.string(), ": cannot make it private (chmod: ", std::strerror(errno), ")");
}

// `dir` made owner-only (0700, whatever the umask), created when missing; its parent must exist.
void private_dir(const std::filesystem::path& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0) {
    check(errno == EEXIST && std::filesystem::is_directory(std::filesystem::symlink_status(dir)), dir.string(),
          ": cannot create the directory (", std::strerror(errno), ")");
  }
  set_mode(dir, 0700);
}

// Every directory under `root` and `root` itself 0700, every file 0600; anything else (a link, a
// device) is an Error naming it: models' files are owner-only wherever they come from.
void make_private(const std::filesystem::path& root) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    const auto type = e.symlink_status().type();
    check(type == std::filesystem::file_type::directory || type == std::filesystem::file_type::regular, e.path().string(),
          ": a model's files hold something that is neither a file nor a directory");
    set_mode(e.path(), type == std::filesystem::file_type::directory ? 0700 : 0600);
  }
  set_mode(root, 0700);
}

// The model store of `db`, 0700; a store an older fusetune left readable by others is made
// owner-only throughout.
std::filesystem::path private_store(const std::filesystem::path& db) {
  const std::filesystem::path store = model_dir_of(db);
  struct stat st {};
  if (::lstat(store.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) != 0700) make_private(store);
  private_dir(store);
  return store;
}

// The digest names a file: letters, digits and ':', '_', '-', '.', not leading with '.'.
void check_digest(const std::filesystem::path& db, const std::string& digest) {
  const bool safe = !digest.empty() && digest.size() <= 128 && digest[0] != '.' &&
                    std::all_of(digest.begin(), digest.end(), [](char c) {
                      return std::isalnum(static_cast<unsigned char>(c)) || c == ':' || c == '_' || c == '-' || c == '.';
                    });
  check(safe, db.string(), ": model digest '", digest.substr(0, 40), "' cannot name a file");
}

}  // namespace

std::filesystem::path JobQueue::model_dir() const { return model_dir_of(file_.path()); }

std::filesystem::path JobQueue::staging_dir(const std::filesystem::path& db) {
  const std::filesystem::path dir = private_store(db) / ".staging";
  private_dir(dir);
  return dir;
}

void JobQueue::store_model_files(const std::filesystem::path& db, const std::string& digest,
                                 const std::filesystem::path& staged) {
  check_digest(db, digest);
  const std::filesystem::path place = model_dir_of(db) / (digest + ".files");
  std::error_code ec;
  if (std::filesystem::exists(place)) {  // the same digest: the same files
    std::filesystem::remove_all(staged, ec);
    return;
  }
  private_store(db);
  make_private(staged);
  std::filesystem::rename(staged, place, ec);
  check(!ec, place.string(), ": cannot store the model's files (", ec.message(), ")");
}

namespace {

// Writes `files` into a fresh directory under the staging directory of `db` and returns it.
std::filesystem::path stage_files(const std::filesystem::path& db, const std::string& digest, const ModelFiles& files) {
  check(!files.empty(), db.string(), ": model ", digest.substr(0, 12), " has no file");
  const std::filesystem::path dir = JobQueue::staging_dir(db) / (digest + ".put");
  std::filesystem::remove_all(dir);
  for (const auto& [path, bytes] : files) {
    const std::filesystem::path rel = path_inside(path, "model file");
    std::filesystem::create_directories((dir / rel).parent_path());
    write_file_atomically(dir / rel, bytes);
  }
  return dir;
}

}  // namespace

void JobQueue::put_model(const std::string& digest, const std::string& name, const ModelFiles& files) {
  check_digest(file_.path(), digest);
  Stmt known(file_.handle(), "SELECT count(*) FROM models WHERE digest=?", file_.path().string());
  if (known.bind(1, digest).step() && known.i64(0) > 0) return;
  store_model_files(file_.path(), digest, stage_files(file_.path(), digest, files));  // the files first
  put_model_row(digest, name, files.front().first);
}

void JobQueue::put_model_row(const std::string& digest, const std::string& name, const std::string& onnx) {
  check_digest(file_.path(), digest);
  const std::string file = digest + ".files/" + path_inside(onnx, "model file").string();
  check(std::filesystem::is_regular_file(model_dir() / file), file_.path().string(), ": model ", digest.substr(0, 12),
        " has no file ", file, " beside the database (store its files first)");
  file_.write([&] {
    Stmt q(file_.handle(), "INSERT OR IGNORE INTO models(digest, name, bytes, file) VALUES(?, ?, x'', ?)",
           file_.path().string());
    q.bind(1, digest).bind(2, name).bind(3, file).step();
  });
}

std::optional<StoredModel> JobQueue::model(const std::string& digest) {
  Stmt q(file_.handle(), "SELECT name, file FROM models WHERE digest=?", file_.path().string());
  q.bind(1, digest);
  if (!q.step()) return std::nullopt;
  const std::string file = q.text(1);
  check(file.find('/') != std::string::npos, file_.path().string(), ": model ", digest.substr(0, 12), " (", q.text(0),
        ") is stored as one blob by an older fusetune; a coordinator started on the file lays its files out");
  const std::filesystem::path path = model_dir() / file;
  check(std::filesystem::is_regular_file(path), file_.path().string(), ": the files of model ", digest.substr(0, 12), " (",
        q.text(0), ") are missing: ", path.string());
  return StoredModel{q.text(0), path};
}

std::vector<std::string> JobQueue::legacy_models() {
  Stmt q(file_.handle(), "SELECT digest FROM models WHERE instr(file, '/') = 0 ORDER BY digest", file_.path().string());
  std::vector<std::string> out;
  while (q.step()) out.push_back(q.text(0));
  return out;
}

std::string JobQueue::legacy_model_bytes(const std::string& digest) {
  Stmt q(file_.handle(), "SELECT name, bytes, file FROM models WHERE digest=?", file_.path().string());
  check(q.bind(1, digest).step(), file_.path().string(), ": no model ", digest.substr(0, 12));
  if (q.text(2).empty()) return q.blob(1);  // stored before schema 4: in the row
  const std::filesystem::path path = model_dir() / q.text(2);
  check(std::filesystem::exists(path), file_.path().string(), ": the files of model ", digest.substr(0, 12), " (",
        q.text(0), ") are missing: ", path.string());
  return read_file(path, "model files");
}

void JobQueue::replace_legacy_model(const std::string& digest, const ModelFiles& files) {
  check_digest(file_.path(), digest);
  Stmt q(file_.handle(), "SELECT file FROM models WHERE digest=?", file_.path().string());
  check(q.bind(1, digest).step(), file_.path().string(), ": no model ", digest.substr(0, 12));
  const std::string old = q.text(0);
  store_model_files(file_.path(), digest, stage_files(file_.path(), digest, files));
  const std::string file = digest + ".files/" + path_inside(files.front().first, "model file").string();
  file_.write([&] {
    Stmt u(file_.handle(), "UPDATE models SET file=?, bytes=x'' WHERE digest=?", file_.path().string());
    u.bind(1, file).bind(2, digest).step();
  });
  if (!old.empty()) std::filesystem::remove(model_dir() / old);  // after the row names the new files
}

int64_t JobQueue::create_job(const JobRecord& job) {
  return file_.write([&] {
    Stmt m(file_.handle(), "SELECT count(*) FROM models WHERE digest=?", file_.path().string());
    m.bind(1, job.model_digest);
    check(m.step() && m.i64(0) > 0, file_.path().string(), ": job for model ", job.model_digest,
          ": the model is not stored (put_model first)");
    const int64_t dev = records_.device_id(job.device.device_class());
    if (job.identity) {
      check(job.identity->same_class(job.device), file_.path().string(), ": a job for ", job.device.str(), " bound to ",
            job.identity->str());
    }
    Stmt q(file_.handle(),
           "INSERT INTO jobs(model_digest, model_name, device_id, options, state, error, created_at, finished_at, "
           "summary, identity_id) VALUES(?,?,?,?,?,?,?,?,?,?)",
           file_.path().string());
    q.bind(1, job.model_digest).bind(2, job.model_name).bind(3, dev).bind(4, job.options);
    q.bind(5, job_state_name(job.state)).bind(6, job.error).bind(7, job.created_at != 0 ? job.created_at : now_s());
    q.bind(8, job.finished_at).bind(9, job.summary);
    if (job.identity) q.bind(10, records_.device_id(*job.identity));
    q.step();
    return file_.last_insert_id();
  });
}

void JobQueue::set_job_state(int64_t id, JobState state, const std::string& error, const std::string& summary) {
  file_.write([&] {
    Stmt q(file_.handle(), "UPDATE jobs SET state=?, error=?, summary=?, finished_at=? WHERE id=?", file_.path().string());
    q.bind(1, job_state_name(state)).bind(2, error).bind(3, summary).bind(4, is_terminal(state) ? now_s() : 0);
    q.bind(5, id).step();
    check(file_.changes() == 1, file_.path().string(), ": no job ", id);
  });
}

void JobQueue::set_search_state(int64_t id, const std::string& state) {
  file_.write([&] {
    Stmt q(file_.handle(), "UPDATE jobs SET search_state=? WHERE id=?", file_.path().string());
    q.bind(1, state).bind(2, id).step();
    check(file_.changes() == 1, file_.path().string(), ": no job ", id);
  });
}

DeviceKey JobQueue::bind_job(int64_t id, const DeviceKey& identity) {
  return file_.write([&] {
    Stmt q(file_.handle(), kJobColumns + "WHERE j.id=?", file_.path().string());
    check(q.bind(1, id).step(), file_.path().string(), ": no job ", id);
    const JobRecord job = row_to_job(q);
    if (job.identity) return *job.identity;
    check(job.device.same_class(identity), file_.path().string(), ": job ", id, " asks for ", job.device.str(),
          ", not for ", identity.str());
    Stmt u(file_.handle(), "UPDATE jobs SET identity_id=? WHERE id=?", file_.path().string());
    u.bind(1, records_.device_id(identity)).bind(2, id).step();
    return identity;
  });
}

std::optional<JobRecord> JobQueue::job(int64_t id) {
  Stmt q(file_.handle(), kJobColumns + "WHERE j.id=?", file_.path().string());
  q.bind(1, id);
  if (!q.step()) return std::nullopt;
  return row_to_job(q);
}

std::vector<JobRecord> JobQueue::jobs(bool unfinished_only) {
  Stmt q(file_.handle(),
         kJobColumns + (unfinished_only ? "WHERE j.state IN ('queued', 'running') " : "") + "ORDER BY j.id",
         file_.path().string());
  std::vector<JobRecord> out;
  while (q.step()) out.push_back(row_to_job(q));
  return out;
}

int64_t JobQueue::ensure_task(const std::string& signature, const DeviceKey& d, int codegen_version,
                              const std::string& payload) {
  return file_.write([&] {
    const int64_t dev = records_.device_id(d);
    Stmt ins(file_.handle(),
             "INSERT INTO tasks(signature, device_id, codegen_version, state, attempts, worker, lease_deadline_ms, "
             "payload, error) VALUES(?, ?, ?, 'queued', 0, '', 0, ?, '') "
             "ON CONFLICT(signature, device_id, codegen_version) DO UPDATE SET state='queued', attempts=0, worker='', "
             "lease_deadline_ms=0, payload=excluded.payload, error='' WHERE tasks.state='failed'",
             file_.path().string());
    ins.bind(1, signature).bind(2, dev).bind(3, codegen_version).bind_blob(4, payload).step();
    Stmt q(file_.handle(), "SELECT id FROM tasks WHERE signature=? AND device_id=? AND codegen_version=?", file_.path().string());
    q.bind(1, signature).bind(2, dev).bind(3, codegen_version);
    check(q.step(), file_.path().string(), ": task lookup failed");
    return q.i64(0);
  });
}

void JobQueue::link_job_task(int64_t job, int64_t task) {
  file_.write([&] {
    Stmt j(file_.handle(), "SELECT count(*) FROM jobs WHERE id=?", file_.path().string());
    check(j.bind(1, job).step() && j.i64(0) > 0, file_.path().string(), ": no job ", job);
    Stmt t(file_.handle(), "SELECT count(*) FROM tasks WHERE id=?", file_.path().string());
    check(t.bind(1, task).step() && t.i64(0) > 0, file_.path().string(), ": no task ", task);
    Stmt q(file_.handle(), "INSERT OR IGNORE INTO job_tasks(job_id, task_id) VALUES(?, ?)", file_.path().string());
    q.bind(1, job).bind(2, task).step();
  });
}

std::vector<TaskRecord> JobQueue::job_tasks(int64_t job) {
  Stmt q(file_.handle(), kTaskColumns + "JOIN job_tasks jt ON jt.task_id=t.id WHERE jt.job_id=? ORDER BY t.id",
         file_.path().string());
  q.bind(1, job);
  return read_tasks(q);
}

std::optional<TaskRecord> JobQueue::task(int64_t id) {
  Stmt q(file_.handle(), kTaskColumns + "WHERE t.id=?", file_.path().string());
  q.bind(1, id);
  auto found = read_tasks(q);
  if (found.empty()) return std::nullopt;
  return std::move(found.front());
}

std::vector<TaskRecord> JobQueue::tasks_in_state(TaskState state) {
  Stmt q(file_.handle(), kTaskColumns + "WHERE t.state=? ORDER BY t.id", file_.path().string());
  q.bind(1, task_state_name(state));
  return read_tasks(q);
}

std::vector<int64_t> JobQueue::task_ids_in_state(TaskState state) {
  Stmt q(file_.handle(), "SELECT id FROM tasks WHERE state=? ORDER BY id", file_.path().string());
  q.bind(1, task_state_name(state));
  std::vector<int64_t> ids;
  while (q.step()) ids.push_back(q.i64(0));
  return ids;
}

bool JobQueue::any_in_state(TaskState state) {
  Stmt q(file_.handle(), "SELECT EXISTS(SELECT 1 FROM tasks WHERE state=?)", file_.path().string());
  return q.bind(1, task_state_name(state)).step() && q.i64(0) != 0;
}

std::map<std::string, int64_t> JobQueue::task_counts() {
  Stmt q(file_.handle(), "SELECT state, count(*) FROM tasks GROUP BY state", file_.path().string());
  std::map<std::string, int64_t> out;
  while (q.step()) out[q.text(0)] = q.i64(1);
  return out;
}

std::optional<int64_t> JobQueue::first_queued_task(int64_t job) {
  Stmt q(file_.handle(),
         "SELECT jt.task_id FROM job_tasks jt JOIN tasks t ON t.id=jt.task_id WHERE jt.job_id=? AND t.state='queued' "
         "ORDER BY jt.task_id LIMIT 1",
         file_.path().string());
  if (!q.bind(1, job).step()) return std::nullopt;
  return q.i64(0);
}

void JobQueue::lease_task(int64_t id, const std::string& worker, int64_t deadline_ms) {
  file_.write([&] {
    Stmt q(file_.handle(),
           "UPDATE tasks SET state='leased', worker=?, lease_deadline_ms=?, attempts=attempts+1 WHERE id=? AND "
           "state='queued'",
           file_.path().string());
    q.bind(1, worker).bind(2, deadline_ms).bind(3, id).step();
    if (file_.changes() == 1) return;
    Stmt s(file_.handle(), "SELECT state FROM tasks WHERE id=?", file_.path().string());
    check(s.bind(1, id).step(), file_.path().string(), ": no task ", id);
    fail(file_.path().string(), ": task ", id, " is ", s.text(0), ", not queued: it cannot be leased");
  });
}

void JobQueue::requeue_task(int64_t id, bool attempt_counts) {
  file_.write([&] {
    Stmt s(file_.handle(), "SELECT count(*) FROM tasks WHERE id=?", file_.path().string());
    check(s.bind(1, id).step() && s.i64(0) > 0, file_.path().string(), ": no task ", id);
    Stmt q(file_.handle(),
           "UPDATE tasks SET state='queued', worker='', lease_deadline_ms=0, error='', "
           "attempts=CASE WHEN ? = 0 AND state='leased' AND attempts > 0 THEN attempts - 1 ELSE attempts END "
           "WHERE id=? AND state IN ('leased', 'failed')",
           file_.path().string());
    q.bind(1, static_cast<int64_t>(attempt_counts ? 1 : 0)).bind(2, id).step();
  });
}

bool JobQueue::extend_task(int64_t id, const std::string& payload) {
  return file_.write([&] {
    Stmt s(file_.handle(), "SELECT count(*) FROM tasks WHERE id=?", file_.path().string());
    check(s.bind(1, id).step() && s.i64(0) > 0, file_.path().string(), ": no task ", id);
    Stmt q(file_.handle(),
           "UPDATE tasks SET state='queued', attempts=0, worker='', lease_deadline_ms=0, error='', payload=? WHERE id=? "
           "AND state='done'",
           file_.path().string());
    q.bind_blob(1, payload).bind(2, id).step();
    return file_.changes() == 1;
  });
}

int JobQueue::requeue_leased() {
  return file_.write([&] {
    Stmt q(file_.handle(),
           "UPDATE tasks SET state='queued', worker='', lease_deadline_ms=0, attempts=max(attempts - 1, 0) "
           "WHERE state='leased'",
           file_.path().string());
    q.step();
    return file_.changes();
  });
}

bool JobQueue::finish_task(int64_t id, TaskState state, const std::string& error,
                           const std::vector<Measurement>& results) {
  check(state == TaskState::kDone || state == TaskState::kFailed, file_.path().string(), ": task ", id, " cannot finish as ",
        task_state_name(state));
  return file_.write([&] {
    Stmt t(file_.handle(), kTaskColumns + "WHERE t.id=?", file_.path().string());
    t.bind(1, id);
    const auto found = read_tasks(t);
    check(!found.empty(), file_.path().string(), ": no task ", id);
    const TaskRecord& task = found.front();
    if (task.state == TaskState::kDone) return false;
    for (const Measurement& m : results) {
      check(m.signature == task.signature && m.device == task.device && m.codegen_version == task.codegen_version,
            file_.path().string(), ": task ", id, " (", task.signature, " on ", task.device.str(), ", codegen ",
            task.codegen_version, ") got a measurement of ", m.signature, " on ", m.device.str(), ", codegen ",
            m.codegen_version);
      records_.insert_measurement(m);
    }
    Stmt q(file_.handle(), "UPDATE tasks SET state=?, error=?, lease_deadline_ms=0 WHERE id=?", file_.path().string());
    q.bind(1, task_state_name(state)).bind(2, error).bind(3, id).step();
    return true;
  });
}

JobProgress JobQueue::job_progress(int64_t job) {
  Stmt j(file_.handle(), "SELECT count(*) FROM jobs WHERE id=?", file_.path().string());
  check(j.bind(1, job).step() && j.i64(0) > 0, file_.path().string(), ": no job ", job);
  JobProgress p;
  Stmt q(file_.handle(),
         "SELECT count(*), sum(t.state='queued'), sum(t.state='leased'), sum(t.state='done'), sum(t.state='failed') "
         "FROM job_tasks jt JOIN tasks t ON t.id=jt.task_id WHERE jt.job_id=?",
         file_.path().string());
  if (q.bind(1, job).step()) {
    p.tasks = static_cast<int>(q.i64(0));
    p.queued = static_cast<int>(q.i64(1));
    p.leased = static_cast<int>(q.i64(2));
    p.done = static_cast<int>(q.i64(3));
    p.failed = static_cast<int>(q.i64(4));
  }
  Stmt m(file_.handle(),
         "SELECT count(*) FROM job_tasks jt JOIN tasks t ON t.id=jt.task_id JOIN measurements m ON "
         "m.signature=t.signature AND m.device_id=t.device_id AND m.codegen_version=t.codegen_version "
         "WHERE jt.job_id=?",
         file_.path().string());
  if (m.bind(1, job).step()) p.measurements = m.i64(0);
  return p;
}

std::map<std::string, int64_t> JobQueue::job_measurements_by_status(int64_t job) {
  Stmt q(file_.handle(),
         "SELECT m.status, count(*) FROM job_tasks jt JOIN tasks t ON t.id=jt.task_id JOIN measurements m ON "
         "m.signature=t.signature AND m.device_id=t.device_id AND m.codegen_version=t.codegen_version "
         "WHERE jt.job_id=? GROUP BY m.status",
         file_.path().string());
  q.bind(1, job);
  std::map<std::string, int64_t> out;
  while (q.step()) out[q.text(0)] = q.i64(1);
  return out;
}

QueueStats JobQueue::stats() {
  QueueStats s;
  s.models = file_.scalar("SELECT count(*) FROM models");
  s.model_bytes = file_.scalar("SELECT coalesce(sum(length(bytes)), 0) FROM models");
  Stmt files(file_.handle(), "SELECT file FROM models WHERE file <> ''", file_.path().string());
  while (files.step()) {
    const std::string file = files.text(0);
    const size_t slash = file.find('/');  // DIGEST.files/MODEL.onnx: the whole directory
    const std::filesystem::path path = model_dir() / (slash == std::string::npos ? file : file.substr(0, slash));
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(path, ec)) {
        if (e.is_regular_file(ec)) s.model_bytes += static_cast<int64_t>(e.file_size(ec));
      }
    } else {
      const auto size = std::filesystem::file_size(path, ec);
      if (!ec) s.model_bytes += static_cast<int64_t>(size);
    }
  }
  s.jobs = file_.scalar("SELECT count(*) FROM jobs");
  s.unfinished_jobs = file_.scalar("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')");
  s.tasks = file_.scalar("SELECT count(*) FROM tasks");
  s.open_tasks = file_.scalar("SELECT count(*) FROM tasks WHERE state IN ('queued', 'leased')");
  s.payload_bytes = file_.scalar("SELECT coalesce(sum(length(payload)), 0) FROM tasks");
  return s;
}

GcResult JobQueue::gc() {
  return file_.write([&] {
    const std::string finished =
        "state='done' AND length(payload) > 0 AND id NOT IN (SELECT jt.task_id FROM job_tasks jt JOIN jobs j ON "
        "j.id=jt.job_id WHERE j.state IN ('queued', 'running'))";
    GcResult r;
    Stmt q(file_.handle(), "SELECT count(*), coalesce(sum(length(payload)), 0) FROM tasks WHERE " + finished,
           file_.path().string());
    if (q.step()) {
      r.tasks_cleared = q.i64(0);
      r.bytes_cleared = q.i64(1);
    }
    Stmt u(file_.handle(), "UPDATE tasks SET payload=x'' WHERE " + finished, file_.path().string());
    u.step();
    return r;
  });
}

}  // namespace fusetune::storage
