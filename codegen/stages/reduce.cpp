#include "codegen/stages/reduce.h"

#include "codegen/scalar_ops.h"
#include "codegen/stages/split_k.h"
#include "core/error.h"
#include "core/ops.h"

namespace fusetune::codegen::stages {

namespace {

using planner::Access;
using planner::TensorExpr;

class ReduceStage : public AnchorStage {
 public:
  ReduceStage(LoweringContext& cx, Kernel& k, const Node& n, int64_t max_outputs)
      : cx_(cx), n_(n), capacity_(std::max<int64_t>(1, max_outputs)) {
    const planner::ReductionForm form = planner::reduction_form(cx.g, n, capacity_, cx.cfg.threads, cx.splits(), &cx.group.nodes);
    columns_ = form.columns;
    lanes_ = form.lanes;
    if (columns_) partials_ = k.add_shared("p" + std::to_string(n.outputs[0]) + "_r", DType::kF32, cx.cfg.threads);
    if (lanes_ > kWarpSize) partials_ = k.add_shared("p" + std::to_string(n.outputs[0]) + "_r", DType::kF32, cx.cfg.threads / kWarpSize);
    if (lanes_ > 0 && form.pairs) {
      arg_op_ = (n.op == "ArgMax" ? "argmax" : "argmin") + std::string(n.attrs.i("select_last_index") ? "_last" : "");
      index_ = "w" + std::to_string(n.outputs[0]) + "_i";
      k.thread_locals.push_back({index_, 1, DType::kU32});
      if (lanes_ > kWarpSize) index_partials_ = k.add_shared("p" + std::to_string(n.outputs[0]) + "_i", DType::kU32, cx.cfg.threads / kWarpSize);
    }
  }

  void emit(Kernel& k) override {
    const TensorExpr& e = cx_.exprs.at(static_cast<int>(&n_ - cx_.g.nodes().data()));
    if (columns_) {
      emit_columns(k, e);
      return;
    }
    if (lanes_ > 0) {
      emit_cooperative(k, e);
      return;
    }
    cx_.region_loop(k, n_.outputs[0], [&](const std::vector<std::string>& o) { reduce_output(e, o); });
  }

 private:
  // The coordinates of output `out` (an expression: its place in the region's flattened order, the
  // innermost axis fastest), as lets ft_out, ft_o0, ft_o1, ... in the current block.
  std::vector<std::string> output_coords(const std::string& out) {
    const Region& r = cx_.region.at(n_.outputs[0]);
    cx_.cur().push_back(let(kIndexType, "ft_out", out));
    std::vector<std::string> o(r.n.size());
    std::string inner = "1";
    for (size_t d = r.n.size(); d-- > 0;) {
      o[d] = "ft_o" + std::to_string(d);
      cx_.cur().push_back(let(kIndexType, o[d], r.lo[d] + " + (ft_out / " + inner + ") % " + r.n[d]));
      inner = "(" + inner + " * " + r.n[d] + ")";
    }
    return o;
  }

  // What the two forms that fold floats across threads share: maxima and minima combine by "max"
  // (a minimum as the maximum of the negated elements), the others by "sum"; its initial value,
  // one-float thread-local (declared here), the reduction space's element count, an element's
  // fold into the thread-local and the thread-local's total as the reduction's.
  struct FloatFold {
    bool negated = false;
    std::string op, init, tl, acc;
    int64_t count = 1;
    std::string step(const std::string& x) const {
      return op == "max" ? "ft_fmaxn(" + acc + ", " + (negated ? "-(" + x + ")" : x) + ")" : acc + " + " + x;
    }
    std::string total() const { return negated ? "(-" + acc + ")" : acc; }
  };
  FloatFold float_fold(Kernel& k, const TensorExpr& e) {
    FloatFold f;
    f.negated = n_.op == "ReduceMin";
    f.op = f.negated || n_.op == "ReduceMax" ? "max" : "sum";
    f.init = f.op == "max" ? "(-ft_inf())" : "0.0f";
    f.tl = "w" + std::to_string(n_.outputs[0]) + "_r";
    f.acc = f.tl + "[0]";
    k.thread_locals.push_back({f.tl, 1});
    for (int64_t ext : e.reduce_extents) f.count *= ext;
    return f;
  }

