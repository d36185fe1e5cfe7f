// Test helper: the differential check of generated kernels. check_groups lowers each group of a
// graph with a config chooser, runs all of them as one module on the host backend (and the CUDA
// backend where a GPU exists) with fresh random inputs, verifies each against the reference
// (backend/verify.h), and compiles the CUDA form with NVRTC for sm_80 and sm_90 (or the archs
// asked for), checking that
// ptxas reports every kernel (and, when asked, that none spills registers).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "backend/nvrtc.h"
#include "backend/verify.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "planner/device.h"
#include "planner/tiling.h"
#include "tests/unit/test_seed.h"

namespace fusetune::testing {

// Deletes barrier `target` of `b` (in statement order, at any depth, both branches of an if);
// returns how many barriers it saw (target -1: counts them and deletes none). The barrier
// mutation tests delete each in turn.
inline int drop_barrier(codegen::Block& b, int target, int seen = 0) {
  codegen::Block kept;
  for (codegen::Stmt& st : b) {
    if (st.kind == codegen::Stmt::Kind::kBarrier && seen++ == target) continue;
    seen = drop_barrier(st.body, target, seen);
    seen = drop_barrier(st.orelse, target, seen);
    kept.push_back(std::move(st));
  }
  b = std::move(kept);
  return seen;
}

// Each barrier of `good` (at least `at_least` of them) deleted in turn: the host executor's checks
// must report the kernel (a race, or a read of what was not yet written).
inline void expect_each_deleted_barrier_reported(const Graph& g, const planner::FusionGroup& group, const codegen::LoweredKernel& good,
                                                 int at_least) {
  auto backend = backend::make_host_backend();
  std::mt19937 rng(testing::test_seed());
  codegen::LoweredKernel probe = good;
  const int barriers = drop_barrier(probe.kernel.body, -1);
  ASSERT_GE(barriers, at_least) << codegen::to_text(good.kernel);
  for (int i = 0; i < barriers; ++i) {
    codegen::LoweredKernel bad = good;
    drop_barrier(bad.kernel.body, i);
    auto m = backend->load({bad.kernel});
    const backend::VerifyResult r = backend::verify_kernel(g, group, bad, *backend, *m, rng);
    EXPECT_TRUE(!r.ok && r.check_failed) << "barrier " << i << " of " << barriers << " deleted: " << r.detail;
  }
}

// Each cp.async wait in `b` for all but the newest `groups` groups (at any depth) loosened to
// one group more: the copies it waited for may still be in flight. Returns how many it loosened.
inline int loosen_async_waits(codegen::Block& b, int groups) {
  int waits = 0;
  for (codegen::Stmt& st : b) {
    if (st.kind == codegen::Stmt::Kind::kCopyAsyncWait && st.groups == groups) {
      st.groups = groups + 1;
      ++waits;
    }
    waits += loosen_async_waits(st.body, groups) + loosen_async_waits(st.orelse, groups);
  }
  return waits;
}

// A float as a 16-bit operand of `dtype` (float16 or bfloat16) and back: what the tensor-core
// tests feed their fragments.
inline uint16_t to_16(DType dtype, float x) { return dtype == DType::kBF16 ? float_to_bfloat16(x) : float_to_half(x); }
inline float from_16(DType dtype, uint16_t x) { return dtype == DType::kBF16 ? bfloat16_to_float(x) : half_to_float(x); }

// `cfg` with leading tile extents of 1 up to `rank` (a batched group's tile).
inline planner::TileConfig with_batch(planner::TileConfig cfg, size_t rank) {
  while (cfg.tile.size() < rank) cfg.tile.insert(cfg.tile.begin(), 1);
  return cfg;
}

// The planner's best generated candidate for a group on H100 (library calls are tested in
// test_library_call.cpp).
inline planner::TileConfig best_config(const Graph& g, const planner::FusionGroup& fg) {
  planner::TilingOptions generated_only{2, 2.0};
  generated_only.library_algorithms = 0;
  for (const planner::Candidate& c : planner::tile_candidates(g, fg, planner::find_device("h100"), generated_only)) {
    if (c.config.library.empty()) return c.config;
  }
  ADD_FAILURE() << "no generated candidate for " << fg.pattern;
  return {};
}

struct CheckOptions {
  bool no_spills = false;  // ptxas must report no spill stores or loads for any kernel
  std::vector<std::string> archs = {"sm_80", "sm_90"};  // compiled for each
  unsigned seed = 0;       // the inputs' seed (0: testing::test_seed(), printed)
};

// The host backend, and the CUDA backend where a GPU is usable (else a note naming `label` says why).
inline std::vector<std::unique_ptr<backend::Backend>> test_backends(const std::string& label) {
  std::vector<std::unique_ptr<backend::Backend>> backends;
  backends.push_back(backend::make_host_backend());
  std::string why_no_gpu;
  if (auto cuda = backend::make_cuda_backend(0, &why_no_gpu)) {
    backends.push_back(std::move(cuda));
  } else {
    std::printf("NOTE: CUDA backend not run for %s: %s\n", label.c_str(), why_no_gpu.c_str());
  }
  return backends;
}

inline void check_groups(const Graph& g, const std::vector<planner::FusionGroup>& groups,
                         const std::function<planner::TileConfig(const planner::FusionGroup&)>& config,
                         const std::string& label, const CheckOptions& options = {}) {
  struct Case {
    planner::FusionGroup group;
    codegen::LoweredKernel kernel;
    bool tf32 = false;  // float32 MatMuls on TF32 tensor cores: compared at TF32's tolerance
  };
  std::vector<Case> cases;
  std::vector<codegen::Kernel> kernels;
  for (size_t k = 0; k < groups.size(); ++k) {
    Case c{groups[k], {}};
    const planner::TileConfig cfg = config(groups[k]);
    c.kernel = codegen::lower_group(g, groups[k], cfg, "k" + std::to_string(k));
    c.tf32 = backend::tf32_kernel(g, groups[k], cfg.str());
    kernels.push_back(c.kernel.kernel);
    cases.push_back(std::move(c));
  }
  // Fresh inputs every run; the seed is printed with any failure so it can be replayed.
  const unsigned seed = options.seed != 0 ? options.seed : testing::test_seed();
  for (auto& backend : test_backends(label)) {
    auto module = backend->load(kernels);
    std::mt19937 rng(seed);
    for (const Case& c : cases) {
      for (int trial = 0; trial < 2; ++trial) {
        backend::VerifyOptions verify;
        verify.tf32 = c.tf32;
        const backend::VerifyResult r = backend::verify_kernel(g, c.group, c.kernel, *backend, *module, rng, verify);
        EXPECT_TRUE(r.ok) << label << " on " << backend->name() << ", seed " << seed << ", group '" << c.group.pattern
                          << "' (" << c.kernel.kernel.name << "): " << r.detail << "\n" << to_text(c.kernel.kernel);
      }
    }
  }
  if (!backend::nvrtc_available()) {
    std::printf("NOTE: NVRTC not available in this build; CUDA compilation of %s not checked\n", label.c_str());
    return;
  }
  // Kernels that issue wgmma (sm_90a) are compiled for sm_90 only; the others for every arch.
  std::vector<codegen::Kernel> portable;
  for (const codegen::Kernel& k : kernels) {
    if (codegen::wgmma_shapes(k).empty()) portable.push_back(k);
  }
  for (const std::string& arch : options.archs) {
    const std::vector<codegen::Kernel>& compiled = arch == "sm_90" ? kernels : portable;
    if (compiled.size() < kernels.size()) {
      std::printf("NOTE: %s: %zu kernels issue wgmma (sm_90a only), not compiled for %s\n", label.c_str(),
                  kernels.size() - compiled.size(), arch.c_str());
    }
    if (compiled.empty()) continue;
    const backend::CompiledCuda cc = backend::compile_cuda(codegen::emit_cuda(compiled), arch);
    EXPECT_FALSE(cc.cubin.empty()) << label << " " << arch;
    for (const codegen::Kernel& k : compiled) {
      ASSERT_TRUE(cc.resources.count(k.name)) << label << " " << arch << ": no ptxas report for " << k.name << "\n" << cc.log;
      EXPECT_GT(cc.resources.at(k.name).registers, 0);
      if (options.no_spills) {
        EXPECT_FALSE(cc.resources.at(k.name).spills())
            << label << " " << arch << ": " << k.name << " spills (" << cc.resources.at(k.name).spill_store_bytes
            << " bytes stored)\n" << cc.log;
      }
    }
  }
}

}  // namespace fusetune::testing
