// The generated code's habits as the GPU sees them: the PTX NVRTC emits for the test models' plans
// (`fusetune compile --device h100`, sm_90). A habit fixed is a check that fails when it comes back:
//  - 16-bit floats are converted natively (cvt.f32.f16, cvt.rn.f16.f32, cvt.rn.bf16.f32), never
//    by the bit manipulation the host executor once needed (its constants 0x477ff000 and
//    0x38800000, float16's overflow and subnormal thresholds, appear in PTX as these numbers or
//    one less, the compiler turning >= into >).
//  - No 64-bit division or remainder (div/rem.s64/u64, a called routine of ~70 instructions):
//    index arithmetic is 32-bit where proven (codegen/index_width.h) and extents the same in every
//    block are literals (codegen/uniform_constants.h), which the compiler strength-reduces.
//  - A kernel on tensor cores (mma.sync, sm_80+) stages its operands with cp.async and waits for
//    them with cp.async.wait_group (codegen/stages/mma_matmul.h).
//  - On sm_90 every kernel waits for its predecessor (griddepcontrol.wait) before its first global
//    access: the CUDA backend launches with programmatic dependent launch.
//  - A decode step's projection (the GEMV form, codegen/stages/matmul.h) reads its weights in
//    16-byte read-only loads, several in flight, without spilling.
//  - A staged contraction's staging loop loads a batch of elements before it stores them to shared
//    memory (a run of kStagingLoads global loads in its PTX).
//  - Global traffic moves in 16-byte accesses where rows allow: the share of the global sectors the
//    plan's kernels request with them, counted by the host executor (`fusetune profile --json`),
//    stays at what the element loops, row statistics and MatMul staging reach on the small float16
//    models (DistilBERT: 90% of loaded and 52% of stored sectors; GPT-2: 48% and 100%).
// What is still to be fixed (docs/performance.md) is counted and printed, not judged: 32-bit
// divisions by run-time values (partial tiles' extents), 16-bit scalar global loads against
// 128-bit ones. The counts come from backend/ptx_census.h (`fusetune profile --ptx`), itself
// checked here on a hand-written module and against regular expressions on a plan's PTX.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/nvrtc.h"
#include "backend/ptx_census.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "planner/device.h"
#include "planner/tiling.h"
#include "core/files.h"
#include "core/kernel_text.h"
#include "unit/cli_run.h"
#include "unit/graph_helpers.h"
#include "unit/onnx_builder.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;

struct Ptx {
  std::string text;
  size_t count(const char* re) const {
    const std::regex r(re);
    return static_cast<size_t>(std::distance(std::sregex_iterator(text.begin(), text.end(), r), std::sregex_iterator()));
  }
};

// The CUDA text of the plan `fusetune compile` writes for a test model (with `shapes`: its --shape options).
std::string plan_cuda(const std::string& model, const std::string& shapes = "") {
  const fs::path plan = fs::temp_directory_path() / ("fusetune_ptx_" + std::to_string(::getpid()) + "_" + model);
  const fs::path onnx = fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models" / model / "model.onnx";
  const testing::Outcome c = testing::run_cli("compile " + onnx.string() + " --device h100 --out " + plan.string() + shapes);
  EXPECT_EQ(c.exit_code, 0) << c.output;
  const std::string cuda = read_file(plan / "kernels.cu", "the plan's kernels");
  fs::remove_all(plan);
  return cuda;
}

// Its PTX for the H100 (sm_90).
Ptx plan_ptx(const std::string& model, const std::string& shapes = "") { return {backend::compile_ptx(plan_cuda(model, shapes), "sm_90")}; }

// Each kernel's PTX (from its .entry to the next), by name.
std::vector<std::pair<std::string, Ptx>> kernels_of(const Ptx& ptx) {
  std::vector<std::pair<std::string, Ptx>> out;
  for (size_t at = ptx.text.find(".entry "); at != std::string::npos;) {
    const size_t next = ptx.text.find(".entry ", at + 1);
    Ptx kernel{ptx.text.substr(at, next == std::string::npos ? std::string::npos : next - at)};
    out.emplace_back(kernel.text.substr(7, kernel.text.find('(') - 7), std::move(kernel));
    at = next;
  }
  return out;
}

// 64-bit division and remainder; 32-bit ones by a register (a literal divisor is strength-reduced
// to a multiply, so what remains divides by a value known only at run time).
constexpr const char* kDiv64 = R"(\b(div|rem)\.[su]64\b)";
constexpr const char* kDiv32 = R"(\b(div|rem)\.[su]32\b)";

