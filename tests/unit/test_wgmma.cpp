// wgmma (sm_90a): the warpgroup's m64nNk16 from shared memory through matrix descriptors. The
// host emulation of one wgmma is checked against a direct matrix product with operands placed in
// core matrices by this test (written out here from the PTX ISA's layout, independently of the
// code generator and of the emulation), and against a corrupted descriptor; MatMul chains lowered
// with wgmma candidates (odd M, N, K, batched, two warpgroups in either grid, several tiles a
// warpgroup) run on the host backend against the reference; their CUDA compiles for sm_90a with
// wgmma.mma_async in the PTX; the planner offers wgmma only on compute capability 9.0 and only for
// 16-bit operands, and its best wgmma candidates for a transformer's FFN compile without spills.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <map>
#include <cmath>
#include <random>
#include <regex>

#include "backend/backend.h"
#include "backend/verify.h"
#include "backend/nvrtc.h"
#include "codegen/emit.h"
#include "codegen/kernel_identity.h"
#include "codegen/lower_group.h"
#include "codegen/verify_ir.h"
#include "core/dtype.h"
#include "core/error.h"
#include "planner/device.h"
#include "planner/tiling.h"
#include "simt/executor.h"
#include "simt/module.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"
#include "unit/test_seed.h"

namespace fusetune::codegen {
namespace {

using fusetune::testing::add_input;
using fusetune::testing::add_op;
using planner::FusionGroup;
using planner::TileConfig;

using fusetune::testing::from_16;
using fusetune::testing::to_16;

// Each lane's accumulators `acc` of a 64 x n wgmma to d (64 x n, row-major) by the ISA's fragment
// layout (element 4j + i: row 16w + g + 8 (i / 2), column 8j + 2t + i % 2).
Stmt store_accumulators(int n) {
  Block out = {let(kIndexType, "ft_w", "ft_thread / 32"), let(kIndexType, "ft_g", "ft_thread % 32 / 4"),
               let(kIndexType, "ft_t", "ft_thread % 4")};
  for (int j = 0; j < n / 8; ++j) {
    for (int i = 0; i < 4; ++i) {
      out.push_back(store("d", "(16 * ft_w + ft_g + " + std::to_string(8 * (i / 2)) + ") * " + std::to_string(n) + " + " +
                                   std::to_string(8 * j + i % 2) + " + 2 * ft_t",
                          "acc[" + std::to_string(4 * j + i) + "]"));
    }
  }
  return if_then("1", out);
}

// One warpgroup: A (64x16, row-major at a) and B (16xN, row-major at b) are copied into shared
// memory as core matrices (A K-major: core (r / 8, c / 8) at ((r / 8) * 2 + c / 8) * 64 elements,
// so LBO 128 bytes and SBO 256; B N-major: core (k / 8, n / 8) at ((k / 8) * N / 8 + n / 8) * 64,
// LBO N * 16 bytes and SBO 128), then one wgmma adds A * B to D (zero), and each lane stores its
// accumulators to d (64xN row-major) by the ISA's fragment layout. `sbo_a` replaces A's SBO (a
// wrong one must give a wrong product). `mutation`: "no barrier" before the wgmma, "no wait"
// after it, or "early store" (thread 0 overwrites A after a barrier, before the wait).
// `a_registers`: A from each lane's four registers instead (mma.m16n8k16's A fragment of its
// warp's 16 rows: register r + 2h holds row g + 8r at k = 8h + 2t and 8h + 2t + 1, the first in
// the low half), read from a by the lane itself. `b_k_major`: B as K-major core matrices (core
// (n / 8, k / 8) at ((n / 8) * 2 + k / 8) * 64, its 8 rows n, 8 values of k each: LBO 128 bytes
// along K, SBO 256 along N), where `sbo_a` replaces B's SBO instead.
Kernel one_wgmma_kernel(DType dtype, int n, int64_t sbo_a, const std::string& mutation = "", bool a_registers = false,
                        bool b_k_major = false) {
  Kernel k;
  k.name = "one_wgmma";
  k.threads = 128;
  k.grid = 1;
  k.params = {{"a", dtype, 64 * 16, false}, {"b", dtype, 16LL * n, false}, {"d", DType::kF32, 64LL * n, true}};
  const std::string sa = k.add_shared("sa", dtype, 64 * 16);
  const std::string sb = k.add_shared("sb", dtype, 16LL * n);
  k.thread_locals.push_back({"acc", n / 2, DType::kF32});
  k.body.push_back(serial_for("ft_i", "0", std::to_string(n / 2), {assign("acc[ft_i]", "0.0f")}));
  k.body.push_back(thread_for("ft_e", "0", "1024",
                              {let(kIndexType, "ft_r", "ft_e / 16"), let(kIndexType, "ft_c", "ft_e % 16"),
                               store(sa, "(ft_r / 8 * 2 + ft_c / 8) * 64 + ft_r % 8 * 8 + ft_c % 8", "a[ft_e]")}));
  const std::string b_at = b_k_major ? "(ft_c / 8 * 2 + ft_r / 8) * 64 + ft_c % 8 * 8 + ft_r % 8"
                                     : "(ft_r / 8 * " + std::to_string(n / 8) + " + ft_c / 8) * 64 + ft_r % 8 * 8 + ft_c % 8";
  k.body.push_back(thread_for("ft_e", "0", std::to_string(16 * n),
                              {let(kIndexType, "ft_r", "ft_e / " + std::to_string(n)), let(kIndexType, "ft_c", "ft_e % " + std::to_string(n)),
                               store(sb, b_at, "b[ft_e]")}));
  if (a_registers) {
    k.thread_locals.push_back({"fa", 4, DType::kU32});
    Block mine = {let(kIndexType, "ft_w", "ft_thread / 32"), let(kIndexType, "ft_g", "ft_thread % 32 / 4"),
                  let(kIndexType, "ft_t", "ft_thread % 4")};
    for (int r = 0; r < 4; ++r) {
      const std::string at = "(16 * ft_w + ft_g + " + std::to_string(8 * (r % 2)) + ") * 16 + " + std::to_string(8 * (r / 2)) + " + 2 * ft_t";
      mine.push_back(assign("fa[" + std::to_string(r) + "]", "((unsigned)a[" + at + "] | ((unsigned)a[" + at + " + 1] << 16))"));
    }
    k.body.push_back(if_then("1", mine));
  }
  k.body.push_back(proxy_fence());
  if (mutation != "no barrier") k.body.push_back(barrier());
  k.body.push_back(wgmma_fence("acc"));
  if (a_registers) {
    k.body.push_back(wgmma_registers("acc", 0, n, "fa", 0, sb, "0", b_k_major ? 128 : 16LL * n, b_k_major ? sbo_a : 128, dtype, b_k_major));
  } else {
    k.body.push_back(wgmma("acc", 0, n, sa, "0", 128, b_k_major ? 256 : sbo_a, sb, "0", b_k_major ? 128 : 16LL * n,
                           b_k_major ? sbo_a : 128, dtype, b_k_major));
  }
  k.body.push_back(wgmma_commit());
  if (mutation == "early store") {
    k.body.push_back(barrier());
    k.body.push_back(if_then("ft_thread == 0", {store(sa, "0", "0")}));
  }
  if (mutation != "no wait") k.body.push_back(wgmma_wait("acc", 0));
  k.body.push_back(store_accumulators(n));
  verify_ir(k);
  return k;
}

// In each of the forms: A from shared memory or from registers, B N-major or K-major; a wrong
// stride byte offset (A's, or a K-major B's) gives a wrong product; the CUDA text of each form
// compiles for sm_90a with its wgmma.mma_async in the PTX.
TEST(WgmmaEmulation, OneWgmmaEqualsADirectProduct) {
  const unsigned seed = fusetune::testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  for (int form = 0; form < 4; ++form) {
  const bool a_registers = form & 1, b_k_major = form & 2;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int n : {8, 24, 64, 256}) {
      if (a_registers && n == 24) continue;  // A from registers at N 8, 64 and 256
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " N " + std::to_string(n) + (a_registers ? ", A in registers" : "") +
                   (b_k_major ? ", B K-major" : "") + ", seed " + std::to_string(seed));
      std::vector<uint16_t> a(64 * 16), b(16 * static_cast<size_t>(n));
      for (auto& x : a) x = to_16(dtype, u(rng));
      for (auto& x : b) x = to_16(dtype, u(rng));
      auto backend = backend::make_host_backend();
      for (bool right : {true, false}) {
        if (a_registers && !b_k_major && !right) continue;  // no stride of A to corrupt, B's N-major SBO fixed
        if (b_k_major && n == 8 && !right) continue;         // 8 columns: one core matrix along N, its SBO unused
        const Kernel k = one_wgmma_kernel(dtype, n, right ? 256 : 128, "", a_registers, b_k_major);
        auto module = backend->load({k});
        auto da = backend->allocate(a.size() * 2), db = backend->allocate(b.size() * 2), dd = backend->allocate(64LL * n * 4);
        da->upload(a.data(), a.size() * 2);
        db->upload(b.data(), b.size() * 2);
        dd->fill_byte(0xFF);
        module->launch("one_wgmma", {da.get(), db.get(), dd.get()});
        // 2 * 64 * N * 16 operations of the wgmma, and no other float arithmetic.
        EXPECT_EQ(module->counters().at("one_wgmma").flops, 2u * 64u * static_cast<unsigned>(n) * 16u);
        std::vector<float> d(64 * static_cast<size_t>(n));
        dd->download(d.data(), d.size() * 4);
        double worst = 0;
        for (int r = 0; r < 64; ++r) {
          for (int c = 0; c < n; ++c) {
            double want = 0;
            for (int kk = 0; kk < 16; ++kk) want += double(from_16(dtype, a[r * 16 + kk])) * from_16(dtype, b[kk * n + c]);
            worst = std::max(worst, std::abs(want - d[static_cast<size_t>(r * n + c)]));
          }
        }
        if (right) {
          EXPECT_LT(worst, 1e-4) << "the emulated wgmma differs from A * B";
          if (backend::nvrtc_available() && n == 256) {
            const std::string cuda = emit_cuda({k});
            EXPECT_NE(backend::compile_ptx(cuda, "sm_90").find("wgmma.mma_async.sync.aligned.m64n256k16.f32." +
                                                               std::string(dtype == DType::kBF16 ? "bf16.bf16" : "f16.f16")),
                      std::string::npos);
            EXPECT_FALSE(backend::compile_cuda(cuda, "sm_90").cubin.empty());
          }
        } else {
          EXPECT_GT(worst, 1e-2) << "a wrong stride byte offset still gave A * B";
        }
      }
    }
  }
  }
}

