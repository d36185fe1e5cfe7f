// What the CUDA backend enqueues in place of a kernel launch for a library call
// (planner/library_call.h): backend/cublas_lt.h makes one for a GEMM, backend/cudnn.h for a
// convolution. Guarantees: enqueue() puts the whole call, epilogue included, on the stream with
// the parameters' device addresses in the call's order, and returns false on a launch error.
#pragma once

#include <cstdint>
#include <vector>

namespace fusetune::backend {

class GpuLibraryCall {
 public:
  virtual ~GpuLibraryCall() = default;
  // Enqueues the call on `stream` (a CUstream) with its parameters' device addresses, in order.
  virtual bool enqueue(void* stream, const std::vector<uint64_t>& args) = 0;
};

}  // namespace fusetune::backend
