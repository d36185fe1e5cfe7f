#include "importer/lower_data_sized.h"

#include <optional>

#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::importer {

namespace {

// An int64 constant of `shape`: each element its index along `axis`.
int iota(NodeLowering& L, const Shape& shape, size_t axis) {
  const int64_t n = numel(shape);
  const int64_t inner = std::accumulate(shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, shape.end(), int64_t{1}, std::multiplies<>());
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i / inner) % shape[axis];
  return L.constant(Tensor::from_ints(DType::kI64, shape, v));
}

int int64_scalar(NodeLowering& L, int64_t v) { return L.constant(Tensor::scalar_int(DType::kI64, v)); }

int op2(NodeLowering& L, const char* op, int a, int b) { return L.emit(op, {a, b}); }

void check_pairwise(int64_t elements, const std::string& what) {
  check(elements <= kMaxPairwise, what, " needs ", elements, " pairwise comparisons, over the ", kMaxPairwise,
        " fusetune computes for an output of data-dependent size");
}

// For int64 flags [n] (0 or 1): how many of the flags before each one are set, [n]. Up to
// kDirectPrefix flags by one pairwise comparison (n^2); beyond, in blocks of b = cbrt(2n) (the
// flags zero-padded to whole blocks): the count within each block pairwise (n x b), plus the
// counts of the blocks before it, the same function over the blocks' totals; about
// n^(4/3) comparisons, computed in the reductions that read them, never stored.
int exclusive_prefix_count(NodeLowering& L, int flags, int64_t n) {
  const int zero = int64_scalar(L, 0);
  if (n <= kDirectPrefix) {
    const int earlier = op2(L, "Less", iota(L, {1, n}, 1), iota(L, {n, 1}, 0));  // [i, j]: j < i
    return reduce_node(L, "ReduceSum", L.emit("Where", {earlier, L.reshape(flags, {1, n}), zero}), {1}, 0);
  }
  const auto b = static_cast<int64_t>(std::ceil(std::cbrt(2.0 * static_cast<double>(n))));
  const int64_t blocks = (n + b - 1) / b;
  const int padded = L.reshape(zero_pad(L, flags, {0, blocks * b - n}), {blocks, b});
  const int earlier = op2(L, "Less", iota(L, {1, 1, b}, 2), iota(L, {1, b, 1}, 1));  // [., j, k]: k < j
  const int within = reduce_node(L, "ReduceSum", L.emit("Where", {earlier, L.reshape(padded, {blocks, 1, b}), zero}), {2}, 0);
  const int before = exclusive_prefix_count(L, reduce_node(L, "ReduceSum", padded, {1}, 0), blocks);
  const int counts = L.reshape(op2(L, "Add", within, L.reshape(before, {blocks, 1})), {blocks * b});
  return slice_axis(L, counts, 0, 0, n);
}

// The entries output k keeps along its axis of data-dependent size: the bound the shapes give
// (`derived`), or a smaller one the user set for it by name (ImportOptions::output_bounds).
int64_t kept(NodeLowering& L, size_t k, int64_t derived) {
  const std::string& name = L.output_name(k);
  const std::optional<int64_t> user = L.builder().bound_for(name);
  if (!user) return derived;
  check(*user >= 1, "the bound ", *user, " set for output ", k, " ('", name, "') must be at least 1");
  return std::min(derived, *user);
}

// A ScatterND of `rows` ([n, ...]) into zeros of [2n, ...] at `target` ([n] int64: a position
// below n for data, n + i otherwise), its first `keep` rows (at most n).
int compact(NodeLowering& L, int rows, int target, int64_t n, int64_t keep) {
  Shape zeros = L.builder().value(rows).shape;
  zeros[0] = 2 * n;
  Attributes none;
  none.set("reduction", std::string("none"));
  const int scattered =
      L.emit("ScatterND", {L.constant(Tensor(L.builder().value(rows).dtype, zeros)), L.reshape(target, {n, 1}), rows}, none);
  return slice_axis(L, scattered, 0, 0, keep);
}

