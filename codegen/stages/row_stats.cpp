#include "codegen/stages/row_stats.h"

#include <algorithm>

#include "codegen/scalar_ops.h"
#include "core/ops.h"
#include "planner/held_rows.h"

namespace fusetune::codegen::stages {

namespace {

using planner::Access;
using planner::TensorExpr;

// A row's second statistic once complete, in the form its elements use: layer norm's inverse
// deviation; Softmax's reciprocal of the sum of exponentials and LogSoftmax's max plus the sum's
// logarithm, so that an element costs a multiply or a subtract, not a division or a logarithm.
std::string row_factor(const Node& n, const std::string& a, const std::string& b, int64_t count) {
  if (n.op == "LayerNormalization") {
    return "1.0f / sqrtf(" + b + " / " + float_literal(static_cast<double>(count)) + " + " +
           float_literal(n.attrs.f("epsilon", 1e-5f)) + ")";
  }
  return n.op == "Softmax" ? "1.0f / " + b : "(" + a + " + logf(" + b + "))";
}

class RowStatsStage : public AnchorStage {
 public:
  RowStatsStage(LoweringContext& cx, Kernel& k, const Node& n, int64_t max_rows, const RowHandoff& handoff)
      : cx_(cx), n_(n), row_capacity_(max_rows), handoff_(handoff) {
    const int v = n.outputs[0];
    // The held form (planner/held_rows.h): the row in registers, runs of consecutive elements along
    // the innermost axis, 16 bytes of the group's inputs, each lane's runs strided by the row's
    // lanes (a warp's vectors contiguous). Otherwise the element pass over the whole block (below)
    // writes 16-byte vectors that a lane's scattered elements would not.
    const planner::HeldRows h = planner::held_rows(cx.g, cx.group, n, cx.cfg.threads, max_rows);
    group_ = h.warps_per_row;
    count_ = h.count;
    run_ = h.run;
    runs_ = h.runs;
    held_ = h.held;
    check(held_ || (!handoff.gives && handoff.takes < 0), "row_stats: a row handed over in registers must be held");
    const int64_t warps = cx.cfg.threads / kWarpSize;
    if (!held_) {
      sa_ = k.add_shared("s" + std::to_string(v) + "_a", DType::kF32, std::max<int64_t>(1, max_rows));
      sb_ = k.add_shared("s" + std::to_string(v) + "_b", DType::kF32, std::max<int64_t>(1, max_rows));
    }
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
    const bool layer_norm = n.op == "LayerNormalization";
    const size_t rank = r.n.size();
    const std::vector<size_t> axes = planner::normalized_axes(g, n);
    auto normalized = [&](size_t d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); };
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
          const std::vector<std::string> vars = cx_.reduction_vars_at(e, o, "ft_f");
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
    if (held_) {
      emit_held(k, batch, busy, row, lanes, row_coords, row_reduce);
      k.body.push_back(uniform_for("ft_rb", "0", "(" + rows + " + " + lit(per_batch - 1) + ") / " + lit(per_batch), batch));
      return;
    }
    if (layer_norm) {  // mean, then the mean of squared deviations from it
      lane_share(first, "0.0f", [](const std::string& acc, const std::string& xv) { return acc + " + " + xv; });
      row_reduce(first, "sum", pa_);
      batch.push_back(if_then(busy, Block{assign(a0, a0 + " / " + n_elems)}));
      lane_share(second, "0.0f", [&](const std::string& acc, const std::string& xv) {
        const std::string d = "(" + xv + " - " + a0 + ")";
        return acc + " + " + d + " * " + d;
      });
      row_reduce(second, "sum", pb_);
    } else {  // max, then the sum of exponentials relative to it
      lane_share(first, "(-ft_inf())", [](const std::string& acc, const std::string& xv) { return "ft_fmaxn(" + acc + ", " + xv + ")"; });
      row_reduce(first, "max", pa_);
      lane_share(second, "0.0f", [&](const std::string& acc, const std::string& xv) {
        return acc + " + expf(" + xv + " - " + a0 + ")";
      });
      row_reduce(second, "sum", pb_);
    }
    stat_b = row_factor(n, a0, b0, count);
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
      const std::string y = element(xv, "ft_sa", "ft_sb", o);
      cx_.store_value(v, o, y);
    }, true);
  }

 private:
  // The held form's batch: each lane loads its runs of the row once (16-byte vectors where the
  // group inputs read along the row allow, checked at run time), both statistics fold from the
  // registers, and the lane writes its runs' outputs (16-byte stores where exported alone).
  void emit_held(Kernel& k, Block& batch, const std::string& busy, const std::string& row, const std::string& lanes,
                 const std::function<std::vector<std::string>()>& row_coords,
                 const std::function<void(const std::string&, const std::string&, const std::string&)>& row_reduce) {
    const Graph& g = cx_.g;
    const Node& n = n_;
    const int v = n.outputs[0], x = n.inputs[0];
    const Shape& xs = g.value(x).shape;
    const bool layer_norm = n.op == "LayerNormalization";
    const std::vector<size_t> dims = planner::normalized_axes(g, n);
    const std::string held = held_name(v);
    k.thread_locals.push_back({held, runs_ * run_});
    const std::string first = "w" + std::to_string(v) + "_a", second = "w" + std::to_string(v) + "_b";
    const std::string a0 = first + "[0]", b0 = second + "[0]";
    const int64_t span = kWarpSize * group_ * run_;  // elements a round of the row's lanes covers
    const bool whole_rounds = count_ % span == 0;
    // Element `t` of run `j`: valid where inside the row (always, with whole rounds).
    const auto first_of = [&](int64_t j) { return "(ft_lane + " + lit(j * kWarpSize * group_) + ") * " + lit(run_); };
    const auto valid = [&](int64_t j, int64_t t) { return "ft_f" + std::to_string(j) + " + " + lit(t) + " < " + lit(count_); };
    const auto slot = [&](int64_t j, int64_t t) { return held + "[" + std::to_string(j * run_ + t) + "]"; };
    // A pass over the lane's runs inside `busy`: per run j, its first element ft_f<j> and the index
    // of its first element (o: the row's coordinates, the normalized ones from ft_f<j>; the
    // innermost a variable, ft_q<j>); then, where given, ahead(j, o, lane) for every run at the
    // pass's level; then each(j, o, lane) in a scope of its own, with lane(t) the innermost
    // coordinate of element t.
    using RunFn = std::function<void(int64_t, const std::vector<std::string>&, const std::function<std::string(int64_t)>&)>;
    const auto pass = [&](const RunFn& each, const RunFn& ahead) {
      return cx_.fresh_block([&] {
        cx_.cur().push_back(let(kIndexType, "ft_row", row));
        cx_.cur().push_back(let(kIndexType, "ft_lane", "ft_thread % " + lanes));
        const std::vector<std::string> base = row_coords();
        std::vector<std::vector<std::string>> os;
        for (int64_t j = 0; j < runs_; ++j) {
          const std::string f = "ft_f" + std::to_string(j), q = "ft_q" + std::to_string(j);
          cx_.cur().push_back(let(kIndexType, f, first_of(j)));
          std::vector<std::string> o = base;
          int64_t stride = count_;
          for (size_t d : dims) {
            stride /= xs[d];
            o[d] = "(" + f + " / " + lit(stride) + ") % " + lit(xs[d]);
          }
          cx_.cur().push_back(let(kIndexType, q, o.back()));
          o.back() = q;
          os.push_back(o);
        }
        const auto lane_of = [](const std::string& q) { return [q](int64_t t) { return "(" + q + " + " + lit(t) + ")"; }; };
        for (int64_t j = 0; ahead && j < runs_; ++j) ahead(j, os[static_cast<size_t>(j)], lane_of(os[static_cast<size_t>(j)].back()));
        for (int64_t j = 0; j < runs_; ++j) {
          Block scope;
          cx_.with_block(scope, [&] { each(j, os[static_cast<size_t>(j)], lane_of(os[static_cast<size_t>(j)].back())); });
          cx_.cur().push_back(if_then("1", scope));  // a scope of its own: runs may name the same locals
        }
      });
    };
    const auto at = [&](std::vector<std::string> o, const std::function<std::string(int64_t)>& lane, int64_t t) {
      o.back() = lane(t);
      return o;
    };
    using ValueFn = std::function<std::string(int64_t, const std::vector<std::string>&)>;
    // A run's group inputs read along the row (value_of's loads) and the condition for reading
    // them as 16-byte vectors: the run whole, `also`, the reads aligned ("": always).
    struct Fetch {
      std::vector<LoweringContext::VectorRead> reads;
      std::string whole;
      bool ahead = false;  // loaded by fetch_ahead: the vectors are zero where `whole` fails
    };
    const auto fetch = [&](int64_t j, const std::vector<std::string>& o, const std::function<std::string(int64_t)>& lane,
                           const ValueFn& value_of, const std::string& also) {
      Fetch f;
      if (run_ > 1) f.reads = cx_.along_reads(o, run_, lane, [&](const std::vector<std::string>& oo) { value_of(0, oo); });
      f.whole = whole_rounds ? "" : "ft_f" + std::to_string(j) + " + " + lit(run_) + " <= " + lit(count_);
      if (!also.empty()) f.whole += (f.whole.empty() ? "" : " && ") + also;
      if (!f.reads.empty()) f.whole += (f.whole.empty() ? "" : " && ") + cx_.reads_aligned(f.reads);
      return f;
    };
    // fetch, with the reads issued here as 16-byte loads predicated on `whole` (zero elsewhere), so
    // that a lane's loads of all its runs are in flight before the first is used.
    const auto fetch_ahead = [&](int64_t j, const std::vector<std::string>& o, const std::function<std::string(int64_t)>& lane,
                                 const ValueFn& value_of) {
      Fetch f = fetch(j, o, lane, value_of, "");
      cx_.load_runs(f.reads, run_, f.whole);
      f.ahead = true;
      return f;
    };
    // A run's elements computed by value_of(t, o_t) into the current block: from 16-byte loads of
    // the group inputs read along the row where the run is whole (and `also` holds) and they are
    // aligned (loaded here, or by fetch_ahead: `ahead`), element by element (each where valid and
    // inside(t) holds, its loads its own) otherwise; done(t, local, whole) receives each, after()
    // follows a whole run.
    const auto run_of = [&](int64_t j, const std::vector<std::string>& o, const std::function<std::string(int64_t)>& lane,
                            const ValueFn& value_of, const std::function<void(int64_t, const std::string&, bool)>& done,
                            const std::function<void()>& after, const std::string& also,
                            const std::function<std::string(int64_t)>& inside, const Fetch* ahead) {
      const Fetch f = ahead != nullptr ? *ahead : fetch(j, o, lane, value_of, also);
      Block vector;
      cx_.with_block(vector, [&] {
        if (!f.ahead) cx_.load_runs(f.reads, run_);
        for (int64_t t = 0; t < run_; ++t) done(t, value_of(t, at(o, lane, t)), true);
        after();
      });
      if (f.whole.empty()) {
        cx_.cur().insert(cx_.cur().end(), vector.begin(), vector.end());
        return;
      }
      Block scalar;
      for (int64_t t = 0; t < run_; ++t) {
        // Loaded ahead, the vectors' elements are what the loads' memo names; an element here reads
        // its own (a fresh memo; the locals outside stay visible).
        Block one = f.ahead ? cx_.fresh_block([&] { done(t, value_of(t, at(o, lane, t)), false); }) : Block{};
        if (!f.ahead) cx_.with_block(one, [&] { done(t, value_of(t, at(o, lane, t)), false); });
        std::string where = valid(j, t);
        if (const std::string in = inside(t); !in.empty()) where += " && " + in;
        scalar.push_back(if_then(where, one));
      }
      cx_.cur().push_back(if_then(f.whole, vector, scalar));
    };
    // Load: the row's elements into the registers (zero where a run passes the row's end), every
    // run's 16-byte loads issued before the first run is computed. A row handed over reads the
    // producer's value from the producer's registers, the same slot.
    const auto x_of = [&](int64_t j) {
      return [&, j](int64_t t, const std::vector<std::string>& ot) {
        if (handoff_.takes >= 0) {
          const std::string given = held_name(handoff_.takes) + "[" + std::to_string(j * run_ + t) + "]";
          cx_.provided[handoff_.takes] = [given](const std::vector<std::string>&) { return given; };
        }
        return cx_.value(x, ot);
      };
    };
    std::vector<Fetch> fetched(static_cast<size_t>(runs_));
    Block load = pass(
        [&](int64_t j, const std::vector<std::string>& o, const std::function<std::string(int64_t)>& lane) {
          for (int64_t t = 0; t < run_; ++t) cx_.cur().push_back(assign(slot(j, t), "0.0f"));
          run_of(j, o, lane, x_of(j), [&](int64_t t, const std::string& xv, bool) { cx_.cur().push_back(assign(slot(j, t), xv)); },
                 [] {}, "", [](int64_t) { return std::string(); }, &fetched[static_cast<size_t>(j)]);
        },
        [&](int64_t j, const std::vector<std::string>& o, const std::function<std::string(int64_t)>& lane) {
          fetched[static_cast<size_t>(j)] = fetch_ahead(j, o, lane, x_of(j));
        });
    cx_.provided.erase(handoff_.takes);
    // A statistic folded from the registers with step(acc, x) (where valid), into `acc`.
    const auto fold = [&](const std::string& acc, const std::string& init,
                          const std::function<std::string(const std::string&, const std::string&)>& step, const Block& before) {
      batch.push_back(assign(acc, init));
      Block body = before;
      if (!whole_rounds) body.push_back(let(kIndexType, "ft_lane", "ft_thread % " + lanes));
      for (int64_t j = 0; j < runs_; ++j) {
        for (int64_t t = 0; t < run_; ++t) {
          Stmt st = assign(acc, step(acc, slot(j, t)));
          body.push_back(whole_rounds ? std::move(st) : if_then(first_of(j) + " + " + lit(t) + " < " + lit(count_), Block{std::move(st)}));
        }
      }
      batch.push_back(if_then(busy, body));
    };
    const std::string n_elems = float_literal(static_cast<double>(count_));
    if (layer_norm) {  // mean, then the mean of squared deviations from it
      batch.push_back(if_then(busy, load));
      fold(a0, "0.0f", [](const std::string& acc, const std::string& xv) { return acc + " + " + xv; }, {});
      row_reduce(first, "sum", pa_);
      fold(b0, "0.0f", [&](const std::string& acc, const std::string& xv) {
        return acc + " + (" + xv + " - " + a0 + ") * (" + xv + " - " + a0 + ")";
      }, {assign(a0, a0 + " / " + n_elems)});
      row_reduce(second, "sum", pb_);
    } else {  // max, then the sum of exponentials relative to it
      batch.push_back(if_then(busy, load));
      fold(a0, "(-ft_inf())", [](const std::string& acc, const std::string& xv) { return "ft_fmaxn(" + acc + ", " + xv + ")"; }, {});
      row_reduce(first, "max", pa_);
      fold(b0, "0.0f", [&](const std::string& acc, const std::string& xv) { return acc + " + expf(" + xv + " - " + a0 + ")"; }, {});
      row_reduce(second, "sum", pb_);
    }
    batch.push_back(if_then(busy, Block{assign(b0, row_factor(n, a0, b0, count_))}));  // once a row
    // Elements: from the registers, with layer norm's scale and bias at each element's index, those
    // inside the value's region (the normalized axes may be needed in part: a consumer's slice).
    const Region& r = cx_.region.at(v);
    // The condition that index o lies inside the region along the normalized axes (along the
    // innermost from `from` to `to` where given).
    const auto inside_region = [&](const std::vector<std::string>& o, const std::string& from, const std::string& to) {
      std::string all;
      for (size_t d : dims) {
        const bool inner = d + 1 == o.size() && !from.empty();
        const std::string a = inner ? from : o[d], b = inner ? to : o[d];
        all += (all.empty() ? "" : " && ") + std::string("(") + a + ") >= " + r.lo[d] + " && (" + b + ") < " + r.lo[d] + " + " + r.n[d];
      }
      return all;
    };
    const bool runs_out = cx_.out_param.count(v) > 0;  // exported: stored as runs
    // A product's resident A (the rows in their own 16-bit type): its shared buffer by runs too.
    const bool runs_shared = cx_.resident_pitch.count(v) > 0 && cx_.buffer.count(v) > 0;
    Block write = pass([&](int64_t j, const std::vector<std::string>& o, const std::function<std::string(int64_t)>& lane) {
      std::vector<std::string> ys(static_cast<size_t>(run_));
      const auto y_of = [&](int64_t t, const std::vector<std::string>& ot) {
        return element(slot(j, t), a0, b0, ot);
      };
      const bool runs = runs_out || runs_shared;
      run_of(j, o, lane, y_of,
             [&](int64_t t, const std::string& y, bool whole) {
               if (!(runs && whole) && !handoff_.gives) {
                 cx_.store_value(v, at(o, lane, t), y);
                 return;
               }
               const std::string local = "ft_y" + std::to_string(t);
               cx_.cur().push_back(let("float", local, y));
               // Handed over: the output replaces the input in its slot, which nothing reads again.
               if (handoff_.gives) cx_.cur().push_back(assign(slot(j, t), local));
               if (runs && whole) {
                 ys[static_cast<size_t>(t)] = local;
               } else {
                 cx_.store_value(v, at(o, lane, t), local);
               }
             },
             [&] {
               if (runs_shared) {
                 cx_.store_shared_run(v, o, ys);
               } else if (runs_out) {
                 for (int64_t t = 0; t < run_; ++t) cx_.store_shared(v, at(o, lane, t), ys[static_cast<size_t>(t)]);
               }
               if (runs_out) cx_.store_run(v, o, ys);
             },
             inside_region(o, o.back(), lane(run_ - 1)), [&](int64_t t) { return inside_region(at(o, lane, t), "", ""); }, nullptr);
    }, nullptr);
    batch.push_back(if_then(busy, write));
    if (group_ > 1) batch.push_back(barrier());  // the next batch rewrites the partials
  }

  static std::string held_name(int v) { return "w" + std::to_string(v) + "_x"; }

  // Element x at index o of a row of first statistic a and factor f (row_factor): Softmax's and
  // LogSoftmax's, or layer norm's with its scale and bias at o.
  std::string element(const std::string& x, const std::string& a, const std::string& f, const std::vector<std::string>& o) {
    const Node& n = n_;
    if (n.op != "LayerNormalization") return n.op == "Softmax" ? "expf(" + x + " - " + a + ") * " + f : "(" + x + " - " + f + ")";
    const TensorExpr& e = cx_.exprs.at(static_cast<int>(&n - cx_.g.nodes().data()));
    std::string y = "(" + x + " - " + a + ") * " + f + " * " + cx_.value(n.inputs[1], cx_.index_of(e.accesses[2], o));
    if (e.accesses.size() > 3) y = "(" + y + " + " + cx_.value(n.inputs[2], cx_.index_of(e.accesses[3], o)) + ")";
    return y;
  }

  LoweringContext& cx_;
  const Node& n_;
  int64_t row_capacity_;    // rows the statistics arrays hold
  RowHandoff handoff_;
  int64_t group_ = 1;       // warps per row
  std::string sa_, sb_;     // the statistics: max / mean, and sum of exponentials / inverse deviation
  std::string pa_, pb_;     // with several warps per row: each warp's partial of each statistic
  int64_t count_ = 0;       // elements of a row
  int64_t run_ = 4;         // the held form's run: consecutive elements along the innermost axis
  int64_t runs_ = 0;        // runs a lane holds
  bool held_ = false;       // the row held in registers, read once
};

}  // namespace

std::unique_ptr<AnchorStage> row_stats_stage(LoweringContext& cx, Kernel& k, const Node& n, int64_t max_rows,
                                             const RowHandoff& handoff) {
  return std::make_unique<RowStatsStage>(cx, k, n, max_rows, handoff);
}

}  // namespace fusetune::codegen::stages