// The elements of d (64 x 128) that differ from the product of a (64 x 64) and b (64 x 128), all
// float16 of small integers, so that every sum is exact.
int products_differing(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const std::vector<float>& d) {
  int wrong = 0;
  for (int row = 0; row < 64; ++row) {
    for (int col = 0; col < 128; ++col) {
      float want = 0;
      for (int kk = 0; kk < 64; ++kk) want += from_16(DType::kF16, a[row * 64 + kk]) * from_16(DType::kF16, b[kk * 128 + col]);
      wrong += d[static_cast<size_t>(row * 128 + col)] != want;
    }
  }
  return wrong;
}

// Operands in the 128-byte swizzled layouts, filled by tensor copies: A (64 x 64, K-major) one box,
// B (64 x 128, N-major) two boxes of 64 columns, two swizzle atoms apart along N (LBO 8 KB); per
// 16 of K the descriptors advance 32 bytes along A's rows and two 1 KB atoms down B's (SBO 1 KB
// for both). Written here from the PTX ISA's canonical layouts and the tensor map's swizzle
// (simt/tensor_copy.h), after one_wgmma_kernel's text for its ft_wgmma<128, 0, 1> specialisation.
// Against a direct product; descriptors that say "no swizzle" give a wrong one; the text compiles
// for sm_90a.
std::string swizzled_wgmma(int swizzle_in_descriptors) {
  const std::string sw = std::to_string(swizzle_in_descriptors);
  return emit_cuda({one_wgmma_kernel(DType::kF16, 128, 256)}) + R"(
extern "C" __global__ void __launch_bounds__(128) k(FT_GLOBAL(const unsigned short) a, FT_GLOBAL(const unsigned short) b, FT_GLOBAL(float) d, FT_TENSOR_MAP(a, 64x64, 128, 64x64, 128) ta, FT_TENSOR_MAP(b, 128x64, 256, 64x64, 128) tb) {
  FT_SHARED_MEMORY;
  FT_SHARED(unsigned short, sa, 0, 4096);
  FT_SHARED(unsigned short, sb, 8192, 8192);
  FT_SHARED(unsigned long long, bar, 24576, 1);
  float acc[64];
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
  const int t = threadIdx.x;
  if (t == 0) {
    ft_mbarrier_init(bar, 0, 1);
    ft_mbarrier_init_fence();
  }
  __syncthreads();
  if (t == 0) {
    ft_mbarrier_arrive_expect_tx(bar, 0, 24576);
    ft_tma_load_2d(sa, 0, ta, 0, 0, bar, 0);
    ft_tma_load_2d(sb, 0, tb, 0, 0, bar, 0);
    ft_tma_load_2d(sb, 4096, tb, 64, 0, bar, 0);
  }
  ft_mbarrier_wait(bar, 0, 0);
  ft_wgmma_fence<64>(acc);
  for (int kq = 0; kq < 4; ++kq) {
    ft_wgmma<128, 0, 1>(acc, ft_wgmma_desc(sa, 16 * kq, 16, 1024, SW), ft_wgmma_desc(sb, 1024 * kq, 8192, 1024, SW));
  }
  ft_wgmma_commit();
  ft_wgmma_wait(0, acc, 64);
  const int w = t / 32, g = t % 32 / 4, q = t % 4;
  for (int j = 0; j < 16; ++j) {
    for (int i = 0; i < 4; ++i) d[(16 * w + g + 8 * (i / 2)) * 128 + 8 * j + i % 2 + 2 * q] = acc[4 * j + i];
  }
}
)";
}

