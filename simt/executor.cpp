#include "simt/executor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/context/fiber.hpp>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "simt/counters.h"
#include "simt/hazards.h"
#include "simt/tensor_copy.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define FT_SIMT_ASAN 1
#endif
// ThreadSanitizer is told of every fiber and every switch (a switch orders what came before it):
// the threads of a block share one OS thread in turns, which the executor's own racecheck judges.
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define FT_SIMT_TSAN 1
#endif

// The modules' floating-point operation counts, per OS thread (simt/device_api.h).
extern "C" {
__thread unsigned long long ft_simt_ops[2];
}

namespace fusetune::simt {

namespace ctx = boost::context;

namespace {

constexpr size_t kStackBytes = 128 * 1024;
constexpr int kExchangeBytes = 64;  // the most one lane gives a warp exchange
constexpr int kShadowGranule = 2;   // bytes of shared memory per shadow cell: the smallest access

// ---- fiber stacks: mmap'd with a guard page below, pooled across launches ---------------------

class StackPool {
 public:
  ~StackPool() {
    for (void* p : free_) munmap(p, total());
  }
  void* take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        void* p = free_.back();
        free_.pop_back();
        return p;
      }
    }
    void* p = mmap(nullptr, total(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    check(p != MAP_FAILED, "simt: cannot map a fiber stack of ", total(), " bytes");
    mprotect(p, page(), PROT_NONE);  // an overflowing thread faults instead of corrupting its neighbour
    return p;
  }
  void give(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(p);
  }
  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  static size_t total() { return kStackBytes + page(); }

 private:
  std::mutex mutex_;
  std::vector<void*> free_;
};

StackPool& stacks() {
  static StackPool pool;
  return pool;
}

// Boost.Context's StackAllocator concept over the pool; tells the fiber where its stack lies.
struct PooledStack {
  const void** bottom = nullptr;
  ctx::stack_context allocate() {
    void* p = stacks().take();
    ctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = static_cast<char*>(p) + StackPool::total();
    if (bottom != nullptr) *bottom = static_cast<char*>(p) + StackPool::page();
    return sc;
  }
  void deallocate(ctx::stack_context& sc) { stacks().give(static_cast<char*>(sc.sp) - StackPool::total()); }
};

// ---- per-launch state shared by all workers --------------------------------------------------

struct ParamState {
  const Param* param = nullptr;
  size_t index = 0;
  bool tracked = false;       // written by the launch (or aliasing a written buffer): race-checked
  CrossBlock* cross = nullptr;
  long long cross_offset = 0;  // elements of `cross`'s buffer before this one's start
  uintptr_t lo = 0, hi = 0;
};

struct ViewState {
  std::string name;
  long long offset = 0;
};

struct Launch {
  const KernelRef& kernel;
  Shape shape;
  const Options& options;
  std::vector<ParamState> params;
  std::vector<ft_simt_buffer> descs;
  std::deque<ft_simt_tensor_map> tensor_maps;  // what FT_TENSOR_MAP parameters' descriptors point at
  std::vector<std::unique_ptr<CrossBlock>> cross;
  UniqueSectors unique;
  Findings findings;
  std::mutex counters_mutex;
  Counters counters;
  std::atomic<int64_t> next_block{0};
  // Atomics on global memory, and the blocks that published their stores through each location:
  // every atomic takes the mutex, so a location's sequence is its modification order.
  // A block's publication of its global stores by an atomic: the stores of its barrier intervals
  // before the atomic's (and the atomic's own thread's before it).
  struct Publication {
    uint32_t epoch = 0;
    int thread = 0;
  };
  struct Location {
    std::vector<std::pair<int64_t, Publication>> releases;  // by block, in the location's order
  };
  std::mutex atomics_mutex;
  std::map<uintptr_t, Location> locations;
  std::map<int64_t, std::string> unpublished;  // blocks whose atomic published nothing, and why
  Launch(const KernelRef& k, const Shape& s, const Options& o) : kernel(k), shape(s), options(o), findings(o.max_findings) {}
};

struct Worker;

// One cp.async in flight: its destination, the bytes it will land, where it was issued.
struct AsyncCopy {
  const ft_simt_buffer* dst = nullptr;
  long long index = 0;
  int size = 16;  // the bytes it lands
  unsigned char bytes[16] = {};
  const void* site = nullptr;
};

// One tensor copy (TMA) in flight: the view it lands in, the byte offset in the block's shared
// memory of its first byte, its bytes in linear order (swizzled as they land), who issued it.
struct TensorCopy {
  const ft_simt_buffer* dst = nullptr;
  uint64_t offset = 0;
  int swizzle = 0;
  std::vector<unsigned char> bytes;
  int thread = 0;
  const void* site = nullptr;
  Clocks clocks;  // the issuing thread's, where the block is clocked: the copy's write is ordered after what it was
};

// An mbarrier of the running block (keyed by its shared byte offset).
struct Mbarrier {
  uint32_t slot = 0;                // phase tokens name it by this (hazards.h phase_token)
  uint32_t expected = 0, pending = 0;
  int64_t tx = 0;                   // transaction bytes expected and not yet landed
  uint32_t phase = 0;               // phases completed since its init
  uint32_t base = 0;                // phases its earlier inits completed: tokens count on from them
  int init_thread = 0;
  uint32_t init_epoch = 0;
  bool reported = false;
  std::vector<uint32_t> released;   // the clocks its arrivals released (the block clocked: hazards.h Clocks)
  std::vector<uint32_t> completed;  // ... as its latest phase completed: what a wait observing it acquires
  // Likewise the mbarrier phases the arriving threads had observed (Fiber::seen): a tensor copy a
  // consumer observed before it arrived is ordered for whoever observes this mbarrier's phase.
  std::vector<uint32_t> released_seen, completed_seen;
  std::vector<TensorCopy> open;     // copies completing the current phase's bytes
  std::map<uint32_t, std::vector<TensorCopy>> unobserved;  // completed phases' copies no wait has observed
};

struct Fiber {
  enum class State { kReady, kRunning, kBarrier, kWarp, kMbarrier, kDone };
  Worker* worker = nullptr;
  int thread = 0, warp = 0, lane = 0;
  State state = State::kReady;
  int wait_line = 0;
  const void* wait_site = nullptr;
  uint64_t wait_mbarrier = 0;  // kMbarrier: the shared offset of the mbarrier, the parity awaited
  unsigned wait_parity = 0;
  bool wait_abandoned = false;  // released from a deadlock: the wait returns without observing
  std::vector<uint32_t> seen;   // mbarrier phases observed complete, by slot (hazards.h Access::seen)
  Clocks clocks;                // the thread's vector clock, once the block is clocked
  ctx::fiber self;  // held by the scheduler while the thread is suspended
  ctx::fiber sink;  // the scheduler, held by the thread while it runs
  const void* stack_bottom = nullptr;  // AddressSanitizer is told of every switch of stacks
  void* fake_stack = nullptr;
  void* tsan_fiber = nullptr;  // ThreadSanitizer's handle (FT_SIMT_TSAN)
  std::vector<AsyncCopy> copies_open;                // issued since the thread's last commit
  std::deque<std::vector<AsyncCopy>> copy_groups;   // committed, not yet waited for; oldest first
  // wgmma (sm_90a): the thread's accumulators in flight and the shared rows its wgmmas read, each
  // with the group it belongs to (committed groups are numbered from 1; wgmma_committed + 1 is
  // the open one).
  struct WgmmaResult {
    float* registers = nullptr;
    int count = 0;
    std::vector<float> values;
    uint64_t group = 0;
  };
  struct WgmmaRead {
    const ft_simt_buffer* view = nullptr;
    long long index = 0;
    const void* site = nullptr;
    uint64_t group = 0;
  };
  std::vector<WgmmaResult> wgmma_results;
  std::vector<WgmmaRead> wgmma_reads;
  uint64_t wgmma_committed = 0;
  // Ordering of global memory across blocks (fences and atomics): whether the thread stored to a
  // race-checked global buffer, whether a fence followed its last such store, and its last fence
  // (the barrier interval it fell in, and its place among the thread's fences and atomics).
  bool stored_global = false, unfenced = false;
  uint32_t fence_epoch = 0;
  uint64_t fence_event = 0, events = 0;
};

struct Warp {
  int lanes = 0;      // threads of the block in this warp
  int live = 0;       // not yet ended
  int arrived = 0;
  uint32_t epoch = 0;  // warp-synchronous operations completed
  const void* site = nullptr;
  int bytes = 0;
  bool orders = false;  // the operation is __syncwarp: it orders the lanes' accesses for other threads too
  bool reported = false;
  unsigned char exchange[2][kWarpLanes * kExchangeBytes] = {};
  WarpTrace trace;
};

thread_local Fiber* tls_current = nullptr;

// One OS thread of a launch: runs whole blocks, one at a time, as fibers.
struct Worker {
  Launch& L;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::deque<int> ready;
  std::mt19937_64 rng;
  int64_t block = 0;
  uint32_t gen = 0;
  uint32_t epoch = 0;
  int live = 0;
  int barrier_arrived = 0;
  int barrier_line = 0;
  bool checking = false;  // the race and initialisation checks cover the block running (Options::checked_blocks)
  std::vector<int> epoch_lines;  // the line of the barrier that began each barrier interval
  // Per barrier interval of the block, the accesses that interval's opening barrier ordered
  // (folded into Counters::barrier_orderings by line when the block ends).
  std::vector<uint64_t> epoch_orderings;
  bool barrier_reported = false;
  std::vector<unsigned char> smem_storage;
  unsigned char* smem = nullptr;
  std::vector<Cell> shared_cells;
  std::map<uint64_t, Mbarrier> mbarriers;
  uint32_t next_mbarrier_slot = 0;
  // Release and acquire (hazards.h Clocks): from the block's first mbarrier.init, every thread keeps
  // a vector clock and shared locations their accesses' clocks; the interval-only rules' findings of
  // intervals after `clocked_since` (the one clocking began in: its earlier accesses have no
  // clocks) are judged again by them.
  bool clocked = false;
  uint32_t clocked_since = 0;
  std::unordered_map<uint64_t, ClockedCell> clocked_cells;
  std::unordered_map<uintptr_t, Cell> global_cells;
  std::deque<ViewState> view_states;
  std::deque<ft_simt_buffer> views;
  // The launch's parameter descriptors as this worker's blocks see them (their `fast` is the
  // running block's), and the argument array of pointers to them the kernel takes.
  std::vector<ft_simt_buffer> descs;
  std::vector<void*> args;
  alignas(16) unsigned char scratch[64] = {};
  Counters counters;
  // The block's atomics that acquired other blocks' publications: by whom, when, and whose.
  struct Acquire {
    int thread = 0;
    uint32_t epoch = 0;
    uint64_t event = 0;
    std::map<int64_t, Launch::Publication> blocks;  // blocks that published through the location earlier in its order
  };
  std::vector<Acquire> acquires;

