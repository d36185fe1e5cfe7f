#include "backend/verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/ops.h"
#include "planner/library_call.h"
#include "planner/tiling.h"
#include "reference/kernel_util.h"
#include "reference/kernels.h"

namespace fusetune::backend {

Tensor random_tensor(DType dtype, const Shape& shape, int64_t lo, int64_t hi, std::mt19937& rng) {
  Tensor t(dtype, shape);
  // Drawn in order, a piece at a time (a whole tensor's doubles would take 8 bytes an element).
  constexpr int64_t kPiece = 16384;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int64_t> uniform(lo, std::max(lo, hi));
  std::vector<double> x;
  std::vector<int64_t> xi;
  for (int64_t first = 0; first < t.numel(); first += kPiece) {
    const auto count = static_cast<size_t>(std::min(kPiece, t.numel() - first));
    if (is_float(dtype)) {
      x.resize(count);
      for (auto& e : x) e = normal(rng);
      t.write_doubles(first, x);
    } else {
      xi.resize(count);
      for (auto& e : xi) e = uniform(rng);
      t.write_ints(first, xi);
    }
  }
  return t;
}

namespace {

// Whether `value` flows, through other nodes of the group, into the indices of a Gather or
// ScatterND of it (not directly: random_group_input gives those their range).
bool reaches_index(const Graph& g, const planner::FusionGroup& group, int value) {
  std::set<int> derived;
  for (int id : group.nodes) {  // in topological order
    const Node& node = g.nodes()[static_cast<size_t>(id)];
    const bool index_op = node.op == "Gather" || node.op == "ScatterND";
    if (index_op && node.inputs.size() > 1 && derived.count(node.inputs[1])) return true;
    if (std::any_of(node.inputs.begin(), node.inputs.end(), [&](int in) { return in == value || derived.count(in); })) {
      derived.insert(node.outputs.begin(), node.outputs.end());
    }
  }
  return false;
}

}  // namespace

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
  } else if (lo == 0 && hi == 2 && reaches_index(g, group, value)) {
    // Indices computed from it (GatherElements' and GatherND's flat offsets, a ReverseSequence's
    // time coordinates): only zeros are sure to stay in range.
    hi = 0;
  }
  return random_tensor(v.dtype, v.shape, lo, hi, rng);
}

namespace {

// The elements of `got` that a sampled launch wrote (no longer all poison bytes, or, where the
// same sample ran over zeroed outputs too, `zeroed`'s no longer all zero bytes) and the same
// elements of `want`, each as a 1-D tensor.
std::pair<Tensor, Tensor> written_elements(const Tensor& got, const Tensor& want, const Tensor* zeroed) {
  const size_t size = dtype_size(got.dtype());
  const auto* g = reinterpret_cast<const unsigned char*>(got.data());
  const auto* w = reinterpret_cast<const unsigned char*>(want.data());
  const auto* z = zeroed != nullptr ? reinterpret_cast<const unsigned char*>(zeroed->data()) : nullptr;
  std::vector<size_t> written;
  for (size_t i = 0; i < static_cast<size_t>(got.numel()); ++i) {
    const bool unpoisoned = std::any_of(g + i * size, g + (i + 1) * size, [](unsigned char b) { return b != 0xFF; });
    const bool unzeroed = z != nullptr && std::any_of(z + i * size, z + (i + 1) * size, [](unsigned char b) { return b != 0x00; });
    if (unpoisoned || unzeroed) written.push_back(i);
  }
  const Shape shape{static_cast<int64_t>(written.size())};
  Tensor a(got.dtype(), shape), b(want.dtype(), shape);
  for (size_t j = 0; j < written.size(); ++j) {
    std::memcpy(reinterpret_cast<unsigned char*>(a.data()) + j * size, g + written[j] * size, size);
    std::memcpy(reinterpret_cast<unsigned char*>(b.data()) + j * size, w + written[j] * size, size);
  }
  return {std::move(a), std::move(b)};
}

// The largest magnitude of a score that weighs in Softmax `n` over `x`: in each row along its axis,
// the scores within kWeighed of the row's greatest (a score further below has a weight under
// e^-kWeighed: masked keys, -10,000 or -infinity, do not count). Read a row at a time, as the
// reference's Softmax reads them (a whole tensor's doubles would take 8 bytes an element).
double weighed_magnitude(const Node& n, const Tensor& x) {
  constexpr double kWeighed = 20;
  const reference::AxisSplit s = reference::split_at(x.shape(), normalize_axis(n.attrs.i("axis", -1), x.rank(), "axis"));
  std::vector<double> row(static_cast<size_t>(s.extent));
  double largest = 0;
  for (int64_t r = 0; r < s.outer * s.inner; ++r) {
    const int64_t o = r / s.inner, i = r % s.inner;
    for (int64_t k = 0; k < s.extent; ++k) x.read_doubles((o * s.extent + k) * s.inner + i, {&row[static_cast<size_t>(k)], 1});
    const double top = *std::max_element(row.begin(), row.end());
    if (!std::isfinite(top)) continue;
    for (double v : row) {
      if (v >= top - kWeighed) largest = std::max(largest, std::fabs(v));
    }
  }
  return largest;
}

// The unit roundoff of a 16-bit float type (half its grid's step at 1); 0 for the others.
double unit_roundoff(DType t) {
  if (t == DType::kBF16) return 1.0 / 256;
  if (t == DType::kF16) return 1.0 / 2048;
  return 0.0;
}

}  // namespace

// The tolerance output v is compared under: its dtype's (float32 kernels against the reference's
// double accumulation: looser), loosened to that of every narrower float value it is computed
// through. A float16 MatMul whose product a Cast widens rounds that product to float16 in the
// reference and in the kernel alike, but the two sum in different orders, so the rounding may
// land one step of float16's grid apart, which the float32 epilogue carries to the output.
// A Softmax over 16-bit scores: the reference rounds the scores at each op before it (attention:
// the product, its scale, the mask's Add: kSoftmaxRoundings roundings of up to u |x| each) where a
// fused kernel keeps them in float, and exp turns an absolute error of the scores into a relative
// one of the weights, so the output's tolerance gains kSoftmaxRoundings u max|x| of its scale, x
// the scores that weigh (weighed_magnitude; bfloat16 attention with scores up to 8: 0.094,
// float16: 0.012). Found by
// CodegenAttention.TheStagingLoadsSixteenBytesAtATime on about one seed in fifteen: a bfloat16
// decode step, scores up to 7.8, one output 0.052 off (-0.111 where the reference gave -0.163).
reference::Tolerance output_tolerance(const Graph& g, int v, const std::map<int, Tensor>& values,
                                      const std::vector<int>& inputs, bool tf32) {
  constexpr double kSoftmaxRoundings = 3;
  const DType out = g.value(v).dtype;
  reference::Tolerance tol = reference::default_tolerance(out);
  if (out == DType::kF32) tol = tf32 ? reference::tf32_tolerance() : reference::Tolerance{1e-3, 1e-5, 1e-4};
  const std::vector<int> producer = g.producers();
  std::vector<int> stack = {v};
  std::set<int> seen = {v};
  while (!stack.empty()) {
    const int u = stack.back();
    stack.pop_back();
    if (std::find(inputs.begin(), inputs.end(), u) != inputs.end() || producer[static_cast<size_t>(u)] < 0) continue;
    const DType t = g.value(u).dtype;
    if (is_float(t) && dtype_size(t) < dtype_size(out)) {
      const reference::Tolerance narrow = reference::default_tolerance(t);
      tol = {std::max(tol.rtol, narrow.rtol), std::max(tol.atol, narrow.atol), std::max(tol.scale, narrow.scale)};
    }
    const Node& made = g.nodes()[static_cast<size_t>(producer[static_cast<size_t>(u)])];
    if (made.op == "Softmax" && values.count(made.inputs[0]) && unit_roundoff(g.value(made.inputs[0]).dtype) > 0) {
      tol.scale += kSoftmaxRoundings * unit_roundoff(g.value(made.inputs[0]).dtype) * weighed_magnitude(made, values.at(made.inputs[0]));
    }
    for (int in : made.inputs) {
      if (in != kNoValue && values.count(in) && seen.insert(in).second) stack.push_back(in);
    }
  }
  return tol;
}

