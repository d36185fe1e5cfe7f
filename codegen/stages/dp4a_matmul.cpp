#include "codegen/stages/dp4a_matmul.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "codegen/stages/matmul.h"
#include "codegen/stages/split_k.h"
#include "core/error.h"
#include "planner/epilogue.h"

namespace fusetune::codegen::stages {

bool uses_dp4a(const LoweringContext& cx, const Node& n) { return cx.cfg.reduce_step > 0 && planner::dp4a_matmul(cx.g, n); }

namespace {

using planner::Access;
using planner::TensorExpr;

// Four byte expressions (integers; their low 8 bits taken) packed into a word, the first lowest.
std::string pack_bytes(const std::vector<std::string>& bytes) {
  return "ft_pack_bytes(" + bytes[0] + ", " + bytes[1] + ", " + bytes[2] + ", " + bytes[3] + ")";
}

// Byte j of each of four words packed into a word (a 4 x 4 byte transpose's column j).
std::string byte_column(const std::vector<std::string>& words, int j) {
  return "ft_byte_column(" + words[0] + ", " + words[1] + ", " + words[2] + ", " + words[3] + ", " + std::to_string(j) + ")";
}

class Dp4aMatMulStage : public AnchorStage {
 public:
  Dp4aMatMulStage(LoweringContext& cx, Kernel& k, const Node& node, const std::vector<int64_t>& me, int64_t max_elems)
      : cx_(cx), n_(node), imma_(cx.cfg.mma) {
    static_cast<StagedProduct&>(p_) = staged_product(cx, node, me);
    check(p_.step % (imma_ ? 32 : 4) == 0, "the dp4a form stages whole words (m16n8k32: steps of 32)");
    words_ = p_.step / 4;
    const std::string id = std::to_string(p_.v);
    regs_ = "tl" + id;
    if (imma_) {
      warps_ = planner::mma_warps(me[p_.m_axis], me[p_.n_axis], cx.cfg.threads / kWarpSize);
      check(warps_.warps_m * warps_.warps_n * kWarpSize == cx.cfg.threads, "the tensor-core form needs a warp grid of the block's warps");
      rows_ = warps_.rows();
      cols_ = warps_.cols();
      pitch_a_ = planner::imma_pitch_a(p_.step);
      pitch_b_ = planner::imma_pitch_b(cols_);
      k.thread_locals.push_back({regs_, warps_.fm * warps_.fn * 4, DType::kU32});
      frag_a_ = "fa" + id;
      frag_b_ = "fb" + id;
      k.thread_locals.push_back({frag_a_, warps_.fm * 4, DType::kU32});
      k.thread_locals.push_back({frag_b_, warps_.fn * 2, DType::kU32});
      epilogue_ = planner::register_epilogue(cx.g, cx.group, static_cast<int>(&node - cx.g.nodes().data()));
    } else {
      rows_ = std::max<int64_t>(1, me[p_.m_axis]);
      cols_ = std::max<int64_t>(1, me[p_.n_axis]);
      pitch_a_ = planner::dp4a_pitch_a(p_.step);
      pitch_b_ = cols_;
      std::tie(tm_, tn_) = planner::micro_tile(me[p_.m_axis], me[p_.n_axis], cx.cfg.threads);
      check(tm_ > 0, "the dp4a form needs micro-tiles that cover the region: ", cx.cfg.threads, " threads cannot");
      k.thread_locals.push_back({regs_, tm_ * tn_, DType::kU32});
      epilogue_ = planner::register_epilogue(cx.g, cx.group, static_cast<int>(&node - cx.g.nodes().data()));
      if (epilogue_ && !planner::sixteen_byte_runs(cx.g, *epilogue_, tn_)) epilogue_.reset();
    }
    a_ = k.add_shared("sa" + id, DType::kU32, rows_ * pitch_a_);
    b_ = k.add_shared("sb" + id, DType::kU32, words_ * pitch_b_);
    place_epilogue(cx, k, p_, epilogue_, max_elems);
  }

