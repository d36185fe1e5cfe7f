// Backends: where generated kernels run. One interface, two implementations over the same CUDA
// text: the host backend (the text built by the system C++ compiler with the SIMT executor's
// prelude and run by the executor, simt/executor.h) and the CUDA backend (NVRTC to a cubin,
// loaded and launched with the CUDA driver API, timed with events). The worker daemon wraps them;
// tests use the host backend everywhere and the CUDA backend where a GPU is present.
//
// A Module holds compiled kernels; launch() runs one with buffers bound to its parameters in
// order; time() runs it under a TimingPolicy (warm-up, then repeats until both a minimum count
// and a minimum total time are reached, at most max_repeats; on the GPU each run is timed with
// events and the L2 is flushed before it) and returns median, minimum and maximum; prepare() takes
// a fixed sequence of launches once and returns it as a Sequence to run many times (the CUDA
// backend captures it into one CUDA graph where it can, the host backend runs the launches in
// order). Errors (compile failures, launch failures) throw Error with the compiler's or driver's
// message; a host launch whose checks found something throws simt::CheckFailed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "planner/device_identity.h"
#include "simt/executor.h"

namespace fusetune::backend {

class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual size_t bytes() const = 0;
  virtual void upload(const void* data, size_t bytes) = 0;
  virtual void download(void* data, size_t bytes) const = 0;
  virtual void fill_byte(unsigned char value) = 0;  // poisoning before a verification run
  virtual void* handle() = 0;
};

struct TimingPolicy {
  int warmup = 1;
  int min_repeats = 5;
  int max_repeats = 200;
  double min_time_ms = 10;
  bool flush_l2 = true;  // the GPU's L2; the host backend does not flush caches
};

struct Timing {
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
  int repeats = 0;
  // A 95% confidence interval of the median, distribution-free: the order statistics of ranks
  // floor((n - 1.96 sqrt(n)) / 2) and ceil(1 + (n + 1.96 sqrt(n)) / 2) (1-based, clamped to the
  // samples), so [min, max] for 5 runs or fewer.
  double ci_low_us = 0;
  double ci_high_us = 0;
};

// Median, minimum, maximum and the median's confidence interval of run times (microseconds); the
// input must not be empty.
Timing summarize_times(std::vector<double> times_us);

// One launch of a sequence: a kernel and the buffers bound to its parameters.
struct Step {
  std::string kernel;
  std::vector<Buffer*> args;
};

// Bytes a run moves between one of its buffers and its caller's memory: read from `memory` into
// the buffer before the launches (an input) or written from the buffer to `memory` after them (an
// output). `device`: the caller's memory is on the backend's device (a device pointer on a GPU;
// on the host backend host memory either way).
struct Transfer {
  Buffer* buffer = nullptr;
  void* memory = nullptr;
  size_t bytes = 0;
  bool device = false;
};

// Launches prepared by Module::prepare: run() executes them in order and returns when they have
// finished. The buffers stay bound (their contents may change between runs); a Sequence must not
// outlive its module or its buffers. run(inputs, outputs) does the same with its caller's data
// moved in before and out after, in the sequence's own order (on a GPU: asynchronous copies on
// its stream, host memory staged through pinned memory, one synchronization at the end). bind()
// gives a buffer the caller's memory in place of its own (`address`: `bytes` of the backend's
// device memory, 256-byte aligned, as allocators give; nullptr: its own memory again) in every
// launch that takes it from the next run on: on a GPU, a captured graph is updated in place
// (cuGraphExecUpdate) when a run finds its bindings changed. time_runs(n) runs the sequence n
// times back to back and returns each run's time in microseconds: on a GPU from device events
// recorded before and after each run (the CUDA graph replays queue behind each other; no cache is
// flushed between them), on the host from the steady clock.
class Sequence {
 public:
  virtual ~Sequence() = default;
  virtual void run() = 0;
  virtual void run(const std::vector<Transfer>& inputs, const std::vector<Transfer>& outputs) = 0;
  virtual void bind(Buffer* buffer, void* address) = 0;
  virtual bool cuda_graph() const = 0;  // run() replays one captured CUDA graph
  virtual std::vector<double> time_runs(int n) = 0;
};

// The blocks of a grid a launch ran: all of them when blocks == grid (or both are 0: not counted).
struct Coverage {
  int64_t blocks = 0;
  int64_t grid = 0;
  bool whole() const { return blocks >= grid; }
};

