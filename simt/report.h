// What one launch on the SIMT executor found: the sanitizer-style checks that failed, and the
// counters of what its kernel did to memory.
//
// Findings are collected while blocks run (on several OS threads), deduplicated by (check, what,
// buffer, sites), and rendered after the launch: each names the kernel, the buffer and element,
// the threads (block and thread index) and the lines of the CUDA text (kernels.cu) of the
// accesses involved. Lines come from the module's line table (the host build compiles the CUDA
// text under `#line 1 "kernels.cu"` with -g1), read with addr2line only when there is something to
// report. CheckFailed is the Error a launch with findings throws: its message is the first
// finding's line and the number of others.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"

namespace fusetune::simt {

// Counted (the host executed the kernel), per launch. Requests are warp-level instructions: the
// accesses of the 32 lanes of a warp to one instruction (site) between two synchronisation points
// of the warp are matched in order (the k-th execution of a site by each lane forms the k-th
// request; docs/simt.md explains why this is the GPU's grouping for the code fusetune emits).
struct Counters {
  uint64_t launches = 0;
  uint64_t blocks = 0;
  uint64_t threads = 0;
  uint64_t global_load_requests = 0;
  uint64_t global_load_sectors = 0;  // 32-byte sectors the requests touch, summed per request
  uint64_t global_store_requests = 0;
  uint64_t global_store_sectors = 0;
  uint64_t unique_load_sectors = 0;   // distinct sectors loaded in the launch: a lower bound on DRAM reads
  uint64_t unique_store_sectors = 0;  // distinct sectors stored: a lower bound on DRAM writes
  uint64_t shared_load_requests = 0;
  uint64_t shared_load_wavefronts = 0;  // bank-conflict wavefronts (one per request when conflict-free)
  uint64_t shared_store_requests = 0;
  uint64_t shared_store_wavefronts = 0;
  uint64_t barriers = 0;          // __syncthreads completed, per block
  uint64_t warp_operations = 0;   // warp-synchronous operations completed, per warp
  uint64_t redundant_stores = 0;  // global elements stored again by another block with the same bytes
  uint64_t flops = 0;        // float adds, subtracts, multiplies, divides executed (an FMA is two; simt/prelude.h)
  uint64_t special_ops = 0;  // transcendental math calls executed (expf, sqrtf, erff, ...)
  // Per barrier (line of the CUDA text): the accesses it ordered after another thread's access of
  // the interval before it. A barrier executed but absent here ordered nothing in these runs.
  std::map<int, uint64_t> barrier_orderings;
  std::set<int> barrier_lines;  // every barrier line executed
  // Per cp.async.wait_group, wgmma.wait_group or mbarrier wait (line of the CUDA text): the copies
  // it landed, the wgmma results it landed and operand rows whose reads it ended, or (an mbarrier
  // wait) the tensor copies it landed and the phases it observed.
  std::map<int, uint64_t> wait_landings;
  // Per access site (an instruction of the module): its requests and their sectors (global) or
  // wavefronts (shared), to find the access a figure comes from (site_lines resolves them).
  struct Site {
    bool global = false, store = false;
    int size = 0;  // bytes per lane
    uint64_t requests = 0, units = 0;
    // What full-warp requests of this size need at the least: sectors (global), wavefronts (shared).
    uint64_t ideal() const { return requests * static_cast<uint64_t>(global ? size : (size + 3) / 4); }
  };
  std::map<const void*, Site> sites;

  Counters& operator+=(const Counters& o);
  uint64_t unique_bytes() const { return 32 * (unique_load_sectors + unique_store_sectors); }
  // The bytes of the sectors the global requests touched (each request's distinct sectors, loads
  // and stores): the traffic between the SMs and L2 where L1 keeps nothing.
  uint64_t requested_bytes() const { return 32 * (global_load_sectors + global_store_sectors); }
  // The global sectors loads (or stores) of `bytes` per lane requested: how much of the traffic
  // moved in accesses that wide (16: the 128-bit accesses, cp.async's copies included).
  uint64_t global_sectors_of_width(int bytes, bool store) const;
};

// "kernels.cu:LINE" of each access site, from the line table and inline chain of the module
// holding it, read in process (libdw): it starts no program.
std::map<const void*, std::string> site_lines(const std::vector<const void*>& sites);

enum class Check { kRace, kSync, kMemory, kInit };
const char* check_name(Check c);  // "racecheck", "synccheck", "memcheck", "initcheck"

// One finding before rendering: the sites are return addresses inside the module.
struct Finding {
  Check check = Check::kRace;
  std::string what;      // "write-after-read hazard", "out-of-bounds load", ...
  std::string buffer;    // "shared 'sa59'", "global 'out0'"; empty for synccheck
  long long element = -1;
  std::string threads;   // "thread 37 and thread 4 of block 5"
  const void* site = nullptr;
  const void* other_site = nullptr;
  std::string extra;     // free text (synccheck: who waits where)
};

class Findings {
 public:
  explicit Findings(size_t keep = 8) : keep_(keep) {}
  void add(Finding f);  // thread-safe
  size_t total() const;
  bool empty() const { return total() == 0; }
  // One line per kept finding, "racecheck: kernel k2: ... at kernels.cu:120 ...", plus a
  // line counting the rest; sites resolved through the line table of the module holding them.
  std::vector<std::string> render(const std::string& kernel) const;
  Check first_check() const;

 private:
  mutable std::mutex mutex_;
  size_t keep_;
  std::vector<Finding> kept_;
  std::vector<uint64_t> repeats_;
  size_t total_ = 0;
};

class CheckFailed : public Error {
 public:
  CheckFailed(Check check, const std::string& message) : Error(message), check_(check) {}
  Check check() const { return check_; }

 private:
  Check check_;
};

}  // namespace fusetune::simt
