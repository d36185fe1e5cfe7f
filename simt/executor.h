// The SIMT executor: runs a kernel of the CUDA text on the host the way a GPU runs it, with the
// checks compute-sanitizer makes and the counters of what it does to memory.
//
// Takes a kernel of a module built from the CUDA text (simt/module.h), its parameters' buffers
// and a launch shape (1-D grid and block, dynamic shared memory). Every CUDA thread runs on a
// fiber of its own (Boost.Context: own stack, own locals); the blocks of the grid run in parallel
// on `workers` OS threads, the threads of a block on one OS thread, each until it reaches a
// barrier or a warp-synchronous operation (which suspend it until its block or warp arrives) or
// ends. Guarantees, with Options::checks (the default; Options::checked_blocks may narrow the
// race and initialisation checks to a sample of the blocks):
// - memcheck: an access outside its buffer (a parameter, or a shared view outside its own
//   extent) or not aligned to its size is reported and redirected to scratch memory;
// - racecheck: hazards between threads of a block within one barrier interval (and between warps
//   across warp-synchronous operations) on shared memory and on global buffers the launch
//   writes, and between blocks on those global buffers (simt/hazards.h);
// - initcheck: a load of shared memory that no thread of the block wrote in this launch;
// - asynchronous copies (cp.async): a copy's source is read when it is issued and its bytes land
//   in shared memory when the issuing thread's cp.async.wait_group completes its group, as that
//   thread's store; an access of the destination in between is a racecheck finding, and so is
//   a copy no wait completed before its thread ended (synccheck);
// - tensor copies (TMA) and mbarriers: a copy's box is read when it is issued and lands where a
//   wait observes the mbarrier phase its bytes completed, ordered for that waiter alone (and for
//   the block after a barrier); an access of the destination before, or by a thread nothing
//   orders after the landing, is a racecheck finding; a phase that never completes is a deadlock;
//   an arrival releases what its thread did before to whoever observes the phase (vector clocks,
//   hazards.h), so a slot consumers release on an mbarrier and a producer waits for is reused
//   without a block barrier;
// - synccheck: a barrier that not every thread reaches, threads waiting at different barriers,
//   a warp operation with lanes missing or lanes at different warp operations; a deadlock is
//   reported (who waits where) and the waiters released, never a hang.
// Findings do not stop the launch: it runs to the end and reports them all (LaunchResult); the
// verdict does not depend on the order threads run in (Options::schedule_seed permutes it).
// With Options::counters it counts requests, sectors, unique sectors, shared wavefronts,
// barriers and warp operations (simt/counters.h, simt/report.h).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/kernel_text.h"
#include "simt/device_api.h"
#include "simt/report.h"

namespace fusetune::simt {

inline constexpr int kWarpLanes = 32;

struct Options {
  bool checks = true;
  bool counters = true;
  int workers = 0;              // OS threads running blocks; 0: all cores
  uint64_t schedule_seed = 0;   // 0: threads resume in index order; else a seeded permutation
  size_t max_findings = 8;      // distinct findings kept in full
  std::set<int> skip_barriers;  // lines of the CUDA text whose __syncthreads() does nothing (mutation tests)
  std::set<int> skip_waits;     // lines of the CUDA text whose cp.async.wait_group or mbarrier wait does nothing (mutation tests)
  // Run only these blocks of the grid (distinct indices below the grid; empty: every block). The
  // checks and counters then cover what those blocks do, the cross-block race check among them.
  std::vector<int64_t> blocks;
  // With `checks`, the blocks (sorted, distinct) the race and initialisation checks cover, the
  // cross-block race check among them (empty: every block run). Memcheck and synccheck cover
  // every block run.
  std::vector<int64_t> checked_blocks;
};

// A kernel parameter as its signature in the text declares it (core/kernel_text.h).
using Param = KernelParam;

struct KernelRef {
  std::string name;
  ft_simt_entry entry = nullptr;
  std::vector<Param> params;
};

struct Shape {
  int64_t grid = 1;
  int threads = 32;
  int64_t shared_bytes = 0;
};

struct LaunchResult {
  Counters counters;
  std::vector<std::string> findings;  // rendered, one line each; empty: every check passed
  size_t finding_count = 0;           // all findings, including repeats not kept
  Check first_check = Check::kRace;
};

// The table the module's accesses call (bound once per module by simt/module.cpp).
const ft_simt_api* api();

LaunchResult launch(const KernelRef& kernel, const std::vector<void*>& buffers, const std::vector<size_t>& bytes,
                    const Shape& shape, const Options& options);

// Throws CheckFailed naming the kernel and the first finding when `r` has findings.
void throw_findings(const std::string& kernel, const LaunchResult& r);

}  // namespace fusetune::simt
