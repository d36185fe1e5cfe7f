// The SIMT executor on hand-written CUDA text: each check catches the bug planted for it (a race,
// a divergent barrier, a shared out-of-bounds access, an uninitialised shared read, a deadlock,
// a misaligned vector load), passes the same kernel once it is fixed, and the counters count what
// a GPU would for accesses whose coalescing and bank conflicts are known in advance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include "backend/nvrtc.h"
#include "codegen/emit.h"
#include "core/error.h"
#include "core/kernel_text.h"
#include "simt/counters.h"
#include "simt/executor.h"
#include "simt/module.h"
#include "unit/test_dir.h"

namespace fusetune {
namespace {

// The CUDA text of `kernels` after the code generator's own intrinsic layer and prelude.
std::string cuda(const std::string& kernels) { return codegen::emit_cuda({}) + kernels; }

struct Ran {
  simt::LaunchResult result;
  std::vector<float> out;
};

// A float buffer 256-byte aligned as cudaMalloc's (and the host backend's 64-byte aligned
// buffers are sector-aligned too), so that sectors count as on the GPU.
struct Aligned {
  explicit Aligned(size_t n) : storage(n + 64, 0.0f), data(storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 256 / 4) % 64) {}
  std::vector<float> storage;
  float* data;
};

// Runs kernel `k` of `text` over one input x[n] (x[i] = i) and one output out[n] (zeroed).
Ran run(const std::string& text, int64_t grid, int threads, int64_t shared_bytes, int n = 64,
        simt::Options options = {}) {
  simt::Module m(cuda(text));
  Aligned x(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  std::iota(x.data, x.data + n, 0.0f);
  const size_t bytes = static_cast<size_t>(n) * 4;
  Ran r;
  r.result = simt::launch(m.kernel("k"), {x.data, out.data}, {bytes, bytes}, {grid, threads, shared_bytes}, options);
  r.out.assign(out.data, out.data + n);
  return r;
}

std::string all(const simt::LaunchResult& r) {
  std::string s;
  for (const std::string& f : r.findings) s += f + "\n";
  return s;
}

// The line of the module text (intrinsics and prelude included) holding `what` in `kernels`.
int simt_line_of(const std::string& kernels, const std::string& what) {
  const std::string text = cuda(kernels);
  const size_t at = text.find(what);
  return at == std::string::npos ? -1 : static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n')) + 1;
}

void compiles_for_the_gpu(const std::string& text, const char* arch = "sm_80") {
  if (!backend::nvrtc_available()) {
    std::printf("NOTE: NVRTC not available; the CUDA text of this test is not compiled\n");
    return;
  }
  EXPECT_FALSE(backend::compile_cuda(cuda(text), arch).cubin.empty());
}

// Each thread stores its value in shared memory and reads its neighbour's.
std::string neighbour(bool barrier) {
  return std::string(R"(extern "C" __global__ void __launch_bounds__(64) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  FT_SHARED_MEMORY;
  FT_SHARED(float, s, 0, 64);
  const int t = threadIdx.x;
  s[t] = x[t];
)") + (barrier ? "  __syncthreads();\n" : "") + R"(  out[t] = s[(t + 1) % 64];
}
)";
}

TEST(SimtRacecheck, AMissingBarrierIsAReadAfterWriteHazardNamingBothThreadsAndLines) {
  const Ran bad = run(neighbour(false), 1, 64, 256);
  ASSERT_GT(bad.result.finding_count, 0u);
  // A thread that reads its neighbour's element after the neighbour wrote it: read-after-write;
  // before: the later write is a write-after-read (and the read an uninitialised one).
  EXPECT_NE(all(bad.result).find("racecheck: kernel k: read-after-write hazard on shared 's' element"), std::string::npos)
      << all(bad.result);
  EXPECT_NE(all(bad.result).find("at kernels.cu:"), std::string::npos) << all(bad.result);
  const Ran good = run(neighbour(true), 1, 64, 256);
  EXPECT_EQ(good.result.finding_count, 0u) << all(good.result);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(good.out[static_cast<size_t>(t)], static_cast<float>((t + 1) % 64));
  compiles_for_the_gpu(neighbour(true));
}

TEST(SimtRacecheck, TheVerdictDoesNotDependOnTheScheduleSeed) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{77}, uint64_t{12345}}) {
    simt::Options o;
    o.schedule_seed = seed;
    EXPECT_GT(run(neighbour(false), 1, 64, 256, 64, o).result.finding_count, 0u) << "seed " << seed;
    const Ran good = run(neighbour(true), 2, 64, 256, 64, o);
    EXPECT_EQ(good.result.finding_count, 0u) << "seed " << seed << "\n" << all(good.result);
    EXPECT_EQ(good.out[5], 6.0f) << "seed " << seed;
  }
}

// Within a warp, a warp-synchronous operation orders accesses; across warps it does not.
std::string through_shuffle(int partner_xor) {
  return R"(extern "C" __global__ void __launch_bounds__(64) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  FT_SHARED_MEMORY;
  FT_SHARED(float, s, 0, 64);
  const int t = threadIdx.x;
  s[t] = x[t];
  const float v = __shfl_xor_sync(0xffffffffu, x[t], 1);
  out[t] = v + s[t ^ )" + std::to_string(partner_xor) + R"(];
}
)";
}

TEST(SimtRacecheck, WarpOperationsOrderLanesOfOneWarpOnly) {
  const Ran same_warp = run(through_shuffle(1), 1, 64, 256);
  EXPECT_EQ(same_warp.result.finding_count, 0u) << all(same_warp.result);
  EXPECT_EQ(same_warp.out[0], 1.0f + 1.0f);  // lane 0: x[1] from the shuffle plus s[1]
  const Ran other_warp = run(through_shuffle(32), 1, 64, 256);
  EXPECT_NE(all(other_warp.result).find("read-after-write hazard on shared 's'"), std::string::npos)
      << all(other_warp.result);
  compiles_for_the_gpu(through_shuffle(32));
}

TEST(SimtRacecheck, GlobalHazardsWithinABlockAndBetweenBlocks) {
  // Every thread of the block writes out[0]: write-after-write within the block.
  const Ran within = run(R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  out[0] = x[threadIdx.x];
}
)", 1, 32, 0);
  EXPECT_NE(all(within.result).find("write-after-write hazard on global 'out' element 0: thread"), std::string::npos)
      << all(within.result);
  // Blocks write different values to one element: a hazard between blocks; the same value is a
  // redundant store, counted and not reported.
  const std::string between = R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  if (threadIdx.x == 0) out[0] = x[SOURCE];
}
)";
  auto with = [&](const std::string& source) {
    std::string t = between;
    t.replace(t.find("SOURCE"), 6, source);
    return run(t, 4, 32, 0);
  };
  const Ran different = with("blockIdx.x");
  EXPECT_NE(all(different.result).find("write-after-write hazard between blocks on global 'out' element 0"),
            std::string::npos)
      << all(different.result);
  const Ran same = with("7");
  EXPECT_EQ(same.result.finding_count, 0u) << all(same.result);
  EXPECT_EQ(same.result.counters.redundant_stores, 3u);
  EXPECT_EQ(same.out[0], 7.0f);
}

