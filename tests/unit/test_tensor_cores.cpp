// Tensor cores: the Kernel IR's matrix fragments (mma m16n8k16, ldmatrix) and the MatMul lowering
// that uses them for float16 and bfloat16 operands. The host emulation of one mma is checked
// against a direct matrix product, with fragments built per the PTX ISA's table written out here
// independently of the emulation, and with fragments loaded by ldmatrix from shared memory.
// Lowered MatMuls (2-D and batched, with bias and activation epilogues, every extent of M, N, K
// from 1 to 1000 including non-multiples of the tile and of 16) run on the host backend against
// the reference interpreter; deliberately broken kernels must fail that check. Every module is
// compiled with NVRTC for sm_80 and sm_90; the planner's default tensor-core candidates must not
// spill. The planner offers mma candidates only where they apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <random>

#include "backend/backend.h"
#include "backend/nvrtc.h"
#include "backend/verify.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "codegen/verify_ir.h"
#include "core/error.h"
#include "importer/pair_gated_products.h"
#include "planner/device.h"
#include "planner/epilogue.h"
#include "planner/tiling.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"

namespace fusetune::codegen {
namespace {

using fusetune::testing::add_input;
using fusetune::testing::add_op;
using fusetune::testing::attrs;
using fusetune::testing::check_groups;
using planner::FusionGroup;
using planner::TileConfig;

// ---- one mma, emulated ----------------------------------------------------------------------

// Two warps; warp w multiplies its own A (16x16 row-major at a + 256w), B (16x8, k x n row-major
// at b + 128w) and C (16x8 at c + 128w) into D = C + A * B. With `ldmatrix`, A and B go through
// shared memory and ldmatrix (.x4 for A, .x2.trans for B); without it, each lane packs its
// fragment registers itself, register by register from the PTX ISA's table.
Kernel one_mma_kernel(DType dtype, bool use_ldmatrix) {
  Kernel k;
  k.name = use_ldmatrix ? "mma_ldmatrix" : "mma_direct";
  k.threads = 64;
  k.grid = 1;
  k.params = {{"a", dtype, 512, false}, {"b", dtype, 256, false}, {"c", DType::kF32, 256, false}, {"d", DType::kF32, 256, true}};
  k.thread_locals = {{"fa", 4, DType::kU32}, {"fb", 2, DType::kU32}, {"fc", 4, DType::kF32}};
  const std::string w = "(ft_thread / 32)", g = "((ft_thread % 32) / 4)", t = "(ft_thread % 4)";
  // Element (row, col) of this warp's matrix of `rows` x `pitch` elements.
  const auto at = [&](const std::string& row, const std::string& col, int64_t rows, int64_t pitch) {
    return w + " * " + std::to_string(rows * pitch) + " + (" + row + ") * " + std::to_string(pitch) + " + (" + col + ")";
  };
  const auto pair = [](const std::string& lo, const std::string& hi) {
    return "((unsigned int)" + lo + " | ((unsigned int)" + hi + " << 16))";
  };
  const std::string g8 = "(" + g + " + 8)", c0 = "(2 * " + t + ")", c1 = "(2 * " + t + " + 1)";
  const std::string c8 = "(2 * " + t + " + 8)", c9 = "(2 * " + t + " + 9)";
  Block setup;
  if (use_ldmatrix) {
    const std::string sa = k.add_shared("sa", dtype, 2 * 16 * 24);  // rows padded to 24 elements (48 bytes)
    const std::string sb = k.add_shared("sb", dtype, 2 * 16 * 8);
    k.body.push_back(thread_for("ft_e", "0LL", "512LL", {store(sa, "ft_e / 256 * 384 + ft_e % 256 / 16 * 24 + ft_e % 16", "a[ft_e]")}));
    k.body.push_back(thread_for("ft_e", "0LL", "256LL", {store(sb, "ft_e", "b[ft_e]")}));
    k.body.push_back(barrier());
    k.body.push_back(ldmatrix("fa", 0, 4, false, sa, w + " * 384 + (ft_thread % 16) * 24 + (ft_thread % 32) / 16 * 8"));
    k.body.push_back(ldmatrix("fb", 0, 2, true, sb, w + " * 128 + (ft_thread % 16) * 8"));
  } else {
    // r0 = A[g][2t, 2t+1], r1 = A[g+8][2t, 2t+1], r2 = A[g][2t+8, 2t+9], r3 = A[g+8][2t+8, 2t+9]
    setup.push_back(assign("fa[0]", pair("a[" + at(g, c0, 16, 16) + "]", "a[" + at(g, c1, 16, 16) + "]")));
    setup.push_back(assign("fa[1]", pair("a[" + at(g8, c0, 16, 16) + "]", "a[" + at(g8, c1, 16, 16) + "]")));
    setup.push_back(assign("fa[2]", pair("a[" + at(g, c8, 16, 16) + "]", "a[" + at(g, c9, 16, 16) + "]")));
    setup.push_back(assign("fa[3]", pair("a[" + at(g8, c8, 16, 16) + "]", "a[" + at(g8, c9, 16, 16) + "]")));
    // r0 = B[k = 2t, 2t+1][n = g], r1 = B[k = 2t+8, 2t+9][n = g]
    setup.push_back(assign("fb[0]", pair("b[" + at(c0, g, 16, 8) + "]", "b[" + at(c1, g, 16, 8) + "]")));
    setup.push_back(assign("fb[1]", pair("b[" + at(c8, g, 16, 8) + "]", "b[" + at(c9, g, 16, 8) + "]")));
  }
  // c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
  const std::string cells[4] = {at(g, c0, 16, 8), at(g, c1, 16, 8), at(g8, c0, 16, 8), at(g8, c1, 16, 8)};
  for (int i = 0; i < 4; ++i) setup.push_back(assign("fc[" + std::to_string(i) + "]", "c[" + cells[i] + "]"));
  k.body.push_back(serial_for("ft_once", "0LL", "1LL", setup));
  k.body.push_back(mma("fc", 0, "fa", 0, "fb", 0, dtype));
  Block out;
  for (int i = 0; i < 4; ++i) out.push_back(store("d", cells[i], "fc[" + std::to_string(i) + "]"));
  k.body.push_back(serial_for("ft_once", "0LL", "1LL", out));
  return k;
}

using fusetune::testing::from_16;
using fusetune::testing::to_16;

// Launches a two-warp one-mma kernel (parameters a, b, c, d: buffers already holding A, B and C)
// and checks each warp's D[i][j] = C[i][j] + sum over kk < depth of product(w, i, kk, j), the
// exact product of the operands as the tensor cores take them: bit for bit when the operands are
// small integers (sums exact), else within float rounding of the terms' magnitudes.
void expect_one_mma(backend::Backend& backend, backend::Module& module, const std::string& kernel, backend::Buffer& a,
                    backend::Buffer& b, backend::Buffer& c_buffer, const std::vector<float>& c, int depth,
                    const std::function<double(int, int, int, int)>& product, bool integers, const std::string& label) {
  auto db = backend.allocate(256 * 4);
  db->fill_byte(0xFF);
  module.launch(kernel, {&a, &b, &c_buffer, db.get()});
  std::vector<float> d(256);
  db->download(d.data(), d.size() * 4);
  for (int w = 0; w < 2; ++w) {
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 8; ++j) {
        double want = c[static_cast<size_t>(w * 128 + i * 8 + j)], magnitude = std::fabs(want);
        for (int kk = 0; kk < depth; ++kk) {
          const double p = product(w, i, kk, j);
          want += p;
          magnitude += std::fabs(p);
        }
        const float got = d[static_cast<size_t>(w * 128 + i * 8 + j)];
        if (integers) {
          EXPECT_EQ(got, static_cast<float>(want)) << label << " warp " << w << " at " << i << "," << j;
        } else {
          EXPECT_NEAR(got, want, 1e-6 * magnitude + 1e-7) << label << " warp " << w << " at " << i << "," << j;
        }
      }
    }
  }
}

