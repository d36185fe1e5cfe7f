// Comparison of computed tensors with expected ones, numpy.allclose-style with a scale term:
//   |actual - expected| <= atol + scale * max|expected| + rtol * |expected|   element-wise,
// NaN matching NaN. The scale term makes the bound relative to the tensor's magnitude as well as
// each element's: float32 accumulation error grows with the terms summed, not with the (possibly
// near-zero) result, so two correct float32 implementations differ by that much.
//
// Tolerances default per dtype (default_tolerance); integer and bool tensors compare exactly.
// max_rel is taken over elements whose expected magnitude is at least 1e-6.
#pragma once

#include <string>

#include "core/tensor.h"

namespace fusetune::reference {

struct Tolerance {
  double rtol = 0;
  double atol = 0;
  double scale = 0;  // fraction of max|expected| added to atol
};

Tolerance default_tolerance(DType t);

// float32 outputs of MatMuls computed as TF32 (operands rounded to 10 mantissa bits, products
// summed in float32: the `--precision tf32` policy): each product carries up to 2^-10 of relative
// error, so a sum of them is within a few thousandths of the tensor's magnitude.
Tolerance tf32_tolerance();

struct Comparison {
  bool shape_ok = true;
  bool ok = true;
  double max_abs = 0;
  double max_rel = 0;
  double max_expected = 0;  // max |expected| over finite elements
  int64_t mismatches = 0;
  int64_t worst_index = -1;  // flat index of the largest violation
  double worst_actual = 0, worst_expected = 0;  // the values there
  std::string describe() const;
};

Comparison compare(const Tensor& actual, const Tensor& expected, Tolerance tol);

}  // namespace fusetune::reference