  void emit(Kernel& k) override;

 private:
  // True if operand `operand` is a group input whose innermost index is variable `var` alone.
  bool contiguous(int operand, int var) const {
    const int u = n_.inputs[static_cast<size_t>(operand)];
    const Access& a = expr().accesses[static_cast<size_t>(operand)];
    return cx_.param.count(u) && !cx_.producer.count(u) && !a.guarded && !a.index.empty() && a.index.back().is_var(var);
  }
  const TensorExpr& expr() const { return cx_.exprs.at(static_cast<int>(&n_ - cx_.g.nodes().data())); }
  // The flat index of operand `operand` at row m, column c and K index kk of the product.
  std::string at(int operand, const std::string& m, const std::string& c, const std::string& kk) const {
    const int u = n_.inputs[static_cast<size_t>(operand)];
    return flat(cx_.g.value(u).shape, cx_.index_of(expr().accesses[static_cast<size_t>(operand)], product_vars(cx_, p_, m, c, kk)));
  }
  // Operand `operand`'s value (an integer local) at row m, column c, K index kk; zero past K,
  // where nothing is read.
  std::string byte(int operand, const std::string& m, const std::string& c, const std::string& kk) {
    const int u = n_.inputs[static_cast<size_t>(operand)];
    const std::string x = "ft_x" + std::to_string(cx_.next_local());
    cx_.cur().push_back(let("long long", x, "0LL"));
    Block inside;
    cx_.with_block(inside, [&] {
      cx_.cur().push_back(assign(x, cx_.value(u, cx_.index_of(expr().accesses[static_cast<size_t>(operand)], product_vars(cx_, p_, m, c, kk)))));
    });
    cx_.cur().push_back(if_then(kk + " < " + lit(p_.k), inside));
    return x;
  }
  Block stage_a();
  Block stage_b();
  // One step's products, each thread's micro-tile (dp4a) or each warp's fragments (m16n8k32).
  Block dp4a_step();
  Block imma_step();
  // The accumulators to the product's buffer (the tensor-core form's fragment layout).
  void imma_write(Kernel& k);
  // The tensor-core form's epilogue from the accumulator fragments (register_epilogue's values).
  void imma_register_epilogue(Kernel& k);
  // Accumulator c as the product's value (int32, in the compute type).
  std::string element(int64_t c) const { return "(long long)(int)" + regs_ + "[" + std::to_string(c) + "]"; }
  // The SIMT form: the condition that this thread owns a micro-tile, and the lets of its first row
  // and column (ft_tm0, ft_tn0).
  std::string ntn() const {
    const std::string nn = cx_.region.at(p_.v).n[p_.n_axis];
    return "((" + nn + " + " + lit(tn_ - 1) + ") / " + lit(tn_) + ")";
  }
  std::string owns() const {
    const std::string nm = cx_.region.at(p_.v).n[p_.m_axis];
    return "ft_thread < ((" + nm + " + " + lit(tm_ - 1) + ") / " + lit(tm_) + ") * " + ntn();
  }
  Block micro_tile() const {
    return {let(kIndexType, "ft_tm0", "(ft_thread / " + ntn() + ") * " + lit(tm_)),
            let(kIndexType, "ft_tn0", "(ft_thread % " + ntn() + ") * " + lit(tn_))};
  }
  // The tensor-core form: the lane's g and t, its warp's first row and column (ft_wm0, ft_wn0).
  Block lane_lets() const {
    const std::string warp = "(ft_thread / " + lit(kWarpSize) + ")", lane = "(ft_thread % " + lit(kWarpSize) + ")";
    return {let(kIndexType, "ft_g", lane + " / 4"), let(kIndexType, "ft_t", lane + " % 4"),
            let(kIndexType, "ft_wm0", warp + " / " + lit(warps_.warps_n) + " * " + lit(warps_.fm * 16)),
            let(kIndexType, "ft_wn0", warp + " % " + lit(warps_.warps_n) + " * " + lit(warps_.fn * 8))};
  }

  LoweringContext& cx_;
  const Node& n_;
  const bool imma_;  // the tensor-core form
  StagedProduct p_;
  // The slices' rows and columns (the region's largest; padded to the warps' fragments on tensor
  // cores), words per step, pitches in words; the micro-tile (dp4a) or the warp grid (m16n8k32).
  int64_t rows_ = 0, cols_ = 0, words_ = 0, pitch_a_ = 0, pitch_b_ = 0, tm_ = 0, tn_ = 0;
  planner::MmaWarps warps_;
  std::string a_, b_, regs_, frag_a_, frag_b_;
  std::optional<std::vector<int>> epilogue_;
};

// A's slice of step ft_ks: word (row, q) holds K entries ft_ks x step + 4q .. + 3 of the row.
Block Dp4aMatMulStage::stage_a() {
  const Region& r = cx_.region.at(p_.v);
  const std::string nm = r.n[p_.m_axis], w = lit(words_);
  const int u = n_.inputs[0];
  const std::string p = cx_.param.count(u) ? cx_.param.at(u) : "";
  const bool words = contiguous(0, static_cast<int>(expr().out_shape.size())) && p_.k % 4 == 0;
  const std::string dst = "ft_r * " + lit(pitch_a_) + " + ft_q";
  Block inside = cx_.fresh_block([&] {
    cx_.cur().push_back(let(kIndexType, "ft_k", "ft_ks * " + lit(p_.step) + " + ft_q * 4"));
    const std::string m = "(" + r.lo[p_.m_axis] + " + ft_r)";
    const auto bytes = [&] {
      std::vector<std::string> xs;
      for (int i = 0; i < 4; ++i) xs.push_back(byte(0, m, r.lo[p_.n_axis], "(ft_k + " + lit(i) + ")"));
      cx_.cur().push_back(store(a_, dst, pack_bytes(xs)));
    };
    if (!words) {
      bytes();
      return;
    }
    // K a multiple of 4: a word starting inside K lies inside it.
    cx_.cur().push_back(let(kIndexType, "ft_at", at(0, m, r.lo[p_.n_axis], "ft_k")));
    Block word = {store(a_, dst, "(ft_k < " + lit(p_.k) + " ? ft_load_word(" + p + ", ft_at) : 0u)")};
    Block single;
    cx_.with_block(single, bytes);
    cx_.cur().push_back(if_then("ft_aligned4(" + p + ", ft_at)", word, single));
  });
  // Every row of the slice (literal divisors): a row past this region's is zero.
  const Block body = {let(kIndexType, "ft_r", "ft_e / " + w), let(kIndexType, "ft_q", "ft_e % " + w),
                      if_then("ft_r < " + nm, inside, {store(a_, dst, "0u")})};
  return {thread_for("ft_e", "0", lit(rows_ * words_), body)};
}

// B's slice of step ft_ks: word (q, column) holds the column's K entries ft_ks x step + 4q .. + 3.
// Thread items are four consecutive columns of one q.
Block Dp4aMatMulStage::stage_b() {
  const Region& r = cx_.region.at(p_.v);
  const std::string nn = r.n[p_.n_axis];
  const int u = n_.inputs[1];
  const std::string p = cx_.param.count(u) ? cx_.param.at(u) : "";
  const bool words = contiguous(1, static_cast<int>(p_.n_axis)) && cx_.g.value(u).shape.back() % 4 == 0;
  const int64_t quads = (cols_ + 3) / 4;
  const std::string q = lit(quads);
  Block body = cx_.fresh_block([&] {
    cx_.cur().push_back(let(kIndexType, "ft_q", "ft_e / " + q));
    cx_.cur().push_back(let(kIndexType, "ft_c", "(ft_e % " + q + ") * 4"));
    cx_.cur().push_back(let(kIndexType, "ft_k", "ft_ks * " + lit(p_.step) + " + ft_q * 4"));
    const std::string m = r.lo[p_.m_axis];
    const auto column = [&](int j) { return "(" + r.lo[p_.n_axis] + " + ft_c + " + lit(j) + ")"; };
    const auto dst = [&](int j) { return "ft_q * " + lit(pitch_b_) + " + ft_c + " + lit(j); };
    const auto bytes = [&] {
      for (int j = 0; j < 4; ++j) {
        Block one;
        cx_.with_block(one, [&] {
          std::vector<std::string> xs;
          for (int i = 0; i < 4; ++i) xs.push_back(byte(1, m, column(j), "(ft_k + " + lit(i) + ")"));
          cx_.cur().push_back(store(b_, dst(j), pack_bytes(xs)));
        });
        cx_.cur().push_back(if_then("ft_c + " + lit(j) + " < " + nn, one, {if_then("ft_c + " + lit(j) + " < " + lit(cols_), {store(b_, dst(j), "0u")})}));
      }
    };
    if (!words) {
      bytes();
      return;
    }
    // Four K rows of the four columns, a word each (zero past K), transposed into the columns'
    // words; where the columns are whole in the region and every row's word is aligned (rows of
    // a multiple of 4 bytes: the first row's alignment is every row's).
    std::vector<std::string> ws;
    for (int i = 0; i < 4; ++i) {
      const std::string kk = "(ft_k + " + lit(i) + ")";
      cx_.cur().push_back(let(kIndexType, "ft_at" + std::to_string(i), at(1, m, column(0), kk)));
    }
    Block quad;
    for (int i = 0; i < 4; ++i) {
      const std::string wv = "ft_w" + std::to_string(i);
      quad.push_back(let("unsigned int", wv, "(ft_k + " + lit(i) + " < " + lit(p_.k) + " ? ft_load_word(" + p + ", ft_at" +
                                                 std::to_string(i) + ") : 0u)"));
      ws.push_back(wv);
    }
    for (int j = 0; j < 4; ++j) quad.push_back(store(b_, dst(j), byte_column(ws, j)));
    Block single;
    cx_.with_block(single, bytes);
    cx_.cur().push_back(if_then("ft_c + 3 < " + nn + " && ft_aligned4(" + p + ", ft_at0)", quad, single));
  });
  // Every (q, quad) of the largest region's columns (literal divisors): a quad past this region's
  // columns stores nothing.
  return {thread_for("ft_e", "0", lit(words_ * quads), body)};
}

// Each thread's micro-tile: rows [ft_tm0, ft_tm0 + TM), columns [ft_tn0, ft_tn0 + TN); per word
// of the step that holds any K entry (all were staged, zero past K) a dp4a per accumulator.
Block Dp4aMatMulStage::dp4a_step() {
  const Graph& g = cx_.g;
  const Region& r = cx_.region.at(p_.v);
  const std::string nm = r.n[p_.m_axis], nn = r.n[p_.n_axis];
  const auto sign = [&](int operand) { return g.value(n_.inputs[static_cast<size_t>(operand)]).dtype == DType::kI8 ? "s" : "u"; };
  const std::string dp4a = std::string("ft_dp4a_") + sign(0) + sign(1);
  Block inner;
  for (int64_t i = 0; i < tm_; ++i) {
    const std::string row = "(ft_tm0 + " + lit(i) + ")";
    inner.push_back(let("unsigned int", "ft_ra" + std::to_string(i),
                        "(" + row + " < " + nm + " ? " + a_ + "[" + row + " * " + lit(pitch_a_) + " + ft_kq] : 0u)"));
  }
  for (int64_t j = 0; j < tn_; ++j) {
    const std::string col = "(ft_tn0 + " + lit(j) + ")";
    inner.push_back(let("unsigned int", "ft_rb" + std::to_string(j),
                        "(" + col + " < " + nn + " ? " + b_ + "[ft_kq * " + lit(pitch_b_) + " + " + col + "] : 0u)"));
  }
  for (int64_t i = 0; i < tm_; ++i) {
    for (int64_t j = 0; j < tn_; ++j) {
      const std::string cell = regs_ + "[" + std::to_string(i * tn_ + j) + "]";
      inner.push_back(assign(cell, dp4a + "(ft_ra" + std::to_string(i) + ", ft_rb" + std::to_string(j) + ", " + cell + ")"));
    }
  }
  Block product = micro_tile();
  product.push_back(serial_for("ft_kq", "0", "ft_min(" + lit(words_) + ", (" + lit(p_.k + 3) + " - ft_ks * " + lit(p_.step) + ") / 4)", inner));
  return {if_then(owns(), product)};
}

// Each warp's fm x fn fragments of 16 x 8 at its place in the warp grid; per 32 of the step each
// lane reads its A words (row g or g + 8, word t or t + 4 of the 32) and B words (row t or t + 4
// of the 32's words, column g) of each fragment, then the warp issues fm x fn m16n8k32 mma. The
// slices are zero outside the region and past K, so padding adds nothing.
Block Dp4aMatMulStage::imma_step() {
  const Graph& g = cx_.g;
  Block slice = lane_lets();
  for (int64_t i = 0; i < warps_.fm; ++i) {
    for (int64_t q = 0; q < 4; ++q) {
      const std::string row = "(ft_wm0 + " + lit(i * 16 + 8 * (q % 2)) + " + ft_g)";
      slice.push_back(assign(frag_a_ + "[" + std::to_string(i * 4 + q) + "]",
                             a_ + "[" + row + " * " + lit(pitch_a_) + " + ft_kq * 8 + ft_t + " + lit(4 * (q / 2)) + "]"));
    }
  }
  for (int64_t j = 0; j < warps_.fn; ++j) {
    for (int64_t q = 0; q < 2; ++q) {
      slice.push_back(assign(frag_b_ + "[" + std::to_string(j * 2 + q) + "]",
                             b_ + "[(ft_kq * 8 + ft_t + " + lit(4 * q) + ") * " + lit(pitch_b_) + " + ft_wn0 + " + lit(j * 8) + " + ft_g]"));
    }
  }
  const DType ta = g.value(n_.inputs[0]).dtype, tb = g.value(n_.inputs[1]).dtype;
  for (int64_t i = 0; i < warps_.fm; ++i) {
    for (int64_t j = 0; j < warps_.fn; ++j) slice.push_back(mma(regs_, (i * warps_.fn + j) * 4, frag_a_, i * 4, frag_b_, j * 2, ta, tb));
  }
  return {uniform_for("ft_kq", "0", lit(p_.step / 32), slice)};
}

// Each lane's accumulators inside the region: fragment (i, j)'s c_q at row 16 i + g + 8 (q / 2),
// column 8 j + 2 t + q % 2 of its warp's.
void Dp4aMatMulStage::imma_write(Kernel& k) {
  const Region& r = cx_.region.at(p_.v);
  const std::string nm = r.n[p_.m_axis], nn = r.n[p_.n_axis];
  const std::string acc = product_accumulators(cx_, p_);
  Block write = lane_lets();
  for (int64_t i = 0; i < warps_.fm; ++i) {
    for (int64_t j = 0; j < warps_.fn; ++j) {
      for (int64_t q = 0; q < 4; ++q) {
        const std::string row = "(ft_wm0 + " + lit(i * 16 + 8 * (q / 2)) + " + ft_g)";
        const std::string col = "(ft_wn0 + " + lit(j * 8 + q % 2) + " + ft_t * 2)";
        write.push_back(if_then(row + " < " + nm + " && " + col + " < " + nn,
                                {store(acc, row + " * " + nn + " + " + col, element((i * warps_.fn + j) * 4 + q))}));
      }
    }
  }
  k.body.insert(k.body.end(), write.begin(), write.end());
}

// Each lane's fragment (i, j) holds, per half h, the products at row 16 i + 8 h + g and columns
// 8 j + 2 t, + 1 of its warp's: a run of two through the epilogue (epilogue_run), each element
// inside the region alone at its edge.
void Dp4aMatMulStage::imma_register_epilogue(Kernel& k) {
  const Region& r = cx_.region.at(p_.v);
  Block write = lane_lets();
  const Block runs = cx_.fresh_block([&] {
    for (int64_t i = 0; i < warps_.fm; ++i) {
      for (int64_t j = 0; j < warps_.fn; ++j) {
        for (int64_t h = 0; h < 2; ++h) {
          const std::string row = "(ft_wm0 + " + lit(i * 16 + 8 * h) + " + ft_g)", col = "(ft_wn0 + " + lit(j * 8) + " + ft_t * 2)";
          const int64_t c0 = (i * warps_.fn + j) * 4 + 2 * h;
          epilogue_run(cx_, p_, *epilogue_, row, col, 2, [&](int64_t c) { return element(c0 + c); });
        }
      }
    }
  });
  write.push_back(if_then("ft_wm0 < " + r.n[p_.m_axis] + " && ft_wn0 < " + r.n[p_.n_axis], runs));
  k.body.push_back(if_then("1", write));  // a scope of its own for the lane's lets
}

void Dp4aMatMulStage::emit(Kernel& k) {
  const Region& r = cx_.region.at(p_.v);
  const std::string nm = r.n[p_.m_axis], nn = r.n[p_.n_axis];
  const int64_t accumulators = imma_ ? warps_.fm * warps_.fn * 4 : tm_ * tn_;
  k.body.push_back(serial_for("ft_i", "0", lit(accumulators), {assign(regs_ + "[ft_i]", "0u")}));
  Block steps = stage_a();
  const Block b = stage_b();
  steps.insert(steps.end(), b.begin(), b.end());
  steps.push_back(barrier());
  const Block product = imma_ ? imma_step() : dp4a_step();
  steps.insert(steps.end(), product.begin(), product.end());
  steps.push_back(barrier());
  // The block's steps: all of them, or its split's (stages/split_k.h), then the split's sum.
  const int64_t all_steps = (p_.k + p_.step - 1) / p_.step;
  const std::string k0 = split_first_step(cx_, k, all_steps);
  k.body.push_back(uniform_for("ft_ks", k0, split_end_step(cx_, k0, all_steps), steps));
  emit_split_sum(cx_, k, regs_, accumulators, "sum", DType::kU32);
  if (imma_ && epilogue_) {
    imma_register_epilogue(k);
    return;
  }
  if (imma_) {
    imma_write(k);
    k.body.push_back(barrier());
    export_product(cx_, k, p_);
    return;
  }
  if (epilogue_) {  // each micro-tile row's TN columns, computed and stored as one run
    Block write = cx_.fresh_block([&] {
      for (const Stmt& s : micro_tile()) cx_.cur().push_back(s);
      for (int64_t i = 0; i < tm_; ++i) {
        epilogue_run(cx_, p_, *epilogue_, "(ft_tm0 + " + lit(i) + ")", "ft_tn0", tn_, [&](int64_t j) { return element(i * tn_ + j); });
      }
    });
    k.body.push_back(if_then(owns(), write));
    return;
  }
  const std::string acc = product_accumulators(cx_, p_);
  Block write = micro_tile();
  for (int64_t i = 0; i < tm_; ++i) {
    for (int64_t j = 0; j < tn_; ++j) {
      const std::string row = "(ft_tm0 + " + lit(i) + ")", col = "(ft_tn0 + " + lit(j) + ")";
      write.push_back(if_then(row + " < " + nm + " && " + col + " < " + nn, {store(acc, row + " * " + nn + " + " + col, element(i * tn_ + j))}));
    }
  }
  k.body.push_back(if_then(owns(), write));
  k.body.push_back(barrier());
  export_product(cx_, k, p_);
}

}  // namespace

std::unique_ptr<AnchorStage> dp4a_matmul_stage(LoweringContext& cx, Kernel& k, const Node& n, const std::vector<int64_t>& max_extent,
                                               int64_t max_elems) {
  return std::make_unique<Dp4aMatMulStage>(cx, k, n, max_extent, max_elems);
}

}  // namespace fusetune::codegen::stages
