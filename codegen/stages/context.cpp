#include "codegen/stages/context.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "codegen/index_expr.h"
#include "codegen/scalar_ops.h"
#include "codegen/stages/inline.h"
#include "core/error.h"
#include "core/ops.h"

namespace fusetune::codegen::stages {

using planner::Access;
using planner::Interval;
using planner::TensorExpr;

std::string lit(int64_t v) { return planner::index_literal(v); }

std::string product(const std::vector<std::string>& xs) {
  if (xs.empty()) return "1";
  std::string s = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) s = "(" + s + " * " + xs[i] + ")";
  return s;
}

std::string flat(const Shape& s, const std::vector<std::string>& idx) {
  std::string f = "0";
  for (size_t d = 0; d < s.size(); ++d) f = "(" + f + " * " + lit(s[d]) + " + " + idx[d] + ")";
  return f;
}

int64_t elems(const std::vector<Interval>& r) {
  int64_t n = 1;
  for (const Interval& i : r) n *= std::max<int64_t>(0, i.hi - i.lo + 1);
  return n;
}

std::string aligned16(DType t, const std::string& param, const std::string& at) {
  return t == DType::kF32 ? "ft_aligned16(" + param + ", " + at + ")" : "(" + at + " & " + lit(vector_lanes(t) - 1) + ") == 0";
}

Stmt copy_chunk(const std::string& buf, const std::string& dst, const std::string& param, const std::string& at,
                const std::string& valid, int64_t lanes) {
  Block elements;
  for (int64_t i = 0; i < lanes; ++i) {
    elements.push_back(store(buf, dst + " + " + lit(i), "(" + lit(i) + " < " + valid + " ? " + param + "[" + at + " + " + lit(i) + "] : 0)"));
  }
  const std::string aligned = aligned16(lanes == 4 ? DType::kF32 : DType::kF16, param, at);
  return if_then(valid + " == 0 || " + aligned,
                 {copy_async(buf, dst, param, "(" + valid + " == 0 ? 0 : " + at + ")", valid + " * " + lit(16 / lanes))}, elements);
}

LoweringContext::LoweringContext(const Graph& graph, const planner::FusionGroup& fusion_group,
                                 const planner::TileConfig& config, const LowerOptions& lower_options)
    : g(graph), group(fusion_group), cfg(config), options(lower_options) {
  for (int n : group.nodes) {
    members.insert(n);
    producer[g.nodes()[static_cast<size_t>(n)].outputs[0]] = n;
    exprs[n] = planner::describe(g, g.nodes()[static_cast<size_t>(n)]);
  }
  root = planner::group_root(g, group);
  // Consumers before producers (group.nodes is in graph order): a member feeds a jump if it jumps
  // or its result feeds one; then every operand the group computes does too.
  std::set<int> feeds_jump;
  for (auto it = group.nodes.rbegin(); it != group.nodes.rend(); ++it) {
    const Node& n = g.nodes()[static_cast<size_t>(*it)];
    const bool jumps = result_jumps(g, n) || std::any_of(n.outputs.begin(), n.outputs.end(), [&](int o) { return feeds_jump.count(o) > 0; });
    if (!jumps) continue;
    for (int u : n.inputs) {
      if (u == kNoValue || !producer.count(u)) continue;
      feeds_jump.insert(u);
      if (rounds_when_stored(g.value(u).dtype)) rounded.insert(u);
    }
  }
}

// ---- tiles and regions ----------------------------------------------------------------------

void LoweringContext::tile_setup(Kernel& k) {
  const Shape& rs = g.value(root).shape;
  // Blocks take the tiles in the candidate's order (planner::tile_order: the fastest-varying axis
  // first), each axis's tile index moving every strides_[d] tiles.
  ntiles_.assign(rs.size(), 1);
  tile_extent_.assign(rs.size(), 1);
  strides_.assign(rs.size(), 1);
  for (size_t d = 0; d < rs.size(); ++d) {
    tile_extent_[d] = std::clamp<int64_t>(cfg.tile[d], 1, std::max<int64_t>(rs[d], 1));
    ntiles_[d] = (std::max<int64_t>(rs[d], 1) + tile_extent_[d] - 1) / tile_extent_[d];
  }
  tiles_ = 1;
  for (size_t d : planner::tile_order(cfg, rs.size())) {
    strides_[d] = tiles_;
    tiles_ *= ntiles_[d];
  }
  // The block's tile: its index among the tiles, its split of the reduction (split-K).
  std::string tile = "ft_block - " + lit(options.block_base);
  if (splits() > 1) {
    k.uniform.push_back(let(kIndexType, "ft_split", "ft_fmod(" + tile + ", " + lit(splits()) + ")"));
    k.uniform.push_back(let(kIndexType, "ft_tile", "ft_fdiv(" + tile + ", " + lit(splits()) + ")"));
    tile = "ft_tile";
  }
  for (size_t d = rs.size(); d-- > 0;) {
    const int64_t t = tile_extent_[d];
    const std::string td = "ft_t" + std::to_string(d);
    k.uniform.push_back(let(kIndexType, td, "ft_fmod(ft_fdiv(" + tile + ", " + lit(strides_[d]) + "), " + lit(ntiles_[d]) + ")"));
    region[root].lo.insert(region[root].lo.begin(), "");
    region[root].hi.insert(region[root].hi.begin(), "");
    const std::string lo = var(root, "lo", d), hi = var(root, "hi", d);
    k.uniform.push_back(let(kIndexType, lo, td + " * " + lit(t)));
    k.uniform.push_back(let(kIndexType, hi, "ft_min(" + lo + " + " + lit(t) + ", " + lit(rs[d]) + ") - 1"));
    region[root].lo[0] = lo;
    region[root].hi[0] = hi;
  }
  k.grid = tiles_ * splits();
  emit_extents(k, root);
}