TEST(WgmmaEmulation, SwizzledOperandsFromTensorCopiesEqualADirectProduct) {
  const unsigned seed = fusetune::testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(-3, 3);  // small integers: every sum exact
  std::vector<uint16_t> a(64 * 64), b(64 * 128);
  for (auto& x : a) x = to_16(DType::kF16, static_cast<float>(u(rng)));
  for (auto& x : b) x = to_16(DType::kF16, static_cast<float>(u(rng)));
  for (const int swizzle : {128, 0}) {
    SCOPED_TRACE("descriptors with swizzle " + std::to_string(swizzle) + ", seed " + std::to_string(seed));
    std::string text = swizzled_wgmma(swizzle);
    text.replace(text.find(", SW)"), 5, ", " + std::to_string(swizzle) + ")");
    text.replace(text.find(", SW)"), 5, ", " + std::to_string(swizzle) + ")");
    simt::Module m(text);
    std::vector<float> d(64 * 128, -1.0f);
    const simt::LaunchResult r = simt::launch(m.kernel("k"), {a.data(), b.data(), d.data(), nullptr, nullptr},
                                              {a.size() * 2, b.size() * 2, d.size() * 4, 0, 0}, {1, 128, 24584}, {});
    std::string findings;
    for (const std::string& f : r.findings) findings += f + "\n";
    if (swizzle == 128) {
      EXPECT_EQ(r.finding_count, 0u) << findings;  // (the wrong layout reads past sb's end)
    }
    const int wrong = products_differing(a, b, d);
    if (swizzle == 128) {
      EXPECT_EQ(wrong, 0) << "the swizzled operands' product differs from A * B";
      if (backend::nvrtc_available()) {
        const std::string ptx = backend::compile_ptx(text, "sm_90a");
        EXPECT_NE(ptx.find("cp.async.bulk.tensor.2d"), std::string::npos);
        EXPECT_NE(ptx.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"), std::string::npos);
        EXPECT_FALSE(backend::compile_cuda(text, "sm_90a").cubin.empty());
      }
    } else {
      EXPECT_GT(wrong, 1000) << "descriptors without the swizzle still read A * B";
    }
  }
}

// The same product as the code generator's IR says it (codegen/kernel_ir.h): tensor maps of a and
// b, an mbarrier thread 0 initialises and arrives on with the copies' bytes, its tensor copies,
// every thread's wait, four wgmmas of 128-byte swizzled operands. On the host backend against the
// direct product; the emitted CUDA compiles for sm_90a with its TMA and mbarrier instructions; a
// map the driver would refuse (a box wider than its swizzle) fails verification.
Kernel tma_wgmma_kernel() {
  Kernel k;
  k.name = "tma_wgmma";
  k.threads = 128;
  k.grid = 1;
  k.params = {{"a", DType::kF16, 64 * 64, false}, {"b", DType::kF16, 64 * 128, false}, {"d", DType::kF32, 64 * 128, true}};
  k.tensor_maps = {{"ta", "a", {64, 64}, {128}, {64, 64}, 128}, {"tb", "b", {128, 64}, {256}, {64, 64}, 128}};
  const std::string sa = k.add_shared("sa", DType::kF16, 64 * 64), sb = k.add_shared("sb", DType::kF16, 64 * 128);
  const std::string bar = k.add_shared("bar", DType::kU64, 1);
  k.thread_locals.push_back({"acc", 64, DType::kF32});
  k.body.push_back(serial_for("ft_i", "0", "64", {assign("acc[ft_i]", "0.0f")}));
  k.body.push_back(if_then("ft_thread == 0", {mbarrier_init(bar, "0", 1), mbarrier_init_fence()}));
  k.body.push_back(barrier());
  k.body.push_back(if_then("ft_thread == 0", {mbarrier_arrive(bar, "0", "24576"), tensor_load(sa, "0", "ta", {"0", "0"}, bar, "0"),
                                              tensor_load(sb, "0", "tb", {"0", "0"}, bar, "0"),
                                              tensor_load(sb, "4096", "tb", {"64", "0"}, bar, "0")}));
  k.body.push_back(mbarrier_wait(bar, "0", "0"));
  k.body.push_back(wgmma_fence("acc"));
  k.body.push_back(uniform_for("ft_kq", "0", "4",
                               {wgmma("acc", 0, 128, sa, "16 * ft_kq", 16, 1024, sb, "1024 * ft_kq", 8192, 1024, DType::kF16, false, 128)}));
  k.body.push_back(wgmma_commit());
  k.body.push_back(wgmma_wait("acc", 0));
  k.body.push_back(store_accumulators(128));
  verify_ir(k);
  return k;
}

TEST(WgmmaEmulation, TensorCopiesAndSwizzledOperandsThroughTheIr) {
  const unsigned seed = fusetune::testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(-3, 3);
  std::vector<uint16_t> a(64 * 64), b(64 * 128);
  for (auto& x : a) x = to_16(DType::kF16, static_cast<float>(u(rng)));
  for (auto& x : b) x = to_16(DType::kF16, static_cast<float>(u(rng)));
  const Kernel k = tma_wgmma_kernel();
  // The host backend, and an sm_90 GPU's where one is lent (the tensor maps encoded by the driver,
  // its TMA and wgmma on the same swizzle).
  for (auto& backend : fusetune::testing::test_backends("the TMA-fed wgmma")) {
    const std::string arch = backend->properties().arch;
    if (arch != "host" && arch != "sm_90") {
      std::printf("NOTE: the TMA-fed wgmma not run on %s (sm_90a only)\n", arch.c_str());
      continue;
    }
    auto module = backend->load({k});
    auto da = backend->allocate(a.size() * 2), db = backend->allocate(b.size() * 2), dd = backend->allocate(64 * 128 * 4);
    da->upload(a.data(), a.size() * 2);
    db->upload(b.data(), b.size() * 2);
    dd->fill_byte(0xFF);
    module->launch("tma_wgmma", {da.get(), db.get(), dd.get()});  // the host's findings throw
    std::vector<float> d(64 * 128);
    dd->download(d.data(), d.size() * 4);
    const int wrong = products_differing(a, b, d);
    EXPECT_EQ(wrong, 0) << arch << ", seed " << seed;
  }
  Kernel bad = k;
  bad.tensor_maps[0].box[0] = 128;  // 256 bytes inside a 128-byte swizzle
  EXPECT_THROW(verify_ir(bad), Error);
  // A destination not proven 1 KB-aligned under the 128-byte swizzle: an index of 512 bytes (256
  // halves), one of 512 bytes times a variable, an allocation at 512 bytes; an index of whole
  // kilobytes (512 halves) times variables passes.
  const auto with_index = [&](const std::string& index, int64_t offset) {
    Kernel moved = k;
    std::function<void(Block&)> visit = [&](Block& block) {
      for (Stmt& st : block) {
        if (st.kind == Stmt::Kind::kTensorLoad && st.name == "sb" && st.a == "4096") st.a = index;
        visit(st.body);
      }
    };
    visit(moved.body);
    moved.shared_bytes += 1024;
    for (SharedAlloc& alloc : moved.shared) {
      if (alloc.name == "sb") alloc.offset += offset;
      if (alloc.name == "bar") alloc.offset += 1024;
    }
    return moved;
  };
  EXPECT_NO_THROW(verify_ir(with_index("(ft_thread * 2 + 1) * 512", 0)));
  EXPECT_THROW(verify_ir(with_index("256", 0)), Error);
  EXPECT_THROW(verify_ir(with_index("(ft_thread + 1) * 256", 0)), Error);
  EXPECT_THROW(verify_ir(with_index("4096", 512)), Error);
  // A kernel's identity follows the parameters its maps map, whatever they are called.
  Kernel renamed = k, swapped = k;
  renamed.params[0].name = renamed.tensor_maps[0].source = "x";
  swapped.tensor_maps[0].source = "b";
  EXPECT_EQ(canonical_text(renamed), canonical_text(k));
  EXPECT_NE(canonical_text(swapped), canonical_text(k));
  if (!backend::nvrtc_available()) {
    std::printf("NOTE: NVRTC not available in this build; the TMA kernel's CUDA is not compiled\n");
    return;
  }
  const std::string cuda = emit_cuda({k});
  EXPECT_NE(cuda.find("FT_TENSOR_MAP(a, 64x64, 128, 64x64, 128) ta"), std::string::npos);
  const std::string ptx = backend::compile_ptx(cuda, "sm_90a");
  for (const char* op : {"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                         "mbarrier.try_wait.parity", "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"}) {
    EXPECT_NE(ptx.find(op), std::string::npos) << op;
  }
  EXPECT_FALSE(backend::compile_cuda(cuda, "sm_90a").cubin.empty());
}

// What the executor reports when the wgmma's asynchrony is not respected: a missing wait (the
// accumulators read before the results land, and results that never land), a store to an operand
// before the wait, a missing barrier between the operands' stores and the wgmma.
TEST(WgmmaEmulation, AMissingWaitBarrierOrAnEarlyStoreIsReported) {
  auto backend = backend::make_host_backend();
  const std::map<std::string, std::string> expected = {
      {"no wait", "wgmma results never waited for"},
      {"early store", "store to shared memory a wgmma is still reading"},
      {"no barrier", "on shared 's"}};  // a read before or after the other threads' stores: initcheck or racecheck
  for (const auto& [mutation, finding] : expected) {
    const Kernel k = one_wgmma_kernel(DType::kF16, 16, 256, mutation);
    auto module = backend->load({k});
    std::vector<uint16_t> a(64 * 16, to_16(DType::kF16, 1.0f)), b(16 * 16, to_16(DType::kF16, 1.0f));
    auto da = backend->allocate(a.size() * 2), db = backend->allocate(b.size() * 2), dd = backend->allocate(64 * 16 * 4);
    da->upload(a.data(), a.size() * 2);
    db->upload(b.data(), b.size() * 2);
    try {
      module->launch("one_wgmma", {da.get(), db.get(), dd.get()});
      ADD_FAILURE() << mutation << ": no finding";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(finding), std::string::npos) << mutation << ": " << e.what();
    }
  }
}

// MatMul + bias + activation chains (2-D over odd M, N, K; batched; a product cast to float32):
// one group each, as in test_tensor_cores.cpp.
using Chains = fusetune::testing::GroupedGraph;

Chains wgmma_chains(DType dtype) {
  Chains c;
  int id = 0;
  const auto chain = [&](Shape a, Shape b, const char* activation) {
    c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, dtype, std::move(a), std::move(b), activation, false, id++));
  };
  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{1, 16, 8}, {7, 16, 17}, {64, 32, 64}, {100, 33, 40},
                                                                   {130, 100, 300}, {33, 1000, 24}}) {
    chain({m, k}, {k, n}, id % 2 == 0 ? "Relu" : "Tanh");
  }
  chain({2, 70, 17}, {2, 17, 20}, "Sigmoid");
  chain({3, 7, 40}, {40, 33}, "Relu");
  return c;
}

