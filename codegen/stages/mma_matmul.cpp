#include "codegen/stages/mma_matmul.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "codegen/scalar_ops.h"
#include "core/error.h"
#include "codegen/stages/matmul.h"
#include "codegen/stages/split_k.h"
#include "planner/epilogue.h"
#include "planner/tiling.h"

namespace fusetune::codegen::stages {

bool uses_tensor_cores(const LoweringContext& cx, const Node& n) {
  return cx.cfg.mma && planner::tensor_core_operands(cx.g, n);
}

namespace {

using planner::TensorExpr;

// The warp grid's columns, fragments per warp, the staged slices' extents and row pitches
// (elements), and the fragment thread-locals.
struct MmaPlan : StagedProduct {
  DType mma = DType::kUndefined;  // the operands' type: 16-bit, or float32 taken as TF32
  std::string a, b;               // shared operand slices
  int64_t warps_n = 0, fm = 0, fn = 0, rows_a = 0, cols_b = 0, pitch_a = 0, pitch_b = 0;
  std::string frag_c, frag_a, frag_b;
  planner::MmaStaging staging;     // cp.async operands and the ring's stages
  bool resident = false;           // A read from its normalization's buffer whole (planner::resident_a): no A slices
  int64_t slot_a = 0, slot_b = 0;  // elements of one stage's slice
  // wgmma (sm_90a): warpgroups instead of warps (warps_n: the grid's warpgroup columns; fm x fn
  // tiles of 64 x wn each), operand slices in core matrices (see emit)
  bool wgmma = false;
  int64_t wn = 0;
  // The TMA form (TileConfig::tma, planner::tma_operands): the slots filled by tensor copies of
  // 128-byte swizzled boxes (A's rows of 64 K, B's boxes of 64 columns by 64 K); `bar` holds two
  // mbarriers a slot: "full" (elements 0 .. stages - 1), which the copies complete, and "empty"
  // (stages .. 2 stages - 1), on which each warp releases the slot once its wgmmas read it.
  bool tma = false;
  planner::TmaOperand ta, tb;
  std::string bar, map_a, map_b;
  // Accumulator floats a thread holds: 4 per m16n8 fragment, wn / 2 per 64 x wn wgmma tile.
  int64_t accumulators() const { return fm * fn * (wgmma ? wn / 2 : 4); }
};

class MmaMatMulStage : public AnchorStage {
 public:
  MmaMatMulStage(LoweringContext& cx, Kernel& k, const Node& node, const std::vector<int64_t>& me, int64_t max_elems)
      : cx_(cx), n_(node) {
    MmaPlan& st = st_;
    static_cast<StagedProduct&>(st) = staged_product(cx, node, me);
    st.wgmma = cx.cfg.wgmma;
    st.staging = planner::mma_staging(cx.g, node, cx.computed(), cx.cfg);
    // A copied operand is read along its innermost axis: A's by the reduction variable, B's by the
    // output's columns (MatMul's maps; checked, since the chunks rely on it).
    const TensorExpr& e = cx.exprs.at(static_cast<int>(&node - cx.g.nodes().data()));
    const auto along = [](const planner::Access& a, size_t var) {
      return !a.guarded && !a.index.empty() && a.index.back().is_var(static_cast<int>(var));
    };
    st.staging.async_a = st.staging.async_a && along(e.accesses[0], e.out_shape.size());
    st.staging.async_b = st.staging.async_b && along(e.accesses[1], st.n_axis);
    // A resident in its normalization's buffer (planner::resident_a; lower_group allocated it).
    st.resident = planner::resident_a(cx.g, cx.group, node, cx.cfg);
    check(!st.resident || (cx.resident_pitch.count(node.inputs[0]) && along(e.accesses[0], e.out_shape.size()) &&
                           e.accesses[0].index.size() >= 2 && e.accesses[0].index[e.accesses[0].index.size() - 2].is_var(static_cast<int>(st.m_axis))),
          "codegen: a resident A without its buffer, or read other than row by row");
    if (st.wgmma && cx.cfg.tma) {
      const auto ops = planner::tma_operands(cx.g, node, cx.computed());
      check(ops.has_value(), "codegen: the TMA form of a MatMul whose operands are not values read as laid out");
      st.tma = true;
      st.ta = ops->first;
      st.tb = ops->second;
      st.staging.async_a = st.staging.async_b = false;  // no cp.async
    }
    layout(k, me[st.m_axis], me[st.n_axis], cx.g.value(node.inputs[0]).dtype, node.outputs[0]);
    const int id = static_cast<int>(&node - cx.g.nodes().data());
    epilogue_ = planner::register_epilogue(cx.g, cx.group, id);
    if (!epilogue_) {
      pair_ = planner::paired_epilogue(cx.g, cx.group, id);
      if (pair_) epilogue_ = pair_->written;
    }
    place_epilogue(cx, k, st, epilogue_, max_elems);
  }

  void emit(Kernel& k) override;