TEST(TensorCoreEmulation, OneMmaEqualsADirectProduct) {
  auto backend = backend::make_host_backend();
  std::mt19937 rng(11);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Kernel direct = one_mma_kernel(dtype, false), loaded = one_mma_kernel(dtype, true);
    auto module = backend->load({direct, loaded});
    for (bool integers : {true, false}) {
      // Small integers multiply and sum exactly: D must equal the direct product bit for bit.
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::uniform_int_distribution<int> small(-4, 4);
      const auto draw = [&]() { return integers ? static_cast<float>(small(rng)) : normal(rng); };
      std::vector<uint16_t> a(512), b(256);
      std::vector<float> c(256);
      for (auto& x : a) x = to_16(dtype, draw());
      for (auto& x : b) x = to_16(dtype, draw());
      for (auto& x : c) x = draw();
      auto ab = backend->allocate(a.size() * 2), bb = backend->allocate(b.size() * 2), cb = backend->allocate(c.size() * 4);
      ab->upload(a.data(), a.size() * 2);
      bb->upload(b.data(), b.size() * 2);
      cb->upload(c.data(), c.size() * 4);
      const auto product = [&](int w, int i, int kk, int j) {
        return static_cast<double>(from_16(dtype, a[static_cast<size_t>(w * 256 + i * 16 + kk)])) *
               from_16(dtype, b[static_cast<size_t>(w * 128 + kk * 8 + j)]);
      };
      for (const Kernel* k : {&direct, &loaded}) {
        expect_one_mma(*backend, *module, k->name, *ab, *bb, *cb, c, 16, product, integers,
                       k->name + " " + std::string(dtype_name(dtype)));
      }
    }
    // Each launch: one mma per warp, 2 * 16 * 8 * 16 = 4096 operations each, and no other float
    // arithmetic; two launches of each kernel.
    for (const Kernel* k : {&direct, &loaded}) {
      EXPECT_EQ(module->counters().at(k->name).flops, 2u * 2u * 4096u) << k->name;
      EXPECT_EQ(module->counters().at(k->name).warp_operations, k == &loaded ? 2u * 2u * 3u : 2u * 2u) << k->name;
    }
    if (backend::nvrtc_available()) {
      for (const char* arch : {"sm_80", "sm_90"}) {
        EXPECT_FALSE(backend::compile_cuda(emit_cuda({direct, loaded}), arch).cubin.empty()) << arch;
      }
    }
  }
}

// Two warps of one TF32 mma.m16n8k8 each: warp w's A (16x8 row-major at a + 128w), B (8x8, k x n
// row-major at b + 64w), C (16x8 at c + 128w); each lane rounds and packs its fragment registers
// from the PTX ISA's table for m16n8k8 .tf32: a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4],
// a3 = A[g+8][t+4]; b0 = B[t][g], b1 = B[t+4][g].
Kernel one_tf32_mma_kernel() {
  Kernel k;
  k.name = "mma_tf32";
  k.threads = 64;
  k.params = {{"a", DType::kF32, 256, false}, {"b", DType::kF32, 128, false}, {"c", DType::kF32, 256, false}, {"d", DType::kF32, 256, true}};
  k.thread_locals = {{"fa", 4, DType::kU32}, {"fb", 2, DType::kU32}, {"fc", 4, DType::kF32}};
  const std::string w = "(ft_thread / 32)", g = "((ft_thread % 32) / 4)", t = "(ft_thread % 4)";
  const auto at = [&](const std::string& row, const std::string& col, int64_t rows, int64_t pitch) {
    return w + " * " + std::to_string(rows * pitch) + " + (" + row + ") * " + std::to_string(pitch) + " + (" + col + ")";
  };
  const std::string g8 = "(" + g + " + 8)", t4 = "(" + t + " + 4)";
  Block setup = {assign("fa[0]", "ft_tf32(a[" + at(g, t, 16, 8) + "])"), assign("fa[1]", "ft_tf32(a[" + at(g8, t, 16, 8) + "])"),
                 assign("fa[2]", "ft_tf32(a[" + at(g, t4, 16, 8) + "])"), assign("fa[3]", "ft_tf32(a[" + at(g8, t4, 16, 8) + "])"),
                 assign("fb[0]", "ft_tf32(b[" + at(t, g, 8, 8) + "])"), assign("fb[1]", "ft_tf32(b[" + at(t4, g, 8, 8) + "])")};
  const std::string c0 = "(2 * " + t + ")", c1 = "(2 * " + t + " + 1)";
  const std::string cells[4] = {at(g, c0, 16, 8), at(g, c1, 16, 8), at(g8, c0, 16, 8), at(g8, c1, 16, 8)};
  for (int i = 0; i < 4; ++i) setup.push_back(assign("fc[" + std::to_string(i) + "]", "c[" + cells[i] + "]"));
  k.body.push_back(serial_for("ft_once", "0LL", "1LL", setup));
  k.body.push_back(mma("fc", 0, "fa", 0, "fb", 0, DType::kF32));
  Block out;
  for (int i = 0; i < 4; ++i) out.push_back(store("d", cells[i], "fc[" + std::to_string(i) + "]"));
  k.body.push_back(serial_for("ft_once", "0LL", "1LL", out));
  return k;
}

// TF32 as cvt.rna.tf32.f32 rounds: to 10 mantissa bits, ties away from zero (written here with
// frexp and round, apart from the prelude's bit arithmetic).
double tf32_rounded(float x) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);  // |m| in [0.5, 1): 11 significant bits = m * 2^11
  return std::ldexp(std::round(std::ldexp(m, 11)), e - 11);
}

TEST(TensorCoreEmulation, OneTf32MmaRoundsItsOperandsAndEqualsADirectProduct) {
  auto backend = backend::make_host_backend();
  const Kernel k = one_tf32_mma_kernel();
  auto module = backend->load({k});
  std::mt19937 rng(13);
  for (bool integers : {true, false}) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> small(-4, 4);
    const auto draw = [&]() { return integers ? static_cast<float>(small(rng)) : normal(rng); };
    std::vector<float> a(256), b(128), c(256);
    for (auto& x : a) x = draw();
    for (auto& x : b) x = draw();
    for (auto& x : c) x = draw();
    if (!integers) {
      a[3] = 1.0f + 0x1.0p-11f;   // a tie: away from zero, to 1 + 2^-10
      a[5] = -(1.0f + 0x1.0p-11f);
      b[2] = 1.0f + 0x1.8p-12f;   // below the tie: to 1
    }
    auto ab = backend->allocate(a.size() * 4), bb = backend->allocate(b.size() * 4), cb = backend->allocate(c.size() * 4);
    ab->upload(a.data(), a.size() * 4);
    bb->upload(b.data(), b.size() * 4);
    cb->upload(c.data(), c.size() * 4);
    expect_one_mma(*backend, *module, k.name, *ab, *bb, *cb, c, 8, [&](int w, int i, int kk, int j) {
      return tf32_rounded(a[static_cast<size_t>(w * 128 + i * 8 + kk)]) * tf32_rounded(b[static_cast<size_t>(w * 64 + kk * 8 + j)]);
    }, integers, "tf32");
  }
  // One m16n8k8 per warp: 2 * 16 * 8 * 8 = 2,048 operations; two warps, two launches.
  EXPECT_EQ(module->counters().at(k.name).flops, 2u * 2u * 2048u);
  if (backend::nvrtc_available()) {
    for (const char* arch : {"sm_80", "sm_90"}) {
      const std::string ptx = backend::compile_ptx(emit_cuda({k}), arch);
      EXPECT_NE(ptx.find("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"), std::string::npos) << arch;
      EXPECT_NE(ptx.find("cvt.rna.tf32.f32"), std::string::npos) << arch;
      EXPECT_FALSE(backend::compile_cuda(emit_cuda({k}), arch).cubin.empty()) << arch;
    }
  }
}

TEST(TensorCoreEmulation, MatrixStatementsOnlyWhereBarriersMayBeAndOnDeclaredFragments) {
  Kernel k = one_mma_kernel(DType::kF16, true);
  const Kernel good = k;
  k.body.push_back(serial_for("ft_i", "0LL", "1LL", {mma("fc", 0, "fa", 0, "fb", 0, DType::kF16)}));
  EXPECT_THROW(verify_ir(k), Error);
  k = good;
  k.body.push_back(mma("fc", 1, "fa", 0, "fb", 0, DType::kF16));  // past the accumulator's 4 floats
  EXPECT_THROW(verify_ir(k), Error);
  k = good;
  k.body.push_back(mma("fa", 0, "fc", 0, "fb", 0, DType::kF16));  // accumulator of registers
  EXPECT_THROW(verify_ir(k), Error);
  k = good;
  k.body.push_back(ldmatrix("fb", 0, 4, false, "sa", "0LL"));  // 4 matrices into 2 registers
  EXPECT_THROW(verify_ir(k), Error);
  k = good;
  k.body.push_back(ldmatrix("fa", 0, 4, false, "c", "0LL"));  // not a shared allocation
  EXPECT_THROW(verify_ir(k), Error);
  EXPECT_THROW(mma("fc", 0, "fa", 0, "fb", 0, DType::kF64), Error);  // float16, bfloat16 or float32 (TF32) only
  EXPECT_THROW(ldmatrix("fa", 0, 3, false, "sa", "0LL"), Error);
}

