// Library calls: a group that a vendor library runs whole, as one candidate among the generated
// ones (measurement, not prejudice, decides): cuBLASLt's matmul with its epilogue, cuDNN's
// convolution with its epilogue.
//
// match_library_call takes a graph and a fusion group and recognizes exactly one of
//   GEMM:  Y = [Relu | GELU]( MatMul(A, B) [+ bias] [+ residual] )
//          (the two Adds in either order) where A is [batch..., m, k] and B is [k, n] (shared by
//          every batch) or [batch..., k, n], bias is a vector along n ([n], or leading ones then n),
//          residual has Y's shape, and GELU is the tanh approximation in any spelling
//          (planner/activation.h; the exact, erf-based GELU is not what cuBLASLt computes and is
//          left to generated code), with Reshapes anywhere after the product that keep its last
//          extent (the same bytes: exporters view a 3-D activation as 2-D around the product).
//          cuBLASLt computes D = act(A·B + C + bias) with C the residual.
//   Conv:  Y = [Relu | Clip(0, max)]( Conv(X, W [, bias]) [+ bias] [+ residual] )
//          a 2-D convolution in NCHW (X [N, C, H, W], W [K, C / group, R, S], any pads, strides,
//          dilations and group), the bias a vector along K (Conv's third input, or an Add of a
//          [K, 1, 1] or [1, K, 1, 1] value), the residual of Y's shape. cuDNN's graph computes
//          conv -> add bias -> add residual -> ReLU with its upper clip.
//   Attention: O = softmax(scale Q·Kᵀ [+ bias] [causal]) V, the attention core of planner/
//          attention.h whose every other node is a Reshape, Transpose or Slice viewing Q, K, V,
//          the bias or O in a buffer outside the group, or a Cast (planner/library_attention.h).
//          cuDNN's SDPA (its flash kernels) computes it from those views.
// Every value has one dtype (float32 or float16; attention float16 or bfloat16), the operands come
// from outside the group and the group exports Y alone. Guarantees: a match binds the call's parameters to the group's values in
// the order (A, B | X, W), [bias], [residual], Y; the JSON form (stored with kernels, plan bundles
// and measurement tasks) holds the operation, the shapes, the epilogue and the TF32 mode (a
// float32 call on TF32 tensor cores, the `--precision tf32` policy's), nothing graph-specific, and
// parses back to an equal call. library_cost_us models the call as the device's roofline at a
// fixed efficiency (the tensor peak of its type: float16, TF32; float32 on FP32).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/graph.h"
#include "planner/device.h"
#include "planner/fusion.h"