std::string LoweringContext::var(int v, const char* what, size_t d) const {
  return "r" + std::to_string(v) + "_" + what + std::to_string(d);
}

void LoweringContext::emit_extents(Kernel& k, int v) {
  Region& r = region[v];
  r.n.clear();
  for (size_t d = 0; d < r.lo.size(); ++d) {
    const std::string n = var(v, "n", d);
    k.uniform.push_back(let(kIndexType, n, "ft_max(0, " + r.hi[d] + " - " + r.lo[d] + " + 1)"));
    r.n.push_back(n);
  }
}

void LoweringContext::regions(Kernel& k) {
  // Per consumed value, the boxes its consumers' accesses read: each box's bounds, and whether it
  // reads anything (its consumer's region is not empty and no axis of the box is empty). A guarded
  // access (Concat, Pad, Slice) whose tile falls outside its input reads nothing, and its clipped
  // bounds must not widen the hull.
  struct Box {
    std::string live;
    std::vector<std::pair<std::string, std::string>> bounds;
  };
  std::map<int, std::vector<Box>> contrib;
  for (auto it = group.nodes.rbegin(); it != group.nodes.rend(); ++it) {
    const Node& n = g.nodes()[static_cast<size_t>(*it)];
    const int v = n.outputs[0];
    std::string live;  // v's region is not empty ("" for the root tile, which never is)
    if (v != root) {
      auto c = contrib.find(v);
      if (c == contrib.end()) continue;  // not needed by the root (cannot happen in a single-sink group)
      const Shape& s = g.value(v).shape;
      Region& r = region[v];
      std::vector<Box>& boxes = c->second;
      if (boxes.size() > 1) {  // named bounds, read twice below
        for (size_t b = 0; b < boxes.size(); ++b) {
          for (size_t d = 0; d < s.size(); ++d) {
            const std::string base = "r" + std::to_string(v) + "_b" + std::to_string(b) + "_";
            k.uniform.push_back(let(kIndexType, base + "lo" + std::to_string(d), boxes[b].bounds[d].first));
            k.uniform.push_back(let(kIndexType, base + "hi" + std::to_string(d), boxes[b].bounds[d].second));
            boxes[b].bounds[d] = {base + "lo" + std::to_string(d), base + "hi" + std::to_string(d)};
          }
        }
      }
      // A box reads nothing when its consumer's region is empty or, with several boxes, when one
      // of its axes is (a single box's empty axis empties the region by itself).
      for (Box& box : boxes) {
        std::string cond = box.live;
        for (size_t d = 0; boxes.size() > 1 && d < s.size(); ++d) {
          cond += (cond.empty() ? "" : " && ") + box.bounds[d].first + " <= " + box.bounds[d].second;
        }
        box.live = cond.empty() ? "" : "(" + cond + ")";
      }
      for (size_t d = 0; d < s.size(); ++d) {
        std::string lo, hi;
        for (const Box& box : boxes) {
          const bool always = box.live.empty();
          const std::string blo = boxes.size() > 1 && !always
                                      ? "(" + box.live + " ? " + box.bounds[d].first + " : " + lit(s[d]) + ")"
                                      : box.bounds[d].first;
          const std::string bhi = always ? box.bounds[d].second : "(" + box.live + " ? " + box.bounds[d].second + " : -1)";
          lo = lo.empty() ? blo : "ft_min(" + lo + ", " + blo + ")";
          hi = hi.empty() ? bhi : "ft_max(" + hi + ", " + bhi + ")";
        }
        r.lo.push_back(var(v, "lo", d));
        r.hi.push_back(var(v, "hi", d));
        k.uniform.push_back(let(kIndexType, r.lo.back(), lo));
        k.uniform.push_back(let(kIndexType, r.hi.back(), hi));
      }
      emit_extents(k, v);
    }
    const Region& out = region[v];
    const TensorExpr& e = exprs[*it];
    const size_t nout = e.out_shape.size();
    for (const Access& a : e.accesses) {
      const int u = n.inputs[static_cast<size_t>(a.input)];
      if (!members.count(producer_or(u))) continue;
      if (v != root && live.empty()) {
        live = "r" + std::to_string(v) + "_live";
        std::string all;
        for (const std::string& x : out.n) all += (all.empty() ? "" : " && ") + x + " > 0";
        k.uniform.push_back(let(kIndexType, live, all.empty() ? "1" : "(" + all + ")"));
      }
      const Shape& us = g.value(u).shape;
      Box box{live, {}};
      for (size_t d = 0; d < a.index.size(); ++d) {
        auto b = a.index[d].bounds_code(
            [&](int i) { return static_cast<size_t>(i) < nout ? out.lo[static_cast<size_t>(i)] : std::string("0"); },
            [&](int i) {
              return static_cast<size_t>(i) < nout ? out.hi[static_cast<size_t>(i)]
                                                   : lit(e.reduce_extents[static_cast<size_t>(i) - nout] - 1);
            });
        box.bounds.push_back({"ft_max(0, " + b.first + ")", "ft_min(" + lit(us[d] - 1) + ", " + b.second + ")"});
      }
      contrib[u].push_back(std::move(box));
    }
  }
}

int LoweringContext::producer_or(int v) const {
  auto it = producer.find(v);
  return it == producer.end() ? -1 : it->second;
}