// The census of a whole module.
backend::PtxCounts census_total(const Ptx& ptx) {
  backend::PtxCounts total;
  for (const backend::KernelPtx& k : backend::ptx_census(ptx.text)) total += k.counts;
  return total;
}

// Every habit on a module written by hand as NVRTC and nvcc print PTX: guards, braces around
// inline assembly, two statements on a line, comments, a .func apart from the kernels.
TEST(PtxCensus, CountsEachHabitOfAHandWrittenModule) {
  const std::string ptx = R"(//
// Generated by NVIDIA NVVM Compiler
.version 8.8
.target sm_90a
.address_size 64
.func  (.param .b32 func_retval0) helper(.param .b32 helper_param_0)
{
	div.s64 	%rd1, %rd2, %rd3;
	ret;
}
.visible .entry first(
	.param .u64 first_param_0
)
{
	ld.param.u64 	%rd11, [first_param_0];
	ld.global.nc.u16 	%rs1, [%rd15];
	st.shared.u16 	[%r40], %rs1;
	{  cvt.f32.f16 %f2, %rs1;}
	{  cvt.rn.f16.f32 %rs2, %f3;}
	st.global.u16 	[%rd3], %rs2;
	div.s64 	%rd23, %rd8, %rd4;
	div.u32 	%r5, %r4, %r3;
	div.rn.f32 	%f9, %f2, %f8;
	rem.s32 	%r8, %r7, %r1;
	@%p1 ld.global.nc.v4.u32 	{%r9, %r10, %r11, %r12}, [%rd20];
	@!%p2 st.global.v4.u32 	[%rd22], {%r9, %r10, %r11, %r12};
	{ cvt.rn.f16x2.f32 %r6, %f2, %f2; }
	st.global.u32 	[%rd2+20], %r6; // a comment: ld.global.u16 div.s64
	setp.gt.u32 	%p3, %r1, 0x477FEFFF;
	mov.b32 	%r20, 1199566847;
	setp.gt.f32 	%p4, %f1, 0f477FF000;
$L__BB0_2:
	ld.global.v2.u64 	{%rd30, %rd31}, [%rd32]; ld.local.u32 %r30, [%rd33];
	ret;
}
.visible .entry second(
	.param .u64 second_param_0
)
{
	cp.async.cg.shared.global [%r1], [%rd1], 16, %r2;
	cp.async.commit_group;
	cp.async.wait_group 1;
	cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd4, {%r5, %r6}], [%r7];
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r10, %r11, %r12, %r13}, [%r14];
	mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};
	wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%f1}, %rd1, %rd2, 1, 1, 1, 0, 0;
	wgmma.fence.sync.aligned;
	cvt.f32.bf16 	%f5, %rs5;
	st.local.u32 	[%rd9], %r9;
	ret;
}
)";
  const std::vector<backend::KernelPtx> kernels = backend::ptx_census(ptx);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].name, "first");
  EXPECT_EQ(kernels[1].name, "second");
  const backend::PtxCounts& a = kernels[0].counts;
  EXPECT_EQ(a.cvt_f16_to_f32, 1);
  EXPECT_EQ(a.cvt_f32_to_f16, 2);
  EXPECT_EQ(a.software_conversion, 2);  // integer immediates, hex or decimal; not the float 0f477FF000
  EXPECT_EQ(a.global_loads, 3);
  EXPECT_EQ(a.global_loads_16bit, 1);
  EXPECT_EQ(a.global_loads_128bit, 2);  // v4 of 32 bits and v2 of 64
  EXPECT_EQ(a.global_loads_readonly, 2);
  EXPECT_EQ(a.global_stores, 3);
  EXPECT_EQ(a.global_stores_16bit, 1);
  EXPECT_EQ(a.global_stores_128bit, 1);
  EXPECT_EQ(a.div_rem_64, 1);  // the .func's is nobody's
  EXPECT_EQ(a.div_rem_32, 2);  // div.rn.f32 is not integer division
  EXPECT_EQ(a.local_accesses, 1);
  EXPECT_EQ(a.longest_load_run, 2);  // the shared store ends the first run (one load)
  EXPECT_EQ(a.cp_async + a.mma_sync + a.wgmma + a.ldmatrix + a.cp_async_waits + a.cp_async_bulk, 0);
  const backend::PtxCounts& b = kernels[1].counts;
  EXPECT_EQ(b.cp_async, 1);
  EXPECT_EQ(b.cp_async_waits, 1);
  EXPECT_EQ(b.cp_async_bulk, 1);
  EXPECT_EQ(b.ldmatrix, 1);
  EXPECT_EQ(b.mma_sync, 1);
  EXPECT_EQ(b.wgmma, 1);  // wgmma.fence is not a product
  EXPECT_EQ(b.cvt_f16_to_f32, 1);
  EXPECT_EQ(b.local_accesses, 1);
  EXPECT_EQ(b.global_loads + b.global_stores + b.div_rem_64 + b.longest_load_run, 0);
}

