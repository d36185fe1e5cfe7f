#include "storage/search_db.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "storage/statement.h"

namespace fusetune::storage {

namespace {

Measurement row_to_measurement(const Stmt& q) {
  Measurement m;
  m.signature = q.text(0);
  m.codegen_version = static_cast<int>(q.i64(1));
  m.config = q.text(2);
  m.source_digest = q.text(3);
  m.status = status_from_name(q.text(4));
  m.median_us = q.f64(5);
  m.min_us = q.f64(6);
  m.max_us = q.f64(7);
  m.repeats = static_cast<int>(q.i64(8));
  m.registers = static_cast<int>(q.i64(9));
  m.shared_bytes = q.i64(10);
  m.spill_bytes = static_cast<int>(q.i64(11));
  m.compile_ms = q.f64(12);
  m.worker = q.text(13);
  m.detail = q.text(14);
  m.measured_at = q.i64(15);
  m.ci_low_us = q.f64(16);
  m.ci_high_us = q.f64(17);
  m.interleaved_with = q.text(18);
  m.device = read_device(q, 19);
  return m;
}

const std::string kMeasurementColumns =
    "m.signature, m.codegen_version, m.config, m.source_digest, m.status, m.median_us, m.min_us, m.max_us, m.repeats, "
    "m.registers, m.shared_bytes, m.spill_bytes, m.compile_ms, m.worker, m.detail, m.measured_at, m.ci_low_us, "
    "m.ci_high_us, m.interleaved_with, " +
    device_columns("d");

// The export file's first line names its format; a file without one is format 1 (no identities).
constexpr int kExportFormat = 2;

nlohmann::json device_json(const DeviceKey& d) {
  return {{"device", d.name}, {"arch", d.arch}, {"product", d.product}, {"compute_capability", d.compute_capability},
          {"driver", d.driver}, {"toolkit", d.toolkit}};
}

DeviceKey device_from_json(const nlohmann::json& j) {
  return {j.at("device"), j.at("arch"), j.value("product", ""), j.value("compute_capability", 0),
          j.value("driver", ""), j.value("toolkit", "")};
}

}  // namespace

std::string DeviceKey::str() const {
  std::string s = name + " (" + arch;
  if (!product.empty()) s += ", " + product;
  if (compute_capability != 0) s += ", cc " + std::to_string(compute_capability);
  if (!driver.empty()) s += ", driver " + driver;
  if (!toolkit.empty()) s += ", " + toolkit;
  return s + ")";
}

std::string status_name(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kCompileError: return "compile_error";
    case Status::kRuntimeFault: return "runtime_fault";
    case Status::kWrongResult: return "wrong_result";
    case Status::kTimeout: return "timeout";
    case Status::kResourceLimit: return "resource_limit";
    case Status::kCheckFailed: return "check_failed";
  }
  return "?";
}

Status status_from_name(const std::string& name) {
  for (Status s : {Status::kOk, Status::kCompileError, Status::kRuntimeFault, Status::kWrongResult, Status::kTimeout,
                   Status::kResourceLimit, Status::kCheckFailed}) {
    if (status_name(s) == name) return s;
  }
  fail("unknown measurement status '", name, "'");
}

SearchDb::SearchDb(const std::filesystem::path& path) : file_(path) {}

SearchDb::~SearchDb() = default;

std::optional<int64_t> SearchDb::find_device(const DeviceKey& d) {
  Stmt q(file_.handle(),
         "SELECT id FROM devices WHERE name=? AND arch=? AND product=? AND compute_capability=? AND driver=? AND "
         "toolkit=?",
         file_.path().string());
  q.bind(1, d.name).bind(2, d.arch).bind(3, d.product).bind(4, d.compute_capability).bind(5, d.driver).bind(6, d.toolkit);
  if (!q.step()) return std::nullopt;
  return q.i64(0);
}

int64_t SearchDb::device_id(const DeviceKey& d) {
  if (auto id = find_device(d)) return *id;
  Stmt ins(file_.handle(),
           "INSERT INTO devices(name, arch, product, compute_capability, driver, toolkit) VALUES(?, ?, ?, ?, ?, ?)",
           file_.path().string());
  ins.bind(1, d.name).bind(2, d.arch).bind(3, d.product).bind(4, d.compute_capability).bind(5, d.driver).bind(6, d.toolkit);
  ins.step();
  return file_.last_insert_id();
}

void SearchDb::commit_workload(const std::string& signature, const std::string& canonical_form) {
  file_.write([&] {
    Stmt q(file_.handle(), "INSERT OR IGNORE INTO workloads(signature, canonical_form) VALUES(?, ?)", file_.path().string());
    q.bind(1, signature).bind(2, canonical_form).step();
  });
}

