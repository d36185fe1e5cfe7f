// Reference reductions (Reduce*, ArgMax/ArgMin) and normalizations (Softmax, LogSoftmax,
// LayerNormalization). Accumulation is in double for float dtypes and int64 for integers.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "reference/kernel_util.h"
#include "reference/kernels.h"

namespace fusetune::reference {

namespace {

// The input shape with every reduced axis set to 1: broadcasting from it back to the input maps
// each input element to the output element it reduces into.
Shape kept_shape(const Node& n, const Shape& in) {
  Shape kept = in;
  for (int64_t a : n.attrs.ints("axes")) kept[static_cast<size_t>(normalize_axis(a, static_cast<int64_t>(in.size()), "axes"))] = 1;
  return kept;
}

enum class Reducer { kSum, kProd, kMax, kMin };

Reducer reducer_of(const std::string& op) {
  if (op == "ReduceProd") return Reducer::kProd;
  if (op == "ReduceMax") return Reducer::kMax;
  if (op == "ReduceMin") return Reducer::kMin;
  return Reducer::kSum;  // ReduceSum, and ReduceMean before its division
}

// Accumulates x (elements first, first + 1, ... of the input) into acc at the output offsets `dest`.
template <typename T>
void reduce_values(Reducer r, const std::vector<T>& x, const std::vector<int64_t>& dest, std::vector<T>& acc,
                   std::vector<int64_t>& count) {
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t d = static_cast<size_t>(dest[i]);
    const T v = x[i];
    T& a = acc[d];
    switch (r) {
      case Reducer::kSum: a += v; break;
      case Reducer::kProd: a *= v; break;
      case Reducer::kMax:
        if constexpr (std::is_floating_point_v<T>) {
          a = (std::isnan(v) || std::isnan(a)) ? NAN : std::max(a, v);
        } else {
          a = std::max(a, v);
        }
        break;
      case Reducer::kMin:
        if constexpr (std::is_floating_point_v<T>) {
          a = (std::isnan(v) || std::isnan(a)) ? NAN : std::min(a, v);
        } else {
          a = std::min(a, v);
        }
        break;
    }
    ++count[d];
  }
}

template <typename T>
T reduce_init(const std::string& op) {
  if (op == "ReduceProd") return T{1};
  if (op == "ReduceMax") return std::is_floating_point_v<T> ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
  if (op == "ReduceMin") return std::is_floating_point_v<T> ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
  return T{0};
}

// The input is read in element order a piece at a time (the accumulation order of a whole scan,
// without a whole tensor's doubles and offsets).
void run_reduce(const Node& n, const Tensor& x, Tensor& out) {
  const Shape kept = kept_shape(n, x.shape());
  std::vector<int64_t> count(static_cast<size_t>(out.numel()), 0);
  std::vector<int64_t> dest;
  const auto scan = [&]<typename T>(std::vector<T>& acc) {
    std::vector<T> v;
    for (int64_t first = 0; first < x.numel(); first += kElementChunk) {
      const auto piece = static_cast<size_t>(std::min(kElementChunk, x.numel() - first));
      v.resize(piece);
      dest.resize(piece);
      read_range(x, first, std::span<T>(v));
      broadcast_offsets_from(kept, x.shape(), first, dest);
      reduce_values(reducer_of(n.op), v, dest, acc, count);
    }
  };
  if (is_float(x.dtype())) {
    std::vector<double> acc(count.size(), reduce_init<double>(n.op));
    scan(acc);
    if (n.op == "ReduceMean") {
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = count[i] ? acc[i] / static_cast<double>(count[i]) : NAN;
    }
    out.set_doubles(acc);
  } else {
    std::vector<int64_t> acc(count.size(), reduce_init<int64_t>(n.op));
    scan(acc);
    if (n.op == "ReduceMean") {
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = count[i] ? acc[i] / count[i] : 0;
    }
    out.set_ints(acc);
  }
}

void run_arg(const Node& n, const Tensor& x, Tensor& out) {
  const int64_t axis = normalize_axis(n.attrs.i("axis"), x.rank(), "axis");
  const bool last = n.attrs.i("select_last_index") != 0;
  const bool is_max = n.op == "ArgMax";
  const AxisSplit s = split_at(x.shape(), axis);
  const std::vector<double> v = x.to_doubles();
  std::vector<int64_t> r(static_cast<size_t>(s.outer * s.inner));
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      int64_t best = 0;
      double best_v = v[static_cast<size_t>(o * s.extent * s.inner + i)];
      for (int64_t k = 1; k < s.extent; ++k) {
        const double c = v[static_cast<size_t>((o * s.extent + k) * s.inner + i)];
        const bool better = is_max ? (last ? c >= best_v : c > best_v) : (last ? c <= best_v : c < best_v);
        if (better) {
          best = k;
          best_v = c;
        }
      }
      r[static_cast<size_t>(o * s.inner + i)] = best;
    }
  }
  out.set_ints(r);
}