 private:
  // The layout of a region of at most rows x cols: the block's warps form a warps_m x warps_n grid
  // (the split of the warps with the fewest m16n8 fragments per warp, then the fewest fragment
  // loads), each warp owning fm x fn fragments; the reduction step is a multiple of the
  // instruction's K (16; TF32: 8). The operand slices are staged in the operands' type, A as
  // (warps_m * fm * 16) x step and B as step x (warps_n * fn * 8) so every warp's fragments lie
  // inside, with rows padded to an odd number of 16-byte units (the 8 rows an ldmatrix phase reads
  // fall in distinct banks; TF32: a fragment's 32 reads in 32 banks; planner::mma_pitch_a/b).
  // With wgmma the block's warpgroups form planner::wgmma_groups' grid, and the slices are whole
  // core matrices without padding (the reduction step a multiple of 16).
  void layout(Kernel& k, int64_t rows, int64_t cols, DType dtype, int v) {
    MmaPlan& st = st_;
    st.mma = dtype;
    const int64_t kk = planner::mma_k(dtype);
    st.step = (std::max<int64_t>(kk, st.step) + kk - 1) / kk * kk;
    check(!st.wgmma || dtype != DType::kF32, "codegen: wgmma of float32 operands (TF32 runs on mma.sync)");
    if (st.wgmma) {
      const planner::WgmmaGroups grid = planner::wgmma_groups(rows, cols, cx_.cfg.threads / (4 * kWarpSize));
      st.warps_n = grid.groups_n;
      st.fm = grid.fm;
      st.fn = grid.fn;
      st.wn = grid.n;
      st.rows_a = grid.rows();
      st.cols_b = grid.cols();
      st.pitch_a = st.step;
      st.pitch_b = st.cols_b;
    } else {
      const planner::MmaWarps grid = planner::mma_warps(rows, cols, cx_.cfg.threads / kWarpSize);
      st.warps_n = grid.warps_n;
      st.fm = grid.fm;
      st.fn = grid.fn;
      st.rows_a = grid.rows();
      st.cols_b = grid.cols();
      st.pitch_a = planner::mma_pitch_a(dtype, st.step);
      st.pitch_b = planner::mma_pitch_b(dtype, st.cols_b);
    }
    const std::string id = std::to_string(v);
    st.slot_a = st.rows_a * st.pitch_a;
    st.slot_b = st.step * st.pitch_b;
    if (st.tma) {
      // Swizzle atoms 1024-byte aligned: every slot a whole number of them (A: rows_a rows of 128
      // bytes; B: 64-column boxes of 64 rows).
      check(st.step == 64 && st.cols_b % 64 == 0 && st.wn % 64 == 0 && st.rows_a <= 256,
            "codegen: the TMA form needs reduction steps of 64 and warpgroup tiles of whole 64-column boxes");
      st.staging.ahead = std::max(st.staging.ahead, 2);
      st.staging.stages = std::max(st.staging.stages, st.staging.ahead + 2);
    }
    const int64_t align = st.tma ? 1024 : 16;
    if (st.resident) st.slot_a = 0;
    if (!st.resident) st.a = k.add_shared("sa" + id, dtype, st.staging.stages * st.slot_a, align);
    st.b = k.add_shared("sb" + id, dtype, st.staging.stages * st.slot_b, align);
    if (st.tma) {
      st.bar = k.add_shared("sbar" + id, DType::kU64, 2 * st.staging.stages);
      const std::vector<int64_t> ones(st.ta.dims.size() - 2, 1);
      st.map_a = "tma_a" + id;
      st.map_b = "tma_b" + id;
      std::vector<int64_t> box_a = {64, st.rows_a}, box_b = {64, 64};
      box_a.insert(box_a.end(), ones.begin(), ones.end());
      box_b.insert(box_b.end(), st.tb.dims.size() - 2, 1);
      k.tensor_maps.push_back({st.map_a, cx_.param.at(cx_.buffer_of(n_.inputs[0])), st.ta.dims, st.ta.strides, box_a, 128});
      k.tensor_maps.push_back({st.map_b, cx_.param.at(cx_.buffer_of(n_.inputs[1])), st.tb.dims, st.tb.strides, box_b, 128});
    }
    st.frag_c = "fc" + id;
    k.thread_locals.push_back({st.frag_c, st.accumulators(), DType::kF32});
    if (st.wgmma) return;
    st.frag_a = "fa" + id;
    st.frag_b = "fb" + id;
    k.thread_locals.push_back({st.frag_a, st.fm * 4, DType::kU32});
    k.thread_locals.push_back({st.frag_b, st.fn * 2, DType::kU32});
  }

  // A warp's fragment rows hold `units()` units of 8 columns each (an n8 fragment; 8 columns of a
  // 64 x wn wgmma tile), unit u at columns [8u, 8u + 8) of the warp's; row block i of a warp is
  // `tile_rows()` rows (mma: 16; wgmma: 64, of which the warp holds 16).
  int64_t units() const { return st_.fn * (st_.wgmma ? st_.wn / 8 : 1); }
  int64_t tile_rows() const { return st_.wgmma ? 64 : 16; }
  // The accumulator of the pair a lane holds in row block i, unit u, half h: the product at row
  // g + 8h and columns 2t, 2t + 1 of the unit (kernel_ir.h's C layout; wgmma lays each 8 columns
  // of its tile out the same way on the warp's 16 rows).
  int64_t pair_at(int64_t i, int64_t u, int64_t h) const { return (i * units() + u) * 4 + 2 * h; }

  // Calls f(row, column, c) for each pair of adjacent accumulator columns a lane holds in units
  // `first_unit` on: the product at (row, column) and (row, column + 1) of the region is frag_c[c]
  // and frag_c[c + 1]. `row0`, `col0`: the warp's first row and column; `g`, `t`: the lane's quad
  // (lane / 4) and place in it (lane % 4).
  void for_each_pair(const std::string& row0, const std::string& col0,
                     const std::function<void(const std::string&, const std::string&, int64_t)>& f,
                     const std::string& g = "ft_g", const std::string& t = "ft_t", int64_t first_unit = 0) const {
    for (int64_t i = 0; i < st_.fm; ++i) {
      for (int64_t u = first_unit; u < units(); ++u) {
        for (int64_t h = 0; h < 2; ++h) {
          f("(" + row0 + " + " + lit(i * tile_rows() + h * 8) + " + " + g + ")", "(" + col0 + " + " + lit(u * 8) + " + 2 * " + t + ")",
            pair_at(i, u, h));
        }
      }
    }
  }

  // After the last step: the epilogue from the accumulator fragments (register_epilogue's values).
  void emit_register_epilogue(Kernel& k, const std::string& wm0, const std::string& wn0, const std::string& lane);
  // The warp-specialized TMA form (TileConfig::ws), after the mbarriers' initialisation: `zero`
  // (the accumulators cleared), the step's `slice` of wgmmas on slot ft_ks % stages, and
  // `tma_step(ks, slot, free)`, the producer thread's copies of step ks.
  void emit_warp_specialized(Kernel& k, const Stmt& zero, const Block& slice,
                             const std::function<Stmt(const std::string&, const std::string&, const Block&)>& tma_step,
                             const std::string& wm0, const std::string& wn0, const std::string& lane);

  LoweringContext& cx_;
  const Node& n_;
  MmaPlan st_;
  // A gated pair's column c from the product's columns 2c and 2c + 1, frag_c[c0] and frag_c[c0 + 1]
  // (planner::paired_epilogue), at the row and column of the chain's region: the written values'
  // expressions, in the current block (paired_values), or stored where they lie in the region
  // (paired_run).
  std::vector<std::string> paired_values(const std::string& row, const std::string& col, int64_t c0);
  // The chain's index at `row` and `col` of its region (the root's).
  std::vector<std::string> chain_at(const std::string& row, const std::string& col) const;
  void paired_run(const std::string& row, const std::string& col, int64_t c0);