// A staged contraction's staging loop issues a batch of loads before it stores to shared memory
// (codegen/stages/context.h's staging_loop): a 1x1 convolution of 160 channels at 7 x 7 staged 32
// channels a step by 64 threads, its 32 x 49 patch slice 24.5 elements a thread, loads 8 in a row
// in its PTX (a loop that stored each element before loading the next had runs of one).
TEST(PtxStaging, AStagedConvolutionLoadsABatchBeforeItStores) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  Graph g;
  const int x = fusetune::testing::add_input(g, "x", DType::kF32, {1, 160, 7, 7});
  const int w = fusetune::testing::random_constant(g, "w", DType::kF32, {960, 160, 1, 1}, 3u);
  g.outputs().push_back(fusetune::testing::add_op(g, "Conv", {x, w}));
  const planner::FusionGroup group = fusetune::testing::whole_graph_group(g);
  const codegen::Kernel k = codegen::lower_group(g, group, planner::TileConfig{{1, 8, 7, 7}, 32, 64, 1}, "conv").kernel;
  const std::vector<backend::KernelPtx> census = backend::ptx_census(backend::compile_ptx(codegen::emit_cuda({k}), "sm_90"));
  ASSERT_EQ(census.size(), 1u);
  EXPECT_GE(census[0].counts.longest_load_run, planner::kStagingLoads);
}

// The census against regular expressions over the PTX of a real plan (counted two ways).
TEST(PtxCensus, AgreesWithRegularExpressionsOnAPlan) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  const Ptx ptx = plan_ptx("distilbert_fp16");
  const backend::PtxCounts c = census_total(ptx);
  EXPECT_GT(c.global_loads, 0);
  EXPECT_EQ(c.cvt_f16_to_f32, static_cast<int64_t>(ptx.count(R"(\bcvt\.f32\.b?f16\b)")));
  EXPECT_EQ(c.cvt_f32_to_f16, static_cast<int64_t>(ptx.count(R"(\bcvt\.rn\.b?f16(x2)?\.f32\b)")));
  EXPECT_EQ(c.global_loads, static_cast<int64_t>(ptx.count(R"(\bld\.global\.)")));
  EXPECT_EQ(c.global_loads_16bit, static_cast<int64_t>(ptx.count(R"(\bld\.global(\.nc)?(\.L[12]::[a-z_:0-9]+)*\.[bfsu]16\b)")));
  EXPECT_EQ(c.global_loads_128bit,
            static_cast<int64_t>(ptx.count(R"(\bld\.global(\.nc)?(\.L[12]::[a-z_:0-9]+)*\.(v4\.[bfsu]32|v2\.[bfsu]64|v8\.[bfsu]16)\b)")));
  EXPECT_EQ(c.global_stores_128bit, static_cast<int64_t>(ptx.count(R"(\bst\.global\.(v4\.[bfsu]32|v2\.[bfsu]64)\b)")));
  EXPECT_EQ(c.cp_async, static_cast<int64_t>(ptx.count(R"(\bcp\.async\.c[ag]\.shared\.global\b)")));
  EXPECT_EQ(c.mma_sync, static_cast<int64_t>(ptx.count(R"(\bmma\.sync\.)")));
  EXPECT_EQ(c.ldmatrix, static_cast<int64_t>(ptx.count(R"(\bldmatrix\.)")));
  EXPECT_EQ(c.div_rem_64, static_cast<int64_t>(ptx.count(kDiv64)));
  EXPECT_EQ(c.div_rem_32, static_cast<int64_t>(ptx.count(kDiv32)));
  EXPECT_EQ(c.local_accesses, static_cast<int64_t>(ptx.count(R"(\b(ld|st)\.local\b)")));
}

class PtxHabits : public ::testing::TestWithParam<std::string> {};

