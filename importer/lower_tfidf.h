// Lowering of ONNX's TfIdfVectorizer (opset 9) on integer tokens to canonical ops.
//
// Per row of X ([C] or [N, C], int32 or int64), pool n-gram j of length n (min_gram_length <= n
// <= max_gram_length) is counted once for each start s and skip distance d (1 to
// max_skip_count + 1; unigrams at d = 1 only, as onnx's reference walks them) with tokens
// X[s + k d] equal to its own for k < n, the positions inside the row. The positions of every
// (s, d) of one length are a constant: one Gather of X at them, Equal to the pool's n-grams of
// that length (ReduceMin over the n tokens), ReduceSum over the positions; the counts go to their
// output columns (ngram_indexes; pool entries that share a column add) by a MatMul with a constant
// 0/1 matrix. Then the mode: TF the counts, IDF weights[i] (or 1) where the count is not 0,
// TFIDF weights[i] times the count (the counts without weights). Y is float32, [K] or [N, K],
// K = max(ngram_indexes) + 1.
//
// Takes a NodeLowering of a TfIdfVectorizer node. Guarantees: onnx's reference counts; a pool of
// strings is refused (kernels hold no strings: tokenize to ids before the model), as are
// attributes that disagree (ngram_counts against the pool, ngram_indexes against the n-grams,
// weights against the output) and comparisons beyond kMaxTfIdfElements, each named.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

inline constexpr int64_t kMaxTfIdfElements = int64_t{1} << 26;

void tfidf_vectorizer(NodeLowering& L);

}  // namespace fusetune::importer