int64_t SearchDb::insert_measurement(const Measurement& m) {
  const int64_t dev = device_id(m.device);
  Stmt cand(file_.handle(),
            "INSERT OR IGNORE INTO candidates(signature, codegen_version, config, source_digest) VALUES(?,?,?,?)",
            file_.path().string());
  cand.bind(1, m.signature).bind(2, m.codegen_version).bind(3, m.config).bind(4, m.source_digest).step();
  Stmt cq(file_.handle(), "SELECT id FROM candidates WHERE signature=? AND codegen_version=? AND config=? AND source_digest=?",
          file_.path().string());
  cq.bind(1, m.signature).bind(2, m.codegen_version).bind(3, m.config).bind(4, m.source_digest);
  check(cq.step(), file_.path().string(), ": candidate lookup failed");
  const int64_t candidate = cq.i64(0);
  Stmt ins(file_.handle(),
           "INSERT INTO measurements(signature, device_id, codegen_version, config, source_digest, status, median_us, "
           "min_us, max_us, repeats, registers, shared_bytes, spill_bytes, compile_ms, worker, detail, measured_at, "
           "candidate_id, ci_low_us, ci_high_us, interleaved_with) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
           file_.path().string());
  ins.bind(1, m.signature).bind(2, dev).bind(3, m.codegen_version).bind(4, m.config);
  ins.bind(5, m.source_digest).bind(6, status_name(m.status)).bind(7, m.median_us).bind(8, m.min_us);
  ins.bind(9, m.max_us).bind(10, m.repeats).bind(11, m.registers);
  ins.bind(12, m.shared_bytes).bind(13, m.spill_bytes).bind(14, m.compile_ms);
  ins.bind(15, m.worker).bind(16, m.detail).bind(17, m.measured_at != 0 ? m.measured_at : now_s());
  ins.bind(18, candidate).bind(19, m.ci_low_us).bind(20, m.ci_high_us).bind(21, m.interleaved_with);
  ins.step();
  const int64_t id = file_.last_insert_id();
  if (m.status == Status::kOk) {
    Stmt best(file_.handle(),
              "INSERT INTO best_plans(signature, device_id, codegen_version, measurement_id, median_us) "
              "VALUES(?,?,?,?,?) ON CONFLICT(signature, device_id, codegen_version) DO UPDATE SET "
              "measurement_id=excluded.measurement_id, median_us=excluded.median_us "
              "WHERE excluded.median_us < best_plans.median_us",
              file_.path().string());
    best.bind(1, m.signature).bind(2, dev).bind(3, m.codegen_version).bind(4, id).bind(5, m.median_us);
    best.step();
  }
  return id;
}

int64_t SearchDb::record(const Measurement& m) {
  return file_.write([&] { return insert_measurement(m); });
}

namespace {

// The rule measured() states, over one config's rows (GROUP BY config): a row that is not a
// transient failure (?6, ?7), or ?8 transient ones.
constexpr const char* kSettled =
    " GROUP BY config HAVING count(*) FILTER (WHERE status NOT IN (?6, ?7)) > 0"
    " OR count(*) FILTER (WHERE status IN (?6, ?7)) >= ?8";

Stmt& bind_settled(Stmt& q) {
  q.bind(6, status_name(Status::kTimeout)).bind(7, status_name(Status::kRuntimeFault));
  q.bind(8, static_cast<int64_t>(kMaxTransientFailures));
  return q;
}

}  // namespace

bool SearchDb::measured(const std::string& signature, const DeviceKey& d, int codegen_version, const std::string& config) {
  const auto dev = find_device(d);
  if (!dev) return false;
  Stmt q(file_.handle(),
         std::string("SELECT config FROM measurements WHERE signature=?1 AND device_id=?2 AND codegen_version=?4 AND config=?5") +
             kSettled,
         file_.path().string());
  q.bind(1, signature).bind(2, *dev).bind(4, static_cast<int64_t>(codegen_version)).bind(5, config);
  return bind_settled(q).step();
}

std::set<std::string> SearchDb::configs_settled(const std::string& signature, const DeviceKey& d, int codegen_version) {
  std::set<std::string> out;
  const auto dev = find_device(d);
  if (!dev) return out;
  Stmt q(file_.handle(),
         std::string("SELECT config FROM measurements WHERE signature=?1 AND device_id=?2 AND codegen_version=?4") + kSettled,
         file_.path().string());
  q.bind(1, signature).bind(2, *dev).bind(4, static_cast<int64_t>(codegen_version));
  bind_settled(q);
  while (q.step()) out.insert(q.text(0));
  return out;
}