// ---- lowered MatMuls ------------------------------------------------------------------------

// MatMul + bias Add + activation chains with operands of `dtype`: 2-D with M, N, K over
// 1, 7, 16, 17, 33, 100, 1000, batched 3-D (both operands batched, and B broadcast), and a
// float16 product cast to float32 before its epilogue. Each chain is one group.
using Chains = fusetune::testing::GroupedGraph;

Chains matmul_chains(DType dtype) {
  Chains c;
  int id = 0;
  const auto chain = [&](Shape a, Shape b, const char* activation, bool to_f32) {
    c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, dtype, std::move(a), std::move(b), activation, to_f32, id++));
  };
  // {M, K} x {K, N}
  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {7, 16, 17}, {16, 16, 8}, {17, 33, 7},
                                                                   {33, 100, 16}, {100, 17, 33}, {7, 1000, 17},
                                                                   {1000, 16, 7}, {16, 7, 1000}, {1, 33, 100}}) {
    chain({m, k}, {k, n}, id % 2 == 0 ? "Relu" : "Tanh", false);
  }
  chain({2, 33, 17}, {2, 17, 20}, "Sigmoid", false);
  chain({3, 7, 40}, {40, 33}, "Relu", false);
  if (dtype == DType::kF16) chain({17, 24}, {24, 9}, "Tanh", true);
  return c;
}

// Tiles: the smallest (16x8, one warp), a square one, odd extents that are not multiples of 16 or
// 8, and a large one with warps of several fragments each.
const std::vector<TileConfig> kMmaTiles = {
    {{16, 8}, 16, 32, 1, true}, {{32, 32}, 32, 128, 1, true}, {{24, 20}, 16, 64, 1, true}, {{64, 64}, 64, 128, 1, true}};

using fusetune::testing::with_batch;

TEST(TensorCoreMatMul, ChainsMatchTheReferenceOnEveryTile) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Chains c = matmul_chains(dtype);
    for (const TileConfig& tile : kMmaTiles) {
      check_groups(c.g, c.groups, [&](const FusionGroup& fg) {
        return with_batch(tile, c.g.value(fg.outputs[0]).shape.size());
      }, std::string(dtype_name(dtype)) + " chains/" + tile.str());
    }
  }
}

// The same chains in float32 on TF32 tensor cores (m16n8k8, operands rounded by cvt.rna): against
// the reference under TF32's tolerance (reference::tf32_tolerance), which the exact-float32
// tolerance would not grant.
TEST(TensorCoreMatMul, FloatThirtyTwoChainsOnTf32MatchTheReferenceOnEveryTile) {
  const Chains c = matmul_chains(DType::kF32);
  for (const TileConfig& tile : kMmaTiles) {
    check_groups(c.g, c.groups, [&](const FusionGroup& fg) {
      return with_batch(tile, c.g.value(fg.outputs[0]).shape.size());
    }, "float32 chains on TF32/" + tile.str());
  }
  // What TF32 is: the 1000-deep product differs from float32's by more than float32's tolerance.
  const FusionGroup& deep = c.groups[6];  // {7, 1000} x {1000, 17}
  ASSERT_EQ(c.g.value(c.g.nodes()[static_cast<size_t>(deep.nodes[0])].inputs[0]).shape, (Shape{7, 1000}));
  const LoweredKernel lk = lower_group(c.g, deep, TileConfig{{16, 24}, 32, 64, 1, true}, "deep");
  auto backend = backend::make_host_backend();
  auto module = backend->load({lk.kernel});
  std::mt19937 rng(3);
  backend::VerifyOptions exact;
  EXPECT_FALSE(backend::verify_kernel(c.g, deep, lk, *backend, *module, rng, exact).ok);
  std::mt19937 same(3);
  backend::VerifyOptions tf32;
  tf32.tf32 = true;
  EXPECT_TRUE(backend::verify_kernel(c.g, deep, lk, *backend, *module, same, tf32).ok);
  EXPECT_TRUE(backend::tf32_kernel(c.g, deep, "tile=16x24 k=32 threads=64 mma"));
  EXPECT_FALSE(backend::tf32_kernel(c.g, deep, "tile=16x24 k=32 threads=64"));
}

// The planner's best tensor-core candidate for each chain (on these small shapes the plain
// schedule often models faster overall; the large shapes of TensorCorePlanner pick mma first).
TEST(TensorCoreMatMul, PlannersMmaCandidatesMatchTheReferenceWithoutSpills) {
  const planner::Device h100 = planner::find_device("h100");
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Chains c = matmul_chains(dtype);
    check_groups(c.g, c.groups, [&](const FusionGroup& fg) {
      for (const planner::Candidate& cand : planner::tile_candidates(c.g, fg, h100, {100000, 2.0})) {
        if (cand.config.mma) return cand.config;
      }
      ADD_FAILURE() << "no tensor-core candidate for " << fg.pattern;
      return TileConfig{};
    }, std::string(dtype_name(dtype)) + " chains/planner's best mma", {true});
  }
}

// A kernel that is wrong must fail the check the tests above rely on.
TEST(TensorCoreMatMul, BrokenKernelsFailVerification) {
  for (DType dtype : {DType::kF16, DType::kF32}) {  // float32: the TF32 form (no ldmatrix to flip)
    Graph g;
    add_op(g, "MatMul", {add_input(g, "a", dtype, {33, 40}), add_input(g, "b", dtype, {40, 24})});
    FusionGroup fg;
    fg.nodes = {0};
    planner::describe_group(g, fg);
    fg.outputs = {g.nodes()[0].outputs[0]};
    const LoweredKernel good = lower_group(g, fg, TileConfig{{32, 16}, 16, 64, 1, true}, "mm");
    backend::VerifyOptions options;
    options.tf32 = dtype == DType::kF32;
    // Flips every ldmatrix's .trans (B then arrives transposed, A transposed per 8x8 quadrant); cuts
    // the reduction-step loop short (the last 8 of K are never summed); and breaks the cp.async
    // pipeline: no wait for the copies, a wait that leaves the step's own group in flight, no
    // barrier between a thread's wait and the other threads' reads of its copies. The pipeline's
    // breakages must be findings of the checks, not merely wrong numbers (on a GPU they are races
    // that may or may not show).
    const std::function<void(Block&, int)> mutate = [&](Block& b, int how) {
      Block kept;
      for (Stmt& st : b) {
        if (how == 0 && st.kind == Stmt::Kind::kLdmatrix) st.trans = !st.trans;
        if (how == 1 && st.kind == Stmt::Kind::kUniformFor && st.name == "ft_ks" && st.b != "1") st.b = "2";
        if (how == 2 && st.kind == Stmt::Kind::kCopyAsyncWait) continue;
        if (how == 3 && st.kind == Stmt::Kind::kCopyAsyncWait) st.groups += 1;
        if (how == 4 && st.kind == Stmt::Kind::kUniformFor && st.name == "ft_ks") {
          st.body.erase(std::remove_if(st.body.begin(), st.body.end(), [](const Stmt& x) { return x.kind == Stmt::Kind::kBarrier; }),
                        st.body.end());
        }
        mutate(st.body, how);
        kept.push_back(std::move(st));
      }
      b = std::move(kept);
    };
    auto backend = backend::make_host_backend();
    std::mt19937 rng(5);
    {
      auto module = backend->load({good.kernel});
      EXPECT_TRUE(backend::verify_kernel(g, fg, good, *backend, *module, rng, options).ok) << dtype_name(dtype);
    }
    for (int how : {0, 1, 2, 3, 4}) {
      if (how == 0 && dtype == DType::kF32) continue;
      LoweredKernel bad = good;
      mutate(bad.kernel.body, how);
      ASSERT_NE(to_text(bad.kernel), to_text(good.kernel)) << dtype_name(dtype) << " mutation " << how;
      auto module = backend->load({bad.kernel});
      const backend::VerifyResult r = backend::verify_kernel(g, fg, bad, *backend, *module, rng, options);
      EXPECT_FALSE(r.ok) << dtype_name(dtype) << " mutation " << how << " passed verification";
      if (how >= 2) {
        EXPECT_TRUE(r.check_failed) << dtype_name(dtype) << " mutation " << how << ": " << r.detail;
        // Without the barrier, what a thread reads first may be in flight, landed or not yet
        // issued (a hazard or uninitialised memory), as the threads happen to run.
        if (how != 4) {
          EXPECT_NE(r.detail.find("cp.async is still copying"), std::string::npos) << r.detail;
        }
      }
    }
  }
}

