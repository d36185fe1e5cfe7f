#include "planner/attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "core/ops.h"
#include "planner/tiling.h"
#include "planner/toeplitz.h"
#include "reference/kernels.h"

namespace fusetune::planner {

std::optional<AttentionCore> match_attention(const Graph& g, const FusionGroup& group) {
  std::map<int, int> producer;                // value -> the member computing it
  std::map<int, std::vector<int>> consumers;  // value -> the members reading it
  for (int id : group.nodes) {
    const Node& n = g.nodes()[static_cast<size_t>(id)];
    producer[n.outputs[0]] = id;
    for (int in : n.inputs) {
      if (in != kNoValue) consumers[in].push_back(id);
    }
  }
  const std::set<int> exported(group.outputs.begin(), group.outputs.end());
  std::map<int, bool> inlined_memo;
  // True if v reaches the group's inputs through inlined ops only.
  std::function<bool(int)> inlined_only = [&](int v) {
    auto p = producer.find(v);
    if (p == producer.end()) return true;
    if (auto m = inlined_memo.find(v); m != inlined_memo.end()) return m->second;
    const Node& n = g.nodes()[static_cast<size_t>(p->second)];
    bool ok = !runs_as_stage(n);
    for (int in : n.inputs) ok = ok && (in == kNoValue || inlined_only(in));
    return inlined_memo[v] = ok;
  };
  // The one member reading v (which leaves the group nowhere), or -1.
  const auto sole_reader = [&](int v) {
    auto c = consumers.find(v);
    return exported.count(v) || c == consumers.end() || c->second.size() != 1 ? -1 : c->second[0];
  };
  for (int s : group.nodes) {
    const Node& soft = g.nodes()[static_cast<size_t>(s)];
    if (soft.op != "Softmax") continue;
    const Shape& ss = g.value(soft.inputs[0]).shape;
    if (ss.size() < 2 || normalize_axis(soft.attrs.i("axis", -1), static_cast<int64_t>(ss.size()), "axis") !=
                             static_cast<int64_t>(ss.size()) - 1) {
      continue;
    }
    AttentionCore c;
    c.softmax = s;
    c.absorbed = {s};
    // Forward: Casts of P's shape, then the MatMul reading P as its first operand.
    int v = soft.outputs[0];
    for (int next = sole_reader(v); next >= 0; next = sole_reader(v)) {
      const Node& n = g.nodes()[static_cast<size_t>(next)];
      if (n.op == "Cast" && g.value(n.outputs[0]).shape == ss && is_float(g.value(n.outputs[0]).dtype)) {
        c.absorbed.push_back(next);
        v = n.outputs[0];
        continue;
      }
      if (n.op == "MatMul" && n.inputs[0] == v && n.inputs[1] != v) c.output = next;
      break;
    }
    if (c.output < 0) continue;
    const Node& pv = g.nodes()[static_cast<size_t>(c.output)];
    const Shape& os = g.value(pv.outputs[0]).shape;
    const Shape& vs = g.value(pv.inputs[1]).shape;
    if (vs.size() < 2 || os.size() != ss.size() || !std::equal(ss.begin(), ss.end() - 1, os.begin()) ||
        !inlined_only(pv.inputs[1])) {
      continue;
    }
    // Backward: the element-wise chain of the scores' shape from the Softmax to one MatMul; every
    // other operand of the chain computed inline from the group's inputs.
    // A value of the path: the scores' elements, their rows and keys the last two axes (a Reshape
    // may regroup the axes before them, as Swin's shifted windows do to add their mask).
    const auto rows_and_keys = [&](const Shape& x) {
      return x.size() >= 2 && numel(x) == numel(ss) && x[x.size() - 2] == ss[ss.size() - 2] && x.back() == ss.back();
    };
    bool ok = true;
    std::vector<int> path = {soft.inputs[0]};
    std::set<int> seen;
    while (ok && !path.empty()) {
      const int u = path.back();
      path.pop_back();
      if (!seen.insert(u).second) continue;
      auto p = producer.find(u);
      const Shape& us = g.value(u).shape;
      if (p == producer.end() || !rows_and_keys(us) || exported.count(u)) {
        ok = false;
        break;
      }
      const Node& n = g.nodes()[static_cast<size_t>(p->second)];
      if (n.op == "MatMul") {
        ok = us == ss && (c.scores < 0 || c.scores == p->second);
        c.scores = p->second;
        continue;
      }
      const bool regroup = n.op == "Reshape" && rows_and_keys(g.value(n.inputs[0]).shape);
      if (find_op(n.op)->kind != OpKind::kElementwise && !regroup) {
        ok = false;
        break;
      }
      c.absorbed.push_back(p->second);
      for (int w : n.inputs) {
        if (w == kNoValue || inlined_only(w)) continue;
        if (!regroup && g.value(w).shape != us) {  // the path is read where it is written: no broadcast
          ok = false;
          break;
        }
        path.push_back(w);
      }
    }
    if (!ok || c.scores < 0) continue;
    const Node& qk = g.nodes()[static_cast<size_t>(c.scores)];
    const Shape& qs = g.value(qk.inputs[0]).shape;
    if (qs.size() < 2 || g.value(qk.inputs[1]).shape.size() < 2 || !inlined_only(qk.inputs[0]) || !inlined_only(qk.inputs[1])) {
      continue;
    }
    c.absorbed.push_back(c.scores);
    std::sort(c.absorbed.begin(), c.absorbed.end());
    c.absorbed.erase(std::unique(c.absorbed.begin(), c.absorbed.end()), c.absorbed.end());
    // Nothing the core absorbs is read outside it or leaves the group.
    const std::set<int> inside(c.absorbed.begin(), c.absorbed.end());
    for (int id : c.absorbed) {
      const int out = g.nodes()[static_cast<size_t>(id)].outputs[0];
      ok = ok && !exported.count(out);
      for (int reader : consumers[out]) ok = ok && (inside.count(reader) || reader == c.output);
    }
    if (!ok) continue;
    c.keys = ss.back();
    c.head = qs.back();
    return c;
  }
  return std::nullopt;
}

bool tensor_attention(const Graph& g, const AttentionCore& core) {
  const Node& qk = g.nodes()[static_cast<size_t>(core.scores)];
  const Node& pv = g.nodes()[static_cast<size_t>(core.output)];
  const DType t = g.value(qk.inputs[0]).dtype;
  if (t != DType::kF16 && t != DType::kBF16) return false;
  for (int u : {qk.inputs[1], pv.inputs[0], pv.inputs[1]}) {
    if (g.value(u).dtype != t) return false;
  }
  return true;
}

std::optional<StridedView> async_operand(const Graph& g, const FusionGroup& group, const AttentionCore& core, int matmul,
                                         int operand) {
  const int value = g.nodes()[static_cast<size_t>(matmul)].inputs[static_cast<size_t>(operand)];
  std::optional<StridedView> view = input_view(g, std::set<int>(group.nodes.begin(), group.nodes.end()), value);
  const bool keys = matmul == core.scores && operand == 1;
  const size_t width = g.value(value).shape.size() - (keys ? 2 : 1);
  if (!view || dtype_size(g.value(view->base).dtype) != 2) return std::nullopt;
  // Contiguous: stride 1 and not grouped (a repeat of each element along the axis is no run).
  const auto contiguous = [&](size_t axis) { return view->strides[axis] == 1 && view->groups[axis] == 1; };
  if (contiguous(width) || (keys && contiguous(width + 1))) return view;
  return std::nullopt;
}

std::optional<StridedView> wide_operand(const Graph& g, const FusionGroup& group, const AttentionCore& core, int matmul,
                                        int operand) {
  const int value = g.nodes()[static_cast<size_t>(matmul)].inputs[static_cast<size_t>(operand)];
  std::optional<StridedView> view = input_view(g, std::set<int>(group.nodes.begin(), group.nodes.end()), value);
  if (!view) return std::nullopt;
  const DType t = g.value(view->base).dtype;
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16) return std::nullopt;
  const bool keys = matmul == core.scores && operand == 1;
  const size_t width = g.value(value).shape.size() - (keys ? 2 : 1);
  if (view->strides[width] != 1 || view->groups[width] != 1) return std::nullopt;
  return view;
}

std::optional<StridedView> flash_output_view(const Graph& g, const FusionGroup& group, const AttentionCore& core) {
  const int out = g.nodes()[static_cast<size_t>(core.output)].outputs[0];
  std::optional<StridedView> view = output_view(g, std::set<int>(group.nodes.begin(), group.nodes.end()), out);
  if (!view || view->base != group_root(g, group) || grouped(*view) || view->strides.back() != 1) return std::nullopt;
  for (int n : view->path) {  // the values before the root: the output and the views between
    const int v = g.nodes()[static_cast<size_t>(n)].inputs[0];
    if (std::find(group.outputs.begin(), group.outputs.end(), v) != group.outputs.end()) return std::nullopt;
  }
  return view;
}

std::optional<HeadFold> head_fold(const Graph& g, const FusionGroup& group, const AttentionCore& core,
                                  const std::vector<int64_t>& extents) {
  const size_t rank = extents.size();
  if (rank < 2) return std::nullopt;
  HeadFold fold;
  fold.queries = std::max<int64_t>(1, extents[rank - 2]);
  for (size_t a = 0; a + 2 < rank; ++a) {
    if (extents[a] <= 1) continue;
    if (fold.axis >= 0) return std::nullopt;  // two batch axes
    fold.axis = static_cast<int>(a);
    fold.heads = extents[a];
  }
  if (fold.axis < 0) return fold;
  const auto shape_of = [&](int v) -> const Shape& { return g.value(v).shape; };
  const Node& qk = g.nodes()[static_cast<size_t>(core.scores)];
  const Node& pv = g.nodes()[static_cast<size_t>(core.output)];
  const Node& soft = g.nodes()[static_cast<size_t>(core.softmax)];
  const Shape& ss = shape_of(qk.outputs[0]);
  const Shape& os = shape_of(pv.outputs[0]);
  const Shape& xs = shape_of(soft.inputs[0]);
  if (ss.size() != rank || os.size() != rank || xs.size() != rank || fold.queries != ss[rank - 2]) return std::nullopt;
  for (size_t a = 0; a + 2 < rank; ++a) {
    if (ss[a] != os[a] || xs[a] != os[a]) return std::nullopt;
  }
  const std::set<int> members(group.nodes.begin(), group.nodes.end());
  for (int value : {qk.inputs[1], pv.inputs[1]}) {
    const Shape& vs = shape_of(value);
    const int at = fold.axis - static_cast<int>(rank - vs.size());  // the operand's axis (MatMul broadcasting)
    if (at < 0 || vs[static_cast<size_t>(at)] == 1) continue;
    const std::optional<StridedView> view = input_view(g, members, value);
    if (!view) return std::nullopt;
    const size_t d = static_cast<size_t>(at);
    if (view->strides[d] != 0 && view->groups[d] % fold.heads != 0) return std::nullopt;
  }
  return fold;
}

int64_t wide_lanes(const Graph& g, const StridedView& v) { return 16 / static_cast<int64_t>(dtype_size(g.value(v.base).dtype)); }

bool keys_contiguous(const Graph& g, const FusionGroup& group, const AttentionCore& core) {
  const std::optional<StridedView> view = async_operand(g, group, core, core.scores, 1);
  return view && view->strides[view->strides.size() - 2] != 1;
}

bool streams_key_tiles(const Graph& g, const FusionGroup& group, const AttentionCore& core) {
  return async_operand(g, group, core, core.scores, 1).has_value() || async_operand(g, group, core, core.output, 1).has_value();
}

int64_t flash_tensor_rows(int64_t warps, bool wgmma) { return wgmma ? warps / 4 * 64 : warps * 16; }

int64_t flash_tensor_pitch(int64_t width, bool wgmma) { return wgmma ? width : ldmatrix_pitch(width); }

bool wgmma_attention(const Graph& g, const FusionGroup& group, const AttentionCore& core, int64_t key_step) {
  if (!tensor_attention(g, core) || key_step <= 0) return false;
  const auto fits = [](int64_t n) { return (n + 15) / 16 * 16 <= 256; };
  const int64_t width = g.value(g.nodes()[static_cast<size_t>(core.output)].outputs[0]).shape.back();
  if (!fits(core.head) || !fits(width) || !fits(std::min(key_step, core.keys))) return false;
  return async_operand(g, group, core, core.scores, 0) && async_operand(g, group, core, core.scores, 1) &&
         async_operand(g, group, core, core.output, 1);
}

std::optional<Tensor> member_constant(const Graph& g, const std::set<int>& members, int v, std::set<int>* evaluated) {
  if (g.value(v).is_constant()) return *g.value(v).data;
  for (int id : members) {
    const Node& n = g.nodes()[static_cast<size_t>(id)];
    const auto out = std::find(n.outputs.begin(), n.outputs.end(), v);
    if (out == n.outputs.end()) continue;
    std::vector<Tensor> ins;
    for (int in : n.inputs) {
      if (in == kNoValue) return std::nullopt;
      std::optional<Tensor> t = member_constant(g, members, in, evaluated);
      if (!t) return std::nullopt;
      ins.push_back(std::move(*t));
    }
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : ins) ptrs.push_back(&t);
    if (evaluated != nullptr) evaluated->insert(id);
    return reference::run_node(n, ptrs)[static_cast<size_t>(out - n.outputs.begin())];
  }
  return std::nullopt;
}

bool causal_mask(const Tensor& allowed, int64_t queries, int64_t keys, bool negate, bool& causal) {
  const Shape& s = allowed.shape();
  if (s.size() < 2 || (s[s.size() - 2] != queries && s[s.size() - 2] != 1) || (s.back() != keys && s.back() != 1)) return false;
  const std::vector<int64_t> v = allowed.to_ints();
  const int64_t rows = s[s.size() - 2], cols = s.back(), plane = rows * cols;
  bool all = true, tri = true;
  for (int64_t lead = 0; lead < numel(s) / plane; ++lead) {
    for (int64_t i = 0; i < queries; ++i) {
      for (int64_t j = 0; j < keys; ++j) {
        const bool ok = (v[static_cast<size_t>(lead * plane + (rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j))] != 0) != negate;
        all = all && ok;
        tri = tri && ok == (j <= i + keys - queries);
      }
    }
  }
  causal = !all;
  return all || tri;
}

namespace {

// causal_mask on a Toeplitz condition (planner/toeplitz.h) of queries x keys: key j of query i
// is seen exactly where j - i <= keys - queries, and some key is not.
bool causal_diagonals(const Toeplitz& t, bool negate) {
  const std::vector<int64_t> v = t.diagonal.to_ints();
  bool all = true;
  for (int64_t k = 0; k < static_cast<int64_t>(v.size()); ++k) {
    const bool seen = (v[static_cast<size_t>(k)] != 0) != negate;
    if (seen != (k - (t.rows - 1) <= t.cols - t.rows)) return false;
    all = all && seen;
  }
  return !all;
}

// causal_mask_of's test of an additive bias on a Toeplitz bias of queries x keys: row i sees
// diagonals d in [-i, keys - queries] and not (keys - queries, keys - 1 - i]; each row's
// greatest seen bias lies kMaskGap or more above its greatest unseen one, which is at or below
// kMaskedScore. O(queries + keys).
bool causal_bias_diagonals(const Toeplitz& t, bool& zero_where_seen) {
  const std::vector<float> v = t.diagonal.to_floats();
  const int64_t q = t.rows, k = t.cols, last_seen = k - q;
  const auto at = [&](int64_t d) { return v[static_cast<size_t>(d + q - 1)]; };
  const float lowest = -std::numeric_limits<float>::infinity();
  float seen = lowest;  // row i's greatest seen bias: over [0, keys - queries] first, then down to -i
  zero_where_seen = true;
  for (int64_t d = -(q - 1); d <= k - 1; ++d) {
    const float x = at(d);
    if (std::isnan(x) || (d > last_seen && !(x <= kMaskedScore))) return false;
    zero_where_seen = zero_where_seen && (d > last_seen || x == 0.0f);
    if (d >= 0 && d <= last_seen) seen = std::max(seen, x);
  }
  std::vector<float> unseen(static_cast<size_t>(q), lowest);  // row i's greatest unseen bias
  for (int64_t i = q - 2; i >= 0; --i) unseen[static_cast<size_t>(i)] = std::max(unseen[static_cast<size_t>(i + 1)], at(k - 1 - i));
  for (int64_t i = 0; i < q; ++i) {
    seen = std::max(seen, at(-i));
    if (!(seen > kMaskedScore && seen - unseen[static_cast<size_t>(i)] >= kMaskGap)) return false;
  }
  return true;
}

}  // namespace

