#include "planner/library_call.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fusetune::planner {

using nlohmann::json;

std::string LibraryCall::to_json() const {
  return json{{"library", library}, {"dtype", std::string(dtype_name(dtype))}, {"batch", batch}, {"m", m}, {"n", n},
              {"k", k}, {"b_batched", b_batched}, {"bias", bias}, {"residual", residual}, {"relu", relu},
              {"tf32", tf32}}
      .dump();
}

LibraryCall LibraryCall::from_json(const std::string& text) {
  LibraryCall c;
  try {
    const json j = json::parse(text);
    c.library = j.at("library").get<std::string>();
    check(c.library == "cublasLt", "library call: unknown library '", c.library, "'");
    const std::string dt = j.at("dtype").get<std::string>();
    check(dt == "float32" || dt == "float16", "library call: dtype '", dt, "' is not float32 or float16");
    c.dtype = dt == "float32" ? DType::kF32 : DType::kF16;
    c.batch = j.at("batch").get<int64_t>();
    c.m = j.at("m").get<int64_t>();
    c.n = j.at("n").get<int64_t>();
    c.k = j.at("k").get<int64_t>();
    c.b_batched = j.at("b_batched").get<bool>();
    c.bias = j.at("bias").get<bool>();
    c.residual = j.at("residual").get<bool>();
    c.relu = j.at("relu").get<bool>();
    c.tf32 = j.value("tf32", false);  // absent from calls written before the TF32 policy
  } catch (const json::exception& e) {
    fail("library call: ", e.what());
  }
  check(c.batch >= 1 && c.m >= 1 && c.n >= 1 && c.k >= 1, "library call: dimensions must be positive");
  check(!c.tf32 || c.dtype == DType::kF32, "library call: TF32 for a ", dtype_name(c.dtype), " call (float32 only)");
  return c;
}

std::optional<LibraryMatch> match_library_call(const Graph& g, const FusionGroup& group) {
  if (group.nodes.empty() || group.nodes.size() > 4 || group.outputs.size() != 1) return std::nullopt;
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
  int current = mm.outputs[0];
  int bias_value = -1, residual_value = -1;
  for (size_t i = 1; i < group.nodes.size(); ++i) {
    const Node& n = node(i);
    if (n.op == "Relu" && !c.relu && i + 1 == group.nodes.size() && n.inputs[0] == current) {
      c.relu = true;
      current = n.outputs[0];
      continue;
    }
    if (n.op != "Add" || c.relu) return std::nullopt;
    const int other = n.inputs[0] == current ? n.inputs[1] : n.inputs[1] == current ? n.inputs[0] : -1;
    if (other < 0 || other == current) return std::nullopt;
    const Value& o = g.value(other);
    if (o.dtype != dt || g.value(n.outputs[0]).shape != y0.shape) return std::nullopt;
    const bool vector_along_n =
        !o.shape.empty() && o.shape.back() == c.n &&
        std::all_of(o.shape.begin(), o.shape.end() - 1, [](int64_t d) { return d == 1; });
    if (vector_along_n && !c.bias) {
      c.bias = true;
      bias_value = other;
    } else if (o.shape == y0.shape && !c.residual) {
      c.residual = true;
      residual_value = other;
    } else {
      return std::nullopt;
    }
    current = n.outputs[0];
  }
  if (group.outputs[0] != current) return std::nullopt;
  // Operands must come from outside the group (the library reads them from memory as they are).
  for (int v : {mm.inputs[0], mm.inputs[1], bias_value, residual_value}) {
    if (v < 0) continue;
    for (int id : group.nodes) {
      for (int out : g.nodes()[static_cast<size_t>(id)].outputs) {
        if (out == v) return std::nullopt;
      }
    }
  }
  if (c.bias) match.inputs.push_back(bias_value);
  if (c.residual) match.inputs.push_back(residual_value);
  match.output = current;
  return match;
}

std::optional<LibraryCall> library_call(const LibraryMatch& match, const std::string& library, std::string* why) {
  if (library != kCublasLt && library != kCublasLtTf32) {
    *why = "unknown library '" + library + "'";
    return std::nullopt;
  }
  LibraryCall call = match.call;
  call.tf32 = library == kCublasLtTf32;
  if (call.tf32 && call.dtype != DType::kF32) {
    *why = "cuBLASLt's TF32 mode is for float32 calls (this one is " + std::string(dtype_name(call.dtype)) + ")";
    return std::nullopt;
  }
  return call;
}

double library_cost_us(const LibraryCall& c, const Device& d, double launch_overhead_us, int64_t* dram_bytes) {
  const int64_t esize = static_cast<int64_t>(dtype_size(c.dtype));
  const int64_t bytes = esize * (c.batch * c.m * c.k + (c.b_batched ? c.batch : 1) * c.k * c.n +
                                 c.batch * c.m * c.n * (c.residual ? 2 : 1) + (c.bias ? c.n : 0));
  if (dram_bytes != nullptr) *dram_bytes = bytes;
  const double flops = 2.0 * static_cast<double>(c.batch * c.m) * static_cast<double>(c.n * c.k);
  const double tflops = c.tf32 ? d.tf32_tensor_tflops : c.dtype == DType::kF16 ? d.fp16_tensor_tflops : d.fp32_tflops;
  constexpr double kEfficiency = 0.7;  // a tuned library kernel on a large problem; small ones are latency-bound
  const double compute_us = flops / (tflops * 1e6 * kEfficiency);
  const double memory_us = static_cast<double>(bytes) / (d.dram_bandwidth_gbps * 1e3 * kEfficiency);
  return std::max(compute_us, memory_us) + launch_overhead_us + 3.0;  // + the library's own setup per call
}

}  // namespace fusetune::planner