// Where(data, position, n + i): the target of compact() for flags `data` ([n] bool).
int targets(NodeLowering& L, int data, int position, int64_t n) {
  return L.emit("Where", {data, position, op2(L, "Add", iota(L, {n}, 0), int64_scalar(L, n))});
}

// The first index of the largest of bool `flags` over `axis`. The flags are taken as floats (0 or
// 1, exact), which a warp's lanes reduce together (codegen/stages/reduce.h); integers are a
// thread's serial scan.
int arg_max(NodeLowering& L, int flags, int64_t axis, int64_t keep) {
  const int v = cast_to(L, flags, DType::kF32);
  Attributes a;
  a.set("axis", axis);
  a.set("keepdims", keep);
  a.set("select_last_index", int64_t{0});
  return L.emit("ArgMax", {v}, a);
}

// Any of a bool tensor over `axis` as int64 0 or 1 (the maximum taken in float, as arg_max's).
int any_of(NodeLowering& L, int flags, int64_t axis, int64_t keep) {
  return cast_to(L, reduce_node(L, "ReduceMax", cast_to(L, flags, DType::kF32), {axis}, keep), DType::kI64);
}

// A scalar input's value as a float32 scalar (a one-element tensor reshaped).
int float_scalar(NodeLowering& L, size_t k, const char* what) {
  check(numel(L.shape(k)) == 1, what, " must hold one value, got ", shape_str(L.shape(k)));
  return L.reshape(cast_to(L, L.input(k), DType::kF32), {});
}

}  // namespace