TEST(TensorCoreMatMul, IrShowsFragmentsLdmatrixAndMma) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Graph g;
    add_op(g, "MatMul", {add_input(g, "a", dtype, {40, 48}), add_input(g, "b", dtype, {48, 24})});
    FusionGroup fg;
    fg.nodes = {0};
    planner::describe_group(g, fg);
    fg.outputs = {g.nodes()[0].outputs[0]};
    // 2 warps over a 32x24 tile: a 2x1 warp grid, each warp 1 x 3 fragments.
    const Kernel k = lower_group(g, fg, TileConfig{{32, 24}, 32, 64, 1, true}, "mm").kernel;
    const std::string ir = to_text(k), type(dtype_name(dtype));
    // Both operands are inputs with rows of whole 16-byte units: a ring of 3 slots, copied by cp.async.
    EXPECT_NE(ir.find("shared sa2: " + type + "[3840] @0"), std::string::npos) << ir;   // 3 x 32 rows x (32 + 8)
    EXPECT_NE(ir.find("shared sb2: " + type + "[2304] @7680"), std::string::npos) << ir;  // 3 x 32 x 24 (3 units: odd)
    EXPECT_NE(ir.find("cp.async.16 sa2[ft_s ..] <- in0["), std::string::npos) << ir;
    EXPECT_NE(ir.find("cp.async.16 sb2[ft_s ..] <- in1["), std::string::npos) << ir;
    // K = 48 in steps of 32: both steps staged ahead, so each step waits for all but the newest group.
    EXPECT_NE(ir.find("cp.async.wait_group 1"), std::string::npos) << ir;
    EXPECT_NE(ir.find("cp.async.commit_group"), std::string::npos) << ir;
    EXPECT_NE(ir.find("thread-local fc2: float[12]"), std::string::npos) << ir;
    EXPECT_NE(ir.find("thread-local fa2: uint32[4]"), std::string::npos) << ir;
    EXPECT_NE(ir.find("thread-local fb2: uint32[6]"), std::string::npos) << ir;
    EXPECT_NE(ir.find("ldmatrix.x4 fa2[0] = sa2[row"), std::string::npos) << ir;
    EXPECT_NE(ir.find("ldmatrix.x4.trans fb2[0] = sb2[row"), std::string::npos) << ir;
    EXPECT_NE(ir.find("ldmatrix.x2.trans fb2[4] = sb2[row"), std::string::npos) << ir;
    EXPECT_NE(ir.find("mma.m16n8k16." + type + " fc2[8] += fa2[0] * fb2[4]"), std::string::npos) << ir;
    const std::string cuda = emit_cuda({k});
    const std::string ab = dtype == DType::kBF16 ? "bf16.bf16" : "f16.f16";
    EXPECT_NE(cuda.find("\"mma.sync.aligned.m16n8k16.row.col.f32." + ab + ".f32\""), std::string::npos);
    EXPECT_NE(cuda.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"), std::string::npos);
    EXPECT_NE(cuda.find("cp.async.cg.shared.global [%0], [%1], 16, %2;"), std::string::npos);
    EXPECT_NE(cuda.find("ft_cp_async16(sa2, ft_s, in0, (ft_v == 0 ? 0 : ft_at), ft_v * 2);"), std::string::npos);
    EXPECT_NE(cuda.find("ft_cp_async_wait(1);"), std::string::npos);
    EXPECT_NE(cuda.find("unsigned int fa2[4];"), std::string::npos);
    EXPECT_NE(cuda.find("ft_mma_m16n8k16_" + std::string(dtype == DType::kBF16 ? "bf16" : "f16") +
                        "(fc2[8], fc2[9], fc2[10], fc2[11], fa2[0], fa2[1], fa2[2], fa2[3], fb2[4], fb2[5]);"),
              std::string::npos);
    EXPECT_NE(cuda.find("ft_ldmatrix_x4_trans(fb2[0], fb2[1], fb2[2], fb2[3], sb2, "), std::string::npos);
  }
}

// ---- planner --------------------------------------------------------------------------------

