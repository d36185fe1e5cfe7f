// Host builds of the CUDA text: the module the SIMT executor (simt/executor.h) runs.
//
// build_units takes the CUDA text exactly as codegen/emit.h prints it (and as plan bundles and
// tasks store it) and returns the translation units the host compiler builds, at most `parts`
// (fewer where the text is small: a unit of under ~96 KB of kernels would not pay for parsing the
// headers): each holds simt/device_api.h, simt/prelude.h, the text's head (what precedes its first
// kernel) under `#line 1 "kernels.cu"`, a run of consecutive kernels under `#line` directives
// giving their lines in kernels.cu (so that the lines the executor reports are lines of the
// shipped kernels.cu), and one FT_SIMT_ENTRY per kernel it holds; the first also holds the
// executor's table (FT_SIMT_FIRST_UNIT). compile() builds them side by side, one per core, and
// links one shared library, once, into a cache directory keyed by the SHA-256 of the text and the
// compiler's identity (its version too: an upgraded compiler builds anew) (-O1 -g1: the line
// table, for reports). Module loads the result, binds the executor's table and finds each
// kernel's entry; its parameters (names, element types, const or not) come from the kernel's
// signature in the text (core/kernel_text.h). Errors (a compiler failure with its message, a
// kernel missing) throw Error.
#pragma once

#include <string>
#include <vector>

#include "simt/executor.h"

namespace fusetune::simt {

std::vector<std::string> build_units(const std::string& cuda_source, size_t parts);

// The compiler host builds use by default ($CXX, else c++).
std::string default_compiler();

// What a compiler is, for cache keys and device identities: its command and the first line of
// its --version, then the executor's interface version, which host timings also depend on
// ("c++: c++ (Debian 12.2.0-14) 12.2.0; SIMT executor API 6"), read once per process and
// compiler. A compiler that does not answer is named "<command>: version unknown; ...".
std::string compiler_identity(const std::string& compiler);

// Builds `cuda_source` for the host unless the cache has it; returns the shared library's path.
// Safe from several threads and processes at once (a private file published by rename).
std::string compile(const std::string& cuda_source, const std::string& compiler = "");

class Module {
 public:
  explicit Module(const std::string& cuda_source, const std::string& compiler = "");
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  const KernelRef& kernel(const std::string& name) const;  // throws Error naming a missing kernel
  const std::vector<KernelRef>& kernels() const { return kernels_; }

 private:
  void* handle_ = nullptr;
  std::vector<KernelRef> kernels_;
};

}  // namespace fusetune::simt