TEST(SimtSample, OnlyTheNamedBlocksRunAndTheirHazardsAreStillFound) {
  const std::string copy = R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  out[blockIdx.x * 32 + threadIdx.x] = x[blockIdx.x * 32 + threadIdx.x] + 1.0f;
}
)";
  simt::Options options;
  options.blocks = {0, 5, 7};
  const Ran sampled = run(copy, 8, 32, 0, 256, options);
  EXPECT_EQ(sampled.result.finding_count, 0u) << all(sampled.result);
  EXPECT_EQ(sampled.result.counters.blocks, 3u);
  for (int i = 0; i < 256; ++i) {
    const int block = i / 32;
    const bool ran = block == 0 || block == 5 || block == 7;
    ASSERT_EQ(sampled.out[static_cast<size_t>(i)], ran ? static_cast<float>(i) + 1.0f : 0.0f) << "element " << i;
  }
  // Two sampled blocks writing one element differently: still a hazard between blocks.
  const Ran race = run(R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  if (threadIdx.x == 0) out[0] = x[blockIdx.x];
}
)", 8, 32, 0, 64, options);
  EXPECT_NE(all(race.result).find("hazard between blocks on global 'out' element 0"), std::string::npos)
      << all(race.result);
  options.blocks = {0, 8};
  EXPECT_THROW(run(copy, 8, 32, 0, 256, options), Error);
  options.blocks = {3, 3};
  EXPECT_THROW(run(copy, 8, 32, 0, 256, options), Error);
}

// Options::checked_blocks: every block runs; the race and initialisation checks cover the named
// ones alone, memcheck every block (the others address their in-bounds accesses in the module).
TEST(SimtSample, CheckedBlocksNarrowTheRaceChecksWhileEveryBlockRunsUnderMemcheck) {
  // Each block reverses its 64 elements through shared memory, 16-byte loads included; a barrier
  // or not between the stores and the loads, and block `stray` (if any) reads one element past x.
  const auto reverse = [](bool barrier, int stray) {
    return std::string(R"(extern "C" __global__ void __launch_bounds__(16) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  FT_SHARED_MEMORY;
  FT_SHARED(float, s, 0, 64);
  const int t = threadIdx.x, base = blockIdx.x * 64;
  const float4 v = ft_load_float4(x, base + 4 * t);
  s[4 * t] = v.x;
  s[4 * t + 1] = v.y;
  s[4 * t + 2] = v.z;
  s[4 * t + 3] = v.w;
)") + (barrier ? "  __syncthreads();\n" : "") + R"(  for (int i = 0; i < 4; ++i) out[base + 4 * t + i] = s[63 - 4 * t - i];
  if ((int)blockIdx.x == )" + std::to_string(stray) + R"( && t == 0) out[base] = x[8 * 64] + s[64];
}
)";
  };
  simt::Options every;
  every.counters = false;
  every.workers = 1;  // one OS thread runs every block: shared views are found again block after block
  simt::Options sampled = every;
  sampled.checked_blocks = {2, 5};
  const Ran full = run(reverse(true, -1), 8, 16, 256, 512, every);
  const Ran part = run(reverse(true, -1), 8, 16, 256, 512, sampled);
  ASSERT_EQ(full.result.finding_count, 0u) << all(full.result);
  ASSERT_EQ(part.result.finding_count, 0u) << all(part.result);
  for (int i = 0; i < 512; ++i) {
    ASSERT_EQ(part.out[static_cast<size_t>(i)], static_cast<float>(i / 64 * 64 + 63 - i % 64)) << "element " << i;
  }
  EXPECT_EQ(part.out, full.out);
  // The missing barrier: hazards in the checked blocks alone, as many as those blocks run alone
  // report.
  const Ran race = run(reverse(false, -1), 8, 16, 256, 512, sampled);
  simt::Options alone = every;
  alone.blocks = {2, 5};
  EXPECT_EQ(race.result.finding_count, run(reverse(false, -1), 8, 16, 256, 512, alone).result.finding_count) << all(race.result);
  EXPECT_LT(race.result.finding_count, run(reverse(false, -1), 8, 16, 256, 512, every).result.finding_count);
  EXPECT_NE(all(race.result).find("hazard on shared 's'"), std::string::npos) << all(race.result);
  EXPECT_TRUE(all(race.result).find("of block 2 ") != std::string::npos || all(race.result).find("of block 5 ") != std::string::npos)
      << all(race.result);
  for (int b = 0; b < 8; ++b) {
    const bool named = all(race.result).find("of block " + std::to_string(b) + "\n") != std::string::npos ||
                       all(race.result).find("of block " + std::to_string(b) + " ") != std::string::npos;
    if (b != 2 && b != 5) {
      EXPECT_FALSE(named) << "block " << b << " was not to be race-checked\n" << all(race.result);
    }
  }
  // Reads past x and past the shared view in block 6, which the race checks skip: memcheck still
  // reports both.
  const Ran past = run(reverse(true, 6), 8, 16, 256, 512, sampled);
  EXPECT_EQ(past.result.first_check, simt::Check::kMemory) << all(past.result);
  EXPECT_EQ(past.result.finding_count, 2u) << all(past.result);
  EXPECT_NE(all(past.result).find("out-of-bounds load of 4 bytes on global 'x'"), std::string::npos) << all(past.result);
  EXPECT_NE(all(past.result).find("out-of-bounds load of 4 bytes on shared 's'"), std::string::npos) << all(past.result);
  EXPECT_NE(all(past.result).find("thread 0 of block 6"), std::string::npos) << all(past.result);
  sampled.checked_blocks = {5, 2};
  EXPECT_THROW(run(reverse(true, -1), 8, 16, 256, 512, sampled), Error);
  sampled.checked_blocks = {2, 8};
  EXPECT_THROW(run(reverse(true, -1), 8, 16, 256, 512, sampled), Error);
}

TEST(SimtSynccheck, ABarrierInDivergentCodeIsReportedAndNeverHangs) {
  const std::string text = R"(extern "C" __global__ void __launch_bounds__(64) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  const int t = threadIdx.x;
  if (t < 40) __syncthreads();
  out[t] = x[t];
}
)";
  const Ran r = run(text, 2, 64, 0);
  EXPECT_EQ(r.result.first_check, simt::Check::kSync);
  EXPECT_NE(all(r.result).find("synccheck: kernel k: barrier not reached by every thread"), std::string::npos)
      << all(r.result);
  EXPECT_EQ(r.out[63], 63.0f);  // the launch ran to its end
}

TEST(SimtSynccheck, ThreadsAtDifferentBarriersAndADeadlockedWarp) {
  const std::string two_barriers = R"(extern "C" __global__ void __launch_bounds__(64) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  const int t = threadIdx.x;
  if (t < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[t] = x[t];
}
)";
  EXPECT_NE(all(run(two_barriers, 1, 64, 0).result).find("threads wait at different barriers"), std::string::npos);
  // Half a warp waits at a shuffle the other half never reaches; the block's other warp waits at
  // a barrier: nothing can move, which is reported, and the launch still ends.
  const std::string deadlock = R"(extern "C" __global__ void __launch_bounds__(64) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  const int t = threadIdx.x;
  float v = x[t];
  if (t < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  __syncthreads();
  out[t] = v;
}
)";
  const Ran r = run(deadlock, 1, 64, 0);
  EXPECT_NE(all(r.result).find("synccheck: kernel k: deadlock"), std::string::npos) << all(r.result);
  EXPECT_NE(all(r.result).find("wait at the barrier at kernels.cu:"), std::string::npos) << all(r.result);
}