std::map<int, std::vector<Interval>> LoweringContext::numeric_regions(int64_t tile_index) const {
  std::map<int, std::vector<Interval>> r;
  const Shape& rs = g.value(root).shape;
  std::vector<Interval> root_tile(rs.size());
  for (size_t d = rs.size(); d-- > 0;) {
    const int64_t t = ((tile_index / strides_[d]) % ntiles_[d]);
    root_tile[d] = {t * tile_extent_[d], std::min(t * tile_extent_[d] + tile_extent_[d], rs[d]) - 1};
  }
  r[root] = root_tile;
  // As regions() computes them: boxes that read nothing do not widen the hull.
  std::map<int, std::vector<std::pair<bool, std::vector<Interval>>>> contrib;  // (consumer live, box)
  for (auto it = group.nodes.rbegin(); it != group.nodes.rend(); ++it) {
    const Node& n = g.nodes()[static_cast<size_t>(*it)];
    const int v = n.outputs[0];
    if (v != root) {
      auto c = contrib.find(v);
      if (c == contrib.end()) continue;
      const Shape& s = g.value(v).shape;
      const auto& boxes = c->second;
      std::vector<Interval> hull(s.size());
      for (size_t d = 0; d < s.size(); ++d) hull[d] = {boxes.size() > 1 ? s[d] : boxes[0].second[d].lo, -1};
      for (const auto& [consumer_live, box] : boxes) {
        const auto empty = [](const Interval& i) { return i.lo > i.hi; };
        if (!consumer_live || (boxes.size() > 1 && std::any_of(box.begin(), box.end(), empty))) continue;
        for (size_t d = 0; d < box.size(); ++d) {
          hull[d] = boxes.size() > 1 ? Interval{std::min(hull[d].lo, box[d].lo), std::max(hull[d].hi, box[d].hi)} : box[d];
        }
      }
      r[v] = hull;
    }
    const TensorExpr& e = exprs.at(*it);
    std::vector<Interval> vars = r[v];
    const bool live = std::none_of(vars.begin(), vars.end(), [](const Interval& i) { return i.lo > i.hi; });
    for (int64_t x : e.reduce_extents) vars.push_back({0, x - 1});
    for (const Access& a : e.accesses) {
      const int u = n.inputs[static_cast<size_t>(a.input)];
      if (!members.count(producer_or(u))) continue;
      const Shape& us = g.value(u).shape;
      std::vector<Interval> box;
      for (size_t d = 0; d < a.index.size(); ++d) {
        const Interval b = a.index[d].bounds(vars);
        box.push_back({std::max<int64_t>(0, b.lo), std::min<int64_t>(us[d] - 1, b.hi)});
      }
      contrib[u].push_back({live, box});
    }
  }
  return r;
}