std::optional<CausalMask> causal_mask_of(const Graph& g, const FusionGroup& group, const AttentionCore& core) {
  const auto node = [&](int id) -> const Node& { return g.nodes()[static_cast<size_t>(id)]; };
  std::map<int, int> chain;  // value -> the core's node computing it (the scores' product included)
  for (int id : core.absorbed) chain[node(id).outputs[0]] = id;
  const auto on_path = [&](int v) { return chain.count(v) != 0; };
  int v = node(core.softmax).inputs[0];
  for (auto p = chain.find(v); p != chain.end() && node(p->second).op == "Cast" && is_float(g.value(v).dtype); p = chain.find(v)) {
    v = node(p->second).inputs[0];
  }
  const auto p = chain.find(v);
  const Shape& s = g.value(v).shape;
  if (p == chain.end() || s.size() < 2) return std::nullopt;
  const Node& n = node(p->second);
  const int64_t queries = s[s.size() - 2], keys = s.back();
  if (queries > keys || n.inputs.size() < 2) return std::nullopt;
  // Before the mask the chain only scales the scores (Mul, Div by what the path does not
  // compute) and casts them: no other mask or bias decides which keys a row weighs.
  for (int id : core.absorbed) {
    const Node& m = node(id);
    if (id == core.scores || id == core.softmax || id == p->second || m.outputs[0] == v || !on_path(m.outputs[0])) continue;
    if (id > core.softmax) continue;  // the probabilities' Casts
    const bool scaling = (m.op == "Mul" || m.op == "Div") && !(on_path(m.inputs[0]) && on_path(m.inputs[1]));
    if (!scaling && m.op != "Cast") return std::nullopt;
  }
  const std::set<int> members(group.nodes.begin(), group.nodes.end());
  // A mask computed from index vectors (too large to fold: planner/toeplitz.h) is judged on its
  // diagonals, without computing it; a constant one element by element.
  const auto toeplitz = [&](int operand) -> std::optional<Toeplitz> {
    if (g.value(operand).shape.size() < 2) return std::nullopt;  // the stage indexes its rows and keys
    std::optional<Toeplitz> t = toeplitz_of(g, members, operand);
    if (t && t->rows == queries && t->cols == keys) return t;
    return std::nullopt;
  };
  if (n.op == "Where") {
    const bool kept = on_path(n.inputs[1]);
    if (kept == on_path(n.inputs[2]) || on_path(n.inputs[0])) return std::nullopt;
    const std::optional<Tensor> fill = member_constant(g, members, kept ? n.inputs[2] : n.inputs[1]);
    if (!fill || !is_float(fill->dtype())) return std::nullopt;
    const std::vector<float> f = fill->to_floats();
    if (!std::all_of(f.begin(), f.end(), [](float x) { return x <= kMaskedScore; })) return std::nullopt;
    bool causal = false;
    if (const std::optional<Toeplitz> t = toeplitz(n.inputs[0])) {
      if (!causal_diagonals(*t, !kept)) return std::nullopt;
    } else {
      const std::optional<Tensor> cond = member_constant(g, members, n.inputs[0]);
      if (!cond || !causal_mask(*cond, queries, keys, !kept, causal) || !causal) return std::nullopt;
    }
    return CausalMask{p->second, n.inputs[0], true, kept};
  }
  if (n.op != "Add" || on_path(n.inputs[0]) == on_path(n.inputs[1])) return std::nullopt;
  const int operand = on_path(n.inputs[0]) ? n.inputs[1] : n.inputs[0];
  if (const std::optional<Toeplitz> t = toeplitz(operand)) {
    if (!is_float(t->diagonal.dtype())) return std::nullopt;
    bool zero_where_seen = false;
    if (!causal_bias_diagonals(*t, zero_where_seen)) return std::nullopt;
    return CausalMask{p->second, operand, zero_where_seen, true};
  }
  const std::optional<Tensor> bias = member_constant(g, members, operand);
  if (!bias || !is_float(bias->dtype())) return std::nullopt;
  const Shape& bs = bias->shape();
  const int64_t rows = bs.size() >= 2 ? bs[bs.size() - 2] : 1, cols = bs.empty() ? 1 : bs.back(), plane = rows * cols;
  if ((rows != queries && rows != 1) || (cols != keys && cols != 1) || plane == 0 || g.value(operand).shape.size() < 2) {
    return std::nullopt;
  }
  // Every row's greatest bias on a key it sees exceeds its biases on the keys it does not by
  // kMaskGap or more: their weights underflow against the row's maximum.
  const std::vector<float> b = bias->to_floats();
  bool zero_where_seen = true;
  for (int64_t lead = 0; lead < numel(bs) / plane; ++lead) {
    for (int64_t i = 0; i < queries; ++i) {
      float seen_max = -std::numeric_limits<float>::infinity(), unseen_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        const float x = b[static_cast<size_t>(lead * plane + (rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j))];
        const bool seen = j <= i + keys - queries;
        if (std::isnan(x) || (!seen && !(x <= kMaskedScore))) return std::nullopt;
        (seen ? seen_max : unseen_max) = std::max(seen ? seen_max : unseen_max, x);
        zero_where_seen = zero_where_seen && (!seen || x == 0.0f);
      }
      if (!(seen_max > kMaskedScore && seen_max - unseen_max >= kMaskGap)) return std::nullopt;
    }
  }
  return CausalMask{p->second, operand, zero_where_seen, true};
}

int64_t visible_tiles(int64_t first, int64_t rows, int64_t queries, int64_t keys, int64_t step) {
  const int64_t last_key = std::min(first + rows, queries) - 1 + keys - queries;  // the last row's last visible key
  return std::clamp<int64_t>((last_key + step) / step, 0, (keys + step - 1) / step);
}

}  // namespace fusetune::planner