TEST(SimtMemcheck, SharedOutOfBoundsAndMisalignedVectorLoads) {
  const std::string overrun = R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  FT_SHARED_MEMORY;
  FT_SHARED(float, a, 0, 32);
  FT_SHARED(float, b, 128, 32);
  const int t = threadIdx.x;
  a[t + 1] = x[t];
  b[t] = 0.0f;
  __syncthreads();
  out[t] = a[t];
}
)";
  const Ran r = run(overrun, 1, 32, 256);
  // a[32] lies inside the block's shared memory (it is b[0]) but outside a's own extent.
  EXPECT_NE(all(r.result).find("memcheck: kernel k: out-of-bounds store of 4 bytes on shared 'a' element 32: thread 31"),
            std::string::npos)
      << all(r.result);
  const std::string misaligned = R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  const int t = threadIdx.x;
  const float4 q = ft_load_float4(x, 4 * t + 1);
  out[t] = q.x;
}
)";
  const Ran m = run(misaligned, 1, 32, 0, 160);
  EXPECT_NE(all(m.result).find("memcheck: kernel k: misaligned load of 16 bytes on global 'x' element 1"), std::string::npos)
      << all(m.result);
  compiles_for_the_gpu(overrun);
}

// memcheck's test as both sides run it (simt/device_api.h ft_simt_checked: the executor's checked
// accesses and the module's inline path): inside and aligned gives the address; one byte past the
// end, a negative or huge index, and a misaligned address (power-of-two alignment by mask, any
// other by division) give none, saying which.
TEST(SimtMemcheck, TheOneTestBothSidesRunBoundsAndAlignsEveryAccess) {
  alignas(64) unsigned char storage[64] = {};
  ft_simt_buffer b{storage, 64, 4, 0, 1, nullptr};
  int outside = -1;
  EXPECT_EQ(ft_simt_checked(&b, 0, 16, 16, &outside), storage);
  EXPECT_EQ(ft_simt_checked(&b, 15, 4, 4, &outside), storage + 60);  // the last element
  EXPECT_EQ(ft_simt_checked(&b, 15, 8, 8, &outside), nullptr);        // its 8 bytes end past the buffer
  EXPECT_EQ(outside, 1);
  for (const long long index : {-1LL, 16LL, 1LL << 40, std::numeric_limits<long long>::max()}) {
    outside = -1;
    EXPECT_EQ(ft_simt_checked(&b, index, 4, 4, &outside), nullptr) << index;
    EXPECT_EQ(outside, 1) << index;
  }
  outside = -1;
  EXPECT_EQ(ft_simt_checked(&b, 1, 16, 16, &outside), nullptr);  // 4 bytes past a 16-byte boundary
  EXPECT_EQ(outside, 0);
  // An alignment of 12 (by division), tested on the address: the first multiple of 12 in a buffer
  // of bytes, and the byte after it.
  ft_simt_buffer bytes{storage, 64, 1, 0, 1, nullptr};
  const auto first = static_cast<long long>((12 - reinterpret_cast<uintptr_t>(storage) % 12) % 12);
  EXPECT_EQ(ft_simt_checked(&bytes, first, 4, 12, &outside), storage + first);
  outside = -1;
  EXPECT_EQ(ft_simt_checked(&bytes, first + 1, 4, 12, &outside), nullptr);
  EXPECT_EQ(outside, 0);
}

TEST(SimtInitcheck, AReadOfSharedMemoryNobodyWroteInThisLaunch) {
  const std::string text = R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  FT_SHARED_MEMORY;
  FT_SHARED(float, s, 0, 64);
  const int t = threadIdx.x;
  s[t] = x[t];
  __syncthreads();
  out[t] = s[t + WHERE];
}
)";
  auto with = [&](const char* where) {
    std::string t = text;
    t.replace(t.find("WHERE"), 5, where);
    return run(t, 2, 32, 256);
  };
  const Ran bad = with("32");
  EXPECT_EQ(bad.result.first_check, simt::Check::kInit);
  // Every thread of both blocks reads one element past what was written (which thread the
  // report names first depends on the order threads resume in).
  EXPECT_NE(all(bad.result).find("initcheck: kernel k: read of uninitialised shared memory on shared 's' element "),
            std::string::npos)
      << all(bad.result);
  EXPECT_NE(all(bad.result).find("(64 times)"), std::string::npos) << all(bad.result);
  // Block 1 runs after block 0 on the same memory: what block 0 wrote does not count for block 1.
  EXPECT_EQ(with("0").result.finding_count, 0u);
}

// ---- asynchronous copies ---------------------------------------------------------------------

// Threads 0..7 each copy 8 halves x[8t ..] into s[8t ..] by cp.async (thread 7 reads 6 bytes: 3
// halves, the other 5 zero-filled) in group 1, and thread 0 copies x[64 ..] into s[64 ..] in a
// second group; then every thread writes out[t] = s[(t + 8) % 72], another thread's copy.
// SYNC is what stands between the copies and the reads.
std::string copies(const std::string& sync) {
  std::string text = R"(extern "C" __global__ void __launch_bounds__(72) k(FT_GLOBAL(const unsigned short) x, FT_GLOBAL(unsigned short) out) {
  FT_SHARED_MEMORY;
  FT_SHARED(unsigned short, s, 0, 72);
  const int t = threadIdx.x;
  if (t < 8) ft_cp_async16(s, 8 * t, x, 8 * t, t == 7 ? 6 : 16);
  ft_cp_async_commit();
  if (t == 0) ft_cp_async16(s, 64, x, 64, 16);
  ft_cp_async_commit();
SYNC
  out[t] = s[(t + 8) % 72];
}
)";
  text.replace(text.find("SYNC"), 4, sync);
  return text;
}

struct Ran16 {
  simt::LaunchResult result;
  std::vector<uint16_t> out;
};

Ran16 run16(const std::string& text) {
  simt::Module m(cuda(text));
  std::vector<uint16_t> x(72 + 8), out(72 + 8, 0xffff);  // 16-byte aligned: the vector's allocation
  std::iota(x.begin(), x.end(), uint16_t{1});
  Ran16 r;
  r.result = simt::launch(m.kernel("k"), {x.data(), out.data()}, {72 * 2, 72 * 2}, {1, 72, 160}, {});
  r.out.assign(out.begin(), out.begin() + 72);
  return r;
}