// Tiles: one warpgroup of one 64 x 16 tile; one of 64 x 64 with two steps of 16 a step; two
// warpgroups stacked (128 rows) and side by side (64 rows: the grid splits the columns); a tile
// wider than one wgmma (300 columns: two instructions a warpgroup); two 64-row tiles a warpgroup.
TileConfig wgmma_tile(std::vector<int64_t> tile, int64_t step, int threads) {
  TileConfig t{std::move(tile), step, threads, 1, true};
  t.wgmma = true;
  return t;
}

using fusetune::testing::with_batch;

TEST(WgmmaMatMul, ChainsMatchTheReferenceOnEveryTile) {
  const std::vector<TileConfig> tiles = {wgmma_tile({64, 16}, 16, 128), wgmma_tile({64, 64}, 32, 128),
                                         wgmma_tile({128, 64}, 16, 256), wgmma_tile({64, 128}, 64, 256),
                                         wgmma_tile({64, 300}, 16, 128), wgmma_tile({128, 32}, 32, 128)};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Chains c = wgmma_chains(dtype);
    for (const TileConfig& tile : tiles) {
      fusetune::testing::check_groups(c.g, c.groups, [&](const FusionGroup& fg) {
        return with_batch(tile, c.g.value(fg.outputs[0]).shape.size());
      }, std::string(dtype_name(dtype)) + " chains/" + tile.str(), {false, {"sm_90"}});
    }
  }
}

// How many times `needle` stands in `text`.
size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The TMA form's widest tile, two warpgroups of 64 x 256 (128 accumulators a thread),
// warp-specialized (`ws`) or not, compiled for sm_90a: it must not spill. Its resources.
backend::KernelResources widest_tma_tile(bool ws) {
  Chains wide;
  wide.groups.push_back(fusetune::testing::add_matmul_chain(wide.g, DType::kF16, {256, 512}, {512, 512}, "Relu", false, 0));
  TileConfig big = wgmma_tile({128, 256}, 64, 256);
  big.tma = true;
  big.ws = ws;
  const Kernel kernel = lower_group(wide.g, wide.groups[0], big, "tma_wide").kernel;
  const backend::CompiledCuda cc = backend::compile_cuda(emit_cuda({kernel}), "sm_90a");
  if (!cc.resources.count(kernel.name)) {
    ADD_FAILURE() << big.str() << ": no resources\n" << cc.log;
    return {};
  }
  const backend::KernelResources& r = cc.resources.at(kernel.name);
  std::printf("NOTE: %s: %d registers (at entry), %d bytes of stack, spills %d/%d bytes\n", big.str().c_str(), r.registers, r.stack_bytes,
              r.spill_store_bytes, r.spill_load_bytes);
  EXPECT_FALSE(r.spills()) << big.str() << "\n" << cc.log;
  return r;
}

// The TMA form (TileConfig::tma): thread 0 copies each step's boxes (A: 64 of K by the tile's rows;
// B: 64 columns by 64 of K) into 128-byte swizzled slots, every thread waits on the slot's
// full mbarrier, the wgmmas read the swizzled layouts, each warp releases a slot on its empty
// mbarrier and thread 0 waits for that before it copies into the slot again (K of 456: 8 steps
// through a ring of 4 slots). On K and rows that end inside a box (the copies' zero fill is the
// only edge handling), a batch of A and B, a batch of A over one B, one warpgroup and two
// (stacked), float16 and bfloat16: against the reference under the four checks
// (and on an sm_90 GPU where one is lent); the PTX copies by cp.async.bulk.tensor and has no cp.async.
TEST(WgmmaMatMul, TmaFormMatchesTheReference) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Chains c;
    int id = 0;
    for (const auto& [a, b] : std::vector<std::pair<Shape, Shape>>{{{130, 200}, {200, 136}}, {{130, 64}, {64, 128}},
                                                                   {{2, 130, 24}, {2, 24, 64}}, {{3, 140, 40}, {40, 64}},
                                                                   {{70, 456}, {456, 128}}}) {
      c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, dtype, a, b, id % 2 == 0 ? "Relu" : "Tanh", false, id));
      ++id;
    }
    for (TileConfig tile : {wgmma_tile({64, 128}, 64, 128), wgmma_tile({128, 64}, 64, 256)}) {
      tile.tma = true;
      fusetune::testing::check_groups(c.g, c.groups, [&](const FusionGroup& fg) {
        return with_batch(tile, c.g.value(fg.outputs[0]).shape.size());
      }, std::string(dtype_name(dtype)) + " TMA/" + tile.str(), {false, {"sm_90"}});
    }
  }
  if (!backend::nvrtc_available()) {
    std::printf("NOTE: NVRTC not available in this build; the TMA form's PTX not read\n");
    return;
  }
  Chains c;
  c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, DType::kF16, {70, 200}, {200, 136}, "Relu", false, 0));
  TileConfig tile = wgmma_tile({64, 128}, 64, 128);
  tile.tma = true;
  const std::string ptx = backend::compile_ptx(emit_cuda({lower_group(c.g, c.groups[0], tile, "tma").kernel}), "sm_90a");
  EXPECT_NE(ptx.find("cp.async.bulk.tensor.2d"), std::string::npos);
  EXPECT_NE(ptx.find("mbarrier.try_wait.parity"), std::string::npos);
  EXPECT_EQ(ptx.find("cp.async.cg"), std::string::npos);
  EXPECT_EQ(occurrences(ptx, "bar.sync"), 1u) << "one block barrier: the one after the mbarriers' init";
  // The widest tile compiles without spills at the 255 registers a thread may hold.
  widest_tma_tile(false);
}

