#include "search/records.h"

#include <algorithm>

namespace fusetune::search {

namespace {

// Every field of an identity, in one string (DeviceKey::str() leaves empty fields out).
std::string identity(const storage::DeviceKey& d) {
  return d.name + '\x1f' + d.arch + '\x1f' + d.product + '\x1f' + std::to_string(d.compute_capability) + '\x1f' + d.driver +
         '\x1f' + d.toolkit;
}

// The decision, digests and interleaved pairs of a group's successes.
void decide(GroupRecords& g, const std::vector<storage::Measurement>& ok) {
  std::map<std::string, std::vector<storage::Measurement>> by_config;
  for (const storage::Measurement& r : ok) {
    g.digests.emplace(r.config, r.source_digest);
    if (!r.interleaved_with.empty()) {
      g.interleaved.insert({r.config, r.interleaved_with});
      g.interleaved.insert({r.interleaved_with, r.config});
    }
    by_config[r.config].push_back(r);
  }
  g.decision = decide_group(by_config);
}

}  // namespace

const GroupRecords& MemoryRecords::of(const std::string& signature, const storage::DeviceKey& device) {
  const Key key{signature, identity(device)};
  if (auto it = read_.find(key); it != read_.end()) return it->second;
  GroupRecords g;
  std::vector<storage::Measurement> ok;
  std::map<std::string, int> transients;
  for (const storage::Measurement& m : measurements_[key]) {
    g.seen.insert(m.config);
    if (m.status == storage::Status::kOk) ok.push_back(m);
    if (!storage::is_transient(m.status) || ++transients[m.config] >= storage::kMaxTransientFailures) g.settled.insert(m.config);
  }
  // The fastest first, as the database's top_k gives them (each configuration's digest is its fastest's).
  std::stable_sort(ok.begin(), ok.end(), [](const auto& a, const auto& b) { return a.median_us < b.median_us; });
  decide(g, ok);
  return read_[key] = std::move(g);
}

void MemoryRecords::record(const storage::Measurement& m) {
  if (m.codegen_version != codegen_version_) return;
  const Key key{m.signature, identity(m.device)};
  measurements_[key].push_back(m);
  read_.erase(key);
}

const GroupRecords& DbRecords::of(const std::string& signature, const storage::DeviceKey& device) {
  const auto key = std::make_pair(signature, device.str());
  if (auto it = read_.find(key); it != read_.end()) return it->second;
  GroupRecords g;
  decide(g, db_.top_k(signature, device, codegen_version_, 100000));
  g.seen = db_.configs_measured(signature, device, codegen_version_);
  g.settled = db_.configs_settled(signature, device, codegen_version_);
  return read_[key] = std::move(g);
}

void DbRecords::record(const storage::Measurement& m) {
  db_.record(m);
  forget(m.signature);
}

void DbRecords::forget(const std::string& signature) {
  for (auto it = read_.begin(); it != read_.end();) {
    it = it->first.first == signature ? read_.erase(it) : std::next(it);
  }
}

}  // namespace fusetune::search
