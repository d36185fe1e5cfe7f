// fusetune's deployment runtime: the one header a program includes to run a plan bundle written by
// `fusetune compile` (docs/plan-format.md). Link the CMake target fusetune::runtime (in this
// repository, or from an installed fusetune: find_package(fusetune), the shared library
// libfusetune_runtime); nothing else of fusetune is visible from here.
//
// Plan::load(dir, backend) reads the bundle and prepares it on "cuda" (the first GPU; an error if
// none is usable), "cuda:N" (the N-th GPU the driver reports, as CUDA_VISIBLE_DEVICES leaves
// them), "host" (the host form of the kernels, built with the system C++ compiler, through the
// plugin libfusetune_host beside the library) or "auto" (CUDA on the first GPU where one is
// usable, else host). On CUDA the kernel launches are captured once
// into a CUDA graph that every run() replays (plain launches where capture fails).
//
// Inputs and outputs are raw bytes in the tensor's element type, row-major, little-endian, exactly
// TensorInfo::bytes() long. set_input copies the data in; an input keeps its value until set again,
// and run() requires every input to have been set once. get_output copies out the last run's
// result. Every error (missing or unreadable bundle file, unknown tensor name, wrong byte count,
// unset input, no GPU for "cuda", kernel failures) throws RuntimeError, whose message names the
// culprit. A Plan is movable (a moved-from Plan may only be assigned to or destroyed), not
// copyable, and not safe to use from two threads at once.
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
  size_t elements() const;
  size_t bytes() const;
};

class FUSETUNE_API RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class FUSETUNE_API Plan {
 public:
  static Plan load(const std::string& dir, const std::string& backend = "auto");
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;
  ~Plan();

  const std::vector<TensorInfo>& inputs() const;   // in the model's input order
  const std::vector<TensorInfo>& outputs() const;  // in the model's output order
  std::string backend() const;                     // "host", or "cuda:DEVICE (sm_XX)"
  std::string no_gpu_reason() const;               // why "auto" chose the host; empty otherwise
  size_t launches() const;                         // kernel launches per run
  bool cuda_graph() const;                         // run() replays one CUDA graph

  void set_input(const std::string& name, const void* data, size_t bytes);
  void run();
  void get_output(const std::string& name, void* data, size_t bytes) const;

 private:
  struct Impl;
  explicit Plan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusetune
