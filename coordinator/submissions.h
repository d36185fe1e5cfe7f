// Submissions: models coming in, from a client's upload pieces or a Submit that carries its files,
// to a job the job manager accepts; and the model store beside the database they end in.
//
// Takes the database's path (the model store and the staging directory are beside it), the upload
// quotas, the job queue (the models' rows), the job manager, the outbox to answer clients on (the
// transport), and two pools: the planning pool and the disk thread (upload pieces are written
// there, never behind planning). A client's Submit is checked on the loop (no file, an unknown device: refused
// at once), then its files are checked against what was uploaded (each whole, nothing more),
// digested and moved into the store, and the model imported and planned, on the pool; the client
// hears the job's id, or the error, when that is done, and the tasks are lowered after.
// Guarantees: the staging directory does not outlive a coordinator (emptied when it starts); a
// model a schema 4 or older file keeps as one blob gets its files laid out once, at start; an
// upload refused, failed or abandoned (nothing for Uploads::kIdle) leaves no file behind; a
// submission that fails stores nothing of its job and says why, naming the file or the quota.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "coordinator/event_log.h"
#include "coordinator/job_manager.h"
#include "coordinator/offload.h"
#include "coordinator/transport.h"
#include "coordinator/uploads.h"
#include "storage/job_queue.h"

namespace fusetune::coordinator {

class Submissions {
 public:
  Submissions(std::filesystem::path db, UploadQuotas quotas, storage::JobQueue& queue, JobManager& jobs, Outbox& outbox,
              Offload& pool, Offload& disk, const EventLog& log);

  // In process (embedded `tune`, tests): plans on the caller's thread. Nothing is stored for a
  // model that does not import or plan; the error says why.
  int64_t submit(wire::Submit s);
  // From a client: answered when planned (the job's id) or failed (the error).
  void submit_async(const std::string& client, wire::Submit&& s);
  // A piece of an upload: written by the disk thread, acknowledged once it is there. Refused (one
  // line naming the field) when its name, path or size is out of bounds.
  void on_upload(const std::string& client, wire::Upload&& u);
  // Uploads nothing came for in Uploads::kIdle (a client gone) are dropped with their files.
  void drop_idle(Uploads::Clock::time_point now);

 private:
  void lay_out_legacy_models();
  storage::JobRecord job_record(const wire::Submit& s) const;

  std::filesystem::path db_;
  storage::JobQueue& queue_;
  JobManager& jobs_;
  Outbox& outbox_;
  Offload& pool_;
  Offload& disk_;
  const EventLog& log_;
  Uploads uploads_;  // uploads under way (coordinator/uploads.h)
  // The model store's bytes (the models stored beside the database): measured when the coordinator
  // starts, grown by each submission's files (a model stored twice counts twice until a restart).
  uint64_t stored_bytes_ = 0;
};

}  // namespace fusetune::coordinator