  std::optional<std::vector<int>> epilogue_;  // the values written from registers (planner/epilogue.h)
  std::optional<planner::PairedEpilogue> pair_;  // ... of a gated pair's halves
};

// Each lane holds, per fragment (i, j) and half h, the product at row g + 8h and columns 2t, 2t + 1
// of the fragment (kernel_ir.h's C layout): its 8-column units (one n8 fragment; a wgmma tile's 8
// columns) hold, per row, one pair per lane of the quad. Where every value written is 16-bit and
// the warp has units in pairs, a quad's 2 rows x 16 columns of two adjacent units go out as four
// 16-byte stores instead of sixteen 4-byte ones: two butterfly exchanges of the accumulators
// within the quad (lane masks 1 and 2, two shuffles a pair of values) transpose the units so that
// lane t holds row t / 2's 8 columns of unit t % 2, on which it runs the epilogue (epilogue_run:
// a residual or bias read along the columns as one 16-byte vector, the values stored as one where
// aligned). Otherwise, and for a last unpaired unit, one run of two per fragment row.
std::vector<std::string> MmaMatMulStage::chain_at(const std::string& row, const std::string& col) const {
  const Region& h = cx_.region.at(cx_.root);
  std::vector<std::string> at = h.lo;
  at[st_.m_axis] = "(" + h.lo[st_.m_axis] + " + " + row + ")";
  at[st_.n_axis] = "(" + h.lo[st_.n_axis] + " + " + col + ")";
  return at;
}

std::vector<std::string> MmaMatMulStage::paired_values(const std::string& row, const std::string& col, int64_t c0) {
  const MmaPlan& st = st_;
  const std::vector<std::string> at = chain_at(row, col);  // the chain's own index, from the halves
  cx_.provided[pair_->gate] = [e = st.frag_c + "[" + std::to_string(c0) + "]"](const std::vector<std::string>&) { return e; };
  cx_.provided[pair_->up] = [e = st.frag_c + "[" + std::to_string(c0 + 1) + "]"](const std::vector<std::string>&) { return e; };
  std::vector<std::string> xs;
  for (int w : pair_->written) xs.push_back(cx_.value(w, at));
  cx_.provided.erase(pair_->gate);
  cx_.provided.erase(pair_->up);
  return xs;
}

void MmaMatMulStage::paired_run(const std::string& row, const std::string& col, int64_t c0) {
  const MmaPlan& st = st_;
  const Region& h = cx_.region.at(cx_.root);
  const std::vector<std::string> at = chain_at(row, col);
  const Block one = cx_.fresh_block([&] {
    const std::vector<std::string> xs = paired_values(row, col, c0);
    for (size_t w = 0; w < xs.size(); ++w) cx_.store_value(pair_->written[w], at, xs[w]);
  });
  cx_.cur().push_back(if_then(row + " < " + h.n[st.m_axis] + " && " + col + " < " + h.n[st.n_axis], one));
}

void MmaMatMulStage::emit_register_epilogue(Kernel& k, const std::string& wm0, const std::string& wn0,
                                            const std::string& lane) {
  const MmaPlan& st = st_;
  const Region& r = cx_.region.at(st.v);
  const std::vector<int>& outs = *epilogue_;
  const std::string id = std::to_string(st.v), g = "ft_quad" + id, t = "ft_qlane" + id;  // the lane's quad and place in it
  k.body.push_back(let(kIndexType, g, lane + " / 4"));
  k.body.push_back(let(kIndexType, t, lane + " % 4"));
  const std::string nm = r.n[st.m_axis], nn = r.n[st.n_axis];
  const auto inside = [&](const Block& b) {  // the warp's stores, where its first row and column lie in the region
    if (!b.empty()) k.body.push_back(if_then(wm0 + " < " + nm + " && " + wn0 + " < " + nn, b));
  };
  const int64_t units = this->units();
  const bool sixteen = std::all_of(outs.begin(), outs.end(), [&](int w) { return dtype_size(cx_.g.value(w).dtype) == 2; });
  const auto unit_col = [&](int64_t u) { return wn0 + " + " + lit(u * 8); };
  const auto row_of = [&](int64_t i, const std::string& h8) { return "(" + wm0 + " + " + lit(i * tile_rows()) + " + " + h8 + " + " + g + ")"; };
  const std::string q = "fr" + id, sent = "fe" + id;  // the 8 values a lane exchanges; the two it receives
  const auto qe = [](const std::string& x, int64_t slot, int64_t e) { return x + "[" + std::to_string(slot * 2 + e) + "]"; };
  if (pair_) {
    // A gated pair: a lane's columns 2c and 2c + 1 of every unit (an even column of the region,
    // its first column even too) are both halves of the chain's column c. Where every value
    // written is 16-bit, a quad's 2 rows x 16 chain columns of four adjacent units go out as four
    // 16-byte stores: each lane computes its 8 values (one per unit and row), the quad transposes
    // them (transpose_quad) and lane t stores row t / 2's 8 columns of units 2 (t % 2) and
    // 2 (t % 2) + 1. Otherwise, and for the units past the last four, one value per pair.
    const int64_t grouped = sixteen && units >= 4 ? units / 4 * 4 : 0;
    inside(cx_.fresh_block([&] {
      for_each_pair(wm0, wn0, [&](const std::string& row, const std::string& col, int64_t c0) { paired_run(row, col + " / 2", c0); },
                    g, t, grouped);
    }));
    if (grouped == 0) return;
    const Region& h = cx_.region.at(cx_.root);
    const std::vector<int>& written = pair_->written;
    for (size_t w = 0; w < written.size(); ++w) k.thread_locals.push_back({q + "_" + std::to_string(w), 8, DType::kF32});
    k.thread_locals.push_back({sent, 2, DType::kF32});
    for (int64_t i = 0; i < st.fm; ++i) {
      for (int64_t u0 = 0; u0 < grouped; u0 += 4) {
        // Unit u0 + uu, row g + 8 hh: slot 2 hh + uu / 2, element uu % 2 (zero outside the region).
        for (int64_t hh = 0; hh < 2; ++hh) {
          for (int64_t uu = 0; uu < 4; ++uu) {
            const std::string row = row_of(i, lit(hh * 8)), col = "((" + unit_col(u0 + uu) + " + 2 * " + t + ") / 2)";
            Block zero, one = cx_.fresh_block([&] {
              const std::vector<std::string> xs = paired_values(row, col, pair_at(i, u0 + uu, hh));
              for (size_t w = 0; w < written.size(); ++w) cx_.cur().push_back(assign(qe(q + "_" + std::to_string(w), hh * 2 + uu / 2, uu % 2), xs[w]));
            });
            for (size_t w = 0; w < written.size(); ++w) zero.push_back(assign(qe(q + "_" + std::to_string(w), hh * 2 + uu / 2, uu % 2), "0.0f"));
            k.body.push_back(if_then(row + " < " + h.n[st.m_axis] + " && " + col + " < " + h.n[st.n_axis], one, zero));
          }
        }
        // Lane t: row t / 2, the 8 chain columns from unit u0 + 2 (t % 2)'s first; column 4e + s
        // came from lane s's element e.
        const std::string row = row_of(i, "(" + t + " >> 1) * 8"), col = "((" + unit_col(u0) + " + (" + t + " & 1) * 16) / 2)";
        for (size_t w = 0; w < written.size(); ++w) {
          const std::string x = q + "_" + std::to_string(w);
          for (Stmt& s : transpose_quad(x, sent, t)) k.body.push_back(std::move(s));
          std::vector<std::string> run;
          for (int64_t c = 0; c < 8; ++c) run.push_back(qe(x, c % 4, c / 4));
          const Block whole = cx_.fresh_block([&] { cx_.store_run(written[w], chain_at(row, col), run); });
          const Block edge = cx_.fresh_block([&] {
            for (int64_t c = 0; c < 8; ++c) {
              const std::string cc = "(" + col + " + " + lit(c) + ")";
              Block one;
              cx_.with_block(one, [&] { cx_.store_value(written[w], chain_at(row, cc), run[static_cast<size_t>(c)]); });
              cx_.cur().push_back(if_then(cc + " < " + h.n[st.n_axis], one));
            }
          });
          k.body.push_back(if_then(row + " < " + h.n[st.m_axis], {if_then(col + " + 7 < " + h.n[st.n_axis], whole, edge)}));
        }
      }
    }
    return;
  }
  const bool wide = units >= 2 && sixteen;
  const int64_t paired = wide ? units / 2 * 2 : 0;
  inside(cx_.fresh_block([&] {  // the pair stores of units not exchanged
    for_each_pair(wm0, wn0, [&](const std::string& row, const std::string& col, int64_t c0) {
      epilogue_run(cx_, st, outs, row, col, 2, [&](int64_t c) { return st.frag_c + "[" + std::to_string(c0 + c) + "]"; });
    }, g, t, paired);
  }));
  if (!wide) return;
  k.thread_locals.push_back({q, 8, DType::kF32});
  k.thread_locals.push_back({sent, 2, DType::kF32});
  for (int64_t i = 0; i < st.fm; ++i) {
    for (int64_t up = 0; up < paired; up += 2) {
      // The lane's 8 products: unit slot h * 2 + jj, element e.
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t jj = 0; jj < 2; ++jj) {
          for (int64_t e = 0; e < 2; ++e) {
            k.body.push_back(assign(qe(q, h * 2 + jj, e), st.frag_c + "[" + std::to_string(pair_at(i, up + jj, h) + e) + "]"));
          }
        }
      }
      for (Stmt& s : transpose_quad(q, sent, t)) k.body.push_back(std::move(s));  // slot s: lane s's pair of row t / 2, unit t % 2
      // Row t / 2, columns 8 (t % 2) .. + 7 of the two units: the epilogue on the run, its
      // operands along the columns in 16-byte vectors, its values stored as one.
      const std::string row = row_of(i, "(" + t + " >> 1) * 8"), col = "(" + unit_col(up) + " + (" + t + " & 1) * 8)";
      const Block run = cx_.fresh_block([&] {
        epilogue_run(cx_, st, outs, row, col, 8, [&](int64_t c) { return qe(q, c / 2, c % 2); });
      });
      k.body.insert(k.body.end(), run.begin(), run.end());
    }
  }
}

// Warp specialization (FlashAttention-3's and CUTLASS's producer and consumers): the block's
// warpgroups below cfg.threads are the consumers, the one after them the producer (roles). The
// producer gives registers back (setmaxnreg.dec) and its first thread walks every step: it waits
// until the consumers released the step's slot (its empty mbarrier's phase for the slot's
// previous step: every consumer warp arrived once it completed that step's wgmmas), then expects
// the step's bytes on the slot's full mbarrier and issues its boxes, running as far ahead as the
// ring's slots allow. The consumers take the registers (setmaxnreg.inc) and, step by step, wait
// for the slot's full phase, issue the step's wgmmas, keep one group in flight (wgmma.wait 1) and
// release the previous step's slot; no thread of the block meets another at a barrier after the
// mbarriers' initialisation, and the consumers alone run the epilogue from their registers.
void MmaMatMulStage::emit_warp_specialized(Kernel& k, const Stmt& zero, const Block& slice,
                                           const std::function<Stmt(const std::string&, const std::string&, const Block&)>& tma_step,
                                           const std::string& wm0, const std::string& wn0, const std::string& lane) {
  const MmaPlan& st = st_;
  check(st.tma && cx_.splits() == 1 && epilogue_.has_value(),
        "codegen: the warp-specialized form takes the TMA form, no split-K and its epilogue from registers");
  const int stages = st.staging.stages;
  const int64_t steps = (st.k + st.step - 1) / st.step;
  const planner::WarpSpecializedRegisters regs = planner::warp_specialized_registers(cx_.cfg.threads);
  const std::string slot = "(ft_ks % " + lit(stages) + ")";
  // The producer: step ft_ks into its slot once the slot's previous step (ft_ks - stages) is released.
  const Block free = {if_then("ft_ks >= " + lit(stages),
                              {mbarrier_wait(st.bar, lit(stages) + " + " + slot, "(ft_ks / " + lit(stages) + " - 1) % 2")})};
  const Stmt copies = tma_step("ft_ks", slot, free);  // the issuing thread's (an if on it)
  const Block producer = {set_max_registers(false, regs.producer),
                          if_then(copies.a, {serial_for("ft_ks", "0", lit(steps), copies.body)})};
  // The consumers, into their own block (the epilogue's stages append to k.body).
  Block outer = std::move(k.body);
  k.body = {set_max_registers(true, regs.consumer), zero};
  Block step = {mbarrier_wait(st.bar, slot, "(ft_ks / " + lit(stages) + ") % 2"), wgmma_fence(st.frag_c)};
  step.push_back(uniform_for("ft_kq", "0", lit(st.step / 16), slice));
  step.push_back(wgmma_commit());
  step.push_back(wgmma_wait(st.frag_c, 1));  // step ft_ks - 1's wgmmas are done with its slot
  step.push_back(uniform_if("ft_rel", "ft_ks >= 1", {mbarrier_arrive_warp(st.bar, lit(stages) + " + (ft_ks - 1) % " + lit(stages))}));
  k.body.push_back(uniform_for("ft_ks", "0", lit(steps), step));
  k.body.push_back(wgmma_wait(st.frag_c, 0));
  emit_register_epilogue(k, wm0, wn0, lane);
  Block consumers = std::move(k.body);
  k.body = std::move(outer);
  k.body.push_back(roles(cx_.cfg.threads, std::move(consumers), producer));
}

