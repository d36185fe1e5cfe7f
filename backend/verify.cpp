#include "backend/verify.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/ops.h"
#include "reference/kernels.h"

namespace fusetune::backend {

Tensor random_tensor(DType dtype, const Shape& shape, int64_t lo, int64_t hi, std::mt19937& rng) {
  Tensor t(dtype, shape);
  const auto n = static_cast<size_t>(t.numel());
  if (is_float(dtype)) {
    std::normal_distribution<double> dist(0.0, 1.0);
    std::vector<double> x(n);
    for (auto& e : x) e = dist(rng);
    t.set_doubles(x);
    return t;
  }
  std::uniform_int_distribution<int64_t> dist(lo, std::max(lo, hi));
  std::vector<int64_t> x(n);
  for (auto& e : x) e = dist(rng);
  t.set_ints(x);
  return t;
}

Tensor random_group_input(const Graph& g, const planner::FusionGroup& group, int value, std::mt19937& rng) {
  const Value& v = g.value(value);
  if (v.is_constant()) return *v.data;
  if (is_float(v.dtype)) return random_tensor(v.dtype, v.shape, 0, 0, rng);
  // Integer data: indices for a Gather or ScatterND that reads them, else small values.
  int64_t lo = 0, hi = 2;
  for (int id : group.nodes) {
    const Node& node = g.nodes()[static_cast<size_t>(id)];
    if (node.op == "Gather" && node.inputs[1] == value) {
      const Shape& data = g.value(node.inputs[0]).shape;
      const int64_t extent = data[static_cast<size_t>(normalize_axis(node.attrs.i("axis"), static_cast<int64_t>(data.size()), "axis"))];
      lo = -extent;
      hi = extent - 1;
    }
    if (node.op == "ScatterND" && node.inputs[1] == value) {
      const Shape& data = g.value(node.inputs[0]).shape;
      lo = 0;
      hi = *std::min_element(data.begin(), data.begin() + v.shape.back()) - 1;
    }
  }
  if (v.dtype == DType::kBool) {
    lo = 0;
    hi = 1;
  }
  return random_tensor(v.dtype, v.shape, lo, hi, rng);
}

VerifyResult verify_kernel(const Graph& g, const planner::FusionGroup& group, const std::string& kernel,
                           const std::vector<int>& inputs, const std::vector<int>& outputs, Backend& backend,
                           Module& module, std::mt19937& rng, size_t redzone_bytes) {
  constexpr unsigned char kRedzoneByte = 0xA5;
  std::map<int, Tensor> values;
  std::vector<std::unique_ptr<Buffer>> parents;  // with redzones around the buffers
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Buffer*> args;
  auto allocate = [&](size_t bytes) {
    bytes = std::max<size_t>(1, bytes);
    if (redzone_bytes == 0) {
      buffers.push_back(backend.allocate(bytes));
    } else {
      parents.push_back(backend.allocate(bytes + 2 * redzone_bytes));
      parents.back()->fill_byte(kRedzoneByte);
      buffers.push_back(backend.view(*parents.back(), redzone_bytes, bytes));
    }
    args.push_back(buffers.back().get());
    return buffers.back().get();
  };
  for (int v : inputs) {
    if (!values.count(v)) values[v] = random_group_input(g, group, v, rng);  // packed parts may share inputs
    allocate(values[v].nbytes())->upload(values[v].data(), values[v].nbytes());
  }
  for (int v : outputs) {
    const Value& val = g.value(v);
    allocate(static_cast<size_t>(numel(val.shape)) * dtype_size(val.dtype))->fill_byte(0xFF);
  }
  VerifyResult result;
  try {
    module.launch(kernel, args);
  } catch (const simt::CheckFailed& e) {
    result.ok = false;
    result.check_failed = true;
    result.detail = e.what();
    return result;
  }
  // Only the margins are read back: the buffers themselves are compared below.
  for (size_t k = 0; k < parents.size() && result.ok; ++k) {
    const size_t inner = parents[k]->bytes() - 2 * redzone_bytes;
    for (const size_t start : {size_t{0}, redzone_bytes + inner}) {
      std::vector<unsigned char> margin(redzone_bytes);
      backend.view(*parents[k], start, redzone_bytes)->download(margin.data(), margin.size());
      const auto bad = std::find_if(margin.begin(), margin.end(), [](unsigned char b) { return b != kRedzoneByte; });
      if (bad == margin.end()) continue;
      const int v = k < inputs.size() ? inputs[k] : outputs[k - inputs.size()];
      const auto i = static_cast<long long>(bad - margin.begin());
      const long long at = start == 0 ? i - static_cast<long long>(redzone_bytes) : i;
      result.ok = false;
      result.detail = "write outside buffer '" + g.value(v).name + "' (byte " + std::to_string(at) +
                      (at < 0 ? " before its start)" : " past its end)");
      break;
    }
  }
  // The reference, node by node over the group.
  for (int id : group.nodes) {
    const Node& n = g.nodes()[static_cast<size_t>(id)];
    std::vector<const Tensor*> ins;
    for (int in : n.inputs) ins.push_back(in == kNoValue ? nullptr : &values.at(in));
    values[n.outputs[0]] = std::move(reference::run_node(n, ins)[0]);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int v = outputs[k];
    const Tensor& want = values.at(v);
    Tensor got(want.dtype(), want.shape());
    buffers[inputs.size() + k]->download(got.data(), got.nbytes());
    reference::Tolerance tol = reference::default_tolerance(want.dtype());
    if (want.dtype() == DType::kF32) tol = {1e-3, 1e-5, 1e-4};  // float32 kernels against a double reference
    const reference::Comparison c = reference::compare(got, want, tol);
    result.max_abs = std::max(result.max_abs, c.max_abs);
    if (!c.ok && result.ok) {
      result.ok = false;
      result.detail = "output '" + g.value(v).name + "' " + shape_str(want.shape()) + ": " + c.describe();
    }
  }
  return result;
}

}  // namespace fusetune::backend
