// Tensor expressions: every canonical op stated once as
//     out[o_0..o_n) = combine over r_0..r_k ( f( in_a[map_a(o, r)], in_b[map_b(o, r)], ... ) )
// with iteration variables 0..n-1 for the output axes and n..n+k-1 for the reduction axes.
//
// describe() takes a canonical node of a Graph and returns its output shape, reduction extents,
// combiner and one Access per tensor read (an input may be read through several maps, e.g. Softmax
// reads x[o] and x[o with the axis replaced by r]). Guarantees: for every variable assignment
// inside the iteration space, each access's index lies inside the input, or the access is
// `guarded` (Conv/pool/Pad padding, Concat parts: out-of-range reads yield a fill value and touch
// no memory; IfMerge's branch results: read only when the condition picks them). Classification and tile propagation below are derived from these maps only.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"
#include "planner/index_expr.h"

namespace fusetune::planner {

struct Access {
  int input = 0;                 // the node's input slot
  std::vector<IndexExpr> index;  // one per dimension of that input
  bool guarded = false;
};

enum class Combiner { kNone, kSum, kMax, kMin, kProd, kArg };

struct TensorExpr {
  Shape out_shape;
  std::vector<int64_t> reduce_extents;
  Combiner combiner = Combiner::kNone;
  std::vector<Access> accesses;
  int num_vars() const { return static_cast<int>(out_shape.size() + reduce_extents.size()); }
};

TensorExpr describe(const Graph& g, const Node& n);

enum class ExprClass { kElementwise, kBroadcast, kReduction, kContraction, kDataMovement };
std::string_view expr_class_name(ExprClass c);

// From the maps: no reduction and every access the identity up to broadcasting -> element-wise
// (or broadcast, if some input is smaller than the output); reduction axes read by two or more
// distinct inputs -> contraction; other reductions -> reduction; everything else -> data movement.
ExprClass classify(const Graph& g, const Node& n, const TensorExpr& e);

// The region of each input that an output tile reads (per input dimension, an inclusive interval
// clipped to the input), taking every reduction variable over its full extent. Irregular accesses
// (data leaves) give the whole dimension. One entry per node input; an input that is not read, or
// whose guarded accesses all fall outside it, gets empty intervals.
std::vector<std::vector<Interval>> input_regions(const Graph& g, const Node& n, const TensorExpr& e,
                                                 const std::vector<Interval>& out_tile);
// The same with the reduction variables restricted (one interval per reduction axis), e.g. to
// one step of a contraction's reduction loop.
std::vector<std::vector<Interval>> input_regions(const Graph& g, const Node& n, const TensorExpr& e,
                                                 const std::vector<Interval>& out_tile,
                                                 const std::vector<Interval>& reduce_tile);

}  // namespace fusetune::planner