std::set<std::string> SearchDb::configs_measured(const std::string& signature, const DeviceKey& d, int codegen_version) {
  std::set<std::string> out;
  const auto dev = find_device(d);
  if (!dev) return out;
  Stmt q(file_.handle(), "SELECT DISTINCT config FROM measurements WHERE signature=? AND device_id=? AND codegen_version=?",
         file_.path().string());
  q.bind(1, signature).bind(2, *dev).bind(3, static_cast<int64_t>(codegen_version));
  while (q.step()) out.insert(q.text(0));
  return out;
}

std::optional<BestPlan> SearchDb::best(const std::string& signature, const DeviceKey& d, int codegen_version) {
  const auto dev = find_device(d);
  if (!dev) return std::nullopt;
  Stmt q(file_.handle(),
         "SELECT m.config, b.median_us, b.measurement_id FROM best_plans b JOIN measurements m ON "
         "m.id=b.measurement_id WHERE b.signature=? AND b.device_id=? AND b.codegen_version=?",
         file_.path().string());
  q.bind(1, signature).bind(2, *dev).bind(3, static_cast<int64_t>(codegen_version));
  if (!q.step()) return std::nullopt;
  return BestPlan{q.text(0), q.f64(1), q.i64(2)};
}

std::vector<Measurement> SearchDb::top_k(const std::string& signature, const DeviceKey& d, int codegen_version, int k) {
  std::vector<Measurement> out;
  const auto dev = find_device(d);
  if (!dev) return out;
  Stmt q(file_.handle(),
         "SELECT " + kMeasurementColumns +
             " FROM measurements m JOIN devices d ON d.id=m.device_id WHERE m.signature=? AND m.device_id=? "
             "AND m.codegen_version=? AND m.status='ok' ORDER BY m.median_us, m.id LIMIT ?",
         file_.path().string());
  q.bind(1, signature).bind(2, *dev).bind(3, static_cast<int64_t>(codegen_version)).bind(4, static_cast<int64_t>(k));
  while (q.step()) out.push_back(row_to_measurement(q));
  return out;
}

std::vector<Measurement> SearchDb::near_top_k(const std::string& signature, const DeviceKey& d, int codegen_version,
                                              int k) {
  Stmt q(file_.handle(),
         "SELECT " + kMeasurementColumns +
             " FROM measurements m JOIN devices d ON d.id=m.device_id WHERE m.signature=? AND d.name=? AND d.arch=? "
             "AND NOT (d.product=? AND d.compute_capability=? AND d.driver=? AND d.toolkit=?) "
             "AND m.codegen_version=? AND m.status='ok' ORDER BY m.median_us, m.id LIMIT ?",
         file_.path().string());
  q.bind(1, signature).bind(2, d.name).bind(3, d.arch).bind(4, d.product).bind(5, d.compute_capability);
  q.bind(6, d.driver).bind(7, d.toolkit).bind(8, static_cast<int64_t>(codegen_version)).bind(9, static_cast<int64_t>(k));
  std::vector<Measurement> out;
  while (q.step()) out.push_back(row_to_measurement(q));
  return out;
}

DbStats SearchDb::stats() {
  DbStats s;
  s.workloads = file_.scalar("SELECT count(*) FROM workloads");
  s.devices = file_.scalar("SELECT count(*) FROM devices");
  s.candidates = file_.scalar("SELECT count(*) FROM candidates");
  s.measurements = file_.scalar("SELECT count(*) FROM measurements");
  s.failures = file_.scalar("SELECT count(*) FROM measurements WHERE status <> 'ok'");
  s.interleaved = file_.scalar("SELECT count(*) FROM measurements WHERE interleaved_with <> ''");
  s.best_plans = file_.scalar("SELECT count(*) FROM best_plans");
  s.schema_version = file_.schema_version();
  s.file_bytes = file_.size_bytes();
  Stmt q(file_.handle(),
         "SELECT " + device_columns("d") +
             ", m.codegen_version, count(*), (SELECT count(*) FROM best_plans b WHERE b.device_id=m.device_id AND "
             "b.codegen_version=m.codegen_version) FROM measurements m JOIN devices d ON d.id=m.device_id "
             "GROUP BY m.device_id, m.codegen_version ORDER BY d.name, d.arch, d.product, d.driver, d.toolkit, "
             "m.codegen_version",
         file_.path().string());
  while (q.step()) {
    s.identities.push_back({read_device(q, 0), static_cast<int>(q.i64(kDeviceColumnCount)),
                            q.i64(kDeviceColumnCount + 1), q.i64(kDeviceColumnCount + 2)});
  }
  return s;
}

