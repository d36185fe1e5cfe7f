// fuzz_coordinator_seeds DIR: writes the seed corpus of the coordinator's request fuzzer
// (tools/fuzz_coordinator.cpp) into DIR, one file per seed: every message type the coordinator
// serves, valid and as a sequence a real session makes (a worker's hello, a client's submission
// of a small model, inline or uploaded in pieces, the worker's result for the first task, status, export, cancel, bye), and
// some that are wrong (a foreign protocol version, an unknown task, garbage, and each refusal of
// docs/security.md: forged results, foreign configurations, a revoke sent to the coordinator,
// options out of range, hostile names). tests/fuzz/coordinator
// holds its output; the unit tests replay it (FuzzRegressions.CoordinatorCorpus).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "tests/fuzz/coordinator_harness.h"
#include "tests/unit/onnx_builder.h"

using namespace fusetune;
using fuzz::frame;

namespace {

wire::Envelope hello(uint32_t version = wire::kProtocolVersion) {
  wire::Envelope e;
  wire::Hello& h = *e.mutable_hello();
  h.set_worker_id("fuzz-worker");
  h.set_min_version(version);
  h.set_max_version(version);
  h.set_codegen_version(codegen::kCodegenVersion);
  h.set_backend("host");
  h.mutable_device()->set_name("host");
  h.mutable_device()->set_arch("host");
  h.mutable_device()->set_toolkit("c++: fuzz");
  return e;
}

// `names`: the nodes' and the intermediate value's names (a hostile model's: newlines, "*/",
// bytes that are not UTF-8).
wire::Envelope submit(const std::string& options = R"({"candidates": 2, "min_repeats": 1, "max_repeats": 1, "min_time_ms": 0})",
                      const std::vector<std::string>& names = {"relu", "exp", "t"}) {
  testing::OnnxBuilder b;
  b.input("x", 1, {1, 64});
  b.node("Relu", {"x"}, {names[2]}, names[0]);
  b.node("Exp", {names[2]}, {"y"}, names[1]);
  b.output("y", 1, {1, 64});
  wire::Envelope e;
  wire::Submit& s = *e.mutable_submit();
  s.set_model_name("relu_exp.onnx");
  wire::ModelFile& f = *s.add_files();
  f.set_path("relu_exp.onnx");
  f.set_data(b.bytes());
  s.set_device("host");
  s.set_options(options);
  return e;
}

// The same model in Upload pieces (the second piece ends the file), then the Submit naming them.
std::vector<wire::Envelope> uploaded_submit() {
  wire::Envelope whole = submit();
  const std::string bytes = whole.submit().files(0).data();
  std::vector<wire::Envelope> out;
  for (size_t at : {size_t{0}, bytes.size() / 2}) {
    wire::Envelope e;
    wire::Upload& u = *e.mutable_upload();
    u.set_upload("seed");
    u.set_path("relu_exp.onnx");
    u.set_offset(at);
    u.set_data(bytes.substr(at, at == 0 ? bytes.size() / 2 : std::string::npos));
    out.push_back(e);
  }
  wire::Submit& s = *whole.mutable_submit();
  s.set_upload("seed");
  s.mutable_files(0)->clear_data();
  s.mutable_files(0)->set_size(bytes.size());
  out.push_back(whole);
  return out;
}

// A result for `task`; `config` names a candidate the task may not have asked for (a forgery).
wire::Envelope result(int64_t task, const std::string& config = "t=64 th=64", bool abandoned = false) {
  wire::Envelope e;
  wire::TaskResult& r = *e.mutable_result();
  r.set_task_id(task);
  r.set_abandoned(abandoned);
  if (abandoned) return e;
  wire::CandidateResult& c = *r.add_results();
  c.set_config(config);
  c.set_source_digest("0000");
  c.set_status("ok");
  c.set_median_us(3.5);
  c.set_min_us(3.0);
  c.set_max_us(4.0);
  c.set_repeats(5);
  return e;
}

wire::Envelope request(const std::string& what, int64_t job) {
  wire::Envelope e;
  if (what == "status") e.mutable_status()->set_job_id(job);
  if (what == "cancel") e.mutable_cancel()->set_job_id(job);
  if (what == "export") e.mutable_export_request()->set_job_id(job);
  if (what == "heartbeat") e.mutable_heartbeat()->add_tasks(job);
  if (what == "bye") e.mutable_bye();
  if (what == "revoke") e.mutable_revoke()->add_tasks(job);  // the coordinator's to send, not to receive
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_coordinator_seeds DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  std::map<std::string, std::string> seeds = {
      {"hello", frame(0, hello())},
      {"hello_foreign_version", frame(1, hello(99))},
      {"heartbeat_unknown_worker", frame(1, request("heartbeat", 7))},
      {"submit", frame(2, submit())},
      {"session", frame(0, hello()) + frame(2, submit()) + frame(0, result(1)) + frame(3, request("status", 0)) +
                      frame(2, request("export", 1)) + frame(0, request("bye", 0))},
      {"cancel", frame(2, submit()) + frame(2, request("cancel", 1)) + frame(3, request("status", 1))},
      {"result_unknown_task", frame(1, hello()) + frame(1, result(424242))},
      {"export_missing_job", frame(3, request("export", 9))},
      {"garbage", frame(2, std::string("\xff\xfe not an envelope \x01\x02", 24))},
      // Refusals (docs/security.md): a result from a worker not holding the lease, for a
      // configuration never asked or with another digest, a hand-back, a revoke sent to the
      // coordinator, options out of range, a cancel while a worker holds the lease, hostile names.
      {"result_not_lease_holder", frame(0, hello()) + frame(2, submit()) + frame(1, hello()) + frame(1, result(1))},
      {"result_foreign_config", frame(0, hello()) + frame(2, submit()) + frame(0, result(1, "forged config")) +
                                    frame(0, result(1, "t=64 th=64"))},
      {"hand_back", frame(0, hello()) + frame(2, submit()) + frame(0, result(1, "", true)) + frame(0, request("heartbeat", 1))},
      {"revoke_to_coordinator", frame(0, hello()) + frame(0, request("revoke", 1))},
      {"options_out_of_range", frame(2, submit(R"({"timeout_ms": 2147483647, "min_time_ms": 1e12})"))},
      {"cancel_leased", frame(0, hello()) + frame(2, submit()) + frame(3, request("cancel", 1)) + frame(0, result(1))},
      {"hostile_names", frame(0, hello()) + frame(2, submit(R"({"candidates": 1})", {"a\n*/ system(\"id\"); /*", "\xff\xfe",
                                                                                      "v\r\n\xe2\x80\xa8"})) +
                            frame(3, request("status", 0))},
  };
  std::string upload;
  for (const wire::Envelope& e : uploaded_submit()) upload += frame(3, e);
  seeds["upload_then_submit"] = upload + frame(3, request("status", 0));
  for (const auto& [name, bytes] : seeds) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
  }
  std::printf("%zu seeds written to %s\n", seeds.size(), dir.c_str());
  return 0;
}
