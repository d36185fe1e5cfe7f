#include "codegen/stages/reduce.h"

#include "codegen/scalar_ops.h"
#include "core/ops.h"

namespace fusetune::codegen::stages {

namespace {

using planner::Access;
using planner::TensorExpr;

class ReduceStage : public AnchorStage {
 public:
  ReduceStage(LoweringContext& cx, const Node& n) : cx_(cx), n_(n) {}

  void emit(Kernel& k) override {
    const TensorExpr& e = cx_.exprs.at(static_cast<int>(&n_ - cx_.g.nodes().data()));
    cx_.region_loop(k, n_.outputs[0], [&](const std::vector<std::string>& o) { reduce_output(e, o); });
  }

 private:
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
    cx_.cur().push_back(let(contraction ? "float" : compute_ctype(in_dt), acc, contraction ? "0.0f" : init));
    cx_.cur().push_back(let("long long", cnt, "0"));
    cx_.cur().push_back(let("long long", best, "0"));
    const size_t nout = e.out_shape.size();
    cx_.reduction_loops(e, o, [&](const std::vector<std::string>& vars) {
      if (contraction) {
        const Access& a = e.accesses[0];
        const Access& b = e.accesses[1];
        const auto ai = cx_.index_of(a, vars), bi = cx_.index_of(b, vars);
        const int av = n.inputs[0], bv = n.inputs[1];
        Block body;
        cx_.with_block(body, [&] {
          cx_.cur().push_back(assign(acc, acc + " + " + cx_.value(av, ai) + " * " + cx_.value(bv, bi)));
        });
        if (a.guarded) {
          cx_.cur().push_back(if_then(cx_.in_range(g.value(av).shape, ai), body));
        } else {
          cx_.cur().insert(cx_.cur().end(), body.begin(), body.end());
        }
        return;
      }
      const Access& a = e.accesses[0];
      const auto ai = cx_.index_of(a, vars);
      const int x = n.inputs[0];
      Block body;
      cx_.with_block(body, [&] {
        const std::string xv = cx_.value(x, ai);
        if (op == "ArgMax" || op == "ArgMin") {
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
    std::string result = acc;
    if (op == "Conv" && n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
      result = acc + " + " + cx_.value(n.inputs[2], {o[1]});
    }
    if (op == "ReduceMean") result = fl ? acc + " / (float)" + cnt : "(" + cnt + " ? " + acc + " / " + cnt + " : 0)";
    if (op == "AveragePool") result = "(" + cnt + " ? " + acc + " / (float)" + cnt + " : 0.0f)";
    if (op == "ArgMax" || op == "ArgMin") result = best;
    cx_.store_value(v, o, result);
  }

  LoweringContext& cx_;
  const Node& n_;
};

}  // namespace

std::unique_ptr<AnchorStage> reduce_stage(LoweringContext& cx, const Node& n) { return std::make_unique<ReduceStage>(cx, n); }

}  // namespace fusetune::codegen::stages