// A projection split into heads ahead of its rows (x W reshaped to [batch, rows, heads, width],
// transposed to [batch, heads, rows, width]) with LLaMA's rotary epilogue (rotate_half: the
// head's halves swapped, one negated; times sin, plus the product times cos): the root's last
// axis is one head, so tiles over it alone are at most a head wide. The planner also offers
// tensor-core tiles of several whole heads (mma.sync on the H100, wgmma on the H200), whose
// product tile is one matrix of rows by heads x width; the best of each form (and a four-head
// tile of 32 rows) match the reference on the host.
TEST(TensorCorePlanner, AProjectionSplitIntoHeadsGetsTilesOfSeveralHeads) {
  const int64_t rows = 64, heads = 8, width = 32, hidden = heads * width;
  Graph g;
  const int x = add_input(g, "x", DType::kF16, {1, rows, hidden});
  const int w = fusetune::testing::random_constant(g, "w", DType::kF16, {hidden, hidden}, 11u);
  int q = add_op(g, "Reshape", {add_op(g, "MatMul", {x, w})}, attrs({{"shape", std::vector<int64_t>{1, rows, heads, width}}}));
  q = add_op(g, "Transpose", {q}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  const auto half = [&](int64_t from, int64_t to) {
    return add_op(g, "Slice", {q}, attrs({{"starts", std::vector<int64_t>{0, 0, 0, from}},
                                          {"ends", std::vector<int64_t>{1, heads, rows, to}},
                                          {"steps", std::vector<int64_t>{1, 1, 1, 1}}}));
  };
  const int rotated = add_op(g, "Concat", {add_op(g, "Neg", {half(width / 2, width)}), half(0, width / 2)},
                             attrs({{"axis", int64_t{-1}}}));
  const int cos = add_input(g, "cos", DType::kF16, {1, 1, rows, width});
  const int sin = add_input(g, "sin", DType::kF16, {1, 1, rows, width});
  add_op(g, "Add", {add_op(g, "Mul", {q, cos}), add_op(g, "Mul", {rotated, sin})});
  const FusionGroup fg = fusetune::testing::whole_graph_group(g);
  planner::TilingOptions opt;
  opt.top_k = 1 << 20;
  opt.library_algorithms = 0;
  const auto best_of_heads = [&](const char* device, bool wgmma) {
    for (const planner::Candidate& c : planner::tile_candidates(g, fg, planner::find_device(device), opt)) {
      if (c.config.mma && c.config.wgmma == wgmma && c.config.tile[1] > 1) {
        EXPECT_EQ(c.config.tile[3], width) << c.config.str() << ": a tile of several heads takes each whole";
        return c.config;
      }
    }
    ADD_FAILURE() << "no " << (wgmma ? "wgmma" : "mma.sync") << " tile of several heads on the " << device;
    return TileConfig{};
  };
  const TileConfig sync = best_of_heads("h100", false);
  const TileConfig group = best_of_heads("h200", true);
  ASSERT_FALSE(sync.tile.empty() || group.tile.empty());
  std::printf("several heads a tile: mma.sync %s, wgmma %s\n", sync.str().c_str(), group.str().c_str());
  const TileConfig four{{1, 4, 32, width}, 32, 128, 1, true};
  ASSERT_TRUE(planner::evaluate_tile(g, fg, planner::find_device("h100"), four).valid) << four.str();
  for (const TileConfig& cfg : {sync, four, group}) {
    check_groups(g, {fg}, [&](const FusionGroup&) { return cfg; }, "heads split from a projection, " + cfg.str(),
                 {false, {"sm_90"}});
  }
}

// The warp grid: the fewest m16n8 fragments a warp, then the fewest fragment loads a k step, an
// A fragment (16 rows) loading twice a B fragment (8 columns). Counted alike, BERT's 32 x 64 tile
// over 8 warps took warps of 32 x 8, whose one 8-column unit leaves its 16-bit results as pairs;
// warps of 16 x 16 load less and store 16 bytes a lane.
TEST(TensorCorePlanner, AWarpTakesTheFewestFragmentsThenTheFewestLoads) {
  struct Case {
    int64_t rows, cols, warps, fm, fn;
  };
  for (const Case& c : {Case{32, 64, 8, 1, 2}, Case{64, 64, 4, 2, 4}, Case{16, 128, 4, 1, 4}, Case{128, 16, 4, 2, 2},
                        Case{32, 32, 4, 1, 2}}) {
    const planner::MmaWarps w = planner::mma_warps(c.rows, c.cols, c.warps);
    const std::string label = std::to_string(c.rows) + " x " + std::to_string(c.cols) + " on " + std::to_string(c.warps) + " warps";
    EXPECT_EQ(w.warps_m * w.warps_n, c.warps) << label;
    EXPECT_EQ(w.fm, c.fm) << label;
    EXPECT_EQ(w.fn, c.fn) << label;
    EXPECT_GE(w.rows(), c.rows) << label;
    EXPECT_GE(w.cols(), c.cols) << label;
  }
}

TEST(TensorCorePlanner, MmaCandidatesOnlyForSixteenBitContractionsOnSm80) {
  const auto group_of = [](const Graph& g) {
    FusionGroup fg;
    for (size_t n = 0; n < g.nodes().size(); ++n) fg.nodes.push_back(static_cast<int>(n));
    planner::describe_group(g, fg);
    fg.outputs = {g.nodes().back().outputs[0]};
    return fg;
  };
  const auto count_mma = [](const std::vector<planner::Candidate>& cands) {
    int n = 0;
    for (const auto& c : cands) n += c.config.mma ? 1 : 0;
    return n;
  };
  planner::Device h100 = planner::find_device("h100");
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    Graph g;
    const int x = add_op(g, "MatMul", {add_input(g, "a", dtype, {512, 768}), add_input(g, "b", dtype, {768, 1024})});
    add_op(g, "Relu", {x});
    const FusionGroup fg = group_of(g);
    planner::TilingOptions generated;  // the generated forms alone: cuBLASLt may well run this product faster
    generated.libraries.clear();
    const auto cands = planner::tile_candidates(g, fg, h100, generated);
    const auto again = planner::tile_candidates(g, fg, h100, generated);
    ASSERT_EQ(cands.size(), again.size());
    for (size_t i = 0; i < cands.size(); ++i) EXPECT_EQ(cands[i].config, again[i].config) << "not deterministic";
    if (dtype == DType::kF32) {
      // float32 goes to tensor cores only under the TF32 precision policy.
      EXPECT_EQ(count_mma(cands), 0);
      const planner::Cost refused = planner::evaluate_tile(g, fg, h100, TileConfig{{64, 64}, 32, 128, 1, true});
      EXPECT_FALSE(refused.valid);
      EXPECT_NE(refused.reject.find("only under the TF32 precision policy"), std::string::npos) << refused.reject;
      planner::TilingOptions tf32 = generated;
      tf32.tf32 = true;
      const auto on_tf32 = planner::tile_candidates(g, fg, h100, tf32);
      ASSERT_TRUE(on_tf32.front().config.mma) << on_tf32.front().config.str();
      EXPECT_LT(on_tf32.front().cost.modeled_us, cands.front().cost.modeled_us);
      const planner::Cost taken = planner::evaluate_tile(g, fg, h100, TileConfig{{64, 64}, 32, 128, 1, true}, tf32);
      ASSERT_TRUE(taken.valid) << taken.reject;
      // At the rate mma.sync attains on TF32: 2 x 512 x 768 x 1024 operations, at least.
      EXPECT_GE(taken.modeled_us, 2.0 * 512 * 768 * 1024 / (h100.mma_sync_tf32_tflops * 1e6));
      continue;
    }
    ASSERT_TRUE(cands.front().config.mma) << cands.front().config.str();
    for (const auto& c : cands) {
      if (!c.config.mma) continue;
      EXPECT_EQ(c.config.threads % 32, 0);
      EXPECT_EQ(c.config.reduce_step % 16, 0);
      EXPECT_NE(c.config.str().find(" mma"), std::string::npos);
      const int64_t fragments = (c.config.tile[0] + 15) / 16 * ((c.config.tile[1] + 7) / 8);
      EXPECT_GE(fragments, c.config.threads / 32);
      EXPECT_LE(c.cost.smem_bytes, h100.shared_memory_per_block_optin);
    }
    // The same tile on tensor cores is modeled faster than on the fp32 pipes.
    const TileConfig tile{{64, 64}, 32, 128, 1, false};
    TileConfig on_mma = tile;
    on_mma.mma = true;
    EXPECT_LT(planner::evaluate_tile(g, fg, h100, on_mma).modeled_us, planner::evaluate_tile(g, fg, h100, tile).modeled_us);
    // Before sm_80: none, and an mma candidate is rejected.
    planner::Device turing = h100;
    turing.compute_capability = 75;
    EXPECT_EQ(count_mma(planner::tile_candidates(g, fg, turing)), 0);
    const planner::Cost old = planner::evaluate_tile(g, fg, turing, on_mma);
    EXPECT_FALSE(old.valid);
    EXPECT_NE(old.reject.find("compute capability"), std::string::npos) << old.reject;
  }
}


// ---- register epilogues ----------------------------------------------------------------------

// The groups register_epilogue decides on: `kind` names the product's uses (graph in topological
// order, every node in the group, the last node's value the root, `extra` exported as well).
struct EpilogueCase {
  Graph g;
  FusionGroup fg;
  int product = -1;
};

EpilogueCase epilogue_case(const std::string& kind, DType dtype, int64_t m, int64_t k, int64_t n) {
  EpilogueCase c;
  Graph& g = c.g;
  const int a = add_input(g, "a", dtype, {m, k});
  const int w = fusetune::testing::random_constant(g, "w", dtype, {k, n}, 7u);
  const int bias = fusetune::testing::random_constant(g, "bias", dtype, {n}, 8u);
  std::vector<int> extra;
  if (kind == "batched bias relu" || kind == "batch of one, bias relu") {  // three matrices: blocks at batch
    // indices other than 0; or one (an export's prefill), its axis read at 0
    const int a3 = add_input(g, "a3", dtype, {kind == "batched bias relu" ? 3 : 1, m, k});
    c.product = add_op(g, "MatMul", {a3, w});
    add_op(g, "Relu", {add_op(g, "Add", {c.product, bias})});
  } else if (kind == "scatter after") {  // a ScatterND (a stage of its own) after the product
    const int data = add_input(g, "data", dtype, {m, n});
    const int idx = g.add_constant("idx", Tensor::from_ints(DType::kI64, {1, 1}, std::vector<int64_t>{2}));
    const int upd = add_input(g, "upd", dtype, {1, n});
    c.product = add_op(g, "MatMul", {a, w});
    add_op(g, "Add", {c.product, add_op(g, "ScatterND", {data, idx, upd}, attrs({{"reduction", std::string("none")}}))});
  } else if (kind == "row scale first") {  // an anchor before the product scales its rows
    const int s = add_op(g, "ReduceMean", {a}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}}));
    c.product = add_op(g, "MatMul", {a, w});
    add_op(g, "Mul", {c.product, s});
  } else {
    c.product = add_op(g, "MatMul", {a, w});
    if (kind == "bias relu" || kind == "bias relu, product exported") {
      add_op(g, "Relu", {add_op(g, "Add", {c.product, bias})});
      if (kind == "bias relu, product exported") extra.push_back(c.product);
    } else if (kind == "bias residual relu") {  // a residual input read where the product is written
      add_op(g, "Relu", {add_op(g, "Add", {add_op(g, "Add", {c.product, bias}), add_input(g, "residual", dtype, {m, n})})});
    } else if (kind == "row scale after") {  // the anchor comes after the product
      const int s = add_op(g, "ReduceMean", {a}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}}));
      add_op(g, "Mul", {c.product, s});
    } else if (kind == "transpose") {
      add_op(g, "Transpose", {add_op(g, "Add", {c.product, bias})}, attrs({{"perm", std::vector<int64_t>{1, 0}}}));
    } else if (kind == "layer norm") {
      add_op(g, "LayerNormalization", {c.product, add_input(g, "gamma", dtype, {n})}, attrs({{"axis", int64_t{1}}, {"epsilon", 1e-5f}}));
    } else if (kind == "side branch") {  // a value of the chain leaves the group without reaching the root
      const int r = add_op(g, "Relu", {c.product});
      add_op(g, "Sigmoid", {c.product});
      extra.push_back(r);
    } else {
      check(kind == "product", "epilogue_case: ", kind);
    }
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) c.fg.nodes.push_back(static_cast<int>(i));
  planner::describe_group(g, c.fg);
  c.fg.outputs = extra;
  c.fg.outputs.push_back(g.nodes().back().outputs[0]);
  std::sort(c.fg.outputs.begin(), c.fg.outputs.end());
  return c;
}

