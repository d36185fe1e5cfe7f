// Race and initialisation checks of one memory location, as compute-sanitizer's racecheck and
// initcheck make them on a GPU.
//
// Within a block: every shared-memory location (and every location of a global buffer the launch
// writes) has a Cell recording its last write and its readers with the time they happened: the
// block run (`gen`), the barrier interval (`epoch`: barriers the block has completed) and, per
// warp, the warp-synchronous operations the warp has completed (`wepoch`). Two accesses of
// different threads, at least one a write, are a hazard when they fall in the same barrier
// interval, unless both threads belong to one warp and a warp-synchronous operation of that warp
// lies between them (read-after-write, write-after-read, write-after-write). The verdict does not
// depend on the order the executor happens to run the threads in. A load of a shared location
// that no thread of the block wrote in this run is an initcheck finding. A location an
// asynchronous copy (cp.async) has been issued into and not yet landed holds no defined value:
// any access of it is a hazard, whatever the order (the copy lands when its thread waits for it).
// A location a wgmma reads (asynchronously, until its thread's wgmma.wait_group completes it)
// may be read meanwhile, but a store to it is a hazard, whatever the order. A tensor copy (TMA)
// is in flight likewise until a wait observes the mbarrier phase it completed; it then lands as a
// write of the asynchronous proxy that only that phase orders: an access in the same barrier
// interval must come from a thread that observed the phase (Access::seen), whichever thread issued
// the copy; a barrier after an observing wait orders it for the whole block.
//
// Release and acquire through mbarriers (Clocks, ClockedCell): where a block uses mbarriers, an
// access a barrier interval's rules report (read-after-write, write-after-read, write-after-write
// on shared memory, by threads of different warps or of one warp with no warp-synchronous
// operation between) is not a hazard when the later thread acquired what the earlier one
// released: every thread keeps a vector clock; an mbarrier.arrive releases the thread's clock into
// the mbarrier, a wait that observes a phase acquires what the mbarrier held when that phase
// completed, and __syncwarp joins its lanes' clocks (the phases a thread observed, Access::seen,
// travel through arrivals and waits likewise). This is how warp-specialized
// pipelines order a slot's reuse: consumers arrive on a "slot free" mbarrier after reading it, the
// producer waits on it, then overwrites the slot. A tensor copy's bytes stay ordered by their
// phase token alone (above).
//
// Across blocks (global buffers the launch writes): blocks have no way to order their accesses,
// so a location written by one block and read or written by another is a hazard; CrossBlock keeps
// the first writer and reader block of every element in atomics shared by all OS threads. The
// executor lets one exception pass: a block writing the very bytes another block wrote (the code
// generator recomputes an exported value over every tile's region, and each block writes the same
// result); those are counted as redundant stores instead.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace fusetune::simt {

struct Stamp {
  uint32_t gen = 0;    // the block run (never 0 for a real run)
  uint32_t epoch = 0;  // barriers completed
  uint64_t packed() const { return (uint64_t{gen} << 32) | epoch; }
};

// An mbarrier phase (simt/executor.cpp): the block's mbarrier `slot` (from 0, in the order the
// block initialised them) and its phase number, packed: (slot + 1) << 24 | phase.
inline uint32_t phase_token(uint32_t slot, uint32_t phase) { return ((slot + 1) << 24) | (phase & 0xffffffu); }

