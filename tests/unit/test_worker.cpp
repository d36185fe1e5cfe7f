// The worker's parts on real processes: the wire format's sub-graphs (same signature; weights drawn
// by the receiver, not sent),
// garbage frames, a worker's hellos to a coordinator that does not answer, the device list of a
// machine, and the supervised measuring child (worker/sandbox.h) facing correct, wrong,
// out-of-bounds, crashing and hanging kernels, run through the real fusetune executable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <thread>
#include <zmq.hpp>

#include "backend/cuda.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "core/error.h"
#include "core/sha256.h"
#include "coordinator/job_planner.h"
#include "core/signature.h"
#include "graph_helpers.h"
#include "planner/device.h"
#include "planner/library_call.h"
#include "planner/in_place.h"
#include "planner/library_match.h"
#include "planner/select.h"
#include "proto/wire.h"
#include "simt/executor.h"
#include "simt/module.h"
#include "unit/manual_clock.h"
#include "worker/compile_pool.h"
#include "worker/daemon.h"
#include "worker/machine.h"
#include "worker/sandbox.h"

namespace fusetune {
namespace {

TEST(Wire, SubgraphsOfEveryGroupRoundTripWithTheSameSignature) {
  const Graph g = testing::load_test_model("bert");
  const planner::ModelPlan plan = planner::plan_model(g, planner::find_device("h100"));
  ASSERT_GT(plan.compared.size(), plan.groups.size());  // parts are weighed too
  for (const planner::GroupPlan& gp : plan.compared) {
    const wire::Subgraph s = wire::to_subgraph(g, gp.group);
    wire::Subgraph parsed;
    ASSERT_TRUE(parsed.ParseFromString(s.SerializeAsString()));
    const Graph sub = wire::from_subgraph(parsed);
    std::vector<int> all(sub.nodes().size());
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(subgraph_signature(sub, all).digest, gp.signature) << gp.group.pattern;
    EXPECT_EQ(sub.outputs().size(), gp.group.outputs.size()) << gp.group.pattern;
  }
}

// Additive masks travel as they are, never drawn as uniform noise of +-10,000 (LLaMA float16's
// causal mask of 0 and -10000 once was: the reference's float16 additions of such values then
// differed from a kernel's float ones in the softmax): one of float16's lowest finite value,
// -65504 (a sentinel, as exporters of float16 decoders write minus infinity), and one of -10000
// (two distinct values).
class WireMask : public ::testing::TestWithParam<float> {};

TEST_P(WireMask, AnAdditiveMaskTravelsAsItIs) {
  Graph g;
  const int x = testing::add_input(g, "x", DType::kF16, {4, 64});
  std::vector<float> mask_values(64, 0.0f);
  for (size_t i = 32; i < mask_values.size(); ++i) mask_values[i] = GetParam();
  const int mask = g.add_constant("mask", Tensor::from_floats(DType::kF16, {64}, mask_values));
  g.outputs() = {testing::add_op(g, "Softmax", {testing::add_op(g, "Add", {x, mask})})};
  planner::FusionGroup all{{0, 1}, {}, {}, "", 0, {}};
  planner::describe_group(g, all);
  const wire::Subgraph sub = wire::to_subgraph(g, all);
  bool seen = false;
  for (const wire::ValueDef& d : sub.values()) {
    if (d.name() != "mask") continue;
    seen = true;
    EXPECT_FALSE(d.has_generated());
    EXPECT_EQ(d.data().size(), 64u * 2);
  }
  EXPECT_TRUE(seen);
  const Graph back = wire::from_subgraph(sub);
  bool same = false;
  for (size_t v = 0; v < back.values().size(); ++v) {
    if (back.value(static_cast<int>(v)).name == "mask") same = back.value(static_cast<int>(v)).data->to_floats() == mask_values;
  }
  EXPECT_TRUE(same);
}

INSTANTIATE_TEST_SUITE_P(Wire, WireMask, ::testing::Values(-65504.0f, -10000.0f));

TEST(Wire, WeightsStayHomeAndEveryReceiverDrawsTheSameValues) {
  // x @ W + bias, then a Gather by constant indices and an additive float mask of -inf entries.
  Graph g;
  const int x = testing::add_input(g, "x", DType::kF32, {4, 64});
  const int w = testing::random_constant(g, "W", DType::kF32, {64, 64}, 3);
  const int bias = testing::random_constant(g, "bias", DType::kF32, {64}, 4);
  const int scale = g.add_constant("scale", Tensor::scalar_float(DType::kF32, 0.125f));
  std::vector<int64_t> idx = {3, 0, 2};
  const int indices = g.add_constant("indices", Tensor::from_ints(DType::kI64, {3}, idx));
  std::vector<float> mask_values(64, 0.0f);
  mask_values[5] = -std::numeric_limits<float>::infinity();
  const int mask = g.add_constant("mask", Tensor::from_floats(DType::kF32, {64}, mask_values));
  const int y = testing::add_op(g, "MatMul", {x, w});
  const int z = testing::add_op(g, "Add", {y, bias});
  const int s = testing::add_op(g, "Mul", {z, scale});
  const int m = testing::add_op(g, "Add", {s, mask});
  const int out = testing::add_op(g, "Gather", {m, indices}, testing::attrs({{"axis", int64_t{0}}}));
  g.outputs() = {out};
  planner::FusionGroup all{{0, 1, 2, 3, 4}, {}, {}, "", 0, {}};
  planner::describe_group(g, all);
  const wire::Subgraph sub = wire::to_subgraph(g, all);
  std::map<std::string, const wire::ValueDef*> by_name;
  for (const wire::ValueDef& d : sub.values()) by_name[d.name()] = &d;
  for (const char* weight : {"W", "bias"}) {
    EXPECT_TRUE(by_name.at(weight)->has_generated()) << weight;
    EXPECT_TRUE(by_name.at(weight)->data().empty()) << weight;
  }
  for (const char* kept : {"scale", "indices", "mask"}) {  // folded into code, indices, a mask of -inf
    EXPECT_FALSE(by_name.at(kept)->has_generated()) << kept;
    EXPECT_FALSE(by_name.at(kept)->data().empty()) << kept;
  }
  const std::string bytes = sub.SerializeAsString();
  EXPECT_LT(bytes.size(), 64 * 64 * 4 / 4) << "the weights travelled";
  // Two receivers draw the same weight, with the original's mean and standard deviation; the
  // signature is the original's (a weight's values are not part of it).
  wire::Subgraph again;
  ASSERT_TRUE(again.ParseFromString(bytes));
  const Graph a = wire::from_subgraph(sub), b = wire::from_subgraph(again);
  const int drawn = static_cast<int>(std::distance(sub.values().begin(),
      std::find_if(sub.values().begin(), sub.values().end(), [](const wire::ValueDef& d) { return d.name() == "W"; })));
  const std::vector<double> da = a.value(drawn).data->to_doubles(), db = b.value(drawn).data->to_doubles();
  EXPECT_EQ(da, db);
  const std::vector<double> original = g.value(w).data->to_doubles();
  auto moments = [](const std::vector<double>& v) {
    double sum = 0, sq = 0;
    for (double e : v) sum += e, sq += e * e;
    const double mean = sum / static_cast<double>(v.size());
    return std::pair<double, double>{mean, std::sqrt(sq / static_cast<double>(v.size()) - mean * mean)};
  };
  const auto [mean_o, sd_o] = moments(original);
  const auto [mean_d, sd_d] = moments(da);
  EXPECT_NEAR(mean_d, mean_o, 0.05 * sd_o);
  EXPECT_NEAR(sd_d, sd_o, 0.05 * sd_o);
  EXPECT_NE(da, original);
  std::vector<int> nodes(a.nodes().size());
  std::iota(nodes.begin(), nodes.end(), 0);
  EXPECT_EQ(subgraph_signature(a, nodes).digest, subgraph_signature(g, all.nodes).digest);
  // A generated value that claims data, or bounds no weight has, is refused with its name.
  wire::Subgraph bad = sub;
  for (wire::ValueDef& d : *bad.mutable_values()) {
    if (d.name() == "W") d.mutable_generated()->set_stddev(1e300);
  }
  try {
    wire::from_subgraph(bad);
    ADD_FAILURE() << "an impossible weight was drawn";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'W'"), std::string::npos) << e.what();
  }
  (void)y, (void)z, (void)s, (void)m;
}

TEST(Wire, GarbageAndForeignVersionsAreErrorsNotCrashes) {
  const std::string garbage = "\xff\xfe this is not protobuf \x01\x02";
  EXPECT_THROW(wire::decode(garbage.data(), garbage.size()), Error);
  wire::Envelope empty;
  const std::string no_body = empty.SerializeAsString();
  EXPECT_THROW(wire::decode(no_body.data(), no_body.size()), Error);
  wire::Envelope future;
  future.set_version(wire::kProtocolVersion + 7);
  future.mutable_heartbeat();
  const std::string bytes = future.SerializeAsString();
  try {
    wire::decode(bytes.data(), bytes.size());
    FAIL() << "a message from a future protocol version was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("speaks versions"), std::string::npos) << e.what();
  }
  wire::Envelope ok;
  ok.mutable_heartbeat()->add_tasks(3);
  const std::string good = wire::encode(ok);
  EXPECT_EQ(wire::decode(good.data(), good.size()).heartbeat().tasks(0), 3);
}

// A task over a group of one node of two float inputs a and b, whose candidates are hand-written
// host kernels doing right and wrong things: by default an Add of two vectors of 37 elements.
struct AddTask {
  wire::ChildRequest request;
  int64_t elements[3] = {37, 37, 37};  // of a, b and the output
  explicit AddTask(const std::string& op = "Add", const Shape& a_shape = {37}, const Shape& b_shape = {37}) {
    Graph g;
    const int a = testing::add_input(g, "a", DType::kF32, a_shape);
    const int b = testing::add_input(g, "b", DType::kF32, b_shape);
    const int c = testing::add_op(g, op, {a, b});
    g.outputs() = {c};
    elements[0] = numel(a_shape);
    elements[1] = numel(b_shape);
    elements[2] = numel(g.value(c).shape);
    planner::FusionGroup add{{0}, {}, {}, "", 0, {}};
    planner::describe_group(g, add);
    *request.mutable_graph() = wire::to_subgraph(g, add);
    wire::Policy& p = *request.mutable_policy();
    p.set_seed(7);
    p.set_warmup(1);
    p.set_min_repeats(3);
    p.set_max_repeats(5);
    p.set_min_time_ms(0.1);
  }
  // Compiles the candidates for the host, as a worker's daemon does before its child runs them.
  void compile_all() const {
    std::vector<wire::Candidate> cs;
    for (const auto& c : request.candidates()) cs.push_back(c.candidate());
    worker::CompilePool pool("host", 2);
    for (const worker::CompileOutput& o : pool.compile(cs)) ASSERT_TRUE(o.ok) << o.error;
  }
  // `prelude`: text at file scope before the kernel (a declaration the body needs).
  void add(const std::string& name, const std::string& body, const std::string& prelude = "") {
    wire::Candidate& c = *request.add_candidates()->mutable_candidate();
    c.set_config(name);
    c.set_kernel(name);
    c.set_grid(1);
    c.set_threads(32);
    // CUDA text as the code generator writes it (the host worker runs it on the SIMT executor);
    // thread 0 runs `body` unless the body names threadIdx itself.
    const bool all_threads = body.find("threadIdx") != std::string::npos;
    c.set_cuda_source(codegen::emit_cuda({}) + prelude + "extern \"C\" __global__ void __launch_bounds__(32) " + name +
                      "(FT_GLOBAL(const float) a, FT_GLOBAL(const float) b, FT_GLOBAL(float) out) {\n" +
                      (all_threads ? body : "  if (threadIdx.x == 0) { " + body + " }") + "\n}\n");
    c.set_source_digest(sha256_hex(c.cuda_source()));
    const char* names[] = {"a", "b", "out"};
    for (int k = 0; k < 3; ++k) {
      wire::ParamSpec& ps = *c.add_params();
      ps.set_name(names[k]);
      ps.set_dtype(1);
      ps.set_elements(elements[k]);
      ps.set_output(k == 2);
      ps.set_value(k);
    }
  }
};

// A worker whose hellos nobody answers backs off: the first retry hello_retry_ms after the first
// hello, each next one twice as late (with +-20% jitter) up to the maximum. The daemon reads a
// ManualClock: while it stands still no hello follows, however long the test looks; moved to just
// short of 0.8 times the wait, still none; moved past 1.2 times it, one.
TEST(WorkerDaemon, UnansweredHellosBackOff) {
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.bind("inproc://fusetune-hello-backoff");
  testing::ManualClock clock;
  worker::WorkerOptions o;
  o.coordinator = "inproc://fusetune-hello-backoff";
  o.device = "host";
  o.executable = FUSETUNE_BINARY;
  o.worker_id = "backoff";
  o.hello_retry_ms = 100;
  o.hello_retry_max_ms = 400;
  o.quiet = true;
  o.clock = &clock;
  worker::WorkerDaemon daemon(context, o);
  std::atomic<bool> stop{false};
  std::thread t([&] { daemon.run(stop); });
  // Whether a hello reaches the router within `ms` of real time.
  auto hello_within = [&](int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      zmq::pollitem_t items[] = {{static_cast<void*>(router), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 1, std::chrono::milliseconds(20));
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      zmq::message_t id, body;
      if (!router.recv(id, zmq::recv_flags::none) || !router.recv(body, zmq::recv_flags::none)) return false;
      if (wire::decode(body.data(), body.size()).has_hello()) return true;
    }
    return false;
  };
  EXPECT_TRUE(hello_within(10000)) << "no first hello";
  for (int k = 0; k < 5; ++k) {
    const int wait = std::min(100 << k, 400);
    clock.advance(std::chrono::milliseconds(wait * 8 / 10 - 1));
    EXPECT_FALSE(hello_within(300)) << "retry " << k + 1 << " came before 0.8 times its wait of " << wait << " ms";
    clock.advance(std::chrono::milliseconds(wait * 4 / 10 + 2));
    EXPECT_TRUE(hello_within(10000)) << "retry " << k + 1 << " did not come by 1.2 times its wait of " << wait << " ms";
  }
  stop = true;
  t.join();
}

// --device: a list of "host" and CUDA ordinals, or "all"; a device that is absent is named.
TEST(WorkerMachine, TheDeviceListNamesWhatIsAbsent) {
  EXPECT_EQ(worker::resolve_devices("host"), std::vector<std::string>{"host"});
  EXPECT_EQ(worker::resolve_devices("host,host,host"), (std::vector<std::string>{"host", "host", "host"}));
  std::string why;
  const int gpus = backend::cuda_device_count(&why);
  if (gpus > 0) {
    EXPECT_EQ(worker::resolve_devices("all").size(), static_cast<size_t>(gpus));
  } else {
    try {
      worker::resolve_devices("all");
      ADD_FAILURE() << "--device all succeeded on a machine without a GPU";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--device all: no CUDA device on this machine"), std::string::npos) << e.what();
    }
  }
  try {
    worker::resolve_devices("host," + std::to_string(gpus));
    ADD_FAILURE() << "a device beyond the machine's was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device " + std::to_string(gpus)), std::string::npos) << e.what();
  }
  try {
    worker::resolve_devices("host,gpu");
    ADD_FAILURE() << "'gpu' was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'gpu' is neither"), std::string::npos) << e.what();
  }
}