bool tf32_kernel(const Graph& g, const planner::FusionGroup& group, const std::string& config) {
  std::istringstream words(config);
  std::string word;
  bool mma = false;
  while (words >> word) mma = mma || word == "mma";
  if (const std::string library = planner::config_library(config); !library.empty()) return planner::tf32_library(library);
  return mma && std::any_of(group.nodes.begin(), group.nodes.end(), [&](int n) {
           const Node& node = g.nodes()[static_cast<size_t>(n)];
           return planner::tensor_core_operands(g, node) && g.value(node.inputs[0]).dtype == DType::kF32;
         });
}

Reference reference_values(const Graph& g, const planner::FusionGroup& group, const std::vector<int>& inputs,
                           std::mt19937& rng) {
  Reference r;
  r.inputs = inputs;
  for (int v : inputs) {
    if (!r.values.count(v)) r.values[v] = random_group_input(g, group, v, rng);  // packed parts may share inputs
  }
  for (int id : group.nodes) {  // node by node over the group
    const Node& n = g.nodes()[static_cast<size_t>(id)];
    std::vector<const Tensor*> ins;
    for (int in : n.inputs) {
      // A constant the kernel does not take as a parameter (a library call's epilogue folds it in).
      if (in != kNoValue && !r.values.count(in) && g.value(in).is_constant()) r.values[in] = *g.value(in).data;
      ins.push_back(in == kNoValue ? nullptr : &r.values.at(in));
    }
    r.values[n.outputs[0]] = std::move(reference::run_node(n, ins)[0]);
  }
  return r;
}