// The stages also clamp their loops to the allocation, so a region the sample missed cannot write
// past it (verification would report the elements left unwritten).
std::vector<int64_t> LoweringContext::sample_tiles() const {
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
  const std::vector<int64_t>& strides = strides_;
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

// ---- expressions ----------------------------------------------------------------------------

std::string LoweringContext::value(int v, const std::vector<std::string>& idx) {
  std::string key = std::to_string(v);
  for (const auto& i : idx) key += "|" + i;
  if (auto it = memo_->find(key); it != memo_->end()) return it->second;
  const Value& val = g.value(v);
  std::string expr;
  bool recording = false;  // a group input's load, recorded for along_reads
  if (auto o = provided.find(v); o != provided.end()) {
    expr = o->second(idx);
  } else if (auto p = param.find(v); p != param.end() || !producer.count(v)) {
    if (val.is_constant() && param.find(v) == param.end()) fail("constant '", val.name, "' is not a group input");
    expr = load_as_compute(val.dtype, param.at(v) + "[" + flat(val.shape, idx) + "]");
    recording = recording_ != nullptr;
  } else if (auto b = buffer.find(v); b != buffer.end()) {
    const std::string element = b->second + "[" + buffer_offset(v, idx) + "]";
    expr = resident_pitch.count(v) ? load_as_compute(val.dtype, element) : element;
  } else {
    expr = inline_node(*this, g.nodes()[static_cast<size_t>(producer.at(v))], idx);
  }
  if (rounded.count(v)) expr = as_stored(val.dtype, expr);
  const std::string name = "v" + std::to_string(next_local_++);
  cur_->push_back(let(compute_ctype(val.dtype), name, expr));
  (*memo_)[key] = name;
  if (recording && with_depth_ >= record_depth_) recording_->push_back({v, idx, name, with_depth_ > record_depth_, ""});
  return name;
}

std::vector<std::string> LoweringContext::index_of(const Access& a, const std::vector<std::string>& vars) const {
  std::vector<std::string> out;
  for (const planner::IndexExpr& ix : a.index) out.push_back(ix.code([&](int i) { return vars[static_cast<size_t>(i)]; }));
  return out;
}

std::string LoweringContext::in_range(const Shape& s, const std::vector<std::string>& idx) const {
  std::string c;
  for (size_t d = 0; d < idx.size(); ++d) {
    c += (c.empty() ? "" : " && ") + std::string("(") + idx[d] + ") >= 0 && (" + idx[d] + ") < " + lit(s[d]);
  }
  return c.empty() ? "1" : c;
}

std::string LoweringContext::guarded(int v, const std::vector<std::string>& idx, const std::string& fill) {
  const std::string name = "v" + std::to_string(next_local_++);
  cur_->push_back(let(compute_ctype(g.value(v).dtype), name, fill));
  Block inside;
  with_block(inside, [&] { cur_->push_back(assign(name, value(v, idx))); });
  cur_->push_back(if_then(in_range(g.value(v).shape, idx), inside));
  return name;
}

Block LoweringContext::fresh_block(const std::function<void()>& f) {
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

void LoweringContext::with_block(Block& b, const std::function<void()>& f) {
  Block* saved = cur_;
  auto saved_memo = memo_;
  std::map<std::string, std::string> local = *memo_;  // outer locals stay visible inside
  cur_ = &b;
  memo_ = &local;
  ++with_depth_;
  f();
  --with_depth_;
  cur_ = saved;
  memo_ = saved_memo;
}

// ---- loops and stores -----------------------------------------------------------------------

void LoweringContext::dims_loop(Kernel& k, int v, const std::vector<size_t>& dims, int64_t cap, const IndexFn& body) {
  const Region& r = region.at(v);
  std::vector<std::string> extents;
  Block loop = fresh_block([&] {
    std::vector<std::string> o(r.n.size(), "0");
    std::string inner = "1";
    for (size_t j = dims.size(); j-- > 0;) {
      const size_t d = dims[j];
      o[d] = "ft_o" + std::to_string(d);
      const std::string q = "(ft_e / " + inner + ") % " + r.n[d];
      cur_->insert(cur_->begin(), let(kIndexType, o[d], r.lo[d] + " + " + q));
      inner = "(" + inner + " * " + r.n[d] + ")";
      extents.insert(extents.begin(), r.n[d]);
    }
    body(o);
  });
  std::string count = product(extents);
  if (cap > 0) count = "ft_min(" + count + ", " + lit(cap) + ")";
  k.body.push_back(thread_for("ft_e", "0", count, loop));
}

std::set<int> LoweringContext::produced() const {
  std::set<int> out;
  for (const auto& [v, node] : producer) out.insert(v);
  return out;
}

int LoweringContext::buffer_of(int v) const {
  for (auto it = producer.find(v); it != producer.end(); it = producer.find(v)) {
    const Node& n = g.nodes()[static_cast<size_t>(it->second)];
    if (n.op != "Reshape" || !n.guards.empty()) return -1;
    v = n.inputs[0];
  }
  return param.count(v) ? v : -1;
}

std::set<int> LoweringContext::computed() const { return planner::computed_elements(g, group, produced()); }

void emit_ring(LoweringContext& cx, Kernel& k, const planner::MmaStaging& ring, int64_t local_steps, const std::string& k0,
               const RingSlices& slices, const std::function<Stmt(const std::string& gks, const std::string& slot)>& compute,
               const RingAhead& ahead_of_stages) {
  const auto global = [&](const std::string& local) { return cx.splits() == 1 ? local : "(" + k0 + " + " + local + ")"; };
  const int64_t ahead = std::min<int64_t>(ring.ahead, local_steps);
  emit_prologue(k, ahead, global, slices, ring.async_b ? ahead_of_stages : RingAhead{});
  Block body = {copy_async_wait(static_cast<int>(ahead - 1)), barrier()};
  const std::string next = "(ft_ks + " + lit(ring.ahead) + ")";
  if (local_steps > ahead) body.push_back(if_then(next + " < " + lit(local_steps), slices(global(next), next + " % " + lit(ring.stages))));
  body.push_back(copy_async_commit());  // possibly empty: one group a step keeps the count
  body.push_back(compute(global("ft_ks"), "(ft_ks % " + lit(ring.stages) + ")"));
  k.body.push_back(uniform_for("ft_ks", "0", lit(local_steps), body));
}

void emit_prologue(Kernel& k, int64_t ahead, const std::function<std::string(const std::string&)>& global, const RingSlices& slices,
                   const RingAhead& early) {
  const auto prologue = [&](Block& into, const RingSlices& staged) {
    Block step = staged(global("ft_ks"), "ft_ks");
    step.push_back(copy_async_commit());
    into.push_back(uniform_for("ft_ks", "0", lit(ahead), step));
  };
  if (early.early == nullptr) {
    prologue(k.body, slices);
    return;
  }
  prologue(*early.early, early.b_slices);
  if (early.a_slices) prologue(k.body, early.a_slices);
}

Stmt copy_slice(LoweringContext& cx, const CopiedSlice& s) {
  Block loop = cx.fresh_block([&] {
    Block& b = cx.cur();
    b.push_back(let(kIndexType, "ft_r", s.row));
    b.push_back(let(kIndexType, "ft_c", s.col));
    b.push_back(let(kIndexType, "ft_k", s.ks + " * " + lit(s.step) + " + " + (s.is_a ? "ft_c" : "ft_r")));
    b.push_back(let(kIndexType, "ft_at", flat(s.shape, s.index("ft_r", "ft_c"))));
    b.push_back(let(kIndexType, "ft_v", s.is_a ? "(ft_r < " + s.nm + " && ft_k < " + lit(s.k) + " ? " + lit(s.lanes) + " : 0)"
                                               : "(ft_k < " + lit(s.k) + " ? ft_max(0, ft_min(" + lit(s.lanes) + ", " + s.nn +
                                                     " - ft_c)) : 0)"));
    b.push_back(let(kIndexType, "ft_s", s.at));
    b.push_back(copy_chunk(s.buf, "ft_s", s.param, "ft_at", "ft_v", s.lanes));
  });
  return thread_for("ft_e", "0", lit(s.count), loop);
}

Stmt LoweringContext::staging_loop(Kernel& k, const std::string& buf, const std::string& count, int64_t cap,
                                   const std::function<void()>& element, const std::string& base, int64_t row,
                                   int64_t pitch) {
  const std::string clamped = count == lit(cap) ? count : "ft_min(" + count + ", " + lit(cap) + ")";
  const std::string e = row > 0 && pitch != row ? "(ft_e / " + lit(row) + " * " + lit(pitch) + " + ft_e % " + lit(row) + ")" : "ft_e";
  const std::string at = base.empty() ? e : base + " + " + e;
  const int64_t batch = planner::staging_batch(cap, cfg.threads);
  if (batch == 1) {
    return thread_for("ft_e", "0", clamped, fresh_block([&] {
                        element();
                        cur_->push_back(store(buf, at, "ft_x"));
                      }));
  }
  // Each element computed into ft_sx[ft_si], then stored.
  return batched_loop(
      k, clamped, batch, "ft_sx", planner::kStagingLoads,
      [&] {
        cur_->push_back(assign("ft_sx[ft_si]", "0.0f"));
        Block one;
        with_block(one, [&] {
          element();
          cur_->push_back(assign("ft_sx[ft_si]", "ft_x"));
        });
        cur_->push_back(if_then("ft_e < ft_sn", one));
      },
      [&] { cur_->push_back(if_then("ft_e < ft_sn", {store(buf, at, "ft_sx[ft_si]")})); });
}

Stmt LoweringContext::batched_loop(Kernel& k, const std::string& count, int64_t batch, const std::string& local,
                                   int64_t size, const std::function<void()>& load, const std::function<void()>& put) {
  k.declare_local(local, size);
  const int64_t span = batch * cfg.threads;
  const std::string e = "ft_sb * " + lit(span) + " + ft_si * " + lit(cfg.threads) + " + ft_thread";
  const auto body = [&](const std::function<void()>& f) {
    return fresh_block([&] {
      cur_->push_back(let(kIndexType, "ft_e", e));
      f();
    });
  };
  const std::string batches = "(ft_sn + " + lit(span - 1) + ") / " + lit(span);
  return if_then("1", {let(kIndexType, "ft_sn", count),
                       serial_for("ft_sb", "0", batches,
                                  {serial_for("ft_si", "0", lit(batch), body(load), static_cast<int>(batch)),
                                   serial_for("ft_si", "0", lit(batch), body(put), static_cast<int>(batch))})});
}

void LoweringContext::region_loop(Kernel& k, int v, const IndexFn& body, bool vectorize) {
  std::vector<size_t> all(region.at(v).n.size());
  for (size_t d = 0; d < all.size(); ++d) all[d] = d;
  const int64_t cap = buffer.count(v) ? std::max<int64_t>(1, capacity[v]) : 0;
  if (vectorize && vector_loop(k, v, cap, body)) return;
  dims_loop(k, v, all, cap, body);
}

namespace {

// The names the statements of b (and their nested blocks) declare.
void declared(const Block& b, std::set<std::string>& out) {
  for (const Stmt& s : b) {
    if (s.kind == Stmt::Kind::kLet || s.kind == Stmt::Kind::kVectorLoad || s.kind == Stmt::Kind::kFor ||
        s.kind == Stmt::Kind::kUniformFor) {
      out.insert(s.name);
    }
    declared(s.body, out);
    declared(s.orelse, out);
    declared(s.uniform, out);
  }
}

// Whether an index expression names any of `names`.
bool names_any(const std::string& text, const std::set<std::string>& names) {
  for (const std::string& id : expression_names(text)) {
    if (names.count(id)) return true;
  }
  return false;
}

}  // namespace

std::vector<LoweringContext::Recorded> LoweringContext::record_loads(const std::vector<std::string>& o, const IndexFn& body,
                                                                     std::set<std::string>& declared_names) {
  std::vector<Recorded> found;
  Block aside;
  recording_ = &found;
  record_depth_ = with_depth_ + 1;
  with_block(aside, [&] { body(o); });
  recording_ = nullptr;
  declared_names.clear();
  declared(aside, declared_names);
  // Each conditional load's conditions, from the statements around its let.
  std::map<std::string, std::string> guards;
  const std::function<void(const Block&, const std::string&)> walk = [&](const Block& b, const std::string& cond) {
    for (const Stmt& st : b) {
      if (st.kind == Stmt::Kind::kLet) guards[st.name] = cond;
      if (st.kind == Stmt::Kind::kIf) {
        const std::string both = cond.empty() ? "" : cond + " && ";
        walk(st.body, both + "(" + st.a + ")");
        walk(st.orelse, both + "!(" + st.a + ")");
      } else {
        walk(st.body, "\x01");  // inside anything else (a loop): not a condition along_reads takes
        walk(st.orelse, "\x01");
      }
    }
  };
  walk(aside, "");
  for (Recorded& r : found) {
    const auto it = guards.find(r.local);
    r.guard = it == guards.end() ? "\x01" : it->second;  // a let left out of the body's text: not taken
  }
  return found;
}

std::string replace_name(const std::string& text, const std::string& name, const std::string& by) {
  const auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (!ident(text[i])) {
      out += text[i++];
      continue;
    }
    size_t j = i;
    while (j < text.size() && ident(text[j])) ++j;
    const std::string word = text.substr(i, j - i);
    out += word == name ? by : word;
    i = j;
  }
  return out;
}

namespace {

// `text` as one operand: itself where its outer parentheses enclose it whole or it is one name.
std::string operand(const std::string& text) {
  bool whole = !text.empty() && text.front() == '(' && text.back() == ')';
  int depth = 0;
  for (size_t i = 0; whole && i < text.size(); ++i) {
    depth += text[i] == '(' ? 1 : text[i] == ')' ? -1 : 0;
    whole = depth > 0 || i + 1 == text.size();
  }
  const bool name = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
  return whole || name ? text : "(" + text + ")";
}

}  // namespace

std::vector<LoweringContext::VectorRead> LoweringContext::along_reads(const std::vector<std::string>& o, int64_t run,
                                                                      const std::function<std::string(int64_t)>& lane,
                                                                      const IndexFn& body) {
  // No 16-byte vector (4 floats, 8 16-bit values) divides the run: nothing to find, and the body
  // is not emitted aside (a tensor-core epilogue's pair runs, one per fragment row).
  if (run % vector_lanes(DType::kF32) != 0) return {};
  // The group inputs read at the same index by every element of the run (a token id that picks an
  // embedding row), loaded once here for all of them, so that the reads they index (the
  // embedding row itself) become visible. An index that names what the body declares (its
  // locals, a coordinate it computes) or the run's coordinate cannot be read before the body.
  std::set<std::string> body_names;
  const std::vector<Recorded> first = record_loads(o, body, body_names);
  body_names.insert(o.back());
  for (const Recorded& r : first) {
    if (!r.conditional && std::none_of(r.idx.begin(), r.idx.end(), [&](const std::string& i) { return names_any(i, body_names); })) {
      value(r.u, r.idx);
    }
  }
  // The body with a placeholder for lane 0's innermost coordinate, for the analysis, and at every
  // lane, for the keys: a load is read along the run where its k-th load at every lane is the
  // placeholder's with lane(t) in its place (the body's text composes its coordinates).
  const std::string p = "ft_lane_p";
  std::vector<std::string> op = o;
  op.back() = p;
  const std::vector<Recorded> placed = record_loads(op, body, body_names);
  std::vector<std::vector<Recorded>> lanes;
  for (int64_t t = 0; t < run; ++t) {
    std::vector<std::string> ot = o;
    ot.back() = lane(t);
    std::set<std::string> ignored;
    lanes.push_back(record_loads(ot, body, ignored));
    if (lanes.back().size() != placed.size()) return {};
  }
  const auto at_lane = [&](const std::string& text, int64_t t) { return replace_name(text, p, operand(lane(t))); };
  int aligned_bits = 0;
  for (int64_t r = run; r % 2 == 0; r /= 2) ++aligned_bits;
  const auto resolve = [&](const std::string& name) {
    return name == p ? IndexExpr::Binding{IndexExpr::Binding::Kind::kSlot, 0} : IndexExpr::Binding{};
  };
  // Whether `text`, read with the placeholder as lane 0's coordinate, moves by t from lane 0 to lane
  // t (`along`; else stays the same), the placeholder a multiple of the run where `aligned`; an
  // expression the analysis cannot read does neither.
  const auto moves = [&](const std::string& text, bool aligned, bool along) -> bool {
    try {
      const IndexExpr e = IndexExpr::parse(text, resolve);
      for (int64_t t = 1; t < run; ++t) {
        const Shift s = e.shift({Shift::of(t)}, {std::nullopt}, [](int, Shift) {},
                                aligned ? std::vector<int>{aligned_bits} : std::vector<int>{});
        if (!(along ? s == Shift::of(t) : s == Shift::same())) return false;
      }
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  std::vector<VectorRead> reads;
  const std::string base = "(" + lane(0) + " & " + lit(run - 1) + ") == 0";
  for (size_t k = 0; k < placed.size(); ++k) {
    const Recorded& r = placed[k];
    const DType ut = g.value(r.u).dtype;
    if (!(ut == DType::kF32 || ut == DType::kF16 || ut == DType::kBF16) || run % vector_lanes(ut) != 0) continue;
    if (r.guard.find('\x01') != std::string::npos || names_any(r.guard, body_names)) continue;
    if (std::any_of(r.idx.begin(), r.idx.end(), [&](const std::string& i) { return names_any(i, body_names); })) continue;
    VectorRead x{r.u, "", "", "", {}};
    bool same = true;
    for (int64_t t = 0; same && t < run; ++t) {
      const Recorded& l = lanes[static_cast<size_t>(t)][k];
      same = l.u == r.u && l.conditional == r.conditional && l.idx.size() == r.idx.size();
      std::string key = std::to_string(r.u);
      for (size_t d = 0; same && d < r.idx.size(); ++d) {
        same = l.idx[d] == at_lane(r.idx[d], t);
        key += "|" + l.idx[d];
      }
      same = same && l.guard == at_lane(r.guard, t);
      if (t == 0) x.guard = l.guard;
      x.keys.push_back(key);
    }
    if (!same) continue;
    const std::string flat_p = flat(g.value(r.u).shape, r.idx);
    bool needs_base = false;
    if (!moves(flat_p, false, true)) {
      if (!moves(flat_p, true, true)) continue;
      needs_base = true;
    }
    if (!r.guard.empty() && !moves(r.guard, false, false)) {
      if (!moves(r.guard, true, false)) continue;
      needs_base = true;
    }
    if (needs_base) x.base = base;
    x.at = flat(g.value(r.u).shape, lanes[0][k].idx);  // lane 0's flat index, a local below
    reads.push_back(x);
  }
  // One read a key: an unconditional one where there is one, else one under a single guard; keys
  // read under different guards stay element by element (a zero-filled vector must not stand in
  // for a read whose own guard holds).
  std::vector<VectorRead> kept;
  for (size_t i = 0; i < reads.size(); ++i) {
    const VectorRead& x = reads[i];
    bool keep = true;
    for (size_t j = 0; j < reads.size() && keep; ++j) {
      const VectorRead& y = reads[j];
      if (j == i || y.keys[0] != x.keys[0]) continue;
      if (x.guard.empty()) {
        keep = !(y.guard.empty() && j < i);  // the first unconditional one
      } else {
        keep = !y.guard.empty() && y.guard == x.guard && j > i;  // the first of one guard's
      }
    }
    if (!keep) continue;
    kept.push_back(x);
    const std::string at = "ft_a" + std::to_string(next_local_++);
    cur_->push_back(let(kIndexType, at, x.at));
    kept.back().at = at;
  }
  return kept;
}

std::string LoweringContext::reads_aligned(const std::vector<VectorRead>& reads) const {
  std::vector<std::string> all;
  for (const VectorRead& x : reads) {
    const std::string aligned = aligned16(g.value(x.u).dtype, param.at(x.u), x.at);
    all.push_back(x.guard.empty() ? "(" + aligned + ")" : "(!(" + x.guard + ") || " + aligned + ")");
    if (!x.base.empty()) all.push_back("(" + x.base + ")");
  }
  std::string text;
  for (size_t i = 0; i < all.size(); ++i) {
    if (std::find(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(i), all[i]) == all.begin() + static_cast<std::ptrdiff_t>(i)) {
      text += (text.empty() ? "" : " && ") + all[i];
    }
  }
  return text.empty() ? "1" : text;
}

void LoweringContext::load_runs(const std::vector<VectorRead>& reads, int64_t run, const std::string& guard) {
  for (const VectorRead& x : reads) {
    const DType ut = g.value(x.u).dtype;
    const int lanes = vector_lanes(ut);
    std::string when = guard;
    if (!x.guard.empty()) when = guard.empty() ? x.guard : "(" + guard + ") && (" + x.guard + ")";
    for (int64_t first = 0; first < run; first += lanes) {
      const std::string local = "ft_x" + std::to_string(next_local_++);
      cur_->push_back(vector_load(local, param.at(x.u), x.at + (first ? " + " + lit(first) : ""), ut, when));
      for (int j = 0; j < lanes; ++j) {
        const std::string name = "v" + std::to_string(next_local_++);
        cur_->push_back(let(compute_ctype(ut), name, load_as_compute(ut, vector_element(local, ut, j))));
        (*memo_)[x.keys[static_cast<size_t>(first + j)]] = name;
      }
    }
  }
}

void LoweringContext::with_runs(const std::vector<VectorRead>& reads, int64_t run, const std::function<void()>& compute) {
  if (reads.empty()) {
    compute();
    return;
  }
  Block vectors, elements;
  with_block(vectors, [&] {
    load_runs(reads, run);
    compute();
  });
  with_block(elements, compute);
  cur_->push_back(if_then(reads_aligned(reads), vectors, elements));
}

bool LoweringContext::vector_loop(Kernel& k, int v, int64_t cap, const IndexFn& body) {
  const Value& val = g.value(v);
  const DType dt = val.dtype;
  if (!out_param.count(v) || val.shape.empty() || (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16)) return false;
  const int lanes = vector_lanes(dt);
  const Region& r = region.at(v);
  const size_t inner = r.n.size() - 1;
  // Rows of whole vectors, and a first tile with at least one whole vector along the axis.
  if (val.shape.back() % lanes != 0) return false;
  const std::map<int, std::vector<planner::Interval>> first = numeric_regions(0);
  if (const auto it = first.find(v); it == first.end() || it->second.empty() || it->second.back().size() < lanes) return false;
  const std::string n_inner = r.n[inner], q = "ft_o" + std::to_string(inner);
  const std::string vectors = "((" + n_inner + " + " + lit(lanes - 1) + ") / " + lit(lanes) + ")";
  const auto lane_index = [&](int64_t j) { return "(" + q + " + " + lit(j) + ")"; };
  std::vector<std::string> extents;
  Block loop = fresh_block([&] {
    std::vector<std::string> o(r.n.size());
    std::string stride = vectors;
    for (size_t d = inner; d-- > 0;) {
      o[d] = "ft_o" + std::to_string(d);
      cur_->push_back(let(kIndexType, o[d], r.lo[d] + " + (ft_e / " + stride + ") % " + r.n[d]));
      stride = "(" + stride + " * " + r.n[d] + ")";
      extents.push_back(r.n[d]);
    }
    cur_->push_back(let(kIndexType, "ft_q", "(ft_e % " + vectors + ") * " + lit(lanes)));
    cur_->push_back(let(kIndexType, q, r.lo[inner] + " + ft_q"));
    o[inner] = q;
    // Where the vector's elements lie in the region's row-major order (the buffer's clamp).
    if (cap > 0) cur_->push_back(let(kIndexType, "ft_f", "(ft_e / " + vectors + ") * " + n_inner + " + ft_q"));
    const std::vector<VectorRead> reads = along_reads(o, lanes, lane_index, body);
    cur_->push_back(let(kIndexType, "ft_ao", flat(val.shape, o)));
    const std::string mask = lit(lanes - 1);
    std::string whole = "ft_q + " + lit(lanes) + " <= " + n_inner + " && (ft_ao & " + mask + ") == 0";
    if (cap > 0) whole += " && ft_f + " + lit(lanes) + " <= " + lit(cap);
    if (!reads.empty()) whole += " && " + reads_aligned(reads);
    Block vector;
    with_block(vector, [&] {
      load_runs(reads, lanes);
      const std::string stored = dt == DType::kF32 ? "float" : "unsigned short";
      std::string pack;
      for (int j = 0; j < lanes; ++j) {
        const std::string y = "ft_y" + std::to_string(j);
        cur_->push_back(let(stored, y, dt == DType::kF32 ? "0.0f" : "0"));
        pack += (j ? ", " : "") + y;
      }
      for (int j = 0; j < lanes; ++j) {
        std::vector<std::string> oj = o;
        oj[inner] = lane_index(j);
        Block scope;
        vector_value_ = v;
        vector_lane_ = "ft_y" + std::to_string(j);
        with_block(scope, [&] { body(oj); });
        vector_value_ = -1;
        cur_->push_back(if_then("1", scope));  // a scope of its own: bodies may name their locals
      }
      cur_->push_back(let(vector_ctype(dt), "ft_w", "ft_pack_" + vector_ctype(dt) + "(" + pack + ")"));
      cur_->push_back(vector_store(out_param.at(v), "ft_ao", "ft_w", dt));
    });
    Block element_wise;
    {
      std::vector<std::string> oj = o;
      oj[inner] = "(" + q + " + ft_j)";
      Block one;
      with_block(one, [&] { body(oj); });
      std::string inside = "ft_q + ft_j < " + n_inner;
      if (cap > 0) inside += " && ft_f + ft_j < " + lit(cap);
      element_wise.push_back(serial_for("ft_j", "0", lit(lanes), {if_then(inside, one)}));
    }
    cur_->push_back(if_then(whole, vector, element_wise));
  });
  std::reverse(extents.begin(), extents.end());
  extents.push_back(vectors);
  std::string count = product(extents);
  if (cap > 0) count = "ft_min(" + count + ", " + lit(cap) + ")";
  k.body.push_back(thread_for("ft_e", "0", count, loop));
  return true;
}

std::vector<std::string> LoweringContext::reduction_vars_at(const TensorExpr& e, const std::vector<std::string>& o,
                                                            const std::string& flat) {
  std::vector<std::string> vars = o;
  int64_t stride = 1;
  for (int64_t ext : e.reduce_extents) stride *= ext;
  for (size_t q = 0; q < e.reduce_extents.size(); ++q) {
    stride /= e.reduce_extents[q];
    const std::string rv = "ft_r" + std::to_string(q);
    cur_->push_back(let(kIndexType, rv, "(" + flat + " / " + lit(stride) + ") % " + lit(e.reduce_extents[q])));
    vars.push_back(rv);
  }
  return vars;
}

void LoweringContext::reduction_loops(const TensorExpr& e, const std::vector<std::string>& o, const IndexFn& body) {
  std::vector<std::string> vars = o;
  // The unrolled bodies of the nest stay near kReductionUnroll, from the innermost loop out: a
  // short loop unrolls whole while the bodies stay within twice that (a 3x3 window: 9); one of
  // at least two rounds of what the loops inside leave unrolls by that; one shorter by the
  // largest divisor of its trip count that fits, since unrolling a few trips partially leaves a
  // remainder loop (2 of a 3-trip loop: ptxas spilled that nest on sm_90 at 32 registers).
  std::vector<int> unroll(e.reduce_extents.size(), 1);
  int64_t inside = 1;
  for (size_t r = e.reduce_extents.size(); r-- > 0;) {
    const int64_t trips = std::max<int64_t>(1, e.reduce_extents[r]), left = kReductionUnroll / inside;
    int64_t u = 1;
    if (inside * trips <= 2 * kReductionUnroll) {
      u = trips;
    } else if (trips >= 2 * left) {
      u = std::max<int64_t>(1, left);
    } else {
      for (int64_t d = std::max<int64_t>(1, left); d >= 1; --d) {
        if (trips % d == 0) {
          u = d;
          break;
        }
      }
    }
    unroll[r] = static_cast<int>(u);
    inside *= u;
  }
  std::function<void(size_t)> nest = [&](size_t r) {
    if (r == e.reduce_extents.size()) {
      body(vars);
      return;
    }
    const std::string rv = "ft_r" + std::to_string(r);
    vars.push_back(rv);
    Block inner;
    with_block(inner, [&] { nest(r + 1); });
    cur_->push_back(serial_for(rv, "0", lit(e.reduce_extents[r]), inner, unroll[r]));
    vars.pop_back();
  };
  nest(0);
}

void LoweringContext::store_shared(int v, const std::vector<std::string>& o, const std::string& x) {
  if (auto b = buffer.find(v); b != buffer.end()) {
    cur_->push_back(store(b->second, buffer_offset(v, o), resident_pitch.count(v) ? store_from_compute(g.value(v).dtype, x) : x));
  }
}

std::string LoweringContext::buffer_offset(int v, const std::vector<std::string>& idx) const {
  const Region& r = region.at(v);
  const auto pitch = resident_pitch.find(v);
  std::string off = "0";
  for (size_t d = 0; d < idx.size(); ++d) {
    const std::string extent = d + 1 == idx.size() && pitch != resident_pitch.end() ? lit(pitch->second) : r.n[d];
    off = "(" + off + " * " + extent + " + (" + idx[d] + " - " + r.lo[d] + "))";
  }
  return off;
}

void LoweringContext::store_value(int v, const std::vector<std::string>& o, const std::string& x) {
  store_shared(v, o, x);
  if (auto p = out_param.find(v); p != out_param.end()) {
    if (v == vector_value_) {  // vector_loop writes the vector
      cur_->push_back(assign(vector_lane_, store_from_compute(g.value(v).dtype, x)));
    } else {
      cur_->push_back(store(p->second, flat(g.value(v).shape, o), store_from_compute(g.value(v).dtype, x)));
    }
  }
}

void LoweringContext::store_run(int v, const std::vector<std::string>& o, const std::vector<std::string>& xs) {
  check(out_param.count(v) > 0, "store_run: value ", v, " is not exported");
  store_run_at(out_param.at(v), flat(g.value(v).shape, o), g.value(v).dtype, xs);
}

void LoweringContext::store_shared_run(int v, const std::vector<std::string>& o, const std::vector<std::string>& xs) {
  check(buffer.count(v) > 0 && resident_pitch.count(v) > 0, "store_shared_run: value ", v, " has no buffer in its own type");
  store_run_at(buffer.at(v), buffer_offset(v, o), g.value(v).dtype, xs);
}

void LoweringContext::store_run_at(const std::string& p, const std::string& start, DType dt, const std::vector<std::string>& xs) {
  const std::string at = "ft_at" + std::to_string(next_local_++);
  cur_->push_back(let(kIndexType, at, start));
  std::vector<std::string> ys;
  for (const std::string& x : xs) ys.push_back(store_from_compute(dt, x));
  const bool vectors = dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16;
  // Elements [first, first + n) of the run: one access where n has a vector type, the offset is
  // aligned to it, else the two halves.
  std::function<Block(size_t, size_t)> run = [&](size_t first, size_t n) -> Block {
    const std::string here = at + (first ? " + " + lit(static_cast<int64_t>(first)) : "");
    if (n == 1) return {store(p, here, ys[first])};
    Block halves = run(first, n / 2), second = run(first + n / 2, n - n / 2);
    halves.insert(halves.end(), second.begin(), second.end());
    const int lanes = static_cast<int>(n);
    if (!vectors || n % 2 != 0 || (lanes != 2 && lanes != vector_lanes(dt))) return halves;
    std::string pack;
    for (size_t j = 0; j < n; ++j) pack += (j ? ", " : "") + ys[first + j];
    const std::string local = "ft_w" + std::to_string(next_local_++), ctype = vector_ctype(dt, lanes);
    return {if_then("(" + here + " & " + lit(lanes - 1) + ") == 0",
                    {let(ctype, local, "ft_pack_" + ctype + "(" + pack + ")"), vector_store(p, here, local, dt, lanes)}, halves)};
  };
  const Block b = run(0, ys.size());
  cur_->insert(cur_->end(), b.begin(), b.end());
}

}  // namespace fusetune::codegen::stages
