// backend::verify_kernel on hand-written CUDA text: a verification on a sample of a grid's blocks
// (VerifyOptions::sample_blocks, what a dry run uses for full-size kernels) compares the elements
// those blocks wrote, catches a wrong value or a race in them, fails a sample that wrote nothing,
// and says how many blocks of the grid ran; without a sample every block runs. An output computed
// through a narrower float type is compared under that type's tolerance.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "backend/verify.h"
#include "codegen/emit.h"
#include "graph_helpers.h"

namespace fusetune {
namespace {

using testing::add_input;
using testing::add_op;

constexpr int64_t kGrid = 256;
constexpr int kThreads = 32;

struct Relu {
  Graph g;
  planner::FusionGroup group;
  int x = 0, y = 0;
  Relu() {
    x = add_input(g, "x", DType::kF32, {kGrid * kThreads});
    y = add_op(g, "Relu", {x});
    group.nodes = {0};
  }
};

// Kernel `k` of `body` (one element per thread: i = blockIdx.x * 32 + threadIdx.x) for Relu over
// 8192 elements, built once for the host.
struct Kernel {
  Relu relu;
  std::unique_ptr<backend::Backend> backend = backend::make_host_backend();
  std::unique_ptr<backend::Module> module;
  explicit Kernel(const std::string& body) {
    backend::ModuleSource src;
    src.kernels.push_back({"k", kGrid, kThreads, 0, ""});
    src.cuda_source = codegen::emit_cuda({}) +
                      R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) y) {
  const long long i = blockIdx.x * 32LL + threadIdx.x;
)" + body + "\n}\n";
    module = backend->load_source(src);
  }
  // Verified on `sample` blocks of 256 (0: all) drawn from `seed`.
  backend::VerifyResult verify(int64_t sample, uint64_t seed = 1) {
    std::mt19937 rng(7);
    return backend::verify_kernel(relu.g, relu.group, "k", {relu.x}, {relu.y}, *backend, *module, rng,
                                  {256, sample, seed});
  }
};

backend::VerifyResult verify(const std::string& body, int64_t sample) { return Kernel(body).verify(sample); }

const std::string kRelu = "  y[i] = fmaxf(x[i], 0.0f);";

TEST(VerifySample, ACorrectKernelPassesOnASampleAndOnTheWholeGrid) {
  const backend::VerifyResult sampled = verify(kRelu, 8);
  EXPECT_TRUE(sampled.ok) << sampled.detail;
  EXPECT_EQ(sampled.coverage.blocks, 8);
  EXPECT_EQ(sampled.coverage.grid, kGrid);
  EXPECT_EQ(sampled.compared, 8 * kThreads);
  const backend::VerifyResult whole = verify(kRelu, 0);
  EXPECT_TRUE(whole.ok) << whole.detail;
  EXPECT_TRUE(whole.coverage.whole());
  EXPECT_EQ(whole.compared, kGrid * kThreads);
  // A sample at least as large as the grid runs it all.
  const backend::VerifyResult all = verify(kRelu, kGrid);
  EXPECT_TRUE(all.coverage.whole());
  EXPECT_EQ(all.compared, kGrid * kThreads);
}

TEST(VerifySample, AWrongValueInTheFirstOrLastBlockFailsTheSample) {
  for (const std::string block : {"0", "gridDim.x - 1"}) {
    const backend::VerifyResult r = verify("  y[i] = blockIdx.x == " + block + " ? 0.5f : fmaxf(x[i], 0.0f);", 8);
    EXPECT_FALSE(r.ok) << "wrong in block " << block;
    EXPECT_FALSE(r.check_failed);
    EXPECT_NE(r.detail.find("written by 8 sampled blocks of 256"), std::string::npos) << r.detail;
  }
}

TEST(VerifySample, AWrongValueInAnyBlockIsCaughtBySomeSeed) {
  // Block 77 is wrong: a sample of 8 sees it for some seeds and not others, and what it compares
  // is always the sampled blocks' elements; the whole grid always sees it.
  const std::string wrong = "  y[i] = blockIdx.x == 77 ? -1.0f : fmaxf(x[i], 0.0f);";
  Kernel k(wrong);
  int caught = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const backend::VerifyResult r = k.verify(8, seed);
    EXPECT_EQ(r.compared, 8 * kThreads);
    caught += !r.ok;
  }
  std::printf("block 77 wrong: caught by %d of 200 seeded samples of 8 blocks of 256\n", caught);
  EXPECT_GT(caught, 0);
  EXPECT_LT(caught, 200);
  EXPECT_FALSE(k.verify(0).ok);
}

TEST(VerifySample, ARaceBetweenSampledBlocksFailsAsACheck) {
  const backend::VerifyResult r =
      verify("  y[i] = fmaxf(x[i], 0.0f);\n  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) y[0] = 3.0f;", 8);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.check_failed) << r.detail;
  EXPECT_NE(r.detail.find("between blocks"), std::string::npos) << r.detail;
}

TEST(VerifySample, ASampleThatWritesNothingFails) {
  const backend::VerifyResult sampled = verify("  (void)i;", 8);
  EXPECT_FALSE(sampled.ok);
  EXPECT_NE(sampled.detail.find("the 8 sampled blocks of 256 wrote no output element"), std::string::npos)
      << sampled.detail;
  EXPECT_FALSE(verify("  (void)i;", 0).ok);  // the whole grid: every element left unwritten
}

