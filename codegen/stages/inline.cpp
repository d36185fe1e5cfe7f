#include "codegen/stages/inline.h"

#include <algorithm>

#include "codegen/scalar_ops.h"
#include "codegen/stages/resize.h"
#include "core/error.h"
#include "core/ops.h"

namespace fusetune::codegen::stages {

using planner::Access;
using planner::TensorExpr;

std::string inline_node(LoweringContext& cx, const Node& n, const std::vector<std::string>& idx) {
  const Graph& g = cx.g;
  const TensorExpr& e = cx.exprs.at(static_cast<int>(&n - g.nodes().data()));
  const OpKind kind = find_op(n.op)->kind;
  if (n.op == "RandomUniform") {  // Philox's draw at the element's flat index (core/philox.h)
    const Shape& s = g.value(n.outputs[0]).shape;
    std::string flat;
    int64_t stride = 1;
    for (size_t d = s.size(); d-- > 0; stride *= s[d]) {
      if (s[d] == 1) continue;
      const std::string term = stride == 1 ? "(" + idx[d] + ")" : "(" + idx[d] + ") * " + lit(stride);
      flat = flat.empty() ? term : term + " + " + flat;
    }
    const auto key = static_cast<uint64_t>(n.attrs.i("key"));
    return "ft_philox_uniform(" + std::to_string(static_cast<uint32_t>(key)) + "u, " + std::to_string(static_cast<uint32_t>(key >> 32)) +
           "u, (unsigned long long)(" + (flat.empty() ? "0" : flat) + "), " + std::to_string(n.attrs.i("word", 0)) + ")";
  }
  if (kind == OpKind::kElementwise) {
    std::vector<std::string> args;
    for (const Access& a : e.accesses) args.push_back(cx.value(n.inputs[static_cast<size_t>(a.input)], cx.index_of(a, idx)));
    return elementwise_expr(g, n, args);
  }
  const DType dt = g.value(n.outputs[0]).dtype;
  if (n.op == "Concat") {
    std::string result = is_float(dt) ? "0.0f" : "0";
    const std::string name = "v" + std::to_string(cx.next_local());
    cx.cur().push_back(let(compute_ctype(dt), name, result));
    for (const Access& a : e.accesses) {
      const int u = n.inputs[static_cast<size_t>(a.input)];
      const auto ui = cx.index_of(a, idx);
      Block inside;
      cx.with_block(inside, [&] { cx.cur().push_back(assign(name, cx.value(u, ui))); });
      cx.cur().push_back(if_then(cx.in_range(g.value(u).shape, ui), inside));
    }
    return name;
  }
  if (n.op == "IfMerge") {
    // Only the branch result the condition picks is read: the other branch did not run.
    const std::string c = cx.value(n.inputs[0], cx.index_of(e.accesses[0], idx));
    const std::string name = "v" + std::to_string(cx.next_local());
    cx.cur().push_back(let(compute_ctype(dt), name, is_float(dt) ? "0.0f" : "0"));
    Block picked[2];
    for (size_t k = 1; k <= 2; ++k) {
      const Access& a = e.accesses[k];
      cx.with_block(picked[k - 1], [&] { cx.cur().push_back(assign(name, cx.value(n.inputs[static_cast<size_t>(a.input)], cx.index_of(a, idx)))); });
    }
    cx.cur().push_back(if_then(c + " != 0", picked[0], picked[1]));
    return name;
  }
  if (n.op == "Gather") {
    const Access& data = e.accesses[0];
    const int ids = n.inputs[1];
    // One constant index (a class token's row) is a literal: the kernel loads nothing for it, and
    // its index arithmetic stays known to the analyses of codegen/barrier_ownership.h.
    const Value& idv = g.value(ids);
    const std::string iv = idv.is_constant() && idv.data->numel() == 1 ? lit(idv.data->to_ints()[0])
                                                                        : cx.value(ids, cx.index_of(e.accesses[1], idx));
    const int64_t axis = normalize_axis(n.attrs.i("axis"), static_cast<int64_t>(g.value(n.inputs[0]).shape.size()), "axis");
    const int64_t extent = g.value(n.inputs[0]).shape[static_cast<size_t>(axis)];
    const std::string fixed = "ft_min(" + lit(extent - 1) + ", ft_max(0, (" + iv + " < 0 ? " + iv + " + " + lit(extent) + " : " + iv + ")))";
    std::vector<std::string> di;
    for (size_t d = 0; d < data.index.size(); ++d) {
      di.push_back(data.index[d].has_data() ? fixed : data.index[d].code([&](int i) { return idx[static_cast<size_t>(i)]; }));
    }
    return cx.value(n.inputs[0], di);
  }
  if (n.op == "Pad") {
    const auto pads = n.attrs.ints("pads");
    const std::string mode = n.attrs.s("mode", "constant");
    const Shape& in = g.value(n.inputs[0]).shape;
    const size_t r = in.size();
    std::vector<std::string> pi;
    for (size_t d = 0; d < r; ++d) {
      const std::string c = "(" + idx[d] + " - " + lit(pads[d]) + ")";
      if (mode == "constant") {
        pi.push_back(c);
      } else if (mode == "edge") {
        pi.push_back("ft_min(" + lit(in[d] - 1) + ", ft_max(0, " + c + "))");
      } else {  // reflect without repeating the edge
        const int64_t period = std::max<int64_t>(1, 2 * (in[d] - 1));
        const std::string m = "ft_fmod(" + c + ", " + lit(period) + ")";
        pi.push_back(in[d] == 1 ? "0" : "(" + m + " >= " + lit(in[d]) + " ? " + lit(period) + " - " + m + " : " + m + ")");
      }
    }
    if (mode != "constant") return cx.value(n.inputs[0], pi);
    return cx.guarded(n.inputs[0], pi, is_float(dt) ? float_literal(n.attrs.f("value")) : lit(static_cast<int64_t>(n.attrs.f("value"))));
  }
  if (n.op == "Resize") return resize_expr(cx, n, idx);
  // Reshape, Transpose, Slice, Expand, Tile: one read through the index map.
  const Access& a = e.accesses.at(0);
  return cx.value(n.inputs[static_cast<size_t>(a.input)], cx.index_of(a, idx));
}

void element_stage(LoweringContext& cx, Kernel& k, int v) {
  k.body.push_back(comment("write " + cx.g.value(v).name));
  cx.region_loop(k, v, [&](const std::vector<std::string>& o) {
    cx.store_value(v, o, inline_node(cx, cx.g.nodes()[static_cast<size_t>(cx.producer.at(v))], o));
  }, true);
}

}  // namespace fusetune::codegen::stages