TEST(Sandbox, FaultsKillOnlyTheChildAndEveryCandidateGetsItsStatus) {
  AddTask t;
  t.add("right", "for (int i = 0; i < 37; ++i) out[i] = a[i] + b[i];");
  t.add("wrong", "for (int i = 0; i < 37; ++i) out[i] = a[i] - b[i];");
  t.add("overrun", "for (int i = 0; i < 38; ++i) out[i] = a[i] + b[i];");
  t.add("partial", "for (int i = 0; i < 36; ++i) out[i] = a[i] + b[i];");
  t.add("segfault", "*(volatile int*)0 = 1;");
  t.add("after_segfault", "for (int i = 0; i < 37; ++i) out[i] = b[i] + a[i];");
  t.add("hang", "for (;;) { __asm__ volatile(\"\"); }");
  t.add("trap", "__builtin_trap();");
  t.add("last", "for (int i = 0; i < 37; ++i) out[i] = a[i] + b[i];");
  t.add("race", "for (int i = 0; i < 37; ++i) out[i] = a[i] + b[i] + 0.0f * threadIdx.x;");
  ASSERT_NO_FATAL_FAILURE(t.compile_all());
  worker::Sandbox sandbox(FUSETUNE_BINARY, "host");
  const std::vector<wire::CandidateResult> r = sandbox.run(t.request, 3000);
  ASSERT_EQ(r.size(), 10u);
  auto expect = [&](size_t k, const std::string& status, const std::string& detail = "") {
    EXPECT_EQ(r[k].config(), t.request.candidates(static_cast<int>(k)).candidate().config());
    EXPECT_EQ(r[k].status(), status) << r[k].config() << ": " << r[k].detail();
    EXPECT_NE(r[k].detail().find(detail), std::string::npos) << r[k].config() << ": " << r[k].detail();
  };
  expect(0, "ok");
  EXPECT_GT(r[0].median_us(), 0);
  EXPECT_GE(r[0].repeats(), 3);
  EXPECT_LE(r[0].min_us(), r[0].median_us());
  EXPECT_LE(r[0].median_us(), r[0].max_us());
  expect(1, "wrong_result", "output");
  expect(2, "check_failed", "memcheck: kernel overrun: out-of-bounds load of 4 bytes on global 'a' element 37: thread 0 of block 0 at kernels.cu:");
  expect(3, "wrong_result", "output");
  expect(4, "runtime_fault", "SIGSEGV");
  expect(5, "ok");
  expect(6, "timeout", "3000 ms");
  expect(7, "runtime_fault", "signal");
  expect(8, "ok");
  expect(9, "check_failed", "racecheck: kernel race: write-after-write hazard on global 'out'");
  EXPECT_EQ(sandbox.restarts(), 3);  // after the segfault, the hang and the trap
}

