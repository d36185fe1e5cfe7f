// Reference contractions: MatMul (numpy semantics, broadcast batch dims) and N-d grouped Conv.
// Inputs are read as float, products accumulate in double.
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "reference/kernel_util.h"
#include "reference/kernels.h"

namespace fusetune::reference {

namespace {

void run_matmul(const Tensor& a_t, const Tensor& b_t, Tensor& out) {
  Shape a = a_t.shape();
  Shape b = b_t.shape();
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const int64_t m = a[a.size() - 2];
  const int64_t k = a.back();
  const int64_t n = b.back();
  const Shape a_batch(a.begin(), a.end() - 2);
  const Shape b_batch(b.begin(), b.end() - 2);
  const Shape batch = broadcast_shapes(a_batch, b_batch, "batch dimensions");
  const std::vector<int64_t> ao = broadcast_offsets(a_batch, batch);
  const std::vector<int64_t> bo = broadcast_offsets(b_batch, batch);
  const std::vector<float> av = a_t.to_floats();
  const std::vector<float> bv = b_t.to_floats();
  std::vector<double> result(static_cast<size_t>(out.numel()));
  std::vector<double> row(static_cast<size_t>(n));
  for (size_t bi = 0; bi < ao.size(); ++bi) {
    const float* A = av.data() + ao[bi] * m * k;
    const float* B = bv.data() + bo[bi] * k * n;
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t kk = 0; kk < k; ++kk) {
        const double aik = A[i * k + kk];
        const float* brow = B + kk * n;
        for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] += aik * brow[j];
      }
      std::copy(row.begin(), row.end(), result.begin() + static_cast<int64_t>(bi) * m * n + i * n);
    }
  }
  out.set_doubles(result);
}

void run_conv(const Node& node, std::span<const Tensor* const> in, Tensor& out) {
  const Tensor& x = *in[0];
  const Tensor& w = *in[1];
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const size_t sp = xs.size() - 2;
  const int64_t batch = xs[0];
  const int64_t cin = xs[1];
  const int64_t cout = ws[0];
  const int64_t group = node.attrs.i("group", 1);
  const int64_t cin_g = cin / group;
  const int64_t cout_g = cout / group;
  const Shape in_sp(xs.begin() + 2, xs.end());
  const Shape out_sp(out.shape().begin() + 2, out.shape().end());
  const std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  const WindowTable win =
      window_table(in_sp, out_sp, kernel, node.attrs.ints("strides", std::vector<int64_t>(sp, 1)),
                   node.attrs.ints("dilations", std::vector<int64_t>(sp, 1)),
                   node.attrs.ints("pads", std::vector<int64_t>(2 * sp, 0)));
  const int64_t in_plane = numel(in_sp);
  const std::vector<float> xv = x.to_floats();
  const std::vector<float> wv = w.to_floats();
  std::vector<float> bias;
  if (in.size() > 2 && in[2] != nullptr) bias = in[2]->to_floats();
  std::vector<double> result(static_cast<size_t>(out.numel()));
  std::vector<double> acc(static_cast<size_t>(win.positions));
  for (int64_t nb = 0; nb < batch; ++nb) {
    for (int64_t oc = 0; oc < cout; ++oc) {
      const int64_t g = oc / cout_g;
      std::fill(acc.begin(), acc.end(), bias.empty() ? 0.0 : bias[static_cast<size_t>(oc)]);
      for (int64_t c = 0; c < cin_g; ++c) {
        const float* plane = xv.data() + (nb * cin + g * cin_g + c) * in_plane;
        const float* filt = wv.data() + (oc * cin_g + c) * win.taps;
        for (int64_t p = 0; p < win.positions; ++p) {
          const int64_t* offs = win.offset.data() + p * win.taps;
          double s = 0;
          for (int64_t t = 0; t < win.taps; ++t) {
            if (offs[t] >= 0) s += static_cast<double>(plane[offs[t]]) * filt[t];
          }
          acc[static_cast<size_t>(p)] += s;
        }
      }
      std::copy(acc.begin(), acc.end(), result.begin() + (nb * cout + oc) * win.positions);
    }
  }
  out.set_doubles(result);
}

}  // namespace

void run_contraction(const Node& node, std::span<const Tensor* const> in, Tensor& out) {
  if (node.op == "MatMul") {
    run_matmul(*in[0], *in[1], out);
  } else {
    run_conv(node, in, out);
  }
}

}  // namespace fusetune::reference
