// Library calls: a group that a vendor library runs whole, as one candidate among the generated
// ones (measurement, not prejudice, decides): cuBLASLt's matmul with its epilogue, cuDNN's
// convolution with its epilogue, cuDNN's scaled dot-product attention.
//
// LibraryCall describes one call: the operation, the shapes, the epilogue and the TF32 mode (a
// float32 call on TF32 tensor cores, the `--precision tf32` policy's), nothing graph-specific. Its
// JSON form is what kernels, plan bundles and measurement tasks store, and parses back to an
// equal call (errors name the field). Which groups a library computes, and what a call is
// modeled to cost, is planner/library_match.h; this header is all a backend that makes the
// calls needs (backend/cublas_lt.h, backend/cudnn.h), so the deployment runtime reads calls
// without the planner.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "core/dtype.h"

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

// The library candidate's name for a matched call (planner/library_match.h): its operation's
// library, in TF32 mode when `tf32` (the policy) is on and the call is float32.
std::string library_for(const LibraryCall& matched, bool tf32);

// The call a candidate naming `library` and `algorithm` makes of a matched call: it with its
// library, TF32 mode (by the name) and ranked algorithm set. Empty, with `why` set, for a name that
// is not its operation's library, a negative algorithm, or TF32 asked of a call that is not
// float32. (Whether the precision policy allows TF32 is the planner's question.)
std::optional<LibraryCall> library_call(const LibraryCall& matched, const std::string& library, int algorithm,
                                        std::string* why);

}  // namespace fusetune::planner
