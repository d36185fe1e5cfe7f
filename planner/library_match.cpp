#include "planner/library_match.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <span>

#include "core/error.h"
#include "planner/activation.h"
#include "planner/library_attention.h"

namespace fusetune::planner {

namespace {

// Whether `v` is written by a node of the group (a library reads its operands from memory).
bool made_inside(const Graph& g, const FusionGroup& group, int v) {
  for (int id : group.nodes) {
    for (int out : g.nodes()[static_cast<size_t>(id)].outputs) {
      if (out == v) return true;
    }
  }
  return false;
}

// The epilogue both libraries apply to the product (the output of the group's first node, whose
// operands are match.inputs), in the group's other nodes: Adds of a bias (a value `is_bias` accepts by
// its shape and the shape it meets; at most one, `bias` being one already bound) and of a residual of the product's
// shape, in either order, then a ReLU last; for a convolution, or a Clip(0, max); for a GEMM, or
// the rest of the group computing GELU's tanh approximation, and Reshapes anywhere that keep the
// rows (the last extent: the library writes the same bytes in the same order, and a bias along the
// rows stays one); for both, any Reshapes after the rest (the output renamed: a pointwise
// convolution's product reshaped back to an image, an image flattened for a product that follows),
// and with `views_anywhere` Reshapes anywhere (a pointwise convolution's: its bias and residual
// are checked on the shapes they meet, the bytes stay in order). Completes `match` (the epilogue's flags, inputs [bias], [residual], the output)
// and returns false for anything else, or where an operand is computed inside the group (the
// library reads it from memory).
bool match_epilogue(const Graph& g, const FusionGroup& group, int bias,
                    const std::function<bool(const Shape& bias, const Shape& at)>& is_bias, LibraryMatch& match,
                    bool views_anywhere = false) {
  LibraryCall& c = match.call;
  const bool gemm = c.op == LibraryOp::kGemm;
  c.bias = bias >= 0;
  const auto node = [&](size_t i) -> const Node& { return g.nodes()[static_cast<size_t>(group.nodes[i])]; };
  int current = node(0).outputs[0], residual = -1;
  const int64_t rows = g.value(current).shape.back();
  size_t end = group.nodes.size();  // the activation ends before the group's trailing Reshapes
  while (end > 1 && node(end - 1).op == "Reshape") --end;
  // A Reshape that moves the result's bytes nowhere: any of the trailing ones (the library's
  // output, contiguous, renamed), and for a GEMM one that keeps the rows anywhere.
  const auto view = [&](const Node& n, size_t i) {
    return n.op == "Reshape" && n.inputs[0] == current &&
           (i >= end || views_anywhere || (gemm && g.value(n.outputs[0]).shape.back() == rows));
  };
  for (size_t i = 1; i < group.nodes.size(); ++i) {
    const Node& n = node(i);
    if (view(n, i)) {
      current = n.outputs[0];
      continue;
    }
    if (i >= end) return false;
    // GELU's nodes are a tail of their own (Adds among them are no bias or residual).
    const int act_out = node(end - 1).outputs[0];
    if (gemm && !c.relu && computes_tanh_gelu(g, std::span(group.nodes).subspan(i, end - i), current, act_out)) {
      c.gelu = true;
      current = act_out;
      i = end - 1;
      continue;
    }
    if (!c.relu && !c.gelu && i + 1 == end && n.inputs[0] == current && (n.op == "Relu" || (!gemm && n.op == "Clip"))) {
      if (n.op == "Clip") {
        const float lo = n.attrs.f("min", -std::numeric_limits<float>::infinity());
        const float hi = n.attrs.f("max", std::numeric_limits<float>::infinity());
        if (lo != 0.0f || !(hi > 0.0f)) return false;
        c.relu_max = std::isinf(hi) ? 0.0f : hi;
      }
      c.relu = true;
      current = n.outputs[0];
      continue;
    }
    if (n.op != "Add" || c.relu || c.gelu) return false;
    const int other = n.inputs[0] == current ? n.inputs[1] : n.inputs[1] == current ? n.inputs[0] : -1;
    if (other < 0 || other == current) return false;
    const Value& o = g.value(other);
    const Shape& shape = g.value(current).shape;
    if (o.dtype != c.dtype || g.value(n.outputs[0]).shape != shape) return false;
    if (is_bias(o.shape, shape) && !c.bias) {
      c.bias = true;
      bias = other;
    } else if (o.shape == shape && !c.residual) {
      c.residual = true;
      residual = other;
    } else {
      return false;
    }
    current = n.outputs[0];
  }
  // The library writes Y in the call's type (a GELU's Casts to and from float are taken as exact).
  if (group.outputs[0] != current || g.value(current).dtype != c.dtype) return false;
  for (int v : {match.inputs[0], match.inputs[1], bias, residual}) {
    if (v >= 0 && made_inside(g, group, v)) return false;
  }
  if (c.bias) match.inputs.push_back(bias);
  if (c.residual) match.inputs.push_back(residual);
  match.output = current;
  return true;
}

std::optional<LibraryMatch> match_gemm(const Graph& g, const FusionGroup& group) {
  // The product, two Adds and GELU's eight or so nodes (a spelling with Casts takes a few more).
  if (group.nodes.empty() || group.nodes.size() > 16 || group.outputs.size() != 1) return std::nullopt;
  const auto node = [&](size_t i) -> const Node& { return g.nodes()[static_cast<size_t>(group.nodes[i])]; };
  const Node& mm = node(0);
  if (mm.op != "MatMul") return std::nullopt;
  const Value& a = g.value(mm.inputs[0]);
  const Value& b = g.value(mm.inputs[1]);
  const Value& y0 = g.value(mm.outputs[0]);
  const DType dt = y0.dtype;
  if ((dt != DType::kF32 && dt != DType::kF16) || a.dtype != dt || b.dtype != dt) return std::nullopt;
  if (a.shape.size() < 2 || b.shape.size() < 2) return std::nullopt;
  LibraryMatch match;
  LibraryCall& c = match.call;
  c.dtype = dt;
  c.m = a.shape[a.shape.size() - 2];
  c.k = a.shape.back();
  c.n = b.shape.back();
  if (b.shape[b.shape.size() - 2] != c.k) return std::nullopt;
  for (size_t d = 0; d + 2 < a.shape.size(); ++d) c.batch *= a.shape[d];
  if (b.shape.size() == 2) {
    c.b_batched = false;
  } else if (b.shape.size() == a.shape.size() &&
             std::equal(b.shape.begin(), b.shape.end() - 2, a.shape.begin())) {
    c.b_batched = c.batch > 1;
  } else {
    return std::nullopt;
  }
  if (y0.shape.size() != std::max(a.shape.size(), b.shape.size())) return std::nullopt;
  match.inputs = {mm.inputs[0], mm.inputs[1]};
  // A bias is a vector along n ([n], or leading ones then n).
  const auto along_n = [&](const Shape& s, const Shape&) {
    return !s.empty() && s.back() == c.n && std::all_of(s.begin(), s.end() - 1, [](int64_t d) { return d == 1; });
  };
  if (!match_epilogue(g, group, -1, along_n, match)) return std::nullopt;
  return match;
}

// Whether `bias`, broadcast against a value of shape `at` (NCHW or [N, K, S]), is a vector along
// its channel axis (1) of k entries: [k, 1...] or [1, k, 1...], its other extents 1.
bool per_channel(const Shape& bias, const Shape& at, int64_t k) {
  if (bias.size() > at.size() || at.size() - bias.size() > 1) return false;
  const size_t lead = at.size() - bias.size();
  for (size_t i = 0; i < bias.size(); ++i) {
    if (bias[i] != (lead + i == 1 ? k : 1)) return false;
  }
  return true;
}

// A call of cuDNN's convolution in `dt` of images `x` [N, C, H, W] by k filters of r x s (one
// group, strides and dilations 1, no pads until the caller sets them), its epilogue still to match.
LibraryMatch conv_call(DType dt, const Shape& x, int64_t k, int64_t r, int64_t s) {
  LibraryMatch match;
  LibraryCall& c = match.call;
  c.op = LibraryOp::kConv;
  c.library = library_family(c.op);
  c.dtype = dt;
  c.batch = x[0];
  c.conv.c = x[1];
  c.conv.h = x[2];
  c.conv.w = x[3];
  c.conv.k = k;
  c.conv.r = r;
  c.conv.s = s;
  return match;
}

std::optional<LibraryMatch> match_conv(const Graph& g, const FusionGroup& group) {
  // The convolution, two Adds, an activation and Reshapes of the result.
  if (group.nodes.empty() || group.nodes.size() > 8 || group.outputs.size() != 1) return std::nullopt;
  const Node& conv = g.nodes()[static_cast<size_t>(group.nodes[0])];
  if (conv.op != "Conv") return std::nullopt;
  const Value& x = g.value(conv.inputs[0]);
  const Value& w = g.value(conv.inputs[1]);
  const Value& y0 = g.value(conv.outputs[0]);
  const DType dt = y0.dtype;
  if ((dt != DType::kF32 && dt != DType::kF16) || x.dtype != dt || w.dtype != dt) return std::nullopt;
  if (x.shape.size() != 4 || w.shape.size() != 4 || y0.shape.size() != 4) return std::nullopt;
  LibraryMatch match = conv_call(dt, x.shape, w.shape[0], w.shape[2], w.shape[3]);
  const LibraryCall& c = match.call;
  ConvShape& cs = match.call.conv;
  cs.groups = conv.attrs.i("group", 1);
  const auto strides = conv.attrs.ints("strides", {1, 1}), dil = conv.attrs.ints("dilations", {1, 1}),
             pads = conv.attrs.ints("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4 || cs.groups < 1 || cs.c % cs.groups != 0 ||
      cs.k % cs.groups != 0 || w.shape[1] != cs.c / cs.groups) {
    return std::nullopt;
  }
  std::copy(strides.begin(), strides.end(), cs.strides.begin());
  std::copy(dil.begin(), dil.end(), cs.dilations.begin());
  std::copy(pads.begin(), pads.end(), cs.pads.begin());
  if (y0.shape != Shape{c.batch, cs.k, cs.p(), cs.q()}) return std::nullopt;
  match.inputs = {conv.inputs[0], conv.inputs[1]};
  int bias_value = -1;
  if (conv.inputs.size() > 2 && conv.inputs[2] != kNoValue) {
    const Value& b = g.value(conv.inputs[2]);
    if (b.dtype != dt || b.shape != Shape{cs.k}) return std::nullopt;
    bias_value = conv.inputs[2];
  }
  // A bias (besides Conv's own) is a vector along the output channels: [K, 1, 1] or [1, K, 1, 1].
  const auto along_k = [&](const Shape& s, const Shape& at) { return per_channel(s, at, cs.k); };
  if (!match_epilogue(g, group, bias_value, along_k, match)) return std::nullopt;
  return match;
}

// A pointwise convolution as the importer writes it (importer/pointwise_conv.h): Reshapes of an
// image X to [N, C, S] (or the group reads that value), MatMul(W [K, C], it), then the epilogue
// with Reshapes anywhere after the product (a bias along the channels where it meets the value:
// [K, 1] on the product, [1, K, 1, 1] after the Reshape back to the image). The product [N, K, S] is row-major NCHW, so cuDNN computes it as the 1 x 1
// convolution of X viewed as [N, C, S, 1] by W viewed as [K, C, 1, 1]: same bytes in and out.
std::optional<LibraryMatch> match_pointwise(const Graph& g, const FusionGroup& group) {
  if (group.nodes.empty() || group.nodes.size() > 10 || group.outputs.size() != 1) return std::nullopt;
  const auto node = [&](size_t i) -> const Node& { return g.nodes()[static_cast<size_t>(group.nodes[i])]; };
  size_t lead = 0;  // the image's Reshapes before the product
  while (lead < group.nodes.size() && node(lead).op == "Reshape") ++lead;
  if (lead == group.nodes.size() || node(lead).op != "MatMul") return std::nullopt;
  const Node& mm = node(lead);
  int x = mm.inputs[1];
  for (size_t i = lead; i-- > 0;) {
    if (node(i).outputs[0] != x) return std::nullopt;
    x = node(i).inputs[0];
  }
  const Value& w = g.value(mm.inputs[0]);
  const Value& b = g.value(mm.inputs[1]);
  const DType dt = g.value(mm.outputs[0]).dtype;
  if ((dt != DType::kF32 && dt != DType::kF16) || w.dtype != dt || b.dtype != dt || w.shape.size() != 2 ||
      b.shape.size() != 3 || b.shape[1] != w.shape[1]) {
    return std::nullopt;
  }
  LibraryMatch match = conv_call(dt, {b.shape[0], b.shape[1], b.shape[2], 1}, w.shape[0], 1, 1);
  match.inputs = {x, mm.inputs[0]};
  const int64_t k = w.shape[0];
  const auto along_k = [k](const Shape& s, const Shape& at) { return per_channel(s, at, k); };
  FusionGroup tail = group;  // from the product on
  tail.nodes.erase(tail.nodes.begin(), tail.nodes.begin() + static_cast<std::ptrdiff_t>(lead));
  if (!match_epilogue(g, tail, -1, along_k, match, true)) return std::nullopt;
  return match;
}

}  // namespace

std::optional<LibraryMatch> match_library_call(const Graph& g, const FusionGroup& group) {
  if (auto gemm = match_gemm(g, group)) return gemm;
  if (auto conv = match_conv(g, group)) return conv;
  if (auto pointwise = match_pointwise(g, group)) return pointwise;
  return match_attention_call(g, group);
}

double library_cost_us(const LibraryCall& c, const Device& d, double launch_overhead_us, int64_t* dram_bytes) {
  const int64_t esize = static_cast<int64_t>(dtype_size(c.dtype));
  int64_t elements = 0;
  double flops = 0;
  if (c.op == LibraryOp::kGemm) {
    elements = c.batch * c.m * c.k + (c.b_batched ? c.batch : 1) * c.k * c.n + c.batch * c.m * c.n * (c.residual ? 2 : 1) +
               (c.bias ? c.n : 0);
    flops = 2.0 * static_cast<double>(c.batch * c.m) * static_cast<double>(c.n * c.k);
  } else if (c.op == LibraryOp::kAttention) {
    const AttentionShape& a = c.attention;
    const int64_t rows = c.batch * a.heads;
    elements = rows * (a.queries * a.head + a.keys * (a.head + a.value_head) + a.queries * a.value_head) +
               (c.bias ? rows * a.queries * a.keys : 0);
    // Both products; a causal mask skips about half of them.
    flops = 2.0 * static_cast<double>(rows * a.queries) * static_cast<double>(a.keys * (a.head + a.value_head)) *
            (a.causal ? 0.5 : 1.0);
  } else {
    const ConvShape& cs = c.conv;
    const int64_t y = c.batch * cs.k * cs.p() * cs.q();
    elements = c.batch * cs.c * cs.h * cs.w + cs.k * (cs.c / cs.groups) * cs.r * cs.s + y * (c.residual ? 2 : 1) +
               (c.bias ? cs.k : 0);
    flops = 2.0 * static_cast<double>(y) * static_cast<double>((cs.c / cs.groups) * cs.r * cs.s);
  }
  const int64_t bytes = esize * elements;
  if (dram_bytes != nullptr) *dram_bytes = bytes;
  const double tflops = c.tf32 ? d.tf32_tensor_tflops : c.dtype == DType::kF32 ? d.fp32_tflops : d.fp16_tensor_tflops;
  const LibraryRates& r = library_family(c.op) == kCublasLt ? kCublasLtRates : kCudnnRates;
  const double compute_us = flops / (tflops * 1e6 * r.compute_efficiency);
  const double memory_us = static_cast<double>(bytes) / (d.dram_bandwidth_gbps * 1e3 * r.memory_efficiency);
  return std::max(compute_us, memory_us) + launch_overhead_us + r.setup_us;
}

}  // namespace fusetune::planner
