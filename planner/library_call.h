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
// measurement tasks) holds the shapes and the epilogue, nothing graph-specific, and parses back
// to an equal call. library_cost models the call as the device's roofline at a fixed efficiency.
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

// Modeled time (microseconds) and DRAM bytes of the call on a device.
double library_cost_us(const LibraryCall& call, const Device& d, double launch_overhead_us, int64_t* dram_bytes);

}  // namespace fusetune::planner