// A task's reference values are the child's work before its candidates', once for all of them:
// a MatMul of 1,024 x 8,192 by 8,192 x 1,024, which the reference computes in over a second here
// (measured by the child and reported), does not count against a candidate's 600 ms timeout (a
// candidate takes about 70 ms here unloaded; 300 ms ran out under a full ctest on 2 cores), and each
// candidate gets its own verdict (wrong results here: each writes one element). Bounded on its own,
// a reference past Policy.reference_timeout_ms is a timeout of every candidate, named as the
// reference's, in one child: the candidates share it, so none is tried again.
TEST(Sandbox, TheReferenceHasItsOwnLimitAndNoCandidatesTimeoutRunsMeanwhile) {
  AddTask t("MatMul", {1024, 8192}, {8192, 1024});
  for (const char* name : {"first", "second", "third"}) t.add(name, "out[0] = 0.0f;");
  ASSERT_NO_FATAL_FAILURE(t.compile_all());
  worker::Sandbox sandbox(FUSETUNE_BINARY, "host");
  const std::vector<wire::CandidateResult> r = sandbox.run(t.request, 600);
  ASSERT_EQ(r.size(), 3u);
  for (const wire::CandidateResult& x : r) EXPECT_EQ(x.status(), "wrong_result") << x.config() << ": " << x.detail();
  EXPECT_GT(sandbox.reference_s(), 0.6) << "the reference must outlast a candidate's timeout for this test to show anything";
  std::printf("reference values computed in %.2f s\n", sandbox.reference_s());
  EXPECT_EQ(sandbox.restarts(), 0);

  t.request.mutable_policy()->set_reference_timeout_ms(100);
  worker::Sandbox bounded(FUSETUNE_BINARY, "host");
  const std::vector<wire::CandidateResult> b = bounded.run(t.request, 600);
  ASSERT_EQ(b.size(), 3u);
  for (const wire::CandidateResult& x : b) {
    EXPECT_EQ(x.status(), "timeout") << x.config();
    EXPECT_NE(x.detail().find("reference values were not computed within 100 ms"), std::string::npos) << x.detail();
  }
  EXPECT_EQ(bounded.restarts(), 0);
}

