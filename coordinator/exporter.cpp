#include "coordinator/exporter.h"

#include <algorithm>
#include <memory>

#include "core/error.h"

namespace fusetune::coordinator {

namespace {

// The bundle of a job planned from `planner`, as files sorted by name.
std::vector<wire::ModelFile> bundle_of(const JobPlanner& planner, const Measured& m) {
  const runtime::Bundle bundle = planner.bundle(planner.final_plan(m.times), m.digests);
  std::vector<wire::ModelFile> out;
  for (const auto& [name, data] : runtime::bundle_files(bundle)) {
    wire::ModelFile& f = out.emplace_back();
    f.set_path(name);
    f.set_data(data.data(), data.size());
  }
  std::sort(out.begin(), out.end(), [](const wire::ModelFile& a, const wire::ModelFile& b) { return a.path() < b.path(); });
  return out;
}

// The identity whose measurements decide a job: the one it was bound to, or for a job done before
// identities, its device class's rows.
storage::DeviceKey decided_by(const storage::JobRecord& r) { return r.identity.value_or(r.device); }

std::shared_ptr<const JobPlanner> plan_again(const storage::JobRecord& r, const std::string& onnx) {
  return std::make_shared<const JobPlanner>(onnx, r.model_name, r.device.name, JobOptions::from_json(r.options));
}

}  // namespace

std::pair<storage::JobRecord, std::string> Exporter::exportable(int64_t id) {
  const auto r = queue_.job(id);
  check(r.has_value(), "no job ", id);
  check(r->state == storage::JobState::kDone, "job ", id, " is ", storage::job_state_name(r->state),
        ", not done: nothing to export yet");
  const auto model = queue_.model(r->model_digest);
  check(model.has_value(), "job ", id, ": model ", r->model_digest.substr(0, 12), " is missing from the database");
  return {*r, model->onnx};
}

std::vector<wire::ModelFile> Exporter::export_job(int64_t id) {
  const auto [r, onnx] = exportable(id);
  const auto planner = plan_again(r, onnx);
  return bundle_of(*planner, decisions_.measured(*planner, decided_by(r)));
}

void Exporter::export_async(const std::string& client, int64_t id) {
  const auto [r, onnx] = exportable(id);
  auto failed = [this, client, id](const std::string& error) {
    log_(LogIds{id, 0, ""}, "export of job " + std::to_string(id) + " for " + peer_name(client) + " failed: " + error, LogLevel::kWarn);
    outbox_.send_error(client, error);
  };
  pool_.post(
      [this, client, id, r = r, onnx = onnx, failed]() -> Offload::Completion {
        auto planner = plan_again(r, onnx);
        return [this, client, id, r, planner, failed] {
          auto m = std::make_shared<Measured>(decisions_.measured(*planner, decided_by(r)));
          pool_.post(
              [this, client, id, planner, m]() -> Offload::Completion {
                auto bundle = std::make_shared<std::vector<wire::ModelFile>>(bundle_of(*planner, *m));
                return [this, client, id, bundle] {
                  wire::Envelope e;
                  e.mutable_export_reply()->set_job_id(id);
                  for (wire::ModelFile& f : *bundle) *e.mutable_export_reply()->add_files() = std::move(f);
                  outbox_.send(client, std::move(e));
                };
              },
              failed);
        };
      },
      failed);
}

}  // namespace fusetune::coordinator
