// Exporter: a done job's plan as a deployable bundle (runtime/bundle.h's files), for a client's
// ExportRequest or in process (`tune`).
//
// Takes the job queue (the job and its stored model), the decisions read of the database
// (coordinator/decisions.h: the measurements of the identity the job was bound to), the pool, and
// the outbox to answer clients on (the transport). The model is planned again from its stored
// files, the final plan chosen from the measurements and the bundle compiled, the slow parts on
// the pool.
// Guarantees: only a done job exports (else one line saying its state); a job done before device
// identities existed is decided by its device class's rows; the files come sorted by name; a
// failure is logged naming the job and the client, and answered with its reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/decisions.h"
#include "coordinator/event_log.h"
#include "coordinator/offload.h"
#include "coordinator/transport.h"
#include "storage/job_queue.h"

namespace fusetune::coordinator {

class Exporter {
 public:
  Exporter(storage::JobQueue& queue, Decisions& decisions, Offload& pool, Outbox& outbox, const EventLog& log)
      : queue_(queue), decisions_(decisions), pool_(pool), outbox_(outbox), log_(log) {}

  // In process: on the caller's thread.
  std::vector<wire::ModelFile> export_job(int64_t id);
  // From a client: the model planned on the pool, the measurements read on the loop, the bundle
  // compiled on the pool; the client's answer follows.
  void export_async(const std::string& client, int64_t id);

 private:
  // A done job's record and the stored .onnx it was planned from.
  std::pair<storage::JobRecord, std::string> exportable(int64_t id);

  storage::JobQueue& queue_;
  Decisions& decisions_;
  Offload& pool_;
  Outbox& outbox_;
  const EventLog& log_;
};

}  // namespace fusetune::coordinator