void non_max_suppression(NodeLowering& L) {
  const int64_t center = L.attr_i("center_point_box", 0);
  check(center == 0 || center == 1, "center_point_box must be 0 or 1, got ", center);
  const Shape bs = L.shape(0), ss = L.shape(1);
  check(bs.size() == 3 && bs[2] == 4, "boxes must be [batches, boxes, 4], got ", shape_str(bs));
  check(ss.size() == 3 && ss[0] == bs[0] && ss[2] == bs[1], "scores must be [batches, classes, boxes] for boxes ",
        shape_str(bs), ", got ", shape_str(ss));
  const int64_t B = bs[0], N = bs[1], C = ss[1];
  int64_t K = 0;
  if (L.has_input(2)) {
    const std::vector<int64_t> k = L.const_ints(2, "max_output_boxes_per_class (the bound of the selections)");
    check(k.size() == 1, "max_output_boxes_per_class must hold one value");
    K = std::min(std::max<int64_t>(k[0], 0), N);
  }
  if (L.has_input(3) && L.val(3).is_constant()) {
    const float t = L.val(3).data->to_floats().at(0);
    check(t >= 0.0f && t <= 1.0f, "iou_threshold must be in [0, 1], got ", t);
  }
  const int64_t rows = B * C * K;
  if (rows == 0) {  // nothing can be selected
    L.set_output(0, L.constant(Tensor(DType::kI64, {0, 3})));
    return;
  }
  check(K <= kMaxSelections, "max_output_boxes_per_class ", K, " is over the ", kMaxSelections, " selection rounds fusetune unrolls");
  check_pairwise(B * N * N, "boxes " + shape_str(bs));
  // Each box's corners.
  const int boxes = cast_to(L, L.input(0), DType::kF32);
  const auto coord = [&](int64_t c) { return L.reshape(slice_last_axis(L, boxes, c, c + 1), {B, N}); };
  int xmin, xmax, ymin, ymax;
  if (center == 0) {  // [y1, x1, y2, x2], any diagonal
    const int y1 = coord(0), x1 = coord(1), y2 = coord(2), x2 = coord(3);
    ymin = op2(L, "Min", y1, y2), ymax = op2(L, "Max", y1, y2), xmin = op2(L, "Min", x1, x2), xmax = op2(L, "Max", x1, x2);
  } else {  // [x_center, y_center, width, height]
    const int half = L.constant(Tensor::scalar_float(DType::kF32, 2.0f));
    const int xc = coord(0), yc = coord(1), w = op2(L, "Div", coord(2), half), h = op2(L, "Div", coord(3), half);
    xmin = op2(L, "Sub", xc, w), xmax = op2(L, "Add", xc, w), ymin = op2(L, "Sub", yc, h), ymax = op2(L, "Add", yc, h);
  }
  // Pairwise suppression [B, i, j], as onnxruntime decides it.
  const auto rows_of = [&](int v) { return L.reshape(v, {B, N, 1}); };
  const auto cols_of = [&](int v) { return L.reshape(v, {B, 1, N}); };
  const int zero = L.constant(Tensor::scalar_float(DType::kF32, 0.0f));
  const auto overlap = [&](int lo, int hi) {
    return op2(L, "Max", op2(L, "Sub", op2(L, "Min", rows_of(hi), cols_of(hi)), op2(L, "Max", rows_of(lo), cols_of(lo))), zero);
  };
  const int inter = op2(L, "Mul", overlap(xmin, xmax), overlap(ymin, ymax));
  const int area = op2(L, "Mul", op2(L, "Sub", xmax, xmin), op2(L, "Sub", ymax, ymin));
  const int uni = op2(L, "Sub", op2(L, "Add", rows_of(area), cols_of(area)), inter);
  const int threshold = L.has_input(3) ? float_scalar(L, 3, "iou_threshold") : zero;
  int sup = op2(L, "Greater", op2(L, "Div", inter, uni), threshold);
  for (int positive : {inter, rows_of(area), cols_of(area), uni}) sup = op2(L, "And", sup, op2(L, "Greater", positive, zero));
  const int sup_rows = L.reshape(sup, {B * N, N});
  // The boxes alive per (batch, class).
  const int scores = cast_to(L, L.input(1), DType::kF32);
  int alive = L.has_input(4) ? op2(L, "Greater", scores, float_scalar(L, 4, "score_threshold")) : L.emit("Not", {L.emit("IsNaN", {scores})});
  const int lowest = L.constant(Tensor::scalar_float(DType::kF32, -std::numeric_limits<float>::infinity()));
  const int batch_row = L.constant(Tensor::from_ints(DType::kI64, {B, 1, 1}, [&] {
    std::vector<int64_t> v(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) v[static_cast<size_t>(b)] = b * N;
    return v;
  }()));
  const int box_index = iota(L, {1, 1, N}, 2);
  std::vector<int> picks, valid;
  for (int64_t t = 0; t < K; ++t) {
    const int best = reduce_node(L, "ReduceMax", L.emit("Where", {alive, scores, lowest}), {2}, 1);  // [B, C, 1]
    const int pick = arg_max(L, op2(L, "And", alive, op2(L, "Equal", scores, best)), 2, 1);
    picks.push_back(pick);
    valid.push_back(any_of(L, alive, 2, 1));
    if (t + 1 == K) break;
    Attributes gather;
    gather.set("axis", int64_t{0});
    const int killed = L.reshape(L.emit("Gather", {sup_rows, op2(L, "Add", pick, batch_row)}, gather), {B, C, N});
    alive = op2(L, "And", alive, L.emit("Not", {op2(L, "Or", killed, op2(L, "Equal", box_index, pick))}));
  }
  Attributes last;
  last.set("axis", int64_t{2});
  const int S = picks.size() == 1 ? picks[0] : L.emit("Concat", picks, last);  // [B, C, K]
  const int V = valid.size() == 1 ? valid[0] : L.emit("Concat", valid, last);  // 0 or 1, a prefix per (b, c)
  // Row (b, c, t) of the output: the selections of the (batch, class) pairs before it, plus t.
  const int before = L.reshape(exclusive_prefix_count(L, L.reshape(reduce_node(L, "ReduceSum", V, {2}, 0), {B * C}), B * C), {B, C, 1});
  const int position = L.reshape(op2(L, "Add", before, iota(L, {1, 1, K}, 2)), {rows});
  const int batch_class = L.constant(Tensor::from_ints(DType::kI64, {B, C, K, 2}, [&] {
    std::vector<int64_t> v;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < K; ++t) v.insert(v.end(), {b, c});
    return v;
  }()));
  Attributes cat;
  cat.set("axis", int64_t{3});
  const int triples = L.reshape(L.emit("Concat", {batch_class, L.reshape(S, {B, C, K, 1})}, cat), {rows, 3});
  const int data = L.reshape(cast_to(L, V, DType::kBool), {rows});
  const int out = compact(L, triples, targets(L, data, position, rows), rows, kept(L, 0, rows));
  L.set_output(0, out);
  L.builder().set_extent(out, {reduce_node(L, "ReduceSum", V, {0, 1, 2}, 0), 0});
}

