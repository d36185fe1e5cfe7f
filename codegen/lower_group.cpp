#include "codegen/lower_group.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "codegen/scalar_ops.h"
#include "core/error.h"
#include "planner/library_call.h"
#include "core/ops.h"
#include "planner/tensor_expr.h"

namespace fusetune::codegen {

namespace {

using planner::Access;
using planner::IndexExpr;
using planner::Interval;
using planner::TensorExpr;

bool is_anchor(const Node& n) {
  const OpKind k = find_op(n.op)->kind;
  return k == OpKind::kReduction || k == OpKind::kNormalization || k == OpKind::kContraction ||
         k == OpKind::kPooling || n.op == "ScatterND";
}

std::string ll(int64_t v) { return std::to_string(v) + "LL"; }

std::string product(const std::vector<std::string>& xs) {
  if (xs.empty()) return "1LL";
  std::string s = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) s = "(" + s + " * " + xs[i] + ")";
  return s;
}

// The region of a value a block computes: per axis, the names of its lo, hi and extent variables.
struct Region {
  std::vector<std::string> lo, hi, n;
};

// A staged MatMul's plan (size_buffers) for staged_matmul or mma_matmul.
struct Staged {
  size_t m_axis = 0, n_axis = 0;
  int64_t step = 0, k = 0;
  std::string a, b, acc;  // shared operand slices and, for a root product, its accumulators
  int64_t a_cap = 0, b_cap = 0;
  std::string regs;       // register-blocked accumulators (thread-local), when the threads cover the region
  bool vec_a = false, vec_b = false;  // operands staged in float4 quads
  int64_t tm = 0, tn = 0; // the micro-tile of each thread
  // Tensor cores (mma_layout): the operands' 16-bit type (kUndefined: the scalar path), the warp
  // grid's columns, fragments per warp, the staged slices' extents and row pitches (elements),
  // and the fragment thread-locals.
  DType mma = DType::kUndefined;
  int64_t warps_n = 0, fm = 0, fn = 0, rows_a = 0, cols_b = 0, pitch_a = 0, pitch_b = 0;
  std::string frag_c, frag_a, frag_b;
};

class GroupLowering {
 public:
  GroupLowering(const Graph& g, const planner::FusionGroup& group, const planner::TileConfig& cfg,
                const LowerOptions& options)
      : g_(g), group_(group), cfg_(cfg), options_(options) {}

  LoweredKernel run(const std::string& name) {
    LoweredKernel out;
    Kernel& k = out.kernel;
    k.name = name;
    k.threads = cfg_.threads;
    for (int n : group_.nodes) {
      members_.insert(n);
      producer_[g_.nodes()[static_cast<size_t>(n)].outputs[0]] = n;
      exprs_[n] = planner::describe(g_, g_.nodes()[static_cast<size_t>(n)]);
    }
    root_ = planner::group_root(g_, group_);
    for (int v : group_.inputs) {
      param_[v] = options_.param_prefix + "in" + std::to_string(out.inputs.size());
      k.params.push_back({param_[v], g_.value(v).dtype, numel(g_.value(v).shape), false});
      out.inputs.push_back(v);
    }
    for (int v : group_.outputs) {
      out_param_[v] = options_.param_prefix + "out" + std::to_string(out.outputs.size());
      k.params.push_back({out_param_[v], g_.value(v).dtype, numel(g_.value(v).shape), true});
      out.outputs.push_back(v);
    }
    tile_setup(k);
    regions(k);
    size_buffers(k);
    for (int n : group_.nodes) {
      const Node& node = g_.nodes()[static_cast<size_t>(n)];
      if (is_anchor(node)) anchor_stage(k, node);
    }
    // The root when it is inlined, and inlined values that leave the group.
    for (int v : group_.outputs) {
      if (producer_.count(v) && !is_anchor(g_.nodes()[static_cast<size_t>(producer_[v])])) element_stage(k, v);
    }
    return out;
  }

 private:
  // ---- tiles and regions ------------------------------------------------------------------
  void tile_setup(Kernel& k) {
    const Shape& rs = g_.value(root_).shape;
    int64_t stride = 1;
    tiles_ = 1;
    std::vector<int64_t> ntiles(rs.size());
    for (size_t d = rs.size(); d-- > 0;) {
      const int64_t t = std::clamp<int64_t>(cfg_.tile[d], 1, std::max<int64_t>(rs[d], 1));
      ntiles[d] = (std::max<int64_t>(rs[d], 1) + t - 1) / t;
      tiles_ *= ntiles[d];
      const std::string td = "ft_t" + std::to_string(d);
      k.uniform.push_back(let("long long", td, "ft_fmod(ft_fdiv(ft_block - " + ll(options_.block_base) + ", " + ll(stride) +
                                                   "), " + ll(ntiles[d]) + ")"));
      region_[root_].lo.insert(region_[root_].lo.begin(), "");
      region_[root_].hi.insert(region_[root_].hi.begin(), "");
      const std::string lo = var(root_, "lo", d), hi = var(root_, "hi", d);
      k.uniform.push_back(let("long long", lo, td + " * " + ll(t)));
      k.uniform.push_back(let("long long", hi, "ft_min(" + lo + " + " + ll(t) + ", " + ll(rs[d]) + ") - 1LL"));
      region_[root_].lo[0] = lo;
      region_[root_].hi[0] = hi;
      stride *= ntiles[d];
      tile_extent_.insert(tile_extent_.begin(), t);
    }
    k.grid = tiles_;
    ntiles_ = ntiles;
    emit_extents(k, root_);
  }

  std::string var(int v, const char* what, size_t d) const {
    return "r" + std::to_string(v) + "_" + what + std::to_string(d);
  }

  void emit_extents(Kernel& k, int v) {
    Region& r = region_[v];
    r.n.clear();
    for (size_t d = 0; d < r.lo.size(); ++d) {
      const std::string n = var(v, "n", d);
      k.uniform.push_back(let("long long", n, "ft_max(0LL, " + r.hi[d] + " - " + r.lo[d] + " + 1LL)"));
      r.n.push_back(n);
    }
  }

  // Region bounds of every internal value, consumers before producers.
  void regions(Kernel& k) {
    std::map<int, std::vector<std::vector<std::pair<std::string, std::string>>>> contrib;
    for (auto it = group_.nodes.rbegin(); it != group_.nodes.rend(); ++it) {
      const Node& n = g_.nodes()[static_cast<size_t>(*it)];
      const int v = n.outputs[0];
      if (v != root_) {
        auto c = contrib.find(v);
        if (c == contrib.end()) continue;  // not needed by the root (cannot happen in a single-sink group)
        const Shape& s = g_.value(v).shape;
        Region& r = region_[v];
        for (size_t d = 0; d < s.size(); ++d) {
          std::string lo, hi;
          for (const auto& box : c->second) {
            lo = lo.empty() ? box[d].first : "ft_min(" + lo + ", " + box[d].first + ")";
            hi = hi.empty() ? box[d].second : "ft_max(" + hi + ", " + box[d].second + ")";
          }
          r.lo.push_back(var(v, "lo", d));
          r.hi.push_back(var(v, "hi", d));
          k.uniform.push_back(let("long long", r.lo.back(), lo));
          k.uniform.push_back(let("long long", r.hi.back(), hi));
        }
        emit_extents(k, v);
      }
      const Region& out = region_[v];
      const TensorExpr& e = exprs_[*it];
      const size_t nout = e.out_shape.size();
      for (const Access& a : e.accesses) {
        const int u = n.inputs[static_cast<size_t>(a.input)];
        if (!members_.count(producer_or(u))) continue;
        const Shape& us = g_.value(u).shape;
        std::vector<std::pair<std::string, std::string>> box;
        for (size_t d = 0; d < a.index.size(); ++d) {
          auto b = a.index[d].bounds_code(
              [&](int i) { return static_cast<size_t>(i) < nout ? out.lo[static_cast<size_t>(i)] : std::string("0LL"); },
              [&](int i) {
                return static_cast<size_t>(i) < nout ? out.hi[static_cast<size_t>(i)]
                                                     : ll(e.reduce_extents[static_cast<size_t>(i) - nout] - 1);
              });
          box.push_back({"ft_max(0LL, " + b.first + ")", "ft_min(" + ll(us[d] - 1) + ", " + b.second + ")"});
        }
        contrib[u].push_back(box);
      }
    }
  }

  int producer_or(int v) const {
    auto it = producer_.find(v);
    return it == producer_.end() ? -1 : it->second;
  }

  // The same region arithmetic, numerically, for one tile; used to size shared memory.
  std::map<int, std::vector<Interval>> numeric_regions(int64_t tile_index) const {
    std::map<int, std::vector<Interval>> r;
    const Shape& rs = g_.value(root_).shape;
    std::vector<Interval> root(rs.size());
    int64_t stride = 1;
    for (size_t d = rs.size(); d-- > 0;) {
      const int64_t t = ((tile_index / stride) % ntiles_[d]);
      root[d] = {t * tile_extent_[d], std::min(t * tile_extent_[d] + tile_extent_[d], rs[d]) - 1};
      stride *= ntiles_[d];
    }
    r[root_] = root;
    std::map<int, std::vector<std::vector<Interval>>> contrib;
    for (auto it = group_.nodes.rbegin(); it != group_.nodes.rend(); ++it) {
      const Node& n = g_.nodes()[static_cast<size_t>(*it)];
      const int v = n.outputs[0];
      if (v != root_) {
        auto c = contrib.find(v);
        if (c == contrib.end()) continue;
        std::vector<Interval> hull = c->second[0];
        for (const auto& box : c->second) {
          for (size_t d = 0; d < box.size(); ++d) hull[d] = {std::min(hull[d].lo, box[d].lo), std::max(hull[d].hi, box[d].hi)};
        }
        r[v] = hull;
      }
      const TensorExpr& e = exprs_.at(*it);
      std::vector<Interval> vars = r[v];
      for (int64_t x : e.reduce_extents) vars.push_back({0, x - 1});
      for (const Access& a : e.accesses) {
        const int u = n.inputs[static_cast<size_t>(a.input)];
        if (!members_.count(producer_or(u))) continue;
        const Shape& us = g_.value(u).shape;
        std::vector<Interval> box;
        for (size_t d = 0; d < a.index.size(); ++d) {
          const Interval b = a.index[d].bounds(vars);
          box.push_back({std::max<int64_t>(0, b.lo), std::min<int64_t>(us[d] - 1, b.hi)});
        }
        contrib[u].push_back(box);
      }
    }
    return r;
  }

  static int64_t elems(const std::vector<Interval>& r) {
    int64_t n = 1;
    for (const Interval& i : r) n *= std::max<int64_t>(0, i.hi - i.lo + 1);
    return n;
  }

