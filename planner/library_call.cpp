#include "planner/library_call.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <span>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "planner/activation.h"
#include "planner/library_attention.h"

namespace fusetune::planner {

using nlohmann::json;

namespace {

std::string op_name(LibraryOp op) {
  return op == LibraryOp::kConv ? "conv" : op == LibraryOp::kAttention ? "attention" : "gemm";
}

}  // namespace

std::string LibraryCall::to_json() const {
  json j{{"library", library}, {"op", op_name(op)}, {"dtype", std::string(dtype_name(dtype))},
         {"batch", batch}, {"bias", bias}, {"residual", residual}, {"relu", relu}, {"gelu", gelu}, {"tf32", tf32},
         {"algorithm", algorithm}};
  if (op == LibraryOp::kGemm) {
    j.update({{"m", m}, {"n", n}, {"k", k}, {"b_batched", b_batched}});
  } else if (op == LibraryOp::kAttention) {
    const AttentionShape& a = attention;
    const auto layout = [](const OperandLayout& l) { return json{{"offset", l.offset}, {"strides", l.strides}}; };
    j["attention"] = {{"heads", a.heads}, {"queries", a.queries}, {"keys", a.keys}, {"head", a.head},
                      {"value_head", a.value_head}, {"scale", a.scale}, {"causal", a.causal}, {"q", layout(a.q)},
                      {"k", layout(a.k)}, {"v", layout(a.v)}, {"o", layout(a.o)}, {"bias_layout", layout(a.bias)}};
  } else {
    j["conv"] = {{"c", conv.c},           {"h", conv.h},         {"w", conv.w},
                 {"k", conv.k},           {"r", conv.r},         {"s", conv.s},
                 {"groups", conv.groups}, {"strides", conv.strides}, {"dilations", conv.dilations},
                 {"pads", conv.pads}};
    j["relu_max"] = relu_max;
  }
  return j.dump();
}

LibraryCall LibraryCall::from_json(const std::string& text) {
  LibraryCall c;
  try {
    const json j = json::parse(text);
    c.library = j.at("library").get<std::string>();
    const std::string op = j.value("op", "gemm");  // absent from calls written before convolutions
    check(op == "gemm" || op == "conv" || op == "attention", "library call: unknown op '", op, "'");
    c.op = op == "conv" ? LibraryOp::kConv : op == "attention" ? LibraryOp::kAttention : LibraryOp::kGemm;
    check(library_runs(c.library, c.op), "library call: library '", c.library, "' does not run op '", op, "'");
    const std::string dt = j.at("dtype").get<std::string>();
    if (c.op == LibraryOp::kAttention) {
      check(dt == "float16" || dt == "bfloat16", "library call: attention dtype '", dt, "' is not float16 or bfloat16");
    } else {
      check(dt == "float32" || dt == "float16", "library call: dtype '", dt, "' is not float32 or float16");
    }
    c.dtype = dt == "float32" ? DType::kF32 : dt == "bfloat16" ? DType::kBF16 : DType::kF16;
    c.batch = j.at("batch").get<int64_t>();
    c.bias = j.at("bias").get<bool>();
    c.residual = j.at("residual").get<bool>();
    c.relu = j.at("relu").get<bool>();
    c.gelu = j.value("gelu", false);  // absent from calls written before the GELU epilogue
    c.tf32 = j.value("tf32", false);  // absent from calls written before the TF32 policy
    c.algorithm = j.value("algorithm", 0);  // absent from calls written before ranked algorithms
    if (c.op == LibraryOp::kGemm) {
      c.m = j.at("m").get<int64_t>();
      c.n = j.at("n").get<int64_t>();
      c.k = j.at("k").get<int64_t>();
      c.b_batched = j.at("b_batched").get<bool>();
    } else if (c.op == LibraryOp::kAttention) {
      const json& v = j.at("attention");
      AttentionShape& a = c.attention;
      for (auto [field, name] : {std::pair{&a.heads, "heads"}, {&a.queries, "queries"}, {&a.keys, "keys"},
                                 {&a.head, "head"}, {&a.value_head, "value_head"}}) {
        *field = v.at(name).get<int64_t>();
      }
      a.scale = v.at("scale").get<float>();
      a.causal = v.at("causal").get<bool>();
      for (auto [field, name] : {std::pair{&a.q, "q"}, {&a.k, "k"}, {&a.v, "v"}, {&a.o, "o"}, {&a.bias, "bias_layout"}}) {
        field->offset = v.at(name).at("offset").get<int64_t>();
        field->strides = v.at(name).at("strides").get<std::array<int64_t, 4>>();
      }
    } else {
      const json& v = j.at("conv");
      ConvShape& cs = c.conv;
      for (auto [field, name] : {std::pair{&cs.c, "c"}, {&cs.h, "h"}, {&cs.w, "w"}, {&cs.k, "k"}, {&cs.r, "r"},
                                 {&cs.s, "s"}, {&cs.groups, "groups"}}) {
        *field = v.at(name).get<int64_t>();
      }
      cs.strides = v.at("strides").get<std::array<int64_t, 2>>();
      cs.dilations = v.at("dilations").get<std::array<int64_t, 2>>();
      cs.pads = v.at("pads").get<std::array<int64_t, 4>>();
      c.relu_max = j.at("relu_max").get<float>();
    }
  } catch (const json::exception& e) {
    fail("library call: ", e.what());
  }
  check(c.batch >= 1, "library call: batch must be positive");
  check(c.algorithm >= 0, "library call: algorithm ", c.algorithm, " is negative");
  if (c.op == LibraryOp::kGemm) {
    check(c.m >= 1 && c.n >= 1 && c.k >= 1, "library call: dimensions must be positive");
  } else if (c.op == LibraryOp::kAttention) {
    const AttentionShape& a = c.attention;
    check(a.heads >= 1 && a.queries >= 1 && a.keys >= 1 && a.head >= 1 && a.value_head >= 1,
          "library call: attention extents must be positive");
    check(std::isfinite(a.scale), "library call: attention scale ", a.scale, " is not finite");
    for (const OperandLayout* l : {&a.q, &a.k, &a.v, &a.o, &a.bias}) {
      check(l->offset >= 0 && std::all_of(l->strides.begin(), l->strides.end(), [](int64_t x) { return x >= 0; }),
            "library call: an attention operand's offset or stride is negative");
    }
    check(!c.residual && !c.relu && !c.gelu && !c.tf32, "library call: attention takes no residual, activation or TF32");
  } else {
    const ConvShape& cs = c.conv;
    check(cs.c >= 1 && cs.h >= 1 && cs.w >= 1 && cs.k >= 1 && cs.r >= 1 && cs.s >= 1 && cs.groups >= 1,
          "library call: convolution extents must be positive");
    check(cs.c % cs.groups == 0 && cs.k % cs.groups == 0, "library call: ", cs.groups,
          " groups do not divide the channels (", cs.c, " in, ", cs.k, " out)");
    check(std::all_of(cs.strides.begin(), cs.strides.end(), [](int64_t v) { return v >= 1; }) &&
              std::all_of(cs.dilations.begin(), cs.dilations.end(), [](int64_t v) { return v >= 1; }) &&
              std::all_of(cs.pads.begin(), cs.pads.end(), [](int64_t v) { return v >= 0; }),
          "library call: strides and dilations must be positive, pads not negative");
    check(cs.p() >= 1 && cs.q() >= 1, "library call: the convolution's output is empty");
    check(c.relu_max >= 0.0f && (c.relu_max == 0.0f || c.relu), "library call: relu_max ", c.relu_max,
          " without a ReLU or negative");
  }
  check(!c.gelu || (c.op == LibraryOp::kGemm && !c.relu), "library call: GELU ",
        c.relu ? "with a ReLU" : "for a convolution (GEMMs only)");
  check(!c.tf32 || c.dtype == DType::kF32, "library call: TF32 for a ", dtype_name(c.dtype), " call (float32 only)");
  return c;
}

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
// operands are match.inputs), in the group's other nodes: Adds of a bias (a value `is_bias` accepts
// the shape of; at most one, `bias` being one already bound) and of a residual of the product's
// shape, in either order, then a ReLU last; for a convolution, or a Clip(0, max); for a GEMM, or
// the rest of the group computing GELU's tanh approximation, and Reshapes anywhere that keep the
// rows (the last extent: the library writes the same bytes in the same order, and a bias along the
// rows stays one). Completes `match` (the epilogue's flags, inputs [bias], [residual], the output)
// and returns false for anything else, or where an operand is computed inside the group (the
// library reads it from memory).
bool match_epilogue(const Graph& g, const FusionGroup& group, int bias, const std::function<bool(const Shape&)>& is_bias,
                    LibraryMatch& match) {
  LibraryCall& c = match.call;
  const bool gemm = c.op == LibraryOp::kGemm;
  c.bias = bias >= 0;
  const auto node = [&](size_t i) -> const Node& { return g.nodes()[static_cast<size_t>(group.nodes[i])]; };
  int current = node(0).outputs[0], residual = -1;
  const int64_t rows = g.value(current).shape.back();
  // A Reshape that moves the product's bytes nowhere.
  const auto view = [&](const Node& n) {
    return gemm && n.op == "Reshape" && n.inputs[0] == current && g.value(n.outputs[0]).shape.back() == rows;
  };
  size_t end = group.nodes.size();  // the activation ends before the group's trailing Reshapes
  while (gemm && end > 1 && node(end - 1).op == "Reshape") --end;
  for (size_t i = 1; i < group.nodes.size(); ++i) {
    const Node& n = node(i);
    if (view(n)) {
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
    if (is_bias(o.shape) && !c.bias) {
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
  const auto along_n = [&](const Shape& s) {
    return !s.empty() && s.back() == c.n && std::all_of(s.begin(), s.end() - 1, [](int64_t d) { return d == 1; });
  };
  if (!match_epilogue(g, group, -1, along_n, match)) return std::nullopt;
  return match;
}

std::optional<LibraryMatch> match_conv(const Graph& g, const FusionGroup& group) {
  if (group.nodes.empty() || group.nodes.size() > 4 || group.outputs.size() != 1) return std::nullopt;
  const Node& conv = g.nodes()[static_cast<size_t>(group.nodes[0])];
  if (conv.op != "Conv") return std::nullopt;
  const Value& x = g.value(conv.inputs[0]);
  const Value& w = g.value(conv.inputs[1]);
  const Value& y0 = g.value(conv.outputs[0]);
  const DType dt = y0.dtype;
  if ((dt != DType::kF32 && dt != DType::kF16) || x.dtype != dt || w.dtype != dt) return std::nullopt;
  if (x.shape.size() != 4 || w.shape.size() != 4 || y0.shape.size() != 4) return std::nullopt;
  LibraryMatch match;
  LibraryCall& c = match.call;
  c.op = LibraryOp::kConv;
  c.library = library_family(c.op);
  c.dtype = dt;
  c.batch = x.shape[0];
  ConvShape& cs = c.conv;
  cs.c = x.shape[1];
  cs.h = x.shape[2];
  cs.w = x.shape[3];
  cs.k = w.shape[0];
  cs.r = w.shape[2];
  cs.s = w.shape[3];
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
  const auto along_k = [&](const Shape& s) { return s == Shape{cs.k, 1, 1} || s == Shape{1, cs.k, 1, 1}; };
  if (!match_epilogue(g, group, bias_value, along_k, match)) return std::nullopt;
  return match;
}

}  // namespace

std::optional<LibraryMatch> match_library_call(const Graph& g, const FusionGroup& group) {
  if (auto gemm = match_gemm(g, group)) return gemm;
  if (auto conv = match_conv(g, group)) return conv;
  return match_attention_call(g, group);
}

namespace {

// Each library: the operation it runs and its names at the model's types and in TF32 mode.
struct LibraryNames {
  LibraryOp op;
  const char* name;
  const char* tf32_name;
};
constexpr LibraryNames kLibraries[] = {{LibraryOp::kGemm, kCublasLt, kCublasLtTf32},
                                       {LibraryOp::kConv, kCudnn, kCudnnTf32},
                                       {LibraryOp::kAttention, kCudnn, nullptr}};  // float16 and bfloat16 only

const LibraryNames& names_of(LibraryOp op) {
  for (const LibraryNames& l : kLibraries) {
    if (l.op == op) return l;
  }
  fail("library call: no library runs op ", static_cast<int>(op));
}

}  // namespace

bool tf32_library(const std::string& library) {
  return std::any_of(std::begin(kLibraries), std::end(kLibraries),
                     [&](const LibraryNames& l) { return l.tf32_name != nullptr && library == l.tf32_name; });
}

bool library_runs(const std::string& library, LibraryOp op) {
  const LibraryNames& l = names_of(op);
  return library == l.name || (l.tf32_name != nullptr && library == l.tf32_name);
}

std::set<std::string> library_set(const std::string& list) {
  if (list == "all") return {library_family(LibraryOp::kGemm), library_family(LibraryOp::kConv)};
  if (list == "none") return {};
  std::set<std::string> out;
  for (size_t start = 0;;) {  // every entry, empty ones included ("cudnn," names an empty one)
    const size_t comma = list.find(',', start);
    const std::string entry = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    check(std::any_of(std::begin(kLibraries), std::end(kLibraries), [&](const LibraryNames& l) { return entry == l.name; }),
          "libraries: '", entry.substr(0, 64),
          "' is not a library (all, none, or a comma list of cublasLt and cudnn)");
    out.insert(entry);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::string library_family(LibraryOp op) { return names_of(op).name; }

std::string library_for(const LibraryMatch& match, bool tf32) {
  const LibraryNames& l = names_of(match.call.op);
  return tf32 && match.call.dtype == DType::kF32 && l.tf32_name != nullptr ? l.tf32_name : l.name;
}

std::optional<LibraryCall> library_call(const LibraryMatch& match, const std::string& library, int algorithm,
                                        std::string* why) {
  if (!library_runs(library, match.call.op)) {
    const LibraryOp op = match.call.op;
    *why = "library '" + library + "' does not run this group's " +
           (op == LibraryOp::kConv ? "convolution" : op == LibraryOp::kAttention ? "attention" : "GEMM");
    return std::nullopt;
  }
  if (algorithm < 0) {
    *why = "library algorithm " + std::to_string(algorithm) + " (the ranked choices count from 0)";
    return std::nullopt;
  }
  LibraryCall call = match.call;
  call.library = library;
  call.algorithm = algorithm;
  call.tf32 = tf32_library(library);
  if (call.tf32 && call.dtype != DType::kF32) {
    *why = library + ": TF32 mode is for float32 calls (this one is " + std::string(dtype_name(call.dtype)) + ")";
    return std::nullopt;
  }
  return call;
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
  constexpr double kEfficiency = 0.7;  // a tuned library kernel on a large problem; small ones are latency-bound
  const double compute_us = flops / (tflops * 1e6 * kEfficiency);
  const double memory_us = static_cast<double>(bytes) / (d.dram_bandwidth_gbps * 1e3 * kEfficiency);
  return std::max(compute_us, memory_us) + launch_overhead_us + 3.0;  // + the library's own setup per call
}

}  // namespace fusetune::planner
