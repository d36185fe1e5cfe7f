// cuBLASLt library calls for the CUDA backend (planner/library_call.h): a GEMM with its bias,
// residual and ReLU or GELU (cuBLASLt's GELU is the tanh approximation) epilogue, loaded at run time from libcublasLt so that binaries run where the
// library is absent (and say so when asked for it).
//
// Row-major Y[m×n] = A[m×k]·B[k×n] is computed as its column-major transpose Yᵀ = Bᵀ·Aᵀ, so no
// data is transposed: cuBLASLt's "A" is our B (n×k, leading dimension n), its "B" our A (k×m,
// leading dimension k), C and D are Yᵀ (n×m, leading dimension n); the bias epilogue adds a vector
// along D's rows, which is n; the residual is C with beta = 1. Batches are strided (B's stride 0
// when one B serves every batch). The algorithm is chosen once, when the call is made: the
// call's `algorithm`-th in the ranked list cuBLASLt's heuristic returns. Guarantees: make_cublaslt_call returns nullptr with the reason when the library
// cannot be loaded or has no algorithm for the problem; enqueue() returns false on a launch error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/gpu_library_call.h"
#include "planner/library_call.h"

namespace fusetune::backend {

// "cublasLt 130100" (its version number), or "" where the library cannot be loaded: part of a
// CUDA device's identity, since library calls are measured and shipped.
std::string cublaslt_version();

// `workspace` is a device address of `workspace_bytes` the call may use.
std::unique_ptr<GpuLibraryCall> make_cublaslt_call(const planner::LibraryCall& call, uint64_t workspace,
                                                 size_t workspace_bytes, std::string* why_not);

}  // namespace fusetune::backend