TEST(SimtAsyncCopy, CopiesLandAtTheirWaitWithZeroFillAndOrderedByABarrier) {
  const Ran16 good = run16(copies("  ft_cp_async_wait(0);\n  __syncthreads();"));
  EXPECT_EQ(good.result.finding_count, 0u) << all(good.result);
  for (int t = 0; t < 72; ++t) {
    const int i = (t + 8) % 72;  // s[i] = x[i] = i + 1, but for thread 7's zero-filled tail
    EXPECT_EQ(good.out[static_cast<size_t>(t)], i >= 59 && i < 64 ? 0 : i + 1) << "out[" << t << "]";
  }
  // 9 copies: each reads its bytes from global (one 16-byte request per warp for the first
  // group's 8 lanes) and writes 16 bytes of shared memory.
  compiles_for_the_gpu(copies("  ft_cp_async_wait(0);\n  __syncthreads();"));
}

TEST(SimtAsyncCopy, AMissingWaitOrBarrierIsReported) {
  // No wait: the reads find the copies in flight, and the copies are never waited for.
  const Ran16 no_wait = run16(copies("  __syncthreads();"));
  EXPECT_NE(all(no_wait.result).find("racecheck: kernel k: access of shared memory a cp.async is still copying into on shared 's'"),
            std::string::npos)
      << all(no_wait.result);
  EXPECT_NE(all(no_wait.result).find("synccheck: kernel k: cp.async copies never waited for"), std::string::npos)
      << all(no_wait.result);
  // A wait that leaves the newest group in flight: s[64 ..] (thread 0's second group) is still
  // being copied when threads 56 .. 63 read it.
  const Ran16 one_left = run16(copies("  ft_cp_async_wait(1);\n  __syncthreads();"));
  EXPECT_NE(all(one_left.result).find("a cp.async is still copying into on shared 's' element 64"), std::string::npos)
      << all(one_left.result);
  // The wait without a barrier: another thread's copy is read before or after it lands, in the
  // same barrier interval; whichever comes first, it is a finding.
  const Ran16 no_barrier = run16(copies("  ft_cp_async_wait(0);"));
  EXPECT_NE(all(no_barrier.result).find("racecheck: kernel k: read-after-write hazard on shared 's'"), std::string::npos)
      << all(no_barrier.result);
  // The same, with the wait skipped as the mutation test does.
  simt::Module m(cuda(copies("  ft_cp_async_wait(0);\n  __syncthreads();")));
  std::vector<uint16_t> x(80), out(80);
  simt::Options skip;
  skip.skip_waits = {simt_line_of(copies("  ft_cp_async_wait(0);\n  __syncthreads();"), "ft_cp_async_wait(0);")};
  const simt::LaunchResult r = simt::launch(m.kernel("k"), {x.data(), out.data()}, {144, 144}, {1, 72, 160}, skip);
  EXPECT_NE(all(r).find("cp.async copies never waited for"), std::string::npos) << all(r);
}

// ---- mbarriers and tensor copies (TMA) ---------------------------------------------------------

// Thread 0 initialises an mbarrier, then (after a barrier) expects 1,024 bytes and issues one
// tensor copy: the 64 x 8 box at column 32, row 68 of x [72 rows][80 columns] of 16-bit values,
// under the 128-byte swizzle (rows 72.. and columns 80.. outside: zero). WAIT is what stands between
// the copy and the threads' reads, which undo the swizzle (16-byte unit u of row r at u ^ r % 8)
// and write the box row-major to out.
std::string tensor_copy(const std::string& wait, int expect = 1024) {
  std::string text = R"(extern "C" __global__ void __launch_bounds__(128) k(FT_GLOBAL(const unsigned short) x, FT_GLOBAL(unsigned short) out, FT_TENSOR_MAP(x, 80x72, 160, 64x8, 128) tm) {
  FT_SHARED_MEMORY;
  FT_SHARED(unsigned short, s, 0, 512);
  FT_SHARED(unsigned long long, bar, 1024, 1);
  const int t = threadIdx.x;
  if (t == 0) {
    ft_mbarrier_init(bar, 0, 1);
    ft_mbarrier_init_fence();
  }
  __syncthreads();
  if (t == 0) {
    ft_mbarrier_arrive_expect_tx(bar, 0, EXPECT);
    ft_tma_load_2d(s, 0, tm, 32, 68, bar, 0);
  }
WAIT
  for (int e = t; e < 512; e += 128) {
    const int r = e / 64, c = e % 64;
    out[e] = s[r * 64 + (((c / 8) ^ (r % 8)) * 8) + c % 8];
  }
}
)";
  text.replace(text.find("EXPECT"), 6, std::to_string(expect));
  text.replace(text.find("WAIT"), 4, wait);
  return text;
}

Ran16 run_tensor_copy(const std::string& text, simt::Options options = {}, int64_t grid = 1, size_t outputs = 512,
                      int64_t shared_bytes = 1032) {
  simt::Module m(cuda(text));
  std::vector<uint16_t> x(72 * 80), out(outputs, 0xffff);
  std::iota(x.begin(), x.end(), uint16_t{1});
  Ran16 r;
  r.result = simt::launch(m.kernel("k"), {x.data(), out.data(), nullptr}, {x.size() * 2, out.size() * 2, 0}, {grid, 128, shared_bytes}, options);
  r.out = out;
  return r;
}

TEST(SimtTensorCopy, ABoxLandsSwizzledWithZerosOutsideWhereAWaitObservesItsPhase) {
  for (const std::string wait : {"  ft_mbarrier_wait(bar, 0, 0);", "  if (t == 0) ft_mbarrier_wait(bar, 0, 0);\n  __syncthreads();"}) {
    const Ran16 good = run_tensor_copy(tensor_copy(wait));
    EXPECT_EQ(good.result.finding_count, 0u) << wait << "\n" << all(good.result);
    for (int e = 0; e < 512; ++e) {
      const int row = 68 + e / 64, col = 32 + e % 64;
      const int want = row < 72 && col < 80 ? row * 80 + col + 1 : 0;
      ASSERT_EQ(good.out[static_cast<size_t>(e)], want) << wait << ": out[" << e << "]";
    }
  }
  const std::vector<KernelSignature> sig = kernel_signatures(tensor_copy(""));
  ASSERT_EQ(sig.size(), 1u);
  ASSERT_EQ(sig[0].params.size(), 3u);
  const TensorMapSpec& map = sig[0].params[2].tensor_map;
  EXPECT_EQ(map.source, 0);
  EXPECT_EQ(map.dims, (std::vector<int64_t>{80, 72}));
  EXPECT_EQ(map.strides, (std::vector<int64_t>{160}));
  EXPECT_EQ(map.box, (std::vector<int64_t>{64, 8}));
  EXPECT_EQ(map.swizzle, 128);
  // What the driver would refuse, or the launchers would bind wrongly, is refused by name.
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"64x8, 128) tm", "32x8, 128) tm"},    // a swizzled box row narrower than its span
           {"80x72, 160,", "80x72, 150,"},        // a stride not a multiple of 16 bytes
           {"80x72, 160,", "80x, 160,"},          // an empty extent
           {"FT_TENSOR_MAP(x,", "FT_TENSOR_MAP(y,"}}) {  // no such parameter
    std::string bad = tensor_copy("");
    bad.replace(bad.find(from), from.size(), to);
    EXPECT_THROW(kernel_signatures(bad), Error) << to;
  }
  {
    std::string early = tensor_copy("");  // a map before another parameter
    early.replace(early.find("FT_GLOBAL(unsigned short) out, FT_TENSOR_MAP(x, 80x72, 160, 64x8, 128) tm"),
                  std::string("FT_GLOBAL(unsigned short) out, FT_TENSOR_MAP(x, 80x72, 160, 64x8, 128) tm").size(),
                  "FT_TENSOR_MAP(x, 80x72, 160, 64x8, 128) tm, FT_GLOBAL(unsigned short) out");
    EXPECT_THROW(kernel_signatures(early), Error);
  }
  if (!backend::nvrtc_available()) {
    std::printf("NOTE: NVRTC not available; the tensor copy's CUDA text is not compiled\n");
    return;
  }
  const std::string ptx = backend::compile_ptx(cuda(tensor_copy("  ft_mbarrier_wait(bar, 0, 0);")), "sm_90a");
  for (const char* op : {"mbarrier.init.shared::cta.b64", "fence.mbarrier_init", "mbarrier.arrive.expect_tx.shared::cta.b64",
                         "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                         "mbarrier.try_wait.parity.shared::cta.b64"}) {
    EXPECT_NE(ptx.find(op), std::string::npos) << op;
  }
  EXPECT_FALSE(backend::compile_cuda(cuda(tensor_copy("  ft_mbarrier_wait(bar, 0, 0);")), "sm_90a").cubin.empty());
}

