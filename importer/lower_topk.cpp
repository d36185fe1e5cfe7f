#include "importer/lower_topk.h"

#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::importer {

void top_k(NodeLowering& L) {
  const Shape xs = L.shape(0);
  const int64_t rank = static_cast<int64_t>(xs.size());
  check(rank > 0, "TopK of a scalar");
  const auto axis = static_cast<size_t>(normalize_axis(L.attr_i("axis", -1), rank, "axis"));
  const int64_t k = L.opset() < 10 ? L.attr_i("k", -1) : L.const_ints(1, "K").at(0);
  const int64_t n = xs[axis];
  check(k >= 0 && k <= n, "k ", k, " is outside [0, ", n, "], the extent of axis ", axis);
  const bool largest = L.attr_i("largest", 1) != 0;
  L.attr_i("sorted", 1);  // sorted either way
  const DType t = L.val(0).dtype;
  Shape out = xs;
  out[axis] = k;
  if (k == 0) {
    L.set_output(0, L.constant(Tensor(t, out)));
    L.set_output(1, L.constant(Tensor(DType::kI64, out)));
    return;
  }
  // The fill of taken elements: what no other element beats.
  int fill;
  if (is_float(t)) {
    const float inf = std::numeric_limits<float>::infinity();
    fill = L.constant(Tensor::scalar_float(t, largest ? -inf : inf));
  } else {
    const auto [lo, hi] = integer_range(t);
    fill = L.constant(Tensor::scalar_int(t, largest ? lo : hi));
  }
  Shape along(xs.size(), 1);
  along[axis] = n;
  std::vector<int64_t> iota(static_cast<size_t>(n));
  std::iota(iota.begin(), iota.end(), int64_t{0});
  const int positions = L.constant(Tensor::from_ints(DType::kI64, along, iota));
  Attributes arg;
  arg.set("axis", static_cast<int64_t>(axis));
  arg.set("keepdims", int64_t{1});
  arg.set("select_last_index", int64_t{0});
  const std::vector<int64_t> axes = {static_cast<int64_t>(axis)};
  std::vector<int> values, indices;
  int taken = kNoValue;  // bool, the elements chosen so far
  for (int64_t j = 0; j < k; ++j) {
    const int key = taken == kNoValue ? L.input(0) : L.emit("Where", {taken, fill, L.input(0)});
    const int best = reduce_node(L, largest ? "ReduceMax" : "ReduceMin", key, axes, 1);
    int index = L.emit(largest ? "ArgMax" : "ArgMin", {key}, arg);
    if (taken != kNoValue) {
      // Every element left equals the fill (ArgMax may then land on a taken one): the first free.
      const int free = cast_to(L, L.emit("Not", {taken}), DType::kF32);
      const int first_free = L.emit("ArgMax", {free}, arg);
      index = L.emit("Where", {L.emit("Equal", {best, fill}), first_free, index});
    }
    const int chosen = L.emit("Equal", {positions, index});
    taken = taken == kNoValue ? chosen : L.emit("Or", {taken, chosen});
    values.push_back(best);
    indices.push_back(index);
  }
  Attributes cat;
  cat.set("axis", static_cast<int64_t>(axis));
  L.set_output(0, values.size() == 1 ? values[0] : L.emit("Concat", values, cat));
  L.set_output(1, indices.size() == 1 ? indices[0] : L.emit("Concat", indices, cat));
}

}  // namespace fusetune::importer
