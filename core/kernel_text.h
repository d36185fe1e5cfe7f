// The CUDA text of generated kernels (codegen/emit.h prints it; plan bundles and tasks store it),
// read back without building it: what each kernel's signature says, and whether a kernel waits
// for its predecessor's grid.
//
// Takes the text exactly as printed. kernel_signatures returns the kernels it defines, in order:
// names, where each definition begins, and per parameter its name, C type, element size, whether it is written (FT_GLOBAL(T)
// without const) and, for an FT_SCRATCH(T, N) parameter, the N elements of scratch the launcher
// binds (FT_SCRATCH(T, N, F, P): N counters, each of the P consecutive blocks from F + i x P on that
// cooperate), for an FT_TENSOR_MAP parameter the tensor map the launcher encodes (TensorMapSpec). waits_for_predecessor says whether a kernel's body begins with FT_GRID_DEPENDENCY(), so
// that it may be launched to overlap its predecessor. The SIMT executor's host builds
// (simt/module.h) and the CUDA backend, which loads precompiled cubins without a compiler
// (backend/cuda.h), both read the text through these. Errors (a parameter of another form, a
// type of unknown size) throw Error naming the kernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fusetune {

// A TMA tensor map (FT_TENSOR_MAP(source, dims, strides, box, swizzle) name): the tiles of the
// buffer parameter `source` that cp.async.bulk.tensor copies, as cuTensorMapEncodeTiled takes
// them. Dimensions innermost first: `dims` elements each, `strides` bytes between consecutive
// indices of dimensions 1 on (multiples of 16), `box` elements a tile copies (1 to 256 each, the
// innermost a multiple of 16 bytes), `swizzle` the bytes of a swizzle span (0: none, 32, 64 or
// 128; the innermost box exactly that many bytes). Elements outside `dims` read as zero. The
// text spells each list with 'x' between entries: FT_TENSOR_MAP(a, 64x72, 128, 64x8, 128) tm_a.
// Tensor maps come after every other parameter (the launchers bind them after the scratch).
struct TensorMapSpec {
  int source = -1;  // the parameter it maps (an FT_GLOBAL before it)
  std::vector<int64_t> dims, strides, box;
  int swizzle = 0;
};

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
  TensorMapSpec tensor_map;  // tensor_map.source >= 0: a tensor map (FT_TENSOR_MAP), the launcher's to encode
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