  // Whether thread f of this block may read what block `writer` stored: the writer published it
  // (simt_api atomic) through a location this block's atomic came to later, and f fenced after
  // that atomic (the atomic's thread) or after the barrier that followed it (the others). Else
  // `why` says which link is missing.
  bool published_to(const Fiber& f, const CrossBlock::Conflict& x, std::string* why) const {
    const int64_t writer = x.block;
    for (const Acquire& a : acquires) {
      const auto p = a.blocks.find(writer);
      if (p == a.blocks.end()) continue;
      if (x.writer_thread < 0 || (x.writer_epoch >= p->second.epoch && x.writer_thread != p->second.thread)) {
        *why = "block " + std::to_string(writer) + " published its stores by an atomic that its thread " +
               std::to_string(x.writer_thread) + "'s store did not precede by a barrier";
        return false;
      }
      if (f.thread == a.thread ? f.fence_event > a.event : f.fence_epoch > a.epoch) return true;
      *why = "block " + std::to_string(writer) + " published its stores through the atomic of thread " + std::to_string(a.thread) +
             " of this block, but thread " + std::to_string(f.thread) + " did not __threadfence() after " +
             (f.thread == a.thread ? "that atomic" : "the barrier that followed it");
      return false;
    }
    std::lock_guard<std::mutex> lock(L.atomics_mutex);
    const auto it = L.unpublished.find(writer);
    *why = it != L.unpublished.end() ? "block " + std::to_string(writer) + "'s atomic published nothing: " + it->second
                                     : "no atomic of this block came after one by which block " + std::to_string(writer) +
                                           " published its stores";
    return false;
  }
#ifdef FT_SIMT_ASAN
  void* fake_stack = nullptr;
  const void* stack_bottom = nullptr;
  size_t stack_size = 0;
#endif
#ifdef FT_SIMT_TSAN
  void* tsan_home = nullptr;  // the OS thread's own context, which fibers switch back to
  ~Worker() {
    for (Fiber& f : fibers) {
      if (f.tsan_fiber != nullptr) __tsan_destroy_fiber(f.tsan_fiber);
    }
  }
#endif

  explicit Worker(Launch& launch) : L(launch), rng(launch.options.schedule_seed) {
    const Shape& s = L.shape;
    smem_storage.resize(static_cast<size_t>(s.shared_bytes) + 32);
    smem = smem_storage.data() + (16 - reinterpret_cast<uintptr_t>(smem_storage.data()) % 16) % 16;
    if (L.options.checks) shared_cells.resize(static_cast<size_t>(s.shared_bytes + kShadowGranule - 1) / kShadowGranule);
    fibers.resize(static_cast<size_t>(s.threads));
    descs = L.descs;
    for (ft_simt_buffer& d : descs) args.push_back(&d);
    warps.resize(static_cast<size_t>((s.threads + kWarpLanes - 1) / kWarpLanes));
  }

  Stamp now() const { return {gen, epoch}; }
  // Whether the module addresses the running block's accesses itself (ft_simt_buffer::fast).
  int fast() const { return !checking && !L.options.counters ? 1 : 0; }
  // An access depended on another thread's in the interval before: the barrier between is needed.
  void ordered_by_barrier() { ++epoch_orderings[epoch]; }
  std::string who(int thread) const {
    return "thread " + std::to_string(thread) + " of block " + std::to_string(block);
  }

  void find(Check check, std::string what, std::string buffer, long long element, std::string threads, const void* site,
            const void* other_site = nullptr, std::string extra = "") {
    L.findings.add({check, std::move(what), std::move(buffer), element, std::move(threads), site, other_site, std::move(extra)});
  }

  // ---- switching ----------------------------------------------------------------------------
  void resume(Fiber& f) {
    f.state = Fiber::State::kRunning;
    tls_current = &f;
#ifdef FT_SIMT_TSAN
    tsan_home = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(f.tsan_fiber, 0);
#endif
#ifdef FT_SIMT_ASAN
    __sanitizer_start_switch_fiber(&fake_stack, f.stack_bottom, kStackBytes);
#endif
    f.self = std::move(f.self).resume();
#ifdef FT_SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
    tls_current = nullptr;
  }
  void yield(Fiber& f) {
#ifdef FT_SIMT_TSAN
    __tsan_switch_to_fiber(tsan_home, 0);
#endif
#ifdef FT_SIMT_ASAN
    __sanitizer_start_switch_fiber(&f.fake_stack, stack_bottom, stack_size);
#endif
    f.sink = std::move(f.sink).resume();
#ifdef FT_SIMT_ASAN
    __sanitizer_finish_switch_fiber(f.fake_stack, &stack_bottom, &stack_size);
#endif
    tls_current = &f;
  }

  void release(std::vector<int> threads) {
    if (L.options.schedule_seed != 0) std::shuffle(threads.begin(), threads.end(), rng);
    for (int t : threads) {
      fibers[static_cast<size_t>(t)].state = Fiber::State::kReady;
      ready.push_back(t);
    }
  }