  // The cooperative form: lanes_ lanes an output. A block-uniform loop hands the block's groups
  // of lanes successive batches of the region's outputs; each lane folds every lanes_-th element
  // of the output's flattened reduction space (consecutive lanes, consecutive elements of the
  // innermost reduction axis) into a one-float thread-local, a warp reduction leaves the warp's
  // total in every lane (a minimum as the maximum of the negated elements), several warps' totals
  // meet in shared memory in warp order, and the output's first lane finishes and stores it.
  void emit_cooperative(Kernel& k, const TensorExpr& e) {
    const Node& n = n_;
    const int v = n.outputs[0];
    const Region& r = cx_.region.at(v);
    const bool contraction = find_op(n.op)->kind == OpKind::kContraction;
    const FloatFold f = float_fold(k, e);
    const std::string &op = f.op, &init = f.init, &tl = f.tl, &acc = f.acc;
    const int64_t count = f.count;
    // With several warps an output (group > 1) every output of the region is in the one batch,
    // so the partials are written once.
    const int64_t warps = cx_.cfg.threads / kWarpSize, group = lanes_ / kWarpSize, per_batch = warps / group;
    const std::string lanes = lit(lanes_);
    const std::string outputs = "ft_min(" + product(r.n) + ", " + lit(capacity_) + ")";
    // Split-K (stages/split_k.h): the tile's outputs are one batch, and block ft_split folds the
    // slice [ft_split x slice, + slice) of each output's reduction space.
    const int64_t splits = cx_.splits(), slice = (count + splits - 1) / splits;
    check(splits == 1 || per_batch >= capacity_, "split-K: a cooperative reduction of ", capacity_, " outputs in batches of ", per_batch);
    const std::string first = splits > 1 ? "ft_split * " + lit(slice) : "0";
    const std::string extent = splits > 1 ? "ft_max(ft_min(" + lit(count) + " - " + first + ", " + lit(slice) + "), 0)" : lit(count);
    const std::string out = "(" + std::string(splits > 1 ? "0" : "ft_rb") + " * " + lit(per_batch) + " + ft_thread / " + lanes + ")";
    const std::string busy = out + " < " + outputs;  // warp-uniform: this warp has an output in this batch
    const auto coords = [&]() { return output_coords(out); };
    Block batch = {assign(acc, init)};
    if (!arg_op_.empty()) batch.push_back(assign(index_ + "[0]", "0xffffffffu"));
    batch.push_back(if_then(busy, cx_.fresh_block([&] {
      const std::vector<std::string> o = coords();
      cx_.cur().push_back(let(kIndexType, "ft_lane", "ft_thread % " + lanes));
      Block loop;
      cx_.with_block(loop, [&] {
        cx_.cur().push_back(let(kIndexType, "ft_f", (splits > 1 ? first + " + " : "") + "ft_lane + ft_j * " + lanes));
        fold(e, cx_.reduction_vars_at(e, o, "ft_f"),
             contraction ? std::function<std::string(const std::string&)>{} : [&](const std::string& x) { return f.step(x); }, acc);
      });
      cx_.cur().push_back(serial_for("ft_j", "0", "(" + extent + " - ft_lane + " + lit(lanes_ - 1) + ") / " + lanes, loop,
                                     planner::kReductionLoadsInFlight));
    })));
    const bool arg = !arg_op_.empty();
    check(!arg || splits == 1, "split-K of ", n.op, " (its index pairs have no split-K hand-over)");
    batch.push_back(arg ? warp_arg_reduce(tl, index_, arg_op_, busy) : warp_reduce(tl, op, busy));
    if (group > 1) {
      Block keep = {store(partials_, "ft_thread / " + lit(kWarpSize), acc)};
      if (arg) keep.push_back(store(index_partials_, "ft_thread / " + lit(kWarpSize), index_ + "[0]"));
      batch.push_back(if_then(busy + " && ft_thread % " + lit(kWarpSize) + " == 0", keep));
      batch.push_back(barrier());
    }
    const std::string leader = busy + " && ft_thread % " + lanes + " == 0";  // the output's first lane
    if (group > 1) {
      const std::string warp = "(ft_thread / " + lit(kWarpSize) + ")";
      Block combine = {assign(acc, partials_ + "[" + warp + "]")};
      if (arg) {
        // The warps' pairs in warp order (any order gives the same pick: ft_arg_beats is a total order).
        const std::string pv = partials_ + "[" + warp + " + ft_g]", pi = index_partials_ + "[" + warp + " + ft_g]";
        combine.push_back(assign(index_ + "[0]", index_partials_ + "[" + warp + "]"));
        combine.push_back(serial_for("ft_g", "1", lit(group), {if_then(arg_beats(pv, pi, acc), {assign(acc, pv), assign(index_ + "[0]", pi)})}));
      } else {
        combine.push_back(serial_for("ft_g", "1", lit(group), {assign(acc, warp_combine(op, acc, partials_ + "[" + warp + " + ft_g]"))}));
      }
      batch.push_back(if_then(leader, combine));
    }
    Block store_output = {if_then(leader, cx_.fresh_block([&] {
      const std::vector<std::string> o = coords();
      cx_.store_value(v, o, arg ? "(long long)" + index_ + "[0]" : finish(f.total(), o, "(float)" + lit(count)));
    }))};
    if (splits == 1) {
      batch.insert(batch.end(), store_output.begin(), store_output.end());
      k.body.push_back(uniform_for("ft_rb", "0", "(" + outputs + " + " + lit(per_batch - 1) + ") / " + lit(per_batch), batch));
      return;
    }
    // The one batch, then the last block of the tile combines the splits' totals and stores.
    k.body.insert(k.body.end(), batch.begin(), batch.end());
    emit_split_sum(cx_, k, tl, 1, op);
    k.body.insert(k.body.end(), store_output.begin(), store_output.end());
  }

