#include "reference/compare.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include <sstream>

namespace fusetune::reference {

Tolerance default_tolerance(DType t) {
  switch (t) {
    case DType::kF32: return {1e-4, 1e-6, 1e-4};
    case DType::kF16: return {1e-2, 1e-3, 1e-2};
    case DType::kBF16: return {2e-2, 1e-2, 2e-2};
    case DType::kF64: return {1e-7, 1e-9, 1e-7};
    // one step of the type's grid: float rounding upstream may move a value across a midpoint
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ: return {0.125, 1.0 / 512, 0};
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ: return {0.25, 1.0 / 65536, 0};
    case DType::kF8E8M0: return {1.0, 0, 0};
    case DType::kF4E2M1: return {0.5, 0.5, 0};
    default: return {0, 0, 0};
  }
}

Tolerance tf32_tolerance() { return {1e-2, 1e-4, 5e-3}; }

Comparison compare(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  Comparison c;
  if (actual.shape() != expected.shape()) {
    c.shape_ok = false;
    c.ok = false;
    return c;
  }
  // Both tensors read a piece at a time (whole vectors of doubles took 16 bytes an element).
  constexpr int64_t kPiece = 16384;
  const int64_t n = actual.numel();
  std::vector<double> a, e;
  const auto piece = [&](int64_t first) {
    const auto count = static_cast<size_t>(std::min(kPiece, n - first));
    a.resize(count);
    e.resize(count);
    actual.read_doubles(first, a);
    expected.read_doubles(first, e);
  };
  double worst = 0;
  double magnitude = 0;
  for (int64_t first = 0; first < n; first += kPiece) {
    piece(first);
    for (double v : e) {
      if (std::isfinite(v)) magnitude = std::max(magnitude, std::fabs(v));
    }
  }
  c.max_expected = magnitude;
  const double atol = tol.atol + tol.scale * magnitude;
  for (int64_t first = 0; first < n; first += kPiece) {
    piece(first);
    for (size_t i = 0; i < a.size(); ++i) {
      const bool an = std::isnan(a[i]);
      const bool en = std::isnan(e[i]);
      double err;
      if (an || en) {
        err = an == en ? 0.0 : INFINITY;
      } else if (std::isinf(a[i]) || std::isinf(e[i])) {
        err = a[i] == e[i] ? 0.0 : INFINITY;
      } else {
        err = std::fabs(a[i] - e[i]);
      }
      c.max_abs = std::max(c.max_abs, err);
      if (!en && std::fabs(e[i]) >= 1e-6) c.max_rel = std::max(c.max_rel, err / std::fabs(e[i]));
      const double allowed = atol + tol.rtol * (en ? 0.0 : std::fabs(e[i]));
      if (err > allowed) {
        ++c.mismatches;
        const double excess = std::isinf(err) ? INFINITY : err - allowed;
        if (c.worst_index < 0 || excess > worst) {
          worst = excess;
          c.worst_index = first + static_cast<int64_t>(i);
          c.worst_actual = a[i];
          c.worst_expected = e[i];
        }
      }
    }
  }
  c.ok = c.mismatches == 0;
  return c;
}

std::string Comparison::describe() const {
  std::ostringstream out;
  if (!shape_ok) return "shape mismatch";
  out.precision(3);
  out << "max_abs=" << max_abs << " max_rel=" << max_rel;
  if (!ok) {
    out << " mismatches=" << mismatches << " (worst at element " << worst_index << ": " << worst_actual << " where "
        << worst_expected << " was expected)";
  }
  return out.str();
}

}  // namespace fusetune::reference
