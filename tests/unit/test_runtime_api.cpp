// The public runtime API (<fusetune/runtime.h>): a compiled plan of the small CNN, loaded and
// run through it alone, reproduces PyTorch's outputs (test_data_set_0, within 1e-3 relative) from
// set_input/run()/get_output and from run(inputs, outputs, memory) on host memory, on device memory
// bound in place and on device memory copied; several threads running several plans, and one plan
// from several threads, get each its own right answer; bad use (unknown names, wrong sizes, unset
// inputs, missing bundles, pointers that are not the device's) throws RuntimeError naming the
// culprit. On a machine with a GPU the same runs go through "cuda" with device pointers from the
// driver, a plan loaded on one thread and run on others (RuntimeApiCuda; bench/gpu_check.sh runs
// it); elsewhere it says why it did not run.
#include <fusetune/runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "backend/cuda.h"
#include "codegen/lower_group.h"
#include "compiler/compile_bundle.h"
#include "importer/test_data.h"
#include "planner/select.h"
#include "reference/compare.h"
#include "runtime/bundle.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;

const std::string kModelDir = std::string(FUSETUNE_SOURCE_DIR) + "/tests/data/models/cnn_small";

class RuntimeApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("fusetune_runtime_api_" + std::to_string(::getpid()));
    const Graph g = testing::load_test_model("cnn_small");
    const planner::Device d = planner::find_device("h100");
    runtime::write_bundle(compiler::compile_bundle(g, planner::plan_model(g, d), d, "cnn_small"), dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // The plan with every input bound to test_data_set_0, and that data set.
  static std::pair<Plan, importer::TestData> bound_plan() {
    Plan plan = Plan::load(dir_.string(), "host");
    importer::TestData data = importer::load_test_data(kModelDir + "/test_data_set_0");
    std::vector<std::string> names;
    for (const TensorInfo& in : plan.inputs()) names.push_back(in.name);
    const std::vector<Tensor> inputs = importer::bind_inputs(names, data, nullptr);
    for (size_t i = 0; i < inputs.size(); ++i) plan.set_input(names[i], inputs[i].data(), inputs[i].nbytes());
    return {std::move(plan), std::move(data)};
  }

  // The data set's inputs, in the plan's order.
  static std::vector<Tensor> data_inputs(const Plan& plan, const importer::TestData& data) {
    std::vector<std::string> names;
    for (const TensorInfo& in : plan.inputs()) names.push_back(in.name);
    return importer::bind_inputs(names, data, nullptr);
  }

  // Where the outputs in `got` (one buffer per output, in the plan's order) differ from the data
  // set's beyond 1e-3; "" where they match.
  static std::string mismatch(const Plan& plan, const importer::TestData& data, const std::vector<const void*>& got) {
    std::string out;
    for (size_t k = 0; k < plan.outputs().size(); ++k) {
      const Tensor& want = data.outputs[k].tensor;
      Tensor t(want.dtype(), want.shape());
      std::memcpy(t.data(), got[k], t.nbytes());
      const reference::Comparison c = reference::compare(t, want, {1e-3, 0, 1e-3});
      if (!c.ok) out += plan.outputs()[k].name + ": " + c.describe() + "; ";
    }
    return out;
  }

  static std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const RuntimeError& e) {
      return e.what();
    }
    return "(no RuntimeError)";
  }

  static fs::path dir_;
};

fs::path RuntimeApi::dir_;

TEST_F(RuntimeApi, DescribesThePlan) {
  const Plan plan = Plan::load(dir_.string(), "host");
  EXPECT_EQ(plan.backend(), "host");
  EXPECT_FALSE(plan.cuda_graph());
  EXPECT_GT(plan.launches(), 0u);
  ASSERT_EQ(plan.inputs().size(), 1u);
  ASSERT_EQ(plan.outputs().size(), 1u);
  EXPECT_EQ(plan.inputs()[0].shape, (std::vector<int64_t>{1, 3, 16, 16}));
  for (const TensorInfo& t : plan.inputs()) {
    EXPECT_EQ(t.type, ElementType::kFloat32) << t.name;
    EXPECT_EQ(t.bytes(), t.elements() * 4) << t.name;
  }
  EXPECT_EQ(element_type_name(ElementType::kInt64), "int64");
  EXPECT_EQ(element_size(ElementType::kFloat16), 2u);
}

