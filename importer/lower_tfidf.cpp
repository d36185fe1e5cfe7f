#include "importer/lower_tfidf.h"

#include <algorithm>

#include "core/error.h"

namespace fusetune::importer {

void tfidf_vectorizer(NodeLowering& L) {
  const std::string mode = L.attr_s("mode", "");
  check(mode == "TF" || mode == "IDF" || mode == "TFIDF", "mode '", mode, "' is not one of TF, IDF, TFIDF");
  check(!L.has_attr("pool_strings"), "a pool of strings: kernels hold no strings (tokenize to integer ids before the model)");
  check(L.has_attr("pool_int64s"), "pool_int64s is required");
  const std::vector<int64_t> pool = L.attr_ints("pool_int64s");
  const std::vector<int64_t> counts = L.attr_ints("ngram_counts");
  const std::vector<int64_t> indexes = L.attr_ints("ngram_indexes");
  const std::vector<float> weights = L.attr_floats("weights");
  const int64_t min_n = L.attr_i("min_gram_length", 0), max_n = L.attr_i("max_gram_length", 0), skips = L.attr_i("max_skip_count", 0);
  check(min_n >= 1 && min_n <= max_n && skips >= 0, "min_gram_length ", min_n, ", max_gram_length ", max_n, " and max_skip_count ", skips,
        " do not make a range of n-gram lengths");
  check(!indexes.empty(), "ngram_indexes is empty");
  const int64_t K = *std::max_element(indexes.begin(), indexes.end()) + 1;
  check(*std::min_element(indexes.begin(), indexes.end()) >= 0, "ngram_indexes holds a negative index");
  check(weights.empty() || static_cast<int64_t>(weights.size()) >= K, "weights has ", weights.size(), " entries for ", K, " outputs");
  const Shape xs = L.shape(0);
  check(xs.size() == 1 || xs.size() == 2, "X must be [C] or [N, C], got ", shape_str(xs));
  check(!is_float(L.val(0).dtype), "X must hold integer tokens, got ", dtype_name(L.val(0).dtype));
  const int64_t N = xs.size() == 2 ? xs[0] : 1, C = xs.back();
  const int x = L.reshape(cast_to(L, L.input(0), DType::kI64), {N, C});
  int total = kNoValue;
  int64_t id = 0;  // the pool's n-grams in order, every length counted
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(i) + 1;
    const int64_t begin = counts[i], end = i + 1 < counts.size() ? counts[i + 1] : static_cast<int64_t>(pool.size());
    check(begin >= 0 && begin <= end && end <= static_cast<int64_t>(pool.size()), "ngram_counts ", i, " (", begin,
          ") disagrees with the pool of ", pool.size());
    const int64_t grams = (end - begin) / n;
    const int64_t first = id;
    id += grams;
    check(id <= static_cast<int64_t>(indexes.size()), "ngram_indexes has ", indexes.size(), " entries for at least ", id, " n-grams");
    if (grams == 0 || n < min_n || n > max_n) continue;
    std::vector<int64_t> positions;  // [M, n]
    for (int64_t d = 1; d <= (n == 1 ? 1 : skips + 1); ++d) {
      for (int64_t s = 0; s + (n - 1) * d < C; ++s) {
        for (int64_t k = 0; k < n; ++k) positions.push_back(s + k * d);
      }
    }
    const int64_t M = static_cast<int64_t>(positions.size()) / n;
    if (M == 0) continue;
    check(N * M * grams * n <= kMaxTfIdfElements, "the ", grams, " ", n, "-grams against ", M, " positions of ", N,
          " rows are over the ", kMaxTfIdfElements, " comparisons fusetune lowers");
    Attributes gather;
    gather.set("axis", int64_t{1});
    const int tokens = L.emit("Gather", {x, L.constant(Tensor::from_ints(DType::kI64, {M, n}, positions))}, gather);  // [N, M, n]
    const std::vector<int64_t> grams_of(pool.begin() + begin, pool.begin() + begin + grams * n);
    const int wanted = L.constant(Tensor::from_ints(DType::kI64, {1, 1, grams, n}, grams_of));
    const int equal = cast_to(L, L.emit("Equal", {L.reshape(tokens, {N, M, 1, n}), wanted}), DType::kI32);
    const int matched = reduce_node(L, "ReduceSum", reduce_node(L, "ReduceMin", equal, {3}, 0), {1}, 0);  // [N, grams]
    std::vector<float> column(static_cast<size_t>(grams * K), 0.0f);
    for (int64_t g = 0; g < grams; ++g) column[static_cast<size_t>(g * K + indexes[static_cast<size_t>(first + g)])] = 1.0f;
    const int part = L.emit("MatMul", {cast_to(L, matched, DType::kF32), L.constant(Tensor::from_floats(DType::kF32, {grams, K}, column))});
    total = total == kNoValue ? part : L.emit("Add", {total, part});
  }
  int y = total == kNoValue ? L.constant(Tensor(DType::kF32, {N, K})) : total;
  if (mode != "TF") {
    const int zero = L.constant(Tensor::scalar_float(DType::kF32, 0.0f));
    const int w = weights.empty() ? L.constant(Tensor::scalar_float(DType::kF32, 1.0f))
                                  : L.constant(Tensor::from_floats(DType::kF32, {1, K}, std::vector<float>(weights.begin(), weights.begin() + K)));
    y = mode == "IDF" ? L.emit("Where", {L.emit("Greater", {y, zero}), w, zero}) : L.emit("Mul", {y, w});
  }
  L.set_output(0, xs.size() == 2 ? y : L.reshape(y, {K}));
}

}  // namespace fusetune::importer