TEST(SimtTensorCopy, AMissingOrPartialWaitIsReported) {
  // No wait: the reads find the copy in flight, and no wait ever observes it.
  const Ran16 none = run_tensor_copy(tensor_copy(""));
  EXPECT_NE(all(none.result).find("access of shared memory a tensor copy (TMA) is still copying into on shared 's'"), std::string::npos)
      << all(none.result);
  EXPECT_NE(all(none.result).find("synccheck: kernel k: tensor copies never waited for"), std::string::npos) << all(none.result);
  // Thread 0 alone waits and no barrier follows: the others read what its wait landed, which
  // nothing orders for them.
  const Ran16 one = run_tensor_copy(tensor_copy("  if (t == 0) ft_mbarrier_wait(bar, 0, 0);"));
  EXPECT_NE(all(one.result).find("racecheck: kernel k: read-after-write hazard on shared 's'"), std::string::npos) << all(one.result);
  // The wrong parity waits for a phase nobody completes (the copy completed phase 0 before the
  // waits): a deadlock, after which the reads find the copy never observed.
  const Ran16 parity = run_tensor_copy(tensor_copy("  ft_mbarrier_wait(bar, 0, 1);"));
  EXPECT_NE(all(parity.result).find("synccheck: kernel k: deadlock"), std::string::npos) << all(parity.result);
  EXPECT_NE(all(parity.result).find("tensor copy (TMA) is still copying into"), std::string::npos) << all(parity.result);
  // More bytes expected than copied: the phase never completes, a deadlock, reported.
  const Ran16 short_copy = run_tensor_copy(tensor_copy("  ft_mbarrier_wait(bar, 0, 0);", 2048));
  EXPECT_NE(all(short_copy.result).find("synccheck: kernel k: deadlock"), std::string::npos) << all(short_copy.result);
  EXPECT_NE(all(short_copy.result).find("wait at the mbarrier at shared byte 1024 (parity 0)"), std::string::npos) << all(short_copy.result);
  // The wait skipped, as the mutation test does.
  simt::Options skip;
  skip.skip_waits = {simt_line_of(tensor_copy("  ft_mbarrier_wait(bar, 0, 0);"), "ft_mbarrier_wait(bar, 0, 0);")};
  const Ran16 skipped = run_tensor_copy(tensor_copy("  ft_mbarrier_wait(bar, 0, 0);"), skip);
  EXPECT_NE(all(skipped.result).find("tensor copies never waited for"), std::string::npos) << all(skipped.result);
  // A block whose copy no wait observed leaves nothing in flight for the next block on the same
  // worker (block 1 waits and reads cleanly); the block-1 stores race with block 0's on out, which
  // is not what is looked for here.
  simt::Options one_worker;
  one_worker.workers = 1;
  const Ran16 next = run_tensor_copy(tensor_copy("  if (blockIdx.x == 1) ft_mbarrier_wait(bar, 0, 0);"), one_worker, 2);
  for (const std::string& f : next.result.findings) {
    EXPECT_FALSE(f.find("still copying into") != std::string::npos && f.find("of block 1") != std::string::npos) << f;
  }
  // An mbarrier initialised again and again (300 times, past any count of slots) orders each
  // round's copy for its own waiters only: no finding.
  std::string rounds = tensor_copy("  ft_mbarrier_wait(bar, 0, 0);");
  rounds.replace(rounds.find("  if (t == 0) {\n    ft_mbarrier_init"), 0, "  for (int round = 0; round < 300; ++round) {\n");
  rounds.replace(rounds.rfind("}\n"), 2, "  __syncthreads();\n  }\n}\n");
  const Ran16 again = run_tensor_copy(rounds);
  EXPECT_EQ(again.result.finding_count, 0u) << all(again.result);
  // The init not ordered before another thread's use: thread 1 waits in the init's interval.
  std::string early = tensor_copy("  ft_mbarrier_wait(bar, 0, 0);");
  early.replace(early.find("  __syncthreads();\n  if (t == 0) {\n    ft_mbarrier_arrive"), 19, "");
  const Ran16 unordered = run_tensor_copy(early);
  EXPECT_NE(all(unordered.result).find("of an mbarrier in the barrier interval of its mbarrier.init"), std::string::npos)
      << all(unordered.result);
}

// Warp 0 produces, warps 1..3 consume, through a ring of 2 slots of 96 floats with a "full" and
// an "empty" mbarrier a slot and no block barrier after the inits: round r's slot r % 2 gets
// x[96 r ..] from the producer's lanes (each arrives on full, releasing its stores), the
// consumers wait on full, read it (each thread the element after its own, another warp's or
// lane's store) and release it on empty, which the producer waits on before round r + 2
// overwrites the slot. RELEASE is how a consumer releases its slot after reading (`ARRIVALS`
// expected a phase), PRODUCER_WAIT what the producer waits on before writing a slot again.
std::string ring(const std::string& release, int arrivals, const std::string& producer_wait, const std::string& read_first = "") {
  std::string text = R"(extern "C" __global__ void __launch_bounds__(128) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  FT_SHARED_MEMORY;
  FT_SHARED(float, s, 0, 192);
  FT_SHARED(unsigned long long, full, 768, 2);
  FT_SHARED(unsigned long long, empty, 784, 2);
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  if (t == 0) {
    for (int i = 0; i < 2; ++i) {
      ft_mbarrier_init(full, i, 32);
      ft_mbarrier_init(empty, i, ARRIVALS);
    }
    ft_mbarrier_init_fence();
  }
  __syncthreads();
  for (int r = 0; r < 8; ++r) {
    const int slot = r % 2;
    if (warp == 0) {
PRODUCER_WAIT
      for (int i = lane; i < 96; i += 32) s[slot * 96 + i] = x[r * 96 + i];
      ft_mbarrier_arrive(full, slot);
    } else {
      ft_mbarrier_wait(full, slot, (r / 2) % 2);
READ_FIRST
      out[r * 96 + t - 32] = s[slot * 96 + (t - 32 + 1) % 96];
RELEASE
    }
  }
}
)";
  text.replace(text.find("ARRIVALS"), 8, std::to_string(arrivals));
  text.replace(text.find("PRODUCER_WAIT"), 13, producer_wait);
  text.replace(text.find("READ_FIRST"), 10, read_first);
  text.replace(text.find("RELEASE"), 7, release);
  return text;
}

