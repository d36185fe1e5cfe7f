// NVRTC: compiles a module of generated CUDA kernels (codegen/emit.h) for one GPU architecture
// into a cubin, with ptxas's resource report per kernel (registers, shared memory, stack, spills).
//
// Available when the CUDA toolkit was found at build time and its NVRTC library loads at run time
// (nvrtc_available(); nothing links it: it is opened on first use, and a process that runs only
// precompiled code never needs it); compiling needs no GPU. Compile errors throw Error carrying NVRTC's log. compile_cuda_cached keeps each successful
// compilation on disk (core/files.h cache_dir("nvrtc"): the cubin and ptxas's report, keyed by
// the SHA-256 of the source, the architecture, the register limit and NVRTC's version), so a
// restarted worker or a second tune compiles nothing it compiled before; `cached` says which.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fusetune::backend {

struct KernelResources {
  int registers = 0;
  int shared_bytes = 0;  // static shared memory
  int stack_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
};

struct CompiledCuda {
  std::string arch;  // "sm_90"
  std::vector<char> cubin;
  std::string ptx;  // the same compilation's PTX (.target: target_architecture(arch))
  std::string log;
  std::map<std::string, KernelResources> resources;  // by kernel name
  double compile_ms = 0;
  bool cached = false;  // read back from the disk cache (compile_cuda_cached)
};

// The architecture NVRTC compiles for on a device of `arch`: sm_90 is compiled as sm_90a, whose
// features (wgmma) the Hopper devices have; the cubin runs on sm_90 devices only, as every cubin
// of a bundle is loaded only on a device of its architecture. Others as they are.
std::string target_architecture(const std::string& arch);
bool nvrtc_available();
// Why NVRTC cannot be used ("" when it can): what to install.
std::string nvrtc_unavailable_reason();
std::string nvrtc_version();
CompiledCuda compile_cuda(const std::string& source, const std::string& arch, int max_registers = 0);
CompiledCuda compile_cuda_cached(const std::string& source, const std::string& arch, int max_registers = 0);
// The PTX NVRTC emits for the module on the virtual architecture of `arch` ("sm_90" -> compute_90a),
// with the options compile_cuda uses: what the regression tests of the generated code's habits
// read (conversions, index arithmetic, access widths).
std::string compile_ptx(const std::string& source, const std::string& arch);

}  // namespace fusetune::backend