class Module {
 public:
  virtual ~Module() = default;
  virtual void launch(const std::string& kernel, const std::vector<Buffer*>& args) = 0;
  // A launch of at most `max_blocks` blocks of the kernel's grid (at least 2): the first, the last,
  // and others drawn from `seed`, under the same checks as launch(). Outputs the other blocks
  // would write are left as they were. A backend that cannot run part of a grid (the GPU) runs
  // all of it, as does the host for a grid within the limit or a library call.
  virtual Coverage launch_sample(const std::string& kernel, const std::vector<Buffer*>& args, int64_t max_blocks,
                                 uint64_t seed) {
    (void)max_blocks;
    (void)seed;
    launch(kernel, args);
    return {};
  }
  virtual Timing time(const std::string& kernel, const std::vector<Buffer*>& args, const TimingPolicy& policy) = 0;
  virtual std::unique_ptr<Sequence> prepare(std::vector<Step> steps) = 0;
  // What the kernels did to memory, summed over this module's launches, per kernel: counted by
  // the host backend's executor; empty on a GPU.
  virtual std::map<std::string, simt::Counters> counters() const { return {}; }
};

// A module as plan bundles store it: the CUDA text (which the host backend builds and runs with
// the SIMT executor), cubins per architecture, launch shapes.
struct ModuleSource {
  struct KernelInfo {
    std::string name;
    int64_t grid = 1;
    int threads = 32;
    int64_t shared_bytes = 0;
    std::string library;  // set: a library call (planner::LibraryCall JSON), not a compiled kernel
  };
  std::vector<KernelInfo> kernels;  // a launch's each; launches that run one kernel repeat its name and shape
  std::string cuda_source;
  std::map<std::string, std::vector<char>> cubins;  // by architecture ("sm_90")
  std::map<std::string, std::string> ptx;           // by the target it was generated for ("sm_80", "sm_90a")
};

ModuleSource module_source(const std::vector<codegen::Kernel>& kernels);

// What a backend runs on, as the worker reports it in its hello.
struct DeviceProperties {
  std::string description;  // the driver's device name, or the host's CPU and thread count
  std::string arch;         // "sm_90", or "host"
  int compute_capability = 0;
  int multiprocessors = 0;  // SMs, or CPU cores
  std::string driver;       // the CUDA driver's version ("12.8"); empty for the host
  std::string toolkit;      // what builds the kernels: "nvrtc 13.0", or simt::compiler_identity
  planner::DriverAttributes attributes;  // a GPU's, as its driver reports them (empty for the host)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual DeviceProperties properties() const = 0;
  virtual std::unique_ptr<Module> load_source(const ModuleSource& source) = 0;
  std::unique_ptr<Module> load(const std::vector<codegen::Kernel>& kernels) { return load_source(module_source(kernels)); }
  virtual std::unique_ptr<Buffer> allocate(size_t bytes) = 0;
  // A buffer aliasing [offset, offset + bytes) of `parent` (which must outlive it): arena slots.
  virtual std::unique_ptr<Buffer> view(Buffer& parent, size_t offset, size_t bytes) = 0;
  // Why [address, address + bytes) is not memory of this backend's device that its launches may
  // use (on a GPU: not device memory, or another device's); "" when it is. The host backend
  // takes any host address.
  virtual std::string device_memory_problem(const void* address, size_t bytes) const {
    (void)address;
    (void)bytes;
    return "";
  }
};

// The host backend: `compiler` (default: $CXX, else c++) builds each module's CUDA text once
// (simt/module.h) and the SIMT executor runs it: blocks on `options.workers` threads (default: all
// cores), every launch under the executor's checks (a finding throws simt::CheckFailed) and
// counters (Module::counters) unless `options` turns them off; timed runs go without either.
// With `checked_sample` > 0, a launch (Module::launch) runs every block but the race and
// initialisation checks cover about that many of them (whole groups of cooperating blocks, the
// first and the last among them, the rest drawn from the kernel's name: the same blocks every
// run); memcheck and synccheck cover every block.
std::unique_ptr<Backend> make_host_backend(const std::string& compiler = "", const simt::Options& options = {},
                                           int64_t checked_sample = 0);
// Blocks of a launch the race and initialisation checks cover when plans run on the host, by
// default. Measured on a 416x416 detector's plan (docs/models.md, bench/host_run_speed.sh): with
// this sample 9.0x the reference interpreter's time, with every block checked 18.3x.
inline constexpr int64_t kPlanCheckedBlocks = 64;
// The host backend plans run on (`fusetune run`, the deployment runtime's plugin): every check
// on (race and initialisation checks on `checked_sample` blocks of each launch; 0: all), the
// counters off (counting doubles a run's time; `fusetune profile` counts).
std::unique_ptr<Backend> make_plan_host_backend(int64_t checked_sample = kPlanCheckedBlocks);

}  // namespace fusetune::backend