namespace fusetune::planner {

enum class LibraryOp : uint8_t { kGemm, kConv, kAttention };

// A 2-D convolution's geometry in NCHW (the batch is LibraryCall::batch): X [batch, c, h, w],
// W [k, c / groups, r, s], Y [batch, k, p(), q()]; pads in ONNX's order (h begin, w begin, h end,
// w end).
struct ConvShape {
  int64_t c = 0, h = 0, w = 0, k = 0, r = 0, s = 0, groups = 1;
  std::array<int64_t, 2> strides{1, 1}, dilations{1, 1};
  std::array<int64_t, 4> pads{0, 0, 0, 0};
  int64_t p() const { return (h + pads[0] + pads[2] - dilations[0] * (r - 1) - 1) / strides[0] + 1; }
  int64_t q() const { return (w + pads[1] + pads[3] - dilations[1] * (s - 1) - 1) / strides[1] + 1; }
  bool operator==(const ConvShape&) const = default;
};

// Where an attention operand lies in its buffer (planner/strided_view.h): an offset and strides in
// elements over [batch, heads, rows, width] (K as [batch, heads, keys, head]; the bias over
// [batch, heads, queries, keys], 0 along an axis it is broadcast over).
struct OperandLayout {
  int64_t offset = 0;
  std::array<int64_t, 4> strides{};
  bool operator==(const OperandLayout&) const = default;
};

// Scaled dot-product attention (the batch is LibraryCall::batch): Q [batch, heads, queries, head],
// K [batch, heads, keys, head], V [batch, heads, keys, value_head], O [batch, heads, queries,
// value_head], each where its layout says; the bias (LibraryCall::bias) added to the scaled scores.
struct AttentionShape {
  int64_t heads = 0, queries = 0, keys = 0, head = 0, value_head = 0;
  float scale = 1.0f;
  bool causal = false;  // query i sees the keys j <= i + keys - queries (aligned at the bottom right)
  OperandLayout q, k, v, o, bias;
  bool operator==(const AttentionShape&) const = default;
};

struct LibraryCall {
  std::string library = "cublasLt";
  LibraryOp op = LibraryOp::kGemm;
  DType dtype = DType::kF32;
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;  // GEMM: Y [batch..., m, n] = A [batch..., m, k] · B
  bool b_batched = false;       // GEMM: B has A's batch dimensions; else one B serves every batch
  ConvShape conv;               // Conv: the geometry
  AttentionShape attention;     // Attention: the geometry and the operands' layouts
  bool bias = false;
  bool residual = false;
  bool relu = false;
  float relu_max = 0.0f;  // > 0: the ReLU also clips at this value (Clip(0, max), ReLU6); Conv only
  bool gelu = false;      // GEMM: GELU's tanh approximation last (cuBLASLt's GELU epilogue); not with relu
  bool tf32 = false;  // float32 on TF32 tensor cores (the TF32 policy's, as torch's allow_tf32)
  int algorithm = 0;  // the library's ranked choice for the problem: 0 its heuristic's first, 1 the next...

  std::string to_json() const;
  static LibraryCall from_json(const std::string& text);  // errors name the field
  bool operator==(const LibraryCall&) const = default;
};

struct LibraryMatch {
  LibraryCall call;
  std::vector<int> inputs;  // A, B (X, W; Q, K, V: the buffers they lie in, one value perhaps thrice), [bias], [residual]
  int output = -1;          // Y
};

std::optional<LibraryMatch> match_library_call(const Graph& g, const FusionGroup& group);

// The libraries a candidate names (TileConfig::library): cuBLASLt for GEMMs and cuDNN for
// convolutions at the model's types, and for a float32 call under the TF32 precision policy
// (TilingOptions::tf32) each with TF32 tensor cores, as torch's allow_tf32 asks of cuBLAS and cuDNN.
inline constexpr const char* kCublasLt = "cublasLt";
inline constexpr const char* kCublasLtTf32 = "cublasLt-tf32";
inline constexpr const char* kCudnn = "cudnn";
inline constexpr const char* kCudnnTf32 = "cudnn-tf32";

// Whether a library name asks for TF32 tensor cores.
bool tf32_library(const std::string& library);

// Whether a library name (either mode) runs an operation.
bool library_runs(const std::string& library, LibraryOp op);

// The libraries a `--libraries` list allows: "all" (cuBLASLt and cuDNN), "none", or a comma list
// of kCublasLt and kCudnn (each allows its TF32 mode too, under the policy). Throws, naming the
// entry, for anything else.
std::set<std::string> library_set(const std::string& list);

// The library that runs an operation: kCublasLt for a GEMM, kCudnn for a convolution and attention.
std::string library_family(LibraryOp op);

// The library candidate's name for a match: its operation's library, in TF32 mode when `tf32` (the
// policy) is on and the call is float32.
std::string library_for(const LibraryMatch& match, bool tf32);

// The call a candidate naming `library` and `algorithm` makes of a match: the match's call with its
// library, TF32 mode (by the name) and ranked algorithm set. Empty, with `why` set, for a name that
// is not its operation's library, a negative algorithm, or TF32 asked of a call that is not
// float32. (Whether the precision policy allows TF32 is the planner's question.)
std::optional<LibraryCall> library_call(const LibraryMatch& match, const std::string& library, int algorithm,
                                        std::string* why);

// Modeled time (microseconds) and DRAM bytes of the call on a device.
double library_cost_us(const LibraryCall& call, const Device& d, double launch_overhead_us, int64_t* dram_bytes);

}  // namespace fusetune::planner
