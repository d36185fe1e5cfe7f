#include "planner/library_call.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"

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

std::string library_for(const LibraryCall& matched, bool tf32) {
  const LibraryNames& l = names_of(matched.op);
  return tf32 && matched.dtype == DType::kF32 && l.tf32_name != nullptr ? l.tf32_name : l.name;
}

std::optional<LibraryCall> library_call(const LibraryCall& matched, const std::string& library, int algorithm,
                                        std::string* why) {
  if (!library_runs(library, matched.op)) {
    const LibraryOp op = matched.op;
    *why = "library '" + library + "' does not run this group's " +
           (op == LibraryOp::kConv ? "convolution" : op == LibraryOp::kAttention ? "attention" : "GEMM");
    return std::nullopt;
  }
  if (algorithm < 0) {
    *why = "library algorithm " + std::to_string(algorithm) + " (the ranked choices count from 0)";
    return std::nullopt;
  }
  LibraryCall call = matched;
  call.library = library;
  call.algorithm = algorithm;
  call.tf32 = tf32_library(library);
  if (call.tf32 && call.dtype != DType::kF32) {
    *why = library + ": TF32 mode is for float32 calls (this one is " + std::string(dtype_name(call.dtype)) + ")";
    return std::nullopt;
  }
  return call;
}

}  // namespace fusetune::planner
