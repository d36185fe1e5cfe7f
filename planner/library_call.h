// Library calls: a contraction group that a vendor library runs whole, as one candidate among the
// generated ones (measurement, not prejudice, decides): cuBLASLt's matmul with its epilogue.
//
// match_library_call takes a graph and a fusion group and recognizes exactly
//   Y = [Relu]( MatMul(A, B) [+ bias] [+ residual] )
// (the two Adds in either order) where A is [batch..., m, k] and B is [k, n] (shared by every
// batch) or [batch..., k, n], bias is a vector along n ([n], or leading ones then n), residual has
// Y's shape, every value has one dtype (float32 or float16), A and B come from outside the group
// and the group exports Y alone. cuBLASLt computes D = act(A·B + C + bias) with C the residual,
// which is this pattern. Guarantees: a match binds the call's parameters to the group's values in
// the order A, B, [bias], [residual], Y; the JSON form (stored with kernels, plan bundles and
// measurement tasks) holds the shapes, the epilogue and the TF32 mode (a float32 call on TF32
// tensor cores, the `--precision tf32` policy's), nothing graph-specific, and parses back to an
// equal call. library_cost models the call as the device's roofline at a fixed efficiency (the
// tensor peak of its type: float16, TF32; float32 on FP32).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/graph.h"
#include "planner/device.h"
#include "planner/fusion.h"

namespace fusetune::planner {

struct LibraryCall {
  std::string library = "cublasLt";
  DType dtype = DType::kF32;
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  bool b_batched = false;  // B has A's batch dimensions; else one B serves every batch
  bool bias = false;
  bool residual = false;
  bool relu = false;
  bool tf32 = false;  // float32 on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32): the TF32 policy's

  std::string to_json() const;
  static LibraryCall from_json(const std::string& text);  // errors name the field
  bool operator==(const LibraryCall&) const = default;
};

struct LibraryMatch {
  LibraryCall call;
  std::vector<int> inputs;  // A, B, [bias], [residual]
  int output = -1;          // Y
};

std::optional<LibraryMatch> match_library_call(const Graph& g, const FusionGroup& group);

// The libraries a candidate names (TileConfig::library): cuBLASLt at the model's types, and for a
// float32 call under the TF32 precision policy (TilingOptions::tf32) cuBLASLt with TF32 tensor
// cores, as torch's allow_tf32 asks of cuBLAS.
inline constexpr const char* kCublasLt = "cublasLt";
inline constexpr const char* kCublasLtTf32 = "cublasLt-tf32";

// The call a candidate naming `library` makes of a match: the match's call with its TF32 mode set
// by the name. Empty, with `why` set, for a name that is neither library or for TF32 asked of a
// call that is not float32. (Whether the precision policy allows TF32 is the planner's question.)
std::optional<LibraryCall> library_call(const LibraryMatch& match, const std::string& library, std::string* why);

// Modeled time (microseconds) and DRAM bytes of the call on a device.
double library_cost_us(const LibraryCall& call, const Device& d, double launch_overhead_us, int64_t* dram_bytes);

}  // namespace fusetune::planner