TEST_F(RuntimeApi, MatchesPyTorchOutputs) {
  auto [plan, data] = bound_plan();
  for (int pass = 0; pass < 2; ++pass) {  // a second run on the same inputs gives the same outputs
    plan.run();
    ASSERT_EQ(plan.outputs().size(), data.outputs.size());
    for (size_t k = 0; k < plan.outputs().size(); ++k) {
      const TensorInfo& out = plan.outputs()[k];
      const Tensor& want = data.outputs[k].tensor;
      Tensor got(want.dtype(), want.shape());
      ASSERT_EQ(got.nbytes(), out.bytes()) << out.name;
      plan.get_output(out.name, got.data(), got.nbytes());
      const reference::Comparison c = reference::compare(got, want, {1e-3, 0, 1e-3});
      EXPECT_TRUE(c.ok) << out.name << ": " << c.describe();
    }
  }
}

// 256-byte aligned host memory, as device allocators give it (freed with the object).
struct DeviceLikeMemory {
  explicit DeviceLikeMemory(size_t bytes) : p(std::aligned_alloc(256, (bytes + 511) / 256 * 256)) {}
  ~DeviceLikeMemory() { std::free(p); }
  DeviceLikeMemory(const DeviceLikeMemory&) = delete;
  DeviceLikeMemory& operator=(const DeviceLikeMemory&) = delete;
  unsigned char* bytes(size_t offset = 0) const { return static_cast<unsigned char*>(p) + offset; }
  void* p;
};

