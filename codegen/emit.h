// The CUDA emitter: prints Kernels (codegen/kernel_ir.h) as one module of CUDA C++ text, the one
// text fusetune ships. NVRTC compiles it for the GPU; on a host without a GPU, the SIMT executor
// builds and runs this same text (simt/module.h, simt/prelude.h).
//
// The text starts with a small intrinsic layer guarded by `#ifndef FT_SIMT`, the only place where
// what the kernels use of CUDA is spelled out: FT_GLOBAL(T) parameters (`T* __restrict__`),
// FT_SHARED_MEMORY and FT_SHARED(T, name, offset, elements) views of the one dynamic
// `extern __shared__` array (launch with Kernel::shared_bytes), ft_load_float4 and ft_aligned16
// for 16-byte vector loads, and ft_mma_m16n8k16_{f16,bf16} and ft_ldmatrix_x{1,2,4}[_trans] as
// inline PTX (mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}, ldmatrix.sync.aligned.m8n8.xN
// [.trans].shared.b16; a module holding them needs sm_80 or later). The host prelude gives the same
// names host expansions. Then the shared helpers (emit_common.h), then one
// `extern "C" __global__` kernel per Kernel, which first defines its index type ft_i (int or
// long long, Kernel::index_bits; codegen/index_width.h): warp reductions are __shfl_xor_sync butterflies,
// barriers __syncthreads(), each statement on its own line (so that lines name statements in the
// executor's reports). Library calls print nothing: backends run them. Kernels are expected to
// have passed verify_ir (lower_group and pack_kernels run it).
#pragma once

#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace fusetune::codegen {

std::string emit_cuda(const std::vector<Kernel>& kernels);
// One generated kernel's definition as emit_cuda prints it (no prelude).
std::string emit_kernel(const Kernel& k);


// The C type a parameter of this dtype has in generated code ("float", "unsigned short", ...).
std::string storage_ctype(DType t);

}  // namespace fusetune::codegen
