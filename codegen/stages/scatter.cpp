#include "codegen/stages/scatter.h"

#include "codegen/scalar_ops.h"
#include "core/error.h"

namespace fusetune::codegen::stages {

namespace {

class ScatterStage : public AnchorStage {
 public:
  ScatterStage(LoweringContext& cx, const Node& n) : cx_(cx), n_(n) {}

  void emit(Kernel& k) override {
    cx_.region_loop(k, n_.outputs[0], [&](const std::vector<std::string>& o) { scatter_output(o); });
  }

 private:
  void scatter_output(const std::vector<std::string>& o) {
    const Graph& g = cx_.g;
    const Node& n = n_;
    const int v = n.outputs[0];
    const Shape& data = g.value(n.inputs[0]).shape;
    const Shape& ids = g.value(n.inputs[1]).shape;
    const int64_t depth = ids.back();
    const int64_t tuples = depth == 0 ? 0 : numel(ids) / depth;
    const std::string red = n.attrs.s("reduction", "none");
    const bool fl = is_float(g.value(v).dtype);
    const std::string acc = "ft_acc";
    check(cx_.param.count(n.inputs[1]) && cx_.param.count(n.inputs[2]), "ScatterND's indices and updates must be group inputs");
    cx_.cur().push_back(let(compute_ctype(g.value(v).dtype), acc, cx_.value(n.inputs[0], o)));
    Block body;
    cx_.with_block(body, [&] {
      std::string match;
      for (int64_t j = 0; j < depth; ++j) {  // indices viewed as [tuples, depth]
        const std::string flat_i = "(ft_t * " + lit(depth) + " + " + lit(j) + ")";
        const std::string iv = "((long long)" + cx_.param.at(n.inputs[1]) + "[" + flat_i + "])";
        const std::string norm = "(" + iv + " < 0 ? " + iv + " + " + lit(data[static_cast<size_t>(j)]) + " : " + iv + ")";
        match += (match.empty() ? "" : " && ") + std::string("(") + norm + " == " + o[static_cast<size_t>(j)] + ")";
      }
      std::string uoff = "ft_t";
      for (size_t d = static_cast<size_t>(depth); d < data.size(); ++d) uoff = "(" + uoff + " * " + lit(data[d]) + " + " + o[d] + ")";
      const std::string u = load_as_compute(g.value(n.inputs[2]).dtype, cx_.param.at(n.inputs[2]) + "[" + uoff + "]");
      const std::string next = red == "none" ? u : scatter_combine(red, fl, acc, u);
      cx_.cur().push_back(if_then(match.empty() ? "1" : match, {assign(acc, next)}));
    });
    cx_.cur().push_back(serial_for("ft_t", "0", lit(tuples), body));
    cx_.store_value(v, o, acc);
  }

  LoweringContext& cx_;
  const Node& n_;
};

}  // namespace

std::unique_ptr<AnchorStage> scatter_stage(LoweringContext& cx, const Node& n) { return std::make_unique<ScatterStage>(cx, n); }

std::string scatter_combine(const std::string& reduction, bool is_float, const std::string& acc, const std::string& update) {
  if (reduction == "add") return acc + " + " + update;
  if (reduction == "mul") return acc + " * " + update;
  if (reduction == "max") return (is_float ? "fmaxf(" : "ft_max(") + acc + ", " + update + ")";
  if (reduction == "min") return (is_float ? "fminf(" : "ft_min(") + acc + ", " + update + ")";
  fail("ScatterND: reduction '", reduction, "' is not one of none, add, mul, max, min");
}

}  // namespace fusetune::codegen::stages
