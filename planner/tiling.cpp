#include "planner/tiling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/integer.h"
#include "core/model_stats.h"
#include "core/ops.h"
#include "planner/attention.h"
#include "planner/epilogue.h"
#include "planner/held_rows.h"
#include "planner/library_call.h"
#include "planner/library_match.h"
#include "planner/tensor_expr.h"

namespace fusetune::planner {

namespace {

using Region = std::vector<Interval>;

// Bytes a region of a row-major value of `shape` occupies when read in 32-byte sectors: its
// contiguous runs are the innermost axis and every axis outside it while the axes inside are
// whole (a [8, 160, 1, 1] slice of a 1x1 convolution's weights is one run of 1,280 elements,
// not 1,280 runs of one).
int64_t sector_bytes(const Region& r, const std::vector<int64_t>& shape, DType dt, int sector) {
  if (r.empty()) return static_cast<int64_t>(dtype_size(dt));
  size_t d = r.size() - 1;
  int64_t run = r[d].size();
  while (d > 0 && shape.size() == r.size() && r[d].size() == shape[d]) run *= r[--d].size();
  int64_t rows = 1;
  for (size_t o = 0; o < d; ++o) rows *= r[o].size();
  return rows * ceil_div(run * static_cast<int64_t>(dtype_size(dt)), sector) * sector;
}

int64_t region_elems(const Region& r) {
  int64_t n = 1;
  for (const Interval& i : r) n *= i.size();
  return n;
}

void hull_into(Region& into, const Region& r) {
  if (into.empty()) {
    into = r;
    return;
  }
  for (size_t d = 0; d < r.size(); ++d) {
    if (r[d].empty()) continue;
    into[d] = into[d].empty() ? r[d] : Interval{std::min(into[d].lo, r[d].lo), std::max(into[d].hi, r[d].hi)};
  }
}

// The regions a tile reads of one input: apart where they are disjoint and their hull would be
// larger than both (a packed projection's Q, K and V slices of one head, 768 columns apart),
// merged into their hull otherwise (so that no element is charged twice).
using Reads = std::vector<Region>;

void read_into(Reads& into, const Region& r) {
  Region merged = r;
  for (size_t k = 0; k < into.size();) {
    Region hull = into[k];
    hull_into(hull, merged);
    bool overlap = true;
    for (size_t d = 0; d < merged.size() && d < into[k].size(); ++d) {
      overlap = overlap && merged[d].lo <= into[k][d].hi && into[k][d].lo <= merged[d].hi;
    }
    if (overlap || region_elems(hull) <= region_elems(into[k]) + region_elems(merged)) {
      merged = hull;  // may now meet a region it missed before: look again from the start
      into.erase(into.begin() + static_cast<std::ptrdiff_t>(k));
      k = 0;
    } else {
      ++k;
    }
  }
  into.push_back(merged);
}

// Sector bytes of the regions a tile reads of a value (read_into keeps them disjoint).
int64_t reads_sector_bytes(const Reads& reads, const Value& val, int sector) {
  int64_t bytes = 0;
  for (const Region& r : reads) bytes += sector_bytes(r, val.shape, val.dtype, sector);
  return bytes;
}

bool is_contraction(const Node& n) { return find_op(n.op)->kind == OpKind::kContraction; }

// Elements of a 16-byte vector of dtype t.
int64_t vector_elements(DType t) { return 16 / static_cast<int64_t>(dtype_size(t)); }

// Each iteration after a thread's first of an element-wise loop waits this many DRAM latencies.
constexpr double kElementRoundLatency = 0.5;
// A split-K tile's hand-over to its last block waits this many: three dependent round trips to
// L2 (stores fenced, the atomic, the partials read back: codegen/stages/split_k.h), each about a
// third of DRAM's.
constexpr double kSplitHandOverLatencies = 1.0;

// The units an element-wise group's loop takes over its root's tile (codegen's region_loop): a
// 16-byte vector each where a float32 or 16-bit output's rows are whole vectors and the tile's rows
// hold one (LoweringContext::vector_loop), else an element each.
int64_t element_units(const Value& out, const Region& tile) {
  const bool floats = out.dtype == DType::kF32 || out.dtype == DType::kF16 || out.dtype == DType::kBF16;
  const int64_t lanes = floats ? vector_elements(out.dtype) : 1;
  if (out.shape.empty() || out.shape.back() % lanes != 0 || tile.back().size() < lanes) return region_elems(tile);
  return region_elems(tile) / tile.back().size() * ceil_div(tile.back().size(), lanes);
}

// Which operands of a staged MatMul codegen moves in 16-byte vectors at vector width 4 (codegen/
// stages/matmul.h): a float32, float16 or bfloat16 input of the group, contiguous along the staged
// slice's rows, with rows that start 16-byte aligned: A along K (K a multiple of the vector's 4 or
// 8 elements), B along N (N and the first column of the product's region multiples of it).
// Elsewhere vectors would mostly fall back to single loads.
std::pair<bool, bool> vector_operands(const Graph& g, const Node& n, const std::set<int>& produced,
                                      const Region& out) {
  if (n.op != "MatMul" || out.empty()) return {false, false};
  auto plain = [&](int v) {
    const DType t = g.value(v).dtype;
    return !produced.count(v) && (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) && g.value(v).shape.size() >= 2;
  };
  const int a = n.inputs[0], b = n.inputs[1];
  return {plain(a) && g.value(a).shape.back() % vector_elements(g.value(a).dtype) == 0,
          plain(b) && g.value(b).shape.back() % vector_elements(g.value(b).dtype) == 0 &&
              out.back().lo % vector_elements(g.value(b).dtype) == 0};
}

// True if n is a MatMul codegen can run on tensor cores (codegen/stages/mma_matmul.h): both
// operands (of rank 2 or more) float16 or both bfloat16, or under the TF32 policy both float32.
bool mma_matmul(const Graph& g, const Node& n, bool tf32) {
  if (!tensor_core_operands(g, n)) return false;
  return g.value(n.inputs[0]).dtype != DType::kF32 || tf32;
}

bool has_mma_matmul(const Graph& g, const FusionGroup& group, bool tf32) {
  return std::any_of(group.nodes.begin(), group.nodes.end(),
                     [&](int n) { return mma_matmul(g, g.nodes()[static_cast<size_t>(n)], tf32); });
}

// True if MatMul n takes the GEMV form (codegen/stages/matmul.h) over region `out`: B a float32,
// float16 or bfloat16 input of the group (read straight from memory), the region one matrix of at
// most 8 rows.
bool gemv_matmul(const Graph& g, const Node& n, const std::set<int>& produced, const Region& out) {
  if (n.op != "MatMul" || out.size() < 2 || g.value(n.inputs[0]).shape.size() < 2) return false;
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < out.size(); ++d) batch *= out[d].size();
  const Value& b = g.value(n.inputs[1]);
  // An empty region (the tile reads none of this product: a Concat's other part) is no GEMV.
  return batch == 1 && out[out.size() - 2].size() >= 1 && out.back().size() >= 1 && out[out.size() - 2].size() <= 8 &&
         !produced.count(n.inputs[1]) && b.shape.size() >= 2 &&
         (b.dtype == DType::kF32 || b.dtype == DType::kF16 || b.dtype == DType::kBF16);
}

}  // namespace

int64_t normalization_rows(const Graph& g, const Node& n, const std::vector<Interval>& region) {
  const size_t axis = static_cast<size_t>(
      normalize_axis(n.attrs.i("axis", -1), static_cast<int64_t>(g.value(n.inputs[0]).shape.size()), "axis"));
  int64_t rows = 1;
  for (size_t d = 0; d < region.size(); ++d) {
    if (d < axis || (d > axis && n.op != "LayerNormalization")) rows *= std::max<int64_t>(0, region[d].size());
  }
  return rows;
}

// A warp's lanes: the cooperative reduction form spreads a reduction space of at least this many
// elements over them (reduction_lanes), and only such spaces get its split candidates.
constexpr int64_t kWarp = 32;

namespace {

// The index n's first input is read at along the innermost axis of the buffer that read reaches:
// n's access (a) through the Transposes of `members` that produce its input (inlined, they move
// axes: the buffer is what the first of them reads), or a's own innermost index.
const IndexExpr& innermost_read(const Graph& g, const Node& n, const Access& a, const std::vector<int>* members) {
  const size_t rank = a.index.size();
  std::vector<size_t> axis_of(rank);  // axis d of the value reached is axis axis_of[d] of n's input
  for (size_t d = 0; d < rank; ++d) axis_of[d] = d;
  int v = n.inputs[0];
  while (members != nullptr) {
    const auto p = std::find_if(members->begin(), members->end(),
                                [&](int m) { return g.nodes()[static_cast<size_t>(m)].outputs[0] == v; });
    if (p == members->end()) break;
    const Node& t = g.nodes()[static_cast<size_t>(*p)];
    const std::vector<int64_t> perm = t.op == "Transpose" ? t.attrs.ints("perm") : std::vector<int64_t>{};
    if (perm.size() != rank) break;
    std::vector<size_t> before(rank);  // the Transpose's output axis d is its input's axis perm[d]
    for (size_t d = 0; d < rank; ++d) before[static_cast<size_t>(perm[d])] = axis_of[d];
    axis_of = before;
    v = t.inputs[0];
  }
  return a.index[axis_of[rank - 1]];
}

}  // namespace

ReductionForm reduction_form(const Graph& g, const Node& n, int64_t outputs, int threads, int splits,
                             const std::vector<int>* members) {
  ReductionForm form;
  const bool arg = n.op == "ArgMax" || n.op == "ArgMin";
  const bool reduction = arg || n.op == "ReduceSum" || n.op == "ReduceMean" || n.op == "ReduceMax" || n.op == "ReduceMin";
  if (!(reduction || n.op == "MatMul" || n.op == "Conv") || outputs <= 0) return form;
  for (int v : n.inputs) {
    if (v != kNoValue && !is_float(g.value(v).dtype)) return form;
  }
  const TensorExpr e = describe(g, n);
  int64_t count = 1;
  for (int64_t ext : e.reduce_extents) count *= ext;
  if (e.reduce_extents.empty() || count < kWarp) return form;
  const Access& a = e.accesses[0];
  // Columns: the output's innermost variable indexes the innermost axis of what the input reads
  // (through inlined Transposes) by itself.
  const IndexExpr* inner = a.index.empty() ? nullptr : &innermost_read(g, n, a, members);
  form.columns = splits <= 1 && reduction && !arg && outputs >= 16 && threads >= 2 * kWarp && count >= 64 && !e.out_shape.empty() &&
                 inner != nullptr && !a.guarded && inner->is_var(static_cast<int>(e.out_shape.size()) - 1);
  if (form.columns) return form;
  // Along: the innermost reduction variable indexes it by itself.
  const bool along = reduction && inner != nullptr && inner->is_var(e.num_vars() - 1);
  if (2 * outputs > threads && !along) return form;
  const int64_t warps = threads / kWarp;
  int64_t group = 1;
  while (group * 2 * outputs <= warps && warps % (group * 2) == 0) group *= 2;
  form.lanes = kWarp * group;
  form.row_apart = reduction && !a.index.empty() && !along;
  form.pairs = arg;
  return form;
}

int64_t reduction_lanes(const Graph& g, const Node& n, int64_t outputs, int threads) {
  return reduction_form(g, n, outputs, threads, 2).lanes;
}

bool column_reduction(const Graph& g, const Node& n, int64_t outputs, int threads) {
  return reduction_form(g, n, outputs, threads, 1).columns;
}

// Issue slots (instructions) per staged element of the implicit-GEMM Conv (codegen/stages/
// conv_gemm.h), counted in NVRTC's sm_90 PTX of ResNet-50's 256-channel 14 x 14 3 x 3 kernel
// (tile=1x8x196, threads staging): a batch of 8 patch elements is 418 instructions (their K rows'
// channel and taps, the bounds of the image, the loads and the stores), a batch of 4 weight
// elements 84. The model charged each one slot; on an H200 such kernels measured 12x to 24x
// their modeled time (bench/results/2026-12-04-h200-180c1d2).
constexpr int64_t kPatchElementIssue = 52, kWeightElementIssue = 21;

MmaWarps mma_warps(int64_t rows, int64_t cols, int64_t warps) {
  const int64_t mt = (std::max<int64_t>(1, rows) + 15) / 16, nt = (std::max<int64_t>(1, cols) + 7) / 8;
  MmaWarps best;
  int64_t best_score = -1;
  for (int64_t wm = 1; wm <= warps; ++wm) {
    if (warps % wm != 0) continue;
    const int64_t fm = (mt + wm - 1) / wm, fn = (nt + warps / wm - 1) / (warps / wm);
    // Then the fragment loads of a k step: an A fragment (16 rows) loads twice a B's (8 columns).
    const int64_t score = fm * fn * 1024 + 2 * fm + fn;
    if (best_score < 0 || score < best_score) {
      best_score = score;
      best = {wm, warps / wm, fm, fn};
    }
  }
  return best;
}

WgmmaGroups wgmma_groups(int64_t rows, int64_t cols, int64_t warpgroups) {
  const int64_t mt = ceil_div(std::max<int64_t>(1, rows), 64);
  WgmmaGroups best;
  int64_t best_area = -1, best_instructions = 0;
  for (int64_t gm = 1; gm <= warpgroups; ++gm) {
    if (warpgroups % gm != 0) continue;
    const int64_t gn = warpgroups / gm;
    const int64_t width = ceil_div(ceil_div(std::max<int64_t>(1, cols), gn), 8) * 8;  // a warpgroup's columns
    WgmmaGroups w{gm, gn, ceil_div(mt, gm), ceil_div(width, 256), 8};
    w.n = ceil_div(ceil_div(width, w.fn), 8) * 8;
    const int64_t area = w.rows() * w.cols(), instructions = w.fm * w.fn;
    if (best_area < 0 || area < best_area || (area == best_area && instructions < best_instructions)) {
      best = w;
      best_area = area;
      best_instructions = instructions;
    }
  }
  return best;
}

bool has_wgmma(const Device& d) { return d.compute_capability == 90; }

bool tensor_core_operands(const Graph& g, const Node& n) {
  if (n.op != "MatMul") return false;
  const Value& a = g.value(n.inputs[0]);
  const Value& b = g.value(n.inputs[1]);
  return a.dtype == b.dtype && (a.dtype == DType::kF16 || a.dtype == DType::kBF16 || a.dtype == DType::kF32) &&
         a.shape.size() >= 2 && b.shape.size() >= 2;
}

bool dp4a_matmul(const Graph& g, const Node& n) {
  if (n.op != "MatMul") return false;
  const Value& a = g.value(n.inputs[0]);
  const Value& b = g.value(n.inputs[1]);
  const auto bytes = [](DType t) { return t == DType::kI8 || t == DType::kU8; };
  return bytes(a.dtype) && bytes(b.dtype) && a.shape.size() >= 2 && b.shape.size() >= 2;
}

std::set<int> computed_elements(const Graph& g, const FusionGroup& group, const std::set<int>& produced) {
  std::set<int> computed = produced;
  for (int n : group.nodes) {  // in graph order: a chain's first Reshape comes first
    const Node& node = g.nodes()[static_cast<size_t>(n)];
    if (node.op == "Reshape" && node.guards.empty() && !computed.count(node.inputs[0])) computed.erase(node.outputs[0]);
  }
  return computed;
}

namespace {

// A ring with an operand copied asynchronously, deepened to the candidate's ring_stages.
MmaStaging deepened(MmaStaging m, const TileConfig& cfg) {
  if (cfg.ring_stages > 0 && (m.async_a || m.async_b)) {
    m.stages = cfg.ring_stages;
    m.ahead = cfg.ring_stages - (cfg.wgmma ? 2 : 1);
  }
  return m;
}

}  // namespace

MmaStaging mma_staging(const Graph& g, const Node& matmul, const std::set<int>& produced, const TileConfig& cfg) {
  MmaStaging m;
  const auto async = [&](int v) {
    return !produced.count(v) && g.value(v).shape.back() % vector_elements(g.value(v).dtype) == 0;
  };
  if (!tensor_core_operands(g, matmul)) return m;
  m.async_a = async(matmul.inputs[0]);
  m.async_b = async(matmul.inputs[1]);
  m.ahead = m.async_a || m.async_b ? 2 : 1;
  m.stages = m.ahead + (cfg.wgmma ? 2 : 1);
  return deepened(m, cfg);
}