  // Tiles whose regions bound every tile's: all of them when there are at most 65536, else the
  // first, second, middle and last ones along each axis (regions are translation-invariant in
  // the interior and only shrink at the clipped edges). The stages also clamp their loops to the
  // allocation, so a region the sample missed cannot write past it (verification would report the
  // elements left unwritten).
  std::vector<int64_t> sample_tiles() const {
    std::vector<int64_t> out;
    if (tiles_ <= (int64_t{1} << 16)) {
      for (int64_t t = 0; t < tiles_; ++t) out.push_back(t);
      return out;
    }
    std::vector<std::vector<int64_t>> per_dim;
    for (int64_t n : ntiles_) {
      std::set<int64_t> picks = {0, std::min<int64_t>(1, n - 1), n / 2, std::max<int64_t>(0, n / 2 - 1), n - 1,
                                 std::max<int64_t>(0, n - 2)};
      per_dim.emplace_back(picks.begin(), picks.end());
    }
    std::vector<int64_t> strides(ntiles_.size(), 1);
    for (size_t d = ntiles_.size(); d-- > 1;) strides[d - 1] = strides[d] * ntiles_[d];
    std::function<void(size_t, int64_t)> rec = [&](size_t d, int64_t acc) {
      if (d == per_dim.size()) {
        out.push_back(acc);
        return;
      }
      for (int64_t i : per_dim[d]) rec(d + 1, acc + i * strides[d]);
    };
    rec(0, 0);
    return out;
  }

  void size_buffers(Kernel& k) {
    std::map<int, int64_t> max_elems;
    std::map<int, int64_t> max_rows;
    std::map<int, std::vector<int64_t>> max_extent;  // per value and axis
    for (int64_t t : sample_tiles()) {
      const auto r = numeric_regions(t);
      for (const auto& [v, region] : r) {
        max_elems[v] = std::max(max_elems[v], elems(region));
        auto& me = max_extent[v];
        me.resize(region.size(), 0);
        for (size_t d = 0; d < region.size(); ++d) me[d] = std::max(me[d], std::max<int64_t>(0, region[d].hi - region[d].lo + 1));
        const int p = producer_or(v);
        if (p >= 0 && g_.nodes()[static_cast<size_t>(p)].op == "Conv" && !region.empty() && !region[1].empty()) {
          const int64_t cout_g = conv_cout_per_group(g_.nodes()[static_cast<size_t>(p)]);
          max_groups_[v] = std::max(max_groups_[v], region[1].hi / cout_g - region[1].lo / cout_g + 1);
        }
        if (p >= 0) {
          const Node& n = g_.nodes()[static_cast<size_t>(p)];
          if (find_op(n.op)->kind == OpKind::kNormalization) {
            std::vector<Interval> rows = region;
            for (size_t d = static_cast<size_t>(norm_axis(n)); d < rows.size(); ++d) {
              if (n.op == "LayerNormalization" || d == static_cast<size_t>(norm_axis(n))) rows[d] = {0, 0};
            }
            max_rows[v] = std::max(max_rows[v], elems(rows));
          }
        }
      }
    }
    capacity_ = max_elems;
    row_capacity_ = max_rows;
    for (int n : group_.nodes) {
      const Node& node = g_.nodes()[static_cast<size_t>(n)];
      const int v = node.outputs[0];
      if (find_op(node.op)->kind == OpKind::kNormalization) {
        stats_[v] = {k.add_shared("s" + std::to_string(v) + "_a", DType::kF32, std::max<int64_t>(1, max_rows[v])),
                     k.add_shared("s" + std::to_string(v) + "_b", DType::kF32, std::max<int64_t>(1, max_rows[v]))};
      }
      if (node.op == "MatMul" && cfg_.reduce_step > 0 && g_.value(node.inputs[0]).shape.size() >= 2 &&
          g_.value(node.inputs[1]).shape.size() >= 2) {
        // Staged contraction: operands stream through shared memory one reduction step at a time,
        // accumulators live in shared memory (they cross the step loop's barriers). Needs one
        // matrix per block: every batch axis of the region of extent 1.
        const auto& me = max_extent[v];
        bool one_matrix = true;
        for (size_t d = 0; d + 2 < me.size(); ++d) one_matrix = one_matrix && me[d] <= 1;
        if (one_matrix) {
          Staged st;
          st.m_axis = me.size() - 2;
          st.n_axis = me.size() - 1;
          st.step = cfg_.reduce_step;
          st.k = g_.value(node.inputs[0]).shape.back();
          const DType a_type = g_.value(node.inputs[0]).dtype;
          if (cfg_.mma && a_type == g_.value(node.inputs[1]).dtype && (a_type == DType::kF16 || a_type == DType::kBF16)) {
            mma_layout(k, st, me[st.m_axis], me[st.n_axis], a_type, v);
          } else {
            st.a = k.add_shared("sa" + std::to_string(v), DType::kF32, std::max<int64_t>(1, me[st.m_axis] * st.step));
            st.b = k.add_shared("sb" + std::to_string(v), DType::kF32, std::max<int64_t>(1, me[st.n_axis] * st.step));
            st.a_cap = std::max<int64_t>(1, me[st.m_axis] * st.step);
            st.b_cap = std::max<int64_t>(1, me[st.n_axis] * st.step);
            // Register blocking: each thread owns one TM x TN micro-tile of the region; the smallest
            // (squarest) micro-tile that lets the block's threads cover the largest region.
            int64_t best = 0;
            for (int64_t tm : {1, 2, 4, 8}) {
              for (int64_t tn : {1, 2, 4, 8}) {
                const int64_t tiles = ((me[st.m_axis] + tm - 1) / tm) * ((me[st.n_axis] + tn - 1) / tn);
                if (tiles > cfg_.threads) continue;
                const int64_t score = tm * tn * 16 + (tm > tn ? tm - tn : tn - tm);
                if (best == 0 || score < best) {
                  best = score;
                  st.tm = tm;
                  st.tn = tn;
                }
              }
            }
            if (best > 0) {
              st.regs = "tl" + std::to_string(v);
              k.thread_locals.push_back({st.regs, st.tm * st.tn});
            }
            // Vectorised staging (the candidate's vector width): an operand read straight from a
            // float32 input whose contiguous axis is the slice's row (A: the reduction axis, whole
            // steps of 4; B: the output's columns) moves in float4 quads.
            if (cfg_.vector >= 4) {
              const TensorExpr& e = exprs_.at(n);
              st.vec_a = st.step % 4 == 0 && contiguous_input(node.inputs[0], e.accesses[0], static_cast<int>(e.out_shape.size()));
              st.vec_b = contiguous_input(node.inputs[1], e.accesses[1], static_cast<int>(st.n_axis));
            }
          }
          if (v == root_) st.acc = k.add_shared("acc" + std::to_string(v), DType::kF32, std::max<int64_t>(1, max_elems[v]));
          staged_[v] = st;
        }
      }
      if (node.op == "Conv" && cfg_.reduce_step > 0) plan_conv(k, node, max_extent[v]);
      if (!is_anchor(node) || v == root_) continue;
      buffer_[v] = k.add_shared("b" + std::to_string(v), is_float(g_.value(v).dtype) ? DType::kF32 : DType::kI64,
                                std::max<int64_t>(1, max_elems[v]));
    }
  }

  // Tensor-core layout of a staged MatMul with 16-bit operands whose region is at most rows x cols:
  // the block's warps form a warps_m x warps_n grid (the split of the warps with the fewest m16n8
  // fragments per warp, then the fewest fragment loads), each warp owning fm x fn fragments; the
  // reduction step is a multiple of 16. The operand slices are staged as 16-bit values, A as
  // (warps_m * fm * 16) x step and B as step x (warps_n * fn * 8) so every warp's fragments lie
  // inside, with rows padded to an odd number of 16-byte units (the 8 rows an ldmatrix phase reads
  // fall in distinct banks).
  void mma_layout(Kernel& k, Staged& st, int64_t rows, int64_t cols, DType dtype, int v) {
    const int64_t mt = (std::max<int64_t>(1, rows) + 15) / 16, nt = (std::max<int64_t>(1, cols) + 7) / 8;
    const int64_t warps = cfg_.threads / kWarpSize;
    int64_t best = -1;
    for (int64_t wm = 1; wm <= warps; ++wm) {
      if (warps % wm != 0) continue;
      const int64_t fm = (mt + wm - 1) / wm, fn = (nt + warps / wm - 1) / (warps / wm);
      const int64_t score = fm * fn * 1024 + fm + fn;
      if (best < 0 || score < best) {
        best = score;
        st.warps_n = warps / wm;
        st.fm = fm;
        st.fn = fn;
      }
    }
    st.mma = dtype;
    st.step = (std::max<int64_t>(16, st.step) + 15) / 16 * 16;
    const auto padded = [](int64_t elems) { return (elems / 8) % 2 == 1 ? elems : elems + 8; };
    st.rows_a = warps / st.warps_n * st.fm * 16;
    st.cols_b = st.warps_n * st.fn * 8;
    st.pitch_a = padded(st.step);
    st.pitch_b = padded(st.cols_b);
    const std::string id = std::to_string(v);
    st.a = k.add_shared("sa" + id, dtype, st.rows_a * st.pitch_a);
    st.b = k.add_shared("sb" + id, dtype, st.step * st.pitch_b);
    st.frag_c = "fc" + id;
    st.frag_a = "fa" + id;
    st.frag_b = "fb" + id;
    k.thread_locals.push_back({st.frag_c, st.fm * st.fn * 4, DType::kF32});
    k.thread_locals.push_back({st.frag_a, st.fm * 4, DType::kU32});
    k.thread_locals.push_back({st.frag_b, st.fn * 2, DType::kU32});
  }

  // True if value u is a float32 group input whose innermost axis is indexed by variable `var`
  // alone, so consecutive values of the variable are consecutive floats in memory.
  bool contiguous_input(int u, const Access& a, int var) const {
    return param_.count(u) && !producer_.count(u) && g_.value(u).dtype == DType::kF32 && !a.guarded &&
           !a.index.empty() && a.index.back().is_var(var);
  }

  int64_t norm_axis(const Node& n) const {
    return normalize_axis(n.attrs.i("axis", -1), static_cast<int64_t>(g_.value(n.inputs[0]).shape.size()), "axis");
  }

  // ---- expressions --------------------------------------------------------------------------
  // Emits (into *cur_) what is needed to compute value v at index idx and returns the local name.
  std::string value(int v, const std::vector<std::string>& idx) {
    std::string key = std::to_string(v);
    for (const auto& i : idx) key += "|" + i;
    if (auto it = memo_->find(key); it != memo_->end()) return it->second;
    const Value& val = g_.value(v);
    std::string expr;
    if (auto p = param_.find(v); p != param_.end() || !producer_.count(v)) {
      if (val.is_constant() && param_.find(v) == param_.end()) fail("constant '", val.name, "' is not a group input");
      expr = load_as_compute(val.dtype, param_.at(v) + "[" + flat(val.shape, idx) + "]");
    } else if (auto b = buffer_.find(v); b != buffer_.end()) {
      const Region& r = region_.at(v);
      std::string off = "0LL";
      for (size_t d = 0; d < idx.size(); ++d) off = "(" + off + " * " + r.n[d] + " + (" + idx[d] + " - " + r.lo[d] + "))";
      expr = b->second + "[" + off + "]";
    } else {
      expr = inline_node(g_.nodes()[static_cast<size_t>(producer_.at(v))], idx);
    }
    const std::string name = "v" + std::to_string(next_local_++);
    cur_->push_back(let(compute_ctype(val.dtype), name, expr));
    (*memo_)[key] = name;
    return name;
  }