TEST_P(PtxHabits, SixteenBitFloatsAreConvertedNatively) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  const std::string model = GetParam();
  const backend::PtxCounts c = census_total(plan_ptx(model));
  std::printf("%s: cvt f16->f32 %lld, f32->16-bit %lld, software-conversion constants %lld; still to fix: "
              "16-bit scalar global loads %lld against 128-bit %lld\n",
              model.c_str(), static_cast<long long>(c.cvt_f16_to_f32), static_cast<long long>(c.cvt_f32_to_f16),
              static_cast<long long>(c.software_conversion), static_cast<long long>(c.global_loads_16bit),
              static_cast<long long>(c.global_loads_128bit));
  EXPECT_GT(c.cvt_f16_to_f32, 0) << "no native float16 widening in the plan of " << model;
  EXPECT_GT(c.cvt_f32_to_f16, 0) << "no native narrowing to 16 bits in the plan of " << model;
  EXPECT_EQ(c.software_conversion, 0) << "the software float16 conversion's constants are back in the plan of " << model;
}

// Every kernel of the plans that uses tensor cores stages with cp.async (the small models' plans
// may have none: PtxTensorCores below compiles one for sure).
TEST_P(PtxHabits, TensorCoreKernelsStageWithCpAsync) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  const std::string model = GetParam();
  size_t on_tensor_cores = 0;
  for (const backend::KernelPtx& k : backend::ptx_census(plan_ptx(model).text)) {
    if (k.counts.mma_sync == 0) continue;
    ++on_tensor_cores;
    EXPECT_GT(k.counts.cp_async, 0) << model << " kernel " << k.name << ": mma without cp.async";
    EXPECT_GT(k.counts.cp_async_waits, 0) << model << " kernel " << k.name;
  }
  std::printf("%s: %zu kernels on tensor cores\n", model.c_str(), on_tensor_cores);
}

// Programmatic dependent launch (sm_90+; the CUDA backend launches with programmatic stream
// serialization): a kernel may start while the one before it finishes, so every kernel waits for
// its predecessor (griddepcontrol.wait) before its first global access, then lets its successor
// launch. For sm_80, which has neither instruction, the same text compiles without them.
TEST_P(PtxHabits, EveryKernelWaitsForItsPredecessorBeforeTouchingGlobalMemory) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  const std::string model = GetParam();
  const std::string cuda = plan_cuda(model);
  const auto kernels = kernels_of({backend::compile_ptx(cuda, "sm_90")});
  ASSERT_FALSE(kernels.empty());
  const std::regex global_access(R"(\b(ld|st)\.global\b|\bcp\.async\.(ca|cg)\.shared\.global\b|\b(atom|red)\.global\b)");
  for (const auto& [name, kernel] : kernels) {
    const size_t wait = kernel.text.find("griddepcontrol.wait");
    ASSERT_NE(wait, std::string::npos) << model << " kernel " << name << " does not wait for its predecessor";
    std::smatch first;
    if (std::regex_search(kernel.text, first, global_access)) {
      EXPECT_GT(static_cast<size_t>(first.position(0)), wait) << model << " kernel " << name << ": " << first.str(0)
                                                               << " before griddepcontrol.wait";
    }
    EXPECT_EQ(kernel.count(R"(\bgriddepcontrol\.wait\b)"), 1u) << model << " kernel " << name;
    EXPECT_EQ(kernel.count(R"(\bgriddepcontrol\.launch_dependents\b)"), 1u) << model << " kernel " << name;
    // What the CUDA backend asks before launching a kernel to overlap its predecessor; a kernel
    // of an older bundle, without the wait, is launched in order.
    EXPECT_TRUE(waits_for_predecessor(cuda, name)) << model << " kernel " << name;
    std::string old = cuda;
    for (size_t at; (at = old.find("  FT_GRID_DEPENDENCY();\n")) != std::string::npos;) old.erase(at, 24);
    EXPECT_FALSE(waits_for_predecessor(old, name)) << model << " kernel " << name;
  }
  EXPECT_EQ(Ptx{backend::compile_ptx(cuda, "sm_80")}.count(R"(\bgriddepcontrol\b)"), 0u) << model << " for sm_80";
  std::printf("%s: %zu kernels, each waiting for its predecessor first on sm_90\n", model.c_str(), kernels.size());
}

