#include "coordinator/submissions.h"

#include <functional>
#include <future>
#include <set>

#include "coordinator/prepared.h"
#include "core/error.h"
#include "core/files.h"

namespace fusetune::coordinator {

namespace fs = std::filesystem;

namespace {

// A submission admitted: its model's digest, the .onnx's path in the model's directory, and the
// model imported and planned.
struct Admitted {
  std::string digest;
  std::string onnx;
  std::shared_ptr<Prepared> prepared;
};

// Checks that the staged files are exactly those the Submit names (each whole, nothing more);
// imports and plans the model with `plan` while the files are digested on another thread (each
// reads them once); then moves them into the model store. The staged directory is gone
// afterwards, whatever happens.
Admitted admit(const fs::path& db, const wire::Submit& s, const Staged& st,
               const std::function<std::shared_ptr<Prepared>(const fs::path& onnx)>& plan) {
  struct Cleanup {
    const fs::path& dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{st.dir};
  check(s.files_size() > 0, "submit: no model file");
  std::vector<std::string> paths;
  std::set<std::string> seen;
  for (const wire::ModelFile& f : s.files()) {
    const std::string rel = path_inside(f.path(), "submit: model file").string();
    check(seen.insert(rel).second, "submit: model file '", rel, "' is named twice");
    const auto got = st.received.find(rel);
    const uint64_t want = f.size();
    check(got != st.received.end(), "submit: model file '", rel, "' was not uploaded");
    check(got->second == want, "submit: model file '", rel, "' is ", want, " bytes and ", got->second,
          " arrived (an upload cut short, or pieces sent twice)");
    std::error_code ec;
    check(fs::file_size(st.dir / rel, ec) == want && !ec, "submit: model file '", rel, "' is not ", want,
          " bytes on disk");
    paths.push_back(rel);
  }
  check(st.received.size() == paths.size(), "submit: ", st.received.size() - paths.size(),
        " uploaded files are not named by the submission");
  std::future<std::string> digest = std::async(std::launch::async, [&] { return model_digest(st.dir, paths); });
  Admitted a;
  a.onnx = paths.front();
  a.prepared = plan(st.dir / a.onnx);  // its mapped weights stay valid when the directory moves
  a.digest = digest.get();
  storage::JobQueue::store_model_files(db, a.digest, st.dir);
  return a;
}

}  // namespace

Submissions::Submissions(fs::path db, UploadQuotas quotas, storage::JobQueue& queue, JobManager& jobs, Outbox& outbox,
                         Offload& pool, Offload& disk, const EventLog& log)
    : db_(std::move(db)), queue_(queue), jobs_(jobs), outbox_(outbox), pool_(pool), disk_(disk), log_(log),
      uploads_(db_, quotas) {
  std::error_code ec;
  fs::remove_all(storage::JobQueue::staging_dir(db_), ec);  // uploads do not outlive a coordinator
  lay_out_legacy_models();
  for (auto f = fs::recursive_directory_iterator(queue_.model_dir(), ec); !ec && f != fs::recursive_directory_iterator();
       f.increment(ec)) {
    if (f->is_regular_file(ec)) stored_bytes_ += f->file_size(ec);
  }
}

// Models a schema 4 or older file stores as one blob (a serialized Submit) get their files laid
// out like a new submission's, once, when the coordinator starts.
void Submissions::lay_out_legacy_models() {
  for (const std::string& digest : queue_.legacy_models()) {
    wire::Submit stored;
    check(stored.ParseFromString(queue_.legacy_model_bytes(digest)) && stored.files_size() > 0, db_.string(),
          ": the stored files of model ", digest.substr(0, 12), " are unreadable");
    storage::ModelFiles files;
    for (wire::ModelFile& f : *stored.mutable_files()) files.emplace_back(f.path(), std::move(*f.mutable_data()));
    queue_.replace_legacy_model(digest, files);
    log_("model " + digest.substr(0, 12) + " stored by an older fusetune: its files are laid out beside the database");
  }
}

// A submission's record: checked and filled on the loop (no file, an unknown device: refused at
// once).
storage::JobRecord Submissions::job_record(const wire::Submit& s) const {
  check(s.files_size() > 0, "submit: no model file");
  storage::JobRecord rec;
  rec.model_name = s.model_name().empty() ? s.files(0).path() : s.model_name();
  rec.device = job_device_key(s.device().empty() ? "host" : s.device());
  rec.options = JobOptions::from_json(s.options()).to_json();
  return rec;
}

int64_t Submissions::submit(wire::Submit s) {
  check(s.upload().empty(), "submit: an upload is for a coordinator's clients, not in process");
  storage::JobRecord rec = job_record(s);
  const Staged staged = stage_inline(db_, s);
  Admitted a = admit(db_, s, staged, [&](const fs::path& onnx) {
    return prepare(onnx, rec.model_name, rec.device.name, JobOptions::from_json(rec.options));
  });
  rec.model_digest = a.digest;
  return jobs_.accept(std::move(rec), a.onnx, std::move(a.prepared));
}

// From a client: the files (uploaded before in pieces, or carried by the Submit) are checked,
// digested and stored, and the model imported and planned, on the pool while the loop goes on
// serving workers; the client's answer (the job id, or the error) follows, and the tasks are
// lowered after it (JobManager::accept).
void Submissions::submit_async(const std::string& client, wire::Submit&& s) {
  storage::JobRecord rec = job_record(s);
  const Staged uploaded = s.upload().empty() ? Staged{} : uploads_.take(client, s.upload());
  uint64_t bytes = 0;  // what the model store grows by when the submission is stored
  for (const wire::ModelFile& f : s.files()) bytes += s.upload().empty() ? f.data().size() : f.size();
  if (s.upload().empty()) uploads_.check_quotas(client, "(inline)", 0, bytes, stored_bytes_);
  auto submit = std::make_shared<wire::Submit>(std::move(s));
  pool_.post(
      [this, client, rec, submit, uploaded, bytes, db_path = db_]() mutable -> Offload::Completion {
        const Staged staged = submit->upload().empty() ? stage_inline(db_path, *submit) : uploaded;
        Admitted a = admit(db_path, *submit, staged, [&](const fs::path& onnx) {
          return prepare(onnx, rec.model_name, rec.device.name, JobOptions::from_json(rec.options), false);
        });
        rec.model_digest = a.digest;
        return [this, client, rec, bytes, onnx = a.onnx, prepared = a.prepared] {
          stored_bytes_ += bytes;  // moved into the store by admit
          wire::Envelope r;
          try {
            r.mutable_job()->set_job_id(jobs_.accept(rec, onnx, prepared));
          } catch (const Error& e) {
            log_("submission of " + rec.model_name + " from " + peer_name(client) + " failed: " + e.what(), LogLevel::kWarn);
            return outbox_.send_error(client, e.what());
          }
          outbox_.send(client, std::move(r));
        };
      },
      [this, client, name = rec.model_name, dir = uploaded.dir](const std::string& error) {
        std::error_code ec;
        if (!dir.empty()) fs::remove_all(dir, ec);
        log_("submission of " + name + " from " + peer_name(client) + " failed: " + error, LogLevel::kWarn);
        outbox_.send_error(client, error);
      });
}

// A piece of an upload: written to its file under the staging directory by the disk thread,
// acknowledged once it is there. Refused (one line naming the field) when its name, path or size
// is out of bounds.
void Submissions::on_upload(const std::string& client, wire::Upload&& u) {
  const Uploads::Piece piece = uploads_.accept(client, u, stored_bytes_, Uploads::Clock::now());
  if (piece.fresh) {
    std::error_code ec;
    fs::remove_all(piece.dir, ec);  // a previous upload of the same name and client, abandoned
  }
  auto data = std::make_shared<wire::Upload>(std::move(u));
  disk_.post(
      [this, client, key = piece.key, file = piece.file, data]() -> Offload::Completion {
        Uploads::write_piece(file, data->offset(), data->data());
        return [this, client, key, data] {
          uploads_.written(key);
          wire::Envelope r;
          wire::UploadAck& ack = *r.mutable_upload_ack();
          ack.set_upload(data->upload());
          ack.set_path(data->path());
          ack.set_offset(data->offset());
          outbox_.send(client, std::move(r));
        };
      },
      [this, client, key = piece.key](const std::string& error) {
        uploads_.failed(key, error);
        log_("upload from " + peer_name(client) + " failed: " + error, LogLevel::kWarn);
        outbox_.send_error(client, error);
      });
}

// Uploads nothing came for in Uploads::kIdle (a client gone) are dropped with their files.
void Submissions::drop_idle(Uploads::Clock::time_point now) {
  for (const auto& [key, dir] : uploads_.drop_idle(now)) {
    log_("upload '" + key.second + "' from " + peer_name(key.first) + " dropped: nothing came for " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(Uploads::kIdle).count()) + " s");
    disk_.post(
        [dir]() -> Offload::Completion {
          fs::remove_all(dir);
          return [] {};
        },
        [](const std::string&) {});
  }
}

}  // namespace fusetune::coordinator