// The measuring child runs generated code under no_new_privs and a seccomp filter
// (worker/confine.h): a kernel's system() cannot start its shell and its command never runs, its socket() gets
// -1, and its execl() kills the child (SIGSYS), which costs that candidate only. Each kernel sums
// right only when its call was refused, so "ok" means refused. The control runs the system()
// kernel in this process, unconfined, where its command does run.
TEST(Sandbox, GeneratedCodeInTheMeasuringChildStartsNoProcessAndOpensNoSocket) {
  const std::filesystem::path marker =
      std::filesystem::temp_directory_path() / ("fusetune_confine_" + std::to_string(::getpid()));
  std::filesystem::remove(marker);
  const std::string sum = "for (int i = 0; i < 37; ++i) out[i] = a[i] + b[i];";
  const std::string touch = "\"touch " + marker.string() + "\"";
  AddTask t;
  // system() answers 127 << 8 when its shell cannot be started, 0 when the command ran.
  t.add("system_call", "int rc = system(" + touch + "); " + sum + " if (rc == 0) out[0] = -1.0f;");
  t.add("socket_call", "int fd = socket(2, 1, 0); " + sum + " if (fd != -1) out[0] = -1.0f;",
        "extern \"C\" int socket(int, int, int);\n");
  t.add("exec_call", "execl(\"/bin/sh\", \"sh\", \"-c\", " + touch + ", (char*)0); " + sum,
        "extern \"C\" int execl(const char*, const char*, ...);\n");
  t.add("after", sum);
  ASSERT_NO_FATAL_FAILURE(t.compile_all());
  worker::Sandbox sandbox(FUSETUNE_BINARY, "host");
  const std::vector<wire::CandidateResult> r = sandbox.run(t.request, 20000);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].status(), "ok") << "system(): " << r[0].detail();
  EXPECT_EQ(r[1].status(), "ok") << "socket(): " << r[1].detail();
  EXPECT_EQ(r[2].status(), "runtime_fault") << "execl(): " << r[2].detail();
  EXPECT_NE(r[2].detail().find("SIGSYS"), std::string::npos) << r[2].detail();
  EXPECT_EQ(r[3].status(), "ok") << r[3].detail();
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a command of generated code ran in the measuring child";
  // The control: the same system() kernel, unconfined in this process, runs its command.
  simt::Module m(t.request.candidates(0).candidate().cuda_source());
  std::vector<float> a(37, 1.0f), b(37, 2.0f), out(37);
  simt::launch(m.kernel("system_call"), {a.data(), b.data(), out.data()}, {37 * 4, 37 * 4, 37 * 4}, {1, 32, 0}, {});
  EXPECT_TRUE(std::filesystem::exists(marker)) << "control: the system() kernel did not run its command unconfined";
  std::filesystem::remove(marker);
}