  static std::string flat(const Shape& s, const std::vector<std::string>& idx) {
    std::string f = "0LL";
    for (size_t d = 0; d < s.size(); ++d) f = "(" + f + " * " + ll(s[d]) + " + " + idx[d] + ")";
    return f;
  }

  std::vector<std::string> index_of(const Access& a, const std::vector<std::string>& vars) const {
    std::vector<std::string> out;
    for (const IndexExpr& ix : a.index) out.push_back(ix.code([&](int i) { return vars[static_cast<size_t>(i)]; }));
    return out;
  }

  std::string in_range(const Shape& s, const std::vector<std::string>& idx) const {
    std::string c;
    for (size_t d = 0; d < idx.size(); ++d) {
      c += (c.empty() ? "" : " && ") + std::string("(") + idx[d] + ") >= 0LL && (" + idx[d] + ") < " + ll(s[d]);
    }
    return c.empty() ? "1" : c;
  }

  // A guarded read: emits an if/else into *cur_ so the load happens only inside the input.
  std::string guarded(int v, const std::vector<std::string>& idx, const std::string& fill) {
    const std::string name = "v" + std::to_string(next_local_++);
    cur_->push_back(let(compute_ctype(g_.value(v).dtype), name, fill));
    Block inside;
    with_block(inside, [&] { cur_->push_back(assign(name, value(v, idx))); });
    cur_->push_back(if_then(in_range(g_.value(v).shape, idx), inside));
    return name;
  }

  // Statements f emits into a new block that starts with no shared locals (a loop body whose
  // index variables differ from everything emitted so far).
  Block fresh_block(const std::function<void()>& f) {
    Block b;
    std::map<std::string, std::string> memo;
    Block* saved = cur_;
    auto* saved_memo = memo_;
    cur_ = &b;
    memo_ = &memo;
    f();
    cur_ = saved;
    memo_ = saved_memo;
    return b;
  }

  void with_block(Block& b, const std::function<void()>& f) {
    Block* saved = cur_;
    auto saved_memo = memo_;
    std::map<std::string, std::string> local = *memo_;  // outer locals stay visible inside
    cur_ = &b;
    memo_ = &local;
    f();
    cur_ = saved;
    memo_ = saved_memo;
  }

  std::string inline_node(const Node& n, const std::vector<std::string>& idx) {
    const TensorExpr& e = exprs_.at(static_cast<int>(&n - g_.nodes().data()));
    const OpKind kind = find_op(n.op)->kind;
    if (kind == OpKind::kElementwise) {
      std::vector<std::string> args;
      for (const Access& a : e.accesses) args.push_back(value(n.inputs[static_cast<size_t>(a.input)], index_of(a, idx)));
      return elementwise_expr(g_, n, args);
    }
    const DType dt = g_.value(n.outputs[0]).dtype;
    if (n.op == "Concat") {
      std::string result = is_float(dt) ? "0.0f" : "0LL";
      const std::string name = "v" + std::to_string(next_local_++);
      cur_->push_back(let(compute_ctype(dt), name, result));
      for (const Access& a : e.accesses) {
        const int u = n.inputs[static_cast<size_t>(a.input)];
        const auto ui = index_of(a, idx);
        Block inside;
        with_block(inside, [&] { cur_->push_back(assign(name, value(u, ui))); });
        cur_->push_back(if_then(in_range(g_.value(u).shape, ui), inside));
      }
      return name;
    }
    if (n.op == "Gather") {
      const Access& data = e.accesses[0];
      const int ids = n.inputs[1];
      const std::string iv = value(ids, index_of(e.accesses[1], idx));
      const int64_t axis = normalize_axis(n.attrs.i("axis"), static_cast<int64_t>(g_.value(n.inputs[0]).shape.size()), "axis");
      const int64_t extent = g_.value(n.inputs[0]).shape[static_cast<size_t>(axis)];
      const std::string fixed = "ft_min(" + ll(extent - 1) + ", ft_max(0LL, (" + iv + " < 0LL ? " + iv + " + " + ll(extent) + " : " + iv + ")))";
      std::vector<std::string> di;
      for (size_t d = 0; d < data.index.size(); ++d) {
        di.push_back(data.index[d].has_data() ? fixed : data.index[d].code([&](int i) { return idx[static_cast<size_t>(i)]; }));
      }
      return value(n.inputs[0], di);
    }
    if (n.op == "Pad") {
      const auto pads = n.attrs.ints("pads");
      const std::string mode = n.attrs.s("mode", "constant");
      const Shape& in = g_.value(n.inputs[0]).shape;
      const size_t r = in.size();
      std::vector<std::string> pi;
      for (size_t d = 0; d < r; ++d) {
        const std::string c = "(" + idx[d] + " - " + ll(pads[d]) + ")";
        if (mode == "constant") {
          pi.push_back(c);
        } else if (mode == "edge") {
          pi.push_back("ft_min(" + ll(in[d] - 1) + ", ft_max(0LL, " + c + "))");
        } else {  // reflect without repeating the edge
          const int64_t period = std::max<int64_t>(1, 2 * (in[d] - 1));
          const std::string m = "ft_fmod(" + c + ", " + ll(period) + ")";
          pi.push_back(in[d] == 1 ? "0LL" : "(" + m + " >= " + ll(in[d]) + " ? " + ll(period) + " - " + m + " : " + m + ")");
        }
      }
      if (mode != "constant") return value(n.inputs[0], pi);
      return guarded(n.inputs[0], pi, is_float(dt) ? float_literal(n.attrs.f("value")) : ll(static_cast<int64_t>(n.attrs.f("value"))));
    }
    if (n.op == "Resize") return resize_expr(n, idx);
    // Reshape, Transpose, Slice, Expand, Tile: one read through the index map.
    const Access& a = e.accesses.at(0);
    return value(n.inputs[static_cast<size_t>(a.input)], index_of(a, idx));
  }

  static std::string dbl(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return "(" + s + ")";
  }

  // Resize (reference/resize.cpp's semantics): per axis the source coordinate, computed in double
  // like the reference so nearest-neighbour rounding agrees, then a nearest read or the N-linear
  // blend of the 2^k neighbours along the k resized axes.
  std::string resize_expr(const Node& n, const std::vector<std::string>& idx) {
    const int x = n.inputs[0];
    const Shape& in = g_.value(x).shape;
    const Shape& out = g_.value(n.outputs[0]).shape;
    const auto scales = n.attrs.floats("scales");
    const auto roi = n.attrs.floats("roi", {});
    const std::string coord = n.attrs.s("coordinate_transformation_mode", "half_pixel");
    const std::string nearest = n.attrs.s("nearest_mode", "round_prefer_floor");
    const bool linear = n.attrs.s("mode", "nearest") == "linear";
    const size_t r = in.size();
    const std::string id = std::to_string(next_local_++);
    std::vector<std::string> i0(r), i1(r), w1(r);
    std::vector<size_t> blended;
    std::string outside = "0";
    for (size_t d = 0; d < r; ++d) {
      const bool crop = coord == "tf_crop_and_resize";
      if (in[d] == out[d] && scales[d] == 1.0f && !crop) {
        i0[d] = idx[d];
        continue;
      }
      const double scale = scales[d];
      const double len = static_cast<double>(in[d]);
      const double resized = len * scale;
      const std::string o = "((double)" + idx[d] + ")";
      std::string c;
      if (coord == "half_pixel") c = "(" + o + " + 0.5) / " + dbl(scale) + " - 0.5";
      if (coord == "pytorch_half_pixel") c = resized > 1 ? "(" + o + " + 0.5) / " + dbl(scale) + " - 0.5" : "0.0";
      if (coord == "tf_half_pixel_for_nn") c = "(" + o + " + 0.5) / " + dbl(scale);
      if (coord == "align_corners") c = resized == 1 ? "0.0" : o + " * " + dbl(len - 1) + " / " + dbl(resized - 1);
      if (coord == "asymmetric") c = o + " / " + dbl(scale);
      if (crop) {
        const double rs = roi.size() == 2 * r ? roi[d] : 0.0, re = roi.size() == 2 * r ? roi[d + r] : 1.0;
        c = resized > 1 ? dbl(rs * (len - 1)) + " + " + o + " * " + dbl((re - rs) * (len - 1)) + " / " + dbl(resized - 1)
                        : dbl(0.5 * (rs + re) * (len - 1));
      }
      check(!c.empty(), "unsupported coordinate_transformation_mode '", coord, "'");
      const std::string cv = "ft_c" + id + "_" + std::to_string(d);
      cur_->push_back(let("double", cv, c));
      if (crop) outside += " || " + cv + " < 0.0 || " + cv + " > " + dbl(len - 1);
      if (linear) {
        const std::string cc = "ft_cc" + id + "_" + std::to_string(d);
        cur_->push_back(let("double", cc, "fmin(fmax(" + cv + ", 0.0), " + dbl(len - 1) + ")"));
        i0[d] = "ft_i" + id + "_" + std::to_string(d);
        cur_->push_back(let("long long", i0[d], "(long long)floor(" + cc + ")"));
        i1[d] = "ft_min(" + i0[d] + " + 1LL, " + ll(in[d] - 1) + ")";
        w1[d] = "(float)(" + cc + " - (double)" + i0[d] + ")";
        blended.push_back(d);
      } else {
        std::string ni;
        if (nearest == "floor") ni = "floor(" + cv + ")";
        if (nearest == "ceil") ni = "ceil(" + cv + ")";
        if (nearest == "round_prefer_floor") ni = "(" + cv + " - floor(" + cv + ") == 0.5 ? floor(" + cv + ") : round(" + cv + "))";
        if (nearest == "round_prefer_ceil") ni = "(" + cv + " - floor(" + cv + ") == 0.5 ? floor(" + cv + ") + 1.0 : round(" + cv + "))";
        check(!ni.empty(), "unsupported nearest_mode '", nearest, "'");
        i0[d] = "ft_min(" + ll(in[d] - 1) + ", ft_max(0LL, (long long)" + ni + "))";
      }
    }
    std::string result;
    if (!linear) {
      result = value(x, i0);
    } else {
      for (int corner = 0; corner < (1 << blended.size()); ++corner) {
        std::vector<std::string> ci = i0;
        std::string w = "1.0f";
        for (size_t b = 0; b < blended.size(); ++b) {
          const size_t d = blended[b];
          const bool hi = (corner >> b) & 1;
          ci[d] = hi ? i1[d] : i0[d];
          w += " * " + (hi ? w1[d] : "(1.0f - " + w1[d] + ")");
        }
        result += (result.empty() ? "" : " + ") + ("(" + w + ") * " + value(x, ci));
      }
    }
    if (outside == "0") return result;
    return "((" + outside + ") ? " + float_literal(n.attrs.f("extrapolation_value", 0.0f)) + " : (" + result + "))";
  }