// The warp-specialized TMA form (TileConfig::ws): a producer warpgroup after the candidate's
// threads, whose first thread copies every step's boxes once the consumers released the slot,
// while the consumers only wait, multiply, release and run the epilogue from their registers. On
// the TMA form's shapes (K and rows that end inside a box, batches, 8 steps through 4 slots), one
// consumer warpgroup and two, float16 (bfloat16 on one shape): against the reference under the four
// checks (and on an sm_90 GPU where one is lent). The kernel: the candidate's threads and 128 more,
// its register budgets split by setmaxnreg (128 consumers: 240 a thread, the producer 40),
// launched one block an SM; its PTX has one barrier, the tensor copies and both setmaxnregs, and
// the widest tile (two warpgroups of 64 x 256) compiles without spills at the 232 registers its
// consumers take.
TEST(WgmmaMatMul, TheWarpSpecializedFormMatchesTheReference) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Chains c;
    int id = 0;
    std::vector<std::pair<Shape, Shape>> shapes = {{{130, 200}, {200, 136}}, {{2, 130, 24}, {2, 24, 64}}, {{3, 140, 40}, {40, 64}},
                                                   {{70, 456}, {456, 128}}};
    if (dtype == DType::kBF16) shapes.resize(1);
    for (const auto& [a, b] : shapes) {
      c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, dtype, a, b, id % 2 == 0 ? "Relu" : "Tanh", false, id));
      ++id;
    }
    for (TileConfig tile : {wgmma_tile({64, 128}, 64, 128), wgmma_tile({128, 64}, 64, 256)}) {
      tile.tma = tile.ws = true;
      fusetune::testing::check_groups(c.g, c.groups, [&](const FusionGroup& fg) {
        return with_batch(tile, c.g.value(fg.outputs[0]).shape.size());
      }, std::string(dtype_name(dtype)) + " warp-specialized/" + tile.str(), {false, {"sm_90"}});
    }
  }
  Chains c;
  c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, DType::kF16, {70, 200}, {200, 136}, "Relu", false, 0));
  TileConfig tile = wgmma_tile({64, 128}, 64, 128);
  tile.tma = tile.ws = true;
  const Kernel k = lower_group(c.g, c.groups[0], tile, "ws").kernel;
  EXPECT_EQ(k.threads, 256);
  const std::string ir = to_text(k);
  for (const char* line : {"roles ft_thread < 128", "setmaxnreg.inc 240", "setmaxnreg.dec 40"}) {
    EXPECT_NE(ir.find(line), std::string::npos) << line << " in\n" << ir;
  }
  const std::string cuda = emit_cuda({k});
  EXPECT_NE(cuda.find("__launch_bounds__(256, 1)"), std::string::npos);
  if (!backend::nvrtc_available()) {
    std::printf("NOTE: NVRTC not available in this build; the warp-specialized form's PTX not read\n");
    return;
  }
  const backend::CompiledCuda compiled = backend::compile_cuda(cuda, "sm_90a");
  ASSERT_TRUE(compiled.resources.count(k.name)) << compiled.log;
  EXPECT_EQ(compiled.resources.at(k.name).registers, planner::warp_specialized_registers(128).entry) << compiled.log;
  const std::string ptx = backend::compile_ptx(cuda, "sm_90a");
  for (const char* text : {"cp.async.bulk.tensor.2d", "setmaxnreg.inc.sync.aligned.u32 240", "setmaxnreg.dec.sync.aligned.u32 40",
                           ".minnctapersm 1"}) {
    EXPECT_NE(ptx.find(text), std::string::npos) << text;
  }
  EXPECT_EQ(occurrences(ptx, "bar.sync"), 1u) << "one block barrier: the one after the mbarriers' init";
  // ptxas reports the count at entry, which the launch bounds fixed.
  EXPECT_EQ(widest_tma_tile(true).registers, planner::warp_specialized_registers(256).entry);
}

// A MatMul + bias + Relu of `dtype`, m x k times k x n.
Graph ffn(DType dtype, int64_t m, int64_t k, int64_t n) {
  Graph g;
  int x = add_op(g, "MatMul", {add_input(g, "a", dtype, {m, k}), fusetune::testing::random_constant(g, "w", dtype, {k, n}, 7u)});
  x = add_op(g, "Add", {x, fusetune::testing::random_constant(g, "bias", dtype, {n}, 8u)});
  add_op(g, "Relu", {x});
  return g;
}

// Candidate c's twin `plain` is among `cands`, c models no faster and ranks after it.
void expect_after_its_twin(const std::vector<planner::Candidate>& cands, const planner::Candidate& c, const TileConfig& plain) {
  const auto twin = std::find_if(cands.begin(), cands.end(), [&](const planner::Candidate& o) { return o.config == plain; });
  ASSERT_NE(twin, cands.end()) << c.config.str();
  EXPECT_GE(c.cost.modeled_us, twin->cost.modeled_us) << c.config.str();
  EXPECT_LT(twin - cands.begin(), &c - cands.data()) << "the twin ranks first in a tie: " << c.config.str();
}

// The planner offers a TMA twin of each wgmma candidate with steps of 64 whose warpgroup tiles are
// whole 64-column boxes and whose operands are read as laid out; the model charges it as its
// twin (no GPU has measured the difference), so it never wins a tie; a step other than 64 is
// refused.
TEST(WgmmaPlanner, TmaTwinsWhereTheOperandsAllowModeledNoFasterThanTheirTwins) {
  const planner::Device h100 = planner::find_device("h100");
  planner::TilingOptions all{100000, 100.0};
  const Graph g = ffn(DType::kF16, 512, 1024, 4096);
  const auto cands = planner::tile_candidates(g, fusetune::testing::whole_graph_group(g), h100, all);
  int twins = 0;
  for (const auto& c : cands) {
    if (!c.config.tma || c.config.ws) continue;  // (the warp-specialized twins: the next test)
    ++twins;
    EXPECT_EQ(c.config.reduce_step, 64) << c.config.str();
    TileConfig plain = c.config;
    plain.tma = false;
    expect_after_its_twin(cands, c, plain);
  }
  EXPECT_GT(twins, 0);
  EXPECT_FALSE(cands.front().config.tma);
  TileConfig odd = wgmma_tile({64, 128}, 32, 128);
  odd.tma = true;
  EXPECT_FALSE(planner::evaluate_tile(g, fusetune::testing::whole_graph_group(g), h100, odd).valid) << "steps of 32";
}

