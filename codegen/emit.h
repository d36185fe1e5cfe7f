// Emitters: print a Kernel (codegen/kernel_ir.h) as source text.
//
// emit_cuda: an `extern "C" __global__` CUDA C++ kernel for NVRTC; the block's shared
// allocations live in one dynamic `extern __shared__` array (launch with Kernel::shared_bytes);
// warp reductions are __shfl_xor_sync butterflies; mma and ldmatrix are inline PTX
// (mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}, ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16),
// so a module holding them needs sm_80 or later.
// emit_host: an `extern "C"` C++ function `void NAME(void** args, long long first_block, long long
// last_block)` that runs blocks [first, last) on the CPU: block-uniform statements once per block,
// then each stretch of the body between barriers (and warp reductions) as a loop over the block's
// threads, so barrier semantics hold; a warp reduction replays the butterfly lane by lane on the
// thread-local values, in the GPU's order; an mma or ldmatrix runs its warp emulation (the
// fragment layout of kernel_ir.h), checking ldmatrix row addresses. Throws Error for a kernel that
// breaks the IR's placement rules (a barrier or warp-synchronous statement inside a thread loop or
// branch, a warp reduction of anything but a one-float thread-local, a fragment that is not a
// thread-local of the right type and size, an ldmatrix from anything but a 16-bit shared
// allocation). Both take a whole module (several kernels, one prelude).
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