  // The columns form (planner::column_reduction): the region's outputs in block-uniform batches
  // of 32 (its flattened order, the innermost axis fastest); lane l of every warp takes output l of
  // the batch and warp w folds elements w, w + W, w + 2W, ... (W warps) of its reduction space
  // into a one-float thread-local (a minimum as the maximum of the negated elements); the partials
  // go to shared memory ([warp][lane]), a barrier, the first warp folds each lane's column of them
  // in warp order and stores the output, a barrier before the next batch reuses them.
  void emit_columns(Kernel& k, const TensorExpr& e) {
    const Node& n = n_;
    const int v = n.outputs[0];
    const Region& r = cx_.region.at(v);
    const FloatFold f = float_fold(k, e);
    const std::string &op = f.op, &init = f.init, &acc = f.acc;
    const int64_t count = f.count;
    const int64_t warps = cx_.cfg.threads / kWarpSize;
    const std::string outputs = "ft_min(" + product(r.n) + ", " + lit(capacity_) + ")";
    const std::string lane = "(ft_thread % " + lit(kWarpSize) + ")", warp = "(ft_thread / " + lit(kWarpSize) + ")";
    const std::string out = "(ft_rb * " + lit(kWarpSize) + " + " + lane + ")";
    const std::string busy = out + " < " + outputs;
    const auto coords = [&]() { return output_coords(out); };
    Block batch = {assign(acc, init)};
    batch.push_back(if_then(busy, cx_.fresh_block([&] {
      const std::vector<std::string> o = coords();
      Block loop;
      cx_.with_block(loop, [&] {
        cx_.cur().push_back(let(kIndexType, "ft_f", warp + " + ft_j * " + lit(warps)));
        fold(e, cx_.reduction_vars_at(e, o, "ft_f"), [&](const std::string& x) { return f.step(x); }, acc);
      });
      cx_.cur().push_back(serial_for("ft_j", "0", "(" + lit(count) + " - " + warp + " + " + lit(warps - 1) + ") / " + lit(warps), loop,
                                     planner::kReductionLoadsInFlight));
      cx_.cur().push_back(store(partials_, warp + " * " + lit(kWarpSize) + " + " + lane, acc));
    })));
    batch.push_back(barrier());
    batch.push_back(if_then("ft_thread < " + lit(kWarpSize) + " && " + busy, cx_.fresh_block([&] {
      cx_.cur().push_back(assign(acc, partials_ + "[" + lane + "]"));
      cx_.cur().push_back(serial_for("ft_g", "1", lit(warps),
                                     {assign(acc, warp_combine(op, acc, partials_ + "[ft_g * " + lit(kWarpSize) + " + " + lane + "]"))}));
      const std::vector<std::string> o = coords();
      cx_.store_value(v, o, finish(f.total(), o, "(float)" + lit(count)));
    })));
    batch.push_back(barrier());
    k.body.push_back(uniform_for("ft_rb", "0", "(" + outputs + " + " + lit(kWarpSize - 1) + ") / " + lit(kWarpSize), batch));
  }