// Warp-specialized twins (TileConfig::ws) of each TMA candidate of one block an SM whose product
// is the group's only anchor with its epilogue from registers: launched one block an SM at the entry register count
// that their budgets split (128 consumers: 240 at entry, 240 for them, 40 for the producer; 256:
// 168, 232, 40: within the block's 65,536 registers), charged as their TMA twin at that
// occupancy (no GPU has measured the form), so modeled no faster and ranked after it. A group
// whose product feeds a reduction gets none; a split or a twin without TMA is refused.
TEST(WgmmaPlanner, WarpSpecializedTwinsLaunchOneBlockAnSmWithTheirRegistersSplit) {
  const planner::WarpSpecializedRegisters one = planner::warp_specialized_registers(128), two = planner::warp_specialized_registers(256);
  EXPECT_EQ(std::vector<int>({one.block_threads, one.entry, one.consumer, one.producer}), std::vector<int>({256, 240, 240, 40}));
  EXPECT_EQ(std::vector<int>({two.block_threads, two.entry, two.consumer, two.producer}), std::vector<int>({384, 168, 232, 40}));
  for (const planner::WarpSpecializedRegisters& r : {one, two}) {
    EXPECT_LE(r.consumer * (r.block_threads - 128) + r.producer * 128, r.entry * r.block_threads);
    EXPECT_LE(r.entry, r.consumer) << "an .inc lowering the count";
  }
  const planner::Device h100 = planner::find_device("h100");
  planner::TilingOptions all{100000, 100.0};
  const Graph g = ffn(DType::kF16, 512, 1024, 4096);
  const FusionGroup fg = fusetune::testing::whole_graph_group(g);
  const auto cands = planner::tile_candidates(g, fg, h100, all);
  int twins = 0;
  for (const auto& c : cands) {
    if (!c.config.ws) continue;
    ++twins;
    EXPECT_TRUE(c.config.tma) << c.config.str();
    EXPECT_EQ(c.config.split_k, 1) << c.config.str();
    EXPECT_EQ(c.cost.blocks_per_sm, 1) << c.config.str();
    EXPECT_EQ(c.cost.registers, planner::warp_specialized_registers(c.config.threads).entry) << c.config.str();
    TileConfig plain = c.config;
    plain.ws = false;
    expect_after_its_twin(cands, c, plain);
  }
  EXPECT_GT(twins, 0);
  TileConfig tile = wgmma_tile({128, 128}, 64, 256);
  tile.ws = true;
  EXPECT_NE(planner::evaluate_tile(g, fg, h100, tile).reject.find("warp-specialized"), std::string::npos) << "without TMA";
  tile.tma = true;
  EXPECT_TRUE(planner::evaluate_tile(g, fg, h100, tile).valid);
  tile.split_k = 2;
  EXPECT_NE(planner::evaluate_tile(g, fg, h100, tile).reject.find("warp-specialized"), std::string::npos) << "split";
  // A product whose rows a softmax normalizes: its values leave through shared memory, no twin.
  Graph reduced = ffn(DType::kF16, 512, 1024, 256);
  add_op(reduced, "Softmax", {reduced.nodes().back().outputs[0]}, fusetune::testing::attrs({{"axis", int64_t{-1}}}));
  const FusionGroup rfg = fusetune::testing::whole_graph_group(reduced);
  int reduced_tma = 0;
  for (const auto& c : planner::tile_candidates(reduced, rfg, h100, all)) {
    reduced_tma += c.config.tma ? 1 : 0;
    EXPECT_FALSE(c.config.ws) << c.config.str();
  }
  EXPECT_GT(reduced_tma, 0);
}

TEST(WgmmaPlanner, CandidatesOnlyOnComputeCapabilityNineForSixteenBitOperands) {
  const planner::Device h100 = planner::find_device("h100"), h200 = planner::find_device("h200"),
                        a100 = planner::find_device("a100");
  EXPECT_TRUE(planner::has_wgmma(h100));
  EXPECT_TRUE(planner::has_wgmma(h200));
  EXPECT_FALSE(planner::has_wgmma(a100));
  const auto count = [](const std::vector<planner::Candidate>& cands) {
    int n = 0;
    for (const auto& c : cands) n += c.config.wgmma ? 1 : 0;
    return n;
  };
  planner::TilingOptions all{100000, 2.0};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Graph g = ffn(dtype, 512, 1024, 4096);
    const FusionGroup fg = fusetune::testing::whole_graph_group(g);
    const auto cands = planner::tile_candidates(g, fg, h100, all);
    EXPECT_GT(count(cands), 0);
    EXPECT_GT(count(planner::tile_candidates(g, fg, h200, all)), 0);
    EXPECT_EQ(count(planner::tile_candidates(g, fg, a100, all)), 0);
    for (const auto& c : cands) {
      if (!c.config.wgmma) continue;
      EXPECT_TRUE(c.config.mma);
      EXPECT_EQ(c.config.threads % 128, 0) << c.config.str();
      EXPECT_EQ(c.config.reduce_step % 16, 0) << c.config.str();
      EXPECT_NE(c.config.str().find(" mma wgmma"), std::string::npos);
      EXPECT_LE(c.cost.smem_bytes, h100.shared_memory_per_block_optin);
      EXPECT_LE(c.cost.registers, h100.max_registers_per_thread);
    }
    // By wgmma the ring holds four unpadded slices of core matrices (one step's wgmmas stay in
    // flight while two steps ahead are copied), as the kernel allocates them; a thread holds fewer
    // registers than by mma.sync (the operands stay in shared memory); on a larger projection the best candidate
    // is a wgmma one, modeled faster than the best by mma.sync: tiles of 128 x 256 or 256 x 128
    // that mma.sync's registers cannot hold halve the L2 traffic of 128 x 128, and its
    // arithmetic is charged at the tensor peak against the two thirds mma.sync attains.
    TileConfig sync{{128, 128}, 64, 256, 1, true}, group = sync;
    group.wgmma = true;
    const planner::Cost by_sync = planner::evaluate_tile(g, fg, h100, sync), by_group = planner::evaluate_tile(g, fg, h100, group);
    ASSERT_TRUE(by_sync.valid && by_group.valid) << by_sync.reject << by_group.reject;
    EXPECT_EQ(by_group.smem_bytes, 4 * (128 * 64 + 64 * 128) * 2);
    EXPECT_EQ(lower_group(g, fg, group, "k").kernel.shared_bytes, by_group.smem_bytes);
    EXPECT_LT(by_group.registers, by_sync.registers);
    const Graph big = ffn(dtype, 2048, 1024, 4096);
    const FusionGroup big_fg = fusetune::testing::whole_graph_group(big);
    const auto big_cands = planner::tile_candidates(big, big_fg, h100, all);
    ASSERT_TRUE(big_cands.front().config.wgmma) << "the best candidate: " << big_cands.front().config.str();
    for (const auto& c : big_cands) {
      if (!c.config.mma || c.config.wgmma) continue;
      EXPECT_LT(big_cands.front().cost.modeled_us, c.cost.modeled_us) << c.config.str();
      break;
    }
    // Refused with a reason: on an A100, with threads that are not whole warpgroups, with flash.
    const planner::Cost on_a100 = planner::evaluate_tile(g, fg, a100, group);
    EXPECT_FALSE(on_a100.valid);
    EXPECT_NE(on_a100.reject.find("compute capability 9.0"), std::string::npos) << on_a100.reject;
    TileConfig odd = group;
    odd.threads = 64;
    EXPECT_NE(planner::evaluate_tile(g, fg, h100, odd).reject.find("warpgroups"), std::string::npos);
  }
  // float32 under TF32: tensor cores by mma.sync only.
  const Graph g = ffn(DType::kF32, 512, 1024, 4096);
  const FusionGroup fg = fusetune::testing::whole_graph_group(g);
  planner::TilingOptions tf32 = all;
  tf32.tf32 = true;
  EXPECT_EQ(count(planner::tile_candidates(g, fg, h100, tf32)), 0);
  TileConfig group{{128, 128}, 64, 256, 1, true};
  group.wgmma = true;
  const planner::Cost refused = planner::evaluate_tile(g, fg, h100, group, tf32);
  EXPECT_FALSE(refused.valid);
  EXPECT_NE(refused.reject.find("float16 or bfloat16"), std::string::npos) << refused.reject;
}

