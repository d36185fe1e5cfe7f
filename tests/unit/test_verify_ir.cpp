// The Kernel IR verifier (codegen/verify_ir.h): one hand-written kernel that uses every kind of
// statement and passes, then one broken copy per rule that must fail with a message naming the
// kernel and the statement or declaration at fault; a packed kernel whose parts overlay shared
// memory passes while overlaps inside one part do not; and every kernel the lowering generates for
// the test models (every candidate of every group, and the packed launches) passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/lower_group.h"
#include "codegen/verify_ir.h"
#include "core/error.h"
#include "planner/device.h"
#include "planner/select.h"
#include "unit/graph_helpers.h"

namespace fusetune::codegen {
namespace {

// Every kind of statement, each where it may be: staging loops, a barrier, a warp reduction,
// ldmatrix and mma at the top level, a uniform loop with a barrier and a warp reduction inside.
Kernel good_kernel() {
  Kernel k;
  k.name = "checked";
  k.threads = 64;
  k.grid = 2;
  k.params = {{"x", DType::kF32, 128, false}, {"h", DType::kF16, 384, false}, {"y", DType::kF32, 128, true}};
  k.add_shared("sx", DType::kF32, 64);
  k.add_shared("sh", DType::kF16, 16 * 24);
  k.thread_locals = {{"ws", 1}, {"fa", 4, DType::kU32}, {"fb", 2, DType::kU32}, {"fc", 4, DType::kF32}};
  k.uniform = {let("long long", "ft_base", "ft_block * 64LL")};
  k.body = {
      thread_for("ft_e", "0LL", "64LL", {store("sx", "ft_e", "x[ft_base + ft_e]")}),
      thread_for("ft_e", "0LL", "384LL", {let("float", "ft_v", "ft_h2f(h[ft_e])"), store("sh", "ft_e", "ft_f2h(ft_v)")}),
      barrier(),
      assign("ws[0]", "sx[ft_thread]"),
      warp_reduce("ws", "sum"),
      ldmatrix("fa", 0, 4, false, "sh", "(ft_thread % 16) * 24 + (ft_thread % 32) / 16 * 8"),
      ldmatrix("fb", 0, 2, true, "sh", "(ft_thread % 16) * 24"),
      serial_for("ft_i", "0LL", "4LL", {assign("fc[ft_i]", "0.0f")}),
      mma("fc", 0, "fa", 0, "fb", 0, DType::kF16),
      uniform_for("ft_ks", "0LL", "2LL", {barrier(), warp_reduce("ws", "max"), barrier()}),
      if_then("ft_thread < 32", {store("y", "ft_base + ft_thread", "ws[0] + fc[0]")}, {vector_load("ft_q", "x", "0LL")}),
  };
  return k;
}

// verify_ir must reject k with a message containing every fragment.
void expect_rejected(const Kernel& k, const std::vector<std::string>& fragments) {
  try {
    verify_ir(k);
    ADD_FAILURE() << "accepted:\n" << to_text(k);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("kernel '" + k.name + "'"), std::string::npos) << msg;
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "no '" << f << "' in: " << msg;
  }
}

// good_kernel with statement s appended to the body.
Kernel with(Stmt s) {
  Kernel k = good_kernel();
  k.body.push_back(std::move(s));
  return k;
}

Stmt raw_ldmatrix(int matrices) {
  Stmt s = ldmatrix("fa", 0, 4, false, "sh", "0LL");
  s.matrices = matrices;
  return s;
}

TEST(VerifyIr, AWellFormedKernelPasses) {
  EXPECT_NO_THROW(verify_ir(good_kernel()));
  Kernel k = good_kernel();
  k.threads = 32;  // one warp
  EXPECT_NO_THROW(verify_ir(k));
}

TEST(VerifyIr, BlockUniformStatementsOnlyAtBlockUniformPoints) {
  expect_rejected(with(thread_for("ft_e", "0LL", "4LL", {barrier()})), {"a barrier inside a thread loop", "`barrier`",
                                                                        "`for.threads ft_e in [0LL, 4LL)`"});
  expect_rejected(with(serial_for("ft_j", "0LL", "2LL", {warp_reduce("ws", "sum")})),
                  {"a warp reduction inside a serial loop", "`warp.reduce sum ws`", "`for ft_j in [0LL, 2LL)`"});
  expect_rejected(with(if_then("ft_thread < 3", {mma("fc", 0, "fa", 0, "fb", 0, DType::kF16)})),
                  {"an mma inside a branch", "`mma.m16n8k16.float16 fc[0] += fa[0] * fb[0]`", "`if ft_thread < 3`"});
  expect_rejected(with(if_then("ft_thread < 3", {}, {ldmatrix("fb", 0, 2, true, "sh", "0LL")})),
                  {"an ldmatrix inside a branch", "`ldmatrix.x2.trans fb[0] = sh[row 0LL]`"});
  expect_rejected(with(thread_for("ft_e", "0LL", "4LL", {uniform_for("ft_u", "0LL", "2LL", {})})),
                  {"a uniform loop inside a thread loop", "`for.uniform ft_u in [0LL, 2LL)`"});
  expect_rejected(with(if_then("ft_block == 0", {part("ft_block == 0", {}, {})})), {"a part inside a branch", "`part if ft_block == 0`"});
  // Nested: a thread loop inside a uniform loop is not a uniform point.
  expect_rejected(with(uniform_for("ft_u", "0LL", "2LL", {thread_for("ft_e", "0LL", "4LL", {barrier()})})),
                  {"a barrier inside a thread loop"});
  // Block-uniform lets, of the kernel or of a part, hold no barriers either.
  Kernel k = good_kernel();
  k.uniform.push_back(barrier());
  expect_rejected(k, {"a barrier inside the kernel's block-uniform lets", "`barrier`"});
  expect_rejected(with(part("ft_block == 0", {barrier()}, {})), {"a barrier inside the block-uniform lets of a part"});
  // Inside a part's body and a uniform loop they are fine.
  EXPECT_NO_THROW(verify_ir(with(part("ft_block == 0", {}, {barrier(), uniform_for("ft_u", "0LL", "2LL", {barrier()})}))));
}

TEST(VerifyIr, WarpReductionsCombineADeclaredOneFloatThreadLocal) {
  expect_rejected(with(warp_reduce("sx", "sum")), {"warp reduction of 'sx', which is not a thread-local", "`warp.reduce sum sx`"});
  Kernel k = good_kernel();
  k.thread_locals[0].count = 2;
  expect_rejected(k, {"thread-local 'ws' of 2 float32 (needs one float)", "`warp.reduce sum ws`"});
  k = good_kernel();
  k.thread_locals[0].dtype = DType::kU32;
  expect_rejected(k, {"thread-local 'ws' of 1 uint32", "`warp.reduce sum ws`"});
}

TEST(VerifyIr, MatrixOperandsAreDeclaredFragmentsOfTheRightTypeAndSize) {
  expect_rejected(with(mma("fa", 0, "fa", 0, "fb", 0, DType::kF16)),
                  {"mma accumulator 'fa' is uint32, needs float32", "`mma.m16n8k16.float16 fa[0] += fa[0] * fb[0]`"});
  expect_rejected(with(mma("fc", 1, "fa", 0, "fb", 0, DType::kF16)), {"mma accumulator 'fc' [1, 5) outside its 4 elements"});
  expect_rejected(with(mma("fc", 0, "fc", 0, "fb", 0, DType::kBF16)), {"mma A fragment 'fc' is float32, needs uint32"});
  expect_rejected(with(mma("fc", 0, "fa", 0, "nope", 0, DType::kF16)), {"mma B fragment 'nope' is not a thread-local"});
  expect_rejected(with(mma("fc", 0, "fa", 0, "fb", 1, DType::kF16)), {"mma B fragment 'fb' [1, 3) outside its 2 elements"});
  Stmt f64 = mma("fc", 0, "fa", 0, "fb", 0, DType::kF16);
  f64.dtype = DType::kF64;
  expect_rejected(with(f64), {"mma of float64 (needs float16, bfloat16, float32 as TF32, or int8/uint8 operands both)"});
  EXPECT_NO_THROW(verify_ir(with(mma("fc", 0, "fa", 0, "fb", 0, DType::kF32))));  // m16n8k8 on TF32 registers
  // m16n8k32 on 8-bit integers: int32 accumulators in 32-bit registers, B's type given.
  EXPECT_NO_THROW(verify_ir(with(mma("fa", 0, "fa", 0, "fb", 0, DType::kU8, DType::kI8))));
  expect_rejected(with(mma("fc", 0, "fa", 0, "fb", 0, DType::kI8, DType::kI8)),
                  {"mma accumulator 'fc' is float32, needs uint32", "`mma.m16n8k32.int8.int8 fc[0] += fa[0] * fb[0]`"});
  Stmt half_integer = mma("fa", 0, "fa", 0, "fb", 0, DType::kI8, DType::kI8);
  half_integer.b_dtype = DType::kUndefined;
  expect_rejected(with(half_integer), {"mma of int8 (needs float16, bfloat16, float32 as TF32, or int8/uint8 operands both)"});
  expect_rejected(with(ldmatrix("fb", 0, 4, false, "sh", "0LL")),
                  {"ldmatrix destination 'fb' [0, 4) outside its 2 elements", "`ldmatrix.x4 fb[0] = sh[row 0LL]`"});
  expect_rejected(with(ldmatrix("fc", 0, 4, false, "sh", "0LL")), {"ldmatrix destination 'fc' is float32, needs uint32"});
  expect_rejected(with(ldmatrix("fa", 0, 4, false, "sx", "0LL")), {"ldmatrix from shared allocation 'sx' of float32 (needs 16-bit)"});
  expect_rejected(with(ldmatrix("fa", 0, 4, false, "h", "0LL")), {"ldmatrix from 'h', which is not a shared allocation"});
}

// cp.async copies raw elements: into a shared allocation of the parameter's own element type, 16-bit
// or float32 (TF32's slices).
TEST(VerifyIr, CopiesAsyncBetweenBuffersOfOneElementType) {
  EXPECT_NO_THROW(verify_ir(with(copy_async("sx", "0LL", "x", "0LL", "16"))));
  EXPECT_NO_THROW(verify_ir(with(copy_async("sh", "0LL", "h", "0LL", "16"))));
  expect_rejected(with(copy_async("sx", "0LL", "h", "0LL", "16")),
                  {"cp.async from parameter 'h' of float16 into 'sx' of float32 (needs the same element type)"});
  expect_rejected(with(copy_async("sh", "0LL", "x", "0LL", "16")), {"cp.async from parameter 'x' of float32 into 'sh' of float16"});
  expect_rejected(with(copy_async("x", "0LL", "h", "0LL", "16")), {"cp.async into 'x', which is not a shared allocation"});
}

TEST(VerifyIr, LdmatrixLoadsOneTwoOrFourMatrices) {
  expect_rejected(with(raw_ldmatrix(3)), {"ldmatrix of 3 matrices (1, 2 or 4)", "`ldmatrix.x3 fa[0] = sh[row 0LL]`"});
  expect_rejected(with(raw_ldmatrix(8)), {"ldmatrix of 8 matrices"});
  EXPECT_NO_THROW(verify_ir(with(raw_ldmatrix(1))));
}

TEST(VerifyIr, WarpSynchronousKernelsRunWholeWarps) {
  Kernel k = good_kernel();
  k.threads = 48;
  expect_rejected(k, {"48 threads, not a positive multiple of 32", "`warp.reduce sum ws`"});
  k.threads = 0;
  expect_rejected(k, {"0 threads"});
  // Without warp-synchronous statements any positive count will do.
  Kernel plain;
  plain.name = "plain";
  plain.threads = 48;
  plain.params = {{"y", DType::kF32, 48, true}};
  plain.body = {thread_for("ft_e", "0LL", "48LL", {store("y", "ft_e", "1.0f")}), barrier()};
  EXPECT_NO_THROW(verify_ir(plain));
}

// Warpgroup roles (warp specialization): good_kernel on two warpgroups and a producer one, whose
// sides hold warp- and warpgroup-collective statements and uniform loops (each side's warps all
// reach them) and a setmaxnreg first; not a barrier, a thread loop, an exit, roles inside roles, a
// setmaxnreg elsewhere or of a count setmaxnreg refuses, nor a split inside a warpgroup or roles
// below a branch.
TEST(VerifyIr, WarpgroupRolesHoldWarpgroupStatementsAndNoBlockWideOnes) {
  const auto roles_kernel = [](Block consumers, Block producer) {
    Kernel k = good_kernel();
    k.threads = 384;
    k.body.push_back(roles(256, std::move(consumers), std::move(producer)));
    return k;
  };
  const Block consumers = {set_max_registers(true, 232), mma("fc", 0, "fa", 0, "fb", 0, DType::kF16),
                           uniform_for("ft_u", "0LL", "2LL", {warp_reduce("ws", "sum")})};
  const Block producer = {set_max_registers(false, 40), if_then("ft_thread == 256", {store("y", "0LL", "1.0f")})};
  EXPECT_NO_THROW(verify_ir(roles_kernel(consumers, producer)));
  EXPECT_NE(to_text(roles_kernel(consumers, producer)).find("roles ft_thread < 256"), std::string::npos);
  expect_rejected(roles_kernel({barrier()}, producer), {"a barrier inside a warpgroup role", "`roles ft_thread < 256`"});
  expect_rejected(roles_kernel(consumers, {uniform_for("ft_u", "0LL", "2LL", {barrier()})}), {"a barrier inside a warpgroup role"});
  expect_rejected(roles_kernel({thread_for("ft_e", "0LL", "4LL", {})}, producer),
                  {"a thread loop inside a warpgroup role", "its iterations bind to every thread of the block"});
  expect_rejected(roles_kernel({exit_unless("ft_block < 1")}, producer), {"an exit inside a warpgroup role"});
  expect_rejected(roles_kernel({roles(128, {}, {})}, producer), {"warpgroup roles inside a warpgroup role"});
  expect_rejected(roles_kernel({mma("fc", 0, "fa", 0, "fb", 0, DType::kF16), set_max_registers(true, 232)}, producer),
                  {"a setmaxnreg that is not the first statement of a warpgroup role", "`setmaxnreg.inc 232`"});
  expect_rejected(roles_kernel({uniform_for("ft_u", "0LL", "1LL", {set_max_registers(true, 232)})}, producer),
                  {"a setmaxnreg that is not the first statement of a warpgroup role"});
  expect_rejected(with(set_max_registers(false, 40)), {"a setmaxnreg that is not the first statement of a warpgroup role"});
  expect_rejected(roles_kernel({set_max_registers(true, 260)}, producer), {"setmaxnreg 'inc' to 260 registers"});
  expect_rejected(roles_kernel({set_max_registers(true, 100)}, producer), {"setmaxnreg 'inc' to 100 registers"});
  Kernel whole = roles_kernel(consumers, producer);
  whole.threads = 256;  // no producer: the roles' split is the block's end
  expect_rejected(whole, {"warpgroup roles that do not split the block's 256 threads at a warpgroup boundary"});
  Kernel inside = roles_kernel(consumers, producer);
  inside.body.back().a = "ft_thread < 64";  // a split inside a warpgroup
  expect_rejected(inside, {"warpgroup roles that do not split the block's 384 threads"});
  Kernel branch = good_kernel();
  branch.threads = 256;
  branch.body.push_back(if_then("ft_block == 0", {roles(128, {}, {})}));
  expect_rejected(branch, {"warpgroup roles inside a branch"});
  // Once, at the top level: setmaxnregs that follow each other unsynchronised are undefined.
  Kernel twice = roles_kernel(consumers, producer);
  twice.body.push_back(roles(256, {}, {}));
  expect_rejected(twice, {"a second warpgroup roles statement"});
  Kernel looped = good_kernel();
  looped.threads = 384;
  looped.body.push_back(uniform_for("ft_u", "0LL", "2LL", {roles(256, {}, {})}));
  expect_rejected(looped, {"warpgroup roles below the top level of the body"});
  // Budgets on both sides or neither, within the block's registers (an .inc beyond waits forever).
  expect_rejected(roles_kernel(consumers, {}), {"a setmaxnreg on one side of warpgroup roles only"});
  expect_rejected(roles_kernel(consumers, {set_max_registers(false, 240)}),
                  {"setmaxnreg budgets of 232 x 256 and 240 x 128 threads beyond the block's 65536 registers"});
  EXPECT_NO_THROW(verify_ir(roles_kernel({mma("fc", 0, "fa", 0, "fb", 0, DType::kF16)}, {})));
}

TEST(VerifyIr, SharedAllocationsAreAlignedInsideTheKernelsSharedMemoryAndDisjoint) {
  Kernel k = good_kernel();
  k.shared[1].offset = 264;
  k.shared_bytes = 264 + 768;
  expect_rejected(k, {"shared allocation 'sh' at byte 264, not 16-byte aligned"});
  k = good_kernel();
  k.shared_bytes -= 2;
  expect_rejected(k, {"shared allocation 'sh' [256, 1024) beyond the kernel's 1022 bytes"});
  k = good_kernel();
  k.shared[1].offset = 240;
  expect_rejected(k, {"shared allocations 'sx' [0, 256) and 'sh' [240, 1008) overlap"});
  k = good_kernel();
  k.shared.push_back({"unused", DType::kF32, 4, 0});  // named nowhere: it still may not overlap
  expect_rejected(k, {"shared allocations 'sx' [0, 256) and 'unused' [0, 16) overlap"});
}

// Two parts of a packed kernel, each staging into its own allocation at offset 0.
Kernel packed_kernel() {
  Kernel k;
  k.name = "packed";
  k.threads = 32;
  k.grid = 2;
  k.params = {{"p0_out0", DType::kF32, 32, true}, {"p1_out0", DType::kF32, 32, true}};
  k.shared = {{"b1", DType::kF32, 32, 0}, {"b2", DType::kF32, 16, 0}};
  k.shared_bytes = 128;
  auto part_of = [](const std::string& buffer, const std::string& out) {
    return part("ft_block == 0LL", {let("long long", "r_" + buffer, "ft_block")},
                {thread_for("ft_e", "0LL", "16LL", {store(buffer, "ft_e", "1.0f")}), barrier(),
                 thread_for("ft_e", "0LL", "16LL", {store(out, "ft_e", buffer + "[ft_e]")})});
  };
  k.body = {part_of("b1", "p0_out0"), part_of("b2", "p1_out0")};
  return k;
}

TEST(VerifyIr, PartsOfAPackedKernelMayOverlaySharedMemory) {
  EXPECT_NO_THROW(verify_ir(packed_kernel()));
  Kernel k = packed_kernel();
  k.body[0].body.push_back(thread_for("ft_e", "0LL", "1LL", {store("b2", "ft_e", "0.0f")}));  // part 0 uses both
  expect_rejected(k, {"shared allocations 'b1' [0, 128) and 'b2' [0, 64) overlap"});
  k = packed_kernel();
  k.body.push_back(thread_for("ft_e", "0LL", "1LL", {store("b1", "ft_e", "0.0f")}));  // used outside the parts
  expect_rejected(k, {"'b1' [0, 128) and 'b2' [0, 64) overlap"});
}

TEST(VerifyIr, StoresWriteOutputParametersOrSharedMemory) {
  expect_rejected(with(thread_for("ft_e", "0LL", "4LL", {store("x", "ft_e", "0.0f")})),
                  {"store to input parameter 'x'", "`x[ft_e] = 0.0f`"});
  expect_rejected(with(store("ws", "0LL", "0.0f")),
                  {"store to 'ws', which is neither an output parameter nor a shared allocation", "`ws[0LL] = 0.0f`"});
}

TEST(VerifyIr, NamesAreDistinct) {
  Kernel k = good_kernel();
  k.params.push_back({"x", DType::kF32, 4, true});
  expect_rejected(k, {"parameter 'x' has the name of another parameter"});
  k = good_kernel();
  k.thread_locals.push_back({"sx", 1});
  expect_rejected(k, {"thread-local 'sx' has the name of a shared allocation"});
}

// Every kernel the lowering generates for a test model passes (lower_group and pack_kernels
// verify what they return; this checks it again explicitly): every valid generated candidate of
// every group of the plan, and every launch packed as compile_bundle packs it. One test per model,
// so that the sanitizer pass can leave out the larger ones (scripts/test.sh).
class ModelKernels : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelKernels, EveryKernelGeneratedPasses) {
  const planner::Device h100 = planner::find_device("h100");
  const std::string& model = GetParam();
  const Graph g = fusetune::testing::load_test_model(model);
  const planner::ModelPlan plan = planner::plan_model(g, h100);
  int checked = 0;
  std::map<int, std::vector<size_t>> launches;
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const planner::GroupPlan& gp = plan.groups[i];
    launches[gp.group.launch].push_back(i);
    for (const planner::Candidate& c : gp.candidates) {
      if (!c.cost.valid || !c.config.library.empty()) continue;
      LoweredKernel lk;
      ASSERT_NO_THROW(lk = lower_group(g, gp.group, c.config, "k")) << model << " " << gp.group.pattern << " " << c.config.str();
      EXPECT_NO_THROW(verify_ir(lk.kernel)) << model << " " << gp.group.pattern << " " << c.config.str();
      ++checked;
    }
  }
  int packed = 0;
  for (const auto& [launch, groups] : launches) {
    if (groups.size() < 2) continue;
    int threads = 0;
    for (size_t i : groups) threads = std::max(threads, plan.groups[i].candidates[plan.groups[i].chosen].config.threads);
    std::vector<LoweredKernel> parts;
    int64_t base = 0;
    for (size_t j = 0; j < groups.size(); ++j) {
      planner::TileConfig cfg = plan.groups[groups[j]].candidates[plan.groups[groups[j]].chosen].config;
      cfg.threads = threads;
      parts.push_back(lower_group(g, plan.groups[groups[j]].group, cfg, "packed", {"p" + std::to_string(j) + "_", base}));
      base += parts.back().kernel.grid;
    }
    LoweredKernel lk;
    ASSERT_NO_THROW(lk = pack_kernels(parts, "packed")) << model << " launch " << launch;
    EXPECT_NO_THROW(verify_ir(lk.kernel)) << model << " launch " << launch;
    ++packed;
  }
  EXPECT_GT(checked, 0) << model;
  std::printf("%s: %d kernels and %d packed launches verified\n", model.c_str(), checked, packed);
}

INSTANTIATE_TEST_SUITE_P(VerifyIr, ModelKernels,
                         ::testing::Values("bert", "cnn_small", "convnext_t", "efficientnet_b0", "mobilenet_v2",
                                           "nerf_mlp", "resnet_small", "swin_t", "vit"));

}  // namespace
}  // namespace fusetune::codegen