  // ---- stages --------------------------------------------------------------------------------
  // A thread-distributed loop over the axes `dims` of value v's region (other axes of the index
  // are "0LL"), at most `capacity` iterations; calls body(o) with the index inside the loop.
  void dims_loop(Kernel& k, int v, const std::vector<size_t>& dims, int64_t capacity,
                 const std::function<void(const std::vector<std::string>&)>& body) {
    const Region& r = region_.at(v);
    std::vector<std::string> extents;
    // Regions that fit 32-bit indices decompose in int arithmetic: a 64-bit division by a run-time
    // extent is a called routine on the GPU (its saved registers show up as spills).
    auto c = capacity_.find(v);
    const bool narrow = c != capacity_.end() && c->second < (int64_t{1} << 31);
    Block loop = fresh_block([&] {
      std::vector<std::string> o(r.n.size(), "0LL");
      std::string inner = "1LL";
      for (size_t j = dims.size(); j-- > 0;) {
        const size_t d = dims[j];
        o[d] = "ft_o" + std::to_string(d);
        const std::string q = narrow ? "(long long)(((int)ft_e / (int)" + inner + ") % (int)" + r.n[d] + ")"
                                     : "(ft_e / " + inner + ") % " + r.n[d];
        cur_->insert(cur_->begin(), let("long long", o[d], r.lo[d] + " + " + q));
        inner = "(" + inner + " * " + r.n[d] + ")";
        extents.insert(extents.begin(), r.n[d]);
      }
      body(o);
    });
    std::string count = product(extents);
    if (capacity > 0) count = "ft_min(" + count + ", " + ll(capacity) + ")";
    k.body.push_back(thread_for("ft_e", "0LL", count, loop));
  }

  // The element loop over value v's whole region.
  void region_loop(Kernel& k, int v, const std::function<void(const std::vector<std::string>&)>& body) {
    std::vector<size_t> all(region_.at(v).n.size());
    for (size_t d = 0; d < all.size(); ++d) all[d] = d;
    dims_loop(k, v, all, buffer_.count(v) ? std::max<int64_t>(1, capacity_[v]) : 0, body);
  }

  void store_value(int v, const std::vector<std::string>& o, const std::string& x) {
    if (auto b = buffer_.find(v); b != buffer_.end()) {
      const Region& r = region_.at(v);
      std::string off = "0LL";
      for (size_t d = 0; d < o.size(); ++d) off = "(" + off + " * " + r.n[d] + " + (" + o[d] + " - " + r.lo[d] + "))";
      cur_->push_back(store(b->second, off, x));
    }
    if (auto p = out_param_.find(v); p != out_param_.end()) {
      cur_->push_back(store(p->second, flat(g_.value(v).shape, o), store_from_compute(g_.value(v).dtype, x)));
    }
  }

  void element_stage(Kernel& k, int v) {
    k.body.push_back(comment("write " + g_.value(v).name));
    region_loop(k, v, [&](const std::vector<std::string>& o) {
      store_value(v, o, inline_node(g_.nodes()[static_cast<size_t>(producer_.at(v))], o));
    });
  }

  // Nested serial loops over the reduction variables; body(vars) with vars = outputs then
  // reductions.
  void reduction_loops(const TensorExpr& e, const std::vector<std::string>& o,
                       const std::function<void(const std::vector<std::string>&)>& body) {
    std::vector<std::string> vars = o;
    std::function<void(size_t)> nest = [&](size_t r) {
      if (r == e.reduce_extents.size()) {
        body(vars);
        return;
      }
      const std::string rv = "ft_r" + std::to_string(r);
      vars.push_back(rv);
      Block inner;
      with_block(inner, [&] { nest(r + 1); });
      cur_->push_back(serial_for(rv, "0LL", ll(e.reduce_extents[r]), inner));
      vars.pop_back();
    };
    nest(0);
  }

  void anchor_stage(Kernel& k, const Node& n) {
    const int v = n.outputs[0];
    const TensorExpr& e = exprs_.at(static_cast<int>(&n - g_.nodes().data()));
    const OpKind kind = find_op(n.op)->kind;
    k.body.push_back(comment("stage " + n.op + " '" + n.name + "'"));
    if (kind == OpKind::kNormalization) {
      normalization_stage(k, n, e);
    } else if (staged_.count(v) && staged_.at(v).mma != DType::kUndefined) {
      mma_matmul(k, n, e);
    } else if (staged_.count(v)) {
      staged_matmul(k, n, e);
    } else if (conv_.count(v)) {
      if (conv_.at(v).halo) {
        conv_window_stage(k, n, e);
      } else {
        conv_gemm_stage(k, n, e);
      }
    } else {
      region_loop(k, v, [&](const std::vector<std::string>& o) {
        if (n.op == "ScatterND") {
          scatter_body(n, o);
        } else {
          reduce_body(n, e, o);
        }
      });
    }
    k.body.push_back(barrier());
  }

  void reduce_body(const Node& n, const TensorExpr& e, const std::vector<std::string>& o) {
    const int v = n.outputs[0];
    const DType in_dt = g_.value(n.inputs[0]).dtype;
    const bool fl = is_float(in_dt);
    const std::string& op = n.op;
    const std::string acc = "ft_acc", cnt = "ft_cnt", best = "ft_best";
    const bool is_max = op == "ReduceMax" || op == "MaxPool" || op == "ArgMax";
    const bool is_min = op == "ReduceMin" || op == "ArgMin";
    std::string init = fl ? "0.0f" : "0LL";
    if (op == "ReduceProd") init = fl ? "1.0f" : "1LL";
    if (is_max) init = fl ? "(-ft_inf())" : "(-9223372036854775807LL - 1)";
    if (is_min) init = fl ? "ft_inf()" : "9223372036854775807LL";
    const bool contraction = find_op(op)->kind == OpKind::kContraction;
    cur_->push_back(let(contraction ? "float" : compute_ctype(in_dt), acc, contraction ? "0.0f" : init));
    cur_->push_back(let("long long", cnt, "0LL"));
    cur_->push_back(let("long long", best, "0LL"));
    const size_t nout = e.out_shape.size();
    reduction_loops(e, o, [&](const std::vector<std::string>& vars) {
      if (contraction) {
        const Access& a = e.accesses[0];
        const Access& b = e.accesses[1];
        const auto ai = index_of(a, vars), bi = index_of(b, vars);
        const int av = n.inputs[0], bv = n.inputs[1];
        Block body;
        with_block(body, [&] {
          cur_->push_back(assign(acc, acc + " + " + value(av, ai) + " * " + value(bv, bi)));
        });
        if (a.guarded) {
          cur_->push_back(if_then(in_range(g_.value(av).shape, ai), body));
        } else {
          cur_->insert(cur_->end(), body.begin(), body.end());
        }
        return;
      }
      const Access& a = e.accesses[0];
      const auto ai = index_of(a, vars);
      const int x = n.inputs[0];
      Block body;
      with_block(body, [&] {
        const std::string xv = value(x, ai);
        if (op == "ArgMax" || op == "ArgMin") {
          const bool last = n.attrs.i("select_last_index") != 0;
          const std::string cmp = op == "ArgMax" ? (last ? " >= " : " > ") : (last ? " <= " : " < ");
          Block take = {assign(acc, xv), assign(best, vars[nout])};
          cur_->push_back(if_then(cnt + " == 0LL || " + xv + cmp + acc, take));
        } else if (is_max) {
          cur_->push_back(assign(acc, fl ? "ft_fmaxn(" + acc + ", " + xv + ")" : "ft_max(" + acc + ", " + xv + ")"));
        } else if (is_min) {
          cur_->push_back(assign(acc, fl ? "ft_fminn(" + acc + ", " + xv + ")" : "ft_min(" + acc + ", " + xv + ")"));
        } else if (op == "ReduceProd") {
          cur_->push_back(assign(acc, acc + " * " + xv));
        } else {
          cur_->push_back(assign(acc, acc + " + " + xv));
        }
        cur_->push_back(assign(cnt, cnt + " + 1LL"));
      });
      if (a.guarded) {
        cur_->push_back(if_then(in_range(g_.value(x).shape, ai), body));
        if (op == "AveragePool" && n.attrs.i("count_include_pad")) {
          // Taps in the padding count; taps beyond it (ceil-mode overhang) do not.
          const auto pads = n.attrs.ints("pads");
          const Shape& xs = g_.value(x).shape;
          const size_t sp = xs.size() - 2;
          std::string inside_pad;
          for (size_t d = 0; d < sp; ++d) {
            inside_pad += (inside_pad.empty() ? "" : " && ") + std::string("(") + ai[d + 2] + ") >= " + ll(-pads[d]) + " && (" +
                          ai[d + 2] + ") < " + ll(xs[d + 2] + pads[d + sp]);
          }
          cur_->push_back(if_then("!(" + in_range(xs, ai) + ") && " + inside_pad, {assign(cnt, cnt + " + 1LL")}));
        }
      } else {
        cur_->insert(cur_->end(), body.begin(), body.end());
      }
    });
    std::string result = acc;
    if (op == "Conv" && n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
      result = acc + " + " + value(n.inputs[2], {o[1]});
    }
    if (op == "ReduceMean") result = fl ? acc + " / (float)" + cnt : "(" + cnt + " ? " + acc + " / " + cnt + " : 0LL)";
    if (op == "AveragePool") result = "(" + cnt + " ? " + acc + " / (float)" + cnt + " : 0.0f)";
    if (op == "ArgMax" || op == "ArgMin") result = best;
    store_value(v, o, result);
  }

  void scatter_body(const Node& n, const std::vector<std::string>& o) {
    const int v = n.outputs[0];
    const Shape& data = g_.value(n.inputs[0]).shape;
    const Shape& ids = g_.value(n.inputs[1]).shape;
    const int64_t depth = ids.back();
    const int64_t tuples = depth == 0 ? 0 : numel(ids) / depth;
    const std::string red = n.attrs.s("reduction", "none");
    const bool fl = is_float(g_.value(v).dtype);
    const std::string acc = "ft_acc";
    check(param_.count(n.inputs[1]) && param_.count(n.inputs[2]), "ScatterND's indices and updates must be group inputs");
    cur_->push_back(let(compute_ctype(g_.value(v).dtype), acc, value(n.inputs[0], o)));
    const Shape upd_tail(data.begin() + depth, data.end());
    Block body;
    with_block(body, [&] {
      std::string match;
      for (int64_t j = 0; j < depth; ++j) {  // indices viewed as [tuples, depth]
        const std::string flat_i = "(ft_t * " + ll(depth) + " + " + ll(j) + ")";
        const std::string iv = "((long long)" + param_.at(n.inputs[1]) + "[" + flat_i + "])";
        const std::string norm = "(" + iv + " < 0LL ? " + iv + " + " + ll(data[static_cast<size_t>(j)]) + " : " + iv + ")";
        match += (match.empty() ? "" : " && ") + std::string("(") + norm + " == " + o[static_cast<size_t>(j)] + ")";
      }
      std::string uoff = "ft_t";
      for (size_t d = static_cast<size_t>(depth); d < data.size(); ++d) uoff = "(" + uoff + " * " + ll(data[d]) + " + " + o[d] + ")";
      const std::string u = load_as_compute(g_.value(n.inputs[2]).dtype, param_.at(n.inputs[2]) + "[" + uoff + "]");
      std::string next = u;
      if (red == "add") next = acc + " + " + u;
      if (red == "mul") next = acc + " * " + u;
      if (red == "max") next = fl ? "fmaxf(" + acc + ", " + u + ")" : "ft_max(" + acc + ", " + u + ")";
      if (red == "min") next = fl ? "fminf(" + acc + ", " + u + ")" : "ft_min(" + acc + ", " + u + ")";
      cur_->push_back(if_then(match.empty() ? "1" : match, {assign(acc, next)}));
    });
    cur_->push_back(serial_for("ft_t", "0LL", ll(tuples), body));
    store_value(v, o, acc);
  }