// The planner's best candidates for a float16 FFN projection on the H100 are wgmma kernels that
// ptxas compiles for sm_90a without spilling and without serializing the wgmmas, with wgmma, cp.async and the proxy fence in their
// PTX and no ldmatrix or mma.sync; a smaller shape under the same tiles matches the reference.
TEST(WgmmaPlanner, BestCandidatesCompileWithoutSpillsAndMatchTheReference) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available in this build";
  const planner::Device h100 = planner::find_device("h100");
  const Graph g = ffn(DType::kF16, 512, 1024, 4096);
  const FusionGroup fg = fusetune::testing::whole_graph_group(g);
  std::vector<Kernel> kernels;
  std::vector<TileConfig> tiles;
  for (const planner::Candidate& c : planner::tile_candidates(g, fg, h100, {100000, 2.0})) {
    if (!c.config.wgmma || c.config.tma || tiles.size() == 4) continue;  // (the TMA form: TmaFormMatchesTheReference)
    tiles.push_back(c.config);
    kernels.push_back(lower_group(g, fg, c.config, "k" + std::to_string(tiles.size())).kernel);
  }
  ASSERT_EQ(tiles.size(), 4u);
  const std::string cuda = emit_cuda(kernels);
  const backend::CompiledCuda cc = backend::compile_cuda(cuda, "sm_90");
  // ptxas serializes wgmmas it cannot keep asynchronous (accumulators touched in between) and says so.
  EXPECT_EQ(cc.log.find("serialized"), std::string::npos) << cc.log;
  for (size_t i = 0; i < kernels.size(); ++i) {
    ASSERT_TRUE(cc.resources.count(kernels[i].name)) << cc.log;
    EXPECT_FALSE(cc.resources.at(kernels[i].name).spills()) << tiles[i].str() << "\n" << cc.log;
  }
  const std::string ptx = backend::compile_ptx(cuda, "sm_90");
  for (const char* present : {"wgmma.mma_async.sync.aligned.m64n", "wgmma.wait_group.sync.aligned", "cp.async.cg.shared.global",
                              "fence.proxy.async.shared::cta"}) {
    EXPECT_NE(ptx.find(present), std::string::npos) << present;
  }
  for (const char* absent : {"ldmatrix", "mma.sync"}) EXPECT_EQ(ptx.find(absent), std::string::npos) << absent;
  const Graph small = ffn(DType::kF16, 160, 96, 300);
  const FusionGroup sfg = fusetune::testing::whole_graph_group(small);
  for (const TileConfig& t : tiles) {
    fusetune::testing::check_groups(small, {sfg}, [&](const FusionGroup&) { return t; }, "float16 FFN/" + t.str(),
                                    {true, {"sm_90"}});
  }
}

// Wave-fitted widths (planner/tiling.cpp tile_candidates): TinyLlama's up projection, 512 x 2,048
// by 2,048 x 5,632, in 128 x 128 tiles is 176 blocks of one an SM on the H200's 132 SMs, two waves,
// the second a third full; 128 x 176 tiles are 128 blocks, one wave. The planner offers that width
// (wgmma, and by mma.sync 128 x 96: 236 blocks on 264 slots) and models it faster than the best
// 128 x 128 tile; such tiles compile for sm_90a without spills and match the reference on odd
// shapes on the host. A product whose 128-column tiles make at most one wave gets no such width,
// nor do tiles under 64 rows.
TEST(WgmmaPlanner, WaveFittedWidthsFillTheLastWave) {
  const planner::Device h200 = planner::find_device("h200");
  const Graph g = ffn(DType::kF16, 512, 2048, 5632);
  const FusionGroup fg = fusetune::testing::whole_graph_group(g);
  planner::TilingOptions all{100000, 2.0};
  all.libraries.clear();
  const auto cands = planner::tile_candidates(g, fg, h200, all);
  const auto best_of = [&](int64_t tn, bool wgmma) {
    const planner::Candidate* best = nullptr;
    for (const auto& c : cands) {
      if (c.config.mma && c.config.wgmma == wgmma && c.config.tile == std::vector<int64_t>{128, tn} && c.config.split_k == 1 &&
          (best == nullptr || c.cost.modeled_us < best->cost.modeled_us)) {
        best = &c;
      }
    }
    return best;
  };
  const planner::Candidate* fitted = best_of(176, true);
  const planner::Candidate* square = best_of(128, true);
  ASSERT_NE(fitted, nullptr);
  ASSERT_NE(square, nullptr);
  EXPECT_EQ(fitted->cost.tiles, 4 * 32);
  EXPECT_EQ(square->cost.tiles, 4 * 44);
  EXPECT_LT(fitted->cost.modeled_us, 0.9 * square->cost.modeled_us) << fitted->config.str() << " against " << square->config.str();
  ASSERT_NE(best_of(96, false), nullptr);  // by mma.sync: two waves of 59 x 4 tiles
  for (const auto& c : cands) {
    const int64_t tn = c.config.tile.back();
    if ((tn & (tn - 1)) != 0) {
      EXPECT_GE(c.config.tile[0], 64) << c.config.str();
    }
  }
  // Products whose 128-column tiles make at most one wave (BERT-base's at sequence 128, where the
  // second H200 lease measured cuBLASLt faster than every generated tile): nothing to fit.
  for (const auto& [m, n] : std::vector<std::pair<int64_t, int64_t>>{{128, 768}, {128, 3072}, {256, 3072}}) {
    const Graph small = ffn(DType::kF16, m, 768, n);
    const FusionGroup small_fg = fusetune::testing::whole_graph_group(small);
    for (const auto& c : planner::tile_candidates(small, small_fg, h200, all)) {
      const int64_t tn = c.config.tile.back();
      EXPECT_TRUE((tn & (tn - 1)) == 0 || tn == n) << m << " x " << n << ": " << c.config.str();
    }
  }
  if (backend::nvrtc_available()) {
    const std::vector<Kernel> kernels = {lower_group(g, fg, fitted->config, "fitted").kernel,
                                         lower_group(g, fg, best_of(96, false)->config, "fitted_sync").kernel};
    const backend::CompiledCuda cc = backend::compile_cuda(emit_cuda(kernels), "sm_90");
    EXPECT_EQ(cc.log.find("serialized"), std::string::npos) << cc.log;
    for (const Kernel& k : kernels) {
      ASSERT_TRUE(cc.resources.count(k.name)) << cc.log;
      EXPECT_FALSE(cc.resources.at(k.name).spills()) << k.name << "\n" << cc.log;
    }
  } else {
    std::cout << "NOTE: NVRTC not available in this build: the fitted tiles' spill check not run\n";
  }
  const Graph odd = ffn(DType::kF16, 160, 96, 300);
  const FusionGroup odd_fg = fusetune::testing::whole_graph_group(odd);
  for (const TileConfig& t : {fitted->config, best_of(96, false)->config, wgmma_tile({64, 48}, 32, 128)}) {
    fusetune::testing::check_groups(odd, {odd_fg}, [&](const FusionGroup&) { return t; }, "float16 FFN/" + t.str(), {true, {"sm_90"}});
  }
}