// A float16 MatMul lowered on tensor cores (64x64 tiles, 4 warps, steps of 32 over K = 128): its
// PTX copies both operands with cp.async, waits for them, and multiplies with mma.sync.
TEST(PtxTensorCores, ATensorCoreMatMulStagesWithCpAsync) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  Graph g;
  testing::add_op(g, "MatMul", {testing::add_input(g, "a", DType::kF16, {128, 128}), testing::add_input(g, "b", DType::kF16, {128, 96})});
  const planner::FusionGroup group = testing::whole_graph_group(g);
  const codegen::Kernel k = codegen::lower_group(g, group, planner::TileConfig{{64, 64}, 32, 128, 1, true}, "mm").kernel;
  const Ptx ptx{backend::compile_ptx(codegen::emit_cuda({k}), "sm_90")};
  EXPECT_GT(ptx.count(R"(\bmma\.sync\.)"), 0u);
  EXPECT_GT(ptx.count(R"(\bcp\.async\.cg\.shared\.global\b)"), 0u);
  EXPECT_GT(ptx.count(R"(\bcp\.async\.wait_group\b)"), 0u);
  EXPECT_GT(ptx.count(R"(\bcp\.async\.commit_group\b)"), 0u);
}

// The PTX of a ring's CUDA text (planner::simt_staging, planner::conv_staging): for sm_80 and
// sm_90 each of `present` occurs and none of `absent`; for sm_75, which has no cp.async, the same
// text compiles to loads and stores.
void expect_ring_ptx(const std::string& cuda, const std::vector<const char*>& present, const std::vector<const char*>& absent = {}) {
  for (const char* arch : {"sm_80", "sm_90"}) {
    const Ptx ptx{backend::compile_ptx(cuda, arch)};
    for (const char* re : absent) EXPECT_EQ(ptx.count(re), 0u) << arch << ": " << re;
    for (const char* re : present) EXPECT_GT(ptx.count(re), 0u) << arch << ": " << re;
  }
  EXPECT_EQ(Ptx{backend::compile_ptx(cuda, "sm_75")}.count(R"(\bcp\.async\b)"), 0u);
}

// A float32 MatMul on the FMA pipes (the default precision) staged in 16-byte vectors, both
// operands inputs with rows of whole 16-byte chunks, streams its slices through the cp.async ring
// (planner::simt_staging): for sm_80 and sm_90 its PTX copies by cp.async, commits a group a step
// and waits for all but the newest one; for sm_75, which has no cp.async, the same text compiles
// to loads and stores.
TEST(PtxTensorCores, AFloatThirtyTwoSimtMatMulStagesWithCpAsync) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  Graph g;
  testing::add_op(g, "MatMul", {testing::add_input(g, "a", DType::kF32, {128, 256}), testing::add_input(g, "b", DType::kF32, {256, 128})});
  const planner::FusionGroup group = testing::whole_graph_group(g);
  const std::string cuda = codegen::emit_cuda({codegen::lower_group(g, group, planner::TileConfig{{64, 64}, 16, 256, 4}, "mm").kernel});
  expect_ring_ptx(cuda,
                  {R"(\bcp\.async\.cg\.shared\.global\b)", R"(\bcp\.async\.commit_group\b)", R"(\bcp\.async\.wait_group 1\b)"},
                  {R"(\bmma\.)"});
}

// A float32 3 x 3 convolution at vector width 4 streams its slices through the cp.async ring
// (planner::conv_staging): for sm_80 and sm_90 its PTX copies the weights by 16-byte
// cp.async.cg and the patches by 4-byte cp.async.ca, and waits for all but the newest group; for
// sm_75 the same text compiles without cp.async.
TEST(PtxTensorCores, AFloatThirtyTwoConvolutionStagesWithCpAsync) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  Graph g;
  g.outputs().push_back(testing::add_op(
      g, "Conv", {testing::add_input(g, "x", DType::kF32, {1, 64, 28, 28}), testing::random_constant(g, "w", DType::kF32, {64, 64, 3, 3}, 5u)},
      testing::attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}})));
  const planner::FusionGroup group = testing::whole_graph_group(g);
  const std::string cuda =
      codegen::emit_cuda({codegen::lower_group(g, group, planner::TileConfig{{1, 32, 4, 28}, 16, 256, 4}, "conv").kernel});
  expect_ring_ptx(cuda, {R"(\bcp\.async\.cg\.shared\.global\b[^;]*, 16\b)", R"(\bcp\.async\.ca\.shared\.global\b[^;]*, 4\b)",
                         R"(\bcp\.async\.wait_group 1\b)"});
}