  // The accumulator of element e of the staged product: the value's shared buffer, or its own
  // accumulator allocation when the product is the root.
  std::string acc_buffer(int v) const {
    auto b = buffer_.find(v);
    return b != buffer_.end() ? b->second : staged_.at(v).acc;
  }

  // Variable values for the operand reads of staged product v at row m, column nidx and reduction
  // index kk: batch axes at the region's origin.
  std::vector<std::string> staged_vars(int v, const std::string& m, const std::string& nidx, const std::string& kk) const {
    const Staged& st = staged_.at(v);
    std::vector<std::string> vars = region_.at(v).lo;
    vars[st.m_axis] = m;
    vars[st.n_axis] = nidx;
    vars.push_back(kk);
    return vars;
  }

  // The staged product v leaves the block from its accumulators when it is exported (or the root).
  void export_product(Kernel& k, int v) {
    if (!out_param_.count(v)) return;
    k.body.push_back(barrier());
    region_loop(k, v, [&](const std::vector<std::string>& o) {
      cur_->push_back(store(out_param_.at(v), flat(g_.value(v).shape, o),
                            store_from_compute(g_.value(v).dtype, acc_buffer(v) + "[ft_e]")));
    });
  }

  // The tensor-core form of a staged MatMul (mma_layout): per reduction step, both operand slices
  // are staged in shared memory as 16-bit values, zero outside the region's rows and columns and
  // beyond K (so padding contributes nothing); then for every 16 of the step each warp loads its
  // A fragments (ldmatrix.x4 of 16x16 row-major tiles) and B fragments (ldmatrix.x4.trans for two
  // n8 fragments, .x2.trans for a last odd one) and issues fm x fn mma into its f32 accumulator
  // fragments. After the last step each lane writes its accumulator elements that lie inside the
  // region to the shared accumulator buffer, where the epilogue reads them as in the scalar path.
  void mma_matmul(Kernel& k, const Node& n, const TensorExpr& e) {
    const int v = n.outputs[0];
    const Staged& st = staged_.at(v);
    const Region& r = region_.at(v);
    const std::string nm = r.n[st.m_axis], nn = r.n[st.n_axis];
    const std::string step = ll(st.step);
    k.body.push_back(serial_for("ft_i", "0LL", ll(st.fm * st.fn * 4), {assign(st.frag_c + "[ft_i]", "0.0f")}));
    const std::string warp = "((long long)ft_thread / " + ll(kWarpSize) + ")";
    const std::string lane = "((long long)ft_thread % " + ll(kWarpSize) + ")";
    const std::string wm0 = "(" + warp + " / " + ll(st.warps_n) + " * " + ll(st.fm * 16) + ")";
    const std::string wn0 = "(" + warp + " % " + ll(st.warps_n) + " * " + ll(st.fn * 8) + ")";
    Block steps;
    // One operand slice, rows x cols (A: rows_a x step, B: step x cols_b), element by element.
    auto stage = [&](bool is_a) {
      const int64_t rows = is_a ? st.rows_a : st.step, cols = is_a ? st.step : st.cols_b;
      const int u = n.inputs[is_a ? 0 : 1];
      Block loop = fresh_block([&] {
        cur_->push_back(let("long long", "ft_r", "ft_e / " + ll(cols)));
        cur_->push_back(let("long long", "ft_c", "ft_e % " + ll(cols)));
        cur_->push_back(let("long long", "ft_k", "ft_ks * " + step + " + " + (is_a ? "ft_c" : "ft_r")));
        const std::string m = is_a ? "(" + r.lo[st.m_axis] + " + ft_r)" : r.lo[st.m_axis];
        const std::string col = is_a ? r.lo[st.n_axis] : "(" + r.lo[st.n_axis] + " + ft_c)";
        const auto idx = index_of(e.accesses[is_a ? 0 : 1], staged_vars(v, m, col, "ft_k"));
        cur_->push_back(let("float", "ft_x", "0.0f"));
        Block inside;
        with_block(inside, [&] { cur_->push_back(assign("ft_x", value(u, idx))); });
        cur_->push_back(if_then("ft_k < " + ll(st.k) + " && " + (is_a ? "ft_r < " + nm : "ft_c < " + nn), inside));
        cur_->push_back(store(is_a ? st.a : st.b, "ft_r * " + ll(is_a ? st.pitch_a : st.pitch_b) + " + ft_c",
                              store_from_compute(st.mma, "ft_x")));
      });
      steps.push_back(thread_for("ft_e", "0LL", ll(rows * cols), loop));
    };
    stage(true);
    stage(false);
    steps.push_back(barrier());
    Block slice;  // k in [ft_ks * step + ft_kq * 16, + 16)
    for (int64_t i = 0; i < st.fm; ++i) {
      slice.push_back(ldmatrix(st.frag_a, i * 4, 4, false, st.a,
                               "(" + wm0 + " + " + ll(i * 16) + " + " + lane + " % 16LL) * " + ll(st.pitch_a) +
                                   " + ft_kq * 16LL + " + lane + " / 16LL * 8LL"));
    }
    for (int64_t j = 0; j < st.fn; j += 2) {
      const bool pair = j + 1 < st.fn;
      slice.push_back(ldmatrix(st.frag_b, j * 2, pair ? 4 : 2, true, st.b,
                               "(ft_kq * 16LL + " + lane + " % 16LL) * " + ll(st.pitch_b) + " + " + wn0 + " + " + ll(j * 8) +
                                   (pair ? " + " + lane + " / 16LL * 8LL" : "")));
    }
    for (int64_t i = 0; i < st.fm; ++i) {
      for (int64_t j = 0; j < st.fn; ++j) slice.push_back(mma(st.frag_c, (i * st.fn + j) * 4, st.frag_a, i * 4, st.frag_b, j * 2, st.mma));
    }
    steps.push_back(uniform_for("ft_kq", "0LL", ll(st.step / 16), slice));
    steps.push_back(barrier());
    k.body.push_back(uniform_for("ft_ks", "0LL", ll((st.k + st.step - 1) / st.step), steps));
    // Accumulator fragments to the shared accumulator buffer (c_i at row g + 8 * (i / 2), column
    // 2t + i % 2 of its fragment).
    const std::string acc = acc_buffer(v);
    Block write = {let("long long", "ft_g", lane + " / 4LL"), let("long long", "ft_t", lane + " % 4LL")};
    for (int64_t i = 0; i < st.fm; ++i) {
      for (int64_t j = 0; j < st.fn; ++j) {
        for (int64_t c = 0; c < 4; ++c) {
          const std::string row = "(" + wm0 + " + " + ll(i * 16 + (c / 2) * 8) + " + ft_g)";
          const std::string col = "(" + wn0 + " + " + ll(j * 8 + c % 2) + " + 2LL * ft_t)";
          write.push_back(if_then(row + " < " + nm + " && " + col + " < " + nn,
                                  {store(acc, row + " * " + nn + " + " + col, st.frag_c + "[" + std::to_string((i * st.fn + j) * 4 + c) + "]")}));
        }
      }
    }
    k.body.push_back(if_then(wm0 + " < " + nm + " && " + wn0 + " < " + nn, write));
    k.body.push_back(barrier());
    export_product(k, v);
  }

