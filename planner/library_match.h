// Which fusion groups a vendor library computes whole (the calls themselves: planner/
// library_call.h), and what such a call is modeled to cost.
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
//          [K, 1, 1] or [1, K, 1, 1] value), the residual of Y's shape, any Reshapes after all
//          of it (Y renamed). cuDNN's graph computes conv -> add bias -> add residual -> ReLU
//          with its upper clip. A pointwise convolution as the importer writes it
//          (importer/pointwise_conv.h: [Reshapes of X to] [N, C, S], MatMul(W [K, C], ·), the
//          epilogue with Reshapes anywhere, the bias [K, 1] or [1, K, 1, 1]) is the Conv of X
//          viewed as [N, C, S, 1] by W as [K, C, 1, 1]: the same bytes.
//   Attention: O = softmax(scale Q·Kᵀ [+ bias] [causal]) V, the attention core of planner/
//          attention.h whose every other node is a Reshape, Transpose or Slice viewing Q, K, V,
//          the bias or O in a buffer outside the group, or a Cast (planner/library_attention.h).
//          cuDNN's SDPA (its flash kernels) computes it from those views.
// Every value has one dtype (float32 or float16; attention float16 or bfloat16), the operands come
// from outside the group and the group exports Y alone. Guarantees: a match binds the call's
// parameters to the group's values in the order (A, B | X, W), [bias], [residual], Y.
// library_cost_us models the call as the device's roofline (the tensor peak of its type: float16,
// TF32; float32 on FP32) at a library's efficiencies, plus its setup per call (LibraryRates).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/graph.h"
#include "planner/device.h"
#include "planner/fusion.h"
#include "planner/library_call.h"

namespace fusetune::planner {

struct LibraryMatch {
  LibraryCall call;
  std::vector<int> inputs;  // A, B (X, W; Q, K, V: the buffers they lie in, one value perhaps thrice), [bias], [residual]
  int output = -1;          // Y
};

std::optional<LibraryMatch> match_library_call(const Graph& g, const FusionGroup& group);

// A library's attainable share of the device's peaks, and its setup per call beyond the launch
// overhead, on the scale of the generated forms' model: a choice between a library call and a
// generated kernel compares like with like.
struct LibraryRates {
  double compute_efficiency;
  double memory_efficiency;
  double setup_us;
};
// cuBLASLt: fitted on the second H200 lease's tune (bench/model_vs_measured; 33 calls in 11 BERT
// float16 groups of 0.8 to 5.9 MB, all bandwidth-bound on the model; fit 0.557 and 0.93 µs) so
// that the calls' measured / modeled ratio equals the generated candidates' (1.90 in the median).
// With cuDNN's rates the calls' ratio was 1.27: at equal modeled time they measured 1.5x faster,
// and the model picked a generated kernel in 5 of the 9 groups whose fastest measured candidate
// was cuBLASLt (regrets 44% to 85%). Its compute efficiency is the tensor pipe's sustained share
// (kTensorSustained; cuBLAS measured 0.77 of the peak on a 4096^3 product), and the fit,
// on float16 calls on one H200, stands for every device and type until another lease refits it.
inline constexpr LibraryRates kCublasLtRates{kTensorSustained, 0.55, 1.0};
// cuDNN (convolutions, attention): a tuned library kernel on a large problem at 70% of the peaks,
// 3 µs of setup. Its calls measured 3.4x these in the median, but one call's algorithms differed
// up to 10x (8 to 243 µs), and between cuDNN and a generated kernel the model chose the faster
// in 14 of the 16 groups where both ran (in the other two cuDNN measured 1.3x faster); kept.
inline constexpr LibraryRates kCudnnRates{0.7, 0.7, 3.0};

// Modeled time (microseconds) and DRAM bytes of the call on a device.
double library_cost_us(const LibraryCall& call, const Device& d, double launch_overhead_us, int64_t* dram_bytes);

}  // namespace fusetune::planner