// `into` = the element-wise maximum of `into` and `from` (the longer's length): how vector clocks
// and observed phases (Access::seen) are joined.
inline void join_max(std::vector<uint32_t>& into, const std::vector<uint32_t>& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

// A thread's vector clock: clock[t] is the last clock value of thread t whose accesses this thread
// is ordered after (its own entry: the clock its accesses are stamped with now).
struct Clocks {
  std::vector<uint32_t> clock;
  void start(size_t threads, int self) {
    clock.assign(threads, 0);
    clock[static_cast<size_t>(self)] = 1;
  }
  void join(const std::vector<uint32_t>& other) { join_max(clock, other); }
  // Whether thread `t`'s access stamped `c` is ordered before this thread's present.
  bool after(int t, uint32_t c) const { return static_cast<size_t>(t) < clock.size() && clock[static_cast<size_t>(t)] >= c; }
};

// One access, as the checks see it.
struct Access {
  int thread = 0;
  uint32_t wepoch = 0;  // the thread's warp's completed warp-synchronous operations
  const void* site = nullptr;
  // The mbarrier phases the thread has observed complete: seen[slot] phases of mbarrier `slot`
  // (by its own waits, or another thread's before a barrier it passed since).
  const uint32_t* seen = nullptr;
  uint32_t seen_count = 0;
  const Clocks* clocks = nullptr;  // the thread's vector clock, where the block uses mbarriers (else nullptr)
  bool observed(uint32_t token) const {
    const uint32_t slot = (token >> 24) - 1;
    return slot < seen_count && seen[slot] > (token & 0xffffffu);
  }
};

enum class Hazard { kNone, kReadAfterWrite, kWriteAfterRead, kWriteAfterWrite, kUninitialized, kAsyncInFlight, kTensorInFlight, kAsyncRead };
const char* hazard_name(Hazard h);

// The cell also tells whether an access depends on another thread's access of the previous
// barrier interval that nothing else orders before it (no warp-synchronous operation of their
// common warp between them) (*spans): the barrier between the two intervals is what orders them,
// so it is needed; a barrier that orders no such pair in a run is one the kernel did not need there.
struct Cell {
  uint64_t w_stamp = 0;  // Stamp::packed of the last write; 0: never
  uint64_t r_stamp = 0;
  uint64_t p_stamp = 0;  // the readers of the interval before r_stamp's
  const void* w_site = nullptr;
  const void* r_site = nullptr;
  uint32_t w_wepoch = 0, r_wepoch = 0;
  int32_t w_thread = -1, r_thread = -1, p_thread = -1;
  uint32_t w_token = 0;       // the last write is a tensor copy's, ordered by this mbarrier phase alone (0: none)
  bool r_many_warps = false;  // readers of this interval in more than one warp
  bool r_others = false;      // another reader of r_thread's warp at r_wepoch
  bool p_others = false;      // the earlier interval had readers other than p_thread
  int32_t a_thread = -1;      // a cp.async (or tensor copy) of this thread is copying into the location (-1: none)
  bool a_tensor = false;      // ... a tensor copy
  const void* a_site = nullptr;
  int32_t m_readers = 0;      // wgmma reads of the location in flight
  int32_t m_thread = -1;      // the thread of the latest of them
  const void* m_site = nullptr;

  // Check and record a load (initcheck when `init`) or a store; on a hazard, *other gets the
  // earlier access.
  Hazard load(Stamp now, const Access& a, bool init, Access* other, bool* spans);
  Hazard store(Stamp now, const Access& a, Access* other, bool* spans);
  // An asynchronous copy (cp.async) into the location: checked as a store where it is issued,
  // then in flight until it lands (a store by the issuing thread at its wait_group); any access
  // while it is in flight is kAsyncInFlight.
  Hazard issue_async(Stamp now, const Access& a, Access* other, bool* spans, bool tensor = false);
  // `token`: the copy is a tensor copy that mbarrier phase completed (0: a cp.async, its thread's).
  Hazard land_async(Stamp now, const Access& a, Access* other, bool* spans, uint32_t token = 0);
  // A wgmma's read of the location: checked as a load where it is issued, then in flight until
  // the issuing thread's wait completes it, which records it as that thread's read at the wait
  // (a store by another thread later in the interval is a write-after-read hazard, whichever
  // thread the executor runs first); a store while it is in flight is kAsyncRead.
  Hazard issue_async_read(Stamp now, const Access& a, Access* other, bool* spans);
  void complete_async_read(Stamp now, const Access& a);

 private:
  bool after_write(const Access& a) const;
};

// The clocks of one shared location's accesses in the running barrier interval: its last write
// (-1: none this interval, or a tensor copy, which only its phase orders) and each reading
// thread's latest read.
struct ClockedCell {
  uint32_t epoch = 0;
  int32_t w_thread = -1;
  uint32_t w_clock = 0;
  std::vector<std::pair<int32_t, uint32_t>> readers;

  // Whether what the interval-only rules reported as `h` is ordered by release and acquire for
  // thread `thread` with clocks `now`: the last write (read-after-write), every read
  // (write-after-read) or both (write-after-write: the cell reports it before the reads) happened
  // before.
  // A record of another interval orders nothing.
  bool orders(uint32_t interval, Hazard h, int thread, const Clocks& now) const;
  // Record an access of `thread` at its own clock (`tensor`: a tensor copy's write).
  void record(uint32_t interval, bool store, int thread, uint32_t clock, bool tensor);
};

// First writer and reader block of each element of one global buffer in one launch.
class CrossBlock {
 public:
  explicit CrossBlock(size_t elements);
  static constexpr uint32_t kMany = 0xffffffffu;
  struct Conflict {
    long long block = -1;       // the other block (kMany: several); -1: none
    bool with_writer = false;   // the other block wrote the element (else: read it)
    bool same_value = false;    // ... and wrote the bytes this store writes
    int writer_thread = -1;     // a load's: the writing thread of that block (-1: its store still in flight)
    uint32_t writer_epoch = 0;  // ... and the barrier interval of its block it stored in
  };
  Conflict load(size_t element, uint32_t block);
  // `value`: the store's bytes (at most 8); `thread` and `epoch`: the storing thread of the block
  // and the block's barrier interval.
  Conflict store(size_t element, uint32_t block, const void* value, int bytes, int thread = 0, uint32_t epoch = 0);

 private:
  static constexpr uint32_t kPublished = 0x80000000u;  // the first writer's bytes are in value_
  size_t elements_;
  std::unique_ptr<std::atomic<uint32_t>[]> writer_, reader_;  // block + 1 (| kPublished); 0: none
  std::unique_ptr<uint64_t[]> value_;                          // what the first writer stored
  std::unique_ptr<uint64_t[]> when_;                           // its thread and barrier interval (epoch << 32 | thread)
};

}  // namespace fusetune::simt