// Policy::interleave: the two candidates are timed in turn in one child, so both have the same
// number of runs; when one fails to verify, the other is timed alone.
TEST(Sandbox, AnInterleavedPairIsTimedInTurnAndAFailedHalfLeavesTheOtherAlone) {
  AddTask t;
  t.request.mutable_policy()->set_interleave(true);
  t.request.mutable_policy()->set_min_repeats(7);
  t.request.mutable_policy()->set_max_repeats(9);
  t.add("one_pass", "for (int i = 0; i < 37; ++i) out[i] = a[i] + b[i];");
  t.add("two_passes", "for (int i = 0; i < 37; ++i) out[i] = a[i]; for (int i = 0; i < 37; ++i) out[i] = out[i] + b[i];");
  ASSERT_NO_FATAL_FAILURE(t.compile_all());
  worker::Sandbox sandbox(FUSETUNE_BINARY, "host");
  const std::vector<wire::CandidateResult> r = sandbox.run(t.request, 10000);
  ASSERT_EQ(r.size(), 2u);
  for (const wire::CandidateResult& x : r) {
    EXPECT_EQ(x.status(), "ok") << x.config() << ": " << x.detail();
    EXPECT_EQ(x.interleaved_with(), x.config() == "one_pass" ? "two_passes" : "one_pass");
    EXPECT_GE(x.repeats(), 7);
    EXPECT_LE(x.min_us(), x.ci_low_us());
    EXPECT_LE(x.ci_low_us(), x.median_us());
    EXPECT_LE(x.median_us(), x.ci_high_us());
    EXPECT_LE(x.ci_high_us(), x.max_us());
  }
  EXPECT_EQ(r[0].repeats(), r[1].repeats());  // one run of each per round
  EXPECT_EQ(r[0].config(), "one_pass");
  AddTask broken;
  broken.request.mutable_policy()->set_interleave(true);
  broken.add("wrong", "for (int i = 0; i < 37; ++i) out[i] = a[i] - b[i];");
  broken.add("right", "for (int i = 0; i < 37; ++i) out[i] = a[i] + b[i];");
  const std::vector<wire::CandidateResult> s = sandbox.run(broken.request, 10000);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].status(), "wrong_result");
  EXPECT_EQ(s[0].interleaved_with(), "");
  EXPECT_EQ(s[1].status(), "ok") << s[1].detail();
  EXPECT_EQ(s[1].interleaved_with(), "");  // timed alone
  EXPECT_GT(s[1].median_us(), 0);
  EXPECT_EQ(sandbox.restarts(), 0);
}