  // ---- one block ----------------------------------------------------------------------------
  void run_block(int64_t b) {
    block = b;
    const std::vector<int64_t>& sample = L.options.checked_blocks;
    checking = L.options.checks && (sample.empty() || std::binary_search(sample.begin(), sample.end(), b));
    for (ft_simt_buffer& d : descs) d.fast = fast();
    for (ft_simt_buffer& v : views) v.fast = fast();  // views outlive blocks (api_shared_view finds them again)
    ++gen;
    epoch = 0;
    live = L.shape.threads;
    barrier_arrived = 0;
    barrier_reported = false;
    epoch_lines.assign(1, 0);
    epoch_orderings.assign(1, 0);
    global_cells.clear();
    acquires.clear();
    mbarriers.clear();
    next_mbarrier_slot = 0;
    clocked = false;
    clocked_cells.clear();
    for (size_t w = 0; w < warps.size(); ++w) {
      Warp& wp = warps[w];
      wp.lanes = wp.live = std::min(kWarpLanes, L.shape.threads - static_cast<int>(w) * kWarpLanes);
      wp.arrived = 0;
      wp.epoch = 0;
      wp.orders = false;
      wp.reported = false;
    }
    std::vector<int> all;
    for (int t = 0; t < L.shape.threads; ++t) {
      Fiber& f = fibers[static_cast<size_t>(t)];
      f.worker = this;
      f.thread = t;
      f.warp = t / kWarpLanes;
      f.lane = t % kWarpLanes;
      f.copies_open.clear();
      f.copy_groups.clear();
      f.wgmma_results.clear();
      f.wgmma_reads.clear();
      f.wgmma_committed = 0;
      f.seen.clear();
      f.clocks.clock.clear();
      f.wait_abandoned = false;
      f.stored_global = f.unfenced = false;
      f.fence_epoch = 0;
      f.fence_event = f.events = 0;
#ifdef FT_SIMT_TSAN
      if (f.tsan_fiber == nullptr) f.tsan_fiber = __tsan_create_fiber(0);
#endif
      f.self = ctx::fiber(std::allocator_arg, PooledStack{&f.stack_bottom}, [this, &f](ctx::fiber&& sink) {
        f.sink = std::move(sink);
#ifdef FT_SIMT_ASAN
        __sanitizer_finish_switch_fiber(nullptr, &stack_bottom, &stack_size);
#endif
        tls_current = &f;
        L.kernel.entry(args.data());
        end_thread(f);
#ifdef FT_SIMT_TSAN
        __tsan_switch_to_fiber(tsan_home, 0);
#endif
#ifdef FT_SIMT_ASAN
        __sanitizer_start_switch_fiber(nullptr, stack_bottom, stack_size);
#endif
        return std::move(f.sink);
      });
      all.push_back(t);
    }
    release(all);
    while (true) {
      while (!ready.empty()) {
        const int t = ready.front();
        ready.pop_front();
        resume(fibers[static_cast<size_t>(t)]);
      }
      if (live == 0) break;
      deadlock();
    }
    for (Fiber& f : fibers) end_wgmma_reads(f, UINT64_MAX);  // reads and copies their threads never waited for
    for (Fiber& f : fibers) land_copies(f, 0);
    land_unobserved_tensor_copies();
    for (Warp& w : warps) w.trace.flush(counters);
    for (size_t e = 0; e < epoch_orderings.size(); ++e) {
      if (epoch_orderings[e] > 0) counters.barrier_orderings[epoch_lines[e]] += epoch_orderings[e];
    }
    counters.blocks += 1;
    counters.threads += static_cast<uint64_t>(L.shape.threads);
  }

  void end_thread(Fiber& f) {
    size_t in_flight = f.copies_open.size();
    for (const auto& g : f.copy_groups) in_flight += g.size();
    if (in_flight > 0) {
      const void* site = f.copies_open.empty() ? nullptr : f.copies_open.front().site;
      for (const auto& g : f.copy_groups) site = site == nullptr && !g.empty() ? g.front().site : site;
      find(Check::kSync, "cp.async copies never waited for", "", -1, who(f.thread) + " ended", site, nullptr,
           std::to_string(in_flight) + " copies in flight");
      // They stay in flight for the other threads of the block, and land when it ends.
      f.copy_groups.push_back(std::move(f.copies_open));
      f.copies_open.clear();
    }
    if (!f.wgmma_results.empty()) {
      // The registers are gone with the thread's frame: the results never land.
      find(Check::kSync, "wgmma results never waited for", "", -1, who(f.thread) + " ended", nullptr, nullptr,
           std::to_string(f.wgmma_results.size()) + " accumulator sets in flight");
      f.wgmma_results.clear();
    }
    f.state = Fiber::State::kDone;
    --live;
    Warp& w = warps[static_cast<size_t>(f.warp)];
    --w.live;
    if (barrier_arrived > 0) {
      if (!barrier_reported) {
        barrier_reported = true;
        find(Check::kSync, "barrier not reached by every thread", "", -1, who(f.thread) + " ended", nullptr, nullptr,
             std::to_string(barrier_arrived) + " threads wait at the barrier at kernels.cu:" + std::to_string(barrier_line));
      }
      if (barrier_arrived == live) complete_barrier();
    }
    if (w.arrived > 0) {
      if (!w.reported) {
        w.reported = true;
        find(Check::kSync, "warp operation with lanes missing", "", -1, who(f.thread) + " ended", w.site, nullptr,
             std::to_string(w.arrived) + " lanes of warp " + std::to_string(f.warp) + " wait at it");
      }
      if (w.arrived == w.live) complete_warp(f.warp);
    }
  }

  // Lands the thread's oldest committed copy groups until at most `keep` are in flight.
  void land_copies(Fiber& f, size_t keep, int line = 0);
  // Tensor copies: the phase's copies land (as the asynchronous proxy's writes that phase orders,
  // hazards.h), where `f`'s wait observes it; an mbarrier's phase completes once every expected
  // thread arrived and every expected byte landed, and releases its waiters.
  void land_tensor_copies(Fiber& f, Mbarrier& m, uint32_t through_phase);
  void complete_phase_if_done(uint64_t offset, Mbarrier& m);
  // At the block's end: copies no wait observed land (their bytes, unchecked, their locations no
  // longer in flight), and are reported.
  void land_unobserved_tensor_copies();
  // Lands the copies of `m` no wait observed (as land_unobserved_tensor_copies); returns how many,
  // and the site of the first in *site.
  size_t drop_tensor_copies(Mbarrier& m, const void** site);
  // The thread's wgmma reads of groups up to `done` end: their locations may be written again.
  // Returns how many ended.
  size_t end_wgmma_reads(Fiber& f, uint64_t done);

  void complete_barrier() {
    ++epoch;
    barrier_arrived = 0;
    counters.barriers += 1;
    epoch_lines.push_back(barrier_line);
    epoch_orderings.push_back(0);
    counters.barrier_lines.insert(barrier_line);
    for (Warp& w : warps) w.trace.flush(counters);
    // What any thread observed of an mbarrier's phases, every thread has after the barrier.
    std::vector<uint32_t> seen(next_mbarrier_slot, 0);
    for (const Fiber& f : fibers) join_max(seen, f.seen);
    for (Fiber& f : fibers) f.seen = seen;
    std::vector<int> waiting;
    for (const Fiber& f : fibers) {
      if (f.state == Fiber::State::kBarrier) waiting.push_back(f.thread);
    }
    release(waiting);
  }

  void complete_warp(int warp) {
    Warp& w = warps[static_cast<size_t>(warp)];
    ++w.epoch;
    w.arrived = 0;
    counters.warp_operations += 1;
    w.trace.flush(counters);
    std::vector<int> waiting;
    for (int t = warp * kWarpLanes; t < warp * kWarpLanes + w.lanes; ++t) {
      if (fibers[static_cast<size_t>(t)].state == Fiber::State::kWarp) waiting.push_back(t);
    }
    if (clocked && w.orders) join_lanes(waiting);
    w.orders = false;
    release(waiting);
  }

  // __syncwarp of the lanes `waiting` and the running thread: each releases its clock and acquires
  // the others'. (Other warp operations order the warp's accesses within it, the interval rules'
  // wepoch, but release nothing to other threads: CUDA's memory model gives ordering to
  // __syncwarp alone.)
  void join_lanes(const std::vector<int>& waiting) {
    std::vector<Fiber*> lanes;  // the running thread took part unless it is ending (end_thread)
    if (tls_current != nullptr && tls_current->state == Fiber::State::kRunning) lanes.push_back(tls_current);
    for (const int t : waiting) lanes.push_back(&fibers[static_cast<size_t>(t)]);
    std::vector<uint32_t> all(fibers.size(), 0);
    for (const Fiber* f : lanes) join_max(all, f->clocks.clock);
    for (Fiber* f : lanes) {
      f->clocks.clock = all;
      ++f->clocks.clock[static_cast<size_t>(f->thread)];
    }
  }

  // From the block's first mbarrier.init on: every thread's vector clock (hazards.h Clocks).
  void start_clocks() {
    if (clocked) return;
    clocked = true;
    clocked_since = epoch;
    for (Fiber& f : fibers) f.clocks.start(fibers.size(), f.thread);
  }