int64_t SearchDb::export_to(const std::filesystem::path& file) {
  // A peer's text that is not UTF-8 (a worker's name, a detail, in a database an older fusetune
  // wrote) becomes U+FFFD in its record instead of failing the whole export.
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  std::ofstream out(file, std::ios::trunc);
  check(out.good(), file.string(), ": cannot write the export");
  int64_t n = 0;
  out << nlohmann::json{{"type", "header"}, {"format", "fusetune search export"}, {"format_version", kExportFormat},
                        {"schema_version", kSchemaVersion}, {"fusetune_version", FUSETUNE_VERSION}}
             .dump()
      << "\n";
  {
    Stmt q(file_.handle(), "SELECT signature, canonical_form FROM workloads ORDER BY signature", file_.path().string());
    while (q.step()) {
      out << nlohmann::json{{"type", "workload"}, {"signature", q.text(0)}, {"canonical_form", q.text(1)}}.dump(-1, ' ', false, kReplace)
          << "\n";
      ++n;
    }
  }
  Stmt q(file_.handle(), "SELECT " + kMeasurementColumns + " FROM measurements m JOIN devices d ON d.id=m.device_id ORDER BY m.id",
         file_.path().string());
  while (q.step()) {
    const Measurement m = row_to_measurement(q);
    nlohmann::json j = {{"type", "measurement"}, {"signature", m.signature}, {"codegen_version", m.codegen_version},
                        {"config", m.config}, {"source_digest", m.source_digest}, {"status", status_name(m.status)},
                        {"median_us", m.median_us}, {"min_us", m.min_us}, {"max_us", m.max_us},
                        {"repeats", m.repeats}, {"ci_low_us", m.ci_low_us}, {"ci_high_us", m.ci_high_us},
                        {"interleaved_with", m.interleaved_with}, {"registers", m.registers}, {"shared_bytes", m.shared_bytes},
                        {"spill_bytes", m.spill_bytes}, {"compile_ms", m.compile_ms}, {"worker", m.worker},
                        {"detail", m.detail}, {"measured_at", m.measured_at}};
    j.update(device_json(m.device));
    out << j.dump(-1, ' ', false, kReplace) << "\n";
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
      if (type == "header") {
        check(lineno == 1, "a header after the first line");
        check(j.value("format", "") == "fusetune search export", "not a fusetune search export (format '",
              j.value("format", ""), "')");
        const int format = j.at("format_version");
        check(format >= 1 && format <= kExportFormat, "export format version ", format, " (written by fusetune ",
              j.value("fusetune_version", "?"), ") is not one this fusetune reads (1 to ", kExportFormat,
              "); upgrade fusetune");
        continue;
      }
      if (type == "workload") {
        auto workloads = [&] {
          Stmt q(file_.handle(), "SELECT count(*) FROM workloads", file_.path().string());
          return q.step() ? q.i64(0) : 0;
        };
        const int64_t before = workloads();
        commit_workload(j.at("signature"), j.at("canonical_form"));
        added += workloads() - before;
        continue;
      }
      check(type == "measurement", "unknown record type '", type, "'");
      Measurement m;
      m.signature = j.at("signature");
      m.device = device_from_json(j);
      m.codegen_version = j.at("codegen_version");
      m.config = j.at("config");
      m.source_digest = j.at("source_digest");
      m.status = status_from_name(j.at("status"));
      m.median_us = j.at("median_us");
      m.min_us = j.at("min_us");
      m.max_us = j.at("max_us");
      m.repeats = j.at("repeats");
      m.ci_low_us = j.value("ci_low_us", m.min_us);  // format 1: the widest interval
      m.ci_high_us = j.value("ci_high_us", m.max_us);
      m.interleaved_with = j.value("interleaved_with", "");
      m.registers = j.at("registers");
      m.shared_bytes = j.at("shared_bytes");
      m.spill_bytes = j.at("spill_bytes");
      m.compile_ms = j.at("compile_ms");
      m.worker = j.at("worker");
      m.detail = j.at("detail");
      m.measured_at = j.at("measured_at");
      if (const auto dev = find_device(m.device)) {
        Stmt dup(file_.handle(),
                 "SELECT count(*) FROM measurements WHERE signature=? AND device_id=? AND codegen_version=? AND "
                 "config=? AND measured_at=? AND worker=?",
                 file_.path().string());
        dup.bind(1, m.signature).bind(2, *dev).bind(3, static_cast<int64_t>(m.codegen_version)).bind(4, m.config);
        dup.bind(5, m.measured_at).bind(6, m.worker);
        if (dup.step() && dup.i64(0) > 0) continue;
      }
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