VerifyResult verify_kernel(const Graph& g, const std::string& kernel, const std::vector<int>& inputs,
                           const std::vector<int>& outputs, Backend& backend, Module& module, const Reference& reference,
                           const VerifyOptions& options, const std::vector<int>& in_place) {
  check(reference.inputs == inputs, "kernel '", kernel, "': its reference was drawn for other inputs");
  check(in_place.empty() || in_place.size() == outputs.size(), "kernel '", kernel, "': ", in_place.size(),
        " in-place bindings for ", outputs.size(), " outputs");
  const auto own_input = [&](size_t k) { return k < in_place.size() ? in_place[k] : -1; };
  const size_t redzone_bytes = options.redzone_bytes;
  constexpr unsigned char kRedzoneByte = 0xA5;
  const std::map<int, Tensor>& values = reference.values;
  std::vector<std::unique_ptr<Buffer>> parents;  // with redzones around the buffers
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Buffer*> args;
  std::vector<int> allocated;  // the value each allocation holds
  auto allocate = [&](int v, size_t bytes) {
    allocated.push_back(v);
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
    const Tensor& t = values.at(v);
    allocate(v, t.nbytes())->upload(t.data(), t.nbytes());
  }
  std::vector<Buffer*> out_buffers;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Value& val = g.value(outputs[k]);
    if (const int j = own_input(k); j >= 0) {
      check(static_cast<size_t>(j) < inputs.size() && g.value(inputs[static_cast<size_t>(j)]).dtype == val.dtype &&
                numel(g.value(inputs[static_cast<size_t>(j)]).shape) == numel(val.shape),
            "kernel '", kernel, "': output '", val.name, "' cannot update input ", j, " in place");
      out_buffers.push_back(args[static_cast<size_t>(j)]);
      args.push_back(args[static_cast<size_t>(j)]);
      continue;
    }
    out_buffers.push_back(allocate(outputs[k], static_cast<size_t>(numel(val.shape)) * dtype_size(val.dtype)));
    out_buffers.back()->fill_byte(0xFF);
  }
  const bool updates = std::any_of(in_place.begin(), in_place.end(), [](int j) { return j >= 0; });
  VerifyResult result;
  // One launch, of the sample or the whole grid; false (the finding in `result`) on a check's.
  const auto launch = [&] {
    try {
      if (options.sample_blocks > 0 && !updates) {
        result.coverage = module.launch_sample(kernel, args, options.sample_blocks, options.seed);
      } else {
        module.launch(kernel, args);
      }
    } catch (const simt::CheckFailed& e) {
      result.ok = false;
      result.check_failed = true;
      result.detail = e.what();
      return false;
    }
    return true;
  };
  if (!launch()) return result;
  // Only the margins are read back: the buffers themselves are compared below.
  const auto check_margins = [&] {
    for (size_t k = 0; k < parents.size() && result.ok; ++k) {
      const size_t inner = parents[k]->bytes() - 2 * redzone_bytes;
      for (const size_t start : {size_t{0}, redzone_bytes + inner}) {
        std::vector<unsigned char> margin(redzone_bytes);
        backend.view(*parents[k], start, redzone_bytes)->download(margin.data(), margin.size());
        const auto bad = std::find_if(margin.begin(), margin.end(), [](unsigned char b) { return b != kRedzoneByte; });
        if (bad == margin.end()) continue;
        const int v = allocated[k];
        const auto i = static_cast<long long>(bad - margin.begin());
        const long long at = start == 0 ? i - static_cast<long long>(redzone_bytes) : i;
        result.ok = false;
        result.detail = "write outside buffer '" + g.value(v).name + "' (byte " + std::to_string(at) +
                        (at < 0 ? " before its start)" : " past its end)");
        break;
      }
    }
  };
  check_margins();
  // A sample's integer outputs: all ones is a value they may hold (a uint8 saturated to 255), so the
  // sample runs again over outputs of zeros, and an element either run changed is one it wrote.
  std::vector<Tensor> zeroed(outputs.size());
  const bool integers = std::any_of(outputs.begin(), outputs.end(), [&](int v) { return !is_float(g.value(v).dtype); });
  if (result.ok && !result.coverage.whole() && integers) {
    std::vector<Tensor> first(outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k) {
      first[k] = Tensor(g.value(outputs[k]).dtype, g.value(outputs[k]).shape);
      out_buffers[k]->download(first[k].data(), first[k].nbytes());
      out_buffers[k]->fill_byte(0x00);
    }
    if (!launch()) return result;
    check_margins();
    for (size_t k = 0; k < outputs.size(); ++k) {
      zeroed[k] = Tensor(g.value(outputs[k]).dtype, g.value(outputs[k]).shape);
      out_buffers[k]->download(zeroed[k].data(), zeroed[k].nbytes());
      out_buffers[k]->upload(first[k].data(), first[k].nbytes());
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int v = outputs[k];
    Tensor want = values.at(v);
    Tensor got(want.dtype(), want.shape());
    out_buffers[k]->download(got.data(), got.nbytes());
    if (!result.coverage.whole()) std::tie(got, want) = written_elements(got, want, zeroed[k].numel() > 0 ? &zeroed[k] : nullptr);
    result.compared += got.numel();
    const reference::Comparison c = reference::compare(got, want, output_tolerance(g, v, values, inputs, options.tf32));
    result.max_abs = std::max(result.max_abs, c.max_abs);
    if (!c.ok && result.ok) {
      result.ok = false;
      result.detail = "output '" + g.value(v).name + "' " + shape_str(values.at(v).shape()) + ": " + c.describe();
      if (!result.coverage.whole()) {
        result.detail += " (among the " + std::to_string(want.numel()) + " elements written by " +
                         std::to_string(result.coverage.blocks) + " sampled blocks of " +
                         std::to_string(result.coverage.grid) + ")";
      }
    }
  }
  if (result.ok && !result.coverage.whole() && result.compared == 0) {
    result.ok = false;
    result.detail = "the " + std::to_string(result.coverage.blocks) + " sampled blocks of " +
                    std::to_string(result.coverage.grid) + " wrote no output element";
  }
  return result;
}

}  // namespace fusetune::backend