const char* const kEmptyWait = "      if (r >= 2) ft_mbarrier_wait(empty, slot, (r / 2 - 1) % 2);";

TEST(SimtMbarrierOrder, ASlotReleasedOnAnMbarrierAndWaitedForIsReusedWithoutARace) {
  for (const auto& [release, arrivals] : std::vector<std::pair<std::string, int>>{
           {"      ft_mbarrier_arrive(empty, slot);", 96},        // every consumer thread arrives
           {"      ft_mbarrier_arrive_warp(empty, slot);", 3}}) {  // a warp's lanes meet, its lane 0 arrives
    for (const uint64_t seed : {uint64_t{0}, uint64_t{7}}) {
      simt::Options o;
      o.schedule_seed = seed;
      const Ran good = run(ring(release, arrivals, kEmptyWait), 1, 128, 800, 8 * 96, o);
      EXPECT_EQ(good.result.finding_count, 0u) << release << " seed " << seed << "\n" << all(good.result);
      for (int i = 0; i < 8 * 96; ++i) {
        ASSERT_EQ(good.out[static_cast<size_t>(i)], static_cast<float>(i / 96 * 96 + (i % 96 + 1) % 96)) << release << ": out[" << i << "]";
      }
    }
  }
  compiles_for_the_gpu(ring("      ft_mbarrier_arrive_warp(empty, slot);", 3, kEmptyWait), "sm_90a");
}

TEST(SimtMbarrierOrder, AReuseNothingOrdersAfterTheReadsIsAWriteAfterRead) {
  const std::string war = "racecheck: kernel k: write-after-read hazard on shared 's'";
  const std::string any = "hazard on shared 's'";
  // The producer does not wait for the slot to be free: it runs ahead, overwriting slots nobody
  // read yet (and completing phases the consumers' parity then never sees: a deadlock too).
  const Ran no_wait = run(ring("      ft_mbarrier_arrive(empty, slot);", 96, ""), 1, 128, 800, 8 * 96);
  EXPECT_NE(all(no_wait.result).find(any), std::string::npos) << all(no_wait.result);
  // The consumers release the slot before they read it.
  const Ran early = run(ring("", 96, kEmptyWait, "      ft_mbarrier_arrive(empty, slot);"), 1, 128, 800, 8 * 96);
  EXPECT_NE(all(early.result).find(war), std::string::npos) << all(early.result);
  // Lane 0 arrives for its warp without the warp's lanes meeting first: the other lanes' reads are
  // not released.
  const Ran unsynced = run(ring("      if (lane == 0) ft_mbarrier_arrive(empty, slot);", 3, kEmptyWait), 1, 128, 800, 8 * 96);
  EXPECT_NE(all(unsynced.result).find(war), std::string::npos) << all(unsynced.result);
  // Lane 0 arrives for its warp after a shuffle, not __syncwarp: CUDA orders memory for the other
  // lanes at __syncwarp alone, so their reads are not released.
  const Ran shuffled = run(ring("      if (__shfl_xor_sync(0xffffffffu, 1.0f, 1) > 0.0f && lane == 0) ft_mbarrier_arrive(empty, slot);", 3,
                                kEmptyWait),
                           1, 128, 800, 8 * 96);
  EXPECT_NE(all(shuffled.result).find(war), std::string::npos) << all(shuffled.result);
  // The producer's wait skipped, as the mutation test does.
  simt::Options skip;
  const std::string text = ring("      ft_mbarrier_arrive(empty, slot);", 96, kEmptyWait);
  skip.skip_waits = {simt_line_of(text, "ft_mbarrier_wait(empty")};
  const Ran skipped = run(text, 1, 128, 800, 8 * 96, skip);
  EXPECT_NE(all(skipped.result).find(any), std::string::npos) << all(skipped.result);
  // The consumers do not wait for the slot to be full: their reads race with the producer's stores.
  std::string unwaited = ring("      ft_mbarrier_arrive(empty, slot);", 96, kEmptyWait);
  skip.skip_waits = {simt_line_of(unwaited, "ft_mbarrier_wait(full")};
  const Ran unfilled = run(unwaited, 1, 128, 800, 8 * 96, skip);
  EXPECT_NE(all(unfilled.result).find(any), std::string::npos) << all(unfilled.result);
}

// The ring filled by tensor copies, warp-specialized as CUTLASS's producers are: thread 0 copies
// round r's 8 x 64 box (rows 8r ..) into slot r % 2 and never waits on "full" itself; warps 1..3
// wait on full, read the slot (undoing the swizzle) and release it on "empty" (a warp's lanes
// meet, lane 0 arrives); thread 0 waits on empty before copying into the slot again. The copy's
// landing is ordered for thread 0 by the consumers' arrivals (they observed it before arriving).
// PRODUCER_WAIT stands before each copy.
std::string tma_ring(const std::string& producer_wait) {
  std::string text = R"(extern "C" __global__ void __launch_bounds__(128) k(FT_GLOBAL(const unsigned short) x, FT_GLOBAL(unsigned short) out, FT_TENSOR_MAP(x, 80x72, 160, 64x8, 128) tm) {
  FT_SHARED_MEMORY;
  FT_SHARED(unsigned short, s, 0, 1024);
  FT_SHARED(unsigned long long, full, 2048, 2);
  FT_SHARED(unsigned long long, empty, 2064, 2);
  const int t = threadIdx.x, warp = t / 32;
  if (t == 0) {
    for (int i = 0; i < 2; ++i) {
      ft_mbarrier_init(full, i, 1);
      ft_mbarrier_init(empty, i, 3);
    }
    ft_mbarrier_init_fence();
  }
  __syncthreads();
  for (int r = 0; r < 8; ++r) {
    const int slot = r % 2;
    if (warp == 0) {
      if (t == 0) {
PRODUCER_WAIT
        ft_mbarrier_arrive_expect_tx(full, slot, 1024);
        ft_tma_load_2d(s, slot * 512, tm, 0, r * 8, full, slot);
      }
    } else {
      ft_mbarrier_wait(full, slot, (r / 2) % 2);
      for (int e = t - 32; e < 512; e += 96) {
        const int row = e / 64, c = e % 64;
        out[r * 512 + e] = s[slot * 512 + row * 64 + (((c / 8) ^ (row % 8)) * 8) + c % 8];
      }
      ft_mbarrier_arrive_warp(empty, slot);
    }
  }
}
)";
  text.replace(text.find("PRODUCER_WAIT"), 13, producer_wait);
  return text;
}