// Softmax and LayerNormalization work a row at a time (the normalized axes' elements of one
// outer and inner position), the rows in pieces on the machine's cores.
void run_softmax(const Node& n, const Tensor& x, Tensor& out) {
  const int64_t axis = normalize_axis(n.attrs.i("axis", -1), x.rank(), "axis");
  const bool log = n.op == "LogSoftmax";
  const AxisSplit s = split_at(x.shape(), axis);
  out.data();
  for_row_chunks(s.outer * s.inner, s.extent, [&](int64_t first, int64_t count) {
    std::vector<double> row(static_cast<size_t>(s.extent));
    for (int64_t r = first; r < first + count; ++r) {
      const int64_t o = r / s.inner, i = r % s.inner;
      const auto at = [&](int64_t k) { return (o * s.extent + k) * s.inner + i; };
      for (int64_t k = 0; k < s.extent; ++k) x.read_doubles(at(k), {&row[static_cast<size_t>(k)], 1});
      double mx = -INFINITY;
      for (double v : row) mx = std::max(mx, v);
      double sum = 0;
      for (double v : row) sum += std::exp(v - mx);
      for (double& v : row) v = log ? v - mx - std::log(sum) : std::exp(v - mx) / sum;
      for (int64_t k = 0; k < s.extent; ++k) out.write_doubles(at(k), {&row[static_cast<size_t>(k)], 1});
    }
  });
}

void run_layer_norm(const Node& n, std::span<const Tensor* const> in, Tensor& out) {
  const Tensor& x = *in[0];
  const int64_t axis = normalize_axis(n.attrs.i("axis", -1), x.rank(), "axis");
  const double eps = n.attrs.f("epsilon", 1e-5f);
  const Shape norm(x.shape().begin() + axis, x.shape().end());
  const int64_t inner = numel(norm);
  const int64_t outer = inner == 0 ? 0 : x.numel() / inner;
  const std::vector<double> scale = in[1]->to_doubles();
  const std::vector<int64_t> so = broadcast_offsets(in[1]->shape(), norm);
  std::vector<double> bias;
  std::vector<int64_t> bo;
  if (in.size() > 2 && in[2] != nullptr) {
    bias = in[2]->to_doubles();
    bo = broadcast_offsets(in[2]->shape(), norm);
  }
  out.data();
  for_row_chunks(outer, inner, [&](int64_t first, int64_t count) {
    std::vector<double> row(static_cast<size_t>(inner));
    for (int64_t o = first; o < first + count; ++o) {
      x.read_doubles(o * inner, row);
      double mean = 0;
      for (double v : row) mean += v;
      mean /= static_cast<double>(inner);
      double var = 0;
      for (double v : row) var += (v - mean) * (v - mean);
      var /= static_cast<double>(inner);
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t k = 0; k < inner; ++k) {
        double y = (row[static_cast<size_t>(k)] - mean) * inv * scale[static_cast<size_t>(so[static_cast<size_t>(k)])];
        if (!bias.empty()) y += bias[static_cast<size_t>(bo[static_cast<size_t>(k)])];
        row[static_cast<size_t>(k)] = y;
      }
      out.write_doubles(o * inner, row);
    }
  });
}

}  // namespace

void run_reduction(const Node& node, std::span<const Tensor* const> in, Tensor& out) {
  if (node.op == "ArgMax" || node.op == "ArgMin") {
    run_arg(node, *in[0], out);
  } else {
    run_reduce(node, *in[0], out);
  }
}

void run_normalization(const Node& node, std::span<const Tensor* const> in, Tensor& out) {
  if (node.op == "LayerNormalization") {
    run_layer_norm(node, in, out);
  } else {
    run_softmax(node, *in[0], out);
  }
}

}  // namespace fusetune::reference
