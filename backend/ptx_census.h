// The habits of generated code as the GPU sees them, counted in the PTX NVRTC emits for a module
// (compile_ptx): per kernel (an `.entry` to the next), the static instructions that tell whether
// the code is written for the GPU (issue 27's list, docs/performance.md):
//  - 16-bit floats converted natively (cvt between f32 and f16/bf16, packed forms included), or by
//    the bit manipulation the host executor once needed (float16's overflow and subnormal
//    thresholds 0x477ff000 and 0x38800000 as immediates, or one less: >= turned into >);
//  - global accesses by width: 16-bit scalar loads, 128-bit loads and stores (vector count x
//    element size), read-only (.nc) loads;
//  - staging: cp.async copies to shared memory, their commits and waits; TMA (cp.async.bulk);
//  - tensor cores: mma.sync, wgmma.mma_async, ldmatrix;
//  - index arithmetic: integer division or remainder on 64-bit values (a called routine of ~70
//    instructions), and on 32-bit ones (a literal divisor is strength-reduced to a multiply, so
//    what remains divides by a value known only at run time);
//  - local memory (ld/st.local: spills or dynamically indexed arrays);
//  - loads in flight: the longest run of global loads with no shared store or barrier between them
//    in the text (a staging loop that stores each element before loading the next has runs of 1;
//    one that loads a batch into registers first, runs of the batch; for several kernels, the
//    longest).
// Counted from the text alone, one statement at a time: static counts, not executions. A `.func`
// body counts for no kernel (generated code inlines its helpers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fusetune::backend {

struct PtxCounts {
  int64_t cvt_f16_to_f32 = 0;        // cvt.f32.f16, cvt.f32.bf16
  int64_t cvt_f32_to_f16 = 0;        // cvt.rn.f16.f32, cvt.rn.bf16.f32, their x2 forms
  int64_t software_conversion = 0;   // immediates of the software float16 conversion
  int64_t global_loads = 0;          // ld.global of any width
  int64_t global_loads_16bit = 0;    // scalar 16-bit ld.global
  int64_t global_loads_128bit = 0;   // ld.global of 16 bytes (v4 of 32-bit, v2 of 64-bit, ...)
  int64_t global_loads_readonly = 0; // ld.global.nc
  int64_t global_stores = 0;
  int64_t global_stores_16bit = 0;
  int64_t global_stores_128bit = 0;
  int64_t cp_async = 0;              // cp.async.{ca,cg}.shared.global
  int64_t cp_async_waits = 0;        // cp.async.wait_group / wait_all
  int64_t cp_async_bulk = 0;         // cp.async.bulk (TMA)
  int64_t mma_sync = 0;
  int64_t wgmma = 0;                 // wgmma.mma_async
  int64_t ldmatrix = 0;
  int64_t div_rem_64 = 0;            // div/rem .s64/.u64
  int64_t div_rem_32 = 0;            // div/rem .s32/.u32
  int64_t local_accesses = 0;        // ld.local, st.local
  int64_t longest_load_run = 0;      // ld.global in a row before an st.shared or a barrier

  PtxCounts& operator+=(const PtxCounts& o);
  nlohmann::json to_json() const;
};

struct KernelPtx {
  std::string name;
  PtxCounts counts;
};

// The kernels of a PTX module in the order they appear.
std::vector<KernelPtx> ptx_census(const std::string& ptx);

}  // namespace fusetune::backend
