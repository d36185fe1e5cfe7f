#include "codegen/stages/row_stats.h"

#include <algorithm>

#include "codegen/scalar_ops.h"
#include "core/ops.h"

namespace fusetune::codegen::stages {

namespace {

using planner::Access;
using planner::TensorExpr;

int64_t norm_axis(const Graph& g, const Node& n) {
  return normalize_axis(n.attrs.i("axis", -1), static_cast<int64_t>(g.value(n.inputs[0]).shape.size()), "axis");
}

class RowStatsStage : public AnchorStage {
 public:
  RowStatsStage(LoweringContext& cx, Kernel& k, const Node& n, int64_t max_rows) : cx_(cx), n_(n), row_capacity_(max_rows) {
    const int v = n.outputs[0];
    sa_ = k.add_shared("s" + std::to_string(v) + "_a", DType::kF32, std::max<int64_t>(1, max_rows));
    sb_ = k.add_shared("s" + std::to_string(v) + "_b", DType::kF32, std::max<int64_t>(1, max_rows));
    // Warps per row: with fewer rows than warps, each row gets the most warps that divide the
    // block evenly (a power of two), so that every warp works; their partial statistics meet in
    // shared memory.
    const int64_t warps = cx.cfg.threads / kWarpSize;
    while (group_ * 2 <= warps / std::max<int64_t>(1, max_rows) && warps % (group_ * 2) == 0) group_ *= 2;
    if (group_ > 1) {
      pa_ = k.add_shared("p" + std::to_string(v) + "_a", DType::kF32, warps);
      pb_ = k.add_shared("p" + std::to_string(v) + "_b", DType::kF32, warps);
    }
  }

