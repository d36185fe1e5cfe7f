// The public runtime API (<fusetune/runtime.h>): a compiled plan of the small CNN, loaded and
// run through it alone, reproduces PyTorch's outputs (test_data_set_0, within 1e-3 relative), and
// bad use (unknown names, wrong sizes, unset inputs, missing bundles) throws RuntimeError naming
// the culprit.
#include <fusetune/runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "compiler/compile_bundle.h"
#include "importer/test_data.h"
#include "planner/select.h"
#include "reference/compare.h"
#include "runtime/bundle.h"
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
    const std::vector<Tensor> inputs = importer::bind_inputs(names, data.inputs, nullptr);
    for (size_t i = 0; i < inputs.size(); ++i) plan.set_input(names[i], inputs[i].data(), inputs[i].nbytes());
    return {std::move(plan), std::move(data)};
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