void unique(NodeLowering& L) {
  const Shape xs = L.shape(0);
  const int64_t sorted = L.attr_i("sorted", 1);
  const bool flat = !L.has_attr("axis");
  const int64_t axis = flat ? 0 : normalize_axis(L.attr_i("axis", 0), static_cast<int64_t>(xs.size()), "axis");
  // The items [n, m]: the elements, or the slices along the axis (moved first).
  std::vector<int64_t> perm(xs.size());
  std::iota(perm.begin(), perm.end(), 0);
  int items = L.input(0);
  Shape moved = xs;
  if (!flat && axis != 0) {
    perm.erase(perm.begin() + axis);
    perm.insert(perm.begin(), axis);
    for (size_t d = 0; d < perm.size(); ++d) moved[d] = xs[static_cast<size_t>(perm[d])];
    Attributes t;
    t.set("perm", perm);
    items = L.emit("Transpose", {items}, t);
  }
  const int64_t n = flat ? numel(xs) : xs[static_cast<size_t>(axis)];
  const int64_t m = flat ? 1 : numel(xs) / std::max<int64_t>(n, 1);
  check(n >= 1, "X ", shape_str(xs), " has no items");
  check_pairwise(n * n * m, "X " + shape_str(xs));
  items = L.reshape(items, {n, m});
  const DType dt = L.val(0).dtype;
  const bool floating = is_float(dt);
  // eq[i, j], less[i, j] (item i before item j in the sorted order).
  int eq, less;
  if (m == 1) {
    const int a = L.reshape(items, {n, 1}), b = L.reshape(items, {1, n});
    eq = op2(L, "Equal", a, b);
    less = op2(L, "Less", a, b);
    if (floating && flat) {  // NaN equals NaN and sorts last, as numpy.unique has it
      const int na = L.emit("IsNaN", {a}), nb = L.emit("IsNaN", {b});
      eq = op2(L, "Or", eq, op2(L, "And", na, nb));
      less = op2(L, "Or", less, op2(L, "And", L.emit("Not", {na}), nb));
    }
  } else {
    const int a = L.reshape(items, {n, 1, m}), b = L.reshape(items, {1, n, m});
    const int differ = L.emit("Not", {op2(L, "Equal", a, b)});  // [n, n, m]
    eq = op2(L, "Equal", any_of(L, differ, 2, 0), int64_scalar(L, 0));
    const int first_difference = arg_max(L, differ, 2, 1);  // [n, n, 1]
    const int at = op2(L, "Equal", iota(L, {1, 1, m}, 2), first_difference);
    less = cast_to(L, any_of(L, op2(L, "And", at, op2(L, "Less", a, b)), 2, 0), DType::kBool);
  }
  const int earlier = op2(L, "Less", iota(L, {1, n}, 1), iota(L, {n, 1}, 0));                          // [i, j]: j < i
  const int first = op2(L, "Equal", any_of(L, op2(L, "And", eq, earlier), 1, 0), int64_scalar(L, 0));  // [n]
  const int counts = reduce_node(L, "ReduceSum", cast_to(L, eq, DType::kI64), {1}, 0);
  const int zero = int64_scalar(L, 0);
  int position;  // of each item's distinct value in Y: [n]
  if (sorted != 0) {  // how many distinct values sort before it
    position = reduce_node(L, "ReduceSum", L.emit("Where", {op2(L, "And", L.reshape(first, {n, 1}), less), int64_scalar(L, 1), zero}), {0}, 0);
  } else {  // how many first occurrences come before its own
    const int own = L.reshape(arg_max(L, eq, 1, 0), {n, 1});
    const int before = op2(L, "And", L.reshape(first, {1, n}), op2(L, "Less", iota(L, {1, n}, 1), own));
    position = reduce_node(L, "ReduceSum", L.emit("Where", {before, int64_scalar(L, 1), zero}), {1}, 0);
  }
  const int target = targets(L, first, position, n);
  const int distinct = reduce_node(L, "ReduceSum", cast_to(L, first, DType::kI64), {0}, 0);
  const int64_t keep_y = kept(L, 0, n);
  int y = compact(L, items, target, n, keep_y);
  if (!flat) {
    moved[0] = keep_y;
    y = L.reshape(y, moved);
    if (axis != 0) {
      std::vector<int64_t> back(perm.size());
      for (size_t d = 0; d < perm.size(); ++d) back[static_cast<size_t>(perm[d])] = static_cast<int64_t>(d);
      Attributes t;
      t.set("perm", back);
      y = L.emit("Transpose", {y}, t);
    }
  } else {
    y = L.reshape(y, {keep_y});
  }
  L.set_output(0, y);
  L.builder().set_extent(y, {distinct, static_cast<int>(axis)});
  if (L.output_used(1)) {
    const int indices = compact(L, iota(L, {n}, 0), target, n, kept(L, 1, n));
    L.set_output(1, indices);
    L.builder().set_extent(indices, {distinct, 0});
  }
  if (L.output_used(2)) L.set_output(2, position);
  if (L.output_used(3)) {
    const int c = compact(L, counts, target, n, kept(L, 3, n));
    L.set_output(3, c);
    L.builder().set_extent(c, {distinct, 0});
  }
}