TEST(RegisterEpilogue, TakesElementWiseChainsThatEndInTheRootAndNothingElse) {
  const auto decide = [](const std::string& kind) {
    const EpilogueCase c = epilogue_case(kind, DType::kF16, 37, 40, 23);
    const int matmul = static_cast<int>(std::find_if(c.g.nodes().begin(), c.g.nodes().end(),
                                                     [](const Node& n) { return n.op == "MatMul"; }) - c.g.nodes().begin());
    return std::make_pair(planner::register_epilogue(c.g, c.fg, matmul), c);
  };
  for (const std::string kind :
       {"product", "bias relu", "bias relu, product exported", "row scale first", "batched bias relu", "batch of one, bias relu"}) {
    const auto [got, c] = decide(kind);
    ASSERT_TRUE(got.has_value()) << kind;
    EXPECT_EQ(*got, c.fg.outputs) << kind << ": every exported value is the chain's";
  }
  EXPECT_EQ(decide("bias relu, product exported").first->front(), decide("bias relu, product exported").second.product);
  for (const std::string kind : {"row scale after", "transpose", "layer norm", "side branch", "scatter after"}) {
    EXPECT_FALSE(decide(kind).first.has_value()) << kind;
  }
}

// A gated unit's two projections made one product of interleaved columns (importer/
// pair_gated_products.h), act(x Wg) x (x Wu) over m x k (or a batch of one of them, as exports
// write a prefill) by k x n: SiLU (g x Sigmoid(g)), or GELU by a sigmoid (g x Sigmoid(1.702 g));
// every node in one group, the root its output.
struct GatedCase {
  Graph g;
  FusionGroup fg;
  int product = kNoValue;
};
GatedCase gated_case(DType dtype, bool silu, int64_t m, int64_t k, int64_t n, bool batch_of_one = false) {
  GatedCase c;
  Graph& g = c.g;
  const int x = add_input(g, "x", dtype, batch_of_one ? Shape{1, m, k} : Shape{m, k});
  const int gate = add_op(g, "MatMul", {x, testing::random_constant(g, "wg", dtype, {k, n}, 11)});
  const int up = add_op(g, "MatMul", {x, testing::random_constant(g, "wu", dtype, {k, n}, 12)});
  const int s = add_op(g, "Sigmoid", {silu ? gate : add_op(g, "Mul", {gate, g.add_constant("k", Tensor::scalar_float(dtype, 1.702f))})});
  g.outputs() = {add_op(g, "Mul", {add_op(g, "Mul", {gate, s}), up})};
  check(importer::pair_gated_products(g) == 1, "gated_case: no pair");
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    c.fg.nodes.push_back(static_cast<int>(i));
    if (g.nodes()[i].op == "MatMul") c.product = g.nodes()[i].outputs[0];
  }
  planner::describe_group(g, c.fg);
  c.fg.outputs = g.outputs();
  return c;
}

int producer(const Graph& g, int v) {
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (g.nodes()[i].outputs[0] == v) return static_cast<int>(i);
  }
  return -1;
}

// A gated pair's epilogue runs from the accumulators: a lane holds the product's columns 2c and
// 2c + 1 (the gate's and the up projection's column c) in one pair of registers and computes the
// unit's column c, so the kernel keeps no shared buffer for the product (the prefill's largest
// generated kernel, TinyLlama's gate and up projections, kept 96 KB of them). The decision takes
// the pair's views and nothing else (an exported product or view, a second reader of the product:
// no; an exported half is written with the root); the kernels (mma.sync and wgmma, tiles that cut the rows and the pairs unevenly, odd n,
// float16 and bfloat16, SiLU and GELU) match the reference under the four checks and need only the
// operands' ring, which the planner's estimate covers.
TEST(RegisterEpilogue, AGatedPairsHalvesComeFromOneLanesRegisters) {
  {
    const GatedCase c = gated_case(DType::kF16, true, 37, 40, 23);
    const int matmul = producer(c.g, c.product);
    EXPECT_FALSE(planner::register_epilogue(c.g, c.fg, matmul).has_value());
    const auto pair = planner::paired_epilogue(c.g, c.fg, matmul);
    ASSERT_TRUE(pair.has_value());
    EXPECT_EQ(c.g.nodes()[static_cast<size_t>(producer(c.g, pair->gate))].op, "Reshape");
    EXPECT_EQ(c.g.value(pair->gate).shape, (Shape{37, 23}));
    EXPECT_EQ(c.g.value(pair->up).shape, (Shape{37, 23}));
    EXPECT_LT(pair->gate, pair->up);  // the gate is column 0 of the pairs
    EXPECT_EQ(pair->written, c.fg.outputs);
    // Declined: the product or a view of it leaving the group, a second reader of the product. A
    // half leaving it is one more value the lane writes.
    int pairs_view = kNoValue;
    for (const Node& n : c.g.nodes()) {
      if (n.op == "Reshape" && n.inputs[0] == c.product) pairs_view = n.outputs[0];
    }
    for (const int leaving : {c.product, pairs_view, pair->gate}) {
      GatedCase out = gated_case(DType::kF16, true, 37, 40, 23);
      out.fg.outputs.push_back(leaving);
      std::sort(out.fg.outputs.begin(), out.fg.outputs.end());
      const auto got = planner::paired_epilogue(out.g, out.fg, matmul);
      EXPECT_EQ(got.has_value(), leaving == pair->gate) << "value " << leaving << " exported";
      if (got) {
        EXPECT_EQ(got->written, out.fg.outputs);
      }
    }
    // A batch of one: its axis read at 0 (describe's index of a one-element axis) is still the
    // chain's own index.
    const GatedCase one = gated_case(DType::kF16, true, 37, 40, 23, true);
    const auto one_pair = planner::paired_epilogue(one.g, one.fg, producer(one.g, one.product));
    ASSERT_TRUE(one_pair.has_value());
    EXPECT_EQ(one.g.value(one_pair->gate).shape, (Shape{1, 37, 23}));
    // Declined: views that are not the pair's (a Slice of the same column twice, a Slice over part
    // of the rows, a step of 2 where the pair axis has two columns), a second reader of a half's Slice.
    const auto slice_of = [](GatedCase& gc, int64_t column) -> Node& {
      for (Node& n : gc.g.nodes()) {
        if (n.op == "Slice" && n.attrs.ints("starts").back() == column) return n;
      }
      throw std::runtime_error("no slice");
    };
    for (const std::string change : {"same column", "part of the rows", "step 2"}) {
      GatedCase bad = gated_case(DType::kF16, true, 37, 40, 23);
      Node& up_slice = slice_of(bad, 1);
      std::vector<int64_t> starts = up_slice.attrs.ints("starts"), ends = up_slice.attrs.ints("ends"),
                           steps = up_slice.attrs.ints("steps");
      if (change == "same column") {
        starts.back() = 0;
        ends.back() = 1;
      } else if (change == "part of the rows") {
        starts[0] = 1;
      } else {
        steps.back() = 2;
      }
      up_slice.attrs.set("starts", starts);
      up_slice.attrs.set("ends", ends);
      up_slice.attrs.set("steps", steps);
      EXPECT_FALSE(planner::paired_epilogue(bad.g, bad.fg, matmul).has_value()) << change;
    }
    {
      GatedCase read = gated_case(DType::kF16, true, 37, 40, 23);
      const int root = read.g.outputs()[0];
      const int extra = add_op(read.g, "Neg", {slice_of(read, 0).outputs[0]});
      read.g.outputs() = {root, extra};
      read.fg = FusionGroup{};
      for (size_t i = 0; i < read.g.nodes().size(); ++i) read.fg.nodes.push_back(static_cast<int>(i));
      planner::describe_group(read.g, read.fg);
      read.fg.outputs = {root, extra};
      EXPECT_FALSE(planner::paired_epilogue(read.g, read.fg, matmul).has_value()) << "a Slice read twice";
    }
    GatedCase second = gated_case(DType::kF16, true, 37, 40, 23);
    const int root = second.g.outputs()[0];
    const int extra = add_op(second.g, "Relu", {second.product});
    second.g.outputs() = {root, extra};
    second.fg = FusionGroup{};
    for (size_t i = 0; i < second.g.nodes().size(); ++i) second.fg.nodes.push_back(static_cast<int>(i));
    planner::describe_group(second.g, second.fg);
    second.fg.outputs = {root};
    EXPECT_FALSE(planner::paired_epilogue(second.g, second.fg, matmul).has_value());
  }
  const planner::Device h100 = planner::find_device("h100");
  TileConfig wg{{64, 24}, 16, 128, 1, true};
  wg.wgmma = true;
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    for (const bool silu : {true, false}) {
      GatedCase c = gated_case(dtype, silu, 70, 40, 23, /*batch_of_one=*/dtype == DType::kBF16);
      if (!silu) {  // the gate leaves the group too, written by the lanes with the root
        const int matmul = producer(c.g, c.product);
        c.fg.outputs.push_back(planner::paired_epilogue(c.g, c.fg, matmul)->gate);
        std::sort(c.fg.outputs.begin(), c.fg.outputs.end());
        ASSERT_EQ(planner::paired_epilogue(c.g, c.fg, matmul)->written.size(), 2u);
      }
      for (TileConfig tile : {TileConfig{{32, 8}, 16, 64, 1, true}, TileConfig{{16, 12}, 32, 128, 1, true}, wg}) {
        if (dtype == DType::kBF16) tile.tile.insert(tile.tile.begin(), 1);
        const std::string label = std::string(dtype_name(dtype)) + (silu ? " SiLU " : " GELU ") + tile.str();
        check_groups(c.g, {c.fg}, [&](const FusionGroup&) { return tile; }, label, {false, {"sm_90"}});
        const Kernel k = lower_group(c.g, c.fg, tile, "gated").kernel;
        int64_t ring = 0;
        for (const SharedAlloc& a : k.shared) {
          EXPECT_TRUE(a.name.rfind("sa", 0) == 0 || a.name.rfind("sb", 0) == 0) << label << ": shared " << a.name;
          ring += a.elements * static_cast<int64_t>(dtype_size(a.dtype));
        }
        EXPECT_EQ(k.shared_bytes, ring) << label;
        const planner::Cost cost = planner::evaluate_tile(c.g, c.fg, h100, tile);
        ASSERT_TRUE(cost.valid) << label << ": " << cost.reject;
        EXPECT_GE(cost.smem_bytes, k.shared_bytes) << label;
        // Below what the product tile's float buffer (rows x 2 columns a unit's column) would add.
        const int64_t buffer = tile.tile[tile.tile.size() - 2] * 2 * tile.tile.back() * 4;
        EXPECT_LT(cost.smem_bytes, k.shared_bytes + buffer) << label << ": the planner charged the product's buffer";
      }
    }
  }
}