  // One element of the reduction space at `vars` folded into `acc`: a contraction's product of its
  // operands added, or `step(x)` of the input's element x, inside the input where the access is
  // guarded (padding contributes nothing).
  void fold(const TensorExpr& e, const std::vector<std::string>& vars, const std::function<std::string(const std::string&)>& step,
            const std::string& acc) {
    const Graph& g = cx_.g;
    const Node& n = n_;
    const Access& a = e.accesses[0];
    const auto ai = cx_.index_of(a, vars);
    const int av = n.inputs[0];
    Block body;
    cx_.with_block(body, [&] {
      if (!step) {
        const auto bi = cx_.index_of(e.accesses[1], vars);
        cx_.cur().push_back(assign(acc, acc + " + " + cx_.value(av, ai) + " * " + cx_.value(n.inputs[1], bi)));
      } else if (!arg_op_.empty()) {
        // The element at its index along the reduced axis (ArgMax and ArgMin reduce one).
        const std::string pos = "(unsigned int)(" + vars.at(e.out_shape.size()) + ")";
        cx_.cur().push_back(let("float", "ft_x", cx_.value(av, ai)));
        cx_.cur().push_back(if_then(arg_beats("ft_x", pos, acc), {assign(acc, "ft_x"), assign(index_ + "[0]", pos)}));
      } else {
        cx_.cur().push_back(assign(acc, step(cx_.value(av, ai))));
      }
    });
    if (a.guarded) {
      cx_.cur().push_back(if_then(cx_.in_range(g.value(av).shape, ai), body));
    } else {
      cx_.cur().insert(cx_.cur().end(), body.begin(), body.end());
    }
  }

  // The output from the reduction's total `value`: a Conv's bias added, a mean divided by its
  // count `cnt`.
  std::string finish(const std::string& value, const std::vector<std::string>& o, const std::string& cnt) {
    const Node& n = n_;
    if (n.op == "Conv" && n.inputs.size() > 2 && n.inputs[2] != kNoValue) return value + " + " + cx_.value(n.inputs[2], {o[1]});
    if (n.op == "ReduceMean") return value + " / " + cnt;
    return value;
  }