TEST(SimtMbarrierOrder, ATensorCopysSlotIsReusedAfterTheConsumersRelease) {
  const auto go = [](const std::string& text) { return run_tensor_copy(text, {}, 1, 8 * 512, 2080); };
  const Ran16 good = go(tma_ring("        if (r >= 2) ft_mbarrier_wait(empty, slot, (r / 2 - 1) % 2);"));
  EXPECT_EQ(good.result.finding_count, 0u) << all(good.result);
  for (int i = 0; i < 8 * 512; ++i) {
    const int row = i / 512 * 8 + i % 512 / 64, col = i % 64;
    ASSERT_EQ(good.out[static_cast<size_t>(i)], row * 80 + col + 1) << "out[" << i << "]";
  }
  // Without the wait, a copy lands over a slot the consumers may still read.
  const Ran16 bad = go(tma_ring(""));
  EXPECT_NE(all(bad.result).find("hazard on shared 's'"), std::string::npos) << all(bad.result);
}

// ---- counters --------------------------------------------------------------------------------

TEST(SimtCounters, CoalescedAndStridedGlobalLoadsAndStores) {
  // Lane l loads x[l * STRIDE] and stores out[l]: one request each per warp.
  auto strided = [&](int stride) {
    const std::string text = R"(extern "C" __global__ void __launch_bounds__(64) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  const int t = threadIdx.x;
  out[t] = x[(t % 32) * STRIDE];
}
)";
    std::string t = text;
    t.replace(t.find("STRIDE"), 6, std::to_string(stride));
    return run(t, 1, 64, 0, 32 * 32).result.counters;
  };
  const simt::Counters c1 = strided(1);
  EXPECT_EQ(c1.global_load_requests, 2u);  // two warps
  EXPECT_EQ(c1.global_load_sectors, 8u);   // 128 bytes per warp: 4 sectors
  EXPECT_EQ(c1.global_store_requests, 2u);
  EXPECT_EQ(c1.global_store_sectors, 8u);
  EXPECT_EQ(c1.unique_load_sectors, 4u);   // both warps read the same 128 bytes
  EXPECT_EQ(c1.unique_store_sectors, 8u);
  const simt::Counters c32 = strided(32);
  EXPECT_EQ(c32.global_load_requests, 2u);
  EXPECT_EQ(c32.global_load_sectors, 64u);  // every lane its own sector
  EXPECT_EQ(c32.unique_load_sectors, 32u);
  EXPECT_EQ(c32.threads, 64u);
  EXPECT_EQ(c32.blocks, 1u);
}

TEST(SimtCounters, RequestsFollowEachLanesLoopIterations) {
  // A thread-strided loop over 40 elements: warp 0's lanes take 2 iterations (0-31, 32-39 by
  // lanes 0-7), so two requests per access site.
  const std::string text = R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  for (long long i = threadIdx.x; i < 40; i += 32) out[i] = x[i];
}
)";
  const simt::Counters c = run(text, 1, 32, 0).result.counters;
  EXPECT_EQ(c.global_load_requests, 2u);
  EXPECT_EQ(c.global_load_sectors, 4u + 1u);  // 32 floats, then 8 floats in one sector
}

TEST(SimtCounters, SharedBankConflictWavefronts) {
  auto wavefronts = [](int stride, int size) {
    std::vector<std::pair<int, uint64_t>> lanes;
    for (int l = 0; l < 32; ++l) lanes.emplace_back(l, static_cast<uint64_t>(l * stride * size));
    return simt::shared_wavefronts(lanes, size);
  };
  EXPECT_EQ(wavefronts(1, 4), 1u);    // conflict-free
  EXPECT_EQ(wavefronts(2, 4), 2u);    // two-way
  EXPECT_EQ(wavefronts(32, 4), 32u);  // every lane in bank 0
  EXPECT_EQ(wavefronts(33, 4), 1u);   // padded rows
  EXPECT_EQ(wavefronts(1, 8), 2u);    // 256 bytes: two phases
  EXPECT_EQ(wavefronts(1, 16), 4u);   // 512 bytes: four phases
  EXPECT_EQ(wavefronts(0, 4), 1u);    // one word: a broadcast
  EXPECT_EQ(wavefronts(1, 2), 1u);    // 16-bit neighbours share words
  // The executor counts the same for a kernel: column reads of a 32x32 tile, then padded.
  auto kernel = [](int pitch) {
    std::string t = R"(extern "C" __global__ void __launch_bounds__(32) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  FT_SHARED_MEMORY;
  FT_SHARED(float, s, 0, 32 * PITCH);
  const int t = threadIdx.x;
  for (int c = 0; c < 32; ++c) s[t * PITCH + c] = x[c];
  __syncthreads();
  out[t] = s[t * PITCH];
}
)";
    for (size_t at; (at = t.find("PITCH")) != std::string::npos;) t.replace(at, 5, std::to_string(pitch));
    return run(t, 1, 32, 32 * pitch * 4).result.counters;
  };
  const simt::Counters conflicted = kernel(32), padded = kernel(33);
  EXPECT_EQ(conflicted.shared_load_requests, 1u);
  EXPECT_EQ(conflicted.shared_load_wavefronts, 32u);
  EXPECT_EQ(conflicted.shared_store_requests, 32u);
  EXPECT_EQ(conflicted.shared_store_wavefronts, 32u * 32u);
  EXPECT_EQ(padded.shared_load_wavefronts, 1u);
  EXPECT_EQ(padded.shared_store_wavefronts, 32u);
  EXPECT_EQ(padded.barriers, 1u);
}

TEST(SimtCounters, FloatingPointOperationsAsExecuted) {
  // Per thread: a multiply-add (2), a loop of t % 4 adds, a divide in a branch only even threads
  // take, one expf (a transcendental call, counted apart), fmaxf and a comparison (neither), and
  // integer index arithmetic (none). A float read from a buffer into a ternary with a literal keeps
  // to float semantics.
  const std::string text = R"(extern "C" __global__ void __launch_bounds__(64) k(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {
  const int t = threadIdx.x;
  float a = x[t] * 2.0f + 1.0f;
  for (int i = 0; i < t % 4; ++i) a += 0.5f;
  if (t % 2 == 0) a = a / 3.0f;
  const float e = expf(-a) ;
  const float m = fmaxf(e, a < 0.0f ? x[(t * 7 + 1) % 64] : 0.25f);
  out[t] = m;
}
)";
  compiles_for_the_gpu(text);
  const Ran r = run(text, 1, 64, 0);
  ASSERT_TRUE(r.result.findings.empty()) << all(r.result);
  // 64 threads: 2 each, adds 16 * (0 + 1 + 2 + 3) = 96, 32 divides.
  EXPECT_EQ(r.result.counters.flops, 64u * 2u + 96u + 32u);
  EXPECT_EQ(r.result.counters.special_ops, 64u);
  for (int t = 0; t < 64; ++t) {
    float a = static_cast<float>(t) * 2.0f + 1.0f;
    for (int i = 0; i < t % 4; ++i) a += 0.5f;
    if (t % 2 == 0) a = a / 3.0f;
    EXPECT_EQ(r.out[static_cast<size_t>(t)], std::fmax(std::exp(-a), 0.25f)) << "thread " << t;
  }
  // Counters off (timing runs): nothing counted, the same result.
  simt::Options quiet;
  quiet.counters = false;
  const Ran q = run(text, 1, 64, 0, 64, quiet);
  EXPECT_EQ(q.result.counters.flops, 0u);
  EXPECT_EQ(q.out, r.out);
}