  // No thread can run but some have not ended: say who waits where, then let them all go.
  void deadlock() {
    std::map<std::string, std::vector<int>> where;
    for (const Fiber& f : fibers) {
      if (f.state == Fiber::State::kBarrier) where["the barrier at kernels.cu:" + std::to_string(f.wait_line)].push_back(f.thread);
      if (f.state == Fiber::State::kWarp) where["a warp operation"].push_back(f.thread);
      if (f.state == Fiber::State::kMbarrier) {
        where["the mbarrier at shared byte " + std::to_string(f.wait_mbarrier) + " (parity " + std::to_string(f.wait_parity) +
              ") at kernels.cu:" + std::to_string(f.wait_line)]
            .push_back(f.thread);
      }
    }
    std::ostringstream text;
    const void* site = nullptr;
    for (const auto& [place, threads] : where) {
      text << (text.tellp() > 0 ? "; " : "") << threads.size() << " threads (" << threads.front() << ".."
           << threads.back() << ") wait at " << place;
    }
    for (const Fiber& f : fibers) {
      if (f.state == Fiber::State::kWarp && site == nullptr) site = f.wait_site;
    }
    find(Check::kSync, "deadlock", "", -1, "block " + std::to_string(block), site, nullptr, text.str());
    if (barrier_arrived > 0) complete_barrier();
    for (size_t w = 0; w < warps.size(); ++w) {
      if (warps[w].arrived > 0) complete_warp(static_cast<int>(w));
    }
    std::vector<int> waiting;
    for (Fiber& f : fibers) {
      if (f.state != Fiber::State::kMbarrier) continue;
      f.wait_abandoned = true;
      waiting.push_back(f.thread);
    }
    release(waiting);
  }

  void run() {
    ft_simt_ops[0] = ft_simt_ops[1] = 0;
    const std::vector<int64_t>& only = L.options.blocks;
    const auto count = only.empty() ? L.shape.grid : static_cast<int64_t>(only.size());
    for (int64_t i = L.next_block++; i < count; i = L.next_block++) run_block(only.empty() ? i : only[static_cast<size_t>(i)]);
    if (L.options.counters) {
      counters.flops += ft_simt_ops[0];
      counters.special_ops += ft_simt_ops[1];
    }
    std::lock_guard<std::mutex> lock(L.counters_mutex);
    L.counters += counters;
  }
};

// ---- the table the module calls ---------------------------------------------------------------

Fiber& current() {
  Fiber* f = tls_current;
  if (f == nullptr) {
    std::fprintf(stderr, "fusetune simt: a kernel called the executor outside a launch\n");
    std::abort();
  }
  return *f;
}

std::string buffer_label(const ft_simt_buffer* b) {
  if (b->shared) return "shared '" + static_cast<const ViewState*>(b->state)->name + "'";
  return "global '" + static_cast<const ParamState*>(b->state)->param->name + "'";
}

const char* access_name(bool store) { return store ? "store" : "load"; }

void check_global(Worker& w, Fiber& f, const ft_simt_buffer* b, long long index, int size, bool store, const void* site,
                  const void* value) {
  const auto* p = static_cast<const ParamState*>(b->state);
  if (!p->tracked) return;
  const Access a{f.thread, w.warps[static_cast<size_t>(f.warp)].epoch, site};
  const int eb = b->element_bytes;
  for (long long e = index; e < index + std::max(1, size / eb); ++e) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(b->base) + static_cast<uintptr_t>(e * eb);
    Access other;
    bool ordered = false;
    Cell& c = w.global_cells[addr];
    const Hazard h = store ? c.store(w.now(), a, &other, &ordered) : c.load(w.now(), a, false, &other, &ordered);
    if (ordered) w.ordered_by_barrier();
    if (h != Hazard::kNone) {
      w.find(Check::kRace, hazard_name(h), buffer_label(b), e,
             "thread " + std::to_string(f.thread) + " and thread " + std::to_string(other.thread) + " of block " +
                 std::to_string(w.block),
             site, other.site);
    }
    if (p->cross != nullptr) {
      const size_t at = static_cast<size_t>(p->cross_offset + e);
      const auto block = static_cast<uint32_t>(w.block);
      const CrossBlock::Conflict x =
          store ? p->cross->store(at, block, static_cast<const unsigned char*>(value) + (e - index) * eb, eb, f.thread, w.epoch)
                : p->cross->load(at, block);
      if (x.block < 0) continue;
      if (x.same_value) {
        w.counters.redundant_stores += 1;  // the same bytes again: a recomputed exported value
        continue;
      }
      std::string why;
      if (!store && x.with_writer && x.block != CrossBlock::kMany && w.published_to(f, x, &why)) continue;
      const std::string them = x.block == CrossBlock::kMany ? "several other blocks" : "block " + std::to_string(x.block);
      w.find(Check::kRace,
             std::string(store ? (x.with_writer ? "write-after-write" : "write-after-read") : "read-after-write") +
                 " hazard between blocks",
             buffer_label(b), e, w.who(f.thread) + " and " + them, site, nullptr, why);
    }
  }
  if (store && p->tracked) {
    f.stored_global = f.unfenced = true;
  }
}

// What an access does to shared memory's cells.
enum class SharedOp { kLoad, kStore, kIssueAsync, kLandAsync, kIssueAsyncRead, kIssueTensor, kLandTensor };

// Access `f` makes at `site`, as the checks see it.
Access access_of(const Worker& w, const Fiber& f, const void* site) {
  return {f.thread, w.warps[static_cast<size_t>(f.warp)].epoch, site, f.seen.data(), static_cast<uint32_t>(f.seen.size()),
          w.clocked ? &f.clocks : nullptr};
}

// Judges again by release and acquire (hazards.h Clocks) what the interval-only rules found on
// shared granule g, and records the access's clock; returns the verdict.
Hazard clocked_verdict(Worker& w, const Access& a, uint64_t g, SharedOp op, Hazard h) {
  if (a.clocks == nullptr) return h;
  ClockedCell& c = w.clocked_cells[g];
  if (h != Hazard::kNone && w.epoch > w.clocked_since && c.orders(w.epoch, h, a.thread, *a.clocks)) h = Hazard::kNone;
  const bool store = op != SharedOp::kLoad && op != SharedOp::kIssueAsyncRead;
  const bool tensor = op == SharedOp::kIssueTensor || op == SharedOp::kLandTensor;
  c.record(w.epoch, store, a.thread, a.clocks->clock[static_cast<size_t>(a.thread)], tensor);
  return h;
}

// The checks of `size` bytes at element `index` of shared view b, accessed by `a` (kLandTensor:
// the tensor copy that mbarrier phase `token` completed, on behalf of its issuing thread).
void check_shared_as(Worker& w, const Access& a, const ft_simt_buffer* b, long long index, int size, SharedOp op,
                     uint32_t token = 0) {
  const uintptr_t offset = static_cast<uintptr_t>(b->base - w.smem) + static_cast<uintptr_t>(index * b->element_bytes);
  bool reported = false;  // one finding per access; every granule is still recorded
  for (uintptr_t g = offset / kShadowGranule; g < (offset + static_cast<uintptr_t>(size)) / kShadowGranule; ++g) {
    if (g >= w.shared_cells.size()) break;
    Access other;
    bool ordered = false;
    Cell& c = w.shared_cells[g];
    Hazard h = Hazard::kNone;
    switch (op) {
      case SharedOp::kLoad: h = c.load(w.now(), a, true, &other, &ordered); break;
      case SharedOp::kStore: h = c.store(w.now(), a, &other, &ordered); break;
      case SharedOp::kIssueAsync: h = c.issue_async(w.now(), a, &other, &ordered); break;
      case SharedOp::kLandAsync: h = c.land_async(w.now(), a, &other, &ordered); break;
      case SharedOp::kIssueAsyncRead: h = c.issue_async_read(w.now(), a, &other, &ordered); break;
      case SharedOp::kIssueTensor: h = c.issue_async(w.now(), a, &other, &ordered, true); break;
      case SharedOp::kLandTensor: h = c.land_async(w.now(), a, &other, &ordered, token); break;
    }
    h = clocked_verdict(w, a, g, op, h);
    if (ordered) w.ordered_by_barrier();
    if (h == Hazard::kNone || reported) continue;
    reported = true;
    const long long element = static_cast<long long>(g * kShadowGranule - (static_cast<uintptr_t>(b->base - w.smem))) /
                              b->element_bytes;
    if (h == Hazard::kUninitialized) {
      w.find(Check::kInit, hazard_name(h), buffer_label(b), element, w.who(a.thread), a.site);
    } else {
      w.find(Check::kRace, hazard_name(h), buffer_label(b), element,
             "thread " + std::to_string(a.thread) + " and thread " + std::to_string(other.thread) + " of block " +
                 std::to_string(w.block),
             a.site, other.site);
    }
  }
}

