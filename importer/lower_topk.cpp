#include "importer/lower_topk.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::importer {

namespace {

// x's shape with an axis of extent 1 inserted before axis `at`.
Shape with_unit_axis(Shape s, size_t at) {
  s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), 1);
  return s;
}

// iota_along's positions as float32 (a Cast of a constant, folded): what the ranks, counted in
// float, and the indices the ReduceMax picks are compared with.
int float_positions(NodeLowering& L, size_t rank, size_t at, int64_t extent) {
  return cast_to(L, iota_along(L, rank, static_cast<int64_t>(at), extent), DType::kF32);
}

struct Top {
  int values = kNoValue;   // x's type
  int indices = kNoValue;  // float32 (exact: below 2^24)
};

// The k best of x along `axis` by pairwise ranks (the header's pairwise form): each rank's element
// picked by a ReduceMax against `lowest` (the type's lowest value), and its index, `index`'s
// element (float32, x's shape: the elements' indices in the TopK's input) or, with kNoValue, its
// position along the axis.
Top pairwise_top(NodeLowering& L, int x, size_t axis, int64_t k, bool largest, int lowest, int index) {
  const Shape xs = L.builder().value(x).shape;
  const int64_t n = xs[axis];
  const size_t rank = xs.size() + 1;
  const int xi = L.reshape(x, with_unit_axis(xs, axis + 1));  // [.., i, 1, ..]
  const int xj = L.reshape(x, with_unit_axis(xs, axis));      // [.., 1, j, ..]
  // j beats i: strictly better, or equal (NaN equal to NaN) at a lower position; a NaN is beaten
  // by every other value.
  int strictly = L.emit(largest ? "Greater" : "Less", {xj, xi});
  int equal = L.emit("Equal", {xj, xi});
  if (is_float(L.builder().value(x).dtype)) {
    const int nan_i = L.emit("IsNaN", {xi}), nan_j = L.emit("IsNaN", {xj});
    strictly = L.emit("Or", {strictly, L.emit("And", {nan_i, L.emit("Not", {nan_j})})});
    equal = L.emit("Or", {equal, L.emit("And", {nan_i, nan_j})});
  }
  const int earlier = L.emit("Less", {iota_along(L, rank, static_cast<int64_t>(axis + 1), n), iota_along(L, rank, static_cast<int64_t>(axis), n)});
  const int beats = L.emit("Or", {strictly, L.emit("And", {equal, earlier})});
  // The rank of each element (counted in float, exact below 2^24): [.., i, 1, ..].
  const int ranks = reduce_node(L, "ReduceSum", cast_to(L, beats, DType::kF32), {static_cast<int64_t>(axis + 1)}, 1);
  // Rank r's element, for r < k: the one element whose rank is r.
  const int at_rank = L.emit("Equal", {ranks, float_positions(L, rank, axis + 1, k)});  // [.., i, r, ..]
  const int where = index == kNoValue ? float_positions(L, rank, axis, n) : L.reshape(index, with_unit_axis(xs, axis + 1));
  const int none = L.constant(Tensor::scalar_float(DType::kF32, -1.0f));
  const std::vector<int64_t> over = {static_cast<int64_t>(axis)};
  return {reduce_node(L, "ReduceMax", L.emit("Where", {at_rank, xi, lowest}), over, 0),
          reduce_node(L, "ReduceMax", L.emit("Where", {at_rank, where, none}), over, 0)};
}

// The two-stage form's chunk (a power of two) for `rows` rows of n along the axis, or 0 where no
// chunk keeps both stages within kPairwiseTopK and kMaxTopKPairs.
int64_t chunk_for(int64_t rows, int64_t n, int64_t k) {
  for (int64_t c = kPairwiseTopK; c >= 2; c /= 2) {
    const int64_t chunks = (n + c - 1) / c, candidates = chunks * std::min(k, c);
    if (rows * chunks * c * c > kMaxTopKPairs) continue;
    return candidates <= kPairwiseTopK && rows * candidates * candidates <= kMaxTopKPairs ? c : 0;
  }
  return 0;
}

// The two-stage form: x padded along the axis to whole chunks of c (NaN for floats, which every
// element beats; else the type's worst value, at the highest indices), each chunk's min(k, c) best
// by pairwise ranks with their indices in x, then the k best of those candidates (chunk by chunk,
// each in its order: among equal values, the order of their indices) by pairwise ranks again.
Top chunked_top(NodeLowering& L, size_t axis, int64_t k, bool largest, int lowest, int64_t c) {
  const Shape xs = L.shape(0);
  const DType t = L.val(0).dtype;
  const int64_t n = xs[axis], chunks = (n + c - 1) / c, k1 = std::min(k, c);
  int x = L.input(0);
  if (chunks * c > n) {
    Shape pad = xs;
    pad[axis] = chunks * c - n;
    int fill;
    if (is_float(t)) {
      fill = L.constant(Tensor::scalar_float(t, std::numeric_limits<float>::quiet_NaN()));
    } else {
      const auto [lo, hi] = integer_range(t);
      fill = L.constant(Tensor::scalar_int(t, largest ? lo : hi));
    }
    Attributes expand, cat;
    expand.set("shape", pad);
    cat.set("axis", static_cast<int64_t>(axis));
    x = L.emit("Concat", {x, L.emit("Expand", {fill}, expand)}, cat);
  }
  Shape split = xs;
  split[axis] = c;
  split.insert(split.begin() + static_cast<std::ptrdiff_t>(axis), chunks);  // [.., chunk, c, ..]
  const Top first = pairwise_top(L, L.reshape(x, split), axis + 1, k1, largest, lowest, kNoValue);
  // A candidate's index in x: its position in its chunk plus the chunk's first index.
  const int offset = L.constant(Tensor::scalar_float(DType::kF32, static_cast<float>(c)));
  const int base = L.emit("Mul", {float_positions(L, split.size(), axis, chunks), offset});
  Shape flat = xs;
  flat[axis] = chunks * k1;
  return pairwise_top(L, L.reshape(first.values, flat), axis, k, largest, lowest, L.reshape(L.emit("Add", {first.indices, base}), flat));
}

}  // namespace

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
  int64_t rows = 1;
  for (size_t d = 0; d < xs.size(); ++d) rows *= d == axis ? 1 : xs[d];
  const bool one_stage = n <= kPairwiseTopK && rows * n * n <= kMaxTopKPairs;
  const int64_t chunk = k >= 2 && !one_stage ? chunk_for(rows, n, k) : 0;
  if (k >= 2 && (one_stage || chunk > 0)) {
    // The lowest value of the type, which no element is below: what ReduceMax picks the one
    // element of a rank against.
    int lowest = fill;
    if (!largest) {
      lowest = is_float(t) ? L.constant(Tensor::scalar_float(t, -std::numeric_limits<float>::infinity()))
                           : L.constant(Tensor::scalar_int(t, integer_range(t).first));
    }
    const Top top = chunk > 0 ? chunked_top(L, axis, k, largest, lowest, chunk)
                              : pairwise_top(L, L.input(0), axis, k, largest, lowest, kNoValue);
    L.set_output(0, L.reshape(top.values, out));
    L.set_output(1, L.reshape(cast_to(L, top.indices, DType::kI64), out));
    return;
  }
  const int positions = iota_along(L, xs.size(), static_cast<int64_t>(axis), n);
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
