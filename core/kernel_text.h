// The CUDA text of generated kernels (codegen/emit.h prints it; plan bundles and tasks store it),
// read back without building it: what each kernel's signature says, and whether a kernel waits
// for its predecessor's grid.
//
// Takes the text exactly as printed. kernel_signatures returns the kernels it defines, in order:
// names, where each definition begins, and per parameter its name, C type, element size, whether it is written (FT_GLOBAL(T)
// without const) and, for an FT_SCRATCH(T, N) parameter, the N elements of scratch the launcher
// binds (FT_SCRATCH(T, N, F, P): N counters, each of the P consecutive blocks from F + i x P on that
// cooperate). waits_for_predecessor says whether a kernel's body begins with FT_GRID_DEPENDENCY(), so
// that it may be launched to overlap its predecessor. The SIMT executor's host builds
// (simt/module.h) and the CUDA backend, which loads precompiled cubins without a compiler
// (backend/cuda.h), both read the text through these. Errors (a parameter of another form, a
// type of unknown size) throw Error naming the kernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fusetune {

struct KernelParam {
  std::string name;
  std::string ctype;  // "const float", "float", "const long long", ...
  int element_bytes = 4;
  bool writable = false;
  int64_t scratch_elements = 0;  // > 0: a scratch buffer of this many elements (FT_SCRATCH), bound by the launcher
  // A counter buffer (FT_SCRATCH(T, N, first, per)): counter i for the blocks
  // [first + i x per, first + (i + 1) x per) that cooperate. group_blocks 0: not one.
  int64_t first_block = 0;
  int64_t group_blocks = 0;
};

struct KernelSignature {
  std::string name;
  size_t offset = 0;  // where its definition (`extern "C" __global__ void`) begins in the text
  std::vector<KernelParam> params;
};

std::vector<KernelSignature> kernel_signatures(const std::string& cuda_source);

// Whether kernel `name` of CUDA text `source` begins by waiting for the grid before it
// (FT_GRID_DEPENDENCY(), emitted from codegen version 14 on): only such a kernel may be launched
// to overlap its predecessor (programmatic dependent launch). A bundle's kernels compiled before
// do not wait.
bool waits_for_predecessor(const std::string& source, const std::string& name);

}  // namespace fusetune