// The TF32 precision policy end to end: `compile --precision tf32` of a float32 model records the
// policy, runs its MatMuls as mma.m16n8k8.tf32 on operands rounded by cvt.rna and copied by
// cp.async (a projection of 256 rows by 512 x 512 with generated kernels alone, `--libraries none`,
// where tensor cores win: the small test models' products are launch-bound, and since the back-to-back product rule the small LLaMA's MLP runs as
// one fused group on the float32 pipes), and `fusetune run` of the small LLaMA's plan matches
// PyTorch's outputs (under TF32's tolerance, the manifest says which); without the flag no kernel
// leaves float32; a policy that is not one is refused naming it.
TEST(PtxTensorCores, AFloatThirtyTwoPlanUnderTf32RunsOnTf32TensorCores) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  const fs::path dir = fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models/llama";
  const fs::path plan = fs::temp_directory_path() / ("fusetune_tf32_" + std::to_string(::getpid()));
  const fs::path projection = fs::temp_directory_path() / ("fusetune_tf32_projection_" + std::to_string(::getpid()));
  testing::OnnxBuilder m(13);
  m.input("x", testing::kFloat, {256, 512}).output("y", testing::kFloat, {256, 512});
  m.initializer("w", Tensor::from_floats(DType::kF32, {512, 512}, std::vector<float>(512 * 512, 0.01f)));
  m.node("MatMul", {"x", "w"}, {"p"}, "projection");
  m.node("Relu", {"p"}, {"y"}, "relu");
  fs::create_directories(projection);
  m.write(projection / "model.onnx");
  const testing::Outcome pc = testing::run_cli("compile " + (projection / "model.onnx").string() +
                                               " --device h100 --precision tf32 --libraries none --out " + (projection / "plan").string());
  ASSERT_EQ(pc.exit_code, 0) << pc.output;
  const Ptx ptx{backend::compile_ptx(read_file(projection / "plan" / "kernels.cu", "the plan's kernels"), "sm_90")};
  fs::remove_all(projection);
  const size_t tf32 = ptx.count(R"(\bmma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32\b)");
  EXPECT_GT(tf32, 0u);
  EXPECT_GT(ptx.count(R"(\bcvt\.rna\.tf32\.f32\b)"), 0u);
  EXPECT_GT(ptx.count(R"(\bcp\.async\.cg\.shared\.global\b)"), 0u);
  std::printf("a 256 x 512 x 512 projection under --precision tf32: %zu m16n8k8 TF32 mma in the PTX\n", tf32);
  const testing::Outcome c = testing::run_cli("compile " + (dir / "model.onnx").string() + " --device h100 --precision tf32 --out " + plan.string());
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const nlohmann::json manifest = nlohmann::json::parse(read_file(plan / "manifest.json", "the manifest"));
  EXPECT_EQ(manifest.at("precision"), "tf32");
  const testing::Outcome run = testing::run_cli("run " + plan.string() + " --inputs " + (dir / "test_data_set_0").string());
  fs::remove_all(plan);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("outputs: 1 match, 0 differ"), std::string::npos) << run.output;
  EXPECT_EQ(plan_ptx("llama").count(R"(\.tf32\b)"), 0u);
  const testing::Outcome bad = testing::run_cli("compile " + (dir / "model.onnx").string() + " --device h100 --precision fp8 --out " + plan.string());
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("precision 'fp8' is not a policy"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(plan));
}

TEST(PtxGemv, ADecodeProjectionReadsItsWeightsInSixteenByteLoads) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  Graph g;
  testing::add_op(g, "MatMul", {testing::add_input(g, "x", DType::kF16, {1, 1, 4096}), testing::add_input(g, "w", DType::kF16, {4096, 4096})});
  const planner::FusionGroup group = testing::whole_graph_group(g);
  const planner::TileConfig best = planner::tile_candidates(g, group, planner::find_device("h100")).front().config;
  ASSERT_TRUE(best.gemv) << best.str();
  const Ptx ptx{backend::compile_ptx(codegen::emit_cuda({codegen::lower_group(g, group, best, "gemv").kernel}), "sm_90")};
  EXPECT_GE(ptx.count(R"(\bld\.global\.nc\.v4\.u32\b)"), 4u);
  // A thread's batch of weight rows: all its 16-byte loads issued before the first multiply-add.
  // (Until codegen 28 a row's load was guarded by a branch and used right after: ptxas issued
  // one load, waited for it, multiplied, then issued the next: 16 bytes in flight a thread.)
  const std::regex load(R"(\bld\.global\.nc\.v4\.u32\b)"), fma(R"(\bfma\.rn\.f32\b)");
  size_t run = 0, longest = 0;
  std::istringstream lines(ptx.text);
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, load)) longest = std::max(longest, ++run);
    if (std::regex_search(line, fma)) run = 0;
  }
  std::printf("decode projection %s: %zu weight loads issued before a multiply-add\n", best.str().c_str(), longest);
  EXPECT_GE(longest, static_cast<size_t>(planner::kGemvLoads)) << best.str();
  EXPECT_EQ(ptx.count(R"(\b(ld|st)\.local\b)"), 0u) << "spills";
  EXPECT_EQ(ptx.count(R"(\b(div|rem)\.[su]64\b)"), 0u);
}