TEST_F(RuntimeApi, RunsOnCallersMemoryInPlaceAndByCopy) {
  Plan plan = Plan::load(dir_.string(), "host");
  const importer::TestData data = importer::load_test_data(kModelDir + "/test_data_set_0");
  const std::vector<Tensor> inputs = data_inputs(plan, data);
  ASSERT_EQ(inputs.size(), 1u);
  ASSERT_EQ(plan.outputs().size(), 1u);
  const size_t in_bytes = inputs[0].nbytes(), out_bytes = plan.outputs()[0].bytes();
  // Two sets of aligned places (bound in place: "device" memory is host memory on the host), and
  // one at 4 bytes past alignment (copied); every output poisoned with 0xff (NaN) before a run.
  DeviceLikeMemory a_in(in_bytes), a_out(out_bytes), b_in(in_bytes), b_out(out_bytes), c_in(in_bytes + 4), c_out(out_bytes + 4);
  for (const DeviceLikeMemory* in : {&a_in, &b_in}) std::memcpy(in->bytes(), inputs[0].data(), in_bytes);
  std::memcpy(c_in.bytes(4), inputs[0].data(), in_bytes);
  const auto run = [&](const DeviceLikeMemory& in, const DeviceLikeMemory& out, size_t offset, Memory memory) {
    std::memset(out.bytes(offset), 0xff, out_bytes);
    plan.run({in.bytes(offset)}, {out.bytes(offset)}, memory);
    return mismatch(plan, data, {out.bytes(offset)});
  };
  // Memory at the address of the run before is bound in place; new memory is copied.
  EXPECT_EQ(run(a_in, a_out, 0, Memory::kDevice), "") << "new: copied";
  EXPECT_EQ(run(a_in, a_out, 0, Memory::kDevice), "") << "again: bound in place";
  EXPECT_EQ(run(b_in, b_out, 0, Memory::kDevice), "") << "elsewhere: copied, a's binding released";
  // The runs on b write nothing through a's binding: a's output, poisoned again, stays poisoned.
  std::memset(a_out.bytes(), 0xff, out_bytes);
  EXPECT_EQ(run(b_in, b_out, 0, Memory::kDevice), "") << "b again: bound in place";
  EXPECT_EQ(run(b_in, b_out, 0, Memory::kDevice), "") << "b bound still";
  EXPECT_EQ(a_out.bytes()[0], 0xff);
  EXPECT_EQ(a_out.bytes()[out_bytes - 1], 0xff);
  EXPECT_EQ(run(c_in, c_out, 4, Memory::kDevice), "") << "unaligned: copied";
  EXPECT_EQ(run(c_in, c_out, 4, Memory::kDevice), "") << "unaligned, again: copied";
  EXPECT_EQ(run(a_in, a_out, 0, Memory::kHost), "") << "host memory";
  EXPECT_EQ(run(a_in, a_out, 0, Memory::kDevice), "") << "bound in place once more";
  // The input itself is never written: still the data set's.
  EXPECT_EQ(std::memcmp(a_in.bytes(), inputs[0].data(), in_bytes), 0);
  // The stateful form still works after runs on the caller's memory, and they after it.
  plan.set_input(plan.inputs()[0].name, inputs[0].data(), in_bytes);
  plan.run();
  std::vector<unsigned char> out(out_bytes);
  plan.get_output(plan.outputs()[0].name, out.data(), out_bytes);
  EXPECT_EQ(mismatch(plan, data, {out.data()}), "");
  EXPECT_EQ(run(b_in, b_out, 0, Memory::kDevice), "");
  // An output overlapping an input is not bound (the input would be overwritten while read): the
  // runs copy, and the output is right.
  DeviceLikeMemory shared(std::max(in_bytes, out_bytes));
  for (int pass = 0; pass < 2; ++pass) {
    std::memcpy(shared.bytes(), inputs[0].data(), in_bytes);
    plan.run({shared.bytes()}, {shared.bytes()}, Memory::kDevice);
    EXPECT_EQ(mismatch(plan, data, {shared.bytes()}), "") << "pass " << pass;
  }

  EXPECT_NE(error_of([&] { plan.run({}, {out.data()}); }).find("the plan takes 1 inputs and gives 1 outputs; 0 and 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan.run({nullptr}, {out.data()}); }).find("input '" + plan.inputs()[0].name + "': no memory"),
            std::string::npos);
}

// An output that is a constant (filled when the plan loads, written by no launch) and an output
// that is an input passed through are never bound in place: repeated runs on the same device
// memory return them every time.
TEST_F(RuntimeApi, ConstantAndPassedThroughOutputsAreCopiedEveryRun) {
  Graph g;
  const int x = testing::add_input(g, "x", DType::kF32, {4, 64});
  g.outputs().push_back(testing::add_op(g, "Relu", {x}));
  g.outputs().push_back(testing::random_constant(g, "table", DType::kF32, {8, 32}, 7u));
  g.outputs().push_back(x);
  const fs::path dir = dir_.string() + "_constant";
  const planner::Device d = planner::find_device("h100");
  runtime::write_bundle(compiler::compile_bundle(g, planner::plan_model(g, d), d, "constant_output"), dir);
  Plan plan = Plan::load(dir.string(), "host");
  fs::remove_all(dir);
  ASSERT_EQ(plan.outputs().size(), 3u);
  std::vector<float> in(256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7) - 3.0f;
  const Tensor& table = *g.value(g.outputs()[1]).data;
  DeviceLikeMemory xin(1024), relu(1024), constant(1024), passed(1024);
  std::memcpy(xin.bytes(), in.data(), 1024);
  for (int pass = 0; pass < 3; ++pass) {  // the second and third bind what may be bound
    for (const DeviceLikeMemory* out : {&relu, &constant, &passed}) std::memset(out->bytes(), 0xff, 1024);
    plan.run({xin.bytes()}, {relu.bytes(), constant.bytes(), passed.bytes()}, Memory::kDevice);
    const float* r = reinterpret_cast<const float*>(relu.bytes());
    for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(r[i], std::max(in[i], 0.0f)) << "pass " << pass << ", element " << i;
    EXPECT_EQ(std::memcmp(constant.bytes(), table.data(), table.nbytes()), 0) << "pass " << pass;
    EXPECT_EQ(std::memcmp(passed.bytes(), in.data(), 1024), 0) << "pass " << pass;
  }
}

// Several threads at once: each loads its own plan of one of two models and runs it, and all of
// them also run one shared plan; every run's outputs are checked against the model's data set, on
// inputs scaled per thread and run (the expected outputs of a scaled input come from a run of the
// shared plan alone, before the threads start).
TEST_F(RuntimeApi, SeveralThreadsRunSeveralPlansAndShareOne) {
  const fs::path nerf = dir_.string() + "_nerf";
  {
    const Graph g = testing::load_test_model("nerf_mlp");
    const planner::Device d = planner::find_device("h100");
    runtime::write_bundle(compiler::compile_bundle(g, planner::plan_model(g, d), d, "nerf_mlp"), nerf);
  }
  struct Model {
    std::string dir;
    std::vector<Tensor> inputs;       // the data set's
    std::vector<std::vector<Tensor>> expected;  // by scale
  };
  constexpr int kScales = 3, kThreads = 4, kRuns = 3;
  const auto scaled = [](const std::vector<Tensor>& in, int scale) {
    std::vector<Tensor> out;
    for (const Tensor& t : in) {
      Tensor s(t.dtype(), t.shape());
      std::vector<float> v = t.to_floats();
      for (float& x : v) x *= 1.0f + 0.25f * static_cast<float>(scale);
      s.set_floats(v);
      out.push_back(std::move(s));
    }
    return out;
  };
  // Places for a plan's outputs, and the pointers run() takes.
  const auto places = [](const Plan& plan, std::vector<Tensor>& out) {
    for (const TensorInfo& o : plan.outputs()) out.emplace_back(DType::kF32, o.shape);
    std::vector<void*> p;
    for (Tensor& t : out) p.push_back(t.data());
    return p;
  };
  std::vector<Model> models;
  for (const auto& [dir, name] : {std::pair{dir_.string(), std::string("cnn_small")}, std::pair{nerf.string(), std::string("nerf_mlp")}}) {
    Model m{dir, {}, {}};
    Plan alone = Plan::load(dir, "host");
    const std::string model_dir = std::string(FUSETUNE_SOURCE_DIR) + "/tests/data/models/" + name;
    m.inputs = data_inputs(alone, importer::load_test_data(model_dir + "/test_data_set_0"));
    for (int s = 0; s < kScales; ++s) {
      std::vector<Tensor> in = scaled(m.inputs, s), out;
      std::vector<const void*> ip;
      for (const Tensor& t : in) ip.push_back(t.data());
      alone.run(ip, places(alone, out));
      m.expected.push_back(std::move(out));
    }
    models.push_back(std::move(m));
  }
  Plan shared = Plan::load(dir_.string(), "host");
  std::atomic<int> failures{0};
  std::vector<std::string> reports(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        const Model& mine = models[static_cast<size_t>(t % 2)];
        Plan own = Plan::load(mine.dir, "host");  // loads race with each other too
        for (int r = 0; r < kRuns; ++r) {
          for (auto [plan, model] : {std::pair{&own, &mine}, std::pair{&shared, static_cast<const Model*>(&models[0])}}) {
            const int scale = (t + r) % kScales;
            const std::vector<Tensor> in = scaled(model->inputs, scale);
            std::vector<Tensor> out;
            std::vector<const void*> ip;
            for (const Tensor& x : in) ip.push_back(x.data());
            plan->run(ip, places(*plan, out), r % 2 == 0 ? Memory::kHost : Memory::kDevice);
            for (size_t k = 0; k < out.size(); ++k) {
              const reference::Comparison c = reference::compare(out[k], model->expected[static_cast<size_t>(scale)][k], {1e-6, 0, 1e-6});
              if (!c.ok) {
                reports[static_cast<size_t>(t)] += "run " + std::to_string(r) + ": " + c.describe() + "; ";
                ++failures;
              }
            }
          }
        }
      } catch (const std::exception& e) {
        reports[static_cast<size_t>(t)] += e.what();
        ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  fs::remove_all(nerf);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(reports[static_cast<size_t>(t)], "") << "thread " << t;
  EXPECT_EQ(failures.load(), 0);
}

// On a GPU: device pointers from the driver, in place (aligned) and copied (4 bytes past), from
// threads other than the one that loaded the plan, beside a second plan on the same device; a
// host pointer given as device memory is refused naming the input; a plan destroyed on another
// thread. Elsewhere: says why it did not run.
TEST_F(RuntimeApi, CudaDevicePointersFromSeveralThreads) {
  std::string why;
  std::unique_ptr<backend::Backend> gpu = backend::make_cuda_backend(0, &why);
  if (gpu == nullptr) {
    std::printf("NOTE: CUDA backend not run for the runtime's device pointers: %s\n", why.c_str());
    GTEST_SKIP() << "no GPU: " << why;
  }
  std::unique_ptr<Plan> plan = std::make_unique<Plan>(Plan::load(dir_.string(), "cuda"));
  Plan second = Plan::load(dir_.string(), "cuda:0");
  const importer::TestData data = importer::load_test_data(kModelDir + "/test_data_set_0");
  const std::vector<Tensor> inputs = data_inputs(*plan, data);
  const size_t in_bytes = inputs[0].nbytes(), out_bytes = plan->outputs()[0].bytes();
  std::vector<std::string> reports(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < reports.size(); ++t) {
    threads.emplace_back([&, t] {
      try {
        // Device memory of this thread's own: 4 bytes past alignment on odd threads (copied).
        const size_t offset = t % 2 == 1 ? 4 : 0;
        const auto in = gpu->allocate(in_bytes + offset), out = gpu->allocate(out_bytes + offset);
        std::vector<unsigned char> staged(in_bytes + offset);
        std::memcpy(staged.data() + offset, inputs[0].data(), in_bytes);
        in->upload(staged.data(), staged.size());
        const auto address = [&](backend::Buffer& b) { return *static_cast<uint64_t*>(b.handle()) + offset; };
        for (int r = 0; r < 3; ++r) {
          out->fill_byte(0xff);
          Plan& p = t < 2 ? *plan : second;
          p.run({reinterpret_cast<const void*>(address(*in))}, {reinterpret_cast<void*>(address(*out))}, Memory::kDevice);
          std::vector<unsigned char> got(out_bytes + offset);
          out->download(got.data(), got.size());
          reports[t] += mismatch(p, data, {got.data() + offset});
        }
      } catch (const std::exception& e) {
        reports[t] += e.what();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (size_t t = 0; t < reports.size(); ++t) EXPECT_EQ(reports[t], "") << "thread " << t;
  std::vector<unsigned char> host(std::max(in_bytes, out_bytes));
  const std::string refused = error_of([&] { plan->run({host.data()}, {host.data()}, Memory::kDevice); });
  EXPECT_NE(refused.find("input '" + plan->inputs()[0].name + "': its memory is not CUDA device memory"), std::string::npos)
      << refused;
  std::thread([&] { plan.reset(); }).join();  // destroyed on another thread: nothing leaks, nothing fails
  second.run({inputs[0].data()}, {host.data()});
  EXPECT_EQ(mismatch(second, data, {host.data()}), "");
}

TEST_F(RuntimeApi, ErrorsNameTheCulprit) {
  Plan plan = bound_plan().first;
  const TensorInfo in = plan.inputs()[0];
  const TensorInfo out = plan.outputs()[0];
  std::vector<char> buf(std::max(in.bytes(), out.bytes()) + 4);
  EXPECT_NE(error_of([&] { plan.set_input("no_such_input", buf.data(), in.bytes()); }).find("'no_such_input'"),
            std::string::npos);
  const std::string wrong_size = error_of([&] { plan.set_input(in.name, buf.data(), in.bytes() + 4); });
  EXPECT_NE(wrong_size.find("'" + in.name + "'"), std::string::npos) << wrong_size;
  EXPECT_NE(wrong_size.find(std::to_string(in.bytes() + 4) + " bytes given"), std::string::npos) << wrong_size;
  EXPECT_NE(error_of([&] { plan.get_output(out.name, buf.data(), out.bytes()); }).find("before the first run"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan.get_output("no_such_output", buf.data(), out.bytes()); }).find("'no_such_output'"),
            std::string::npos);
  plan.run();
  EXPECT_NE(error_of([&] { plan.get_output(out.name, buf.data(), out.bytes() - 1); }).find("'" + out.name + "'"),
            std::string::npos);

  Plan fresh = Plan::load(dir_.string(), "host");
  EXPECT_NE(error_of([&] { fresh.run(); }).find("never set"), std::string::npos);

  const std::string missing = (dir_ / "no_such_plan").string();
  EXPECT_NE(error_of([&] { Plan::load(missing); }).find(missing), std::string::npos);
  EXPECT_NE(error_of([&] { Plan::load(dir_.string(), "tpu"); }).find("'tpu'"), std::string::npos);
  for (const char* bad : {"cuda:", "cuda:x", "cuda:-1", "cuda:99999"}) {
    EXPECT_NE(error_of([&] { Plan::load(dir_.string(), bad); }).find("'" + std::string(bad) + "'"), std::string::npos) << bad;
  }
  // A device this machine lacks (no driver, or fewer GPUs) is named; where it exists, the plan loads.
  const std::string second = error_of([&] { Plan::load(dir_.string(), "cuda:7"); });
  EXPECT_TRUE(second == "(no RuntimeError)" || second.find("backend cuda:7: ") != std::string::npos) << second;
}

// LoadOptions::host_checked_blocks: on the host, the race checks cover that many blocks of each
// launch (the first and the last, the others drawn from the kernel's name), 0 all of them. A
// ReLU's plan, its one kernel given a race in a middle block (every thread of it writing one
// element): checking every block finds it, checking the first and the last does not.
TEST_F(RuntimeApi, HostChecksCoverTheBlocksTheLoadOptionsName) {
  Graph g;
  g.outputs() = {testing::add_op(g, "Relu", {testing::add_input(g, "x", DType::kF32, {64, 1024})})};
  const planner::Device d = planner::find_device("h100");
  const fs::path dir = dir_.string() + "_raced";
  runtime::write_bundle(compiler::compile_bundle(g, planner::plan_model(g, d), d, "relu"), dir);
  const fs::path cu = dir / "kernels.cu";
  std::string text;
  {
    std::ifstream in(cu);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string entry = "const int ft_thread = threadIdx.x;\n";
  const size_t at = text.find(entry);
  ASSERT_NE(at, std::string::npos) << text;
  text.insert(at + entry.size(), "  if (blockIdx.x == gridDim.x / 2) out0[0] = (float)ft_thread;\n");
  std::ofstream(cu) << text;
  const std::vector<float> x(64 * 1024, 1.0f);
  std::vector<float> y(x.size());
  const auto outcome = [&](int64_t checked) {
    LoadOptions options;
    options.host_checked_blocks = checked;
    Plan plan = Plan::load(dir.string(), "host", options);
    return error_of([&] { plan.run({x.data()}, {y.data()}); });
  };
  const std::string every = outcome(0), ends = outcome(2);
  EXPECT_NE(every.find("hazard"), std::string::npos) << every;
  EXPECT_EQ(ends, "(no RuntimeError)") << "the race is in a block the sample of 2 leaves out";
  LoadOptions negative;
  negative.host_checked_blocks = -1;
  EXPECT_NE(error_of([&] { Plan::load(dir.string(), "host", negative); }).find("host_checked_blocks -1"), std::string::npos);
  fs::remove_all(dir);
}

TEST_F(RuntimeApi, MissingBundleFileIsNamed) {
  const fs::path copy = dir_.string() + "_incomplete";
  fs::copy(dir_, copy);
  fs::remove(copy / "kernels.cu");
  const std::string e = error_of([&] { Plan::load(copy.string(), "host"); });
  fs::remove_all(copy);
  EXPECT_NE(e.find("kernels.cu"), std::string::npos) << e;
}

}  // namespace
}  // namespace fusetune