TEST(CompilePool, ACompileErrorIsAStatusAndTheCacheAnswersRepeats) {
  AddTask t;
  t.add("fine", "for (int i = 0; i < 37; ++i) out[i] = a[i] + b[i];");
  t.add("broken", "this is not C++;");
  std::vector<wire::Candidate> cs;
  for (const auto& c : t.request.candidates()) cs.push_back(c.candidate());
  worker::CompilePool pool("host", 2);
  const auto first = pool.compile(cs);
  EXPECT_TRUE(first[0].ok);
  EXPECT_FALSE(first[1].ok);
  EXPECT_NE(first[1].error.find("host build of the CUDA text failed"), std::string::npos) << first[1].error;
  const auto again = pool.compile(cs);
  EXPECT_TRUE(again[0].cached);
  EXPECT_TRUE(again[1].cached);
  EXPECT_FALSE(again[1].ok);
}

// A candidate on the wire: `cfg` of the group `all` of `sub` lowered as kernel `name`.
wire::Candidate candidate_of(const Graph& sub, const planner::FusionGroup& all, const planner::TileConfig& cfg,
                             const std::string& name) {
  return coordinator::wire_candidate(codegen::lower_group(sub, all, cfg, name), cfg);
}

// The group's sub-graph as a child request gets it, and the group of all its nodes.
std::pair<Graph, planner::FusionGroup> subgraph_of(const Graph& g, const planner::FusionGroup& group, wire::ChildRequest& req) {
  *req.mutable_graph() = wire::to_subgraph(g, group);
  Graph sub = wire::from_subgraph(req.graph());
  planner::FusionGroup all;
  all.nodes.resize(sub.nodes().size());
  std::iota(all.nodes.begin(), all.nodes.end(), 0);
  planner::describe_group(sub, all);
  return {std::move(sub), std::move(all)};
}