bool resident_a(const Graph& g, const FusionGroup& group, const Node& matmul, const TileConfig& cfg) {
  if (!cfg.mma || cfg.wgmma || cfg.tma || cfg.reduce_step <= 0 || !tensor_core_operands(g, matmul)) return false;
  const int a = matmul.inputs[0];
  const Value& av = g.value(a);
  if (dtype_size(av.dtype) != 2 || matmul.inputs[1] == a) return false;
  const int64_t rank = static_cast<int64_t>(av.shape.size()), k = av.shape.back();
  const int64_t kk = mma_k(av.dtype), step = ceil_div(std::max(cfg.reduce_step, kk), kk) * kk;
  if (k <= 0 || k % step != 0) return false;
  const Node* producer = nullptr;
  int readers = 0;
  for (int n : group.nodes) {
    const Node& member = g.nodes()[static_cast<size_t>(n)];
    if (member.outputs[0] == a) producer = &member;
    if (std::find(member.inputs.begin(), member.inputs.end(), a) != member.inputs.end()) ++readers;
  }
  if (producer == nullptr || readers != 1 || find_op(producer->op)->kind != OpKind::kNormalization) return false;
  const int64_t axis = normalize_axis(producer->attrs.i("axis", -1), rank, "axis");
  return axis == rank - 1;
}

int64_t resident_pitch(const Graph& g, const Node& matmul) {
  const Value& a = g.value(matmul.inputs[0]);
  return mma_pitch_a(a.dtype, a.shape.back());
}

WarpSpecializedRegisters warp_specialized_registers(int consumers) {
  constexpr int kThreadRegisters = 255, kWarpgroup = 128;  // sm_90's (and every sm since 5.0's)
  WarpSpecializedRegisters r;
  r.block_threads = consumers + kWarpgroup;
  const int bound = std::min(kThreadRegisters, kBlockRegisters / r.block_threads) / 8 * 8;  // the launch bounds'
  r.producer = 40;  // its loop: a slot's wait, arrival and copies' coordinates
  r.consumer = std::min(240, (bound * r.block_threads - r.producer * kWarpgroup) / consumers / 8 * 8);
  // An .inc must not lower a count (the PTX ISA: undefined where the count before it is higher):
  // ptxas fixes the entry count at the launch bounds' or the consumers' if that is lower.
  r.entry = std::min(bound, r.consumer);
  check(r.consumer * consumers + r.producer * kWarpgroup <= r.entry * r.block_threads,
        "warp_specialized_registers: the budgets of ", consumers, " consumers exceed the block's pool");
  return r;
}

std::optional<std::pair<TmaOperand, TmaOperand>> tma_operands(const Graph& g, const Node& matmul, const std::set<int>& produced) {
  if (matmul.op != "MatMul" || !tensor_core_operands(g, matmul)) return std::nullopt;
  const TensorExpr e = describe(g, matmul);
  const auto operand = [&](size_t slot) -> std::optional<TmaOperand> {
    const int v = matmul.inputs[slot];
    const Value& x = g.value(v);
    if (produced.count(v) || dtype_size(x.dtype) != 2 || x.shape.size() < 2 || x.shape.size() > 3 || x.shape.back() % 8 != 0 ||
        e.accesses[slot].guarded) {
      return std::nullopt;
    }
    TmaOperand t;
    int64_t stride = 2;
    for (size_t d = x.shape.size(); d-- > 0;) {
      const IndexExpr& i = e.accesses[slot].index[d];
      int var = -1;
      for (int u = 0; u < e.num_vars() && var < 0; ++u) var = i.is_var(u) ? u : -1;
      if (var < 0 && !(i.is_const() && i.value() == 0 && x.shape[d] == 1)) return std::nullopt;
      t.dims.push_back(x.shape[d]);
      if (d + 1 < x.shape.size()) t.strides.push_back(stride);
      t.vars.push_back(var);
      stride *= x.shape[d];
    }
    return t;
  };
  std::optional<TmaOperand> a = operand(0), b = operand(1);
  if (!a || !b) return std::nullopt;
  return std::make_pair(*a, *b);
}

MmaStaging simt_staging(const Graph& g, const Node& matmul, const std::set<int>& produced, const TileConfig& cfg) {
  MmaStaging m;
  if (matmul.op != "MatMul" || cfg.vector < 4 || cfg.mma || cfg.gemv || cfg.reduce_step % 4 != 0) return m;
  const auto async = [&](int v) {
    const Value& x = g.value(v);
    return !produced.count(v) && x.dtype == DType::kF32 && x.shape.size() >= 2 && x.shape.back() % 4 == 0;
  };
  if (!async(matmul.inputs[1])) return m;
  m.async_b = true;
  m.async_a = async(matmul.inputs[0]);
  m.ahead = 2;
  m.stages = 3;
  return deepened(m, cfg);
}

MmaStaging conv_staging(const Graph& g, const Node& conv, const std::set<int>& produced, const TileConfig& cfg) {
  MmaStaging m;
  if (conv.op != "Conv" || cfg.vector < 4 || cfg.mma || cfg.reduce_step % 4 != 0 || conv.inputs.size() < 2) return m;
  const Shape& w = g.value(conv.inputs[1]).shape;
  if (w.size() < 3 || w[1] == 1 || (numel(w) / w[0]) % 4 != 0) return m;  // depthwise: the window form
  const auto copied = [&](int v) { return !produced.count(v) && g.value(v).dtype == DType::kF32; };
  if (!copied(conv.inputs[0]) || !copied(conv.inputs[1])) return m;
  m.async_a = m.async_b = true;
  m.ahead = 2;
  m.stages = 3;
  return deepened(m, cfg);
}

std::string config_library(const std::string& config) {
  constexpr std::string_view kPrefix = "library=";
  if (config.compare(0, kPrefix.size(), kPrefix) != 0) return "";
  return config.substr(kPrefix.size(), config.find(' ') == std::string::npos ? std::string::npos : config.find(' ') - kPrefix.size());
}

std::string TileConfig::str() const {
  if (!library.empty()) return "library=" + library + (algorithm > 0 ? " algo=" + std::to_string(algorithm) : "");
  std::ostringstream out;
  out << "tile=" << shape_str(tile);
  if (reduce_step > 0) out << " k=" << reduce_step;
  out << " threads=" << threads;
  if (vector > 1) out << " vec=" << vector;
  if (mma) out << " mma";
  if (wgmma) out << " wgmma";
  if (tma) out << " tma";
  if (ws) out << " ws";
  if (gemv) out << " gemv";
  if (flash) out << " flash";
  if (in_place) out << " in-place";
  if (split_k > 1) out << " splitk=" << split_k;
  if (ring_stages > 0) out << " stages=" << ring_stages;
  if (!order.empty()) {
    out << " order=";
    for (size_t i = 0; i < order.size(); ++i) out << (i ? "," : "") << order[i];
  }
  return out.str();
}

std::vector<size_t> tile_order(const TileConfig& cfg, size_t rank) {
  std::vector<size_t> out;
  if (cfg.order.empty()) {
    for (size_t a = rank; a-- > 0;) out.push_back(a);
    return out;
  }
  std::vector<bool> seen(rank, false);
  for (int a : cfg.order) {
    check(a >= 0 && static_cast<size_t>(a) < rank && !seen[static_cast<size_t>(a)], "tile order ", cfg.str(),
          " is not a permutation of ", rank, " axes");
    seen[static_cast<size_t>(a)] = true;
    out.push_back(static_cast<size_t>(a));
  }
  check(out.size() == rank, "tile order ", cfg.str(), " is not a permutation of ", rank, " axes");
  return out;
}

std::pair<int64_t, int64_t> micro_tile(int64_t rows, int64_t cols, int threads) {
  std::pair<int64_t, int64_t> best = {0, 0};
  int64_t best_score = 0;
  for (int64_t tm : {1, 2, 4, 8}) {
    for (int64_t tn : {1, 2, 4, 8}) {
      if (ceil_div(rows, tm) * ceil_div(cols, tn) > threads) continue;
      const int64_t score = tm * tn * 16 + (tm > tn ? tm - tn : tn - tm);
      if (best_score == 0 || score < best_score) {
        best_score = score;
        best = {tm, tn};
      }
    }
  }
  return best;
}

int group_root(const Graph& g, const FusionGroup& group) {
  check(!group.outputs.empty(), "a fusion group without outputs");
  int root = group.outputs.front();
  int64_t best = -1;
  // The output produced by the latest node; ties cannot occur (one producer per value).
  const std::vector<int> prod = g.producers();
  for (int o : group.outputs) {
    if (prod[static_cast<size_t>(o)] > best) {
      best = prod[static_cast<size_t>(o)];
      root = o;
    }
  }
  return root;
}

int64_t constant_bytes(const Graph& g) {
  int64_t n = 0;
  for (const Value& v : g.values()) {
    if (v.is_constant()) n += numel(v.shape) * static_cast<int64_t>(dtype_size(v.dtype));
  }
  return n;
}

namespace {

// The region of every value a tile of the group reads (the root's: root_tile), consumers before
// producers; `exprs`, when given, the group's nodes' tensor expressions in its order.
std::map<int, Region> tile_regions(const Graph& g, const FusionGroup& group, int root, const Region& root_tile,
                                   const std::vector<TensorExpr>* exprs = nullptr) {
  std::map<int, Region> regions{{root, root_tile}};
  for (size_t i = group.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes()[static_cast<size_t>(group.nodes[i])];
    const auto out = regions.find(n.outputs[0]);
    if (out == regions.end()) continue;
    const Region produced = out->second;
    const auto ins = input_regions(g, n, exprs != nullptr ? (*exprs)[i] : describe(g, n), produced);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] != kNoValue && !ins[k].empty()) hull_into(regions[n.inputs[k]], ins[k]);
    }
  }
  return regions;
}

// Whether the group reshapes (a Reshape or Flatten): then a value's region may differ from tile to
// tile in size, where the representative tile shows one of them.
bool group_reshapes(const Graph& g, const FusionGroup& group) {
  return std::any_of(group.nodes.begin(), group.nodes.end(), [&](int id) {
    const std::string& op = g.nodes()[static_cast<size_t>(id)].op;
    return op == "Reshape" || op == "Flatten";
  });
}

// The tile of the root whose staged implicit-GEMM Convs (C_in / group > 1) and products of bytes
// (a quantized convolution's, over its patches) compute the largest regions: codegen sizes their
// slices, and runs their micro-tiles, for the largest region any tile needs
// (codegen/stages/conv_gemm.h, dp4a_matmul.h), so the model charges, and admits, that one. The
// representative tile unless the group also reshapes: a tile of a flattened image axis (a
// pointwise convolution's pixels, importer/pointwise_conv.h; the padded map a consumer's patches
// are gathered from) that straddles rows needs the box of whole rows (16 pixels of a 56-wide
// image: 2 x 56), which the representative tile may not show. Scans up to 64 starts along each
// axis of the root.
Region widest_staged_tile(const Graph& g, const FusionGroup& group, int root, const Region& representative,
                          const std::vector<int64_t>& tile, const TileConfig& cfg) {
  if (cfg.reduce_step <= 0) return representative;
  std::vector<int> convs;
  for (int id : group.nodes) {
    const Node& n = g.nodes()[static_cast<size_t>(id)];
    if ((n.op == "Conv" && n.inputs.size() > 1 && g.value(n.inputs[1]).shape.size() > 1 && g.value(n.inputs[1]).shape[1] > 1) ||
        dp4a_matmul(g, n)) {
      convs.push_back(n.outputs[0]);
    }
  }
  if (convs.empty() || !group_reshapes(g, group)) return representative;
  std::vector<TensorExpr> exprs;
  for (int id : group.nodes) exprs.push_back(describe(g, g.nodes()[static_cast<size_t>(id)]));
  const auto conv_elems = [&](const Region& root_tile) {
    const auto regions = tile_regions(g, group, root, root_tile, &exprs);
    int64_t elems = 0;
    for (int v : convs) {
      if (const auto it = regions.find(v); it != regions.end()) elems += region_elems(it->second);
    }
    return elems;
  };
  const Shape& rs = g.value(root).shape;
  Region best = representative;
  int64_t most = conv_elems(representative);
  for (size_t a = 0; a < rs.size(); ++a) {
    const int64_t t = std::clamp<int64_t>(tile[a], 1, std::max<int64_t>(rs[a], 1));
    for (int64_t start = 0, k = 0; start < rs[a] && k < 64; start += t, ++k) {
      Region r = representative;
      r[a] = {start, std::min(start + t, rs[a]) - 1};
      if (const int64_t elems = conv_elems(r); elems > most) {
        most = elems;
        best = r;
      }
    }
  }
  return best;
}

// The DRAM bytes of an input larger than half the L2 that each of `tiles` tiles reads `per_tile`
// bytes of, by the L2 model (see tiling.h): a wave of `wave` consecutive tiles in tile `order`
// spans min(n, ceil(wave / stride)) tiles along an axis of n tiles whose index moves every
// `stride` tiles, and reads the product of that over the axes the input's region moves along
// (`moves`) distinct regions, each once from DRAM when they fit in half the L2.
int64_t large_input_dram(int64_t per_tile, int64_t tiles, const std::vector<bool>& moves, const std::vector<int64_t>& ntiles,
                         const std::vector<size_t>& order, int64_t wave, int64_t half_l2) {
  int64_t distinct = 1, stride = 1;
  for (size_t a : order) {
    if (moves[a]) distinct *= std::min(ntiles[a], ceil_div(wave, stride));
    stride *= ntiles[a];
  }
  const int64_t all_tiles = per_tile * tiles;
  return distinct * per_tile <= half_l2 ? std::min(all_tiles, ceil_div(tiles, wave) * distinct * per_tile) : all_tiles;
}

// A representative interior tile of the root (the second along each axis that has three).
Region representative_tile(const Shape& rs, const std::vector<int64_t>& tile) {
  Region r;
  for (size_t k = 0; k < rs.size(); ++k) {
    const int64_t t = std::clamp<int64_t>(tile[k], 1, std::max<int64_t>(rs[k], 1));
    const int64_t start = rs[k] >= 3 * t ? t : 0;
    r.push_back({start, std::min(start + t, rs[k]) - 1});
  }
  return r;
}

// Tiles along each axis of the root.
std::vector<int64_t> tiles_along(const Shape& rs, const std::vector<int64_t>& tile) {
  std::vector<int64_t> n;
  for (size_t k = 0; k < rs.size(); ++k) {
    n.push_back(ceil_div(std::max<int64_t>(rs[k], 1), std::clamp<int64_t>(tile[k], 1, std::max<int64_t>(rs[k], 1))));
  }
  return n;
}

// The root's tiles.
int64_t tile_count(const Shape& rs, const std::vector<int64_t>& tile) {
  int64_t count = 1;
  for (int64_t n : tiles_along(rs, tile)) count *= n;
  return count;
}

// Which of `values` (a group's inputs) do not stay in L2 between launches: larger than half of it.
std::vector<int> large_inputs(const Graph& g, const std::vector<int>& values, const Device& d) {
  std::vector<int> large;
  for (int v : values) {
    if (value_bytes(g.value(v)) > d.l2_bytes / 2) large.push_back(v);
  }
  return large;
}

// The tiles running at once, by the L2 model: a block an SM, a split-K tile's blocks counted once.
int64_t wave_tiles(const Device& d, const TileConfig& cfg) { return std::max<int64_t>(1, d.sms / std::max(1, cfg.split_k)); }

// For each of `values` (inputs of the group), the axes of the root's tiles along which the region
// a tile reads of it moves (a head's keys and values move with the head, not with the query rows).
std::map<int, std::vector<bool>> moving_axes(const Graph& g, const FusionGroup& group, int root, const Region& root_tile,
                                             const std::vector<int64_t>& tile, const Shape& rs, const std::vector<int>& values) {
  std::map<int, std::vector<bool>> moves;
  for (int v : values) moves[v].assign(rs.size(), false);
  if (values.empty()) return moves;
  const std::map<int, Region> base = tile_regions(g, group, root, root_tile);
  for (size_t a = 0; a < rs.size(); ++a) {
    const int64_t t = std::clamp<int64_t>(tile[a], 1, std::max<int64_t>(rs[a], 1));
    if (t >= rs[a]) continue;  // one tile along the axis
    Region moved = root_tile;  // the next tile along axis a (the one before, at the last)
    const int64_t start = moved[a].lo + t < rs[a] ? moved[a].lo + t : moved[a].lo - t;
    moved[a] = {start, std::min(start + t, rs[a]) - 1};
    const std::map<int, Region> next = tile_regions(g, group, root, moved);
    for (int v : values) {
      const auto b = base.find(v), m = next.find(v);
      moves[v][a] = b == base.end() || m == next.end() || !(b->second == m->second);
    }
  }
  return moves;
}