void non_zero_padded(NodeLowering& L) {
  const Shape xs = L.shape(0);
  const int64_t n = numel(xs), r = static_cast<int64_t>(xs.size());
  check(r >= 1, "a scalar input of run-time value is not supported (its output has rank 0 coordinates)");
  if (n == 0) {  // nothing to find
    L.set_output(0, L.constant(Tensor(DType::kI64, {r, 0})));
    return;
  }
  check(n <= kMaxPrefixCount, "X ", shape_str(xs), " has ", n, " elements, over the ", kMaxPrefixCount,
        " fusetune counts for an output of data-dependent size");
  const int nonzero = L.reshape(cast_to(L, L.input(0), DType::kBool), {n});
  const int flags = cast_to(L, nonzero, DType::kI64);
  const int coordinates = L.constant(Tensor::from_ints(DType::kI64, {n, r}, [&] {
    std::vector<int64_t> v;
    const auto strides = strides_of(xs);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t d = 0; d < r; ++d) v.push_back(i / strides[static_cast<size_t>(d)] % xs[static_cast<size_t>(d)]);
    return v;
  }()));
  const int rows = compact(L, coordinates, targets(L, nonzero, exclusive_prefix_count(L, flags, n), n), n, kept(L, 0, n));
  Attributes t;
  t.set("perm", std::vector<int64_t>{1, 0});
  const int out = L.emit("Transpose", {rows}, t);
  L.set_output(0, out);
  L.builder().set_extent(out, {reduce_node(L, "ReduceSum", flags, {0}, 0), 1});
}

}  // namespace fusetune::importer
