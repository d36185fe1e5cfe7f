#include "codegen/stages/attention.h"

#include <algorithm>

#include "core/error.h"
#include "planner/tiling.h"

namespace fusetune::codegen::stages {

namespace {

using planner::TensorExpr;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class AttentionStage : public AnchorStage {
 public:
  AttentionStage(LoweringContext& cx, Kernel& k, const planner::AttentionCore& core, const std::vector<int64_t>& me)
      : cx_(cx), core_(core) {
    const size_t rank = me.size();
    for (size_t a = 0; a + 2 < rank; ++a) {
      check(me[a] <= 1, "flash attention needs one matrix (one batch and head) per block; a tile spans ", me[a],
            " along axis ", a);
    }
    rows_ = std::max<int64_t>(1, me[rank - 2]);
    dv_ = std::max<int64_t>(1, me[rank - 1]);
    dk_ = core.head;
    keys_ = core.keys;
    bc_ = std::min(cx.cfg.reduce_step, keys_);
    const int threads = cx.cfg.threads;
    std::tie(tm_, tn_) = planner::micro_tile(rows_, bc_, threads);
    std::tie(um_, un_) = planner::micro_tile(rows_, dv_, threads);
    check(tm_ > 0 && um_ > 0, "flash attention: micro-tiles of at most 8 x 8 on ", threads, " threads cannot cover ", rows_,
          " rows by ", bc_, " keys and ", dv_, " columns");
    warps_ = threads / kWarpSize;
    batches_ = ceil_div(rows_, warps_);
    const std::string v = std::to_string(out_value());
    sq_ = k.add_shared("fq" + v, DType::kF32, ceil_div(rows_, tm_) * tm_ * (dk_ + 1));
    sk_ = k.add_shared("fk" + v, DType::kF32, ceil_div(bc_, tn_) * tn_ * (dk_ + 1));
    sv_ = k.add_shared("fv" + v, DType::kF32, bc_ * dv_);
    sp_ = k.add_shared("fp" + v, DType::kF32, rows_ * bc_);
    sa_ = k.add_shared("fa" + v, DType::kF32, rows_);
    sl_ = k.add_shared("fl" + v, DType::kF32, rows_);
    acc_ = "fo" + v;
    run_max_ = "fm" + v;
    run_sum_ = "fs" + v;
    k.thread_locals.push_back({acc_, um_ * un_});
    k.thread_locals.push_back({run_max_, batches_});
    k.thread_locals.push_back({run_sum_, batches_});
    for (const char* w : {"fx", "fy", "fz"}) k.thread_locals.push_back({w + v, 1});
  }

  void emit(Kernel& k) override;

 private:
  const Node& node(int id) const { return cx_.g.nodes()[static_cast<size_t>(id)]; }
  int out_value() const { return node(core_.output).outputs[0]; }
  // Variables of a MatMul's operand accesses: its region's origin, row m, column n, reduction kk.
  std::vector<std::string> vars(int matmul, const std::string& m, const std::string& n, const std::string& kk) const {
    std::vector<std::string> out = cx_.region.at(node(matmul).outputs[0]).lo;
    out[out.size() - 2] = m;
    out[out.size() - 1] = n;
    out.push_back(kk);
    return out;
  }
  // A thread-distributed loop over `count` elements whose body (from f, in a fresh block) reads ft_e.
  Stmt elements(int64_t count, const std::function<void()>& f) {
    return thread_for("ft_e", "0", lit(count), cx_.fresh_block(f));
  }
  Block scores(const std::string& nm);
  Block online_softmax(const std::string& nm);
  Block update(const std::string& nm);

  LoweringContext& cx_;
  const planner::AttentionCore& core_;
  int64_t rows_ = 0, dv_ = 0, dk_ = 0, keys_ = 0, bc_ = 0;  // R, DV, the head (K) width, the keys, the key tile
  int64_t tm_ = 0, tn_ = 0, um_ = 0, un_ = 0;  // micro-tiles of the scores and of the output
  int64_t warps_ = 0, batches_ = 0;            // a warp per row: batches of rows
  std::string sq_, sk_, sv_, sp_, sa_, sl_;    // Q, K, V, the probabilities, the rescaling factors, the sums
  std::string acc_, run_max_, run_sum_;        // thread-locals: the output micro-tile, each batch's row statistics
};

// Each thread's TM x TN scores of the tile (rows ft_tr + a * RT, keys ft_tc + b * CT), through the
// chain up to the softmax's input, into the probabilities' buffer.
Block AttentionStage::scores(const std::string& nm) {
  const Graph& g = cx_.g;
  const int64_t rt = ceil_div(rows_, tm_), ct = ceil_div(bc_, tn_);
  const Node& soft = node(core_.softmax);
  const int qk = node(core_.scores).outputs[0];
  const Shape& ss = g.value(qk).shape;
  const size_t rank = ss.size();
  const Region& r = cx_.region.at(out_value());
  Block body = {let(kIndexType, "ft_tr", "ft_thread / " + lit(ct)), let(kIndexType, "ft_tc", "ft_thread % " + lit(ct))};
  for (int64_t a = 0; a < tm_; ++a) {
    for (int64_t b = 0; b < tn_; ++b) body.push_back(let("float", "fa_s" + std::to_string(a * tn_ + b), "0.0f"));
  }
  Block dot;
  for (int64_t a = 0; a < tm_; ++a) {
    dot.push_back(let("float", "fa_q" + std::to_string(a),
                      sq_ + "[(ft_tr + " + lit(a * rt) + ") * " + lit(dk_ + 1) + " + ft_d]"));
  }
  for (int64_t b = 0; b < tn_; ++b) {
    dot.push_back(let("float", "fa_k" + std::to_string(b),
                      sk_ + "[(ft_tc + " + lit(b * ct) + ") * " + lit(dk_ + 1) + " + ft_d]"));
  }
  for (int64_t a = 0; a < tm_; ++a) {
    for (int64_t b = 0; b < tn_; ++b) {
      const std::string s = "fa_s" + std::to_string(a * tn_ + b);
      dot.push_back(assign(s, s + " + fa_q" + std::to_string(a) + " * fa_k" + std::to_string(b)));
    }
  }
  body.push_back(serial_for("ft_d", "0", lit(dk_), dot, 8));
  const Block cells = cx_.fresh_block([&] {
  for (int64_t a = 0; a < tm_; ++a) {
    for (int64_t b = 0; b < tn_; ++b) {
      const std::string s = "fa_s" + std::to_string(a * tn_ + b);
      const std::string row = "(ft_tr + " + lit(a * rt) + ")", key = "(ft_tc + " + lit(b * ct) + ")";
      Block cell;
      cx_.with_block(cell, [&] {
        cx_.cur().push_back(let(kIndexType, "ft_fi", r.lo[rank - 2] + " + " + row));
        cx_.cur().push_back(let(kIndexType, "ft_fj", "ft_kt * " + lit(bc_) + " + " + key));
        std::vector<std::string> idx = cx_.region.at(soft.inputs[0]).lo;
        idx[rank - 2] = "ft_fi";
        idx[rank - 1] = "ft_fj";
        // The chain reads the scores where the softmax reads it (planner/attention.h): this cell.
        cx_.provided[qk] = [&, s](const std::vector<std::string>& at) {
          for (size_t d = rank - 2; d < rank; ++d) {
            check(ss[d] <= 1 || at[d] == idx[d], "flash attention: the chain reads the scores at ", at[d], ", not ", idx[d]);
          }
          return s;
        };
        cx_.cur().push_back(let("float", "fa_x", "(-ft_inf())"));
        Block inside;
        cx_.with_block(inside, [&] { cx_.cur().push_back(assign("fa_x", cx_.value(soft.inputs[0], idx))); });
        cx_.provided.erase(qk);
        cx_.cur().push_back(if_then("ft_fj < " + lit(keys_), inside));
        cx_.cur().push_back(store(sp_, row + " * " + lit(bc_) + " + " + key, "fa_x"));
      });
      cx_.cur().push_back(if_then(row + " < " + nm + " && " + key + " < " + lit(bc_), cell));
    }
  }
  });
  body.insert(body.end(), cells.begin(), cells.end());
  return {if_then("ft_thread < " + lit(rt * ct), body)};
}

// A warp per row: the tile's maximum, the exponentials against the new running maximum, their sum
// folded into the running sum; lane 0 publishes the factor rescaling the row's earlier output.
Block AttentionStage::online_softmax(const std::string& nm) {
  const std::string v = std::to_string(out_value());
  const std::string mx = "fx" + v, sum = "fy" + v, factor = "fz" + v;
  const std::string row = "(ft_rb * " + lit(warps_) + " + ft_thread / " + lit(kWarpSize) + ")";
  const std::string busy = row + " < " + nm;  // warp-uniform
  const int64_t passes = ceil_div(bc_, kWarpSize);
  auto over_row = [&](Block each) {
    Block loop = {let(kIndexType, "ft_c", "ft_thread % " + lit(kWarpSize) + " + ft_q * " + lit(kWarpSize))};
    loop.push_back(if_then("ft_c < " + lit(bc_), std::move(each)));
    return Block{let(kIndexType, "ft_row", row), serial_for("ft_q", "0", lit(passes), loop)};
  };
  const std::string at = sp_ + "[ft_row * " + lit(bc_) + " + ft_c]";
  Block batch = {assign(mx + "[0]", "(-ft_inf())")};
  batch.push_back(if_then(busy, over_row({assign(mx + "[0]", "ft_fmaxn(" + mx + "[0], " + at + ")")})));
  batch.push_back(warp_reduce(mx, "max", busy));
  Block rescale = {let("float", "fa_mn", "ft_fmaxn(" + run_max_ + "[ft_rb], " + mx + "[0])"),
                   let("float", "fa_ref", "(fa_mn == (-ft_inf()) ? 0.0f : fa_mn)"),
                   assign(factor + "[0]", "expf(" + run_max_ + "[ft_rb] - fa_ref)"), assign(run_max_ + "[ft_rb]", "fa_mn"),
                   assign(sum + "[0]", "0.0f")};
  for (const Stmt& st : over_row({let("float", "fa_p", "expf(" + at + " - fa_ref)"), store(sp_, "ft_row * " + lit(bc_) + " + ft_c", "fa_p"),
                                  assign(sum + "[0]", sum + "[0] + fa_p")})) {
    rescale.push_back(st);
  }
  batch.push_back(assign(sum + "[0]", "0.0f"));
  batch.push_back(if_then(busy, rescale));
  batch.push_back(warp_reduce(sum, "sum", busy));
  batch.push_back(if_then(busy, {assign(run_sum_ + "[ft_rb]", run_sum_ + "[ft_rb] * " + factor + "[0] + " + sum + "[0]"),
                                 if_then("ft_thread % " + lit(kWarpSize) + " == 0", {store(sa_, row, factor + "[0]")})}));
  return {uniform_for("ft_rb", "0", lit(batches_), batch)};
}

// Each thread's UM x UN outputs (rows ft_or + a * ORT, columns ft_oc + b * OCT): rescaled, plus
// the tile's probabilities times V.
Block AttentionStage::update(const std::string& nm) {
  const int64_t ort = ceil_div(rows_, um_), oct = ceil_div(dv_, un_);
  Block body = {let(kIndexType, "ft_or", "ft_thread / " + lit(oct)), let(kIndexType, "ft_oc", "ft_thread % " + lit(oct))};
  Block inner;
  for (int64_t a = 0; a < um_; ++a) {
    const std::string row = "(ft_or + " + lit(a * ort) + ")";
    body.push_back(let("float", "fa_al" + std::to_string(a), "(" + row + " < " + nm + " ? " + sa_ + "[" + row + "] : 0.0f)"));
    inner.push_back(let("float", "fa_p" + std::to_string(a),
                        "(" + row + " < " + nm + " ? " + sp_ + "[" + row + " * " + lit(bc_) + " + ft_c] : 0.0f)"));
  }
  for (int64_t b = 0; b < un_; ++b) {
    const std::string col = "(ft_oc + " + lit(b * oct) + ")";
    inner.push_back(let("float", "fa_v" + std::to_string(b),
                        "(" + col + " < " + lit(dv_) + " ? " + sv_ + "[ft_c * " + lit(dv_) + " + " + col + "] : 0.0f)"));
  }
  for (int64_t a = 0; a < um_; ++a) {
    for (int64_t b = 0; b < un_; ++b) {
      const std::string cell = acc_ + "[" + std::to_string(a * un_ + b) + "]";
      body.push_back(assign(cell, cell + " * fa_al" + std::to_string(a)));
      inner.push_back(assign(cell, cell + " + fa_p" + std::to_string(a) + " * fa_v" + std::to_string(b)));
    }
  }
  body.push_back(serial_for("ft_c", "0", lit(bc_), inner, 8));
  return {if_then("ft_thread < " + lit(ort * oct), body)};
}

void AttentionStage::emit(Kernel& k) {
  const Node& qk = node(core_.scores);
  const Node& pv = node(core_.output);
  const TensorExpr& e1 = cx_.exprs.at(core_.scores);
  const TensorExpr& e2 = cx_.exprs.at(core_.output);
  const int v = out_value();
  const Region& r = cx_.region.at(v);
  const size_t rank = r.n.size();
  const std::string nm = r.n[rank - 2], nn = r.n[rank - 1], lom = r.lo[rank - 2], lon = r.lo[rank - 1];
  const std::string qk_cols = cx_.region.at(qk.outputs[0]).lo[rank - 1];
  // The output's micro-tile and the running statistics start empty.
  k.body.push_back(serial_for("ft_e", "0", lit(um_ * un_), {assign(acc_ + "[ft_e]", "0.0f")}));
  k.body.push_back(serial_for("ft_e", "0", lit(batches_), {assign(run_max_ + "[ft_e]", "(-ft_inf())"), assign(run_sum_ + "[ft_e]", "0.0f")}));
  // Q's rows, once (zero beyond the region's rows: the micro-tiles read whole multiples of TM).
  const int64_t q_rows = ceil_div(rows_, tm_) * tm_;
  k.body.push_back(elements(q_rows * dk_, [&] {
    cx_.cur().push_back(let(kIndexType, "ft_qr", "ft_e / " + lit(dk_)));
    cx_.cur().push_back(let(kIndexType, "ft_qd", "ft_e % " + lit(dk_)));
    cx_.cur().push_back(let("float", "fa_x", "0.0f"));
    Block inside;
    cx_.with_block(inside, [&] {
      const auto idx = cx_.index_of(e1.accesses[0], vars(core_.scores, lom + " + ft_qr", qk_cols, "ft_qd"));
      cx_.cur().push_back(assign("fa_x", cx_.value(qk.inputs[0], idx)));
    });
    cx_.cur().push_back(if_then("ft_qr < " + nm, inside));
    cx_.cur().push_back(store(sq_, "ft_qr * " + lit(dk_ + 1) + " + ft_qd", "fa_x"));
  }));
  Block tile;
  // K's rows of the tile (zero beyond the keys and the tile).
  const int64_t k_rows = ceil_div(bc_, tn_) * tn_;
  tile.push_back(elements(k_rows * dk_, [&] {
    cx_.cur().push_back(let(kIndexType, "ft_qr", "ft_e / " + lit(dk_)));
    cx_.cur().push_back(let(kIndexType, "ft_qd", "ft_e % " + lit(dk_)));
    cx_.cur().push_back(let(kIndexType, "ft_fj", "ft_kt * " + lit(bc_) + " + ft_qr"));
    cx_.cur().push_back(let("float", "fa_x", "0.0f"));
    Block inside;
    cx_.with_block(inside, [&] {
      const auto idx = cx_.index_of(e1.accesses[1], vars(core_.scores, lom, "ft_fj", "ft_qd"));
      cx_.cur().push_back(assign("fa_x", cx_.value(qk.inputs[1], idx)));
    });
    cx_.cur().push_back(if_then("ft_qr < " + lit(bc_) + " && ft_fj < " + lit(keys_), inside));
    cx_.cur().push_back(store(sk_, "ft_qr * " + lit(dk_ + 1) + " + ft_qd", "fa_x"));
  }));
  // V's rows of the tile, the region's columns (zero beyond the keys and the columns).
  tile.push_back(elements(bc_ * dv_, [&] {
    cx_.cur().push_back(let(kIndexType, "ft_qr", "ft_e / " + lit(dv_)));
    cx_.cur().push_back(let(kIndexType, "ft_qd", "ft_e % " + lit(dv_)));
    cx_.cur().push_back(let(kIndexType, "ft_fj", "ft_kt * " + lit(bc_) + " + ft_qr"));
    cx_.cur().push_back(let("float", "fa_x", "0.0f"));
    Block inside;
    cx_.with_block(inside, [&] {
      const auto idx = cx_.index_of(e2.accesses[1], vars(core_.output, lom, lon + " + ft_qd", "ft_fj"));
      cx_.cur().push_back(assign("fa_x", cx_.value(pv.inputs[1], idx)));
    });
    cx_.cur().push_back(if_then("ft_fj < " + lit(keys_) + " && ft_qd < " + nn, inside));
    cx_.cur().push_back(store(sv_, "ft_e", "fa_x"));
  }));
  tile.push_back(barrier());
  for (Stmt& s : scores(nm)) tile.push_back(std::move(s));
  tile.push_back(barrier());
  for (Stmt& s : online_softmax(nm)) tile.push_back(std::move(s));
  tile.push_back(barrier());
  for (Stmt& s : update(nm)) tile.push_back(std::move(s));
  tile.push_back(barrier());
  k.body.push_back(uniform_for("ft_kt", "0", lit(ceil_div(keys_, bc_)), tile));
  // The rows' sums, then every output divided by its row's.
  k.body.push_back(serial_for("ft_rb", "0", lit(batches_),
                              {let(kIndexType, "ft_row", "ft_rb * " + lit(warps_) + " + ft_thread / " + lit(kWarpSize)),
                               if_then("ft_row < " + nm + " && ft_thread % " + lit(kWarpSize) + " == 0",
                                       {store(sl_, "ft_row", run_sum_ + "[ft_rb]")})}));
  k.body.push_back(barrier());
  const int64_t ort = ceil_div(rows_, um_), oct = ceil_div(dv_, un_);
  Block write = cx_.fresh_block([&] {
    cx_.cur().push_back(let(kIndexType, "ft_or", "ft_thread / " + lit(oct)));
    cx_.cur().push_back(let(kIndexType, "ft_oc", "ft_thread % " + lit(oct)));
    for (int64_t a = 0; a < um_; ++a) {
      for (int64_t b = 0; b < un_; ++b) {
        const std::string row = "(ft_or + " + lit(a * ort) + ")", col = "(ft_oc + " + lit(b * oct) + ")";
        Block cell;
        cx_.with_block(cell, [&] {
          std::vector<std::string> o = r.lo;
          o[rank - 2] = "(" + lom + " + " + row + ")";
          o[rank - 1] = "(" + lon + " + " + col + ")";
          cx_.cur().push_back(let("float", "fa_o", acc_ + "[" + std::to_string(a * un_ + b) + "] / " + sl_ + "[" + row + "]"));
          cx_.store_value(v, o, "fa_o");
        });
        cx_.cur().push_back(if_then(row + " < " + nm + " && " + col + " < " + nn, cell));
      }
    }
  });
  k.body.push_back(if_then("ft_thread < " + lit(ort * oct), write));
}

}  // namespace

std::unique_ptr<AnchorStage> attention_stage(LoweringContext& cx, Kernel& k, const planner::AttentionCore& core,
                                             const std::vector<int64_t>& max_extent) {
  return std::make_unique<AttentionStage>(cx, k, core, max_extent);
}

}  // namespace fusetune::codegen::stages