// The group's inputs that flash attention reads a key tile at a time: those K, V and the chain's
// operands (masks, scales) are computed from within the group, less those Q is computed from too.
std::set<int> keyed_inputs_of(const Graph& g, const FusionGroup& group, const AttentionCore& core) {
  const std::set<int> absorbed(core.absorbed.begin(), core.absorbed.end());
  // The member computing v (-1: none), and the group inputs values are computed from.
  const auto member_of = [&](int v) {
    const auto p = std::find_if(group.nodes.begin(), group.nodes.end(),
                                [&](int id) { return g.nodes()[static_cast<size_t>(id)].outputs[0] == v; });
    return p == group.nodes.end() ? -1 : *p;
  };
  const auto inputs_of = [&](std::vector<int> todo) {
    std::set<int> found, seen;
    while (!todo.empty()) {
      const int v = todo.back();
      todo.pop_back();
      if (v == kNoValue || !seen.insert(v).second) continue;
      const int p = member_of(v);
      if (p < 0) {
        found.insert(v);
        continue;
      }
      for (int in : g.nodes()[static_cast<size_t>(p)].inputs) todo.push_back(in);
    }
    return found;
  };
  const Node& qk = g.nodes()[static_cast<size_t>(core.scores)];
  std::vector<int> keyed = {qk.inputs[1], g.nodes()[static_cast<size_t>(core.output)].inputs[1]};  // K and V
  for (int id : core.absorbed) {
    for (int in : g.nodes()[static_cast<size_t>(id)].inputs) {
      if (in != kNoValue && !absorbed.count(member_of(in))) keyed.push_back(in);  // the chain's operands (masks, scales)
    }
  }
  const std::set<int> q = inputs_of({qk.inputs[0]});
  std::set<int> out;
  for (int v : inputs_of(keyed)) {
    if (!q.count(v)) out.insert(v);
  }
  return out;
}

}  // namespace

bool uniform_flash_tiles(const Graph& g, const FusionGroup& group, const AttentionCore& core, const std::vector<int64_t>& tile,
                         const HeadFold& fold, const std::vector<TensorExpr>* exprs) {
  const int root = group_root(g, group);
  const Shape& rs = g.value(root).shape;
  const int out = g.nodes()[static_cast<size_t>(core.output)].outputs[0];
  if (tile.size() != rs.size()) return false;
  const std::vector<int64_t> ntiles = tiles_along(rs, tile);
  const int64_t count = tile_count(rs, tile);
  if (count > 4096) return false;
  std::vector<TensorExpr> own;
  if (exprs == nullptr) {
    for (int n : group.nodes) own.push_back(describe(g, g.nodes()[static_cast<size_t>(n)]));
    exprs = &own;
  }
  std::vector<int64_t> at(rs.size(), 0);  // the tile's index along each axis
  for (int64_t t = 0; t < count; ++t) {
    Region r;
    for (size_t a = 0; a < rs.size(); ++a) {
      const int64_t step = std::clamp<int64_t>(tile[a], 1, std::max<int64_t>(rs[a], 1)), start = at[a] * step;
      r.push_back({start, std::min(start + step, rs[a]) - 1});
    }
    const std::map<int, Region> regions = tile_regions(g, group, root, r, exprs);
    const auto o = regions.find(out);
    if (o == regions.end()) return false;
    const Region& region = o->second;
    const size_t rank = region.size();
    for (size_t a = 0; a + 2 < rank; ++a) {
      const Interval& i = region[a];
      if (static_cast<int>(a) == fold.axis ? (i.lo % fold.heads != 0 || i.size() > fold.heads) : i.size() > 1) return false;
    }
    if (fold.axis >= 0 && (region[rank - 2].lo != 0 || region[rank - 2].size() != fold.queries)) return false;
    for (size_t a = rs.size(); a-- > 0;) {  // the next tile
      if (++at[a] < ntiles[a]) break;
      at[a] = 0;
    }
  }
  return true;
}

