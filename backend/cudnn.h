// cuDNN library calls for the CUDA backend (planner/library_call.h): a 2-D convolution in NCHW
// with its bias, residual and (clipped) ReLU epilogue (attention: backend/cudnn_attention.h), through cuDNN 9's graph API, loaded at run
// time from libcudnn so that binaries run where the library is absent (and say so when asked for it).
//
// The call is built once, when the module is loaded: an operation graph conv -> add bias -> add
// residual -> ReLU (upper clip) over NCHW tensors with float intermediates, and the engine
// configurations cuDNN's heuristics propose for it (mode A, then its fallback list), in their order.
// A configuration passes when its numerics keep the call's precision (a float32 call without the
// TF32 policy takes no tensor-core engine; no call takes one that converts its inputs down or
// reduces in reduced precision), it needs no more than the workspace given, and its execution plan
// finalizes; each engine counts once, and the call takes the `algorithm`-th that passes. Where no
// engine at all runs the fused graph (the fused engines favour NHWC and 16-bit data), the
// convolution alone is planned the same way and the epilogue follows as cuDNN's own tensor
// addition and activation, in place on Y: the host's arithmetic (backend/library_host.h), except
// that float16 data is rounded after each step rather than once (a few units in the last place).
// Guarantees: make_cudnn_call returns nullptr with the reason when the library cannot be loaded or
// no configuration passes; enqueue() returns false on a launch error or a misaligned operand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/gpu_library_call.h"
#include "planner/library_call.h"

namespace fusetune::backend {

// "cudnn 91900" (its version number), or "" where the library cannot be loaded: part of a CUDA
// device's identity, since library calls are measured and shipped.
std::string cudnn_version();

// The dlopen handle of libcudnn (opened once), or nullptr with the reason.
void* cudnn_library(std::string* why_not);

// `call` is a convolution (LibraryOp::kConv) or an attention (backend/cudnn_attention.h);
// `owner` who makes the call (a CUDA backend: the call uses the cuDNN handle made for it, on the
// device whose context is current; the owner never runs two calls at once), `sm` the device's
// compute capability (90 for sm_90); `workspace` a device address of `workspace_bytes` the call
// may use.
// Destroys the cuDNN handle made for `owner` (its context current, and no call made with it may
// run again), if one was made: a CUDA backend does this before it releases its device's context.
void release_cudnn_handle(const void* owner);

std::unique_ptr<GpuLibraryCall> make_cudnn_call(const planner::LibraryCall& call, const void* owner, int sm,
                                                uint64_t workspace, size_t workspace_bytes, std::string* why_not);

}  // namespace fusetune::backend