// An integer output may hold the poison's all-ones bytes as a value (a uint8 of 255, a quantized
// output saturated): a sampled verification runs the sample again over zeroed outputs, so every
// element the sampled blocks wrote is compared, 255s included: a kernel copying x passes with
// every element of its 8 blocks compared, one writing 255 everywhere fails on a wrong value (it
// used to look as though it wrote nothing, and one writing 255 where 255 is right was refused).
TEST(VerifySample, IntegerOutputsOfAllOnesCountAsWritten) {
  Graph g;
  const int x = add_input(g, "x", DType::kU8, {kGrid * kThreads});
  const int y = add_op(g, "Relu", {x});
  planner::FusionGroup group;
  group.nodes = {0};
  for (const bool right : {true, false}) {
    backend::ModuleSource src;
    src.kernels.push_back({"k", kGrid, kThreads, 0, ""});
    src.cuda_source = codegen::emit_cuda({}) +
                      "extern \"C\" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const unsigned char) x, FT_GLOBAL(unsigned char) y) {\n"
                      "  const long long i = blockIdx.x * 32LL + threadIdx.x;\n  y[i] = " +
                      std::string(right ? "x[i]" : "255") + ";\n}\n";
    auto backend = backend::make_host_backend();
    auto module = backend->load_source(src);
    std::mt19937 rng(7);
    const backend::VerifyResult v = backend::verify_kernel(g, group, "k", {x}, {y}, *backend, *module, rng, {256, 8, 1});
    EXPECT_EQ(v.ok, right) << v.detail;
    if (right) {
      EXPECT_EQ(v.compared, 8 * kThreads);
    } else {
      EXPECT_NE(v.detail.find("output '"), std::string::npos) << v.detail;
    }
  }
}

// An output computed through a narrower float type is compared under that type's tolerance: y =
// Cast<float32>(Relu(x)) over float16 x, computed 0.4% too large (eight steps of float16's grid:
// within float16's tolerance, beyond float32's), passes; the same error fails where everything is
// float32, and a 5% error fails either way.
TEST(VerifyTolerance, AnOutputWidenedFromFloat16IsComparedAtFloat16sTolerance) {
  for (const DType input : {DType::kF16, DType::kF32}) {
    for (const char* factor : {"1.004f", "1.05f"}) {
      Graph g;
      const int x = add_input(g, "x", input, {kGrid * kThreads});
      const int r = add_op(g, "Relu", {x});
      const int y = input == DType::kF16 ? add_op(g, "Cast", {r}, testing::attrs({{"to", int64_t{1}}})) : r;
      planner::FusionGroup group;
      for (size_t n = 0; n < g.nodes().size(); ++n) group.nodes.push_back(static_cast<int>(n));
      const std::string type = input == DType::kF16 ? "unsigned short" : "float";
      const std::string read = input == DType::kF16 ? "ft_h2f(x[i])" : "x[i]";
      backend::ModuleSource src;
      src.kernels.push_back({"k", kGrid, kThreads, 0, ""});
      src.cuda_source = codegen::emit_cuda({}) + "extern \"C\" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const " + type +
                        ") x, FT_GLOBAL(float) y) {\n  const long long i = blockIdx.x * 32LL + threadIdx.x;\n  y[i] = fmaxf(" +
                        read + ", 0.0f) * " + factor + ";\n}\n";
      auto backend = backend::make_host_backend();
      auto module = backend->load_source(src);
      std::mt19937 rng(7);
      const backend::VerifyResult v = backend::verify_kernel(g, group, "k", {x}, {y}, *backend, *module, rng, {256, 0, 1});
      const bool want = input == DType::kF16 && std::string(factor) == "1.004f";
      EXPECT_EQ(v.ok, want) << dtype_name(input) << " input, error factor " << factor << ": " << v.detail;
    }
  }
}

// Behind a Softmax over 16-bit scores the tolerance's scale grows by 3 u max|x|, x the scores that
// weigh (within 20 of their row's greatest), u the unit roundoff (bfloat16 2^-8, float16 2^-11):
// masked keys (-10,000) do not count, a row whose scores all lie far below another row's counts
// by its own (here -40, within 20 of its greatest, -30: 3 x 40 / 256 = 0.47 in bfloat16); float32
// scores add nothing, nor does a Softmax the output is not computed through.
TEST(VerifyTolerance, ASoftmaxOverSixteenBitScoresLoosensByTheScoresThatWeigh) {
  for (const DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    Graph g;
    const int x = add_input(g, "x", dt, {2, 4});
    const int p = add_op(g, "Softmax", {x}, testing::attrs({{"axis", int64_t{-1}}}));
    const int y = add_op(g, "Relu", {p});
    const int other = add_op(g, "Neg", {x});
    std::map<int, Tensor> values;
    // Row 0: 8, -7 and 1 weigh, -10,000 does not; row 1: -30, -33 and -40 weigh, -10,000 does not.
    values[x] = Tensor::from_floats(dt, {2, 4}, std::vector<float>{8, -7, -10000, 1, -30, -33, -40, -10000});
    values[p] = Tensor::from_floats(dt, {2, 4}, std::vector<float>(8, 0.25f));
    values[y] = values[p];
    values[other] = values[x];
    const reference::Tolerance base = reference::default_tolerance(dt == DType::kF32 ? DType::kF32 : dt);
    const reference::Tolerance tol = backend::output_tolerance(g, y, values, {x}, false);
    const double u = dt == DType::kBF16 ? 1.0 / 256 : dt == DType::kF16 ? 1.0 / 2048 : 0.0;
    EXPECT_DOUBLE_EQ(tol.scale, (dt == DType::kF32 ? 1e-4 : base.scale) + 3 * u * 40) << dtype_name(dt);
    EXPECT_DOUBLE_EQ(backend::output_tolerance(g, other, values, {x}, false).scale, dt == DType::kF32 ? 1e-4 : base.scale)
        << dtype_name(dt);
  }
}

}  // namespace
}  // namespace fusetune