Cost evaluate_tile(const Graph& g, const FusionGroup& group, const Device& d, const TileConfig& cfg,
                   const TilingOptions& opt) {
  Cost c;
  if (!cfg.library.empty()) {
    const auto match = match_library_call(g, group);
    if (!match) {
      c.reject = "the group is not a pattern " + cfg.library + " runs";
      return c;
    }
    const auto call = library_call(match->call, cfg.library, cfg.algorithm, &c.reject);
    if (!call) return c;
    if (const std::string family = library_family(match->call.op); !opt.libraries.count(family)) {
      c.reject = family + " is not among the libraries the plan may call (--libraries)";
      return c;
    }
    if (call->tf32 && !opt.tf32) {
      c.reject = cfg.library + ": TF32 mode is for float32 calls under the TF32 precision policy";
      return c;
    }
    c.valid = true;
    c.tiles = 1;
    c.efficiency = 1;
    c.modeled_us = library_cost_us(*call, d, opt.launch_overhead_us, &c.dram_bytes);
    c.l2_bytes = c.dram_bytes;
    return c;
  }
  const int root = group_root(g, group);
  const Shape& rs = g.value(root).shape;
  check(cfg.tile.size() == rs.size(), "tile of rank ", cfg.tile.size(), " for a root of rank ", rs.size());
  const auto widest = [&] { return widest_staged_tile(g, group, root, representative_tile(rs, cfg.tile), cfg.tile, cfg); };
  Region root_tile;
  if (opt.widest_tiles != nullptr && cfg.reduce_step > 0) {
    auto [at, fresh] = opt.widest_tiles->try_emplace(cfg.tile);
    if (fresh) at->second = widest();
    root_tile = at->second;
  } else {
    root_tile = widest();
  }
  const std::vector<int64_t> ntiles = tiles_along(rs, cfg.tile);
  c.tiles = 1;
  for (int64_t n : ntiles) c.tiles *= n;
  std::set<int> in_group(group.nodes.begin(), group.nodes.end());
  const bool reshapes = group_reshapes(g, group);
  std::set<int> produced;
  for (int n : group.nodes) produced.insert(g.nodes()[static_cast<size_t>(n)].outputs[0]);
  const std::set<int> computed = computed_elements(g, group, produced);  // what staged operands cannot copy from
  std::map<int, Region> regions;  // internal values
  std::map<int, Reads> loads;     // external inputs, per tile
  regions[root] = root_tile;
  int64_t smem = 0;
  int64_t tile_flops = 0;
  int64_t tensor_flops = 0;  // per tile, contraction flops on tensor cores (padded to m16n8k16)
  int64_t tf32_flops = 0;    // the same for TF32 contractions (padded to m16n8k8)
  int64_t wgmma_flops = 0;   // the same for wgmma (padded to m64nNk16)
  int64_t dp4a_flops = 0;    // per tile, the part of tile_flops that dp4a issues (charged at its own rate)
  int64_t imma_flops = 0;    // per tile, 8-bit integer contraction flops on tensor cores (padded to m16n8k32)
  int64_t tile_special = 0;  // per tile, special-function results (exp, sqrt, ...)
  int64_t tile_loads = 0;  // per tile, the load instructions that stage contraction operands
  int64_t padded_elems = 0;  // per tile, the accumulators of tensor-core contractions (fragments)
  // Little's law: the least bytes a block keeps in flight over its staged MatMuls' steps.
  double in_flight = INFINITY;
  int64_t reduce_rounds = 0;  // per block, the rounds of loads of the generic reduction and row statistics
  int64_t strided_l2 = 0;     // per tile, the L2 bytes a cooperative reduction's row-apart lanes request beyond the region's
  bool ring_deepened = false;  // cfg.ring_stages deepened some staged contraction's cp.async ring
  bool copies_ahead = false;   // some staged operand streams through a cp.async ring (copied while the block computes)
  // A thread's rounds of loads staging a slice of `elems` elements, `lanes` a load, in batches
  // (staging_batch: codegen's staging loops).
  const auto slice_rounds = [&](int64_t elems, int64_t lanes) {
    const int64_t slice_loads = ceil_div(elems, lanes);
    return ceil_div(ceil_div(slice_loads, static_cast<int64_t>(cfg.threads)),
                    staging_batch(slice_loads, cfg.threads, lanes > 1 ? kVectorStagingLoads : kStagingLoads));
  };
  bool gemv_taken = false;  // some MatMul takes the GEMV form
  int gemv_registers = 0;
  if (cfg.mma && cfg.gemv) {
    c.reject = "a candidate is either on tensor cores (mma) or in the GEMV form";
    return c;
  }
  const bool dp4a_group = std::any_of(group.nodes.begin(), group.nodes.end(),
                                      [&](int n) { return dp4a_matmul(g, g.nodes()[static_cast<size_t>(n)]); });
  if (cfg.mma) {
    if (d.compute_capability < 80) {
      c.reject = "tensor cores (mma) need compute capability 8.0 or later";
      return c;
    }
    if (cfg.reduce_step <= 0 || !(has_mma_matmul(g, group, opt.tf32) || dp4a_group)) {
      c.reject = opt.tf32 ? "tensor cores (mma) need a staged MatMul with float16, bfloat16 or float32 operands"
                          : "tensor cores (mma) need a staged MatMul with float16 or bfloat16 operands (float32 ones "
                            "only under the TF32 precision policy)";
      return c;
    }
  }
  if (cfg.reduce_step > 0 && std::any_of(group.nodes.begin(), group.nodes.end(), [&](int n) {
        const Node& node = g.nodes()[static_cast<size_t>(n)];
        return is_contraction(node) && !is_float(g.value(node.inputs[0]).dtype) && !dp4a_matmul(g, node);
      })) {
    c.reject = "an integer Conv, or an integer MatMul of wider than 8-bit operands, accumulates exactly in 64-bit "
               "integers, unstaged: staged slices hold floats (8-bit MatMuls stage in the dp4a form)";
    return c;
  }
  if (dp4a_group && cfg.reduce_step > 0) {
    if (d.compute_capability < 61) {
      c.reject = "dp4a needs compute capability 6.1 or later";
      return c;
    }
    if (cfg.wgmma || cfg.gemv || cfg.flash || cfg.vector > 1 || cfg.reduce_step % (cfg.mma ? 32 : 4) != 0) {
      c.reject = "the dp4a form stages a step of whole words (a multiple of 4; of 32 on tensor cores, m16n8k32), one "
                 "matrix a block, without wgmma, the GEMV form or 16-byte vectors";
      return c;
    }
  }
  if (cfg.wgmma) {
    if (!cfg.mma || !has_wgmma(d)) {
      c.reject = "wgmma needs tensor cores (mma) on a device of compute capability 9.0 (sm_90a)";
      return c;
    }
    if (cfg.threads % (4 * d.warp_size) != 0 || (!cfg.flash && !has_mma_matmul(g, group, false))) {
      c.reject = "wgmma needs whole warpgroups of 128 threads and a staged MatMul with float16 or bfloat16 operands, or "
                 "flash attention";
      return c;
    }
  }
  // Flash attention: the group's attention core (planner/attention.h) as codegen/stages/
  // attention.h computes it, a tile of keys at a time.
  std::optional<AttentionCore> core;
  if (cfg.flash) {
    if (cfg.gemv) {
      c.reject = "flash attention has no GEMV form";
      return c;
    }
    core = match_attention(g, group);
    if (!core || cfg.reduce_step <= 0) {
      c.reject = "flash attention needs an attention core (MatMul, Softmax over the keys, MatMul) and a key step";
      return c;
    }
    if (cfg.mma && !tensor_attention(g, *core)) {
      c.reject = "flash attention on tensor cores needs Q, K, P and V all float16 or all bfloat16";
      return c;
    }
    if (cfg.wgmma && !wgmma_attention(g, group, *core, cfg.reduce_step)) {
      c.reject = "flash attention on wgmma needs Q, K and V moving by cp.async, and a head, a value width and a key "
                 "tile each at most 256 rounded up to 16";
      return c;
    }
  }
  const std::set<int> absorbed = core ? std::set<int>(core->absorbed.begin(), core->absorbed.end()) : std::set<int>{};
  // A causal mask (causal_mask_of): the key tiles a block runs end at its last row's last visible
  // key; a mask computed from the indices reads nothing (nor do the members computing it).
  FlashFacts own_facts;
  FlashFacts& facts = opt.flash_facts != nullptr ? *opt.flash_facts : own_facts;
  if (core && !facts.found) {
    facts.causal = causal_mask_of(g, group, *core);
    if (facts.causal) facts.keyed_inputs = keyed_inputs_of(g, group, *core);
    facts.found = true;
  }
  const CausalMask* causal = core && facts.causal ? &*facts.causal : nullptr;
  int flash_registers = 0;
  // Flash attention under a causal mask: the share of the key tiles a block runs (below), what
  // it reads of the inputs read a key tile at a time (K, V and the chain's operands are computed
  // from; not those Q is computed from too).
  double key_share = 1.0;
  static const std::set<int> kNoKeyedInputs;
  const std::set<int>& keyed_inputs = causal != nullptr ? facts.keyed_inputs : kNoKeyedInputs;
  int64_t keyed_ops = 0, keyed_special = 0;  // the generic charges of the core's nodes, which run a key tile at a time
  int imma_registers = 0;  // the 8-bit tensor-core form's accumulators and fragments
  bool uncovered = false;  // a staged Conv whose threads cannot cover the tile with micro-tiles
  // Split-K (cfg.split_k > 1) needs one anchor, a staged MatMul with its accumulators in registers:
  // its reduction steps and the floats a block's accumulators hold (codegen/stages/split_k.h).
  int anchors = 0, split_products = 0;
  int64_t split_steps = 0, split_slot = 0;
  int64_t block_steps = 0;  // per tile, the reduction steps (key tiles) its staged contractions walk, a barrier each
  // Per tile, the latencies those steps wait in turn: a step whose operands a ring copies `ahead`
  // steps ahead waits 1/ahead of one, a step the threads load waits one (ahead 1).
  double step_rounds = 0;
  std::map<int, int64_t> resident_buffers;  // a resident A's normalization value -> its buffer's bytes (resident_a)
  const auto walk = [&](int64_t steps, int64_t ahead) {
    block_steps += steps;
    step_rounds += static_cast<double>(steps) / static_cast<double>(ahead);
  };
  // A staged product's prologue of B's copies (tensor cores, or the SIMT form's ring), which
  // codegen issues before the group's first stage where another stage comes first
  // (stages/mma_matmul.h, stages/matmul.h; AnchorStage::ahead_of_stages): the
  // latency its first steps wait (one, or their share where a block walks fewer than `ahead`
  // steps) overlaps the rounds of the stages before it, which the nodes visited after it (the walk
  // below goes root first) count: `mark` holds the rounds counted up to its own.
  struct RingFill {
    int node = -1;
    double latency = 0, mark = 0;
    bool preceded = false;  // a stage runs before the product
  };
  std::vector<RingFill> fills;
  // After walk(steps, ahead) for node's product, whose B a ring copies by cp.async.
  const auto ring_fill = [&](int node, int64_t steps, int64_t ahead) {
    const double local = static_cast<double>(steps) / static_cast<double>(std::max(1, cfg.split_k));
    fills.push_back({node, std::min(1.0, local / static_cast<double>(ahead)), static_cast<double>(reduce_rounds) + step_rounds, false});
  };
  // Flash attention's key tiles as split-K's steps (flash-decoding): a thread's slot holds its
  // `accumulators` and the maximum and sum of each of its `stats` rows' statistics; the last
  // block's weights (rows x splits floats) take shared memory.
  const auto split_keys = [&](int64_t key_tiles, int64_t accumulators, int64_t rows, int64_t stats) {
    ++split_products;
    split_steps = key_tiles;
    split_slot = (accumulators + 2 * stats) * cfg.threads;
    if (cfg.split_k > 1) smem += rows * cfg.split_k * 4;
  };
  // A normalization's value handed to the next one in registers (planner/held_rows.h), here with
  // the representative tile's regions: no shared buffer.
  const auto row_handed = [&](int node, const Region& out_region) {
    const int consumer = row_consumer(g, group, node);
    if (consumer < 0 || absorbed.count(node) || absorbed.count(consumer)) return false;
    const Node& p = g.nodes()[static_cast<size_t>(node)];
    const Node& cn = g.nodes()[static_cast<size_t>(consumer)];
    const auto cr = regions.find(cn.outputs[0]);
    return cr != regions.end() && rows_coincide(g, p, out_region, cr->second) &&
           rows_handed(g, group, p, normalization_rows(g, p, out_region), cn, normalization_rows(g, cn, cr->second),
                       cfg.threads);
  };
  for (auto it = group.nodes.rbegin(); it != group.nodes.rend(); ++it) {
    const Node& n = g.nodes()[static_cast<size_t>(*it)];
    auto out_it = regions.find(n.outputs[0]);
    if (out_it == regions.end()) continue;  // a side output: charged as written once below
    const Region out_region = out_it->second;
    const TensorExpr e = describe(g, n);
    const auto in_regions = input_regions(g, n, e, out_region);
    const int64_t out_elems = region_elems(out_region);
    // On tensor cores when the candidate asks and codegen stages the product (one matrix per tile).
    const bool tensor = cfg.mma && !core && mma_matmul(g, n, opt.tf32) && cfg.reduce_step > 0 &&
                        out_elems == out_region[out_region.size() - 2].size() * out_region.back().size();
    const bool gemv = cfg.gemv && cfg.reduce_step > 0 && gemv_matmul(g, n, produced, out_region);
    int64_t tensor_smem = 0, tensor_loads = 0;
    if (tensor) {
      // Fragments: every warp's fm x fn of them over the region (mma_warps), K rounded up to the
      // instruction's: 16 (m16n8k16, 16-bit operands) or 8 (m16n8k8, TF32 from float32 ones).
      const DType operand = g.value(n.inputs[0]).dtype;
      const bool tf32 = operand == DType::kF32;
      if (tf32 && cfg.wgmma) {
        c.reject = "wgmma takes float16 or bfloat16 operands, not float32 ones (TF32 runs on mma.sync)";
        return c;
      }
      const int64_t kk = mma_k(operand), esize = static_cast<int64_t>(dtype_size(operand)), lanes = 16 / esize;
      const int64_t region_rows = out_region[out_region.size() - 2].size(), region_cols = out_region.back().size();
      const MmaWarps warps = mma_warps(region_rows, region_cols, cfg.threads / 32);
      const WgmmaGroups groups = wgmma_groups(region_rows, region_cols, cfg.threads / 128);
      const int64_t rows = cfg.wgmma ? groups.rows() : warps.rows(), cols = cfg.wgmma ? groups.cols() : warps.cols();
      // The reduction as the steps run it: whole steps, the last zero-padded beyond K.
      const int64_t step = ceil_div(std::max<int64_t>(cfg.reduce_step, kk), kk) * kk;
      const int64_t kp = ceil_div(e.reduce_extents.empty() ? 1 : e.reduce_extents[0], step) * step;
      padded_elems += rows * cols;
      (tf32 ? tf32_flops : cfg.wgmma ? wgmma_flops : tensor_flops) += 2 * rows * cols * kp;
      ++split_products;
      split_steps = kp / step;
      split_slot = rows * cols;
      // A ring of operand slices with padded rows (codegen's pitches; wgmma's core matrices are
      // not padded); the product's accumulators
      // in shared memory unless its epilogue runs from registers (planner/epilogue.h). An operand
      // copied by cp.async moves 16 bytes per instruction, another one element.
      const MmaStaging staging = mma_staging(g, n, computed, cfg);
      ring_deepened = ring_deepened || (cfg.ring_stages > 0 && (staging.async_a || staging.async_b));
      copies_ahead = copies_ahead || staging.async_a || staging.async_b;
      // A held whole in its normalization's buffer (resident_a): no A slice staged a step; the
      // buffer (the warps' rows at resident_pitch, in A's type) is charged with the normalization.
      const bool resident = resident_a(g, group, n, cfg);
      if (resident) resident_buffers[n.inputs[0]] = rows * resident_pitch(g, n) * esize;
      const int64_t pitch_a = cfg.wgmma ? step : mma_pitch_a(operand, step), pitch_b = cfg.wgmma ? cols : mma_pitch_b(operand, cols);
      tensor_smem = staging.stages * ((resident ? 0 : rows * pitch_a) + step * pitch_b) * esize +
                    (register_epilogue(g, group, *it) || paired_epilogue(g, group, *it) ? 0 : out_elems * 4);
      tensor_loads = (resident ? 0 : rows * kp / (staging.async_a ? lanes : 1)) + cols * kp / (staging.async_b ? lanes : 1);
      if (cfg.tma) {
        if (!cfg.wgmma || step != 64 || groups.n % 64 != 0 || groups.rows() > 256 || !tma_operands(g, n, computed)) {
          c.reject = "the TMA form needs wgmma, reduction steps of 64, warpgroup tiles of whole 64-column boxes (at most 256 "
                     "rows) and operands read as laid out (planner::tma_operands)";
          return c;
        }
        // The rings' 1024-byte alignment and a slot's two mbarriers (full and empty). Charged
        // otherwise as the cp.async form (its copies' issue included) until a GPU measures the
        // difference.
        tensor_smem += 2 * 1024 + 16 * staging.stages;
      }
      if (cfg.ws) {
        if (!cfg.tma || cfg.split_k > 1 || !(register_epilogue(g, group, *it) || paired_epilogue(g, group, *it))) {
          c.reject = "the warp-specialized form needs the TMA form, no split-K and the product's epilogue from registers";
          return c;
        }
        // Charged as its TMA twin, at one block an SM (below), until a GPU measures what the
        // consumers gain from issuing no copies and waiting on no slot's release.
      }
      // TF32 fragments come from shared memory an element a load, converted by one cvt each
      // (ldmatrix moves 16-bit rows): every staged element read at least once.
      if (tf32) tensor_loads += 2 * (rows + cols) * kp;
      // In flight: the steps staged ahead of what cp.async copies (the region's rows and columns: the
      // padding is zero-filled, not read); an operand loaded and stored by the threads, one
      // element each per round.
      const double a_bytes = resident ? 0.0 : static_cast<double>(std::min(rows, region_rows) * step * esize),
                   b_bytes = static_cast<double>(step * std::min(cols, region_cols) * esize);
      const int64_t sync_loads = (staging.async_a || resident ? 0 : rows * step) + (staging.async_b ? 0 : step * cols);
      const double sync_bytes = (staging.async_a ? 0 : a_bytes) + (staging.async_b ? 0 : b_bytes);
      walk(kp / step, sync_loads == 0 ? staging.ahead : 1);
      if (staging.async_b && !cfg.tma && !cfg.ws) ring_fill(*it, kp / step, staging.ahead);
      in_flight = std::min(in_flight, staging.ahead * (a_bytes + b_bytes - sync_bytes) +
                                          (sync_loads > 0 ? sync_bytes / static_cast<double>(ceil_div(sync_loads, cfg.threads)) : 0));
    } else if (!(cfg.mma && core && (*it == core->scores || *it == core->output))) {  // those: the flash branch
      const int64_t flops = numel(e.out_shape) == 0 ? 0 : node_flops(g, n) * out_elems / numel(e.out_shape);
      tile_flops += flops;
      if (core && (absorbed.count(*it) || *it == core->output)) keyed_ops += flops;
    }
    // Special functions (core/ops.h); flash attention's softmax is charged in its branch below.
    if (numel(e.out_shape) > 0 && !(core && *it == core->softmax)) {
      const int64_t special = node_special_ops(g, n) * out_elems / numel(e.out_shape);
      tile_special += special;
      if (core && absorbed.count(*it)) keyed_special += special;
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int v = n.inputs[k];
      if (v == kNoValue || in_regions[k].empty()) continue;
      if (causal && causal->from_indices && *it == causal->node && v == causal->operand) continue;
      if (n.op == "Gather" && k == 0 && !produced.count(v)) {
        // The indices pick rows at run time (the region spans the whole axis): a tile loads at
        // most as many rows as it reads indices, charged as one run (an embedding table's rows
        // are hundreds of bytes, so scattered rows cost what contiguous ones do).
        Region rows = in_regions[0];
        Interval& along = rows[static_cast<size_t>(normalize_axis(n.attrs.i("axis"), static_cast<int64_t>(rows.size()), "axis"))];
        along.hi = along.lo + std::min(along.size(), region_elems(in_regions[1])) - 1;
        read_into(loads[v], rows);
        continue;
      }
      if (produced.count(v)) {
        hull_into(regions[v], in_regions[k]);
      } else {
        read_into(loads[v], in_regions[k]);
      }
    }
    // Shared memory of the generic schedule (codegen/lower_group): a staged contraction keeps one
    // reduction step of each operand (16-bit and padded on tensor cores) and its accumulators;
    // every other anchor keeps its output region unless it is the root; a normalization keeps its
    // rows' statistics (below).
    const bool anchor = runs_as_stage(n);
    anchors += anchor && !absorbed.count(*it) ? 1 : 0;  // flash attention's core is one stage
    for (RingFill& f : fills) f.preceded = f.preceded || (anchor && !absorbed.count(*it) && *it != f.node);
    if (tensor) {
      smem += tensor_smem;
      tile_loads += tensor_loads;
    } else if (absorbed.count(*it)) {
      // Computed by the flash stage a key tile at a time: nothing of its own on chip.
    } else if (core && *it == core->output) {
      // Flash attention: one matrix per block; Q's rows staged once, then per tile of `bc` keys
      // K's and V's rows staged, the scores of TM x TN micro-tiles, the online softmax (a warp per
      // row, four passes over the tile), the output's UM x UN micro-tiles rescaled and updated.
      // The output has a buffer unless it goes from the registers to the root (flash_output_view,
      // the tile's root region the view of the output's, as codegen checks on every tile).
      const bool buffered = n.outputs[0] != root && (!flash_output_view(g, group, *core) ||
                                                     region_elems(out_region) != region_elems(regions.at(root)));
      const size_t rank = out_region.size();
      std::vector<int64_t> extents;
      for (const Interval& i : out_region) extents.push_back(i.size());
      const std::optional<HeadFold> fold = head_fold(g, group, *core, extents);
      const auto uniform = [&] {  // scanned once a tile shape (FlashFacts)
        const auto [at, fresh] = facts.uniform_folds.try_emplace(cfg.tile);
        if (fresh) at->second = uniform_flash_tiles(g, group, *core, cfg.tile, *fold);
        return at->second;
      };
      if (!fold || (fold->axis >= 0 && !uniform())) {
        c.reject = "flash attention needs one matrix (one batch and head) per block, or grouped-query heads sharing K and V "
                   "from a multiple of their count in every tile";
        return c;
      }
      // Folded heads (head_fold): the block's rows are its heads' query rows, K and V staged once.
      const int64_t head_rows = out_region[rank - 2].size(), rows = head_rows * fold->heads, dv = out_region.back().size();
      const int64_t dk = core->head, keys = core->keys, bc = std::min(cfg.reduce_step, keys);
      const int64_t warps = cfg.threads / d.warp_size;
      const int64_t esize = static_cast<int64_t>(dtype_size(g.value(n.inputs[1]).dtype));
      // The key tiles a block runs: all, or under a causal mask those up to its last row's last
      // visible key, charged as their mean over the query tiles.
      const bool skip_masked = causal != nullptr;
      const int64_t queries = g.value(g.nodes()[static_cast<size_t>(core->scores)].outputs[0]).shape.rbegin()[1];
      const auto run_tiles = [&](int64_t step) {
        if (!skip_masked) return ceil_div(keys, step);
        int64_t sum = 0;
        const int64_t row_tiles = ceil_div(queries, head_rows);
        for (int64_t t = 0; t < row_tiles; ++t) sum += visible_tiles(t * head_rows, head_rows, queries, keys, step);
        key_share = static_cast<double>(sum) / static_cast<double>(row_tiles * ceil_div(keys, step));
        return ceil_div(sum, row_tiles);
      };
      if (cfg.mma) {
        // On tensor cores (a warp per 16 rows): 16-bit Q, K and V with rows padded to an odd
        // number of 16-byte units, the scores and probabilities in the product's registers; the
        // products padded to m16n8k16; per score its exponential, and about three instructions
        // (the row's maximum, its sum, half a packing cvt and the quad's exchanges).
        // wgmma (sm_90a): a warpgroup per 64 rows, Q and the key tiles as unpadded core
        // matrices read by the tensor cores at the full rate, no fragment loads.
        const int64_t rp = flash_tensor_rows(warps, cfg.wgmma);
        if (rows > rp) {
          c.reject = "flash attention on tensor cores needs a warp per 16 rows (wgmma: a warpgroup per 64): " +
                     std::to_string(rows) + " rows on " + std::to_string(warps) + " warps";
          return c;
        }
        const int64_t b16 = ceil_div(bc, 16) * 16, dk16 = ceil_div(dk, 16) * 16, dv16 = ceil_div(dv, 16) * 16;
        const int64_t kt = run_tiles(b16);
        walk(kt, 1);
        tile_special += rp * kt * (b16 + 1);  // an exponential per score, a rescale factor per row and key tile
        // Where K or V streams by cp.async the key tiles take two slots, and a whole tile's
        // copies are in flight while the previous tile is multiplied; otherwise a thread's loads
        // of a tile come in rounds, one round in flight.
        const bool ring = streams_key_tiles(g, group, *core);
        copies_ahead = copies_ahead || ring;
        const int64_t slots = ring ? 2 : 1;
        const auto pitch = [&](int64_t width) { return flash_tensor_pitch(width, cfg.wgmma); };
        const int64_t k_slot = keys_contiguous(g, group, *core) ? dk16 * pitch(b16) : b16 * pitch(dk16);
        smem += (rp * pitch(dk16) + slots * (k_slot + b16 * pitch(dv16))) * 2;  // the row sums stay in the lanes
        (cfg.wgmma ? wgmma_flops : tensor_flops) += kt * (2 * rp * b16 * dk16 + 2 * rp * dv16 * b16);
        padded_elems += rp * dv16;
        tile_loads += cfg.wgmma ? 0 : rp * dk16 + kt * b16 * (dk16 + dv16);
        tile_flops += 3 * kt * rp * b16;
        const double rounds =
            ring ? 1.0 : static_cast<double>(ceil_div(b16 * dk16, cfg.threads) + ceil_div(b16 * dv16, cfg.threads));
        in_flight = std::min(in_flight, static_cast<double>(b16 * (dk + dv) * esize) / rounds);
        // Q's fragments, S, O and P's (wgmma: Q in shared memory, P's whole tile); the rows' statistics.
        flash_registers = static_cast<int>(40 + (cfg.wgmma ? 0 : dk16 / 4) + b16 / 2 + dv16 / 2 + (cfg.wgmma ? b16 / 4 : 4) + 12);
        split_keys(ceil_div(keys, b16), dv16 / 8 * 4, rows, 2);  // the output fragments; a lane's two rows
        if (buffered) smem += out_elems * 4;
        continue;  // the SIMT form's charges below are not this form's
      }
      const auto [tm, tn] = micro_tile(rows, bc, cfg.threads);
      const auto [um, un] = micro_tile(rows, dv, cfg.threads);
      if (tm == 0 || um == 0) {
        c.reject = "micro-tiles of at most 8 x 8 on " + std::to_string(cfg.threads) + " threads cannot cover the attention tile";
        return c;
      }
      const int64_t kt = run_tiles(bc);
      walk(kt, 1);
      tile_special += rows * kt * (bc + 1);  // an exponential per score, a rescale factor per row and key tile
      smem += (ceil_div(rows, tm) * tm * (dk + 1) + ceil_div(bc, tn) * tn * (dk + 1) + bc * dv + rows * bc + 2 * rows) * 4;
      // Q, K and V staged a 16-byte chunk a load where wide_operand allows (a thread's chunks in
      // batches of kVectorStagingLoads, each batch one round of loads in flight: slice_rounds),
      // else an element a load and a round.
      const auto lanes_of = [&](int matmul, int operand, int64_t cols) {
        const std::optional<StridedView> view = wide_operand(g, group, *core, matmul, operand);
        return view && cols % wide_lanes(g, *view) == 0 ? wide_lanes(g, *view) : int64_t{1};
      };
      const int64_t lq = lanes_of(core->scores, 0, dk), lk = lanes_of(core->scores, 1, dk), lv = lanes_of(core->output, 1, dv);
      tile_loads += rows * dk / lq + kt * bc * (dk / lk + dv / lv);
      const double qk = static_cast<double>(rows * kt * bc * dk), pv = static_cast<double>(rows * kt * bc * dv);
      tile_loads += static_cast<int64_t>(qk / static_cast<double>(tn) + qk / static_cast<double>(tm) +
                                         pv / static_cast<double>(un) + pv / static_cast<double>(um)) + 4 * rows * kt * bc;
      const auto staging_rounds = [&](int64_t elements, int64_t per_load) {
        return per_load == 1 ? ceil_div(elements, static_cast<int64_t>(cfg.threads)) : slice_rounds(elements, per_load);
      };
      const double rounds = static_cast<double>(staging_rounds(bc * dk, lk) + staging_rounds(bc * dv, lv));
      in_flight = std::min(in_flight, static_cast<double>(bc * (dk + dv) * esize) / rounds);
      flash_registers = static_cast<int>(32 + tm * tn + tm + tn + 2 * um * un + 2 * ceil_div(rows, warps));
      split_keys(ceil_div(keys, bc), um * un, rows, ceil_div(rows, warps));  // the output micro-tiles; a warp's batches of rows
      if (buffered) smem += out_elems * 4;
    } else if (n.op == "Conv") {
      // Conv (codegen/lower_group): without a step every output reads its window and weights
      // (two loads per multiply-add); C_in/groups == 1 (depthwise) with a step stages the input
      // window of the tile once and reads the weights per tap; otherwise an implicit GEMM over
      // K = C_in/groups x window: per step the weight slice (M x step) and the im2col patches of
      // every group the tile's channels touch (groups x step x P) are loaded once, and each
      // multiply-add of a TM x TN micro-tile reads 1/TN of an A and 1/TM of a B element from
      // shared memory.
      const Shape& w = g.value(n.inputs[1]).shape;
      const int64_t k = numel(w) / w[0], cin_g = w[1], cout_g = w[0] / n.attrs.i("group", 1);
      const int64_t m = out_region[1].size(), pixels = out_elems / std::max<int64_t>(1, m);
      if (cfg.reduce_step <= 0) {
        tile_loads += 2 * out_elems * k;
      } else if (cin_g == 1) {
        smem += region_elems(in_regions[0]) * 4;
        tile_loads += region_elems(in_regions[0]) + 2 * out_elems * k;
      } else {
        const int64_t spanned = out_region[1].hi / cout_g - out_region[1].lo / cout_g + 1;
        const int64_t step = cfg.reduce_step, steps = ceil_div(k, step);
        // In flight: with the ring (conv_staging), its steps ahead by cp.async; else a round of
        // the threads' batched loads (each round waited for before its stores to shared memory).
        const MmaStaging ring = conv_staging(g, n, produced, cfg);
        ring_deepened = ring_deepened || (cfg.ring_stages > 0 && ring.async_b);
        copies_ahead = copies_ahead || ring.async_b;
        walk(steps, ring.async_b ? ring.ahead : 1);
        const double step_bytes = static_cast<double>((m + spanned * pixels) * step * 4);
        if (ring.async_b) {
          smem += ring.stages * (m * conv_pitch_a(ring, step) + spanned * step * pixels) * 4;
          in_flight = std::min(in_flight, ring.ahead * step_bytes);
        } else {
          smem += (m * conv_pitch_a(ring, step) + spanned * pixels * step) * 4;
          in_flight = std::min(in_flight, step_bytes / static_cast<double>(slice_rounds(m * step, 1) +
                                                                           slice_rounds(spanned * step * pixels, 1)));
        }
        const auto [tm, tn] = micro_tile(m, pixels, cfg.threads);
        uncovered = uncovered || tm == 0;
        // Issue slots of the staging: a patch element decodes its K row into its channel and taps
        // and checks the image's bounds; a weight element is read as laid out (threads) or moves
        // in a 16-byte chunk of 4 (the ring).
        const int64_t weight_issue = ring.async_b ? m / 4 : m * kWeightElementIssue;  // a K index's weights
        tile_loads += (spanned * pixels * kPatchElementIssue + weight_issue) * step * steps;
        if (tm > 0) {
          tile_loads += out_elems * k / tn + out_elems * k / tm;
          ++split_products;  // its accumulators in registers: split-K applies
          split_steps = steps;
          split_slot = tm * tn * cfg.threads;
        }
      }
      if (n.outputs[0] != root) smem += out_elems * 4;
    } else if (gemv) {
      // The GEMV form: per step, A's slice staged (rows x step) and each thread's rows of B read
      // as 16-byte vectors of columns (slices = threads / column vectors), kGemvLoads of them in
      // flight before the first is multiplied; at the end the slices' partial products (slices x
      // rows x their columns) summed in shared memory in two rounds.
      const int64_t rows = out_region[out_region.size() - 2].size(), cols = out_region.back().size();
      const DType at = g.value(n.inputs[0]).dtype, bt = g.value(n.inputs[1]).dtype;
      const int64_t lanes = vector_elements(bt), vecs = ceil_div(cols, lanes);
      const int64_t k = e.reduce_extents.empty() ? 1 : e.reduce_extents[0], step = cfg.reduce_step;
      if (vecs > cfg.threads) {
        c.reject = "the GEMV form needs a thread per column vector: " + std::to_string(vecs) + " on " +
                   std::to_string(cfg.threads) + " threads";
        return c;
      }
      const int64_t slices = cfg.threads / vecs, plane = rows * vecs * lanes;
      const int64_t parts = std::clamp<int64_t>(cfg.threads / plane, 1, slices);  // the sum's first round
      smem += (rows * step + (slices + parts) * plane + out_elems) * 4;
      const auto [vec_a, vec_b] = vector_operands(g, n, computed, out_region);
      const int64_t a_lanes = cfg.vector >= 4 && vec_a ? vector_elements(at) : 1;
      tile_loads += ceil_div(rows * k, a_lanes) + k * (vec_b ? vecs : cols);
      const int64_t per_thread = ceil_div(step, slices);  // rows of B a thread reads a step, kGemvLoads a batch
      const auto rounds = static_cast<double>(slice_rounds(rows * step, a_lanes) + ceil_div(per_thread, kGemvLoads));
      const double step_bytes = static_cast<double>(rows * step * static_cast<int64_t>(dtype_size(at)) +
                                                    step * cols * static_cast<int64_t>(dtype_size(bt)));
      in_flight = std::min(in_flight, step_bytes / rounds);
      const int64_t batch_registers = staging_batch(step, static_cast<int>(slices), kGemvLoads) * 4;  // a batch's 16-byte vectors
      gemv_registers = std::max<int>(gemv_registers, static_cast<int>(32 + rows * lanes + batch_registers + 8));
      gemv_taken = true;
      // Split-K: a block's share of the steps, its summed plane (rows x the vectors' columns) a
      // thread's share of it at a time published and summed by the tile's last block.
      ++split_products;
      split_steps = ceil_div(k, step);
      split_slot = ceil_div(plane, cfg.threads) * cfg.threads;
    } else if (dp4a_matmul(g, n) && cfg.reduce_step > 0) {
      // The dp4a form (codegen/stages/dp4a_matmul.h): per step A's rows x step and B's step x
      // columns in words of 4 bytes along K (A's rows padded by a word), a dp4a per 4 products,
      // each thread's TM x TN micro-tile reading TM A words and TN B words per 4 K entries; the
      // product to shared memory (64-bit integers) unless its epilogue runs from registers.
      // Staging: a word of A per load where the operand is a row-major input whose K is a
      // multiple of 4 (else a byte a load), B four rows of four columns in four word loads (its
      // columns a multiple of 4) or a byte a load.
      const int64_t region_rows = out_region.size() >= 2 ? out_region[out_region.size() - 2].size() : 0;
      const int64_t region_cols = out_region.empty() ? 0 : out_region.back().size();
      const int64_t k = e.reduce_extents.empty() ? 1 : e.reduce_extents[0], step = cfg.reduce_step, words = step / 4;
      const auto [tm, tn] = micro_tile(region_rows, region_cols, cfg.threads);
      if (out_elems != region_rows * region_cols || (!cfg.mma && tm == 0)) {
        c.reject = "the dp4a form needs one matrix a block, covered by the threads' micro-tiles of at most 8 x 8";
        return c;
      }
      // On tensor cores (m16n8k32) the slices span the warps' fragments (mma_warps), padded.
      const MmaWarps warps = mma_warps(region_rows, region_cols, cfg.threads / d.warp_size);
      const int64_t rows = cfg.mma ? warps.rows() : region_rows, cols = cfg.mma ? warps.cols() : region_cols;
      smem += (rows * (cfg.mma ? imma_pitch_a(step) : dp4a_pitch_a(step)) + words * (cfg.mma ? imma_pitch_b(cols) : cols)) * 4;
      // The epilogue from registers (planner/epilogue.h): on tensor cores wherever the product's
      // uses allow, on dp4a where each micro-tile row is whole 16-byte runs.
      const auto epilogue = register_epilogue(g, group, *it);
      if (!(epilogue && (cfg.mma || sixteen_byte_runs(g, *epilogue, tn)))) smem += out_elems * 8;
      const int64_t steps = ceil_div(k, step);
      walk(steps, 1);
      ++split_products;  // its accumulators in registers: split-K applies
      split_steps = steps;
      split_slot = (cfg.mma ? 4 * warps.fm * warps.fn : tm * tn) * cfg.threads;
      const bool a_words = !produced.count(n.inputs[0]) && k % 4 == 0;
      const bool b_words = !produced.count(n.inputs[1]) && g.value(n.inputs[1]).shape.back() % 4 == 0;
      const int64_t staged = steps * (ceil_div(rows * step, a_words ? 4 : 1) + ceil_div(step * cols, b_words ? 4 : 1));
      const int64_t product_flops = numel(e.out_shape) == 0 ? 0 : node_flops(g, n) * out_elems / numel(e.out_shape);
      if (cfg.mma) {
        // Per 32 of K each warp reads 4 words of each A fragment and 2 of each B fragment and
        // issues fm x fn mma (the padded region's 2 x rows x cols x K at the int8 tensor rate).
        tile_loads += staged + steps * (step / 32) * (cfg.threads / d.warp_size) * d.warp_size * (4 * warps.fm + 2 * warps.fn);
        tile_flops -= product_flops;
        imma_flops += 2 * rows * cols * steps * step;
        // A thread's accumulators (fm x fn fragments of 4) and fragments (4 fm + 2 fn words).
        imma_registers = static_cast<int>(40 + 4 * warps.fm * warps.fn + 4 * warps.fm + 2 * warps.fn);
      } else {
        tile_loads += staged + steps * words * (ceil_div(region_rows, tm) * ceil_div(region_cols, tn)) * (tm + tn);
        // dp4a: the product's 2 x M x N x K operations at Device::dp4a_tops, issued with the
        // rest (planner/device.h).
        dp4a_flops += product_flops;
      }
      const double step_bytes = static_cast<double>((region_rows + region_cols) * step);
      in_flight = std::min(in_flight, step_bytes / static_cast<double>(ceil_div(ceil_div(staged, steps), cfg.threads)));
    } else if (is_contraction(n) && cfg.reduce_step > 0) {
      std::vector<Interval> step;
      for (size_t r = 0; r < e.reduce_extents.size(); ++r) {
        step.push_back({0, (r == 0 ? std::min(cfg.reduce_step, e.reduce_extents[r]) : e.reduce_extents[r]) - 1});
      }
      const auto staged = input_regions(g, n, e, out_region, step);
      // The product's accumulators, unless a MatMul's register micro-tiles cover its region (one
      // matrix) and its epilogue runs from them (planner/epilogue.h).
      const int64_t rows = out_region.size() >= 2 ? out_region[out_region.size() - 2].size() : 0;
      const int64_t cols = out_region.empty() ? 0 : out_region.back().size();
      const auto [tm, tn] = micro_tile(rows, cols, cfg.threads);
      // The operand slices: one of each, or (simt_staging) a ring of them in padded rows.
      const bool one_matrix = n.op == "MatMul" && out_region.size() >= 2 && out_elems == rows * cols && tm > 0;
      const MmaStaging ring = one_matrix ? simt_staging(g, n, computed, cfg) : MmaStaging{};
      ring_deepened = ring_deepened || (cfg.ring_stages > 0 && ring.async_b);
      copies_ahead = copies_ahead || ring.async_b;
      if (ring.async_b) {
        smem += ring.stages * (rows * simt_pitch_a(ring, cfg.reduce_step) + cfg.reduce_step * simt_pitch_b(cols)) * 4;
      } else {
        for (size_t k = 0; k < 2 && k < n.inputs.size(); ++k) smem += region_elems(staged[k]) * 4;
      }
      const auto epilogue = one_matrix ? register_epilogue(g, group, *it) : std::nullopt;
      const bool in_registers = epilogue && sixteen_byte_runs(g, *epilogue, tn);
      if (!in_registers) smem += out_elems * 4;
      if (one_matrix) {
        // Each multiply-add of a thread's TM x TN micro-tile reads 1/TN of an A and 1/TM of a B
        // element from shared memory (TM + TN loads a K index), as the implicit-GEMM Conv's.
        const int64_t depth = e.reduce_extents.empty() ? 1 : e.reduce_extents[0];
        tile_loads += out_elems * depth / tn + out_elems * depth / tm;
        ++split_products;
        split_steps = ceil_div(depth, cfg.reduce_step);
        split_slot = tm * tn * cfg.threads;
      }
      if (n.op == "MatMul") {
        const int64_t steps = ceil_div(e.reduce_extents.empty() ? 1 : e.reduce_extents[0], cfg.reduce_step);
        walk(steps, ring.async_a && ring.async_b ? ring.ahead : 1);
        if (ring.async_b) ring_fill(*it, steps, ring.async_a ? ring.ahead : 1);
      }
      // Staging issues one load per element, or one per 16 bytes where the operand moves in vectors.
      const auto [vec_a, vec_b] = vector_operands(g, n, computed, out_region);
      int64_t rounds = 0;
      double step_bytes = 0, async_bytes = 0;
      for (size_t k = 0; k < 2 && k < n.inputs.size(); ++k) {
        const bool vectors = cfg.vector >= 4 && (k == 0 ? vec_a : vec_b);
        const int64_t lanes = vectors ? vector_elements(g.value(n.inputs[k]).dtype) : 1;
        tile_loads += ceil_div(region_elems(in_regions[k]), lanes);
        const double bytes = static_cast<double>(region_elems(staged[k]) * static_cast<int64_t>(dtype_size(g.value(n.inputs[k]).dtype)));
        if (k == 0 ? ring.async_a : ring.async_b) {
          async_bytes += bytes;
          continue;
        }
        rounds += slice_rounds(region_elems(staged[k]), lanes);
        step_bytes += bytes;
      }
      // In flight: the ring's steps ahead of the one multiplied, copied by cp.async, and the
      // slices the threads load, a round of loads at a time (each round waited for before its
      // stores to shared memory).
      if (n.op == "MatMul" && (rounds > 0 || async_bytes > 0)) {
        in_flight = std::min(in_flight, ring.ahead * async_bytes + (rounds > 0 ? step_bytes / static_cast<double>(rounds) : 0));
      }
    } else if (anchor && n.outputs[0] != root && !row_handed(*it, out_region)) {
      const auto resident = resident_buffers.find(n.outputs[0]);
      smem += resident != resident_buffers.end() ? resident->second : out_elems * 4;
    }
    if (find_op(n.op)->kind == OpKind::kNormalization && !absorbed.count(*it)) {
      // Held in registers (planner/held_rows.h), or two floats a row of statistics; with several
      // warps per row, two a warp where their partials meet (codegen/stages/row_stats.h).
      const int64_t rows = normalization_rows(g, n, out_region), warps = cfg.threads / 32;
      const HeldRows held = held_rows(g, group, n, cfg.threads, rows);
      smem += (held.held ? 0 : 2 * 4 * rows) + (held.warps_per_row > 1 ? 2 * 4 * warps : 0);
      // Its rows a warp at a time: a round of a row's loads, each waited for, per `warps` rows
      // (measured on an H200: BERT's LayerNorm fused into the FFN's first product, 32 rows on 4
      // warps a block and one block an SM, took 25.8 to 56.4 µs against 5.8 modeled without it).
      reduce_rounds += ceil_div(rows, warps);
    }
    // The generic reduction stage (codegen/stages/reduce.h): a thread's loads of an output come in
    // rounds of kReductionLoadsInFlight, each waited for (Little's law for one thread): one thread
    // an output takes ceil(outputs / threads) x ceil(count / 8) rounds, the cooperative form
    // (reduction_lanes) a round per 8 of a lane's share, per batch of outputs; several warps per
    // output meet in shared memory (a float a warp).
    const bool generic = anchor && !absorbed.count(*it) && !(core && *it == core->output) && !tensor && !gemv &&
                         find_op(n.op)->kind != OpKind::kNormalization && n.op != "ScatterND" &&
                         !(is_contraction(n) && cfg.reduce_step > 0) && !e.reduce_extents.empty();
    if (generic) {
      int64_t count = 1;
      for (int64_t ext : e.reduce_extents) count *= ext;
      const ReductionForm form = reduction_form(g, n, out_elems, cfg.threads, cfg.split_k, &group.nodes);
      const int64_t lanes = form.lanes;
      if (form.columns) {
        // The columns form: batches of 32 outputs, a warp's share of the rows a round per 8; a
        // float a thread of partials.
        const int64_t warps = cfg.threads / kWarp;
        reduce_rounds += ceil_div(out_elems, kWarp) * ceil_div(ceil_div(count, warps), kReductionLoadsInFlight);
        smem += 4 * cfg.threads;
      } else if (lanes > 0) {
        // A reduction whose lanes step along an outer axis of its input reads a row apart: a sector
        // requested for each element, from L2 (the region's sectors are counted once below).
        if (form.row_apart) {
          strided_l2 += out_elems * count * (d.sector_bytes - static_cast<int64_t>(dtype_size(g.value(n.inputs[0]).dtype)));
        }
        // With split-K, a block reduces its split's slice of the space; the form splits when the
        // tile's outputs are one batch, a float a thread, into at most a lane's share of splits.
        const int64_t batches = ceil_div(out_elems, cfg.threads / lanes);
        const int64_t slice = ceil_div(count, static_cast<int64_t>(std::max(1, cfg.split_k)));
        reduce_rounds += batches * ceil_div(ceil_div(slice, lanes), kReductionLoadsInFlight);
        if (lanes > 32) {
          // A float a warp; for ArgMax and ArgMin a u32 index a warp beside it, 16-byte aligned.
          smem += 4 * (cfg.threads / 32);
          if (form.pairs) smem += 15 + 4 * (cfg.threads / 32);
        }
        // Pairs do not split. Nor does a reduction of a group that reshapes: its region may be
        // larger in another tile than in the representative one (a tile of the flattened axis
        // straddling rows), and codegen sizes the batches for the largest (codegen/stages/
        // reduce.h), which must be one batch.
        if (batches == 1 && !form.pairs && !reshapes) {
          ++split_products;
          split_steps = ceil_div(count, lanes);
          split_slot = cfg.threads;
        }
      } else {
        reduce_rounds += ceil_div(out_elems, cfg.threads) * ceil_div(count, kReductionLoadsInFlight);
      }
    }
  }
  // The flash core's nodes run only the key tiles a block runs (their generic charges above
  // counted every key).
  tile_flops -= static_cast<int64_t>(static_cast<double>(keyed_ops) * (1.0 - key_share));
  tile_special -= static_cast<int64_t>(static_cast<double>(keyed_special) * (1.0 - key_share));
  // Traffic.
  int64_t l2 = 0, dram = 0;
  int64_t streamed = 0;  // DRAM bytes of what does not stay in L2 between launches
  const int64_t weights = opt.constant_bytes >= 0 ? opt.constant_bytes : constant_bytes(g);
  // An input larger than half the L2 does not stay there between launches, but the tiles running
  // at once (a wave: a block an SM at least, split-K's blocks sharing their tile's) read each of
  // its regions from DRAM once, when the wave's distinct regions fit in half the L2
  // (large_input_dram, in the candidate's tile order). Other inputs are read from DRAM once.
  std::vector<int> inputs;
  for (const auto& [v, reads] : loads) inputs.push_back(v);
  const std::map<int, std::vector<bool>> moves = moving_axes(g, group, root, root_tile, cfg.tile, rs, large_inputs(g, inputs, d));
  const int64_t wave = wave_tiles(d, cfg);
  const std::vector<size_t> order = tile_order(cfg, rs.size());
  for (const auto& [v, reads] : loads) {
    const Value& val = g.value(v);
    int64_t per_tile = reads_sector_bytes(reads, val, d.sector_bytes);
    if (keyed_inputs.count(v)) per_tile = static_cast<int64_t>(std::ceil(static_cast<double>(per_tile) * key_share));
    const int64_t all_tiles = per_tile * c.tiles;
    const int64_t size = numel(val.shape) * static_cast<int64_t>(dtype_size(val.dtype));
    const int64_t from_dram = size <= d.l2_bytes / 2
                                  ? std::min(size, all_tiles)
                                  : large_input_dram(per_tile, c.tiles, moves.at(v), ntiles, order, wave, d.l2_bytes / 2);
    l2 += all_tiles;
    dram += from_dram;
    if (size > d.l2_bytes / 2 || (val.is_constant() && weights > d.l2_bytes / 2)) streamed += from_dram;
  }
  for (int o : group.outputs) {
    const Value& val = g.value(o);
    const int64_t size = numel(val.shape) * static_cast<int64_t>(dtype_size(val.dtype));
    l2 += size;
    dram += size;
  }
  l2 += strided_l2 * c.tiles;
  // Split-K: each tile's blocks write their partial products and the last reads them all back
  // (in L2, unless they exceed half of it), then sums them alone per tile (below) ...
  const int64_t splits = std::max(1, cfg.split_k);
  double split_sum_us = 0;
  if (splits > 1) {
    if (anchors != 1 || split_products != 1 || split_steps < splits) {
      c.reject = "split-K needs one staged MatMul or Conv (accumulators in registers), cooperative reduction (not ArgMax "
                 "or ArgMin; its outputs one batch) or flash attention as the group's only anchor, with at least " +
                 std::to_string(splits) + " reduction steps (a reduction's: a lane's share of its elements; flash attention's: key tiles)";
      return c;
    }
    const int64_t partial_bytes = c.tiles * splits * split_slot * 4;
    l2 += 2 * partial_bytes;
    if (partial_bytes > d.l2_bytes / 2) dram += 2 * partial_bytes;
    smem += 16;  // the last block's flag
    const double reducing = std::min(1.0, static_cast<double>(c.tiles) / d.sms);  // the SMs the last blocks run on
    // ... after the hand-over, three dependent round trips to L2: each block's fence waits for
    // its partials to land, the arrival's atomic, the last block's loads of the partials
    // (measured on an H200: split-K candidates took 2.54x their modeled time in the median where
    // unsplit ones took 1.88x; with the hand-over charged, the model's pick among a group's
    // measured candidates is a median 3.8% slower than the best, where it was 4.4%, the mean
    // 10.9% where it was 15.0%, the worst 118% where it was 178%: bench/model_vs_measured).
    split_sum_us = static_cast<double>(partial_bytes) / (d.l2_bandwidth_gbps * 1e3 * reducing) +
                   kSplitHandOverLatencies * d.dram_latency_ns / 1e3;
  }
  c.l2_bytes = l2;
  c.dram_bytes = dram;
  c.smem_bytes = smem;
  if (cfg.ring_stages > 0 && (!ring_deepened || cfg.ring_stages < (cfg.wgmma ? 4 : 3) || cfg.ring_stages > kMaxRingStages)) {
    c.reject = "stages=" + std::to_string(cfg.ring_stages) + ": " +
               (ring_deepened ? "a ring holds " + std::to_string(cfg.wgmma ? 4 : 3) + " to " + std::to_string(kMaxRingStages) + " stages"
                              : std::string("no staged contraction of the candidate copies its operands through a cp.async ring"));
    return c;
  }
  // Threads and registers.
  const int64_t tile_elems = region_elems(root_tile);
  if (cfg.ws && anchors != 1) {
    c.reject = "the warp-specialized form needs its MatMul as the group's only anchor";
    return c;
  }
  // The block's threads: the candidate's, and the warp-specialized form's producer warpgroup.
  const bool warps = cfg.threads > 0 && cfg.threads % d.warp_size == 0;
  const WarpSpecializedRegisters ws = cfg.ws && warps ? warp_specialized_registers(cfg.threads) : WarpSpecializedRegisters{};
  const int block_threads = cfg.ws && warps ? ws.block_threads : cfg.threads;
  if (!warps || block_threads > d.max_threads_per_block) {
    c.reject = "threads " + std::to_string(block_threads) + " not a warp multiple within the block limit";
    return c;
  }
  const int64_t per_thread = std::max<int64_t>(1, ceil_div(std::max(tile_elems, padded_elems), cfg.threads));
  const bool contraction = std::any_of(group.nodes.begin(), group.nodes.end(),
                                       [&](int n) { return is_contraction(g.nodes()[static_cast<size_t>(n)]); });
  // A contraction's thread holds its accumulators and about as many operand values; a wgmma
  // reads its operands from shared memory, and its thread holds the accumulators and addresses.
  c.registers = static_cast<int>(std::min<int64_t>(
      100000, cfg.wgmma ? 40 + per_thread : 24 + per_thread * (contraction ? 2 : 1) + 2 * cfg.vector));
  c.registers = std::max(c.registers, gemv_registers);  // the GEMV form's accumulators: rows x a vector
  c.registers = std::max(c.registers, flash_registers);  // flash attention's micro-tiles and row statistics
  c.registers = std::max(c.registers, imma_registers);
  if (cfg.gemv && !gemv_taken) {
    c.reject = "no MatMul of the group takes the GEMV form (one matrix of at most 8 rows, B an input of the group)";
    return c;
  }
  if (c.registers > (cfg.ws ? ws.consumer : d.max_registers_per_thread)) {
    c.reject = "needs ~" + std::to_string(c.registers) + " registers per thread";
    return c;
  }
  if (cfg.ws) c.registers = ws.entry;  // every thread's at launch: the block's share of the register file
  if (uncovered) {
    c.reject = "micro-tiles of at most 8 x 8 on " + std::to_string(cfg.threads) + " threads cannot cover the convolution";
    return c;
  }
  if (smem > d.shared_memory_per_block_optin) {
    c.reject = "needs " + std::to_string(smem) + " bytes of shared memory per block";
    return c;
  }
  int64_t bps = std::min<int64_t>(d.max_blocks_per_sm, d.max_threads_per_sm / block_threads);
  bps = std::min<int64_t>(bps, d.registers_per_sm / (static_cast<int64_t>(c.registers) * block_threads));
  if (smem > 0) bps = std::min<int64_t>(bps, d.shared_memory_per_sm / smem);
  if (bps <= 0) {
    c.reject = "no block fits on an SM";
    return c;
  }
  c.blocks_per_sm = static_cast<int>(bps);
  // The tail: the busiest SM runs ceil(tiles / SMs) blocks, which share its throughput whether
  // they are resident together or one after another; the others run fewer. (Counting waves of
  // every resident slot instead made a block that needs less shared memory, and so fits more
  // often per SM, look slower on the same grid.)
  // (Split-K: the blocks are the tiles' splits, each a share of its tile's arithmetic.)
  const int64_t blocks = c.tiles * splits;
  const int64_t per_sm = ceil_div(blocks, static_cast<int64_t>(d.sms));  // blocks on the busiest SM
  const int64_t resident_blocks = std::min<int64_t>(bps, per_sm);       // ... of them resident at once
  const double busy = std::min(1.0, static_cast<double>(blocks) / d.sms);
  const double tail = static_cast<double>(blocks) / static_cast<double>(per_sm * d.sms);
  c.efficiency = busy * (0.5 + 0.5 * tail);
  const double dram_us = static_cast<double>(dram) / (d.dram_bandwidth_gbps * 1e3);
  const double l2_us = static_cast<double>(l2) / (d.l2_bandwidth_gbps * 1e3);
  // An issued load takes an issue slot like an FMA (2 flops); tensor-core arithmetic runs at its
  // instruction's rate on the device (mma.sync's, or wgmma's peak) times the share a kernel
  // sustains (kTensorSustained, as cuBLASLt's calls are charged), special functions at the special
  // function units' rate, each pipe overlapped with the issue of everything else.
  const double issue_us = static_cast<double>((tile_flops - dp4a_flops + 2 * tile_loads) * c.tiles) / (d.fp32_tflops * 1e6) +
                          static_cast<double>(dp4a_flops * c.tiles) / (d.dp4a_tops() * 1e6);
  const double tensor_us = (static_cast<double>(tensor_flops * c.tiles) / (d.mma_sync_fp16_tflops * 1e6) +
                            static_cast<double>(tf32_flops * c.tiles) / (d.mma_sync_tf32_tflops * 1e6) +
                            static_cast<double>(wgmma_flops * c.tiles) / (d.fp16_tensor_tflops * 1e6) +
                            static_cast<double>(imma_flops * c.tiles) / (kImmaPerFp16Mma * d.mma_sync_fp16_tflops * 1e6)) /
                           kTensorSustained;
  const double special_us = static_cast<double>(tile_special * c.tiles) / d.special_ops_per_us();
  // Each SM issues from four schedulers, each from its own warps (every NVIDIA SM since Volta),
  // and a scheduler needs two warps to cover one's dependent latencies with the other's work:
  // with fewer than eight warps resident on an SM, the rest of its issue slots and pipes idle
  // (measured on an H200: mma.sync candidates 1.45x slower at 2 warps an SM than at 8, 1.14x at
  // 4, the same at 16; bench/model_vs_measured).
  const double resident_warps = static_cast<double>(resident_blocks * (cfg.threads / d.warp_size));
  const double issuing = std::min(1.0, resident_warps / (2 * kWarpSchedulersPerSm));
  const double compute_us = std::max({issue_us, tensor_us, special_us}) / issuing;
  c.issue_us = issue_us;
  // Little's law: the resident blocks' bytes in flight sustain at most in_flight x blocks per
  // DRAM latency of bandwidth, for what streams from DRAM (inputs larger than half the L2; smaller
  // ones stay in L2 between launches, where latency is a fraction of DRAM's).
  double latency_us = 0;
  if (std::isfinite(in_flight) && in_flight > 0) {
    const double active = static_cast<double>(std::min<int64_t>(d.sms, blocks));
    latency_us = static_cast<double>(streamed) * d.dram_latency_ns / (1e3 * active * static_cast<double>(resident_blocks) * in_flight);
    c.bytes_in_flight = static_cast<int64_t>(in_flight);
  }
  // The generic reduction and row-statistics stages' rounds of loads, a latency each, and a staged
  // contraction's steps, each waiting for its operands (1/ahead of a latency where a ring copies
  // them ahead, one where the threads load them; a split-K block walks its share of the steps),
  // block after block on the busiest SM as its resident slots take them; but the first, which
  // every kernel waits for (the launch overhead below holds it, as it does for kernels charged no
  // latency). Measured on an H200 (the second lease's tune, bench/model_vs_measured): mma.sync
  // candidates that differ only in their step took 267 ns more a step in the median (ahead 2:
  // 350 ns modeled); with the steps charged, the median rank correlation within a group went
  // 0.08 -> 0.24 and the pick's median regret 14.3% -> 9.1% (each half of the groups alike).
  const int64_t in_turn = ceil_div(per_sm, resident_blocks);
  double ahead_of_stages = 0;  // the ring fills' latencies that overlap the stages before them (RingFill)
  for (const RingFill& f : fills) {
    if (f.preceded) ahead_of_stages += std::min(f.latency, static_cast<double>(reduce_rounds) + step_rounds - f.mark);
  }
  c.fills_ahead = ahead_of_stages;
  const double rounds = static_cast<double>(reduce_rounds) + step_rounds / static_cast<double>(splits) - ahead_of_stages;
  if (rounds > 0) {
    latency_us = std::max(latency_us, std::max(0.0, rounds * static_cast<double>(in_turn) - 1) * d.dram_latency_ns / 1e3);
  }
  // A group with no stage runs one element loop (codegen/stages/inline.h element_stage), its
  // threads taking the root's tile an iteration at a time, 16 bytes each where the output's rows
  // are whole vectors: an iteration's loads, then the store that waits for them. Each iteration
  // after a thread's first waits about half a latency, in the same turns (measured on an H200: in
  // one wave, candidates whose threads take one more 16-byte iteration took 331 ns more in the
  // median, 1,455 pairs; bench/model_vs_measured). A block's first is in the block cost.
  if (anchors == 0) {
    const int64_t iterations = ceil_div(element_units(g.value(root), root_tile), cfg.threads);
    latency_us = std::max(latency_us, kElementRoundLatency * static_cast<double>((iterations - 1) * in_turn) *
                                          d.dram_latency_ns / 1e3);
  }
  // A block's phases: without a cp.async ring copying ahead, a block of the generic schedule loads,
  // waits, then computes (its stages, and a staged contraction's steps, meet at barriers), so where
  // an SM's blocks come in more than one wave it hides one block's loads only behind another
  // resident block's arithmetic: with R blocks resident, 1/R of the lesser of memory and arithmetic
  // time stays exposed.
  const double memory_us = std::max(dram_us, l2_us);
  const double exposed_us = anchors > 0 && !copies_ahead && per_sm > bps
                                ? std::min(memory_us, compute_us) / static_cast<double>(bps)
                                : 0.0;
  const double throughput_us = (std::max(memory_us, compute_us) + exposed_us) / c.efficiency;
  c.latency_bound = latency_us > throughput_us;
  c.modeled_us = std::max(throughput_us, latency_us) + block_cost_us(blocks, d) + split_sum_us + opt.launch_overhead_us;
  c.flops = (tile_flops + tensor_flops + tf32_flops + wgmma_flops + imma_flops) * c.tiles;
  c.tiles = blocks;
  c.steps = ceil_div(block_steps, splits);
  c.valid = true;
  return c;
}