// A float16 attention over 2,048 keys (16 heads of 64, causal): the planner's best on the H100 is
// flash attention on tensor cores by wgmma, whose PTX multiplies with wgmma.mma_async (Q Kᵀ from
// shared memory, P V with P from registers), converts the probabilities two to a cvt, and divides
// by no 64-bit value; its mma.sync form (the A100's) with mma.sync on fragments ldmatrix loads.
TEST(PtxAttention, LongFloatSixteenAttentionRunsFlashOnTensorCores) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  Graph g;
  const int64_t heads = 16, keys = 2048, head = 64;
  const int q = testing::add_input(g, "q", DType::kF16, {1, heads, keys, head});
  const int kt = testing::add_op(g, "Transpose", {testing::add_input(g, "k", DType::kF16, {1, heads, keys, head})},
                                 testing::attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
  std::vector<int64_t> allowed;
  for (int64_t i = 0; i < keys; ++i) {
    for (int64_t j = 0; j < keys; ++j) allowed.push_back(j <= i ? 1 : 0);
  }
  const int scores = testing::add_op(
      g, "Where",
      {g.add_constant("causal", Tensor::from_ints(DType::kBool, {keys, keys}, allowed)),
       testing::add_op(g, "Mul", {testing::add_op(g, "MatMul", {q, kt}), g.add_constant("scale", Tensor::scalar_float(DType::kF16, 0.125f))}),
       g.add_constant("minus_inf", Tensor::scalar_float(DType::kF16, -std::numeric_limits<float>::infinity()))});
  const int p = testing::add_op(g, "Softmax", {scores}, testing::attrs({{"axis", int64_t{-1}}}));
  testing::add_op(g, "MatMul", {p, testing::add_input(g, "v", DType::kF16, {1, heads, keys, head})});
  const planner::FusionGroup group = testing::whole_graph_group(g);
  planner::TilingOptions generated_only;  // cuDNN's attention, a library candidate, may model faster
  generated_only.libraries = {};
  const planner::TileConfig best = planner::tile_candidates(g, group, planner::find_device("h100"), generated_only).front().config;
  ASSERT_TRUE(best.flash && best.mma && best.wgmma) << best.str();
  const planner::TileConfig sync = planner::tile_candidates(g, group, planner::find_device("a100"), generated_only).front().config;
  ASSERT_TRUE(sync.flash && sync.mma && !sync.wgmma) << sync.str();
  const Ptx sync_ptx{backend::compile_ptx(codegen::emit_cuda({codegen::lower_group(g, group, sync, "attention").kernel}), "sm_80")};
  EXPECT_GT(sync_ptx.count(R"(\bmma\.sync\.aligned\.m16n8k16\b)"), 0u);
  EXPECT_GT(sync_ptx.count(R"(\bldmatrix\.sync\.aligned\b)"), 0u);
  const Ptx ptx{backend::compile_ptx(codegen::emit_cuda({codegen::lower_group(g, group, best, "attention").kernel}), "sm_90")};
  EXPECT_GT(ptx.count(R"(\bwgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.f16\.f16\b)"), 0u);
  EXPECT_GT(ptx.count(R"(\bcvt\.rn\.f16x2\.f32\b)"), 0u) << "probabilities converted natively, two to a cvt";
  EXPECT_EQ(ptx.count(kDiv64), 0u);
  // Q, K (through the Transpose that makes Kᵀ) and V are strided views of inputs with the head
  // contiguous: staged by 16-byte cp.async, a 16-bit global load only on a misaligned chunk's path.
  const size_t copies = ptx.count(R"(\bcp\.async\.c[ag]\.shared\.global\b)");
  const size_t scalar = ptx.count(R"(\bld\.global(\.nc)?\.[bu]16\b)");
  std::printf("flash attention kernel: %zu cp.async, %zu 16-bit global loads\n", copies, scalar);
  EXPECT_GE(copies, 3u);
  // The key tiles in two slots: each tile waits for its copies, not for the next tile's (wgmma's:
  // K and V in groups of their own, V_t's and K_{t+1}'s in flight).
  EXPECT_GT(ptx.count(R"(\bcp\.async\.wait_group 2;)"), 0u) << "the key tiles are not double-buffered";
  EXPECT_GT(sync_ptx.count(R"(\bcp\.async\.wait_group 1;)"), 0u) << "mma.sync's key tiles are not double-buffered";
  // The rows' running statistics (a thread-local per batch of rows a warp owns) in registers: the
  // loops over the batches are unrolled, so no index into them is dynamic.
  EXPECT_EQ(ptx.count(R"(\b(ld|st)\.local\b)"), 0u) << "local memory";
}

