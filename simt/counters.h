// Memory-transaction counters of one warp, the way a GPU groups its lanes' accesses.
//
// Takes every global and shared access of the warp's lanes (site, address, size, load or store)
// between two synchronisation points of the warp (a barrier, a warp-synchronous operation, the
// end of the block). The k-th execution of a site by each lane joins the k-th request of that
// site: lanes of a warp execute an instruction together, and the code fusetune emits reaches a
// site k times in a lane exactly when the lane's loop or branch would issue it k times on the GPU
// (a lane with fewer executions is inactive in the later requests). flush() closes the interval
// and adds, per request: a global request and the distinct 32-byte sectors its lanes touch; a
// shared request and its wavefronts: lanes are served in phases of 128 bytes (32 lanes for
// accesses of up to 4 bytes, 16 for 8-byte, 8 for 16-byte ones), and a phase takes as many
// wavefronts as the most distinct 4-byte words any of the 32 banks holds among its lanes' words
// (the same word read by several lanes is one broadcast).
//
// UniqueSectors records which 32-byte sectors of the launch's global buffers were loaded or
// stored, from all blocks at once (relaxed atomic bit sets), for the per-launch lower bound on
// DRAM traffic.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <unordered_map>
#include <vector>

#include "simt/report.h"

namespace fusetune::simt {

class WarpTrace {
 public:
  void global(const void* site, int lane, uintptr_t address, int size, bool store);
  void shared(const void* site, int lane, uintptr_t offset, int size, bool store);
  void flush(Counters& c);

 private:
  struct Access {
    uint32_t lane;
    uint32_t size;
    uint64_t address;  // global: host address; shared: byte offset in the block's shared memory
  };
  struct Request {
    std::vector<Access> accesses;
  };
  struct Site {
    bool global = false;
    bool store = false;
    uint32_t executed[32] = {};
    std::vector<Request> requests;
  };
  Site& site(const void* key, bool global, bool store);
  void record(Site& s, int lane, uint64_t address, int size);
  std::unordered_map<const void*, Site> sites_;
};

// The wavefronts of one shared-memory request: (lane, byte offset) of each active lane, all
// accesses `size` bytes wide.
uint64_t shared_wavefronts(const std::vector<std::pair<int, uint64_t>>& lanes, int size);

class UniqueSectors {
 public:
  // Buffers [lo, hi) (host addresses) whose sectors mark() may count; seal() before marking.
  void add_range(uintptr_t lo, uintptr_t hi);
  void seal();
  void mark(uintptr_t address, int size, bool store);
  uint64_t loaded() const;
  uint64_t stored() const;

 private:
  struct Range {
    uintptr_t first_sector = 0, sectors = 0;
    std::unique_ptr<std::atomic<uint64_t>[]> load, store;
  };
  std::vector<std::pair<uintptr_t, uintptr_t>> pending_;
  std::vector<Range> ranges_;
};

}  // namespace fusetune::simt