namespace {

// The objectives of the expansion search (lower is better): traffic per output element, as in
// Welder, and modeled time with a plain thread shape, which also sees the parallelism penalty.
double traffic_per_element(const Graph& g, const FusionGroup& group, const Device& d, const std::vector<int64_t>& tile,
                           const TilingOptions& opt) {
  TileConfig cfg;
  cfg.tile = tile;
  cfg.threads = d.warp_size;
  const Cost c = evaluate_tile(g, group, d, cfg, opt);
  int64_t elems = 1;
  for (int64_t t : tile) elems *= t;
  return static_cast<double>(c.l2_bytes) / static_cast<double>(c.tiles * elems);
}

double plain_time(const Graph& g, const FusionGroup& group, const Device& d, const std::vector<int64_t>& tile,
                  const TilingOptions& opt) {
  int64_t elems = 1;
  for (int64_t t : tile) elems *= t;
  TileConfig cfg;
  cfg.tile = tile;
  cfg.threads = static_cast<int>(std::clamp<int64_t>((elems / 4 + 31) / 32 * 32, 32, 256));
  cfg.reduce_step = 32;
  const Cost c = evaluate_tile(g, group, d, cfg, opt);
  return c.valid ? c.modeled_us : INFINITY;
}

template <typename Objective>
void expand_from(std::vector<int64_t> cur, const Shape& rs, int64_t max_elems, Objective objective,
                 std::vector<std::vector<int64_t>>& visited) {
  visited.push_back(cur);
  double cur_score = objective(cur);
  for (;;) {
    double best = cur_score;
    std::vector<int64_t> next;
    for (size_t k = 0; k < rs.size(); ++k) {
      if (cur[k] >= rs[k]) continue;
      for (int64_t extent : {std::min(cur[k] * 2, rs[k])}) {  // double the axis (the last step may be partial)
        std::vector<int64_t> cand = cur;
        cand[k] = extent;
        int64_t elems = 1;
        for (int64_t t : cand) elems *= t;
        if (elems > max_elems) continue;
        visited.push_back(cand);
        const double score = objective(cand);
        if (score < best - 1e-12 || (next.empty() && std::isinf(best) && !std::isinf(score))) {
          best = score;
          next = cand;
        }
      }
    }
    if (next.empty()) break;
    cur = next;
    cur_score = best;
  }
}

std::vector<std::vector<int64_t>> expand_tiles(const Graph& g, const FusionGroup& group, const Device& d,
                                               const Shape& rs, int64_t max_elems, const TilingOptions& opt) {
  std::vector<std::vector<int64_t>> visited;
  const std::vector<int64_t> start(rs.size(), 1);
  expand_from(start, rs, max_elems, [&](const std::vector<int64_t>& t) { return traffic_per_element(g, group, d, t, opt); },
              visited);
  expand_from(start, rs, max_elems, [&](const std::vector<int64_t>& t) { return plain_time(g, group, d, t, opt); }, visited);
  std::sort(visited.begin(), visited.end());
  visited.erase(std::unique(visited.begin(), visited.end()), visited.end());
  return visited;
}

// True if some MatMul of the group has an operand vector_operands accepts (for its whole output;
// evaluate_tile judges the tile), or some Conv streams its slices through the ring at vector
// width 4 (conv_staging).
bool vector_width_helps(const Graph& g, const FusionGroup& group) {
  std::set<int> produced;
  for (int n : group.nodes) produced.insert(g.nodes()[static_cast<size_t>(n)].outputs[0]);
  for (int n : group.nodes) {
    const Node& node = g.nodes()[static_cast<size_t>(n)];
    Region whole;
    for (int64_t extent : g.value(node.outputs[0]).shape) whole.push_back({0, extent - 1});
    const auto [a, b] = vector_operands(g, node, computed_elements(g, group, produced), whole);
    if (a || b) return true;
    if (conv_staging(g, node, produced, TileConfig{{}, 8, 32, 4}).async_b) return true;
  }
  return false;
}

// Root tiles for flash attention, by row count of the core's output and heads folded into them
// (16 to 128 rows, or all of them when fewer; or every query row of 2 to 128 / queries
// grouped-query heads, planner::head_fold): the smallest root tile (each axis a power of two,
// the whole axis, the output's row or column extent, or a divisor of a head count, alone or
// times a head's width) whose region of the output is one
// matrix, or a fold of heads, of those rows and all its columns (a head's whole width).
std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> flash_tiles(const Graph& g, const FusionGroup& group, const Shape& rs,
                                                                         const AttentionCore& core) {
  std::vector<TensorExpr> exprs;
  for (int n : group.nodes) exprs.push_back(describe(g, g.nodes()[static_cast<size_t>(n)]));
  const int root = group_root(g, group);
  const int out = g.nodes()[static_cast<size_t>(core.output)].outputs[0];
  const Shape& os = g.value(out).shape;
  const int64_t lq = os[os.size() - 2], dv = os.back();
  std::vector<std::vector<int64_t>> choices(rs.size());
  for (size_t a = 0; a < rs.size(); ++a) {
    for (int64_t t = 1; t < rs[a]; t *= 2) choices[a].push_back(t);
    for (int64_t t : {lq, dv, rs[a]}) {
      if (t >= 1 && t <= rs[a]) choices[a].push_back(t);
    }
    // Folds of heads that are no power of two (Qwen2's groups of 7): along an axis of the
    // output's head count, each divisor of it; along one of the heads' columns (heads merged
    // after the core), each divisor times a head's width.
    for (size_t b = 0; b + 2 < os.size(); ++b) {
      for (int64_t n = 3; n <= std::min<int64_t>(os[b] / 2, 128); ++n) {
        if (os[b] % n != 0) continue;
        if (rs[a] == os[b]) choices[a].push_back(n);
        if (rs[a] == os[b] * dv) choices[a].push_back(n * dv);
      }
    }
    std::sort(choices[a].begin(), choices[a].end());
    choices[a].erase(std::unique(choices[a].begin(), choices[a].end()), choices[a].end());
  }
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> best;  // (rows, heads) -> the smallest tile
  std::vector<int64_t> tile(rs.size(), 1);
  std::function<void(size_t, int64_t)> visit = [&](size_t a, int64_t elems) {
    if (a == rs.size()) {
      const std::map<int, Region> regions = tile_regions(g, group, root, representative_tile(rs, tile), &exprs);
      auto r = regions.find(out);
      if (r == regions.end()) return;
      const Region& o = r->second;
      std::vector<int64_t> extents;
      for (const Interval& i : o) extents.push_back(i.size());
      const std::optional<HeadFold> fold = head_fold(g, group, core, extents);
      if (!fold || o.back().size() != dv) return;
      int64_t rows = o[o.size() - 2].size();
      if (fold->axis >= 0) {
        rows *= fold->heads;  // grouped-query heads folded into the rows: at most 128 of them
        if (rows > 128) return;
      } else if (rows != std::min<int64_t>(lq, 128) && (rows < 16 || rows > 128 || (rows & (rows - 1)) != 0)) {
        return;
      }
      const std::pair<int64_t, int64_t> key = {rows, fold->heads};
      if (const auto slot = best.find(key); slot != best.end()) {
        int64_t have = 1;
        for (int64_t t : slot->second) have *= t;
        if (elems >= have) return;  // a tile no larger already serves
      }
      // Every tile alike: a fold's, always; one matrix's where the tiles are few enough to scan
      // (else some tile might hold two heads' rows in part: heads merged with the rows in the root).
      if ((fold->axis >= 0 || tile_count(rs, tile) <= 4096) && !uniform_flash_tiles(g, group, core, tile, *fold, &exprs)) return;
      best[key] = tile;
      return;
    }
    for (int64_t t : choices[a]) {
      if (elems * t > 32768) break;
      tile[a] = t;
      visit(a + 1, elems * t);
    }
    tile[a] = 1;
  };
  visit(0, 1);
  return best;
}

}  // namespace

