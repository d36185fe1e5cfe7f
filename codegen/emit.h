// Emitters: print a Kernel (codegen/kernel_ir.h) as source text.
//
// emit_cuda: an `extern "C" __global__` CUDA C++ kernel for NVRTC; the block's shared
// allocations live in one dynamic `extern __shared__` array (launch with Kernel::shared_bytes);
// warp reductions are __shfl_xor_sync butterflies.
// emit_host: an `extern "C"` C++ function `void NAME(void** args, long long first_block, long long
// last_block)` that runs blocks [first, last) on the CPU: block-uniform statements once per block,
// then each stretch of the body between barriers (and warp reductions) as a loop over the block's
// threads, so barrier semantics hold; a warp reduction replays the butterfly lane by lane on the
// thread-local values, in the GPU's order. Throws Error for a kernel that breaks the IR's placement
// rules (a barrier or warp reduction inside a thread loop or branch, a warp reduction of anything
// but a one-float thread-local). Both take a whole module (several kernels, one prelude).
#pragma once

#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace fusetune::codegen {

std::string emit_cuda(const std::vector<Kernel>& kernels);
std::string emit_host(const std::vector<Kernel>& kernels);

// The C type a parameter of this dtype has in generated code ("float", "unsigned short", ...).
std::string storage_ctype(DType t);

}  // namespace fusetune::codegen
