// fusetune's deployment runtime: the one header a program includes to run a plan bundle written by
// `fusetune compile` (docs/plan-format.md). Link the CMake target fusetune::runtime (in this
// repository, or from an installed fusetune: find_package(fusetune), the shared library
// libfusetune_runtime); nothing else of fusetune is visible from here.
//
// Plan::load(dir, backend[, options]) reads the bundle and prepares it on "cuda" (the first GPU; an
// error if none is usable), "cuda:N" (the N-th GPU the driver reports, as CUDA_VISIBLE_DEVICES
// leaves them), "host" (the host form of the kernels, built with the system C++ compiler, through
// the plugin libfusetune_host beside the library, under the checks LoadOptions sets) or "auto"
// (CUDA on the first GPU where one is usable, else host). On CUDA the kernel launches are captured once
// into a CUDA graph that every run() replays (plain launches where capture fails).
//
// Inputs and outputs are raw bytes in the tensor's element type, row-major, little-endian, exactly
// TensorInfo::bytes() long. Two ways to run:
//  - run(inputs, outputs, memory): one call with a pointer per input and per output, in inputs()
//    and outputs() order. Memory::kHost: host memory (copied through pinned staging on a GPU, one
//    synchronization a run). Memory::kDevice: memory of the plan's device (on "cuda:N" device
//    pointers of that GPU, checked with the driver; on "host" host memory): where it is 256-byte
//    aligned (as cudaMalloc and PyTorch's allocator give), no output overlaps it and it is where
//    it was in the run before, the kernels read and write it in place, with no copy (the CUDA
//    graph is updated once, when the pointers settle); memory that moves from run to run, and
//    other device memory, is copied on the device. It returns when the outputs are written.
//  - set_input / run() / get_output: set_input copies the data in; an input keeps its value until
//    set again, and run() requires every input to have been set once; get_output copies out the
//    last run's result.
// Every error (missing or unreadable bundle file, unknown tensor name, wrong byte count, unset
// input, a pointer that is not the plan's device memory, no GPU for "cuda", kernel failures)
// throws RuntimeError, whose message names the culprit.
//
// Threads and devices: every member function may be called from any thread, and from several at
// once. Calls on one Plan are serialized (a run waits for the one before it; the set_input/run()/
// get_output form shares its inputs and outputs between threads, so threads that run one plan
// together use run(inputs, outputs, memory)); separate Plans run concurrently, on one GPU or on
// several in one process. On CUDA each call makes the plan's device context (the device's primary
// context, as the CUDA runtime and PyTorch use) current for its duration and restores the
// caller's; the last Plan on a device releases the context. A Plan is movable (a moved-from Plan
// may only be assigned to or destroyed), not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

// What the shared library libfusetune_runtime exports (everything else in it is hidden).
#define FUSETUNE_API __attribute__((visibility("default")))

namespace fusetune {

enum class ElementType {
  kFloat32, kFloat16, kBFloat16, kFloat64,
  kInt8, kInt16, kInt32, kInt64,
  kUInt8, kUInt16, kUInt32, kUInt64,
  kBool,
  // ONNX 1.23's narrow types, one element per byte in a buffer: a float8/float4 element as its
  // code (float4's in the low nibble), a 4- or 2-bit integer as its value in an int8/uint8.
  kFloat8E4M3FN, kFloat8E4M3FNUZ, kFloat8E5M2, kFloat8E5M2FNUZ, kFloat8E8M0, kFloat4E2M1,
  kInt4, kUInt4, kInt2, kUInt2,
};

// ONNX spelling ("float32", "int64", "bool", ...) and size in bytes of one element.
FUSETUNE_API std::string element_type_name(ElementType type);
FUSETUNE_API size_t element_size(ElementType type);

struct FUSETUNE_API TensorInfo {
  std::string name;
  ElementType type = ElementType::kFloat32;
  std::vector<int64_t> shape;  // empty for a scalar
  // An output whose size depends on the data (NonMaxSuppression's selections, Unique's values,
  // NonZero's indices) has the bound fusetune derived (or the smaller one `compile --bound` set)
  // as its shape: only the first N entries along `count_axis` hold data, N the int64 scalar of
  // the output named `count_output` (an output the plan adds after the model's); an N over the
  // bound says the bound cut entries off, and all of the bound's hold data. Empty for every other
  // tensor.
  std::string count_output;
  int count_axis = 0;
  size_t elements() const;
  size_t bytes() const;
};

class FUSETUNE_API RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where run(inputs, outputs, memory) finds its inputs and puts its outputs.
enum class Memory {
  kHost,    // host memory
  kDevice,  // memory of the plan's device (host memory for a plan on "host")
};

// How Plan::load prepares a plan.
struct FUSETUNE_API LoadOptions {
  // On the host: the blocks of each launch that the race and initialisation checks cover (the
  // first and the last, the others a sample fixed by the kernel's name), 0 for every block; every
  // block runs under the memory and synchronisation checks. Checking every block took twice the
  // time on a 416 x 416 detector's plan (docs/models.md). Ignored on a GPU.
  int64_t host_checked_blocks = 64;
};

class FUSETUNE_API Plan {
 public:
  static Plan load(const std::string& dir, const std::string& backend = "auto");
  static Plan load(const std::string& dir, const std::string& backend, const LoadOptions& options);
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;
  ~Plan();

  const std::vector<TensorInfo>& inputs() const;   // in the model's input order
  const std::vector<TensorInfo>& outputs() const;  // in the model's output order
  std::string backend() const;                     // "host", or "cuda:DEVICE (sm_XX)"
  std::string no_gpu_reason() const;               // why "auto" chose the host; empty otherwise
  size_t launches() const;                         // kernel launches per run
  bool cuda_graph() const;                         // run() replays CUDA graphs (one; one per part of an If decided at run time)

  void run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs, Memory memory = Memory::kHost);

  void set_input(const std::string& name, const void* data, size_t bytes);
  void run();
  void get_output(const std::string& name, void* data, size_t bytes) const;

 private:
  struct Impl;
  explicit Plan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusetune
