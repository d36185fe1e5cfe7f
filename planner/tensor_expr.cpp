#include "planner/tensor_expr.h"

#include <algorithm>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::planner {

namespace {

using IE = IndexExpr;

const Shape& in_shape(const Graph& g, const Node& n, size_t k) { return g.value(n.inputs[k]).shape; }

// Reads input k with numpy broadcasting against an output of rank `out_rank`.
Access broadcast_access(const Shape& in, size_t out_rank, int slot) {
  Access a;
  a.input = slot;
  for (size_t j = 0; j < in.size(); ++j) {
    const int d = static_cast<int>(j + out_rank - in.size());
    a.index.push_back(in[j] == 1 ? IE::constant(0) : IE::var(d));
  }
  return a;
}

Access identity_access(size_t rank, int slot) {
  Access a;
  a.input = slot;
  for (size_t d = 0; d < rank; ++d) a.index.push_back(IE::var(static_cast<int>(d)));
  return a;
}

Combiner combiner_of(const std::string& op) {
  if (op == "ReduceMax" || op == "MaxPool") return Combiner::kMax;
  if (op == "ReduceMin") return Combiner::kMin;
  if (op == "ReduceProd") return Combiner::kProd;
  if (op == "ArgMax" || op == "ArgMin") return Combiner::kArg;
  return Combiner::kSum;
}

void describe_reduce(const Graph& g, const Node& n, TensorExpr& e) {
  const Shape& in = in_shape(g, n, 0);
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes = n.op == "ArgMax" || n.op == "ArgMin" ? std::vector<int64_t>{n.attrs.i("axis")}
                                                                   : n.attrs.ints("axes");
  for (int64_t& a : axes) a = normalize_axis(a, r, "axes");
  std::sort(axes.begin(), axes.end());
  const bool keep = n.attrs.i("keepdims", 1) != 0;
  const int nout = static_cast<int>(e.out_shape.size());
  Access a;
  int out_pos = 0;
  for (int64_t d = 0; d < r; ++d) {
    auto it = std::find(axes.begin(), axes.end(), d);
    if (it != axes.end()) {
      a.index.push_back(IE::var(nout + static_cast<int>(it - axes.begin())));
      e.reduce_extents.push_back(in[static_cast<size_t>(d)]);
      if (keep) ++out_pos;
    } else {
      a.index.push_back(IE::var(out_pos++));
    }
  }
  e.combiner = combiner_of(n.op);
  e.accesses.push_back(a);
}

void describe_normalization(const Graph& g, const Node& n, TensorExpr& e) {
  const Shape& x = in_shape(g, n, 0);
  const size_t r = x.size();
  const int nout = static_cast<int>(r);
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.i("axis", -1), static_cast<int64_t>(r), "axis"));
  const size_t first_reduced = axis;
  const size_t last_reduced = n.op == "LayerNormalization" ? r : axis + 1;
  e.accesses.push_back(identity_access(r, 0));
  Access stats;  // the reads that compute the statistics over the normalized axes
  for (size_t d = 0; d < r; ++d) {
    if (d >= first_reduced && d < last_reduced) {
      stats.index.push_back(IE::var(nout + static_cast<int>(e.reduce_extents.size())));
      e.reduce_extents.push_back(x[d]);
    } else {
      stats.index.push_back(IE::var(static_cast<int>(d)));
    }
  }
  e.accesses.push_back(stats);
  for (size_t k = 1; k < n.inputs.size(); ++k) {
    if (n.inputs[k] != kNoValue) e.accesses.push_back(broadcast_access(in_shape(g, n, k), r, static_cast<int>(k)));
  }
  e.combiner = Combiner::kSum;
}

void describe_matmul(const Graph& g, const Node& n, TensorExpr& e) {
  const Shape& a = in_shape(g, n, 0);
  const Shape& b = in_shape(g, n, 1);
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  const int R = static_cast<int>(e.out_shape.size());
  const int batch = R - (a_vec ? 0 : 1) - (b_vec ? 0 : 1);
  const int k = R;  // the reduction variable
  e.reduce_extents.push_back(a.back());
  auto operand = [&](const Shape& s, bool vec, bool is_a, int slot) {
    Access acc;
    acc.input = slot;
    if (vec) {
      acc.index.push_back(IE::var(k));
      return acc;
    }
    const int nb = static_cast<int>(s.size()) - 2;
    for (int j = 0; j < nb; ++j) {
      acc.index.push_back(s[static_cast<size_t>(j)] == 1 ? IE::constant(0) : IE::var(j + batch - nb));
    }
    if (is_a) {
      acc.index.push_back(IE::var(batch));
      acc.index.push_back(IE::var(k));
    } else {
      acc.index.push_back(IE::var(k));
      acc.index.push_back(IE::var(R - 1));
    }
    return acc;
  };
  e.accesses.push_back(operand(a, a_vec, true, 0));
  e.accesses.push_back(operand(b, b_vec, false, 1));
  e.combiner = Combiner::kSum;
}

void describe_window(const Graph& g, const Node& n, TensorExpr& e) {
  const Shape& x = in_shape(g, n, 0);
  const size_t sp = x.size() - 2;
  const int R = static_cast<int>(e.out_shape.size());
  const bool conv = n.op == "Conv";
  const auto strides = n.attrs.ints("strides", std::vector<int64_t>(sp, 1));
  const auto dil = n.attrs.ints("dilations", std::vector<int64_t>(sp, 1));
  const auto pads = n.attrs.ints("pads", std::vector<int64_t>(2 * sp, 0));
  std::vector<int64_t> kernel;
  int64_t cin_g = 0, cout_g = 1;
  if (conv) {
    const Shape& w = in_shape(g, n, 1);
    kernel.assign(w.begin() + 2, w.end());
    cin_g = w[1];
    cout_g = w[0] / n.attrs.i("group", 1);
    e.reduce_extents.push_back(cin_g);
  } else {
    kernel = n.attrs.ints("kernel_shape");
  }
  const int tap0 = R + static_cast<int>(e.reduce_extents.size());
  for (int64_t k : kernel) e.reduce_extents.push_back(k);
  Access xa;
  xa.input = 0;
  xa.guarded = std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p != 0; }) ||
               (!conv && n.attrs.i("ceil_mode") != 0);
  xa.index.push_back(IE::var(0));
  xa.index.push_back(conv ? IE::var(1).floordiv(cout_g) * cin_g + IE::var(R) : IE::var(1));
  for (size_t i = 0; i < sp; ++i) {
    xa.index.push_back(IE::var(static_cast<int>(2 + i)) * strides[i] - pads[i] +
                       IE::var(tap0 + static_cast<int>(i)) * dil[i]);
  }
  e.accesses.push_back(xa);
  if (conv) {
    Access wa;
    wa.input = 1;
    wa.index = {IE::var(1), IE::var(R)};
    for (size_t i = 0; i < sp; ++i) wa.index.push_back(IE::var(tap0 + static_cast<int>(i)));
    e.accesses.push_back(wa);
    if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) e.accesses.push_back({2, {IE::var(1)}, false});
  }
  e.combiner = combiner_of(n.op);
}

// Reshape as index arithmetic: dims are matched into groups of equal extent product, so that the
// usual splits and merges become a sum or a div/mod within their group.
Access reshape_access(const Shape& in, const Shape& out) {
  Access a;
  a.index.assign(in.size(), IE::constant(0));
  std::vector<size_t> in_dims, out_dims;
  for (size_t j = 0; j < in.size(); ++j) {
    if (in[j] != 1) in_dims.push_back(j);
  }
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] != 1) out_dims.push_back(d);
  }
  size_t i = 0, o = 0;
  while (i < in_dims.size() && o < out_dims.size()) {
    std::vector<size_t> gi = {in_dims[i++]}, go = {out_dims[o++]};
    int64_t pi = in[gi[0]], po = out[go[0]];
    while (pi != po) {
      if (pi < po && i < in_dims.size()) {
        gi.push_back(in_dims[i]);
        pi *= in[in_dims[i++]];
      } else if (po < pi && o < out_dims.size()) {
        go.push_back(out_dims[o]);
        po *= out[out_dims[o++]];
      } else {
        break;
      }
    }
    IE flat = IE::constant(0);
    for (size_t d : go) flat = flat * out[d] + IE::var(static_cast<int>(d));
    int64_t inner = pi;
    for (size_t t = 0; t < gi.size(); ++t) {
      inner /= in[gi[t]];
      IE idx = flat.floordiv(inner);
      if (t > 0) idx = idx.mod(in[gi[t]]);
      a.index[gi[t]] = idx;
    }
  }
  return a;
}

void describe_movement(const Graph& g, const Node& n, TensorExpr& e) {
  const Shape& in = in_shape(g, n, 0);
  const size_t r = e.out_shape.size();
  const std::string& op = n.op;
  if (op == "Reshape") {
    e.accesses.push_back(reshape_access(in, e.out_shape));
  } else if (op == "Transpose") {
    const auto perm = n.attrs.ints("perm");
    Access a;
    a.index.assign(in.size(), IE::constant(0));
    for (size_t d = 0; d < perm.size(); ++d) a.index[static_cast<size_t>(perm[d])] = IE::var(static_cast<int>(d));
    e.accesses.push_back(a);
  } else if (op == "Concat") {
    const auto axis = static_cast<size_t>(normalize_axis(n.attrs.i("axis"), static_cast<int64_t>(r), "axis"));
    int64_t offset = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      Access a = identity_access(r, static_cast<int>(k));
      a.index[axis] = IE::var(static_cast<int>(axis)) - offset;
      a.guarded = n.inputs.size() > 1;
      e.accesses.push_back(a);
      offset += in_shape(g, n, k)[axis];
    }
  } else if (op == "IfMerge") {
    // The condition, then the two branch results, each read only when the condition picks it.
    e.accesses.push_back(broadcast_access(in, r, 0));
    for (int k : {1, 2}) {
      Access a = identity_access(r, k);
      a.guarded = true;
      e.accesses.push_back(a);
    }
  } else if (op == "Slice") {
    const auto starts = n.attrs.ints("starts");
    const auto steps = n.attrs.ints("steps");
    Access a;
    for (size_t d = 0; d < r; ++d) a.index.push_back(IE::var(static_cast<int>(d)) * steps[d] + starts[d]);
    e.accesses.push_back(a);
  } else if (op == "Gather") {
    const auto axis = static_cast<size_t>(normalize_axis(n.attrs.i("axis"), static_cast<int64_t>(in.size()), "axis"));
    const size_t q = in_shape(g, n, 1).size();
    Access data, idx;
    idx.input = 1;
    for (size_t d = 0; d < in.size(); ++d) {
      if (d < axis) data.index.push_back(IE::var(static_cast<int>(d)));
      if (d == axis) data.index.push_back(IE::data(in[d]));
      if (d > axis) data.index.push_back(IE::var(static_cast<int>(d + q - 1)));
    }
    for (size_t t = 0; t < q; ++t) idx.index.push_back(IE::var(static_cast<int>(axis + t)));
    e.accesses.push_back(data);
    e.accesses.push_back(idx);
  } else if (op == "Expand") {
    e.accesses.push_back(broadcast_access(in, r, 0));
  } else if (op == "Tile") {
    Access a;
    for (size_t d = 0; d < r; ++d) {
      IE v = IE::var(static_cast<int>(d));
      a.index.push_back(in[d] == e.out_shape[d] ? v : v.mod(std::max<int64_t>(in[d], 1)));
    }
    e.accesses.push_back(a);
  } else if (op == "Pad") {
    const auto pads = n.attrs.ints("pads");
    const bool constant = n.attrs.s("mode", "constant") == "constant";
    Access a;
    a.guarded = constant;
    for (size_t d = 0; d < r; ++d) {
      const bool padded = pads[d] != 0 || pads[d + r] != 0;
      a.index.push_back(!padded ? IE::var(static_cast<int>(d))
                                : constant ? IE::var(static_cast<int>(d)) - pads[d] : IE::data(in[d]));
    }
    e.accesses.push_back(a);
  } else if (op == "Resize") {
    Access a;
    for (size_t d = 0; d < r; ++d) a.index.push_back(in[d] == e.out_shape[d] ? IE::var(static_cast<int>(d)) : IE::data(in[d]));
    e.accesses.push_back(a);
  } else if (op == "ScatterND") {
    e.accesses.push_back(identity_access(r, 0));
    for (int slot : {1, 2}) {
      Access a;
      a.input = slot;
      for (int64_t d : in_shape(g, n, static_cast<size_t>(slot))) a.index.push_back(IE::data(d));
      e.accesses.push_back(a);
    }
  } else {
    fail("no tensor expression for op '", op, "'");
  }
}

}  // namespace

TensorExpr describe(const Graph& g, const Node& n) {
  const OpSchema* s = find_op(n.op);
  check(s != nullptr, "node '", n.name, "': '", n.op, "' is not a canonical op");
  TensorExpr e;
  e.out_shape = g.value(n.outputs[0]).shape;
  switch (s->kind) {
    case OpKind::kElementwise:
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (n.inputs[k] != kNoValue) e.accesses.push_back(broadcast_access(in_shape(g, n, k), e.out_shape.size(), static_cast<int>(k)));
      }
      break;
    case OpKind::kReduction: describe_reduce(g, n, e); break;
    case OpKind::kNormalization: describe_normalization(g, n, e); break;
    case OpKind::kContraction:
      if (n.op == "MatMul") {
        describe_matmul(g, n, e);
      } else {
        describe_window(g, n, e);
      }
      break;
    case OpKind::kPooling: describe_window(g, n, e); break;
    case OpKind::kDataMovement: describe_movement(g, n, e); break;
  }
  return e;
}

std::string_view expr_class_name(ExprClass c) {
  switch (c) {
    case ExprClass::kElementwise: return "elementwise";
    case ExprClass::kBroadcast: return "broadcast";
    case ExprClass::kReduction: return "reduction";
    case ExprClass::kContraction: return "contraction";
    case ExprClass::kDataMovement: return "data-movement";
  }
  return "?";
}

ExprClass classify(const Graph& g, const Node& n, const TensorExpr& e) {
  const int nout = static_cast<int>(e.out_shape.size());
  if (!e.reduce_extents.empty()) {
    std::vector<int> reducing_inputs;
    for (const Access& a : e.accesses) {
      bool uses_reduction = false;
      for (const IE& ix : a.index) {
        for (int v = nout; v < e.num_vars(); ++v) uses_reduction = uses_reduction || ix.uses(v);
      }
      if (uses_reduction && std::find(reducing_inputs.begin(), reducing_inputs.end(), a.input) == reducing_inputs.end()) {
        reducing_inputs.push_back(a.input);
      }
    }
    return reducing_inputs.size() >= 2 ? ExprClass::kContraction : ExprClass::kReduction;
  }
  bool broadcast = false;
  for (const Access& a : e.accesses) {
    const Shape& in = g.value(n.inputs[static_cast<size_t>(a.input)]).shape;
    if (a.guarded || in.size() > e.out_shape.size()) return ExprClass::kDataMovement;
    for (size_t j = 0; j < in.size(); ++j) {
      const int d = static_cast<int>(j + e.out_shape.size() - in.size());
      const IE& ix = a.index[j];
      if (ix.is_var(d) && in[j] == e.out_shape[static_cast<size_t>(d)]) continue;
      if (ix.is_const() && ix.value() == 0 && in[j] == 1) continue;
      return ExprClass::kDataMovement;
    }
    broadcast = broadcast || in != e.out_shape;
  }
  return broadcast ? ExprClass::kBroadcast : ExprClass::kElementwise;
}

std::vector<std::vector<Interval>> input_regions(const Graph& g, const Node& n, const TensorExpr& e,
                                                 const std::vector<Interval>& out_tile) {
  std::vector<Interval> full;
  for (int64_t r : e.reduce_extents) full.push_back({0, r - 1});
  return input_regions(g, n, e, out_tile, full);
}

std::vector<std::vector<Interval>> input_regions(const Graph& g, const Node& n, const TensorExpr& e,
                                                 const std::vector<Interval>& out_tile,
                                                 const std::vector<Interval>& reduce_tile) {
  check(out_tile.size() == e.out_shape.size(), "tile of rank ", out_tile.size(), " for an output of rank ",
        e.out_shape.size());
  check(reduce_tile.size() == e.reduce_extents.size(), "reduction tile of rank ", reduce_tile.size(), " for ",
        e.reduce_extents.size(), " reduction axes");
  std::vector<Interval> vars = out_tile;
  vars.insert(vars.end(), reduce_tile.begin(), reduce_tile.end());
  std::vector<std::vector<Interval>> regions(n.inputs.size());
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    if (n.inputs[k] != kNoValue) regions[k].assign(g.value(n.inputs[k]).shape.size(), Interval{0, -1});
  }
  for (const Access& a : e.accesses) {
    const Shape& in = g.value(n.inputs[static_cast<size_t>(a.input)]).shape;
    std::vector<Interval> box;
    bool reads = true;
    for (size_t d = 0; d < a.index.size(); ++d) {
      Interval b = a.index[d].bounds(vars);
      b.lo = std::max<int64_t>(b.lo, 0);
      b.hi = std::min<int64_t>(b.hi, in[d] - 1);
      reads = reads && !b.empty();
      box.push_back(b);
    }
    if (!reads) continue;
    auto& region = regions[static_cast<size_t>(a.input)];
    for (size_t d = 0; d < box.size(); ++d) {
      region[d] = region[d].empty() ? box[d] : Interval{std::min(region[d].lo, box[d].lo), std::max(region[d].hi, box[d].hi)};
    }
  }
  return regions;
}

}  // namespace fusetune::planner