  void staged_matmul(Kernel& k, const Node& n, const TensorExpr& e) {
    const int v = n.outputs[0];
    const Staged& st = staged_.at(v);
    const Region& r = region_.at(v);
    const std::string acc = acc_buffer(v);
    const std::string nm = r.n[st.m_axis], nn = r.n[st.n_axis];
    const std::string step = ll(st.step);
    // Accumulators start at zero.
    if (st.regs.empty()) {
      region_loop(k, v, [&](const std::vector<std::string>&) { cur_->push_back(store(acc, "ft_e", "0.0f")); });
      k.body.push_back(barrier());
    } else {
      k.body.push_back(serial_for("ft_i", "0LL", ll(st.tm * st.tn), {assign(st.regs + "[ft_i]", "0.0f")}));
    }
    // Each thread's micro-tile: rows [ft_tm0, ft_tm0 + TM), columns [ft_tn0, ft_tn0 + TN).
    const std::string ntn = "((" + nn + " + " + ll(st.tn - 1) + ") / " + ll(st.tn) + ")";
    const std::string owns = "(long long)ft_thread < ((" + nm + " + " + ll(st.tm - 1) + ") / " + ll(st.tm) + ") * " + ntn;
    auto micro_tile = [&]() {
      return Block{let("long long", "ft_tm0", "((long long)ft_thread / " + ntn + ") * " + ll(st.tm)),
                   let("long long", "ft_tn0", "((long long)ft_thread % " + ntn + ") * " + ll(st.tn))};
    };
    auto operand_vars = [&](const std::string& m, const std::string& nidx, const std::string& kk) {
      return staged_vars(v, m, nidx, kk);
    };
    Block steps;
    auto staging = [&](const std::string& buf, int64_t cap, const std::string& count, const Access& a, int operand,
                       bool is_a) {
      Block loop = fresh_block([&] {
        // A: e = m * step + kk; B: e = kk * n + col
        const std::string kk = is_a ? "(ft_e % " + step + ")" : "(ft_e / " + nn + ")";
        cur_->push_back(let("long long", "ft_k", "ft_ks * " + step + " + " + kk));
        const std::string m = is_a ? "(" + r.lo[st.m_axis] + " + ft_e / " + step + ")" : r.lo[st.m_axis];
        const std::string col = is_a ? r.lo[st.n_axis] : "(" + r.lo[st.n_axis] + " + ft_e % " + nn + ")";
        const auto idx = index_of(a, operand_vars(m, col, "ft_k"));
        cur_->push_back(let("float", "ft_x", "0.0f"));
        Block inside;
        with_block(inside, [&] { cur_->push_back(assign("ft_x", value(n.inputs[static_cast<size_t>(operand)], idx))); });
        cur_->push_back(if_then("ft_k < " + ll(st.k), inside));
        cur_->push_back(store(buf, "ft_e", "ft_x"));
      });
      steps.push_back(thread_for("ft_e", "0LL", "ft_min(" + count + ", " + ll(cap) + ")", loop));
    };
    // The same slice in float4 quads: viewed as rows x cols, contiguous along cols in the operand
    // (A: nm x step, B: step x nn), each thread loads 4 consecutive columns in one 16-byte access
    // when all 4 lie inside the slice and the operand and their address is 16-byte aligned
    // (checked per quad: a row of an odd-sized operand may start anywhere), else element by element.
    auto vector_staging = [&](const std::string& buf, int64_t cap, const Access& a, int operand, bool is_a) {
      const int u = n.inputs[static_cast<size_t>(operand)];
      const std::string p = param_.at(u);
      const std::string cols = is_a ? step : nn, rows = is_a ? nm : step;
      const std::string quads = "((" + cols + " + 3LL) / 4LL)";
      const int64_t max_quads = is_a ? cap / 4 : st.step * ((cap / st.step + 3) / 4);
      Block loop = fresh_block([&] {
        cur_->push_back(let("long long", "ft_r", "ft_e / " + quads));
        cur_->push_back(let("long long", "ft_c", "(ft_e % " + quads + ") * 4LL"));
        cur_->push_back(let("long long", "ft_k", "ft_ks * " + step + " + " + (is_a ? "ft_c" : "ft_r")));
        const std::string m = is_a ? "(" + r.lo[st.m_axis] + " + ft_r)" : r.lo[st.m_axis];
        const std::string col = is_a ? r.lo[st.n_axis] : "(" + r.lo[st.n_axis] + " + ft_c)";
        cur_->push_back(let("long long", "ft_at", flat(g_.value(u).shape, index_of(a, operand_vars(m, col, "ft_k")))));
        cur_->push_back(let("long long", "ft_s", "ft_r * " + cols + " + ft_c"));
        // A: the quad is 4 reduction steps (all in the slice: the step is a multiple of 4); B: 4
        // columns of one reduction step, within the slice's columns and its allocation.
        const std::string fits = is_a ? "ft_k + 3LL < " + ll(st.k)
                                      : "ft_k < " + ll(st.k) + " && ft_c + 3LL < " + nn + " && ft_s + 3LL < " + ll(cap);
        const std::string whole = fits + " && ft_aligned16(" + p + ", ft_at)";
        Block quad = {vector_load("ft_q", p, "ft_at")};
        Block tail;
        for (int i = 0; i < 4; ++i) {
          const std::string at = "ft_s + " + ll(i);
          quad.push_back(store(buf, at, std::string("ft_q.") + "xyzw"[i]));
          const std::string inside = is_a ? "ft_k + " + ll(i) + " < " + ll(st.k) : "ft_k < " + ll(st.k);
          const Stmt element = store(buf, at, "(" + inside + " ? " + p + "[ft_at + " + ll(i) + "] : 0.0f)");
          tail.push_back(is_a ? element : if_then("ft_c + " + ll(i) + " < " + nn + " && " + at + " < " + ll(cap), {element}));
        }
        cur_->push_back(if_then(whole, quad, tail));
      });
      steps.push_back(thread_for("ft_e", "0LL", "ft_min(" + rows + " * " + quads + ", " + ll(max_quads) + ")", loop));
    };
    if (st.vec_a) {
      vector_staging(st.a, st.a_cap, e.accesses[0], 0, true);
    } else {
      staging(st.a, st.a_cap, "(" + nm + " * " + step + ")", e.accesses[0], 0, true);
    }
    if (st.vec_b) {
      vector_staging(st.b, st.b_cap, e.accesses[1], 1, false);
    } else {
      staging(st.b, st.b_cap, "(" + step + " * " + nn + ")", e.accesses[1], 1, false);
    }
    steps.push_back(barrier());
    if (!st.regs.empty()) {
      Block inner;
      for (int64_t i = 0; i < st.tm; ++i) {
        const std::string row = "(ft_tm0 + " + ll(i) + ")";
        inner.push_back(let("float", "ft_ra" + std::to_string(i),
                            "(" + row + " < " + nm + " ? " + st.a + "[" + row + " * " + step + " + ft_kk] : 0.0f)"));
      }
      for (int64_t j = 0; j < st.tn; ++j) {
        const std::string col = "(ft_tn0 + " + ll(j) + ")";
        inner.push_back(let("float", "ft_rb" + std::to_string(j),
                            "(" + col + " < " + nn + " ? " + st.b + "[ft_kk * " + nn + " + " + col + "] : 0.0f)"));
      }
      for (int64_t i = 0; i < st.tm; ++i) {
        for (int64_t j = 0; j < st.tn; ++j) {
          const std::string cell = st.regs + "[" + std::to_string(i * st.tn + j) + "]";
          inner.push_back(assign(cell, cell + " + ft_ra" + std::to_string(i) + " * ft_rb" + std::to_string(j)));
        }
      }
      Block body = micro_tile();
      body.push_back(serial_for("ft_kk", "0LL", "ft_min(" + step + ", " + ll(st.k) + " - ft_ks * " + step + ")", inner));
      steps.push_back(if_then(owns, body));
    } else {
      Block loop = {let("long long", "ft_m", "ft_e / " + nn), let("long long", "ft_n", "ft_e % " + nn),
                    let("float", "ft_s", acc + "[ft_e]")};
      Block inner = {assign("ft_s", "ft_s + " + st.a + "[ft_m * " + step + " + ft_kk] * " + st.b + "[ft_kk * " + nn + " + ft_n]")};
      loop.push_back(serial_for("ft_kk", "0LL", "ft_min(" + step + ", " + ll(st.k) + " - ft_ks * " + step + ")", inner));
      loop.push_back(store(acc, "ft_e", "ft_s"));
      steps.push_back(thread_for("ft_e", "0LL", "ft_min(" + nm + " * " + nn + ", " + ll(std::max<int64_t>(1, capacity_[v] > 0 ? capacity_[v] : 1)) + ")", loop));
    }
    steps.push_back(barrier());
    k.body.push_back(uniform_for("ft_ks", "0LL", ll((st.k + st.step - 1) / st.step), steps));
    if (!st.regs.empty()) {  // registers to the shared accumulator buffer, where consumers read the product
      Block write = micro_tile();
      for (int64_t i = 0; i < st.tm; ++i) {
        for (int64_t j = 0; j < st.tn; ++j) {
          const std::string row = "(ft_tm0 + " + ll(i) + ")", col = "(ft_tn0 + " + ll(j) + ")";
          write.push_back(if_then(row + " < " + nm + " && " + col + " < " + nn,
                                  {store(acc, row + " * " + nn + " + " + col, st.regs + "[" + std::to_string(i * st.tn + j) + "]")}));
        }
      }
      k.body.push_back(if_then(owns, write));
      k.body.push_back(barrier());
    }
    export_product(k, v);
  }

  // ---- staged convolution ---------------------------------------------------------------------
  // An int local for an index inside a staged slice or the reduction (all far below 2^31): 32-bit
  // index arithmetic keeps the staging loops' register use low on the GPU.
  static Stmt small_let(const std::string& name, const std::string& value) {
    return let("int", name, "(int)(" + value + ")");
  }

  int64_t conv_cout_per_group(const Node& n) const {
    return g_.value(n.inputs[1]).shape[0] / n.attrs.i("group", 1);
  }

  std::vector<int64_t> conv_attr(const Node& n, const char* name, int64_t fill, size_t count) const {
    return n.attrs.ints(name, std::vector<int64_t>(count, fill));
  }

  // Sizes the shared slices and register tile of a Conv staged with the candidate's reduction step
  // (`me`: the largest extent of the Conv's region along each axis over the block's tiles). A Conv
  // whose region the block's threads cannot cover with micro-tiles of at most 8 x 8 stays on the
  // generic schedule.
  void plan_conv(Kernel& k, const Node& node, const std::vector<int64_t>& me) {
    const int v = node.outputs[0];
    const Shape& w = g_.value(node.inputs[1]).shape;
    const size_t sp = me.size() - 2;
    const std::string tag = std::to_string(v);
    StagedConv st;
    st.k = numel(w) / w[0];
    st.step = cfg_.reduce_step;
    st.cout_g = conv_cout_per_group(node);
    st.groups_cap = std::max<int64_t>(1, max_groups_[v]);
    if (w[1] == 1) {  // one input channel per output channel: the window of the region, once
      st.halo = true;
      const auto strides = conv_attr(node, "strides", 1, sp), dil = conv_attr(node, "dilations", 1, sp);
      st.caps = {std::max<int64_t>(1, me[0]), st.groups_cap};
      for (size_t i = 0; i < sp; ++i) st.caps.push_back(std::max<int64_t>(1, (me[2 + i] - 1) * strides[i] + (w[2 + i] - 1) * dil[i] + 1));
      st.b_cap = 1;
      for (int64_t c : st.caps) st.b_cap *= c;
      st.b = k.add_shared("cw" + tag, DType::kF32, st.b_cap);
      conv_[v] = st;
      return;
    }
    int64_t pixels = 1;
    for (int64_t x : me) st.caps.push_back(std::max<int64_t>(1, x));
    for (size_t d = 0; d < me.size(); ++d) pixels *= d == 1 ? 1 : st.caps[d];
    std::tie(st.tm, st.tn) = planner::micro_tile(st.caps[1], pixels, cfg_.threads);
    if (st.tm == 0) return;
    st.a_cap = st.caps[1] * st.step;
    st.b_cap = st.groups_cap * st.step * pixels;
    st.a = k.add_shared("ca" + tag, DType::kF32, st.a_cap);
    st.b = k.add_shared("cb" + tag, DType::kF32, st.b_cap);
    st.regs = "tc" + tag;
    k.thread_locals.push_back({st.regs, st.tm * st.tn});
    conv_[v] = st;
  }

  // Emits lets decomposing column `p` (of the columns laid out with the caps) of the region of
  // Conv output v into its batch and spatial coordinates (the channel axis is left empty for the
  // caller); *inside is the condition that the column is a pixel of this block's region.
  std::vector<std::string> conv_pixel(int v, const std::string& p, std::string* inside) {
    const Region& r = region_.at(v);
    const std::vector<int64_t>& caps = conv_.at(v).caps;
    std::vector<std::string> o(r.n.size());
    int64_t inner = 1;
    *inside = "1";
    for (size_t d = r.n.size(); d-- > 0;) {
      if (d == 1) continue;
      const std::string q = "ft_q" + std::to_string(d);
      cur_->push_back(small_let(q, "(" + p + " / " + ll(inner) + ") % " + ll(caps[d])));
      o[d] = "(" + r.lo[d] + " + " + q + ")";
      *inside += " && " + q + " < " + r.n[d];
      inner *= caps[d];
    }
    return o;
  }

  // Emits lets decomposing reduction index `kk` (input channel of the group, then the window taps,
  // row-major as the weights are laid out) into the reduction variables.
  std::vector<std::string> conv_taps(const TensorExpr& e, const std::string& kk) {
    std::vector<std::string> vars;
    int64_t stride = 1;
    for (int64_t x : e.reduce_extents) stride *= x;
    for (size_t q = 0; q < e.reduce_extents.size(); ++q) {
      stride /= e.reduce_extents[q];
      vars.push_back("ft_rv" + std::to_string(q));
      cur_->push_back(small_let(vars.back(), "(" + kk + " / " + ll(stride) + ") % " + ll(e.reduce_extents[q])));
    }
    return vars;
  }