void check_shared(Worker& w, Fiber& f, const ft_simt_buffer* b, long long index, int size, SharedOp op, const void* site) {
  check_shared_as(w, access_of(w, f, site), b, index, size, op);
}

// Memcheck of an access of `size` bytes at element `index` of b, its address aligned to `align`:
// the host address, or nullptr once reported.
// The report of an access checked_address refuses (kept out of its inlined path).
[[gnu::noinline, gnu::cold]] void report_address(Worker& w, Fiber& f, const ft_simt_buffer* b, long long index, int size,
                                                 bool outside, const char* what, const void* site) {
  if (outside) {
    w.find(Check::kMemory, std::string("out-of-bounds ") + what + " of " + std::to_string(size) + " bytes", buffer_label(b),
           index, w.who(f.thread), site, nullptr, "the buffer has " + std::to_string(b->bytes / b->element_bytes) + " elements");
  } else {
    w.find(Check::kMemory, std::string("misaligned ") + what + " of " + std::to_string(size) + " bytes", buffer_label(b), index,
           w.who(f.thread), site);
  }
}

inline unsigned char* checked_address(Worker& w, Fiber& f, const ft_simt_buffer* b, long long index, int size, int align,
                                      const char* what, const void* site) {
  int outside = 0;
  unsigned char* addr = ft_simt_checked(b, index, size, align, &outside);
  if (addr == nullptr) [[unlikely]] report_address(w, f, b, index, size, outside != 0, what, site);
  return addr;
}

// The counters of one access of the warp's instruction at `site`.
void count_access(Worker& w, Fiber& f, const ft_simt_buffer* b, const unsigned char* addr, int size, bool store,
                  const void* site) {
  if (!w.L.options.counters) return;
  WarpTrace& t = w.warps[static_cast<size_t>(f.warp)].trace;
  if (b->shared) {
    t.shared(site, f.lane, static_cast<uintptr_t>(addr - w.smem), size, store);
  } else {
    t.global(site, f.lane, reinterpret_cast<uintptr_t>(addr), size, store);
    w.L.unique.mark(reinterpret_cast<uintptr_t>(addr), size, store);
  }
}

void* api_access(const ft_simt_buffer* b, long long index, int size, int kind, const void* value) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  const bool store = kind == FT_SIMT_STORE;
  unsigned char* addr = checked_address(w, f, b, index, size, size, access_name(store), site);
  if (addr == nullptr) {
    std::memset(w.scratch, 0, sizeof w.scratch);
    return w.scratch;
  }
  if (w.checking) {
    if (b->shared) {
      check_shared(w, f, b, index, size, store ? SharedOp::kStore : SharedOp::kLoad, site);
    } else {
      check_global(w, f, b, index, size, store, site, value);
    }
  }
  count_access(w, f, b, addr, size, store, site);
  return addr;
}

void api_copy_async(const ft_simt_buffer* dst, long long dst_index, const ft_simt_buffer* src, long long src_index,
                    int src_bytes, int copy_bytes) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  if (!dst->shared || src->shared || (copy_bytes != 16 && copy_bytes != 4) || src_bytes < 0 || src_bytes > copy_bytes) {
    w.find(Check::kMemory,
           "cp.async." + std::to_string(copy_bytes) + " from " + buffer_label(src) + " reading " + std::to_string(src_bytes) + " bytes",
           buffer_label(dst), dst_index, w.who(f.thread), site, nullptr,
           "needs a global source, a shared destination and 0 to 16 of 16 bytes or 0 to 4 of 4");
    return;
  }
  AsyncCopy c;
  c.dst = dst;
  c.index = dst_index;
  c.size = copy_bytes;
  c.site = site;
  if (src_bytes > 0) {  // the source is read now
    const unsigned char* from = checked_address(w, f, src, src_index, src_bytes, copy_bytes, "cp.async load", site);
    if (from != nullptr) {
      if (w.checking) check_global(w, f, src, src_index, src_bytes, false, site, nullptr);
      // The counters group accesses by site: the copy's global read and its shared write are two
      // accesses of one instruction, kept apart under a second key (the next byte, on the same line).
      count_access(w, f, src, from, src_bytes, false, static_cast<const char*>(site) + 1);
      std::memcpy(c.bytes, from, static_cast<size_t>(src_bytes));
    }
  }
  unsigned char* to = checked_address(w, f, dst, dst_index, copy_bytes, copy_bytes, "cp.async store", site);
  if (to == nullptr) return;
  if (w.checking) check_shared(w, f, dst, dst_index, copy_bytes, SharedOp::kIssueAsync, site);
  count_access(w, f, dst, to, copy_bytes, true, site);
  f.copies_open.push_back(c);
}

void api_copy_async_commit() {
  Fiber& f = current();
  f.copy_groups.push_back(std::move(f.copies_open));
  f.copies_open.clear();
}

void api_copy_async_wait(int groups, int line) {
  Fiber& f = current();
  if (f.worker->L.options.skip_waits.count(line) != 0) return;
  f.worker->land_copies(f, static_cast<size_t>(std::max(0, groups)), line);
}

void api_barrier(int line) {
  Fiber& f = current();
  Worker& w = *f.worker;
  if (w.L.options.skip_barriers.count(line) != 0) return;
  if (w.barrier_arrived == 0) {
    w.barrier_line = line;
  } else if (line != w.barrier_line && !w.barrier_reported) {
    w.barrier_reported = true;
    w.find(Check::kSync, "threads wait at different barriers", "", -1, w.who(f.thread), nullptr, nullptr,
           "at kernels.cu:" + std::to_string(line) + " while others wait at kernels.cu:" + std::to_string(w.barrier_line));
  }
  f.wait_line = line;
  if (++w.barrier_arrived == w.live) {  // the last to arrive goes on at once and lets the others go
    w.complete_barrier();
    return;
  }
  f.state = Fiber::State::kBarrier;
  w.yield(f);
}

const void* api_warp_exchange(const void* mine, int bytes, unsigned mask) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  Warp& wp = w.warps[static_cast<size_t>(f.warp)];
  if (bytes < 0 || bytes > kExchangeBytes) {
    std::fprintf(stderr, "fusetune simt: a warp exchange of %d bytes\n", bytes);
    std::abort();
  }
  if ((mask != 0xffffffffu || wp.lanes != kWarpLanes) && !wp.reported) {
    wp.reported = true;
    w.find(Check::kSync, "warp operation with lanes missing", "", -1, w.who(f.thread), site, nullptr,
           "mask " + std::to_string(mask) + ", " + std::to_string(wp.lanes) + " threads in warp " + std::to_string(f.warp));
  }
  if (wp.arrived == 0) {
    wp.site = site;
    wp.bytes = bytes;
    wp.orders = bytes == 0;
  } else if ((site != wp.site || bytes != wp.bytes) && !wp.reported) {
    wp.reported = true;
    w.find(Check::kSync, "lanes of a warp at different warp operations", "", -1, w.who(f.thread), site, wp.site);
  }
  unsigned char* slots = wp.exchange[wp.epoch & 1];
  if (bytes > 0) std::memcpy(slots + f.lane * bytes, mine, static_cast<size_t>(bytes));
  f.wait_site = site;
  if (++wp.arrived == wp.live) {
    w.complete_warp(f.warp);
  } else {
    f.state = Fiber::State::kWarp;
    w.yield(f);
  }
  return slots;
}

const ft_simt_buffer* api_shared_view(long long offset, long long bytes, int element_bytes, const char* name) {
  Fiber& f = current();
  Worker& w = *f.worker;
  for (const ft_simt_buffer& v : w.views) {
    const auto* s = static_cast<const ViewState*>(v.state);
    if (s->offset == offset && v.bytes == bytes && s->name == name) return &v;
  }
  long long usable = bytes;
  if (offset < 0 || offset + bytes > w.L.shape.shared_bytes) {
    w.find(Check::kMemory, "shared view outside the block's shared memory", std::string("shared '") + name + "'", -1,
           w.who(f.thread), nullptr, nullptr,
           "[" + std::to_string(offset) + ", " + std::to_string(offset + bytes) + ") of " +
               std::to_string(w.L.shape.shared_bytes) + " bytes");
    offset = 0;
    usable = 0;
  }
  w.view_states.push_back({name, offset});
  w.views.push_back({w.smem + offset, usable, element_bytes, 1, w.fast(), &w.view_states.back()});
  return &w.views.back();
}