// The operand slices of each reduction step go to a ring of `stages` slots in shared memory in the
// operands' type, zero outside the region's rows and columns and beyond K (so padding contributes
// nothing). A prologue stages the first `ahead` steps (planner::MmaStaging); then step ks waits
// for its slot (the thread's cp.async groups but the newest ahead - 1; a barrier makes every
// thread's copies and stores visible), stages step ks + ahead into the slot step ks - 1 used
// (every thread has passed the barrier, so no one still reads it) and, while those copies fly,
// multiplies its own slot: for every 16 of the step each warp loads its A fragments (ldmatrix.x4 of 16x16 row-major
// tiles) and B fragments (ldmatrix.x4.trans for two n8 fragments, .x2.trans for a last odd one)
// and issues fm x fn mma into its f32 accumulator fragments; with TF32, for every 8 of the step
// each lane reads its 4 A and 2 B elements of each fragment and rounds them (ft_tf32) before the
// m16n8k8 mma. One barrier per step. An operand copied asynchronously moves in 16-byte cp.async
// chunks (8 16-bit elements or 4 floats along its rows; a chunk beyond the region zero-filled, one
// whose address is not 16-byte aligned copied element by element); another is computed element
// by element and stored. After the last step each lane
// writes its accumulator elements that lie inside the region to the shared accumulator buffer,
// where the epilogue reads them as in the scalar path.
void MmaMatMulStage::emit(Kernel& k) {
  const Node& n = n_;
  const TensorExpr& e = cx_.exprs.at(static_cast<int>(&n - cx_.g.nodes().data()));
  const MmaPlan& st = st_;
  const Region& r = cx_.region.at(st.v);
  const std::string nm = r.n[st.m_axis], nn = r.n[st.n_axis];
  const std::string step = lit(st.step);
  const int stages = st.staging.stages;
  const int64_t steps = (st.k + st.step - 1) / st.step;
  const bool any_async = st.staging.async_a || st.staging.async_b;
  const bool tf32 = st.mma == DType::kF32;
  const int64_t kk = planner::mma_k(st.mma), lanes = 16 / static_cast<int64_t>(dtype_size(st.mma));  // elements a 16-byte chunk
  const bool ws = cx_.cfg.ws;  // warp-specialized: the accumulators are the consumers' (emit_warp_specialized)
  const Stmt zero = serial_for("ft_i", "0", lit(st.accumulators()), {assign(st.frag_c + "[ft_i]", "0.0f")});
  if (!ws) k.body.push_back(zero);
  const std::string warp = "(ft_thread / " + lit(kWarpSize) + ")";
  const std::string lane = "(ft_thread % " + lit(kWarpSize) + ")";
  // The warp's first row and column: its place in the warp grid, or (wgmma) its warpgroup's in
  // the warpgroup grid and its 16 rows in the warpgroup's 64.
  const std::string group = "(ft_thread / " + lit(4 * kWarpSize) + ")";
  const std::string wg_m0 = "(" + group + " / " + lit(st.warps_n) + " * " + lit(st.fm * 64) + ")";
  const std::string wm0 = st.wgmma ? "(" + wg_m0 + " + " + warp + " % 4 * 16)"
                                   : "(" + warp + " / " + lit(st.warps_n) + " * " + lit(st.fm * 16) + ")";
  const std::string wn0 = st.wgmma ? "(" + group + " % " + lit(st.warps_n) + " * " + lit(st.fn * st.wn) + ")"
                                   : "(" + warp + " % " + lit(st.warps_n) + " * " + lit(st.fn * 8) + ")";
  // The TMA form: thread 0 (warp-specialized: the producer warpgroup's first) expects the step's
  // bytes on the slot's full mbarrier and issues its tensor copies, A's box (64 of K by rows_a)
  // and B's (64 columns by 64 of K, cols_b / 64 of them), at the region's origin and step ks of K
  // (outside the tensors, zeros); `free` first (the wait for the slot's release by every consumer
  // warp, where an earlier step used it).
  const std::string issuer = "ft_thread == " + lit(ws ? cx_.cfg.threads : 0);
  const auto tma_step = [&](const std::string& ks, const std::string& slot, const Block& free = {}) {
    const auto coords = [&](const planner::TmaOperand& t, const std::string& k0, const std::string& n_offset) {
      std::vector<std::string> c;
      for (const int var : t.vars) {
        std::string x = var < 0 ? "0" : static_cast<size_t>(var) == r.lo.size() ? k0 : r.lo[static_cast<size_t>(var)];
        if (static_cast<size_t>(var) == st.n_axis && !n_offset.empty()) x = "(" + x + " + " + n_offset + ")";
        c.push_back("(int)(" + x + ")");
      }
      return c;
    };
    const std::string k0 = "(" + ks + ") * 64";
    const int64_t bytes = (st.slot_a + st.slot_b) * static_cast<int64_t>(dtype_size(st.mma));
    Block loads = free;
    loads.push_back(mbarrier_arrive(st.bar, slot, lit(bytes)));
    loads.push_back(tensor_load(st.a, "(" + slot + ") * " + lit(st.slot_a), st.map_a, coords(st.ta, k0, ""), st.bar, slot));
    for (int64_t j = 0; j < st.cols_b / 64; ++j) {
      loads.push_back(tensor_load(st.b, "(" + slot + ") * " + lit(st.slot_b) + " + " + lit(j * 4096), st.map_b,
                                  coords(st.tb, k0, lit(64 * j)), st.bar, slot));
    }
    return if_then(issuer, loads);
  };
  // One operand slice of step `ks` into ring slot `slot` (A: rows_a x step, B: step x cols_b).
  auto stage = [&](bool is_a, const std::string& ks, const std::string& slot) {
    const int64_t rows = is_a ? st.rows_a : st.step, cols = is_a ? st.step : st.cols_b;
    const int64_t pitch = is_a ? st.pitch_a : st.pitch_b;
    const std::string buf = is_a ? st.a : st.b;
    const std::string base = "(" + slot + ") * " + lit(is_a ? st.slot_a : st.slot_b);
    const int u = n.inputs[is_a ? 0 : 1];
    const planner::Access& access = e.accesses[is_a ? 0 : 1];
    const auto operand_index = [&](const std::string& row, const std::string& col) {
      const std::string m = is_a ? "(" + r.lo[st.m_axis] + " + " + row + ")" : r.lo[st.m_axis];
      const std::string column = is_a ? r.lo[st.n_axis] : "(" + r.lo[st.n_axis] + " + " + col + ")";
      return cx_.index_of(access, product_vars(cx_, st, m, column, "ft_k"));
    };
    // wgmma's slices are core matrices of 8 rows of 8 elements, 128 contiguous bytes each, ordered
    // row-block major (A: 8 rows of M by 8 of K; B: 8 rows of K by 8 columns of N): element e of a
    // slot lies at row e / (64 C) * 8 + e % 64 / 8 and column e / 64 % C * 8 + e % 8 of the slice
    // (C = cols / 8), so consecutive threads fill consecutive 16 bytes.
    const int64_t cores = cols / 8;
    if (is_a ? st.staging.async_a : st.staging.async_b) {
      const int64_t chunks = cols / lanes;
      const CopiedSlice c{.is_a = is_a,
                          .buf = buf,
                          .param = cx_.param.at(cx_.buffer_of(u)),
                          .shape = cx_.g.value(u).shape,
                          .index = operand_index,
                          .ks = ks,
                          .nm = nm,
                          .nn = nn,
                          .row = st.wgmma ? "ft_e / " + lit(8 * cores) + " * 8 + ft_e % 8" : "ft_e / " + lit(chunks),
                          .col = st.wgmma ? "ft_e / 8 % " + lit(cores) + " * 8" : "ft_e % " + lit(chunks) + " * " + lit(lanes),
                          .at = base + (st.wgmma ? " + ft_e * 8" : " + ft_r * " + lit(pitch) + " + ft_c"),
                          .step = st.step,
                          .k = st.k,
                          .lanes = lanes,
                          .count = rows * chunks};
      return copy_slice(cx_, c);
    }
    Block loop = cx_.fresh_block([&] {
      cx_.cur().push_back(let(kIndexType, "ft_r", st.wgmma ? "ft_e / " + lit(64 * cores) + " * 8 + ft_e % 64 / 8" : "ft_e / " + lit(cols)));
      cx_.cur().push_back(let(kIndexType, "ft_c", st.wgmma ? "ft_e / 64 % " + lit(cores) + " * 8 + ft_e % 8" : "ft_e % " + lit(cols)));
      cx_.cur().push_back(let(kIndexType, "ft_k", ks + " * " + step + " + " + (is_a ? "ft_c" : "ft_r")));
      const auto idx = operand_index("ft_r", "ft_c");
      cx_.cur().push_back(let("float", "ft_x", "0.0f"));
      Block inside;
      cx_.with_block(inside, [&] { cx_.cur().push_back(assign("ft_x", cx_.value(u, idx))); });
      cx_.cur().push_back(if_then("ft_k < " + lit(st.k) + " && " + (is_a ? "ft_r < " + nm : "ft_c < " + nn), inside));
      cx_.cur().push_back(store(buf, base + (st.wgmma ? " + ft_e" : " + ft_r * " + lit(pitch) + " + ft_c"), store_from_compute(st.mma, "ft_x")));
    });
    return thread_for("ft_e", "0", lit(rows * cols), loop);
  };
  // Both operands' slices of step `ks` into ring slot `slot`: B's alone where A is resident.
  const auto slices = [&](const std::string& ks, const std::string& slot) {
    Block b;
    if (!st.resident) b.push_back(stage(true, ks, slot));
    b.push_back(stage(false, ks, slot));
    return b;
  };
  // The block's steps: all of them, or its split's (stages/split_k.h); `ks` of a local step is
  // the step of K it stages, the ring's slots follow the local steps.
  const int64_t local_steps = split_steps(cx_, steps);
  const std::string k0 = split_first_step(cx_, k, steps);
  const auto global = [&](const std::string& local) { return cx_.splits() == 1 ? local : "(" + k0 + " + " + local + ")"; };
  const int64_t ahead = std::min<int64_t>(st.staging.ahead, local_steps);
  if (st.tma) {
    // Each slot's full mbarrier, one arrival a phase (the issuing thread's, with the step's bytes),
    // and its empty one, an arrival a (consumer) warp, initialised and made visible to the block
    // before any use.
    Block init;
    for (int s = 0; s < stages; ++s) init.push_back(mbarrier_init(st.bar, std::to_string(s), 1));
    for (int s = 0; s < stages; ++s) init.push_back(mbarrier_init(st.bar, std::to_string(stages + s), cx_.cfg.threads / kWarpSize));
    init.push_back(mbarrier_init_fence());
    k.body.push_back(if_then("ft_thread == 0", init));
    k.body.push_back(barrier());
  }
  // A resident A's element at row `row` of A (global) and reduction index ft_ka, in its buffer
  // (rows resident_pitch apart).
  const int a_value = n.inputs[0];
  const auto resident_at = [&](const std::string& row) {
    return cx_.buffer_offset(a_value, cx_.index_of(e.accesses[0], product_vars(cx_, st, row, r.lo[st.n_axis], "ft_ka")));
  };
  if (st.resident) {
    // The buffer's rows past the region up to the warps' (a tile at M's end): zeros, which the
    // last warps' fragments read (their products are not stored); the first step's barrier
    // orders these stores before its ldmatrix.
    Block fill = cx_.fresh_block([&] {
      cx_.cur().push_back(let(kIndexType, "ft_r", "(" + r.lo[st.m_axis] + " + " + nm + " + ft_e / " + lit(st.k) + ")"));
      cx_.cur().push_back(let(kIndexType, "ft_ka", "ft_e % " + lit(st.k)));
      cx_.cur().push_back(store(cx_.buffer.at(a_value), resident_at("ft_r"), store_from_compute(st.mma, "0.0f")));
    });
    k.body.push_back(thread_for("ft_e", "0", "(" + lit(st.rows_a) + " - " + nm + ") * " + lit(st.k), fill));
  }
  // The prologue: steps 0 .. ahead - 1 into their slots, one cp.async group each. Where the driver
  // lets B's copies run ahead of the stages before this one (AnchorStage::ahead_of_stages; B
  // copied, not by TMA), B's slices are groups of their own issued before the group's first stage,
  // and A's (unless resident) groups after them here: a step's wait still finds its A and B
  // landed, since groups complete in the order they were committed.
  const bool b_ahead = ahead_of_stages != nullptr && !ws && !st.tma && st.staging.async_b;
  if (b_ahead) {
    const RingSlices a = [&](const std::string& ks, const std::string& slot) { return Block{stage(true, ks, slot)}; };
    emit_prologue(k, ahead, global, slices,
                  {ahead_of_stages, st.resident ? RingSlices{} : a,
                   [&](const std::string& ks, const std::string& slot) { return Block{stage(false, ks, slot)}; }});
  } else if (!ws) {
    Block prologue = st.tma ? Block{tma_step(global("ft_ks"), "ft_ks")} : slices(global("ft_ks"), "ft_ks");
    if (any_async) prologue.push_back(copy_async_commit());
    k.body.push_back(uniform_for("ft_ks", "0", lit(ahead), prologue));
  }
  const std::string slot = "(ft_ks % " + lit(stages) + ")";
  Block slice;  // k in [ft_ks * step + ft_kq * kk, + kk)
  if (tf32) {
    // Each lane's elements of its fragments (kernel_ir.h's m16n8k8 layout), rounded to TF32.
    slice.push_back(let(kIndexType, "ft_g", lane + " / 4"));
    slice.push_back(let(kIndexType, "ft_t", lane + " % 4"));
    for (int64_t i = 0; i < st.fm; ++i) {
      for (int64_t q = 0; q < 4; ++q) {
        const std::string row = "(" + wm0 + " + " + lit(i * 16 + 8 * (q % 2)) + " + ft_g)";
        slice.push_back(assign(st.frag_a + "[" + std::to_string(i * 4 + q) + "]",
                               "ft_tf32(" + st.a + "[" + slot + " * " + lit(st.slot_a) + " + " + row + " * " + lit(st.pitch_a) +
                                   " + ft_kq * 8 + ft_t + " + lit(4 * (q / 2)) + "])"));
      }
    }
    for (int64_t j = 0; j < st.fn; ++j) {
      for (int64_t q = 0; q < 2; ++q) {
        slice.push_back(assign(st.frag_b + "[" + std::to_string(j * 2 + q) + "]",
                               "ft_tf32(" + st.b + "[" + slot + " * " + lit(st.slot_b) + " + (ft_kq * 8 + ft_t + " + lit(4 * q) +
                                   ") * " + lit(st.pitch_b) + " + " + wn0 + " + " + lit(j * 8) + " + ft_g])"));
      }
    }
  }
  if (st.tma) {
    // The 128-byte swizzled canonical layouts the boxes land in: A K-major, rows of 64 (128 bytes),
    // 8-row atoms 1 KB apart (SBO), 32 bytes along a row per 16 of K; B N-major, 64-column boxes
    // 8 KB apart (LBO), atoms of 8 K rows 1 KB apart (SBO), 2 KB per 16 of K.
    for (int64_t i = 0; i < st.fm; ++i) {
      for (int64_t j = 0; j < st.fn; ++j) {
        slice.push_back(wgmma(st.frag_c, (i * st.fn + j) * (st.wn / 2), static_cast<int>(st.wn), st.a,
                              slot + " * " + lit(st.slot_a) + " + (" + wg_m0 + " + " + lit(64 * i) + ") * 64 + ft_kq * 16", 16, 1024, st.b,
                              slot + " * " + lit(st.slot_b) + " + ft_kq * 1024 + (" + wn0 + " + " + lit(j * st.wn) + ") / 64 * 4096",
                              8192, 1024, st.mma, false, 128));
      }
    }
  } else if (st.wgmma) {
    // Each warpgroup's fm x fn wgmma of 64 x wn: A's 64 rows from its first at column 16 ft_kq (core
    // matrices: LBO 128 bytes along K, SBO step * 16 bytes along M), B's wn columns from its first
    // at row 16 ft_kq (LBO cols_b * 16 bytes along K, SBO 128 bytes along N).
    for (int64_t i = 0; i < st.fm; ++i) {
      for (int64_t j = 0; j < st.fn; ++j) {
        slice.push_back(wgmma(st.frag_c, (i * st.fn + j) * (st.wn / 2), static_cast<int>(st.wn), st.a,
                              slot + " * " + lit(st.slot_a) + " + (" + wg_m0 + " + " + lit(64 * i) + ") * " + step + " + ft_kq * 128",
                              128, st.step * 16, st.b,
                              slot + " * " + lit(st.slot_b) + " + ft_kq * " + lit(16 * st.cols_b) + " + (" + wn0 + " + " +
                                  lit(j * st.wn) + ") * 8",
                              st.cols_b * 16, 128, st.mma));
      }
    }
  }
  // A resident A's 16 x 16 tiles come from its buffer: the lane's row of the warp's tile at its 8
  // of the step's 16 (global reduction index).
  const auto resident_row = [&](int64_t i) {
    return resident_at("(" + r.lo[st.m_axis] + " + " + wm0 + " + " + lit(i * 16) + " + " + lane + " % 16)");
  };
  if (st.resident && !tf32 && !st.wgmma) {
    slice.push_back(let(kIndexType, "ft_ka", global("ft_ks") + " * " + step + " + ft_kq * 16 + " + lane + " / 16 * 8"));
  }
  for (int64_t i = 0; i < st.fm && !tf32 && !st.wgmma; ++i) {
    slice.push_back(st.resident ? ldmatrix(st.frag_a, i * 4, 4, false, cx_.buffer.at(a_value), resident_row(i))
                                : ldmatrix(st.frag_a, i * 4, 4, false, st.a,
                                           slot + " * " + lit(st.slot_a) + " + (" + wm0 + " + " + lit(i * 16) + " + " + lane +
                                               " % 16) * " + lit(st.pitch_a) + " + ft_kq * 16 + " + lane + " / 16 * 8"));
  }
  for (int64_t j = 0; j < st.fn && !tf32 && !st.wgmma; j += 2) {
    const bool pair = j + 1 < st.fn;
    slice.push_back(ldmatrix(st.frag_b, j * 2, pair ? 4 : 2, true, st.b,
                             slot + " * " + lit(st.slot_b) + " + (ft_kq * 16 + " + lane + " % 16) * " + lit(st.pitch_b) +
                                 " + " + wn0 + " + " + lit(j * 8) + (pair ? " + " + lane + " / 16 * 8" : "")));
  }
  for (int64_t i = 0; i < st.fm && !st.wgmma; ++i) {
    for (int64_t j = 0; j < st.fn; ++j) slice.push_back(mma(st.frag_c, (i * st.fn + j) * 4, st.frag_a, i * 4, st.frag_b, j * 2, st.mma));
  }
  if (ws) {
    emit_warp_specialized(k, zero, slice, tma_step, wm0, wn0, lane);
    return;
  }
  Block body;
  if (any_async) body.push_back(copy_async_wait(static_cast<int>(ahead - 1)));  // step ft_ks's group has landed
  if (st.wgmma && !st.tma) body.push_back(proxy_fence());  // the slot's stores and copies, to the wgmma's proxy
  if (!st.tma) body.push_back(barrier());
  const std::string next = "(ft_ks + " + lit(st.staging.ahead) + ")";
  Block ahead_copies;  // step ft_ks + ahead into the slot step ft_ks - 1 used (wgmma: ft_ks - 2)
  if (local_steps > ahead) {
    Block copies;
    if (st.tma) {
      // The slot's previous step, next - stages, released on the slot's empty mbarrier (its phase
      // (next / stages - 1) completes once every warp arrived for it).
      const Block free = {if_then(next + " >= " + lit(stages),
                                  {mbarrier_wait(st.bar, lit(stages) + " + " + next + " % " + lit(stages),
                                                 "(" + next + " / " + lit(stages) + " - 1) % 2")})};
      copies = {tma_step(global(next), next + " % " + lit(stages), free)};
    } else {
      copies = slices(global(next), next + " % " + lit(stages));
    }
    ahead_copies.push_back(if_then(next + " < " + lit(local_steps), copies));
  }
  if (any_async) ahead_copies.push_back(copy_async_commit());  // possibly empty: one group per step keeps the count
  if (!st.wgmma) body.insert(body.end(), ahead_copies.begin(), ahead_copies.end());
  if (st.tma) body.push_back(mbarrier_wait(st.bar, slot, "(ft_ks / " + lit(stages) + ") % 2"));  // the slot's boxes landed
  if (st.wgmma) body.push_back(wgmma_fence(st.frag_c));
  // A split's steps past K (its share rounded up): B's slices are zero there, but a resident A's
  // buffer holds no such columns, so those steps multiply nothing.
  const bool past_k = st.resident && cx_.splits() > 1 && local_steps * cx_.splits() > steps;
  body.push_back(past_k ? uniform_if("ft_in_k", global("ft_ks") + " < " + lit(steps), {uniform_for("ft_kq", "0", lit(st.step / kk), slice)})
                        : uniform_for("ft_kq", "0", lit(st.step / kk), slice));
  if (st.wgmma) {
    // The step's wgmmas stay in flight while the copies `ahead` steps on are issued, into the slot
    // of step ks - 2 (the ring has ahead + 2 slots), whose wgmmas every thread completed before
    // the barrier (TMA: before its warp released the slot, which thread 0 waits for); then each
    // thread waits until at most this step's group is pending, so step ks - 1's slot is free by
    // the next step's barrier (TMA: each warp releases it on its empty mbarrier, its lanes
    // meeting first; no block barrier in the loop). The last group completes after the loop.
    body.push_back(wgmma_commit());
    body.insert(body.end(), ahead_copies.begin(), ahead_copies.end());
    body.push_back(wgmma_wait(st.frag_c, 1));
    if (st.tma) {
      body.push_back(uniform_if("ft_rel", "ft_ks >= 1",
                                {mbarrier_arrive_warp(st.bar, lit(stages) + " + (ft_ks - 1) % " + lit(stages))}));
    }
  }
  k.body.push_back(uniform_for("ft_ks", "0", lit(local_steps), body));
  if (st.wgmma) k.body.push_back(wgmma_wait(st.frag_c, 0));
  emit_split_sum(cx_, k, st.frag_c, st.accumulators());
  if (epilogue_) {
    emit_register_epilogue(k, wm0, wn0, lane);
    return;
  }
  k.body.push_back(barrier());  // the last slot's reads before what follows writes shared memory
  // Accumulator fragments to the shared accumulator buffer (c_i at row g + 8 * (i / 2), column
  // 2t + i % 2 of its fragment).
  const std::string acc = product_accumulators(cx_, st);
  Block write = {let(kIndexType, "ft_g", lane + " / 4"), let(kIndexType, "ft_t", lane + " % 4")};
  for_each_pair(wm0, wn0, [&](const std::string& row, const std::string& col0, int64_t c0) {
    for (int64_t c = 0; c < 2; ++c) {
      const std::string col = "(" + col0 + " + " + lit(c) + ")";
      write.push_back(if_then(row + " < " + nm + " && " + col + " < " + nn,
                              {store(acc, row + " * " + nn + " + " + col, st.frag_c + "[" + std::to_string(c0 + c) + "]")}));
    }
  });
  k.body.push_back(if_then(wm0 + " < " + nm + " && " + wn0 + " < " + nn, write));
  k.body.push_back(barrier());
  export_product(cx_, k, st);
}

}  // namespace

std::unique_ptr<AnchorStage> mma_matmul_stage(LoweringContext& cx, Kernel& k, const Node& n,
                                              const std::vector<int64_t>& max_extent, int64_t max_elems) {
  return std::make_unique<MmaMatMulStage>(cx, k, n, max_extent, max_elems);
}

}  // namespace fusetune::codegen::stages