// A library call's candidate (cuBLASLt on the GPU, its host equivalent here) is measured in the
// confined child even when no kernel was ever built on this machine: a module of library calls
// only builds nothing (the child may start no compiler).
TEST(Sandbox, ALibraryCandidateMeasuresWithAnEmptyKernelCache) {
  Graph g;
  const int x = testing::add_input(g, "x", DType::kF32, {8, 16});
  const int w = testing::random_constant(g, "w", DType::kF32, {16, 32}, 7);
  const int bias = testing::random_constant(g, "b", DType::kF32, {32}, 8);
  testing::add_op(g, "Add", {testing::add_op(g, "MatMul", {x, w}), bias});
  const planner::FusionGroup group = testing::whole_graph_group(g);
  ASSERT_TRUE(planner::match_library_call(g, group).has_value()) << "MatMul + bias is a cuBLASLt call";
  planner::TileConfig library;
  library.tile = {8, 32};
  library.library = "cublasLt";
  const std::filesystem::path cache = std::filesystem::temp_directory_path() / ("fusetune_empty_cache_" + std::to_string(::getpid()));
  std::filesystem::remove_all(cache);
  ::setenv("FUSETUNE_CACHE_DIR", cache.c_str(), 1);
  wire::ChildRequest req;
  const auto [sub, all] = subgraph_of(g, group, req);
  req.mutable_policy()->set_seed(5);
  req.mutable_policy()->set_min_repeats(2);
  req.mutable_policy()->set_max_repeats(3);
  *req.add_candidates()->mutable_candidate() = candidate_of(sub, all, library, "lib");
  worker::Sandbox sandbox(FUSETUNE_BINARY, "host");
  const std::vector<wire::CandidateResult> r = sandbox.run(req, 20000);
  ::unsetenv("FUSETUNE_CACHE_DIR");
  std::filesystem::remove_all(cache);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status(), "ok") << r[0].config() << ": " << r[0].detail();
}