// Deletes the first, middle and last warp shuffle of `lk` in turn: each must give a wrong result on
// the host (its exchange sends values to the wrong lanes). Returns the kernel's PTX for sm_90,
// checked for 16-byte stores and butterflies ("" where NVRTC is not available: noted).
std::string expect_exchanges_needed(const Graph& g, const FusionGroup& fg, const LoweredKernel& lk, const std::string& what) {
  std::vector<size_t> shuffles;
  for (size_t i = 0; i < lk.kernel.body.size(); ++i) {
    if (lk.kernel.body[i].kind == Stmt::Kind::kShuffle) shuffles.push_back(i);
  }
  EXPECT_GE(shuffles.size(), 8u) << what;
  if (shuffles.empty()) return "";
  auto host = backend::make_host_backend();
  const unsigned seed = fusetune::testing::test_seed();
  for (size_t d : {shuffles.front(), shuffles[shuffles.size() / 2], shuffles.back()}) {
    LoweredKernel bad = lk;
    bad.kernel.body.erase(bad.kernel.body.begin() + static_cast<std::ptrdiff_t>(d));
    auto module = host->load(std::vector<Kernel>{bad.kernel});
    std::mt19937 rng(seed);
    const backend::VerifyResult r = backend::verify_kernel(g, fg, bad, *host, *module, rng, {});
    EXPECT_FALSE(r.ok) << what << ": shuffle " << d << " deleted, seed " << seed;
  }
  if (!backend::nvrtc_available()) {
    std::printf("NOTE: NVRTC not available in this build; the PTX of %s not read\n", what.c_str());
    return "";
  }
  const std::string ptx = backend::compile_ptx(emit_cuda({lk.kernel}), "sm_90");
  EXPECT_NE(ptx.find("st.global.v4.u32"), std::string::npos) << what;
  EXPECT_NE(ptx.find("shfl.sync.bfly.b32"), std::string::npos) << what;
  return ptx;
}

// A gated pair's chain values leave as 16-byte stores where a warp holds four or more units: each
// lane computes its value of every unit and row, the quad transposes them, and each lane stores 8
// consecutive chain columns of one row (mma.sync and wgmma; units past the last four, one value a
// pair). Against the reference on rows that are whole vectors (n 40) and rows that are not (n 43,
// every other run misaligned, the tile's last run cut by the region), with the gate exported too;
// each exchange deleted in turn is a wrong result; the PTX holds the 16-byte stores.
TEST(RegisterEpilogue, AGatedPairsChainColumnsLeaveAsSixteenByteStores) {
  TileConfig wg{{64, 40}, 16, 128, 1, true};  // 80 product columns: 10 units, 8 of them exchanged
  wg.wgmma = true;
  struct Case {
    DType dtype;
    int64_t n;
    bool gate_out;
  };
  for (const Case& x : {Case{DType::kF16, 40, false}, Case{DType::kF16, 43, true}, Case{DType::kBF16, 43, false}}) {
    GatedCase c = gated_case(x.dtype, true, 70, 40, x.n);
    if (x.gate_out) {
      c.fg.outputs.push_back(planner::paired_epilogue(c.g, c.fg, producer(c.g, c.product))->gate);
      std::sort(c.fg.outputs.begin(), c.fg.outputs.end());
    }
    for (const TileConfig& tile : {TileConfig{{32, 32}, 16, 64, 1, true}, wg}) {
      const std::string label =
          std::string(dtype_name(x.dtype)) + " n " + std::to_string(x.n) + (x.gate_out ? " gate out " : " ") + tile.str();
      check_groups(c.g, {c.fg}, [&](const FusionGroup&) { return tile; }, label, {false, {"sm_90"}});
      const std::string cuda = emit_cuda({lower_group(c.g, c.fg, tile, "gated").kernel});
      EXPECT_NE(cuda.find("ft_store_ft_u16x8(out"), std::string::npos) << label;
      EXPECT_NE(cuda.find("__shfl_xor_sync(0xffffffffu"), std::string::npos) << label;
    }
  }
  const GatedCase c = gated_case(DType::kF16, true, 70, 40, 40);
  expect_exchanges_needed(c.g, c.fg, lower_group(c.g, c.fg, TileConfig{{32, 32}, 16, 64, 1, true}, "gated"),
                          "the gated pair's 16-byte stores");
}