size_t Worker::end_wgmma_reads(Fiber& f, uint64_t done) {
  auto kept = f.wgmma_reads.begin();
  const Access a = access_of(*this, f, nullptr);
  for (const Fiber::WgmmaRead& r : f.wgmma_reads) {
    if (r.group > done) {
      *kept++ = r;
      continue;
    }
    const uintptr_t offset = static_cast<uintptr_t>(r.view->base - smem) + static_cast<uintptr_t>(r.index * r.view->element_bytes);
    for (uintptr_t g = offset / kShadowGranule; g < (offset + 16) / kShadowGranule && g < shared_cells.size(); ++g) {
      shared_cells[g].complete_async_read(now(), {a.thread, a.wepoch, r.site});
      if (clocked) clocked_cells[g].record(epoch, false, f.thread, f.clocks.clock[static_cast<size_t>(f.thread)], false);
    }
  }
  const size_t ended = static_cast<size_t>(f.wgmma_reads.end() - kept);
  f.wgmma_reads.erase(kept, f.wgmma_reads.end());
  return ended;
}

void Worker::land_copies(Fiber& f, size_t keep, int line) {
  while (f.copy_groups.size() > keep) {
    if (line > 0 && !f.copy_groups.front().empty()) counters.wait_landings[line] += f.copy_groups.front().size();
    for (const AsyncCopy& c : f.copy_groups.front()) {
      if (checking) check_shared(*this, f, c.dst, c.index, c.size, SharedOp::kLandAsync, c.site);
      std::memcpy(c.dst->base + c.index * c.dst->element_bytes, c.bytes, static_cast<size_t>(c.size));
    }
    f.copy_groups.pop_front();
  }
}

float* api_wgmma_issue(float* d, int count) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  const uint64_t open = f.wgmma_committed + 1;
  for (Fiber::WgmmaResult& r : f.wgmma_results) {
    if (r.registers == d && r.count == count) {
      r.group = open;
      return r.values.data();
    }
    if (d < r.registers + r.count && r.registers < d + count) {
      // Accumulators that overlap another wgmma's in flight in another way: the GPU's result is
      // undefined; the emulation goes on with the registers as they are.
      w.find(Check::kSync, "wgmma accumulators overlap another wgmma's in flight", "", -1, w.who(f.thread), site, nullptr,
             std::to_string(count) + " registers against " + std::to_string(r.count));
      f.wgmma_results.push_back({d, count, std::vector<float>(d, d + count), open});
      return f.wgmma_results.back().values.data();
    }
  }
  f.wgmma_results.push_back({d, count, std::vector<float>(d, d + count), open});
  std::fill(d, d + count, std::numeric_limits<float>::quiet_NaN());
  return f.wgmma_results.back().values.data();
}

const void* api_wgmma_read(const ft_simt_buffer* b, long long index, int counted) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  constexpr int kBytes = 16;
  if (!b->shared) {
    w.find(Check::kMemory, "wgmma operand in " + buffer_label(b), buffer_label(b), index, w.who(f.thread), site, nullptr,
           "needs shared memory");
    return w.scratch;
  }
  unsigned char* addr = checked_address(w, f, b, index, kBytes, kBytes, "wgmma read", site);
  if (addr == nullptr) return w.scratch;
  if (w.checking) {
    check_shared(w, f, b, index, kBytes, SharedOp::kIssueAsyncRead, site);
    f.wgmma_reads.push_back({b, index, site, f.wgmma_committed + 1});
  }
  if (counted != 0) count_access(w, f, b, addr, kBytes, false, site);
  return addr;
}

void api_wgmma_commit() { ++current().wgmma_committed; }

void api_wgmma_wait(int groups, int line) {
  Fiber& f = current();
  Worker& w = *f.worker;
  if (w.L.options.skip_waits.count(line) != 0) return;
  const uint64_t done = f.wgmma_committed - std::min<uint64_t>(f.wgmma_committed, static_cast<uint64_t>(std::max(0, groups)));
  size_t landed = 0;
  for (auto it = f.wgmma_results.begin(); it != f.wgmma_results.end();) {
    if (it->group > done) {
      ++it;
      continue;
    }
    std::copy(it->values.begin(), it->values.end(), it->registers);
    it = f.wgmma_results.erase(it);
    ++landed;
  }
  landed += w.end_wgmma_reads(f, done);
  if (line > 0 && landed > 0) w.counters.wait_landings[line] += landed;
}

// ---- mbarriers and tensor copies (TMA) -------------------------------------------------------

void Worker::land_tensor_copies(Fiber& f, Mbarrier& m, uint32_t through_phase) {
  for (auto it = m.unobserved.begin(); it != m.unobserved.end() && it->first <= through_phase;) {
    const uint32_t token = phase_token(m.slot, m.base + it->first);
    for (const TensorCopy& c : it->second) {
      const Fiber& issuer = fibers[static_cast<size_t>(c.thread)];
      Access a = access_of(*this, issuer, c.site);
      if (clocked) a.clocks = &c.clocks;  // the issuer's as it issued the copy
      const uint64_t view = static_cast<uint64_t>(c.dst->base - smem);
      for (size_t chunk = 0; chunk < c.bytes.size(); chunk += 16) {
        const uint64_t at = swizzled(c.offset + chunk, c.swizzle);
        if (checking) check_shared_as(*this, a, c.dst, static_cast<long long>((at - view) / static_cast<uint64_t>(c.dst->element_bytes)), 16,
                                      SharedOp::kLandTensor, token);
        std::memcpy(smem + at, c.bytes.data() + chunk, 16);
      }
    }
    if (f.wait_line > 0) counters.wait_landings[f.wait_line] += it->second.size();
    it = m.unobserved.erase(it);
  }
}

void Worker::complete_phase_if_done(uint64_t offset, Mbarrier& m) {
  if (m.pending != 0 || m.tx != 0) return;
  m.completed = m.released;
  m.completed_seen = m.released_seen;
  m.unobserved[m.phase] = std::move(m.open);
  m.open.clear();
  ++m.phase;
  m.pending = m.expected;
  std::vector<int> waiting;
  for (const Fiber& f : fibers) {
    if (f.state == Fiber::State::kMbarrier && f.wait_mbarrier == offset) waiting.push_back(f.thread);
  }
  release(waiting);
}

size_t Worker::drop_tensor_copies(Mbarrier& m, const void** site) {
  size_t left = 0;
  m.unobserved[m.phase] = std::move(m.open);
  m.open.clear();
  for (const auto& [phase, copies] : m.unobserved) {
    for (const TensorCopy& c : copies) {
      ++left;
      *site = *site == nullptr ? c.site : *site;
      for (size_t chunk = 0; chunk < c.bytes.size(); chunk += 16) {
        const uint64_t at = swizzled(c.offset + chunk, c.swizzle);
        std::memcpy(smem + at, c.bytes.data() + chunk, 16);
        for (uint64_t g = at / kShadowGranule; checking && g < (at + 16) / kShadowGranule && g < shared_cells.size(); ++g) {
          shared_cells[g].a_thread = -1;  // no longer in flight (for the next block on these cells too)
          shared_cells[g].a_tensor = false;
        }
      }
    }
  }
  m.unobserved.clear();
  return left;
}

void Worker::land_unobserved_tensor_copies() {
  size_t left = 0;
  const void* site = nullptr;
  for (auto& [offset, m] : mbarriers) left += drop_tensor_copies(m, &site);
  if (left > 0) {
    find(Check::kSync, "tensor copies never waited for", "", -1, "block " + std::to_string(block), site, nullptr,
         std::to_string(left) + " copies no mbarrier wait observed");
  }
}


// The mbarrier at element `index` of shared view b for `what` (reported, and nullptr, where it is
// not one: outside shared memory, misaligned, never initialised; or used by another thread in the
// barrier interval of its init, which nothing orders after the init); *offset gets its shared offset.
Mbarrier* mbarrier_at(Worker& w, Fiber& f, const ft_simt_buffer* b, long long index, const char* what, const void* site,
                      uint64_t* offset) {
  if (!b->shared) {
    w.find(Check::kMemory, std::string(what) + " on " + buffer_label(b), buffer_label(b), index, w.who(f.thread), site, nullptr,
           "an mbarrier lives in shared memory");
    return nullptr;
  }
  const unsigned char* addr = checked_address(w, f, b, index, 8, 8, what, site);
  if (addr == nullptr) return nullptr;
  *offset = static_cast<uint64_t>(addr - w.smem);
  const auto it = w.mbarriers.find(*offset);
  if (it == w.mbarriers.end()) {
    w.find(Check::kSync, std::string(what) + " of an mbarrier never initialised", buffer_label(b), index, w.who(f.thread), site);
    return nullptr;
  }
  Mbarrier& m = it->second;
  if (w.checking && f.thread != m.init_thread && w.epoch == m.init_epoch && !m.reported) {
    m.reported = true;
    w.find(Check::kRace, std::string(what) + " of an mbarrier in the barrier interval of its mbarrier.init", buffer_label(b), index,
           "thread " + std::to_string(f.thread) + " and thread " + std::to_string(m.init_thread) + " of block " + std::to_string(w.block),
           site, nullptr, "a barrier after the init orders it before other threads' use");
  }
  return &m;
}


