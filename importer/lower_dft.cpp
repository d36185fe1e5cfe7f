#include "importer/lower_dft.h"

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::importer {

namespace {

int transpose(NodeLowering& L, int v, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t d = 0; d < perm.size(); ++d) identity = identity && perm[d] == static_cast<int64_t>(d);
  if (identity) return v;
  Attributes a;
  a.set("perm", perm);
  return L.emit("Transpose", {v}, a);
}

// A constant [rows, cols] matrix of x's dtype with entries f(row, col).
template <class F>
int matrix(NodeLowering& L, DType t, int64_t rows, int64_t cols, F f) {
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(r * cols + c)] = static_cast<float>(f(r, c));
  }
  return L.constant(Tensor::from_floats(t, {rows, cols}, m));
}

// The transform of x (its last axis the real and imaginary parts, 1 or 2) along `axis`, of length
// `length`: forward (onesided: the first length / 2 + 1 bins), inverse, or inverse onesided (irfft).
int transform(NodeLowering& L, int x, int64_t axis, int64_t length, bool inverse, bool onesided) {
  const Shape xs = L.builder().value(x).shape;
  const auto r = static_cast<int64_t>(xs.size());
  check(r >= 2 && (xs.back() == 1 || xs.back() == 2), "the signal's last axis holds the real and imaginary parts (1 or 2 entries), got shape ",
        shape_str(xs));
  check(axis != r - 1, "axis ", axis, " is the last one, the real and imaginary parts");
  check(length > 0, "dft_length ", length, " must be positive");
  const DType t = L.builder().value(x).dtype;
  const int64_t n = xs[static_cast<size_t>(axis)];
  const bool complex = xs.back() == 2;
  // The signal's axis last, the parts' axis dropped: [others..., n].
  std::vector<int64_t> perm;
  Shape others;
  for (int64_t d = 0; d + 1 < r; ++d) {
    if (d != axis) {
      perm.push_back(d);
      others.push_back(xs[static_cast<size_t>(d)]);
    }
  }
  perm.push_back(axis);
  perm.push_back(r - 1);
  const int moved = transpose(L, x, perm);
  Shape part_shape = others;
  part_shape.push_back(n);
  const int re = L.reshape(slice_last_axis(L, moved, 0, 1), part_shape);
  const int im = complex ? L.reshape(slice_last_axis(L, moved, 1, 2), part_shape) : kNoValue;
  const double w = 2.0 * std::numbers::pi / static_cast<double>(length);
  const auto angle = [&](int64_t a, int64_t b) { return w * static_cast<double>((a * b) % length); };
  const auto matmul = [&](int a, int m) { return L.emit("MatMul", {a, m}); };
  std::vector<int> parts;
  int64_t bins = 0;
  if (inverse && onesided) {  // irfft: L real samples from bins [0, L / 2]
    bins = length;
    const int64_t used = std::min(n, length / 2 + 1);
    const auto weight = [&](int64_t k) {
      if (k >= used) return 0.0;
      return (k == 0 || 2 * k == length ? 1.0 : 2.0) / static_cast<double>(length);
    };
    const int cr = matrix(L, t, n, length, [&](int64_t k, int64_t s) { return weight(k) * std::cos(angle(k, s)); });
    int out = matmul(re, cr);
    if (complex) {
      const int sr = matrix(L, t, n, length, [&](int64_t k, int64_t s) { return weight(k) * std::sin(angle(k, s)); });
      out = L.emit("Sub", {out, matmul(im, sr)});
    }
    parts.push_back(out);
  } else {
    bins = onesided ? length / 2 + 1 : length;
    const double scale = inverse ? 1.0 / static_cast<double>(length) : 1.0;
    const int64_t used = std::min(n, length);
    const int c = matrix(L, t, n, bins, [&](int64_t s, int64_t k) { return s < used ? scale * std::cos(angle(s, k)) : 0.0; });
    const int s = matrix(L, t, n, bins, [&](int64_t p, int64_t k) { return p < used ? scale * std::sin(angle(p, k)) : 0.0; });
    // forward (e^-i): Re = re c + im s, Im = im c - re s; inverse (e^+i): Re = re c - im s, Im = re s + im c.
    int real = matmul(re, c), imag = L.emit("Neg", {matmul(re, s)});
    if (inverse) imag = matmul(re, s);
    if (complex) {
      real = L.emit(inverse ? "Sub" : "Add", {real, matmul(im, s)});
      imag = L.emit("Add", {imag, matmul(im, c)});
    }
    parts = {real, imag};
  }
  Shape stacked = others;
  stacked.push_back(bins);
  stacked.push_back(1);
  for (int& p : parts) p = L.reshape(p, stacked);
  Attributes cat;
  cat.set("axis", r - 1);
  const int out = parts.size() == 1 ? parts[0] : L.emit("Concat", parts, cat);
  std::vector<int64_t> back(static_cast<size_t>(r));
  for (size_t d = 0; d < perm.size(); ++d) back[static_cast<size_t>(perm[d])] = static_cast<int64_t>(d);
  return transpose(L, out, back);
}

}  // namespace