namespace {

// The tile order by which the candidate reads least from DRAM under the L2 model (empty for the
// default, which ties keep): the axes of more than one tile in every order, the others after them.
std::vector<int> least_dram_order(const Graph& g, const FusionGroup& group, const Device& d, const TileConfig& cfg) {
  const std::vector<int> large = large_inputs(g, group.inputs, d);
  const int root = group_root(g, group);
  const Shape& rs = g.value(root).shape;
  if (large.empty() || rs.size() < 2 || !cfg.library.empty()) return {};
  const Region root_tile = representative_tile(rs, cfg.tile);
  const std::vector<int64_t> ntiles = tiles_along(rs, cfg.tile);
  const std::map<int, Region> regions = tile_regions(g, group, root, root_tile);
  const std::map<int, std::vector<bool>> moves = moving_axes(g, group, root, root_tile, cfg.tile, rs, large);
  int64_t tiles = 1;
  for (int64_t n : ntiles) tiles *= n;
  const int64_t wave = wave_tiles(d, cfg);
  const auto dram = [&](const std::vector<size_t>& order) {
    int64_t bytes = 0;
    for (int v : large) {
      const auto r = regions.find(v);
      if (r == regions.end()) continue;
      const Value& val = g.value(v);
      bytes += large_input_dram(sector_bytes(r->second, val.shape, val.dtype, d.sector_bytes), tiles, moves.at(v), ntiles,
                                order, wave, d.l2_bytes / 2);
    }
    return bytes;
  };
  std::vector<size_t> best = tile_order(cfg, rs.size()), axes, single;
  for (size_t a : best) (ntiles[a] > 1 ? axes : single).push_back(a);
  int64_t least = dram(best);
  std::sort(axes.begin(), axes.end());
  do {
    std::vector<size_t> order = axes;
    order.insert(order.end(), single.begin(), single.end());
    if (const int64_t bytes = dram(order); bytes < least) {
      least = bytes;
      best = order;
    }
  } while (std::next_permutation(axes.begin(), axes.end()));
  if (best == tile_order(TileConfig{}, rs.size())) return {};
  return std::vector<int>(best.begin(), best.end());
}

}  // namespace

