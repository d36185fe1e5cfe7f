// Power-of-two scales folded into the product they scale: an attention's query scaled by
// 1/sqrt(head) (BART and Whisper scale the projection, DistilBERT its heads; a head of 64 makes
// it 1/8).
//
//   y = Mul(L(Add(MatMul(x, W), b)), s)  or  Div(..., 1 / s)   (s = 2^e, a constant scalar; L a
//   chain of Reshapes and Transposes, possibly empty; the bias Add optional)
//   ==>  L(Add(MatMul(x, s W), s b)), read where y was.
//
// Takes a canonical graph, before pack_sibling_products: the scaled projection then joins its
// siblings as a constant like theirs, and the attention reads its query as laid out (copied 16
// bytes at a time) where it computed the scaling element by element. W is a constant 2-D matrix,
// b a constant holding one value a column (core/graph.h is_column_bias); every
// value on the way from the product to y has y's chain as its one reader and is no graph output,
// and neither is y; W's type is float16, bfloat16, float32 or float64. Guarantees: a scale by a
// power of two is exact, so s W and s b hold W's and b's values scaled exactly but for elements
// below the type's normal range, which round to its subnormal step (float16 weights of a few
// ten-thousandths scaled by 1/8: each product term then moves by at most |x| 2^-25); the fold is
// skipped where an element would overflow. Each product is then the old product times s before
// its rounding, and y's readers read y's values (but for those subnormal terms, and results
// below the type's normal range, rounded once where they were rounded twice). W and b become new
// constants (others may read the old ones); y's readers read L's output; nodes stay in
// topological order. Returns the number of scales folded.
#pragma once

#include "core/graph.h"

namespace fusetune::importer {

int fold_product_scales(Graph& g);

}  // namespace fusetune::importer