void dft(NodeLowering& L) {
  const int64_t r = L.rank(0);
  int64_t axis = L.opset() < 20 ? L.attr_i("axis", 1) : (L.has_input(2) ? L.const_ints(2, "axis").at(0) : -2);
  axis = normalize_axis(axis, r, "axis");
  const bool inverse = L.attr_i("inverse", 0) != 0, onesided = L.attr_i("onesided", 0) != 0;
  const int64_t n = L.shape(0)[static_cast<size_t>(axis)];
  int64_t length = inverse && onesided ? 2 * (n - 1) : n;
  if (L.has_input(1)) length = L.const_ints(1, "dft_length").at(0);
  L.set_output(0, transform(L, L.input(0), axis, length, inverse, onesided));
}

void stft(NodeLowering& L) {
  const Shape xs = L.shape(0);
  check(xs.size() == 3 && (xs[2] == 1 || xs[2] == 2), "the signal must be [batch, length, 1 or 2], got ", shape_str(xs));
  const int64_t step = L.const_ints(1, "frame_step").at(0);
  check(step > 0, "frame_step ", step, " must be positive");
  const int64_t window = L.has_input(2) ? L.shape(2).at(0) : (L.has_input(3) ? L.const_ints(3, "frame_length").at(0) : xs[1]);
  const int64_t length = L.has_input(3) ? L.const_ints(3, "frame_length").at(0) : window;
  check(window > 0 && window <= xs[1], "frames of ", window, " samples do not fit a signal of ", xs[1]);
  const int64_t frames = 1 + (xs[1] - window) / step;
  std::vector<int64_t> at(static_cast<size_t>(frames * window));
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t j = 0; j < window; ++j) at[static_cast<size_t>(f * window + j)] = f * step + j;
  }
  Attributes gather;
  gather.set("axis", int64_t{1});
  int framed = L.emit("Gather", {L.input(0), L.constant(Tensor::from_ints(DType::kI64, {frames, window}, at))}, gather);
  if (L.has_input(2)) framed = L.emit("Mul", {framed, L.reshape(L.input(2), {1, 1, window, 1})});
  L.set_output(0, transform(L, framed, 2, length, false, L.attr_i("onesided", 1) != 0));
}

void mel_weight_matrix(NodeLowering& L) {
  const auto scalar_int = [&](size_t k, const char* what) {
    const std::vector<int64_t> v = L.const_ints(k, what);
    check(v.size() == 1, what, " must hold one value");
    return v[0];
  };
  const auto scalar_float = [&](size_t k, const char* what) {
    const std::vector<double> v = L.const_input(k, what).to_doubles();
    check(v.size() == 1, what, " must hold one value");
    return v[0];
  };
  const int64_t mels = scalar_int(0, "num_mel_bins"), length = scalar_int(1, "dft_length"), rate = scalar_int(2, "sample_rate");
  // The reference's float32 steps: the input's type for the edges and their mel values.
  const auto mel = [](double hz) { return static_cast<double>(2595.0f * std::log1p(static_cast<float>(hz) / 700.0f)) / std::log(10.0); };
  const double low = mel(scalar_float(3, "lower_edge_hertz")), high = mel(scalar_float(4, "upper_edge_hertz"));
  check(mels >= 1 && length >= 1 && rate >= 1, "num_mel_bins, dft_length and sample_rate must be positive, got ", mels, ", ", length,
        ", ", rate);
  const int64_t bins = length / 2 + 1;
  const double step = (high - low) / static_cast<double>(mels + 2);
  std::vector<int64_t> point(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hz = 700.0 * std::expm1((static_cast<double>(i) * step + low) / 2595.0 * std::log(10.0));
    point[static_cast<size_t>(i)] = static_cast<int64_t>(std::floor(static_cast<double>(length + 1) * hz / static_cast<double>(rate)));
  }
  std::vector<double> w(static_cast<size_t>(bins * mels), 0.0);
  const auto at = [&](int64_t j, int64_t i) -> double& {
    check(j >= 0 && j < bins, "mel bin ", i, " reaches spectrogram bin ", j, ", outside the ", bins, " of dft_length ", length);
    return w[static_cast<size_t>(j * mels + i)];
  };
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t left = point[static_cast<size_t>(i)], center = point[static_cast<size_t>(i + 1)], right = point[static_cast<size_t>(i + 2)];
    if (center == left) {
      at(center, i) = 1.0;
    } else {
      for (int64_t j = left; j <= center; ++j) at(j, i) = static_cast<double>(j - left) / static_cast<double>(center - left);
    }
    for (int64_t j = center; j < right; ++j) at(j, i) = static_cast<double>(right - j) / static_cast<double>(right - center);
  }
  const DType type = dtype_from_onnx(static_cast<int>(L.attr_i("output_datatype", 1)));
  check(type != DType::kUndefined, "output_datatype ", L.attr_i("output_datatype", 1), " is not a type fusetune supports");
  Tensor out(type, {bins, mels});
  out.set_doubles(w);
  L.set_output(0, L.constant(std::move(out)));
}

}  // namespace fusetune::importer