  void emit(Kernel& k) override {
    const Graph& g = cx_.g;
    const Node& n = n_;
    const TensorExpr& e = cx_.exprs.at(static_cast<int>(&n - g.nodes().data()));
    const int v = n.outputs[0];
    const int x = n.inputs[0];
    const Region& r = cx_.region.at(v);
    const auto axis = static_cast<size_t>(norm_axis(g, n));
    const bool layer_norm = n.op == "LayerNormalization";
    const size_t rank = r.n.size();
    auto normalized = [&](size_t d) { return layer_norm ? d >= axis : d == axis; };
    // Rows: the region's index space with the normalized axes dropped.
    std::vector<size_t> row_dims;
    std::vector<std::string> row_n;
    for (size_t d = 0; d < rank; ++d) {
      if (!normalized(d)) {
        row_dims.push_back(d);
        row_n.push_back(r.n[d]);
      }
    }
    auto row_index = [&](const std::vector<std::string>& o) {
      std::string off = "0";
      for (size_t j = 0; j < row_dims.size(); ++j) {
        off = "(" + off + " * " + row_n[j] + " + (" + o[row_dims[j]] + " - " + r.lo[row_dims[j]] + "))";
      }
      return off;
    };
    const std::string& sa = sa_;
    const std::string& sb = sb_;
    // Stage 1: statistics, one warp per row (or group_ warps per row when the tile has fewer rows
    // than the block has warps). Each thread reduces a strided share of the row into its
    // thread-local, a warp reduction leaves the warp's total in every lane (with several warps per
    // row, each warp's lane 0 puts it in shared memory and, after a barrier, every thread of the
    // row combines the row's partials in warp order, so all hold the same total), the second pass
    // reads the first statistic straight from there, and the row's first thread writes both to
    // shared memory. A block-uniform loop hands the block's warps successive batches of rows.
    const int64_t cap = std::max<int64_t>(1, row_capacity_);
    int64_t count = 1;
    for (int64_t ext : e.reduce_extents) count *= ext;
    const Access& stats = e.accesses[1];  // x read with the normalized axes as reduction variables
    const int64_t warps = cx_.cfg.threads / kWarpSize;
    const int64_t per_batch = warps / group_;  // rows a batch takes
    const std::string lanes = lit(kWarpSize * group_);  // threads per row
    const std::string rows = "ft_min(" + product(row_n) + ", " + lit(cap) + ")";
    const std::string row = "(ft_rb * " + lit(per_batch) + " + ft_thread / " + lanes + ")";
    const std::string busy = row + " < " + rows;  // warp-uniform: this warp has a row in this batch
    const std::string first = "w" + std::to_string(v) + "_a", second = "w" + std::to_string(v) + "_b";
    k.thread_locals.push_back({first, 1});
    k.thread_locals.push_back({second, 1});
    // The row's coordinates (normalized axes at 0), as lets of ft_row.
    auto row_coords = [&]() {
      std::vector<std::string> o(rank, "0");
      std::string inner = "1";
      for (size_t j = row_dims.size(); j-- > 0;) {
        o[row_dims[j]] = "ft_o" + std::to_string(row_dims[j]);
        cx_.cur().push_back(let(kIndexType, o[row_dims[j]], r.lo[row_dims[j]] + " + (ft_row / " + inner + ") % " + row_n[j]));
        inner = "(" + inner + " * " + row_n[j] + ")";
      }
      return o;
    };
    Block batch;
    // One pass: every lane's share of its row folded into `tl` with step(acc, x).
    auto lane_share = [&](const std::string& tl, const std::string& init,
                          const std::function<std::string(const std::string&, const std::string&)>& step) {
      const std::string acc = tl + "[0]";
      Block body = cx_.fresh_block([&] {
        cx_.cur().push_back(let(kIndexType, "ft_row", row));
        cx_.cur().push_back(let(kIndexType, "ft_lane", "ft_thread % " + lanes));
        const std::vector<std::string> o = row_coords();
        Block loop;
        cx_.with_block(loop, [&] {
          cx_.cur().push_back(let(kIndexType, "ft_f", "ft_lane + ft_j * " + lanes));
          std::vector<std::string> vars = o;
          int64_t stride = count;
          for (size_t q = 0; q < e.reduce_extents.size(); ++q) {
            stride /= e.reduce_extents[q];
            const std::string rv = "ft_r" + std::to_string(q);
            cx_.cur().push_back(let(kIndexType, rv, "(ft_f / " + lit(stride) + ") % " + lit(e.reduce_extents[q])));
            vars.push_back(rv);
          }
          cx_.cur().push_back(assign(acc, step(acc, cx_.value(x, cx_.index_of(stats, vars)))));
        });
        cx_.cur().push_back(serial_for("ft_j", "0", "(" + lit(count) + " - ft_lane + " + lit(kWarpSize * group_ - 1) + ") / " + lanes, loop));
      });
      batch.push_back(assign(acc, init));
      batch.push_back(if_then(busy, body));
    };
    const std::string n_elems = float_literal(static_cast<double>(count));
    const std::string a0 = first + "[0]", b0 = second + "[0]";
    std::string stat_a = a0, stat_b = b0;
    // The row's total of thread-local `tl` in every thread of the row: a warp reduction, then, with
    // several warps per row, their partials through `partials` in warp order.
    auto row_reduce = [&](const std::string& tl, const std::string& op, const std::string& partials) {
      batch.push_back(warp_reduce(tl, op, busy));
      if (group_ == 1) return;
      const std::string acc = tl + "[0]";
      batch.push_back(if_then(busy + " && ft_thread % " + lit(kWarpSize) + " == 0",
                              Block{store(partials, "ft_thread / " + lit(kWarpSize), acc)}));
      batch.push_back(barrier());
      const std::string first_warp = "(ft_thread / " + lanes + ") * " + lit(group_);
      Block combine = {assign(acc, partials + "[" + first_warp + "]"),
                       serial_for("ft_g", "1", lit(group_),
                                  {assign(acc, warp_combine(op, acc, partials + "[" + first_warp + " + ft_g]"))})};
      batch.push_back(if_then(busy, combine));
    };
    if (layer_norm) {  // mean, then the mean of squared deviations from it
      lane_share(first, "0.0f", [](const std::string& acc, const std::string& xv) { return acc + " + " + xv; });
      row_reduce(first, "sum", pa_);
      batch.push_back(if_then(busy, Block{assign(a0, a0 + " / " + n_elems)}));
      lane_share(second, "0.0f", [&](const std::string& acc, const std::string& xv) {
        const std::string d = "(" + xv + " - " + a0 + ")";
        return acc + " + " + d + " * " + d;
      });
      row_reduce(second, "sum", pb_);
      stat_b = "1.0f / sqrtf(" + b0 + " / " + n_elems + " + " + float_literal(n.attrs.f("epsilon", 1e-5f)) + ")";
    } else {  // max, then the sum of exponentials relative to it
      lane_share(first, "(-ft_inf())", [](const std::string& acc, const std::string& xv) { return "ft_fmaxn(" + acc + ", " + xv + ")"; });
      row_reduce(first, "max", pa_);
      lane_share(second, "0.0f", [&](const std::string& acc, const std::string& xv) {
        return acc + " + expf(" + xv + " - " + a0 + ")";
      });
      row_reduce(second, "sum", pb_);
    }
    Block write = cx_.fresh_block([&] {
      cx_.cur().push_back(let(kIndexType, "ft_row", row));
      const std::string ri = row_index(row_coords());
      cx_.cur().push_back(store(sa, ri, stat_a));
      cx_.cur().push_back(store(sb, ri, stat_b));
    });
    batch.push_back(if_then(busy + " && ft_thread % " + lanes + " == 0", write));
    if (group_ > 1) batch.push_back(barrier());  // the next batch rewrites the partials
    k.body.push_back(uniform_for("ft_rb", "0", "(" + rows + " + " + lit(per_batch - 1) + ") / " + lit(per_batch), batch));
    k.body.push_back(barrier());
    // Stage 2: elements.
    cx_.region_loop(k, v, [&](const std::vector<std::string>& o) {
      const std::string xv = cx_.value(x, o);
      const std::string ri = row_index(o);
      cx_.cur().push_back(let("float", "ft_sa", sa + "[" + ri + "]"));
      cx_.cur().push_back(let("float", "ft_sb", sb + "[" + ri + "]"));
      std::string y;
      if (n.op == "Softmax") y = "expf(" + xv + " - ft_sa) / ft_sb";
      if (n.op == "LogSoftmax") y = "(" + xv + " - ft_sa - logf(ft_sb))";
      if (layer_norm) {
        y = "(" + xv + " - ft_sa) * ft_sb * " + cx_.value(n.inputs[1], cx_.index_of(e.accesses[2], o));
        if (e.accesses.size() > 3) y = "(" + y + " + " + cx_.value(n.inputs[2], cx_.index_of(e.accesses[3], o)) + ")";
      }
      cx_.store_value(v, o, y);
    }, true);
  }

 private:
  LoweringContext& cx_;
  const Node& n_;
  int64_t row_capacity_;    // rows the statistics arrays hold
  int64_t group_ = 1;       // warps per row
  std::string sa_, sb_;     // the statistics: max / mean, and sum of exponentials / inverse deviation
  std::string pa_, pb_;     // with several warps per row: each warp's partial of each statistic
};

}  // namespace

std::unique_ptr<AnchorStage> row_stats_stage(LoweringContext& cx, Kernel& k, const Node& n, int64_t max_rows) {
  return std::make_unique<RowStatsStage>(cx, k, n, max_rows);
}

}  // namespace fusetune::codegen::stages
