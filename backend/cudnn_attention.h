// cuDNN's scaled dot-product attention for the CUDA backend (planner/library_call.h's attention
// calls): the header-only cudnn-frontend's SDPA node (cuDNN's flash kernels) over the call's
// strided operands, with libcudnn opened at run time (backend/cudnn.h) and handed to the frontend.
//
// The graph: Q, K, V and O as the call lays them out (dimensions [batch, heads, rows, width] and
// strides; each operand's offset added to its buffer's address when enqueued), float16 or
// bfloat16 in and out, float intermediates and arithmetic, the scale, the bias tensor (strides 0
// where it is broadcast) and the causal mask (top-left aligned where queries and keys are as many,
// bottom-right otherwise), no statistics (inference). check_cudnn_attention asks the frontend
// whether the graph lies within cuDNN's support surface for a compute capability, which needs the
// library but no device. make_cudnn_attention_call builds the operation graph on the device's
// handle, takes cuDNN's heuristic plans (mode A), keeps those the device supports and builds the
// `algorithm`-th, refusing one that needs more than the workspace given. Guarantees: both return
// the frontend's reason when it refuses; enqueue() returns false on an execution error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/gpu_library_call.h"
#include "planner/library_call.h"

namespace fusetune::backend {

// Whether this build has the frontend (third_party/cudnn-frontend, fetched by scripts/setup.sh).
bool cudnn_frontend_built();

// "" when cuDNN (loaded from `library`, a dlopen handle of libcudnn) supports the call on compute
// capability `sm` (90 for sm_90), else the reason.
std::string check_cudnn_attention(const planner::LibraryCall& call, void* library, int sm);

// `handle` is a cudnnHandle_t of the current context.
std::unique_ptr<GpuLibraryCall> make_cudnn_attention_call(const planner::LibraryCall& call, void* library, void* handle,
                                                          int sm, uint64_t workspace, size_t workspace_bytes,
                                                          std::string* why_not);

}  // namespace fusetune::backend