void api_mbarrier_init(const ft_simt_buffer* b, long long index, unsigned count) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  if (!b->shared) {
    w.find(Check::kMemory, "mbarrier.init on " + buffer_label(b), buffer_label(b), index, w.who(f.thread), site, nullptr,
           "an mbarrier lives in shared memory");
    return;
  }
  const unsigned char* addr = checked_address(w, f, b, index, 8, 8, "mbarrier.init", site);
  if (addr == nullptr) return;
  if (count == 0 || count >= (1u << 20)) {
    w.find(Check::kSync, "mbarrier.init with " + std::to_string(count) + " expected arrivals", buffer_label(b), index,
           w.who(f.thread), site, nullptr, "1 to 2^20 - 1");
    return;
  }
  const uint64_t offset = static_cast<uint64_t>(addr - w.smem);
  w.start_clocks();
  const auto it = w.mbarriers.find(offset);
  uint32_t slot = 0, base = 0;
  if (it != w.mbarriers.end()) {  // again: the same slot, its tokens counting on
    const void* first = nullptr;
    if (const size_t dropped = w.drop_tensor_copies(it->second, &first); dropped > 0) {
      w.find(Check::kSync, "mbarrier.init of an mbarrier whose tensor copies no wait observed", buffer_label(b), index, w.who(f.thread),
             site, first, std::to_string(dropped) + " copies dropped");
    }
    slot = it->second.slot;
    base = it->second.base + it->second.phase + 1;
  } else if (w.next_mbarrier_slot >= 254) {
    w.find(Check::kSync, "more mbarriers in one block than the executor tracks", buffer_label(b), index, w.who(f.thread), site, nullptr,
           "254 at most");
    return;
  } else {
    slot = w.next_mbarrier_slot++;
  }
  Mbarrier& m = w.mbarriers[offset];
  m = Mbarrier{};
  m.slot = slot;
  m.base = base;
  m.expected = m.pending = count;
  m.init_thread = f.thread;
  m.init_epoch = w.epoch;
}

void api_mbarrier_arrive(const ft_simt_buffer* b, long long index, unsigned tx_bytes) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  uint64_t offset = 0;
  Mbarrier* m = mbarrier_at(w, f, b, index, "mbarrier.arrive", site, &offset);
  if (m == nullptr) return;
  if (m->pending == 0) {
    w.find(Check::kSync, "mbarrier.arrive beyond the expected arrivals of the phase", buffer_label(b), index, w.who(f.thread), site,
           nullptr, std::to_string(m->expected) + " expected, " + std::to_string(m->tx) + " transaction bytes still pending");
    return;
  }
  m->tx += tx_bytes;
  --m->pending;
  // The arrival releases the thread's clock: what it did before is ordered before what a thread
  // observing the phase does after.
  join_max(m->released, f.clocks.clock);
  join_max(m->released_seen, f.seen);
  ++f.clocks.clock[static_cast<size_t>(f.thread)];  // clocked: the mbarrier's init started the clocks
  w.complete_phase_if_done(offset, *m);
}

void api_mbarrier_wait(const ft_simt_buffer* b, long long index, unsigned parity, int line) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  if (w.L.options.skip_waits.count(line) != 0) return;
  uint64_t offset = 0;
  Mbarrier* m = mbarrier_at(w, f, b, index, "mbarrier.try_wait", site, &offset);
  if (m == nullptr) return;
  // The phase of parity `parity` has completed when the current one's parity differs.
  while ((m->phase & 1u) == (parity & 1u)) {
    f.state = Fiber::State::kMbarrier;
    f.wait_mbarrier = offset;
    f.wait_parity = parity;
    f.wait_line = line;
    w.yield(f);
    if (f.wait_abandoned) {
      f.wait_abandoned = false;
      return;
    }
  }
  if (f.seen.size() <= m->slot) f.seen.resize(m->slot + 1, 0);
  f.seen[m->slot] = std::max(f.seen[m->slot], m->base + m->phase);
  join_max(f.seen, m->completed_seen);
  f.clocks.join(m->completed);
  f.wait_line = line;
  if (m->phase > 0) w.land_tensor_copies(f, *m, m->phase - 1);
  if (m->phase > 0 && line > 0) w.counters.wait_landings[line] += 1;  // a phase observed: what its arrivals released
}

void api_tensor_load(const ft_simt_buffer* dst, long long dst_index, const ft_simt_buffer* map_buffer, const int* coords,
                     const ft_simt_buffer* bar, long long bar_index) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  const auto* p = map_buffer->shared ? nullptr : static_cast<const ParamState*>(map_buffer->state);
  if (p == nullptr || p->param->tensor_map.source < 0) {
    w.find(Check::kMemory, "tensor copy through " + buffer_label(map_buffer) + ", which is no tensor map", buffer_label(map_buffer), 0,
           w.who(f.thread), site);
    return;
  }
  const auto& map = *reinterpret_cast<const ft_simt_tensor_map*>(map_buffer->base);
  const ft_simt_buffer& src = w.descs[static_cast<size_t>(map.source)];
  const int64_t bytes = box_bytes(map);
  if (!dst->shared) {
    w.find(Check::kMemory, "tensor copy into " + buffer_label(dst), buffer_label(dst), dst_index, w.who(f.thread), site, nullptr,
           "needs a shared destination");
    return;
  }
  const unsigned char* to = checked_address(w, f, dst, dst_index, static_cast<int>(bytes), 1, "tensor copy store", site);
  if (to == nullptr) return;
  const uint64_t offset = static_cast<uint64_t>(to - w.smem);
  if (offset % 128 != 0) {
    w.find(Check::kMemory, "misaligned tensor copy store of " + std::to_string(bytes) + " bytes", buffer_label(dst), dst_index,
           w.who(f.thread), site, nullptr, "shared byte " + std::to_string(offset) + " (128-byte aligned)");
    return;
  }
  uint64_t bar_offset = 0;
  Mbarrier* m = mbarrier_at(w, f, bar, bar_index, "cp.async.bulk.tensor", site, &bar_offset);
  if (m == nullptr) return;
  const int eb = src.element_bytes;
  TensorCopy c;
  c.dst = dst;
  c.offset = offset;
  c.swizzle = map.swizzle;
  c.thread = f.thread;
  c.site = site;
  c.clocks = f.clocks;
  c.bytes = gather_box(
      map, coords, src.base, src.bytes,
      [&](const SourceRun& r) {
        if (w.checking) check_global(w, f, &src, r.offset / eb, static_cast<int>(r.bytes), false, site, nullptr);
        if (w.L.options.counters) w.L.unique.mark(reinterpret_cast<uintptr_t>(src.base + r.offset), static_cast<int>(r.bytes), false);
      },
      [&](const SourceRun& r) {
        w.find(Check::kMemory, "out-of-bounds tensor copy load of " + std::to_string(r.bytes) + " bytes", buffer_label(&src), r.offset / eb,
               w.who(f.thread), site, nullptr, "the tensor map's extents exceed the buffer's " + std::to_string(src.bytes) + " bytes");
      });
  if (w.checking) {
    const Access a = access_of(w, f, site);
    const uint64_t view = static_cast<uint64_t>(dst->base - w.smem);
    for (int64_t chunk = 0; chunk < bytes; chunk += 16) {
      const uint64_t at = swizzled(offset + static_cast<uint64_t>(chunk), map.swizzle);
      check_shared_as(w, a, dst, static_cast<long long>((at - view) / static_cast<uint64_t>(dst->element_bytes)), 16, SharedOp::kIssueTensor);
    }
  }
  m->open.push_back(std::move(c));
  m->tx -= bytes;
  w.complete_phase_if_done(bar_offset, *m);
}

