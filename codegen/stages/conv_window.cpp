#include "codegen/stages/conv_window.h"

#include <algorithm>

#include "codegen/stages/conv_common.h"

namespace fusetune::codegen::stages {

namespace {

using planner::TensorExpr;

std::vector<int64_t> conv_attr(const Node& n, const char* name, int64_t fill, size_t count) {
  return n.attrs.ints(name, std::vector<int64_t>(count, fill));
}

struct WindowPlan {
  int64_t cout_g = 0;         // output channels per group
  std::string b;              // the input window
  int64_t b_cap = 0;
  std::vector<int64_t> caps;  // the window's axes
};

class ConvWindowStage : public AnchorStage {
 public:
  ConvWindowStage(LoweringContext& cx, const Node& n, WindowPlan plan) : cx_(cx), n_(n), st_(std::move(plan)) {}

  void emit(Kernel& k) override;

 private:
  LoweringContext& cx_;
  const Node& n_;
  WindowPlan st_;
};

// The input window of the region (batch x the input channels its output channels read x the
// spatial window, zero outside the input; laid out with the caps) is staged once; then every
// output sums its taps from shared memory, weights from global memory, plus the bias.
void ConvWindowStage::emit(Kernel& k) {
  const Graph& g = cx_.g;
  const Node& n = n_;
  const TensorExpr& e = cx_.exprs.at(static_cast<int>(&n - g.nodes().data()));
  const int v = n.outputs[0], x = n.inputs[0];
  const WindowPlan& st = st_;
  const Region& r = cx_.region.at(v);
  const size_t sp = r.n.size() - 2;
  const auto strides = conv_attr(n, "strides", 1, sp), pads = conv_attr(n, "pads", 0, 2 * sp);
  // The window's origin per input axis (block-uniform).
  const std::string pre = "cw" + std::to_string(v) + "_";
  std::vector<std::string> origin = {r.lo[0], pre + "c0"};
  k.uniform.push_back(let(kIndexType, pre + "c0", r.lo[1] + " / " + lit(st.cout_g)));
  for (size_t i = 0; i < sp; ++i) {
    origin.push_back(pre + "s" + std::to_string(i));
    k.uniform.push_back(let(kIndexType, origin.back(), r.lo[2 + i] + " * " + lit(strides[i]) + " - " + lit(pads[i])));
  }
  k.body.push_back(cx_.staging_loop(k, st.b, lit(st.b_cap), st.b_cap, [&] {
    std::vector<std::string> idx(st.caps.size());
    int64_t inner = 1;
    for (size_t d = st.caps.size(); d-- > 0;) {
      idx[d] = "ft_w" + std::to_string(d);
      cx_.cur().push_back(let(kIndexType, idx[d], origin[d] + " + (ft_e / " + lit(inner) + ") % " + lit(st.caps[d])));
      inner *= st.caps[d];
    }
    cx_.cur().push_back(let("float", "ft_x", "0.0f"));
    Block inside;
    cx_.with_block(inside, [&] { cx_.cur().push_back(assign("ft_x", cx_.value(x, idx))); });
    cx_.cur().push_back(if_then(cx_.in_range(g.value(x).shape, idx), inside));
  }));
  k.body.push_back(barrier());
  cx_.region_loop(k, v, [&](const std::vector<std::string>& o) {
    cx_.cur().push_back(let("float", "ft_acc", "0.0f"));
    cx_.reduction_loops(e, o, [&](const std::vector<std::string>& vars) {
      const auto xi = cx_.index_of(e.accesses[0], vars);
      std::string off = "0";
      for (size_t d = 0; d < xi.size(); ++d) off = "(" + off + " * " + lit(st.caps[d]) + " + (" + xi[d] + " - " + origin[d] + "))";
      const std::string wv = cx_.value(n.inputs[1], cx_.index_of(e.accesses[1], vars));
      cx_.cur().push_back(assign("ft_acc", "ft_acc + " + st.b + "[" + off + "] * " + wv));
    });
    std::string result = "ft_acc";
    if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) result += " + " + cx_.value(n.inputs[2], {o[1]});
    cx_.store_value(v, o, result);
  });
}

}  // namespace

std::unique_ptr<AnchorStage> conv_window_stage(LoweringContext& cx, Kernel& k, const Node& n,
                                               const std::vector<int64_t>& max_extent, int64_t max_groups) {
  const Shape& w = cx.g.value(n.inputs[1]).shape;
  const size_t sp = max_extent.size() - 2;
  WindowPlan st;
  st.cout_g = conv_cout_per_group(cx.g, n);
  const int64_t groups_cap = std::max<int64_t>(1, max_groups);
  const auto strides = conv_attr(n, "strides", 1, sp), dil = conv_attr(n, "dilations", 1, sp);
  st.caps = {std::max<int64_t>(1, max_extent[0]), groups_cap};
  for (size_t i = 0; i < sp; ++i) {
    st.caps.push_back(std::max<int64_t>(1, (max_extent[2 + i] - 1) * strides[i] + (w[2 + i] - 1) * dil[i] + 1));
  }
  st.b_cap = 1;
  for (int64_t c : st.caps) st.b_cap *= c;
  st.b = k.add_shared("cw" + std::to_string(n.outputs[0]), DType::kF32, st.b_cap);
  return std::make_unique<ConvWindowStage>(cx, n, std::move(st));
}

}  // namespace fusetune::codegen::stages
