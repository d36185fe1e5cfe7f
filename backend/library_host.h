// The host backend's library calls (planner/library_call.h): what cuBLASLt and cuDNN compute on
// the GPU, computed on the CPU so that plans and measurement tasks with library calls run and
// verify everywhere. Takes a call and the raw buffers bound to its parameters ((A, B) or (X, W),
// [bias], [residual], Y); computes a GEMM's Y = [Relu | GELU](A·B [+ bias] [+ residual]) (GELU's
// tanh approximation, as cuBLASLt's epilogue computes it) or a
// convolution's Y = [Relu, clipped at relu_max](conv(X, W) [+ bias] [+ residual]) with float
// accumulation (as both libraries' float32 compute type does), rows or output channels spread over
// `workers` threads; and an attention call's O = softmax(scale Q·Kᵀ [+ bias] [causal]) V from
// the strided operands ((Q, K, V), [bias], O), in float, one (batch, head, query) row at a time. float16 data is converted to and from float. A TF32 call
// (LibraryCall::tf32) rounds each operand to TF32 first.
#pragma once

#include "planner/library_call.h"

namespace fusetune::backend {

void run_library_call_host(const planner::LibraryCall& call, void* const* args, int workers);

}  // namespace fusetune::backend
