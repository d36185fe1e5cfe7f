// Executing a plan bundle (runtime/bundle.h) on a backend: the runtime behind `fusetune run DIR`
// and the deployment library.
//
// PlanRunner loads the bundle's module (cubin for the device's architecture where the bundle has
// one, else NVRTC; the host source on the host backend), uploads the constants once, places the
// intermediates in one arena buffer at the manifest's offsets, and prepares the launch sequence
// once (on the CUDA backend: captured into one CUDA graph where possible, cuda_graph() says whether
// it was). A cubin newer than the GPU's driver is refused before the driver is asked to load it,
// with what to do (cubin_driver_problem). run() binds inputs (in the manifest's input order, dtype and shape checked), runs the
// sequence and returns the outputs. Errors name the bundle field or input at fault.
// Launches with a `when` (an If's branch whose condition is known only at run time) cut the
// sequence into parts, each prepared on its own (a CUDA graph each): a run reads each condition
// from its buffer once, when the part that needs it comes (on a GPU, after the parts before have
// finished: one synchronization per part), and runs only the parts whose conditions hold.
//
// select_backend picks the backend a plan runs on: "cuda" or "cuda:N" (the first GPU, or the N-th
// the driver reports; an error saying why when it is not usable), "host", or "auto" (CUDA on the
// first GPU where one is usable, else host, with the reason in *no_gpu).
// The host backend comes from `host`: the CLI links it (backend::make_host_backend), the
// deployment library loads it from its plugin (runtime/host_plugin.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/graph.h"
#include "core/tensor.h"
#include "runtime/bundle.h"

namespace fusetune::runtime {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  // An output of data-dependent size (the manifest's output_extents): the first N entries along
  // `extent.axis` hold data, N the int64 value of output `extent.count_output`; -1 for none.
  OutputExtent extent;
};

// outputs() extents, for trim_to_counts (core/graph.h).
std::vector<OutputExtent> output_extents(const std::vector<TensorSpec>& outputs);

using HostBackendFactory = std::function<std::unique_ptr<backend::Backend>()>;

std::unique_ptr<backend::Backend> select_backend(const std::string& which, std::string* no_gpu,
                                                 const HostBackendFactory& host);

// Why a cubin built by NVRTC `built_with` ("13.0", as a bundle's manifest records it) cannot be
// loaded by a driver supporting CUDA `driver` ("12.8", as the CUDA backend reports it): a driver
// runs code of its own CUDA version or older. "" when it can, or when either version is unknown.
std::string cubin_driver_problem(const std::string& built_with, const std::string& driver);

class PlanRunner {
 public:
  PlanRunner(const Bundle& bundle, backend::Backend& backend);
  ~PlanRunner();
  const std::vector<TensorSpec>& inputs() const;
  const std::vector<TensorSpec>& outputs() const;
  size_t launches() const;
  bool cuda_graph() const;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // One run on its caller's memory: input i read from inputs[i], output k written to outputs[k]
  // (each exactly its spec's bytes), in host memory, or with `device` in memory of the backend's
  // device (checked: Backend::device_memory_problem; host memory on the host backend). Device
  // memory 256-byte aligned that no output overlaps, at the same address as in the run before, is
  // bound in place of the plan's own buffer (the kernels read and write it directly; on a GPU the
  // graph is updated once when bindings change); other memory is copied in and out (host memory
  // through pinned staging on a GPU). Bindings stay until a run changes them: time_runs() runs on
  // the last run's memory.
  void run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs, bool device);
  // After a run(): n more runs on the same inputs, back to back, each run's time in microseconds
  // (backend::Sequence::time_runs: device events on a GPU, the steady clock on the host; the
  // steady clock around each run for a plan whose branches are decided at run time).
  std::vector<double> time_runs(int n);
  // After a run(): each launch timed alone, in launch order, on the last run's memory
  // (backend::Module::time under `policy`: device events and, with flush_l2, the L2 flushed before
  // each timed run on a GPU; the steady clock on the host). A launch an If's condition guards is
  // timed whether or not its condition held (its buffers exist either way).
  struct LaunchTime {
    std::string kernel;
    backend::Timing timing;
  };
  std::vector<LaunchTime> time_launches(const backend::TimingPolicy& policy);
  // What each kernel did to memory over the runs so far (counted on the host backend; empty on
  // a GPU), by kernel name.
  std::map<std::string, simt::Counters> counters() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace fusetune::runtime