// The mutation test on a wgmma kernel (as tools/barrier_mutations does for the models' candidates):
// each barrier that ordered something, and each cp.async, wgmma or mbarrier wait that landed
// something, ended a wgmma's reads or observed a phase, is deleted in turn (the executor skips its
// line) and verification must then fail (`every_barrier`: each barrier, whether or not it ordered
// an access: one that orders mbarrier inits before their use). Returns how many waits of each kind
// (`ft_cp_async_wait(`, `ft_wgmma_wait(`, `ft_mbarrier_wait(`) the kernel has, and the unmutated
// run's counters.
struct Mutated {
  std::map<std::string, int> kinds;
  simt::Counters counters;
  int waits(const std::string& kind) const { return kinds.count(kind) ? kinds.at(kind) : 0; }
};
Mutated every_needed_barrier_and_wait_caught(const Graph& g, const TileConfig& tile, bool every_barrier = false) {
  const FusionGroup fg = fusetune::testing::whole_graph_group(g);
  const LoweredKernel lk = lower_group(g, fg, tile, "k");
  const std::string text = emit_cuda({lk.kernel});
  std::vector<int> barriers, waits;
  Mutated out;
  std::map<std::string, int>& kinds = out.kinds;
  int line = 0;
  for (size_t at = 0, next = 0; at < text.size(); at = next + 1) {
    next = text.find('\n', at);
    if (next == std::string::npos) next = text.size();
    ++line;
    const std::string l = text.substr(at, next - at);
    if (at < text.find("extern \"C\" __global__")) continue;  // the intrinsics' definitions
    if (l.find("__syncthreads();") != std::string::npos) barriers.push_back(line);
    for (const char* kind : {"ft_cp_async_wait(", "ft_wgmma_wait(", "ft_mbarrier_wait("}) {
      if (l.find(kind) == std::string::npos) continue;
      waits.push_back(line);
      ++kinds[kind];
    }
  }
  const unsigned seed = fusetune::testing::test_seed();
  const auto run = [&](const simt::Options& o, simt::Counters* counted) {
    auto be = backend::make_host_backend("", o);
    auto module = be->load({lk.kernel});
    std::mt19937 rng(seed);
    const backend::VerifyResult r = backend::verify_kernel(g, fg, lk, *be, *module, rng, {});
    if (counted != nullptr) *counted = module->counters().at("k");
    return r;
  };
  simt::Counters& base = out.counters;
  const backend::VerifyResult unmutated = run({}, &base);
  EXPECT_TRUE(unmutated.ok) << tile.str() << " seed " << seed << ": " << unmutated.detail;
  if (!unmutated.ok) return out;
  int caught = 0;
  for (int b : barriers) {
    if (!every_barrier && !base.barrier_orderings.count(b)) continue;
    simt::Options o;
    o.skip_barriers = {b};
    EXPECT_FALSE(run(o, nullptr).ok) << tile.str() << ": the barrier at kernels.cu:" << b << " deleted, and nothing noticed (seed " << seed << ")";
    ++caught;
  }
  int landed = 0;
  for (int w : waits) {
    if (!base.wait_landings.count(w)) continue;
    simt::Options o;
    o.skip_waits = {w};
    EXPECT_FALSE(run(o, nullptr).ok) << tile.str() << ": the wait at kernels.cu:" << w << " deleted, and nothing noticed (seed " << seed << ")";
    ++landed;
  }
  EXPECT_GE(caught, 1) << tile.str();
  EXPECT_EQ(landed, static_cast<int>(waits.size())) << tile.str() << ": a wait that landed or observed nothing";
  return out;
}

// The kernel of `tile` on g's one group is clean whatever order its threads run in (two schedule
// seeds of the executor's).
void clean_under_schedules(const Graph& g, const TileConfig& tile) {
  const FusionGroup fg = fusetune::testing::whole_graph_group(g);
  const LoweredKernel lk = lower_group(g, fg, tile, "k");
  for (const uint64_t schedule : {uint64_t{3}, uint64_t{1234}}) {
    simt::Options o;
    o.schedule_seed = schedule;
    auto be = backend::make_host_backend("", o);
    auto module = be->load({lk.kernel});
    std::mt19937 rng(fusetune::testing::test_seed());
    const backend::VerifyResult r = backend::verify_kernel(g, fg, lk, *be, *module, rng, {});
    EXPECT_TRUE(r.ok) << tile.str() << ", schedule seed " << schedule << ": " << r.detail;
  }
}

// The cp.async form: the in-loop wgmma wait (one group left in flight) is caught by the store of
// the copies into a slot the previous step's wgmmas still read, the last one by results that never
// land. Rows of whole 16-byte units (both operands by cp.async), six steps of 32: the ring's four
// slots are written again.
TEST(WgmmaMatMul, EveryNeededBarrierAndWaitDeletedIsCaught) {
  const Mutated m = every_needed_barrier_and_wait_caught(ffn(DType::kF16, 130, 192, 296), wgmma_tile({128, 128}, 32, 256));
  EXPECT_GE(m.waits("ft_wgmma_wait("), 2);  // in the loop and after it
  EXPECT_GE(m.waits("ft_cp_async_wait("), 1);
}

// The TMA form, 8 steps of 64 through 4 slots: the slot's full wait deleted leaves the wgmmas
// reading a copy in flight; the empty wait deleted lets thread 0 copy into a slot other warps'
// wgmmas may still read (a write-after-read nothing orders, hazards.h Clocks); the init's barrier
// deleted leaves the mbarriers used in their init's interval. That barrier is the block's only one.
TEST(WgmmaMatMul, TheTmaFormsMbarrierWaitsAndBarrierDeletedAreCaught) {
  TileConfig tile = wgmma_tile({128, 128}, 64, 256);
  tile.tma = true;
  const Mutated m = every_needed_barrier_and_wait_caught(ffn(DType::kF16, 130, 456, 136), tile, true);
  EXPECT_EQ(m.waits("ft_mbarrier_wait("), 2);  // full and empty
  EXPECT_EQ(m.waits("ft_cp_async_wait("), 0);
  EXPECT_EQ(m.counters.barriers, m.counters.blocks);
  clean_under_schedules(ffn(DType::kF16, 130, 456, 136), tile);
}

// The warp-specialized form (TileConfig::ws), 8 steps of 64 through its ring: the consumers' full
// wait deleted leaves their wgmmas reading a copy in flight; the producer's empty wait deleted
// lets it copy into a slot the consumers' wgmmas may still read; the init's barrier deleted
// leaves the mbarriers used in their init's interval, and it is the block's only barrier; the
// wgmma waits (one group in flight in the loop, none after it) each land results. Clean under
// other schedules, as the TMA form.
TEST(WgmmaMatMul, TheWarpSpecializedFormsWaitsAndBarrierDeletedAreCaught) {
  TileConfig tile = wgmma_tile({128, 128}, 64, 256);
  tile.tma = tile.ws = true;
  const Mutated m = every_needed_barrier_and_wait_caught(ffn(DType::kF16, 130, 456, 136), tile, true);
  EXPECT_EQ(m.waits("ft_mbarrier_wait("), 2);  // the consumers' full, the producer's empty
  EXPECT_EQ(m.waits("ft_wgmma_wait("), 2);
  EXPECT_EQ(m.counters.barriers, m.counters.blocks);
  clean_under_schedules(ffn(DType::kF16, 130, 456, 136), tile);
}

}  // namespace
}  // namespace fusetune::codegen