// Real generated candidates of a real group: all verified and timed in the child.
TEST(Sandbox, GeneratedCandidatesOfARealGroupVerifyAndTime) {
  const Graph g = testing::load_test_model("bert");
  const planner::ModelPlan plan = planner::plan_model(g, planner::find_device("h100"));
  const planner::GroupPlan* pick = nullptr;
  for (const planner::GroupPlan& gp : plan.groups) {
    if (gp.group.pattern.find("Softmax") != std::string::npos) pick = &gp;
  }
  ASSERT_NE(pick, nullptr);
  wire::ChildRequest req;
  const auto [sub, all] = subgraph_of(g, pick->group, req);
  req.mutable_policy()->set_seed(3);
  req.mutable_policy()->set_min_repeats(2);
  req.mutable_policy()->set_max_repeats(3);
  std::vector<wire::Candidate> cs;
  for (size_t k = 0; k < pick->candidates.size() && cs.size() < 3; ++k) {
    if (!pick->candidates[k].cost.valid) continue;
    cs.push_back(candidate_of(sub, all, pick->candidates[k].config, "c" + std::to_string(k)));
    *req.add_candidates()->mutable_candidate() = cs.back();
  }
  worker::CompilePool pool("host", 2);
  for (const worker::CompileOutput& o : pool.compile(cs)) ASSERT_TRUE(o.ok) << o.error;
  worker::Sandbox sandbox(FUSETUNE_BINARY, "host");
  for (const wire::CandidateResult& r : sandbox.run(req, 20000)) {
    EXPECT_EQ(r.status(), "ok") << r.config() << ": " << r.detail();
    EXPECT_GT(r.median_us(), 0);
  }
  EXPECT_EQ(sandbox.restarts(), 0);
}

// A candidate that updates its data in place (planner/in_place.h) travels with its output bound
// to its data's parameter: the child verifies it on that buffer and times it. The same kernel with
// a buffer of its own fails verification, one bound to the indices' buffer (another type) or to a
// parameter that is not an input before it is a runtime fault of its own; the child serves the
// next candidate after each.
TEST(Sandbox, AnInPlaceCandidateVerifiesOnItsDataBufferAndABadBindingFailsAlone) {
  Graph g;
  const int x = testing::add_input(g, "x", DType::kF32, {8, 64});
  const int d = testing::add_op(g, "Relu", {x});
  const int ids = g.add_constant("ids", Tensor::from_ints(DType::kI64, {2, 1}, std::vector<int64_t>{2, 5}));
  g.outputs().push_back(testing::add_op(g, "ScatterND", {d, ids, testing::add_input(g, "u", DType::kF32, {2, 64})}));
  planner::FusionGroup group;
  group.nodes = {1};
  planner::describe_group(g, group);
  ASSERT_TRUE(planner::InPlaceUpdates(g).eligible(group));
  const planner::TileConfig cfg = planner::in_place_candidates(g, group, planner::find_device("h100"), {}).front().config;
  wire::ChildRequest req;
  const auto [sub, all] = subgraph_of(g, group, req);
  req.mutable_policy()->set_seed(4);
  req.mutable_policy()->set_min_repeats(2);
  req.mutable_policy()->set_max_repeats(3);
  std::vector<wire::Candidate> cs;
  for (int updates : {1, 0, 2, 4, 1}) {  // data's buffer; its own; the indices'; past the inputs; data's again
    wire::Candidate c = candidate_of(sub, all, cfg, "c" + std::to_string(cs.size()));
    wire::ParamSpec& out = *c.mutable_params(c.params_size() - 1);
    ASSERT_TRUE(out.output());
    EXPECT_EQ(out.updates_input(), 1) << "the output is bound to the first input, the data";
    out.set_updates_input(updates);
    cs.push_back(c);
    *req.add_candidates()->mutable_candidate() = c;
  }
  worker::CompilePool pool("host", 2);
  for (const worker::CompileOutput& o : pool.compile(cs)) ASSERT_TRUE(o.ok) << o.error;
  worker::Sandbox sandbox(FUSETUNE_BINARY, "host");
  const std::vector<wire::CandidateResult> r = sandbox.run(req, 20000);
  ASSERT_EQ(r.size(), 5u);
  for (size_t k : {size_t{0}, size_t{4}}) {
    EXPECT_EQ(r[k].status(), "ok") << r[k].detail();
    EXPECT_GT(r[k].median_us(), 0);
  }
  EXPECT_EQ(r[1].status(), "wrong_result") << r[1].detail();
  EXPECT_EQ(r[2].status(), "runtime_fault") << r[2].detail();
  EXPECT_NE(r[2].detail().find("cannot update input 1 in place"), std::string::npos) << r[2].detail();
  EXPECT_EQ(r[3].status(), "runtime_fault") << r[3].detail();
  EXPECT_NE(r[3].detail().find("updates input 3 in place, which is not an input parameter before it"), std::string::npos)
      << r[3].detail();
}

}  // namespace
}  // namespace fusetune