  // The serial form: one thread an output, its whole reduction space in sequence.
  void reduce_output(const TensorExpr& e, const std::vector<std::string>& o) {
    const Graph& g = cx_.g;
    const Node& n = n_;
    const int v = n.outputs[0];
    const DType in_dt = g.value(n.inputs[0]).dtype;
    const bool fl = is_float(in_dt);
    const std::string& op = n.op;
    const std::string acc = "ft_acc", cnt = "ft_cnt", best = "ft_best";
    const bool is_max = op == "ReduceMax" || op == "MaxPool" || op == "ArgMax";
    const bool is_min = op == "ReduceMin" || op == "ArgMin";
    std::string init = fl ? "0.0f" : "0";
    if (op == "ReduceProd") init = fl ? "1.0f" : "1";
    if (is_max) init = fl ? "(-ft_inf())" : "(-9223372036854775807LL - 1)";
    if (is_min) init = fl ? "ft_inf()" : "9223372036854775807LL";
    const bool contraction = find_op(op)->kind == OpKind::kContraction;
    // A float contraction accumulates in float; an integer one (MatMulInteger's and ConvInteger's
    // int32 operands) in long long, exactly, as the reference does.
    cx_.cur().push_back(let(contraction && fl ? "float" : compute_ctype(in_dt), acc, contraction ? (fl ? "0.0f" : "0") : init));
    cx_.cur().push_back(let("long long", cnt, "0"));
    cx_.cur().push_back(let("long long", best, "0"));
    const size_t nout = e.out_shape.size();
    cx_.reduction_loops(e, o, [&](const std::vector<std::string>& vars) {
      if (contraction) {
        fold(e, vars, {}, acc);
        return;
      }
      const Access& a = e.accesses[0];
      const auto ai = cx_.index_of(a, vars);
      const int x = n.inputs[0];
      Block body;
      cx_.with_block(body, [&] {
        const bool arg = op == "ArgMax" || op == "ArgMin";
        const std::string xv = cx_.value(x, ai);
        if (arg) {
          const bool last = n.attrs.i("select_last_index") != 0;
          const std::string cmp = op == "ArgMax" ? (last ? " >= " : " > ") : (last ? " <= " : " < ");
          Block take = {assign(acc, xv), assign(best, vars[nout])};
          cx_.cur().push_back(if_then(cnt + " == 0 || " + xv + cmp + acc, take));
        } else if (is_max) {
          cx_.cur().push_back(assign(acc, fl ? "ft_fmaxn(" + acc + ", " + xv + ")" : "ft_max(" + acc + ", " + xv + ")"));
        } else if (is_min) {
          cx_.cur().push_back(assign(acc, fl ? "ft_fminn(" + acc + ", " + xv + ")" : "ft_min(" + acc + ", " + xv + ")"));
        } else if (op == "ReduceProd") {
          cx_.cur().push_back(assign(acc, acc + " * " + xv));
        } else {
          cx_.cur().push_back(assign(acc, acc + " + " + xv));
        }
        cx_.cur().push_back(assign(cnt, cnt + " + 1"));
      });
      if (a.guarded) {
        cx_.cur().push_back(if_then(cx_.in_range(g.value(x).shape, ai), body));
        if (op == "AveragePool" && n.attrs.i("count_include_pad")) {
          // Taps in the padding count; taps beyond it (ceil-mode overhang) do not.
          const auto pads = n.attrs.ints("pads");
          const Shape& xs = g.value(x).shape;
          const size_t sp = xs.size() - 2;
          std::string inside_pad;
          for (size_t d = 0; d < sp; ++d) {
            inside_pad += (inside_pad.empty() ? "" : " && ") + std::string("(") + ai[d + 2] + ") >= " + lit(-pads[d]) + " && (" +
                          ai[d + 2] + ") < " + lit(xs[d + 2] + pads[d + sp]);
          }
          cx_.cur().push_back(if_then("!(" + cx_.in_range(xs, ai) + ") && " + inside_pad, {assign(cnt, cnt + " + 1")}));
        }
      } else {
        cx_.cur().insert(cx_.cur().end(), body.begin(), body.end());
      }
    });
    std::string result = finish(acc, o, "(float)" + cnt);
    if (op == "ReduceMean" && !fl) result = "(" + cnt + " ? " + acc + " / " + cnt + " : 0)";
    if (op == "AveragePool") result = "(" + cnt + " ? " + acc + " / (float)" + cnt + " : 0.0f)";
    if (op == "ArgMax" || op == "ArgMin") result = best;
    cx_.store_value(v, o, result);
  }

  // Whether ArgMax's or ArgMin's element (x, i) beats the lane's pair (held, index_[0]).
  std::string arg_beats(const std::string& x, const std::string& i, const std::string& held) const {
    return "ft_arg_beats(" + x + ", " + i + ", " + held + ", " + index_ + "[0], " + arg_beats_flags(arg_op_) + ")";
  }

  LoweringContext& cx_;
  const Node& n_;
  int64_t capacity_;      // the most outputs of a region
  bool columns_ = false;  // the columns form (planner::column_reduction)
  int64_t lanes_ = 0;     // lanes an output (planner::reduction_lanes), 0: the serial form
  std::string partials_;  // several warps an output: a float a warp; the columns form: a float a thread
  // ArgMax and ArgMin in the cooperative form: the warp reduction's op, the index thread-local
  // beside the float one, and with several warps an output their indices (a u32 a warp).
  std::string arg_op_, index_, index_partials_;
};

}  // namespace

std::unique_ptr<AnchorStage> reduce_stage(LoweringContext& cx, Kernel& k, const Node& n, int64_t max_outputs) {
  return std::make_unique<ReduceStage>(cx, k, n, max_outputs);
}

}  // namespace fusetune::codegen::stages