INSTANTIATE_TEST_SUITE_P(Models, PtxHabits, ::testing::Values("distilbert_fp16", "gpt2_fp16", "llama_fp16"));

// The plan's totals of `fusetune profile --json` (random inputs, seed 1) for a test model.
nlohmann::json profile_totals(const std::string& model) {
  const fs::path plan = fs::temp_directory_path() / ("fusetune_wide_" + std::to_string(::getpid()) + "_" + model);
  const fs::path onnx = fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models" / model / "model.onnx";
  const testing::Outcome c = testing::run_cli("compile " + onnx.string() + " --device h100 --out " + plan.string());
  EXPECT_EQ(c.exit_code, 0) << c.output;
  const testing::Outcome p = testing::run_cli("profile " + plan.string() + " --json");
  fs::remove_all(plan);
  EXPECT_EQ(p.exit_code, 0) << p.output;
  if (p.exit_code != 0) return nlohmann::json::object();
  return nlohmann::json::parse(p.output.substr(p.output.find('{'))).at("total");
}

TEST(WideAccesses, FloatSixteenPlansMoveTheirTrafficInSixteenByteAccesses) {
  struct Floor {
    const char* model;
    double loads, stores;
  };
  // distilbert_fp16's floors follow its plan since the model charged contractions' steps (docs/
  // planner.md): its LayerNorm, attention and FFN kernels take larger tiles and store 100% of their
  // sectors 16 bytes a lane (a request of 16 sectors where there were 256 of 2.5 to 5), so the Q/K/V
  // projections' column stores (8.5 sectors a request, unchanged) weigh more in the share: 52% ->
  // 35% of stored sectors; its attention on tensor cores (flash, cp.async) loads in smaller
  // requests: 93% -> 84% of loaded sectors. Since its Q, K and V projections are one product
  // (importer/pack_sibling_products.h), Q's scaling (q / sqrt(16)) runs in the attention kernel,
  // which stages a computed Q an element a load (K and V still move by 16-byte cp.async): 65% of
  // loaded sectors (the floor was 80%) and 53% of stored ones, in 2 launches fewer.
  for (const Floor& f : {Floor{"distilbert_fp16", 0.60, 0.45}, Floor{"gpt2_fp16", 0.45, 0.95}}) {
    const nlohmann::json t = profile_totals(f.model);
    const double loads = t.value("counted_load_sectors_16B_share", 0.0), stores = t.value("counted_store_sectors_16B_share", 0.0);
    std::printf("%s: %.0f%% of loaded and %.0f%% of stored global sectors in 16-byte accesses\n", f.model, 100 * loads,
                100 * stores);
    EXPECT_GE(loads, f.loads) << f.model << ": fewer loaded sectors in 16-byte accesses";
    EXPECT_GE(stores, f.stores) << f.model << ": fewer stored sectors in 16-byte accesses";
  }
}

// Every kind of kernel the test models have: transformers (attention, LayerNorm, RMSNorm, rotary
// embeddings, decode steps with a cache), convolutions (depthwise, grouped, strided), windows.
class PtxIndexing : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(PtxIndexing, NoSixtyFourBitDivision) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no PTX to read";
  const auto& [model, shapes] = GetParam();
  const backend::PtxCounts c = census_total(plan_ptx(model, shapes));
  std::printf("%s: 64-bit div/rem %lld; still to fix: 32-bit div/rem by run-time values %lld\n", model.c_str(),
              static_cast<long long>(c.div_rem_64), static_cast<long long>(c.div_rem_32));
  EXPECT_EQ(c.div_rem_64, 0) << "64-bit division in the plan of " << model;
}

INSTANTIATE_TEST_SUITE_P(
    Models, PtxIndexing,
    ::testing::Values(std::make_pair(std::string("bert"), std::string(" --shape input_ids=1x16 --shape attention_mask=1x16")),
                      std::make_pair(std::string("distilbert_fp16"), std::string()),
                      std::make_pair(std::string("llama_decode"), std::string()),
                      std::make_pair(std::string("efficientnet_b0"), std::string()),
                      std::make_pair(std::string("swin_t"), std::string()),
                      std::make_pair(std::string("nerf_mlp"), std::string())),
    [](const auto& param_info) { return param_info.param.first; });

}  // namespace
}  // namespace fusetune