// Every case, eligible or not, matches the reference on tiles that cut M and N unevenly (N odd: a
// row's pairs are aligned in every other row), in float16 and bfloat16; an eligible group's kernel
// keeps no shared buffer for the product, writes pairs, and needs no more shared memory than the
// planner estimates, which charges the product's buffer only where the epilogue is not in registers.
TEST(RegisterEpilogue, MatchesTheReferenceAndNeedsOnlyTheOperandRing) {
  const planner::Device h100 = planner::find_device("h100");
  // ("side branch" is no group fusion makes: a second sink has no region of its own.)
  const std::vector<std::string> kinds = {"product", "bias relu", "bias relu, product exported", "row scale first", "batched bias relu",
                                          "batch of one, bias relu", "row scale after", "transpose", "layer norm", "scatter after"};
  planner::TilingOptions tf32;
  tf32.tf32 = true;
  // float32: on TF32 tensor cores, pairs stored as float2.
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (const std::string& kind : kinds) {
      const EpilogueCase c = epilogue_case(kind, dtype, 37, 40, 23);
      const bool eligible = kind == "product" || kind == "bias relu" || kind == "bias relu, product exported" ||
                            kind == "row scale first" || kind == "batched bias relu" || kind == "batch of one, bias relu";
      // Tiles over whole rows where a row statistic needs them (the LayerNorm's 23 columns).
      for (TileConfig tile : {TileConfig{{32, 24}, 16, 64, 1, true}, TileConfig{{16, 24}, 32, 128, 1, true}}) {
        if (kind == "batched bias relu" || kind == "batch of one, bias relu") tile.tile.insert(tile.tile.begin(), 1);
        const std::string label = std::string(dtype_name(dtype)) + " " + kind + " " + tile.str();
        check_groups(c.g, {c.fg}, [&](const FusionGroup&) { return tile; }, label);
        const Kernel k = lower_group(c.g, c.fg, tile, "ep").kernel;
        const std::string product_buffer = "b" + std::to_string(c.product), acc = "acc" + std::to_string(c.product);
        bool has_product_buffer = false;
        for (const SharedAlloc& a : k.shared) has_product_buffer = has_product_buffer || a.name == product_buffer || a.name == acc;
        EXPECT_EQ(has_product_buffer, !eligible) << label;
        const std::string cuda = emit_cuda({k});
        // float32 pairs are 8 bytes (a quad's four: a whole 32-byte sector); 16-bit ones go out
        // as 16-byte runs after the quad's exchange where a warp holds units in pairs, else as pairs.
        const bool from_registers = dtype == DType::kF32 ? cuda.find("ft_store_float2(out") != std::string::npos
                                                         : cuda.find("ft_store_ft_u16x8(out") != std::string::npos ||
                                                               cuda.find("ft_store_ft_u16x2(out") != std::string::npos;
        EXPECT_EQ(from_registers, eligible) << label;
        const planner::Cost cost = planner::evaluate_tile(c.g, c.fg, h100, tile, dtype == DType::kF32 ? tf32 : planner::TilingOptions{});
        ASSERT_TRUE(cost.valid) << label << ": " << cost.reject;
        EXPECT_GE(cost.smem_bytes, k.shared_bytes) << label;
        if (kind == "product" || kind == "bias relu") {  // the operands' ring and nothing else
          int64_t ring = 0;
          for (const SharedAlloc& a : k.shared) {
            if (a.name.rfind("sa", 0) == 0 || a.name.rfind("sb", 0) == 0) ring += a.elements * static_cast<int64_t>(dtype_size(a.dtype));
          }
          EXPECT_EQ(k.shared_bytes, ring) << label;
        }
      }
    }
  }
}

// A 16-bit product's fragments leave as 16-byte stores: each quad's two rows of two adjacent 8-column
// units exchanged by two butterflies of shuffles, every lane then writing one 16-byte run (mma.sync
// and wgmma; a warp with an odd last unit writes its pairs). Against the reference on shapes whose
// rows are not 16-byte aligned and whose columns end inside a unit (the runs' element-by-element
// edge), every value of the chain exported; each exchange deleted in turn is a wrong result; and
// the PTX holds the 16-byte stores and the shuffles (the executor's counters: `fusetune profile`,
// docs/performance.md).
TEST(RegisterEpilogue, SixteenBitFragmentsLeaveAsSixteenByteStores) {
  struct Case {
    DType dtype;
    TileConfig tile;
    int64_t n;
  };
  TileConfig wg{{64, 64}, 16, 128, 1, true};
  wg.wgmma = true;
  for (const Case& c : {Case{DType::kF16, TileConfig{{64, 64}, 16, 128, 1, true}, 136},
                        Case{DType::kBF16, TileConfig{{32, 48}, 16, 64, 1, true}, 131}, Case{DType::kF16, wg, 120},
                        Case{DType::kF16, TileConfig{{32, 24}, 16, 64, 1, true}, 43}}) {
    for (const std::string kind : {"bias relu", "bias relu, product exported", "bias residual relu"}) {
      const EpilogueCase e = epilogue_case(kind, c.dtype, 70, 40, c.n);
      const std::string label = std::string(dtype_name(c.dtype)) + " " + kind + " " + c.tile.str() + " n " + std::to_string(c.n);
      check_groups(e.g, {e.fg}, [&](const FusionGroup&) { return c.tile; }, label, {false, {"sm_90"}});
      const Kernel k = lower_group(e.g, e.fg, c.tile, "ep").kernel;
      const std::string cuda = emit_cuda({k});
      EXPECT_NE(cuda.find("ft_store_ft_u16x8(out"), std::string::npos) << label;
      EXPECT_NE(cuda.find("__shfl_xor_sync(0xffffffffu"), std::string::npos) << label;
      // The bias (a constant: a group input) and the residual are read along the columns: 16-byte
      // vectors where a run's first element is aligned (checked at run time), rows of whole
      // vectors or not (a run inside a row of 131 or 43 is aligned where its flat index is).
      EXPECT_NE(cuda.find("= ft_load_ft_u16x8(in"), std::string::npos) << label;
    }
  }
  // Each exchange deleted: values land in the wrong lanes' columns, a wrong result.
  const EpilogueCase e = epilogue_case("bias relu", DType::kF16, 70, 40, 136);
  const TileConfig tile{{64, 64}, 16, 128, 1, true};
  const std::string ptx = expect_exchanges_needed(e.g, e.fg, lower_group(e.g, e.fg, tile, "ep"), "the 16-byte epilogue");
  if (!ptx.empty()) {
    EXPECT_NE(ptx.find("ld.global.nc.v4.u32"), std::string::npos) << "the bias in 16-byte vectors";
  }
}

// The scalar staged MatMul takes the register epilogue where a micro-tile row is a whole 16-byte
// vector of what it writes: float32 with 2x4 micro-tiles (16x16 on 32 threads), float16 with 8x8
// (64x64 on 64 threads), both then storing rows as 16-byte vectors; float16 with 2x4 keeps the
// shared accumulators and the vectorised element stage. Every case matches the reference.
TEST(RegisterEpilogue, ScalarMicroTilesStoreTheirRowsAsSixteenByteVectors) {
  const planner::Device h100 = planner::find_device("h100");
  struct Case {
    DType dtype;
    TileConfig tile;
    bool registers;
    const char* vector_store;
  };
  for (const Case& k : {Case{DType::kF32, TileConfig{{16, 16}, 8, 32, 1}, true, "ft_store_float4(out"},
                        Case{DType::kF16, TileConfig{{64, 64}, 8, 64, 1}, true, "ft_store_ft_u16x8(out"},
                        Case{DType::kF16, TileConfig{{16, 16}, 8, 32, 1}, false, ""}}) {
    const EpilogueCase c = epilogue_case("bias relu", k.dtype, 70, 40, 83);
    const std::string label = std::string(dtype_name(k.dtype)) + " " + k.tile.str();
    check_groups(c.g, {c.fg}, [&](const FusionGroup&) { return k.tile; }, label);
    const Kernel kernel = lower_group(c.g, c.fg, k.tile, "ep").kernel;
    const std::string cuda = emit_cuda({kernel});
    if (k.registers) {
      EXPECT_NE(cuda.find(k.vector_store), std::string::npos) << label;
      for (const SharedAlloc& a : kernel.shared) EXPECT_EQ(a.name.rfind("acc", 0), std::string::npos) << label << ": " << a.name;
    } else {
      bool has_acc = false;
      for (const SharedAlloc& a : kernel.shared) has_acc = has_acc || a.name.rfind("acc", 0) == 0 || a.name == "b" + std::to_string(c.product);
      EXPECT_TRUE(has_acc) << label;
    }
    const planner::Cost cost = planner::evaluate_tile(c.g, c.fg, h100, k.tile);
    ASSERT_TRUE(cost.valid) << label << ": " << cost.reject;
    EXPECT_GE(cost.smem_bytes, kernel.shared_bytes) << label;
  }
}

}  // namespace
}  // namespace fusetune::codegen