  // Conv as an implicit GEMM: rows = the region's output channels (M), columns = its pixels (P).
  // Each step of the reduction loads the weight slice (M x step) and the im2col patches of every group the rows touch (groups x step x P; zero outside
  // the input, past K and for columns outside the region) into shared memory, then every thread
  // updates its TM x TN accumulators; after the last step each thread writes its micro-tile (plus
  // the bias) where the Conv's value goes: its shared buffer for the epilogue, and global memory
  // when exported.
  void conv_gemm_stage(Kernel& k, const Node& n, const TensorExpr& e) {
    const int v = n.outputs[0];
    const StagedConv& st = conv_.at(v);
    const Region& r = region_.at(v);
    const std::string nm = r.n[1], step = ll(st.step), kk_total = ll(st.k);
    const int64_t cols = st.b_cap / (st.groups_cap * st.step);
    const std::string np = ll(cols);
    const std::string g0 = "(" + r.lo[1] + " / " + ll(st.cout_g) + ")";
    const std::string ng = st.groups_cap == 1 ? "1LL"
                                              : "ft_min(" + r.hi[1] + " / " + ll(st.cout_g) + " - " + g0 + " + 1LL, " +
                                                    ll(st.groups_cap) + ")";
    k.body.push_back(serial_for("ft_i", "0LL", ll(st.tm * st.tn), {assign(st.regs + "[ft_i]", "0.0f")}));
    const int64_t ntn = (cols + st.tn - 1) / st.tn;
    const std::string owns = "(long long)ft_thread < " + ll((st.caps[1] + st.tm - 1) / st.tm * ntn);
    const Block micro_tile = {small_let("ft_tm0", "((long long)ft_thread / " + ll(ntn) + ") * " + ll(st.tm)),
                              small_let("ft_tn0", "((long long)ft_thread % " + ll(ntn) + ") * " + ll(st.tn))};
    Block steps;
    // Weights: element e of the slice is row e / step, reduction index ks * step + e % step.
    steps.push_back(thread_for("ft_e", "0LL", "ft_min(" + nm + " * " + step + ", " + ll(st.a_cap) + ")", fresh_block([&] {
      cur_->push_back(small_let("ft_k", "ft_ks * " + step + " + ft_e % " + step));
      cur_->push_back(let("float", "ft_x", "0.0f"));
      Block inside;
      with_block(inside, [&] {
        std::vector<std::string> vars = r.lo;
        vars[1] = "(" + r.lo[1] + " + ft_e / " + step + ")";
        for (const std::string& t : conv_taps(e, "ft_k")) vars.push_back(t);
        cur_->push_back(assign("ft_x", value(n.inputs[1], index_of(e.accesses[1], vars))));
      });
      cur_->push_back(if_then("ft_k < " + kk_total, inside));
      cur_->push_back(store(st.a, "ft_e", "ft_x"));
    })));
    // Patches: element e is group e / (step * P), reduction index ks * step + (e / P) % step,
    // column e % P; the input channel follows from the group (any output channel of it).
    const int x = n.inputs[0];
    const Access& xa = e.accesses[0];
    steps.push_back(thread_for("ft_e", "0LL", ng + " * " + ll(st.step * cols), fresh_block([&] {
      cur_->push_back(small_let("ft_k", "ft_ks * " + step + " + (ft_e / " + np + ") % " + step));
      cur_->push_back(let("float", "ft_x", "0.0f"));
      std::string pixel;
      std::vector<std::string> vars = conv_pixel(v, "ft_e % " + np, &pixel);
      Block inside;
      with_block(inside, [&] {
        vars[1] = "((" + g0 + " + ft_e / " + ll(st.step * cols) + ") * " + ll(st.cout_g) + ")";
        for (const std::string& t : conv_taps(e, "ft_k")) vars.push_back(t);
        const auto idx = index_of(xa, vars);
        if (xa.guarded) {
          Block in_input;
          with_block(in_input, [&] { cur_->push_back(assign("ft_x", value(x, idx))); });
          cur_->push_back(if_then(in_range(g_.value(x).shape, idx), in_input));
        } else {
          cur_->push_back(assign("ft_x", value(x, idx)));
        }
      });
      cur_->push_back(if_then("ft_k < " + kk_total + " && " + pixel, inside));
      cur_->push_back(store(st.b, "ft_e", "ft_x"));
    })));
    steps.push_back(barrier());
    // The micro-tile update: rows [ft_tm0, ft_tm0 + TM), columns [ft_tn0, ft_tn0 + TN); a row reads
    // the patches of its own group.
    Block update = micro_tile;
    Block inner;
    for (int64_t i = 0; i < st.tm; ++i) {
      const std::string row = "(ft_tm0 + " + ll(i) + ")", is = std::to_string(i);
      if (st.groups_cap > 1) {
        update.push_back(small_let("ft_g" + is,
                             "ft_min((" + r.lo[1] + " + " + row + ") / " + ll(st.cout_g) + " - " + g0 + ", " + ng + " - 1LL)"));
      }
      inner.push_back(let("float", "ft_ra" + is, "(" + row + " < " + nm + " ? " + st.a + "[" + row + " * " + step + " + ft_kk] : 0.0f)"));
    }
    auto patch = [&](const std::string& group, int64_t j) {
      const std::string col = "(ft_tn0 + " + ll(j) + ")";
      const std::string at = st.b + "[(" + group + " * " + step + " + ft_kk) * " + np + " + " + col + "]";
      return ntn * st.tn == cols ? at : "(" + col + " < " + np + " ? " + at + " : 0.0f)";
    };
    for (int64_t j = 0; j < st.tn; ++j) {
      if (st.groups_cap == 1) inner.push_back(let("float", "ft_rb" + std::to_string(j), patch("0LL", j)));
    }
    for (int64_t i = 0; i < st.tm; ++i) {
      for (int64_t j = 0; j < st.tn; ++j) {
        const std::string cell = st.regs + "[" + std::to_string(i * st.tn + j) + "]";
        const std::string b = st.groups_cap == 1 ? "ft_rb" + std::to_string(j) : patch("ft_g" + std::to_string(i), j);
        inner.push_back(assign(cell, cell + " + ft_ra" + std::to_string(i) + " * " + b));
      }
    }
    update.push_back(serial_for("ft_kk", "0LL", "ft_min(" + step + ", " + kk_total + " - ft_ks * " + step + ")", inner));
    steps.push_back(if_then(owns, update));
    steps.push_back(barrier());
    k.body.push_back(uniform_for("ft_ks", "0LL", ll((st.k + st.step - 1) / st.step), steps));
    // The epilogue's input: each cell of the micro-tile, plus the bias.
    const bool bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
    Block write = fresh_block([&] {
      cur_->insert(cur_->end(), micro_tile.begin(), micro_tile.end());
      for (int64_t j = 0; j < st.tn; ++j) {
        const std::string col = "(ft_tn0 + " + ll(j) + ")";
        Block column;
        std::string pixel;
        with_block(column, [&] {
          std::vector<std::string> o = conv_pixel(v, col, &pixel);
          Block cells;
          with_block(cells, [&] {
            for (int64_t i = 0; i < st.tm; ++i) {
              const std::string row = "(ft_tm0 + " + ll(i) + ")";
              Block cell;
              with_block(cell, [&] {
                o[1] = "(" + r.lo[1] + " + " + row + ")";
                std::string result = st.regs + "[" + std::to_string(i * st.tn + j) + "]";
                if (bias) result += " + " + value(n.inputs[2], {o[1]});
                store_value(v, o, result);
              });
              cur_->push_back(if_then(row + " < " + nm, cell));
            }
          });
          cur_->push_back(if_then(pixel, cells));
        });
        cur_->push_back(if_then(col + " < " + np, column));
      }
    });
    k.body.push_back(if_then(owns, write));
  }

  // Depthwise-like Conv (one input channel per output channel): the input window of the region
  // (batch x the input channels its output channels read x the spatial window, zero outside the
  // input; laid out with the caps) is staged once; then every output sums its taps from shared
  // memory, weights from global memory, plus the bias.
  void conv_window_stage(Kernel& k, const Node& n, const TensorExpr& e) {
    const int v = n.outputs[0], x = n.inputs[0];
    const StagedConv& st = conv_.at(v);
    const Region& r = region_.at(v);
    const size_t sp = r.n.size() - 2;
    const auto strides = conv_attr(n, "strides", 1, sp), pads = conv_attr(n, "pads", 0, 2 * sp);
    // The window's origin per input axis (block-uniform).
    const std::string pre = "cw" + std::to_string(v) + "_";
    std::vector<std::string> origin = {r.lo[0], pre + "c0"};
    k.uniform.push_back(let("long long", pre + "c0", r.lo[1] + " / " + ll(st.cout_g)));
    for (size_t i = 0; i < sp; ++i) {
      origin.push_back(pre + "s" + std::to_string(i));
      k.uniform.push_back(let("long long", origin.back(), r.lo[2 + i] + " * " + ll(strides[i]) + " - " + ll(pads[i])));
    }
    k.body.push_back(thread_for("ft_e", "0LL", ll(st.b_cap), fresh_block([&] {
      std::vector<std::string> idx(st.caps.size());
      int64_t inner = 1;
      for (size_t d = st.caps.size(); d-- > 0;) {
        idx[d] = "ft_w" + std::to_string(d);
        cur_->push_back(let("long long", idx[d], origin[d] + " + (ft_e / " + ll(inner) + ") % " + ll(st.caps[d])));
        inner *= st.caps[d];
      }
      cur_->push_back(let("float", "ft_x", "0.0f"));
      Block inside;
      with_block(inside, [&] { cur_->push_back(assign("ft_x", value(x, idx))); });
      cur_->push_back(if_then(in_range(g_.value(x).shape, idx), inside));
      cur_->push_back(store(st.b, "ft_e", "ft_x"));
    })));
    k.body.push_back(barrier());
    region_loop(k, v, [&](const std::vector<std::string>& o) {
      cur_->push_back(let("float", "ft_acc", "0.0f"));
      reduction_loops(e, o, [&](const std::vector<std::string>& vars) {
        const auto xi = index_of(e.accesses[0], vars);
        std::string off = "0LL";
        for (size_t d = 0; d < xi.size(); ++d) off = "(" + off + " * " + ll(st.caps[d]) + " + (" + xi[d] + " - " + origin[d] + "))";
        const std::string wv = value(n.inputs[1], index_of(e.accesses[1], vars));
        cur_->push_back(assign("ft_acc", "ft_acc + " + st.b + "[" + off + "] * " + wv));
      });
      std::string result = "ft_acc";
      if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) result += " + " + value(n.inputs[2], {o[1]});
      store_value(v, o, result);
    });
  }