// atomicAdd (op 0) or atomicExch (op 1) on a 32-bit element of a global buffer. With the checks, the
// atomic publishes the block's global stores when every thread that stored fenced after its last
// store, in an earlier barrier interval (the atomic's own thread: before it); and it acquires what
// the blocks that published through the location earlier did.
unsigned api_atomic(const ft_simt_buffer* b, long long index, int op, unsigned value) {
  const void* site = __builtin_return_address(0);
  Fiber& f = current();
  Worker& w = *f.worker;
  unsigned char* addr = b->shared ? nullptr : checked_address(w, f, b, index, 4, 4, "atomic", site);
  if (b->shared) w.find(Check::kMemory, "atomic on shared memory", buffer_label(b), index, w.who(f.thread), site);
  if (addr == nullptr) return 0;
  const uint64_t event = ++f.events;
  std::string unpublished;
  bool others = false;  // other threads' stores are published: the barrier since their fences orders them
  if (w.checking) {
    for (const Fiber& u : w.fibers) {
      if (!u.stored_global) continue;
      others = others || &u != &f;
      if (u.unfenced) {
        unpublished = "thread " + std::to_string(u.thread) + " stored to global memory after its last __threadfence() (or had none)";
      } else if (&u != &f && u.fence_epoch >= w.epoch) {
        unpublished = "no barrier between thread " + std::to_string(u.thread) + "'s __threadfence() and thread " +
                      std::to_string(f.thread) + "'s atomic";
      }
      if (!unpublished.empty()) break;
    }
  }
  unsigned old = 0;
  std::lock_guard<std::mutex> lock(w.L.atomics_mutex);
  std::memcpy(&old, addr, 4);
  const unsigned now = op == 0 ? old + value : value;
  std::memcpy(addr, &now, 4);
  if (w.checking) {
    Launch::Location& loc = w.L.locations[reinterpret_cast<uintptr_t>(addr)];
    Worker::Acquire a{f.thread, w.epoch, event, {}};
    for (const auto& [blk, publication] : loc.releases) {
      if (blk != w.block) a.blocks[blk] = publication;
    }
    if (!a.blocks.empty()) w.acquires.push_back(std::move(a));
    if (unpublished.empty()) {
      loc.releases.push_back({w.block, {w.epoch, f.thread}});
      if (others) w.ordered_by_barrier();
    } else {
      w.L.unpublished[w.block] = unpublished;
    }
  }
  return old;
}

// __threadfence(): the thread's global stores so far are ordered before what it does next.
void api_fence() {
  Fiber& f = current();
  f.unfenced = false;
  f.fence_epoch = f.worker->epoch;
  f.fence_event = ++f.events;
}

unsigned api_thread_index() { return static_cast<unsigned>(current().thread); }
unsigned api_block_index() { return static_cast<unsigned>(current().worker->block); }
unsigned api_block_dim() { return static_cast<unsigned>(current().worker->L.shape.threads); }
unsigned api_grid_dim() { return static_cast<unsigned>(current().worker->L.shape.grid); }

const ft_simt_api kApi = {FT_SIMT_API_VERSION, api_access,        api_barrier,           api_warp_exchange,
                          api_shared_view,     api_copy_async,    api_copy_async_commit, api_copy_async_wait,
                          api_wgmma_issue,     api_wgmma_read,    api_wgmma_commit,      api_wgmma_wait,
                          api_mbarrier_init,   api_mbarrier_arrive, api_mbarrier_wait,   api_tensor_load,
                          api_atomic,          api_fence,         api_thread_index,      api_block_index,
                          api_block_dim,       api_grid_dim};

}  // namespace

const ft_simt_api* api() { return &kApi; }

LaunchResult launch(const KernelRef& kernel, const std::vector<void*>& buffers, const std::vector<size_t>& bytes,
                    const Shape& shape, const Options& options) {
  check(buffers.size() == kernel.params.size() && bytes.size() == buffers.size(), "kernel '", kernel.name, "' takes ",
        kernel.params.size(), " parameters, launched with ", buffers.size());
  check(shape.threads > 0 && shape.threads <= 1024 && shape.grid >= 0 && shape.shared_bytes >= 0, "kernel '",
        kernel.name, "': launch of ", shape.grid, " blocks of ", shape.threads, " threads");
  std::set<int64_t> distinct;
  for (int64_t b : options.blocks) {
    check(b >= 0 && b < shape.grid && distinct.insert(b).second, "kernel '", kernel.name, "': block ", b,
          " asked for twice or outside a grid of ", shape.grid);
  }
  for (size_t i = 0; i < options.checked_blocks.size(); ++i) {
    const int64_t b = options.checked_blocks[i];
    check(b >= 0 && b < shape.grid && (i == 0 || options.checked_blocks[i - 1] < b), "kernel '", kernel.name,
          "': checked block ", b, " out of order, repeated or outside a grid of ", shape.grid);
  }
  Launch L(kernel, shape, options);
  const size_t n = buffers.size();
  L.params.resize(n);
  L.descs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    ParamState& p = L.params[i];
    p.param = &kernel.params[i];
    p.index = i;
    if (p.param->tensor_map.source >= 0) continue;  // the executor's own (below), whatever the caller passed
    p.lo = reinterpret_cast<uintptr_t>(buffers[i]);
    p.hi = p.lo + bytes[i];
    L.unique.add_range(p.lo, p.hi);
  }
  L.unique.seal();
  if (options.checks) {
    // Written buffers are race-checked, and so is any read-only one that overlaps them.
    for (ParamState& p : L.params) {
      if (!p.param->writable) continue;
      p.tracked = true;
      L.cross.push_back(std::make_unique<CrossBlock>((p.hi - p.lo) / static_cast<size_t>(p.param->element_bytes)));
      p.cross = L.cross.back().get();
    }
    for (ParamState& p : L.params) {
      if (p.param->writable) continue;
      for (const ParamState& o : L.params) {
        if (!o.param->writable || p.hi <= o.lo || o.hi <= p.lo) continue;
        p.tracked = true;
        if (p.param->element_bytes == o.param->element_bytes && (p.lo - o.lo) % static_cast<uintptr_t>(o.param->element_bytes) == 0 &&
            p.lo >= o.lo) {
          p.cross = o.cross;
          p.cross_offset = static_cast<long long>((p.lo - o.lo) / static_cast<uintptr_t>(o.param->element_bytes));
        }
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const TensorMapSpec& t = kernel.params[i].tensor_map;
    if (t.source >= 0) {  // a tensor map: its spec, with the source parameter's element size
      ft_simt_tensor_map m{};
      m.source = t.source;
      m.rank = static_cast<int>(t.dims.size());
      m.swizzle = t.swizzle;
      m.strides[0] = kernel.params[static_cast<size_t>(t.source)].element_bytes;
      for (int d = 0; d < m.rank; ++d) {
        m.dims[d] = t.dims[static_cast<size_t>(d)];
        m.box[d] = static_cast<int>(t.box[static_cast<size_t>(d)]);
        if (d > 0) m.strides[d] = t.strides[static_cast<size_t>(d - 1)];
      }
      L.tensor_maps.push_back(m);
      L.descs[i] = {reinterpret_cast<unsigned char*>(&L.tensor_maps.back()), static_cast<long long>(sizeof m),
                    static_cast<int>(sizeof m), 0, 0, &L.params[i]};
      continue;
    }
    L.descs[i] = {static_cast<unsigned char*>(buffers[i]), static_cast<long long>(bytes[i]), kernel.params[i].element_bytes,
                  0, 0, &L.params[i]};
  }
  int workers = options.workers > 0 ? options.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t blocks = options.blocks.empty() ? shape.grid : static_cast<int64_t>(options.blocks.size());
  workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(workers, blocks)));
  std::vector<std::unique_ptr<Worker>> pool;
  for (int i = 0; i < workers; ++i) pool.push_back(std::make_unique<Worker>(L));
  if (workers == 1) {
    pool[0]->run();
  } else {
    std::vector<std::thread> threads;
    for (auto& w : pool) threads.emplace_back([&w] { w->run(); });
    for (auto& t : threads) t.join();
  }
  LaunchResult r;
  r.counters = L.counters;
  r.counters.launches = 1;
  r.counters.unique_load_sectors = L.unique.loaded();
  r.counters.unique_store_sectors = L.unique.stored();
  r.finding_count = L.findings.total();
  if (r.finding_count > 0) {
    r.findings = L.findings.render(kernel.name);
    r.first_check = L.findings.first_check();
  }
  return r;
}

void throw_findings(const std::string& kernel, const LaunchResult& r) {
  if (r.finding_count == 0) return;
  std::string message = r.findings.empty() ? std::string(check_name(r.first_check)) + ": kernel " + kernel : r.findings.front();
  if (r.finding_count > 1) message += " (and " + std::to_string(r.finding_count - 1) + " more findings)";
  throw CheckFailed(r.first_check, message);
}

}  // namespace fusetune::simt
