// Reference contractions: MatMul (numpy semantics, broadcast batch dims) and N-d grouped Conv.
// Float inputs are read as float and their products accumulate in double; integer inputs (the
// int32 contractions that MatMulInteger, ConvInteger and the QLinear ops lower to) are read and
// accumulated in 64 bits, wrapping (unsigned arithmetic: no overflow is undefined), and stored
// wrapped to the output's width as numpy's integer products are. Output rows (MatMul) and planes
// (Conv) are computed in pieces on the machine's cores, each element's sum in the same order.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "reference/kernel_util.h"
#include "reference/kernels.h"

namespace fusetune::reference {

namespace {

// The elements of t as E (float or int64_t), and a result of accumulators Acc stored in out.
template <typename E>
std::vector<E> elements(const Tensor& t) {
  if constexpr (std::is_same_v<E, float>) {
    return t.to_floats();
  } else {
    return t.to_ints();
  }
}

template <typename Acc>
void store(Tensor& out, const std::vector<Acc>& result) {
  if constexpr (std::is_same_v<Acc, double>) {
    out.set_doubles(result);
  } else {
    out.set_ints(std::vector<int64_t>(result.begin(), result.end()));
  }
}

template <typename E, typename Acc>
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
  const std::vector<E> av = elements<E>(a_t);
  const std::vector<E> bv = elements<E>(b_t);
  std::vector<Acc> result(static_cast<size_t>(out.numel()));
  // Output rows (of every batch) in pieces on the machine's cores, each row's sums in k's order.
  for_row_chunks(static_cast<int64_t>(ao.size()) * m, n * std::max<int64_t>(1, k), [&](int64_t first, int64_t count) {
    std::vector<Acc> row(static_cast<size_t>(n));
    for (int64_t r = first; r < first + count; ++r) {
      const auto bi = static_cast<size_t>(r / m);
      const int64_t i = r % m;
      const E* A = av.data() + ao[bi] * m * k;
      const E* B = bv.data() + bo[bi] * k * n;
      std::fill(row.begin(), row.end(), Acc{0});
      for (int64_t kk = 0; kk < k; ++kk) {
        const Acc aik = static_cast<Acc>(A[i * k + kk]);
        const E* brow = B + kk * n;
        for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] += aik * static_cast<Acc>(brow[j]);
      }
      std::copy(row.begin(), row.end(), result.begin() + r * n);
    }
  });
  store(out, result);
}

template <typename E, typename Acc>
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
  const std::vector<E> xv = elements<E>(x);
  const std::vector<E> wv = elements<E>(w);
  std::vector<E> bias;
  if (in.size() > 2 && in[2] != nullptr) bias = elements<E>(*in[2]);
  std::vector<Acc> result(static_cast<size_t>(out.numel()));
  // Output planes (an image's channel each) in pieces on the machine's cores.
  for_row_chunks(batch * cout, win.positions * std::max<int64_t>(1, cin_g * win.taps), [&](int64_t first, int64_t count) {
    std::vector<Acc> acc(static_cast<size_t>(win.positions));
    for (int64_t plane_index = first; plane_index < first + count; ++plane_index) {
      const int64_t nb = plane_index / cout, oc = plane_index % cout;
      const int64_t g = oc / cout_g;
      std::fill(acc.begin(), acc.end(), bias.empty() ? Acc{0} : static_cast<Acc>(bias[static_cast<size_t>(oc)]));
      for (int64_t c = 0; c < cin_g; ++c) {
        const E* plane = xv.data() + (nb * cin + g * cin_g + c) * in_plane;
        const E* filt = wv.data() + (oc * cin_g + c) * win.taps;
        for (int64_t p = 0; p < win.positions; ++p) {
          const int64_t* offs = win.offset.data() + p * win.taps;
          Acc s = 0;
          for (int64_t t = 0; t < win.taps; ++t) {
            if (offs[t] >= 0) s += static_cast<Acc>(plane[offs[t]]) * static_cast<Acc>(filt[t]);
          }
          acc[static_cast<size_t>(p)] += s;
        }
      }
      std::copy(acc.begin(), acc.end(), result.begin() + (nb * cout + oc) * win.positions);
    }
  });
  store(out, result);
}

}  // namespace

void run_contraction(const Node& node, std::span<const Tensor* const> in, Tensor& out) {
  const bool integer = !is_float(in[0]->dtype());
  if (node.op == "MatMul") {
    integer ? run_matmul<int64_t, uint64_t>(*in[0], *in[1], out) : run_matmul<float, double>(*in[0], *in[1], out);
  } else {
    integer ? run_conv<int64_t, uint64_t>(node, in, out) : run_conv<float, double>(node, in, out);
  }
}

}  // namespace fusetune::reference
