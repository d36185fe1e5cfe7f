#include "importer/lower_det.h"

#include "core/error.h"

namespace fusetune::importer {

namespace {

// A float32 constant [1, n, 1] over the rows: `value(row)`.
template <typename F>
int rows(NodeLowering& L, int64_t n, F value) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) v[static_cast<size_t>(r)] = value(r);
  return L.constant(Tensor::from_floats(DType::kF32, {1, n, 1}, v));
}

}  // namespace

void det(NodeLowering& L) {
  const Shape xs = L.shape(0);
  check(xs.size() >= 2 && xs[xs.size() - 1] == xs[xs.size() - 2], "X must be [..., n, n], got ", shape_str(xs));
  const int64_t n = xs.back();
  check(n >= 1 && n <= kMaxDetOrder, "matrices of order ", n, " are beyond the ", kMaxDetOrder, " Det unrolls");
  const Shape batch(xs.begin(), xs.end() - 2);
  const int64_t count = numel(batch);
  const DType out = L.val(0).dtype;
  const auto c = [&](float v) { return L.constant(Tensor::scalar_float(DType::kF32, v)); };
  const auto op = [&](const char* name, int a, int b) { return L.emit(name, {a, b}); };
  int a = L.reshape(cast_to(L, L.input(0), DType::kF32), {count, n, n});
  const int row_index = L.constant(Tensor::from_ints(DType::kI64, {1, n, 1}, [&] {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) v[static_cast<size_t>(r)] = r;
    return v;
  }()));
  int det = kNoValue, sign = kNoValue;
  Attributes argmax;
  argmax.set("axis", int64_t{1});
  argmax.set("keepdims", int64_t{1});
  argmax.set("select_last_index", int64_t{0});
  for (int64_t k = 0; k < n; ++k) {
    // The pivot: the first row at or below k of the largest magnitude in column k.
    const int at_or_below = rows(L, n, [k](int64_t r) { return r >= k ? 1.0f : 0.0f; });
    const int magnitude = L.emit("Where", {cast_to(L, at_or_below, DType::kBool), L.emit("Abs", {slice_axis(L, a, 2, k, k + 1)}), c(-1.0f)});
    const int pivot_row = cast_to(L, op("Equal", row_index, L.emit("ArgMax", {magnitude}, argmax)), DType::kF32);  // [B, n, 1]
    const int row_k = rows(L, n, [k](int64_t r) { return r == k ? 1.0f : 0.0f; });
    // Rows k and p swapped: A + P (row_k - row_p) - E (row_k - row_p).
    const int from_pivot = reduce_node(L, "ReduceSum", op("Mul", a, pivot_row), {1}, 1);  // [B, 1, n]
    const int diff = op("Sub", slice_axis(L, a, 1, k, k + 1), from_pivot);
    a = op("Sub", op("Add", a, op("Mul", pivot_row, diff)), op("Mul", row_k, diff));
    const int stayed = reduce_node(L, "ReduceSum", op("Mul", pivot_row, row_k), {1}, 1);  // [B, 1, 1]: 1 when p == k
    const int flip = op("Sub", op("Mul", stayed, c(2.0f)), c(1.0f));
    sign = sign == kNoValue ? flip : op("Mul", sign, flip);
    const int pivot = slice_axis(L, slice_axis(L, a, 1, k, k + 1), 2, k, k + 1);  // [B, 1, 1]
    det = det == kNoValue ? pivot : op("Mul", det, pivot);
    if (k + 1 == n) break;
    // The rows below subtract their multiples of row k (none of a zero pivot's column, all zero).
    const int safe = L.emit("Where", {op("Equal", pivot, c(0.0f)), c(1.0f), pivot});
    const int below = rows(L, n, [k](int64_t r) { return r > k ? 1.0f : 0.0f; });
    const int factor = op("Mul", op("Div", slice_axis(L, a, 2, k, k + 1), safe), below);  // [B, n, 1]
    a = op("Sub", a, op("Mul", factor, slice_axis(L, a, 1, k, k + 1)));
  }
  L.set_output(0, cast_to(L, L.reshape(op("Mul", det, sign), batch), out));
}

}  // namespace fusetune::importer