  void normalization_stage(Kernel& k, const Node& n, const TensorExpr& e) {
    const int v = n.outputs[0];
    const int x = n.inputs[0];
    const Region& r = region_.at(v);
    const auto axis = static_cast<size_t>(norm_axis(n));
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
      std::string off = "0LL";
      for (size_t j = 0; j < row_dims.size(); ++j) {
        off = "(" + off + " * " + row_n[j] + " + (" + o[row_dims[j]] + " - " + r.lo[row_dims[j]] + "))";
      }
      return off;
    };
    const auto [sa, sb] = stats_.at(v);
    // Stage 1: statistics, one warp per row. Each lane reduces a strided share of the row into its
    // thread-local, a warp reduction leaves the row's total in every lane, the second pass reads the
    // first statistic straight from there, and lane 0 writes both to shared memory. A block-uniform
    // loop hands the block's warps successive batches of rows.
    const int64_t cap = std::max<int64_t>(1, row_capacity_[v]);
    int64_t count = 1;
    for (int64_t ext : e.reduce_extents) count *= ext;
    const Access& stats = e.accesses[1];  // x read with the normalized axes as reduction variables
    const int64_t warps = cfg_.threads / kWarpSize;
    const std::string lanes = ll(kWarpSize);
    const std::string rows = "ft_min(" + product(row_n) + ", " + ll(cap) + ")";
    const std::string row = "(ft_rb * " + ll(warps) + " + (long long)ft_thread / " + lanes + ")";
    const std::string first = "w" + std::to_string(v) + "_a", second = "w" + std::to_string(v) + "_b";
    k.thread_locals.push_back({first, 1});
    k.thread_locals.push_back({second, 1});
    // The row's coordinates (normalized axes at 0), as lets of ft_row.
    auto row_coords = [&]() {
      std::vector<std::string> o(rank, "0LL");
      std::string inner = "1LL";
      for (size_t j = row_dims.size(); j-- > 0;) {
        o[row_dims[j]] = "ft_o" + std::to_string(row_dims[j]);
        cur_->push_back(let("long long", o[row_dims[j]], r.lo[row_dims[j]] + " + (ft_row / " + inner + ") % " + row_n[j]));
        inner = "(" + inner + " * " + row_n[j] + ")";
      }
      return o;
    };
    Block batch;
    // One pass: every lane's share of its row folded into `tl` with step(acc, x).
    auto lane_share = [&](const std::string& tl, const std::string& init,
                          const std::function<std::string(const std::string&, const std::string&)>& step) {
      const std::string acc = tl + "[0]";
      Block body = fresh_block([&] {
        cur_->push_back(let("long long", "ft_row", row));
        cur_->push_back(let("long long", "ft_lane", "(long long)ft_thread % " + lanes));
        const std::vector<std::string> o = row_coords();
        Block loop;
        with_block(loop, [&] {
          cur_->push_back(let("long long", "ft_f", "ft_lane + ft_j * " + lanes));
          std::vector<std::string> vars = o;
          int64_t stride = count;
          for (size_t q = 0; q < e.reduce_extents.size(); ++q) {
            stride /= e.reduce_extents[q];
            const std::string rv = "ft_r" + std::to_string(q);
            cur_->push_back(let("long long", rv, "(ft_f / " + ll(stride) + ") % " + ll(e.reduce_extents[q])));
            vars.push_back(rv);
          }
          cur_->push_back(assign(acc, step(acc, value(x, index_of(stats, vars)))));
        });
        cur_->push_back(serial_for("ft_j", "0LL", "(" + ll(count) + " - ft_lane + " + ll(kWarpSize - 1) + ") / " + lanes, loop));
      });
      batch.push_back(assign(acc, init));
      batch.push_back(if_then(row + " < " + rows, body));
    };
    const std::string n_elems = float_literal(static_cast<double>(count));
    const std::string a0 = first + "[0]", b0 = second + "[0]";
    std::string stat_a = a0, stat_b = b0;
    if (layer_norm) {  // mean, then the mean of squared deviations from it
      lane_share(first, "0.0f", [](const std::string& acc, const std::string& xv) { return acc + " + " + xv; });
      batch.push_back(warp_reduce(first, "sum"));
      batch.push_back(assign(a0, a0 + " / " + n_elems));
      lane_share(second, "0.0f", [&](const std::string& acc, const std::string& xv) {
        const std::string d = "(" + xv + " - " + a0 + ")";
        return acc + " + " + d + " * " + d;
      });
      batch.push_back(warp_reduce(second, "sum"));
      stat_b = "1.0f / sqrtf(" + b0 + " / " + n_elems + " + " + float_literal(n.attrs.f("epsilon", 1e-5f)) + ")";
    } else {  // max, then the sum of exponentials relative to it
      lane_share(first, "(-ft_inf())", [](const std::string& acc, const std::string& xv) { return "ft_fmaxn(" + acc + ", " + xv + ")"; });
      batch.push_back(warp_reduce(first, "max"));
      lane_share(second, "0.0f", [&](const std::string& acc, const std::string& xv) {
        return acc + " + expf(" + xv + " - " + a0 + ")";
      });
      batch.push_back(warp_reduce(second, "sum"));
    }
    Block write = fresh_block([&] {
      cur_->push_back(let("long long", "ft_row", row));
      const std::string ri = row_index(row_coords());
      cur_->push_back(store(sa, ri, stat_a));
      cur_->push_back(store(sb, ri, stat_b));
    });
    batch.push_back(if_then(row + " < " + rows + " && ft_thread % " + lanes + " == 0", write));
    k.body.push_back(uniform_for("ft_rb", "0LL", "(" + rows + " + " + ll(warps - 1) + ") / " + ll(warps), batch));
    k.body.push_back(barrier());
    // Stage 2: elements.
    region_loop(k, v, [&](const std::vector<std::string>& o) {
      const std::string xv = value(x, o);
      const std::string ri = row_index(o);
      cur_->push_back(let("float", "ft_sa", sa + "[" + ri + "]"));
      cur_->push_back(let("float", "ft_sb", sb + "[" + ri + "]"));
      std::string y;
      if (n.op == "Softmax") y = "expf(" + xv + " - ft_sa) / ft_sb";
      if (n.op == "LogSoftmax") y = "(" + xv + " - ft_sa - logf(ft_sb))";
      if (layer_norm) {
        y = "(" + xv + " - ft_sa) * ft_sb * " + value(n.inputs[1], index_of(e.accesses[2], o));
        if (e.accesses.size() > 3) y = "(" + y + " + " + value(n.inputs[2], index_of(e.accesses[3], o)) + ")";
      }
      store_value(v, o, y);
    });
  }


  // A Conv staged as an implicit GEMM (C_in/groups > 1): rows are the region's output channels
  // (M), columns its pixels (P: batch and spatial axes flattened), the reduction K = C_in/groups x
  // window in steps; or, depthwise-like (C_in/groups == 1, `halo`), the input window of the region
  // staged once.
  struct StagedConv {
    bool halo = false;
    int64_t k = 0, step = 0;
    int64_t cout_g = 0;     // output channels per group
    int64_t groups_cap = 1; // most groups the region's channels span (patch slices per step)
    std::string a, b;       // GEMM: weights [M][step], patches [groups][step][P]; halo: b = input window
    int64_t a_cap = 0, b_cap = 0;
    // Extents the slices are laid out with (the largest over the block's tiles, so every index
    // divides by constants: a 64-bit division by a run-time value is a called routine on the GPU):
    // GEMM: the region's axes (columns: the axes other than 1); halo: the window's axes.
    std::vector<int64_t> caps;
    std::string regs;       // the TM x TN accumulators of each thread
    int64_t tm = 0, tn = 0;
  };

  const Graph& g_;
  const planner::FusionGroup& group_;
  const planner::TileConfig& cfg_;
  const LowerOptions& options_;
  std::set<int> members_;
  std::map<int, int> producer_;
  std::map<int, TensorExpr> exprs_;
  std::map<int, std::string> param_;
  std::map<int, std::string> out_param_;
  std::map<int, Region> region_;
  std::map<int, std::string> buffer_;
  std::map<int, std::pair<std::string, std::string>> stats_;
  std::map<int, Staged> staged_;
  std::map<int, StagedConv> conv_;
  std::map<int, int64_t> max_groups_;    // per Conv output: the most groups a tile's channels span
  int root_ = -1;
  std::map<int, int64_t> capacity_;      // elements allocated per staged value
  std::map<int, int64_t> row_capacity_;  // rows allocated per normalization's statistics
  int64_t tiles_ = 1;
  std::vector<int64_t> ntiles_;
  std::vector<int64_t> tile_extent_;
  Block* cur_ = nullptr;
  std::map<std::string, std::string>* memo_ = nullptr;
  int next_local_ = 0;
};

}  // namespace

namespace {

// A library candidate: no generated body, the call and its parameter bindings.
LoweredKernel lower_library_call(const Graph& g, const planner::FusionGroup& group, const planner::TileConfig& cfg,
                                 const std::string& name, const LowerOptions& options) {
  const auto match = planner::match_library_call(g, group);
  check(match.has_value(), "lower_group: the group (", group.pattern, ") is not a pattern ", cfg.library, " runs");
  LoweredKernel out;
  out.kernel.name = name;
  out.kernel.library = match->call.to_json();
  auto param = [&](int v, bool output, const std::string& pname) {
    const Value& val = g.value(v);
    out.kernel.params.push_back({options.param_prefix + pname, val.dtype, numel(val.shape), output});
  };
  for (size_t i = 0; i < match->inputs.size(); ++i) param(match->inputs[i], false, "in" + std::to_string(i));
  param(match->output, true, "out0");
  out.inputs = match->inputs;
  out.outputs = {match->output};
  return out;
}

}  // namespace

LoweredKernel lower_group(const Graph& g, const planner::FusionGroup& group, const planner::TileConfig& cfg,
                          const std::string& name, const LowerOptions& options) {
  check(!group.nodes.empty(), "lower_group: empty group");
  if (!cfg.library.empty()) return lower_library_call(g, group, cfg, name, options);
  check(cfg.threads > 0 && cfg.threads % 32 == 0, "lower_group: threads must be a positive multiple of 32");
  GroupLowering l(g, group, cfg, options);
  return l.run(name);
}

LoweredKernel pack_kernels(const std::vector<LoweredKernel>& parts, const std::string& name) {
  check(!parts.empty(), "pack_kernels: nothing to pack");
  if (parts.size() == 1) {
    LoweredKernel one = parts[0];
    one.kernel.name = name;
    return one;
  }
  LoweredKernel out;
  Kernel& k = out.kernel;
  k.name = name;
  k.threads = parts[0].kernel.threads;
  k.grid = 0;
  for (const LoweredKernel& p : parts) check(p.kernel.library.empty(), "pack_kernels: a library call cannot be packed");
  std::vector<Param> outs;
  for (const LoweredKernel& p : parts) {
    check(p.kernel.threads == k.threads, "pack_kernels: parts have ", p.kernel.threads, " and ", k.threads, " threads");
    const int64_t base = k.grid;
    k.grid += p.kernel.grid;
    for (const Param& prm : p.kernel.params) (prm.output ? outs : k.params).push_back(prm);
    k.shared.insert(k.shared.end(), p.kernel.shared.begin(), p.kernel.shared.end());
    k.thread_locals.insert(k.thread_locals.end(), p.kernel.thread_locals.begin(), p.kernel.thread_locals.end());
    k.shared_bytes = std::max(k.shared_bytes, p.kernel.shared_bytes);
    k.body.push_back(part("ft_block >= " + ll(base) + " && ft_block < " + ll(k.grid), p.kernel.uniform, p.kernel.body));
    out.inputs.insert(out.inputs.end(), p.inputs.begin(), p.inputs.end());
    out.outputs.insert(out.outputs.end(), p.outputs.begin(), p.outputs.end());
  }
  k.params.insert(k.params.end(), outs.begin(), outs.end());  // inputs first, then outputs, as LoweredKernel binds
  return out;
}

}  // namespace fusetune::codegen