std::vector<Candidate> tile_candidates(const Graph& g, const FusionGroup& group, const Device& d,
                                       const TilingOptions& options) {
  TilingOptions opt = options;
  std::map<std::vector<int64_t>, Region> widest;  // widest_staged_tile by tile shape, for this group
  opt.widest_tiles = &widest;
  FlashFacts flash_facts;  // the group's attention core's, for every flash candidate
  opt.flash_facts = &flash_facts;
  if (opt.constant_bytes < 0) opt.constant_bytes = constant_bytes(g);
  const int root = group_root(g, group);
  const Shape& rs = g.value(root).shape;
  bool contraction = false, integer = false;  // integer: some contraction has integer operands
  bool dp4a = false;                           // some MatMul takes the dp4a form (dp4a_matmul)
  bool unstaged_only = false;                  // some integer contraction has no staged form
  bool conv = false, window_only = true;  // a Conv group; all its Convs depthwise-like (one step)
  int64_t k_extent = 0;
  // The longest reduction space of a reduction or contraction: the generic reduction stage's
  // cooperative form (reduction_lanes) puts up to a lane per kReductionLoadsInFlight of its
  // elements on an output, so a tile of few outputs gets up to that many threads an output.
  int64_t span = 0;
  for (int n : group.nodes) {
    const Node& node = g.nodes()[static_cast<size_t>(n)];
    if (find_op(node.op)->kind == OpKind::kReduction || is_contraction(node)) {
      int64_t count = 1;
      for (int64_t r : describe(g, node).reduce_extents) count *= r;
      span = std::max(span, count);
    }
    if (is_contraction(node)) {
      contraction = true;
      integer = integer || !is_float(g.value(node.inputs[0]).dtype);
      dp4a = dp4a || dp4a_matmul(g, node);
      unstaged_only = unstaged_only || (!is_float(g.value(node.inputs[0]).dtype) && !dp4a_matmul(g, node));
      const TensorExpr e = describe(g, node);
      if (node.op == "Conv") {  // the implicit GEMM steps through C_in/groups x window
        conv = true;
        window_only = window_only && e.reduce_extents[0] == 1;
        int64_t k = 1;
        for (int64_t r : e.reduce_extents) k *= r;
        k_extent = std::max(k_extent, k);
      } else {
        k_extent = std::max(k_extent, e.reduce_extents.empty() ? 0 : e.reduce_extents[0]);
      }
    }
  }
  const std::vector<std::vector<int64_t>> tiles = expand_tiles(g, group, d, rs, 32768, opt);
  const bool vectors_help = contraction && vector_width_helps(g, group);
  std::vector<Candidate> all;
  Candidate best_rejected;
  for (const auto& tile : tiles) {
    int64_t elems = 1;
    for (int64_t t : tile) elems *= t;
    for (int threads : {32, 64, 128, 256, 512}) {
      if (threads > elems * std::max<int64_t>(64, span / kReductionLoadsInFlight) || elems > static_cast<int64_t>(threads) * 64) continue;
      const bool cooperative_only = threads > elems * 64;  // beyond 64 an output: the unstaged (step 0) form alone
      // Steps of a contraction; a Conv keeps the unstaged schedule (step 0) as a candidate, and a
      // depthwise one has a single staged form (its window in one step). An integer contraction
      // is unstaged alone (evaluate_tile).
      std::vector<int64_t> steps = {0};
      if (contraction && !unstaged_only && (!integer || d.compute_capability >= 61)) {
        if (!conv) steps.clear();
        for (int64_t s : {8, 16, 32, 64}) {
          if (s <= std::max<int64_t>(k_extent, 8) && (s == 8 || !(conv && window_only))) steps.push_back(s);
        }
      }
      // Vector width 4 where some staged MatMul operand can move in float4 quads, or a Conv can
      // stream its slices through the cp.async ring (conv_staging).
      std::vector<int> vectors = {1};
      if (vectors_help) vectors.push_back(4);
      for (int64_t step : steps) {
        if (cooperative_only && step > 0) continue;
        for (int vec : vectors) {
          if (step == 0 && vec > 1) continue;
          TileConfig cfg{tile, step, threads, vec};
          Cost c = evaluate_tile(g, group, d, cfg, opt);
          if (c.valid) {
            all.push_back({cfg, c});
          } else if (best_rejected.config.tile.empty()) {
            best_rejected = {cfg, c};
          }
        }
      }
    }
  }
  // Tensor-core candidates (sm_80+, a MatMul with 16-bit operands, or 8-bit integer ones on
  // m16n8k32): one matrix per tile, 16 to 128 rows by 8 to 128 columns, warps that each own at
  // least one and at most 16 m16n8 fragments, reduction steps of 16 (not for 8-bit), 32, 64.
  // A product whose output the group reshapes to a root of higher rank (a convolution's byte
  // product over its patches, [N, groups, F / groups, positions], reshaped to [N, F, spatial...])
  // also gets tiles of tm output channels (the root's axis 1) by whole rows of the last spatial
  // axis, tn positions or just over: the same m16n8 fragments over F x positions, where tiles over
  // the last two axes alone hold one channel's rows.
  const int64_t map = numel(Shape(rs.begin() + std::min<size_t>(2, rs.size()), rs.end()));  // the map's positions
  const bool reshaped_product = dp4a && rs.size() >= 4 && std::any_of(group.nodes.begin(), group.nodes.end(), [&](int n) {
    const Node& node = g.nodes()[static_cast<size_t>(n)];
    return dp4a_matmul(g, node) && g.value(node.outputs[0]).shape != rs && g.value(node.outputs[0]).shape.back() == map;
  });
  // A product whose columns the group splits into heads ahead of its rows (a projection x W
  // reshaped to [batch, rows, heads, width] and transposed to [batch, heads, rows, width], as
  // LLaMA's rotary embedding takes Q and K): the root's last axis is one head, so tiles over it
  // alone are at most a head wide, and each re-reads the rows of x that its neighbours read. Such
  // a product also gets tiles of several whole heads (tn / width of them, the axis before the
  // rows): the product's tile is still one matrix, rows by tn columns.
  // (The product has no heads axis of its own, one axis fewer than the root, and its columns are
  // the heads by the width: a batched product over heads, attention's, is no such product.)
  const size_t rank = rs.size();
  const bool heads_split = rank >= 3 && rs.back() % 8 == 0 && rs[rank - 3] > 1 &&
                           std::any_of(group.nodes.begin(), group.nodes.end(), [&](int n) {
                             const Node& node = g.nodes()[static_cast<size_t>(n)];
                             if (node.op != "MatMul" || !mma_matmul(g, node, opt.tf32)) return false;
                             const Shape& ps = g.value(node.outputs[0]).shape;
                             return ps.size() + 1 == rank && ps.back() == rs[rank - 3] * rs.back();
                           });
  // Wave-fitted widths (below) are plain tiles: neither several heads nor a reshaped product's.
  const auto power_of_two = [](int64_t n) { return (n & (n - 1)) == 0; };
  // `least`: the form's fewest rows (a tile of twice the rows of the root is whole already).
  const auto head_tiles = [&](int64_t tm, int64_t tn, int64_t least) {
    std::vector<std::vector<int64_t>> out;
    const int64_t heads = tn / std::max<int64_t>(rs.back(), 1);
    if (!heads_split || !power_of_two(tn) || tn <= rs.back() || tn % rs.back() != 0 || rs[rank - 3] < heads ||
        (tm > least && rs[rank - 2] <= tm / 2)) {
      return out;
    }
    std::vector<int64_t> tile(rank, 1);
    tile[rank - 3] = heads;
    tile[rank - 2] = std::min(tm, std::max<int64_t>(rs[rank - 2], 1));
    tile[rank - 1] = rs.back();
    out.push_back(tile);
    return out;
  };
  // Wave-fitted widths: tiles whose widths are powers of two can leave much of a grid's last wave
  // idle (TinyLlama's 512 x 5,632 up projection in 128 x 128 tiles: 176 blocks, one an SM, on 132
  // SMs: two waves, the second a third full). Per tile height tm of 64 rows or more (the tiles whose
  // arithmetic the waves are about) where tiles 128 wide make more than one wave (else there is no
  // last wave to fit: a grid under the SMs is the latency-bound regime, where the second H200 lease
  // measured cuBLASLt 1.3x to 1.6x faster than every generated tile, wider grids included), the
  // narrowest width (a multiple of 16, under `below`) whose tiles fill one wave of one block an SM,
  // and two. Plain tiles of the root's last two axes only.
  const auto wave_widths = [&](int64_t tm, std::vector<int64_t> widths, int64_t below) {
    const int64_t rows = rs[rs.size() - 2], cols = rs.back();
    const int64_t across_rows = numel(Shape(rs.begin(), rs.end() - 2)) * ceil_div(rows, tm);
    if (tm < 64 || rows <= tm / 2 || across_rows < 1 || across_rows * ceil_div(cols, 128) <= d.sms) {
      return widths;  // short tiles, a whole column already, or no last wave to fit
    }
    for (int64_t waves : {1, 2}) {
      const int64_t tiles_across = waves * d.sms / across_rows;
      if (tiles_across < 1) continue;
      const int64_t tn = ceil_div(ceil_div(cols, tiles_across), 16) * 16;
      if (tn > 16 && tn < below && tn < cols && std::find(widths.begin(), widths.end(), tn) == widths.end()) {
        widths.push_back(tn);
      }
    }
    return widths;
  };
  if (d.compute_capability >= 80 && rs.size() >= 2 && (has_mma_matmul(g, group, opt.tf32) || dp4a)) {
    for (int64_t tm : {16, 32, 64, 128}) {
      for (int64_t tn : wave_widths(tm, {8, 16, 32, 64, 128}, 128)) {
        // Each tile with its m16n8 fragments (rows x columns of the product it covers).
        std::vector<std::pair<std::vector<int64_t>, int64_t>> shapes;
        if (!((tm > 16 && rs[rs.size() - 2] <= tm / 2) || (tn > 8 && rs.back() <= tn / 2))) {  // else whole already
          std::vector<int64_t> tile(rs.size(), 1);
          tile[rs.size() - 2] = std::min(tm, std::max<int64_t>(rs[rs.size() - 2], 1));
          tile[rs.size() - 1] = std::min(tn, std::max<int64_t>(rs.back(), 1));
          shapes.push_back({tile, ceil_div(tile[rs.size() - 2], 16) * ceil_div(tile[rs.size() - 1], 8)});
        }
        if (reshaped_product && power_of_two(tn) && !(tm > 16 && rs[1] <= tm / 2) && !(tn > 8 && map <= tn / 2)) {
          std::vector<int64_t> tile(rs.size(), 1);  // tm channels by the whole rows that hold tn positions
          tile[1] = std::min(tm, rs[1]);
          tile[rs.size() - 1] = rs.back();
          tile[rs.size() - 2] = std::clamp<int64_t>(ceil_div(tn, rs.back()), 1, rs[rs.size() - 2]);
          const int64_t positions = tile[rs.size() - 2] * rs.back();
          if (tn == 8 || positions <= tn || tile[rs.size() - 2] > 1) shapes.push_back({tile, ceil_div(tile[1], 16) * ceil_div(positions, 8)});
        }
        for (const std::vector<int64_t>& tile : head_tiles(tm, tn, 16)) shapes.push_back({tile, ceil_div(tile[rank - 2], 16) * ceil_div(tn, 8)});
        for (const auto& [tile, fragments] : shapes) {
          for (int warps : {1, 2, 4, 8}) {
            if (warps > fragments || fragments > 16 * warps) continue;
            for (int64_t step : {16, 32, 64}) {
              // The instruction's K: 16 (16-bit operands), 32 (8-bit integers, m16n8k32).
              const int64_t kk = dp4a ? 32 : 16;
              if (step < kk || (step > kk && step >= ceil_div(std::max<int64_t>(k_extent, 1), kk) * kk * 2)) continue;
              TileConfig cfg{tile, step, warps * d.warp_size, 1, true};
              Cost c = evaluate_tile(g, group, d, cfg, opt);
              if (c.valid) all.push_back({cfg, c});
            }
          }
        }
      }
    }
  }
  // wgmma candidates (sm_90a, a MatMul with 16-bit operands): one matrix per tile, 64 to 256
  // rows by 16 to 256 columns, one or two warpgroups, reduction steps of 16, 32, 64.
  if (has_wgmma(d) && rs.size() >= 2 && has_mma_matmul(g, group, false)) {
    for (int64_t tm : {64, 128, 256}) {
      for (int64_t tn : wave_widths(tm, {16, 32, 64, 128, 256}, 256)) {
        std::vector<std::vector<int64_t>> shapes = head_tiles(tm, tn, 64);
        if (!((tm > 64 && rs[rs.size() - 2] <= tm / 2) || (tn > 16 && rs.back() <= tn / 2))) {  // else whole already
          std::vector<int64_t> tile(rs.size(), 1);
          tile[rs.size() - 2] = std::min(tm, std::max<int64_t>(rs[rs.size() - 2], 1));
          tile[rs.size() - 1] = std::min(tn, std::max<int64_t>(rs.back(), 1));
          shapes.push_back(tile);
        }
        for (const std::vector<int64_t>& tile : shapes) {
          for (int groups : {1, 2}) {
            if (groups * 64 > tm) continue;
            for (int64_t step : {16, 32, 64}) {
              if (step > 16 && step >= ceil_div(std::max<int64_t>(k_extent, 1), 16) * 16 * 2) continue;
              TileConfig cfg{tile, step, groups * 4 * d.warp_size, 1, true};
              cfg.wgmma = true;
              Cost c = evaluate_tile(g, group, d, cfg, opt);
              if (c.valid) all.push_back({cfg, c});
              if (step == 64) {  // its TMA twin, where the operands allow (after it: it wins no tie)
                TileConfig t = cfg;
                t.tma = true;
                Cost tc = evaluate_tile(g, group, d, t, opt);
                if (tc.valid) all.push_back({t, tc});
              }
            }
          }
        }
      }
    }
  }
  // GEMV candidates (a MatMul of at most 8 rows whose B the group reads): all the root's rows (at
  // most 8), 1 to 16 column vectors of B's 16 bytes, 64 to 256 threads, steps of 128 to 1,024.
  if (rs.size() >= 2 && contraction && !conv) {
    std::set<int> produced;
    for (int n : group.nodes) produced.insert(g.nodes()[static_cast<size_t>(n)].outputs[0]);
    int64_t lanes = 0;
    for (int n : group.nodes) {
      const Node& node = g.nodes()[static_cast<size_t>(n)];
      const Shape& out = g.value(node.outputs[0]).shape;
      Region matrix;  // one matrix of the product
      for (size_t a = 0; a < out.size(); ++a) matrix.push_back({0, a + 2 < out.size() ? 0 : out[a] - 1});
      if (lanes == 0 && gemv_matmul(g, node, produced, matrix)) lanes = vector_elements(g.value(node.inputs[1]).dtype);
    }
    for (int64_t vecs : {1, 2, 4, 8, 16}) {
      if (lanes == 0 || (vecs > 1 && ceil_div(rs.back(), lanes) <= vecs / 2)) continue;  // whole already
      std::vector<int64_t> tile(rs.size(), 1);
      tile[rs.size() - 2] = std::clamp<int64_t>(rs[rs.size() - 2], 1, 8);
      tile.back() = std::min(vecs * lanes, std::max<int64_t>(rs.back(), 1));
      for (int threads : {64, 128, 256}) {
        for (int64_t step : {128, 256, 512, 1024}) {
          if (step > 128 && step >= k_extent * 2) continue;
          TileConfig cfg{tile, step, threads, 4};
          cfg.gemv = true;
          Cost c = evaluate_tile(g, group, d, cfg, opt);
          if (c.valid) all.push_back({cfg, c});
        }
      }
    }
  }
  // Flash-attention candidates (a group with an attention core): per root tile of flash_tiles,
  // tiles of 16 to 128 keys, 64 to 256 threads, and on tensor cores (16-bit cores, sm_80+) a warp
  // per 16 rows.
  if (const auto core = match_attention(g, group)) {
    const bool tensor = d.compute_capability >= 80 && tensor_attention(g, *core);
    for (const auto& [shape, tile] : flash_tiles(g, group, rs, *core)) {
      const int64_t rows = shape.first;
      for (int64_t keys : {16, 32, 64, 128}) {
        if (keys > 16 && keys >= core->keys * 2) continue;  // one tile holds them all already
        std::vector<TileConfig> forms;
        for (int threads : {64, 128, 256}) forms.push_back({tile, keys, threads});
        if (tensor) {  // a warp per 16 rows; on sm_90a also a warpgroup per 64
          forms.push_back({tile, keys, static_cast<int>(ceil_div(rows, 16)) * d.warp_size, 1, true});
          if (has_wgmma(d)) {
            forms.push_back({tile, keys, static_cast<int>(ceil_div(rows, 64)) * 4 * d.warp_size, 1, true});
            forms.back().wgmma = true;
          }
        }
        for (TileConfig& cfg : forms) {
          cfg.flash = true;
          Cost c = evaluate_tile(g, group, d, cfg, opt);
          if (c.valid) all.push_back({cfg, c});
        }
      }
    }
  }
  // Split-K (codegen/stages/split_k.h): a staged MatMul or Conv, (unstaged, in a group with a
  // reduction space of a warp's elements or more) a cooperative reduction, or flash attention
  // (its key tiles split: flash-decoding; evaluate_tile rejects other anchors) whose tiles leave
  // SMs idle also gets 2 to 16 blocks a tile, each a slice of the reduction, up to two blocks per
  // SM; unless its work takes less time than a launch: a split-K kernel shares its launch only
  // with groups of its thread count, and such a kernel gains more from sharing one with any of
  // its siblings (planner/select.h) than from its idle SMs.
  for (size_t i = 0, generated = all.size(); i < generated; ++i) {
    const TileConfig base = all[i].config;
    const int64_t base_tiles = all[i].cost.tiles;
    if ((base.reduce_step <= 0 && span < kWarp) || base_tiles >= d.sms ||
        all[i].cost.modeled_us < 2 * opt.launch_overhead_us) {
      continue;
    }
    for (int splits : {2, 4, 8, 16}) {
      if (base_tiles * splits > 2 * static_cast<int64_t>(d.sms)) break;
      TileConfig cfg = base;
      cfg.split_k = splits;
      Cost c = evaluate_tile(g, group, d, cfg, opt);
      if (c.valid) all.push_back({cfg, c});
    }
  }
  // Deeper rings (TileConfig::ring_stages): a candidate whose staged contraction copies its
  // operands through a cp.async ring (tensor cores, or SIMT staging in 16-byte vectors) also with
  // one and two stages more than its form's default, where they fit in shared memory and the
  // model expects them to pay (more bytes in flight for operands streamed from DRAM, fewer
  // latencies a step waits); elsewhere they would only tie with the default and crowd the
  // candidates a tune measures. Only a latency-bound candidate is tried: more stages shorten the
  // latency terms alone, and their shared memory can only lengthen the others.
  for (size_t i = 0, generated = all.size(); i < generated; ++i) {
    const TileConfig base = all[i].config;
    if (!all[i].cost.latency_bound || base.reduce_step <= 0 || base.gemv || base.flash || !(base.mma || base.vector >= 4)) continue;
    const int deeper = base.wgmma ? 5 : 4;
    for (int stages : {deeper, deeper + 1}) {
      TileConfig cfg = base;
      cfg.ring_stages = stages;
      Cost c = evaluate_tile(g, group, d, cfg, opt);
      if (c.valid && c.modeled_us < all[i].cost.modeled_us) all.push_back({cfg, c});
    }
  }
  // The warp-specialized twin of each TMA candidate that runs one block an SM (the large tiles
  // CUTLASS and FlashAttention-3 specialize; deeper rings included; evaluate_tile refuses split
  // ones and groups whose product is not their only anchor with its epilogue from registers):
  // charged as its twin at that occupancy, it ties with it and comes after it. Where the TMA form
  // fits more blocks an SM its twin would only model slower and crowd the candidates a tune
  // measures.
  for (size_t i = 0, generated = all.size(); i < generated; ++i) {
    if (!all[i].config.tma || all[i].cost.blocks_per_sm > 1) continue;
    TileConfig w = all[i].config;
    w.ws = true;
    Cost c = evaluate_tile(g, group, d, w, opt);
    if (c.valid) all.push_back({w, c});
  }
  // Each candidate in the tile order that reads least from DRAM (planner/tiling.h's L2 model).
  for (Candidate& cand : all) {
    TileConfig ordered = cand.config;
    ordered.order = least_dram_order(g, group, d, cand.config);
    if (ordered.order.empty()) continue;
    const Cost c = evaluate_tile(g, group, d, ordered, opt);
    if (c.valid) cand = {ordered, c};
  }
  if (all.empty()) {
    if (best_rejected.config.tile.empty()) {
      best_rejected.config = {std::vector<int64_t>(rs.size(), 1), 0, d.warp_size, 1, false};
      best_rejected.cost.reject = "no tile enumerated";
    }
    return {best_rejected};
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.cost.modeled_us != b.cost.modeled_us) return a.cost.modeled_us < b.cost.modeled_us;
    // Equal times (set by Little's law, DRAM or the launch alike): fewer instructions to issue first.
    if (a.cost.issue_us != b.cost.issue_us) return a.cost.issue_us < b.cost.issue_us;
    // Then fewer reduction steps a tile (each a barrier and, for wgmma, a wait for the tensor cores).
    if (a.config.reduce_step != b.config.reduce_step) return a.config.reduce_step > b.config.reduce_step;
    // Then more warps a block, which hide each other's latencies (on the H200, generated candidates
    // that differ only in their threads measured 1.19x slower at 32 than at 128 in the median, 1.02x
    // at 128 than at 256 or 512: bench/model_vs_measured), up to a thread an output of the tile
    // (beyond, threads split reductions and store alone).
    const auto busy_threads = [](const Candidate& c) {
      int64_t outputs = 1;
      for (int64_t t : c.config.tile) outputs *= t;
      return std::min<int64_t>(c.config.threads, (outputs + 31) / 32 * 32);
    };
    if (busy_threads(a) != busy_threads(b)) return busy_threads(a) > busy_threads(b);
    return a.config.str() < b.config.str();
  });
  if (static_cast<int>(all.size()) > opt.top_k) all.resize(static_cast<size_t>(opt.top_k));
  const auto match = match_library_call(g, group);
  if (match && opt.libraries.count(library_family(match->call.op))) {  // the library's candidates stay whatever their modeled rank
    for (int algorithm = 0; algorithm < opt.library_algorithms; ++algorithm) {
      TileConfig cfg;
      cfg.tile = rs;
      cfg.library = library_for(match->call, opt.tf32);
      cfg.algorithm = algorithm;
      const Candidate lib{cfg, evaluate_tile(g, group, d, cfg, opt)};
      const auto is_library = [](const Candidate& c) { return !c.config.library.empty(); };
      if (static_cast<int>(all.size()) >= opt.top_k) {  // the last generated candidate makes room
        const auto last = std::find_if(all.rbegin(), all.rend(), [&](const Candidate& c) { return !is_library(c); });
        if (last != all.rend()) all.erase(std::next(last).base());
      }
      all.insert(std::upper_bound(all.begin(), all.end(), lib,
                                  [](const Candidate& x, const Candidate& y) { return x.cost.modeled_us < y.cost.modeled_us; }),
                 lib);
    }
  }
  return all;
}

}  // namespace fusetune::planner
