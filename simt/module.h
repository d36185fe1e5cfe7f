// Host builds of the CUDA text: the module the SIMT executor (simt/executor.h) runs.
//
// build_units takes the CUDA text exactly as codegen/emit.h prints it (and as plan bundles and
// tasks store it) and returns the translation units the host compiler builds, at most `parts`
// (fewer where the text is small: a unit of under ~96 KB of kernels would not pay for its own
// compiler run): each first includes `header` (prelude_header: simt/device_api.h and
// simt/prelude.h), then holds the text's head (what precedes its first kernel) under `#line 1
// "kernels.cu"`, a run of consecutive kernels under `#line` directives giving their lines in
// kernels.cu (so that the lines the executor reports are lines of the shipped kernels.cu), and one
// FT_SIMT_ENTRY per kernel it holds; the first also holds the executor's table (FT_SIMT_TABLE()).
// compile() builds them side by side, one per core, and links one shared library, once, into a
// cache directory keyed by the SHA-256 of the text and the compiler's identity (its version too:
// an upgraded compiler builds anew) (-O1 -g1: the line table, for reports). Module loads the
// result, binds the executor's table and finds each kernel's entry; its parameters (names, element
// types, const or not) come from the kernel's signature in the text (core/kernel_text.h). Errors
// (a compiler failure with its message, a kernel missing) throw Error.
//
// prelude_header writes the header every unit includes into the cache directory, named by its
// text, the compiler's identity and the flags, and precompiles it there once (NAME.h.gch, with the
// units' flags): a unit reads the precompiled form instead of parsing its ~22,000 lines of headers
// (measured with GCC 12: a unit of one 29 KB kernel compiles in 139 ms instead of 281 ms, one of
// 47 KB in 614 ms instead of 758 ms; the tests build ~1,750 units, most of one small kernel). A
// compiler that cannot read it parses the header, as correct and slower.
#pragma once

#include <string>
#include <vector>

#include "simt/executor.h"

namespace fusetune::simt {

std::vector<std::string> build_units(const std::string& cuda_source, size_t parts, const std::string& header);

// The header's path, written and precompiled for `compiler` ($CXX, else c++, where empty) if the
// cache lacks either. Safe from several threads and processes at once.
std::string prelude_header(const std::string& compiler = "");

// The command that compiles the unit `source` into `object` with `compiler`, the folder of
// `header` (prelude_header's path for that compiler) on the include path.
std::string unit_compile_command(const std::string& compiler, const std::string& header, const std::string& source,
                                 const std::string& object);

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