TEST(SimtModule, ParametersComeFromTheSignatureAndBuildErrorsNameTheCompiler) {
  const std::vector<KernelSignature> ks = kernel_signatures(
      "extern \"C\" __global__ void __launch_bounds__(64) a(FT_GLOBAL(const unsigned short) h, FT_GLOBAL(long long) i) {\n}\n"
      "extern \"C\" __global__ void b(FT_GLOBAL(float) out, FT_SCRATCH(unsigned int, 6, 40, 3) p1_ft_flags, "
      "FT_SCRATCH(float, 96) p1_ft_partials) {\n}\n");
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].name, "a");
  ASSERT_EQ(ks[0].params.size(), 2u);
  EXPECT_EQ(ks[0].params[0].name, "h");
  EXPECT_EQ(ks[0].params[0].element_bytes, 2);
  EXPECT_FALSE(ks[0].params[0].writable);
  EXPECT_EQ(ks[0].params[1].element_bytes, 8);
  EXPECT_TRUE(ks[0].params[1].writable);
  EXPECT_EQ(ks[1].name, "b");
  // Scratch: a counter buffer names the blocks its counters count (6 groups of 3 from block 40).
  ASSERT_EQ(ks[1].params.size(), 3u);
  EXPECT_EQ(ks[1].params[1].name, "p1_ft_flags");
  EXPECT_EQ(ks[1].params[1].scratch_elements, 6);
  EXPECT_EQ(ks[1].params[1].first_block, 40);
  EXPECT_EQ(ks[1].params[1].group_blocks, 3);
  EXPECT_EQ(ks[1].params[2].scratch_elements, 96);
  EXPECT_EQ(ks[1].params[2].group_blocks, 0);
  try {
    simt::Module bad(cuda("extern \"C\" __global__ void k(FT_GLOBAL(float) out) { out[0] = undeclared; }\n"));
    ADD_FAILURE() << "a kernel that does not compile was built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernels.cu:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("undeclared"), std::string::npos) << e.what();
  }
}


// A text too large for one unit is built in several, side by side: every kernel in exactly one,
// the executor's table in the first only, and the lines reported are still those of kernels.cu.
TEST(SimtModule, ALargeTextBuildsInSeveralUnitsThatKeepItsKernelsAndLines) {
  std::string kernels;
  const int count = 6;
  for (int i = 0; i < count; ++i) {
    kernels += "// kernel " + std::to_string(i) + ", padded to 60 KB of text\n";
    for (int line = 0; line < 1000; ++line) kernels += "// ..........................................................\n";
    kernels += "extern \"C\" __global__ void __launch_bounds__(64) k" + std::to_string(i) +
               "(FT_GLOBAL(const float) x, FT_GLOBAL(float) out) {\n"
               "  FT_SHARED_MEMORY;\n"
               "  FT_SHARED(float, s, 0, 64);\n"
               "  const int t = threadIdx.x;\n"
               "  s[t] = x[t] + " + std::to_string(i) + ".0f;\n" +
               (i + 1 == count ? "" : "  __syncthreads();\n") +
               "  out[t] = s[(t + 1) % 64]; // read in k" + std::to_string(i) + "\n}\n";
  }
  const std::string text = cuda(kernels);
  const std::vector<std::string> units = simt::build_units(text, 4, "prelude-x.h");
  ASSERT_EQ(units.size(), 4u);
  for (int i = 0; i < count; ++i) {
    const std::string entry = "FT_SIMT_ENTRY(k" + std::to_string(i) + ")";
    EXPECT_EQ(std::count_if(units.begin(), units.end(), [&](const std::string& u) { return u.find(entry) != std::string::npos; }), 1)
        << entry;
  }
  for (size_t u = 0; u < units.size(); ++u) {
    EXPECT_EQ(units[u].rfind("#include \"prelude-x.h\"\n", 0), 0u) << "unit " << u << " does not include the header first";
    EXPECT_EQ(units[u].find("FT_SIMT_TABLE()") != std::string::npos, u == 0) << "unit " << u;
  }
  EXPECT_EQ(simt::build_units(text, 1, "prelude-x.h").size(), 1u);

  // Built as this machine builds it (a unit per core, up to 4 here): the last kernel runs from
  // its unit, and its race is reported at its line in kernels.cu.
  if (std::thread::hardware_concurrency() < 2) std::printf("NOTE: one core: the module below is built as one unit\n");
  simt::Module m(text);
  Aligned x(64), out(64);
  std::iota(x.data, x.data + 64, 0.0f);
  const simt::LaunchResult first = simt::launch(m.kernel("k0"), {x.data, out.data}, {256, 256}, {1, 64, 256}, {});
  EXPECT_EQ(first.finding_count, 0u) << all(first);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out.data[t], static_cast<float>((t + 1) % 64)) << t;
  const simt::LaunchResult last = simt::launch(m.kernel("k5"), {x.data, out.data}, {256, 256}, {1, 64, 256}, {});
  const int line = simt_line_of(kernels, "out[t] = s[(t + 1) % 64]; // read in k5");
  EXPECT_NE(all(last).find("kernels.cu:" + std::to_string(line)), std::string::npos) << "line " << line << "\n" << all(last);
}

// Every unit reads the prelude precompiled (simt/module.h): the header and its .gch sit in the
// cache, and a unit compiled by the command compile() runs reads the .gch (GCC's -H marks a
// precompiled header it uses '!' and one it must refuse, built with other flags, 'x').
TEST(SimtModule, EveryUnitReadsThePreludePrecompiled) {
  const std::string identity = simt::compiler_identity(simt::default_compiler());
  if (identity.find("clang") != std::string::npos) {
    std::printf("NOTE: the precompiled prelude not checked: %s is not GCC\n", identity.c_str());
    return;
  }
  const std::filesystem::path header = simt::prelude_header();
  const std::string pch = header.string() + ".gch";
  ASSERT_TRUE(std::filesystem::exists(header)) << header;
  ASSERT_TRUE(std::filesystem::exists(pch)) << pch;
  testing::TestDir dir("pch");
  std::ofstream(dir / "unit.cpp") << "#include \"" << header.filename().string() << "\"\nFT_SIMT_TABLE()\n";
  const auto headers_read = [&](const std::string& extra) {
    const std::string command =
        simt::unit_compile_command(simt::default_compiler(), header.string(), (dir / "unit.cpp").string(),
                                   (dir / "unit.o").string()) + extra + " -H 2>&1";
    std::string out;
    if (FILE* p = ::popen(command.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      EXPECT_EQ(::pclose(p), 0) << command << "\n" << out;
    }
    return out;
  };
  const std::string used = headers_read("");
  EXPECT_NE(used.find("! " + pch), std::string::npos) << used.substr(0, 2000);
  const std::string refused = headers_read(" -O0");  // other flags than it was built with
  EXPECT_NE(refused.find("x " + pch), std::string::npos) << refused.substr(0, 2000);
  EXPECT_EQ(refused.find("! " + pch), std::string::npos) << refused.substr(0, 2000);
}

}  // namespace
}  // namespace fusetune
