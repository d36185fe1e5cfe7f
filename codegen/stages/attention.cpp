#include "codegen/stages/attention.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "codegen/scalar_ops.h"
#include "codegen/stages/split_k.h"
#include "core/error.h"
#include "core/integer.h"
#include "planner/strided_view.h"
#include "planner/tiling.h"

namespace fusetune::codegen::stages {

namespace {

using planner::TensorExpr;

int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Where element idx (non-negative index expressions) of a strided view lies in its base's buffer.
std::string view_element(const planner::StridedView& v, const std::vector<std::string>& idx) {
  std::string at = lit(v.offset);
  for (size_t d = 0; d < idx.size(); ++d) {
    if (v.strides[d] == 0) continue;
    at += " + (" + idx[d] + ")" + (v.groups[d] == 1 ? "" : " / " + lit(v.groups[d])) + " * " + lit(v.strides[d]);
  }
  return at;
}

class AttentionStage : public AnchorStage {
 public:
  AttentionStage(LoweringContext& cx, Kernel& k, const planner::AttentionCore& core, const std::vector<int64_t>& me)
      : cx_(cx), core_(core) {
    const size_t rank = me.size();
    const std::optional<planner::HeadFold> fold = planner::head_fold(cx.g, cx.group, core, me);
    check(fold.has_value(), "flash attention needs one matrix (one batch and head) per block, or grouped-query heads "
                            "sharing K and V (planner::head_fold)");
    fold_ = *fold;
    // The largest extents over the sampled tiles: a fold only where every tile is one alike (a
    // tile of rows that holds two heads' rows in part is none).
    check(fold_.axis < 0 || planner::uniform_flash_tiles(cx.g, cx.group, core, cx.cfg.tile, fold_),
          "flash attention: the tiles ", cx.cfg.str(), " hold ", fold_.heads,
          " heads' rows but not every tile holds whole heads of one key-value group");
    rows_ = fold_.heads * std::max<int64_t>(1, me[rank - 2]);
    dv_ = std::max<int64_t>(1, me[rank - 1]);
    dk_ = core.head;
    keys_ = core.keys;
    const Shape& scores = cx.g.value(node(core.scores).outputs[0]).shape;
    queries_ = scores[scores.size() - 2];
    mask_ = planner::causal_mask_of(cx.g, cx.group, core);
    bc_ = std::min(cx.cfg.reduce_step, keys_);
    const int threads = cx.cfg.threads;
    warps_ = threads / kWarpSize;
    batches_ = ceil_div(rows_, warps_);
    tensor_ = cx.cfg.mma;
    wgmma_ = tensor_ && cx.cfg.wgmma;
    const std::string v = std::to_string(out_value());
    if (tensor_) {
      plan_tensor(k, v);
    } else {
      std::tie(tm_, tn_) = planner::micro_tile(rows_, bc_, threads);
      std::tie(um_, un_) = planner::micro_tile(rows_, dv_, threads);
      check(tm_ > 0 && um_ > 0, "flash attention: micro-tiles of at most 8 x 8 on ", threads, " threads cannot cover ",
            rows_, " rows by ", bc_, " keys and ", dv_, " columns");
      sq_ = k.add_shared("fq" + v, DType::kF32, round_up(rows_, tm_) * (dk_ + 1));
      sk_ = k.add_shared("fk" + v, DType::kF32, round_up(bc_, tn_) * (dk_ + 1));
      sv_ = k.add_shared("fv" + v, DType::kF32, bc_ * dv_);
      sp_ = k.add_shared("fp" + v, DType::kF32, rows_ * bc_);
      sa_ = k.add_shared("fa" + v, DType::kF32, rows_);
      sl_ = k.add_shared("fl" + v, DType::kF32, rows_);
      acc_ = "fo" + v;
      k.thread_locals.push_back({acc_, um_ * un_});
    }
    // The row statistics a thread keeps: a warp per row holds each of its batches' (SIMT); a lane
    // of the tensor-core form its fragments' two rows'.
    stats_ = tensor_ ? 2 : batches_;
    run_max_ = "fm" + v;
    run_sum_ = "fs" + v;
    k.thread_locals.push_back({run_max_, stats_});
    k.thread_locals.push_back({run_sum_, stats_});
    for (const char* w : {"fx", "fy", "fz", "fr"}) k.thread_locals.push_back({w + v, tensor_ ? 2 : 1});
    direct_ = direct_output();
    if (direct_) {  // no shared buffer for the output, and the driver writes no root
      cx.in_registers.insert(out_value());
      cx.written.insert(cx.root);
    }
  }

  void emit(Kernel& k) override;

 private:
  const Node& node(int id) const { return cx_.g.nodes()[static_cast<size_t>(id)]; }
  int out_value() const { return node(core_.output).outputs[0]; }
  // The tensor-core form's plan: a warp per 16 rows; 16-bit slices of Q (rows x the head rounded
  // up to 16), of a key tile of K and V, and of the tile's probabilities; float scores; fragments.
  void plan_tensor(Kernel& k, const std::string& v);
  // The index of the block's row `row` (an index expression, from 0) in a value of the core's
  // batch axes and rows whose region starts at `lo`: the region's row origin plus the row, or,
  // with heads folded into the rows (planner::head_fold), head origin + row / queries along the
  // fold's axis and row origin + row % queries.
  std::vector<std::string> at_row(std::vector<std::string> lo, const std::string& row) const {
    const size_t m = lo.size() - 2;
    if (fold_.axis < 0) {
      lo[m] = "(" + lo[m] + " + " + row + ")";
      return lo;
    }
    const size_t h = static_cast<size_t>(fold_.axis);
    const std::string q = lit(fold_.queries);
    lo[h] = "(" + lo[h] + " + (" + row + ") / " + q + ")";
    lo[m] = "(" + lo[m] + " + (" + row + ") % " + q + ")";
    return lo;
  }
  // Variables of a MatMul's operand accesses: its region's origin, the block's row `row` (at_row;
  // "0" for K and V, which every row of the block reads alike), column n, reduction kk.
  std::vector<std::string> vars(int matmul, const std::string& row, const std::string& n, const std::string& kk) const {
    std::vector<std::string> out = at_row(cx_.region.at(node(matmul).outputs[0]).lo, row);
    out[out.size() - 1] = n;
    out.push_back(kk);
    return out;
  }
  // The rows of the block's region (an index expression): its row extent, or with folded heads
  // its heads' query rows; the query rows a block's rows span (the causal mask's last row).
  std::string region_rows(const Region& r) const {
    const size_t rank = r.n.size();
    if (fold_.axis < 0) return r.n[rank - 2];
    return "(" + r.n[static_cast<size_t>(fold_.axis)] + " * " + lit(fold_.queries) + ")";
  }
  // Where a staging loop writes: the shared buffer, the element its slot starts at (an index
  // expression) and the row pitch; and, for a B operand, the key tile it stages (an index
  // expression: its key ft_fj = tile x the tile's keys + the slot's row ft_qr, or its column
  // ft_qd where the keys run along the rows: Kᵀ with its keys contiguous).
  // With `cores` (the wgmma form) the slot holds core matrices, 8 rows of 8 elements each, `cores`
  // of them along a row block: element (r, c) at (r / 8) * cores * 64 + (c / 8) * 64 + (r % 8) * 8
  // + c % 8 (a K-major operand: LBO 128 bytes along the columns, SBO cores * 128 along the rows;
  // an N-major one: LBO cores * 128 along the rows, SBO 128).
  struct Slot {
    std::string buf, first = "0", tile = "ft_kt";
    int64_t pitch = 0;
    bool keys_in_columns = false;
    int64_t cores = 0;
  };
  static std::string slot_element(const Slot& to, const std::string& at) {
    return to.first == "0" ? at : to.first + " + " + at;
  }
  // The core matrices along a row of `width` elements in the wgmma form (0 otherwise: padded rows).
  int64_t cores(int64_t width) const { return wgmma_ ? width / 8 : 0; }
  static std::string slot_at(const Slot& to, const std::string& r, const std::string& c) {
    if (to.cores == 0) return r + " * " + lit(to.pitch) + " + " + c;
    return r + " / 8 * " + lit(to.cores * 64) + " + " + c + " / 8 * 64 + " + r + " % 8 * 8 + " + c + " % 8";
  }
  // A thread loop staging `rows` x `cols` elements of operand `operand` of MatMul `matmul` into
  // `to` (as `dtype`): element (ft_qr, ft_qd) reads the operand at `index()` where `row_inside`
  // holds and ft_qd < `limit`, else zero. Into float32 (the SIMT form), an operand the planner
  // stages wide (planner::wide_operand) goes as stage_wide's chunks; else an operand computed in
  // the group (a rotary embedding, a scale) goes a run of 8 (or 4) columns a thread, its group
  // inputs read along the columns 16 bytes a load where the run lies inside and they are aligned
  // (LoweringContext::along_reads), its run stored 16 bytes at a time where aligned; columns that
  // no run divides go element by element.
  Stmt stage(const Slot& to, DType dtype, int64_t rows, int64_t cols, int matmul, int operand, const std::string& row_inside,
             const std::string& limit, const std::function<std::vector<std::string>()>& index);
  // stage()'s loop over chunks of `lanes` consecutive columns (cols a multiple of it) of the
  // operand's view: thread t takes chunks b x threads x batch + i x threads + t in its batch b
  // (a batch: up to planner::kVectorStagingLoads chunks a thread), all of a batch loaded before
  // the first is stored, each by one 16-byte read-only load where the chunk lies wholly inside and
  // starts 16-byte aligned (a predicated load: the batch's loads all in flight), element by
  // element otherwise (an unaligned view, a chunk past the columns' limit); converted to float
  // into `to`.
  Stmt stage_wide(const Slot& to, const planner::StridedView& view, int64_t rows, int64_t cols, int matmul, int operand,
                  const std::string& row_inside, const std::string& limit,
                  const std::function<std::vector<std::string>()>& index);
  // Where chunk `item` (an index expression) of a staging loop over `rows` x `cols / lanes` chunks
  // of `lanes` columns lies: lets ft_qr, ft_qd (its row and first column) and, for a B operand,
  // ft_fj (its key) into the current block; returns the expressions of its first element in the
  // view's base, its elements inside (0 beyond the rows where `row_inside` fails, at most up to
  // `limit` along the columns) and its first element's place in `to`.
  std::array<std::string, 3> place_chunk(const Slot& to, const planner::StridedView& view, const std::string& item, int64_t cols,
                                         int64_t lanes, int matmul, int operand, const std::string& row_inside,
                                         const std::string& limit, const std::function<std::vector<std::string>()>& index);
  // The tensor-core form's staging where the operand moves by cp.async (planner::async_operand:
  // a strided view of a 16-bit parameter whose width axis, the head for Q and K, the columns for
  // V, is contiguous), as copy_stage's loop: 16-byte cp.async chunks of 8 elements (those at or
  // beyond `limit` along the width, or in a row where `row_inside` fails, zero-filled), element by
  // element where a chunk's first element is not 16-byte aligned; else stage()'s loop. Returns
  // whether it copies asynchronously (the caller commits, and waits before its barrier).
  bool stage16(Block& into, const Slot& to, int64_t rows, int64_t cols, int matmul, int operand,
               const std::string& row_inside, const std::string& limit, const std::function<std::vector<std::string>()>& index);
  // The tensor-core form's K (or Kᵀ) and V rows of key tile `tile` (an index expression) into
  // slot `slot` (an index expression) of their buffers (zero beyond the keys, the head and V's
  // columns): stage_keys K's, stage_values V's, stage_key_tile both.
  void stage_keys(Block& into, const std::string& tile, const std::string& slot);
  void stage_values(Block& into, const std::string& tile, const std::string& slot,
                    const std::string& lon, const std::string& nn);
  void stage_key_tile(Block& into, const std::string& tile, const std::string& slot,
                      const std::string& lon, const std::string& nn);
  // The score `local` of row `row` and key `key` of the tile (index expressions) through the chain
  // to the softmax's input, as the float local fa_x (-inf beyond the keys, and where `inside`, if
  // given, fails), then `sink` (which reads fa_x).
  void chain_cell(const std::string& local, const std::string& row, const std::string& key, const Stmt& sink,
                  const std::string& inside = "");
  Block simt_scores(const std::string& nm);
  Block simt_update(const std::string& nm);
  Block online_softmax(const std::string& nm);
  // The tensor-core form's online softmax on the tile's score fragments, in registers (see
  // emit_tensor): the rows' running statistics, each row's factor and the probabilities in S's
  // registers; rescale_output then rescales the lane's output fragments by their rows' factors.
  Block fragment_softmax(const std::string& nm);
  Block rescale_output() const;
  // P's A fragment register q (0-3) of the tile's k16 slice kq, packed from S's registers.
  std::string packed_p(int64_t kq, int64_t q) const;
  // The two-element thread-local `local` (a lane's two rows) combined by `op` ("max" or "sum",
  // warp_combine's) over the lane's quad, by two butterflies: all four lanes end with the same value.
  Block quad_reduce(const std::string& local, const std::string& op) const;
  // The tensor-core form's first row of the thread's warp (16 a warp).
  static std::string warp_rows() { return "(ft_thread / " + lit(kWarpSize) + " * 16)"; }
  void emit_simt(Kernel& k, const std::string& nm, const std::string& nn);
  // The tensor-core forms: the output fragments zeroed and Q staged (returns whether by cp.async:
  // the caller commits); mma.sync's tile loop; wgmma's; after either, the quads' row sums, the
  // splits' combination and the division.
  bool stage_q(Kernel& k, const std::string& nm);
  void emit_tensor(Kernel& k, const std::string& nm, const std::string& nn);
  void emit_wgmma(Kernel& k, const std::string& nm, const std::string& nn);
  // The wgmma form's O += P V on the key tile in V's slot `slot` (an index expression).
  Block values_product(const std::string& slot) const;
  void finish_tensor(Kernel& k, const std::string& nm, const std::string& nn);
  // Row statistic `b` (an index expression below stats_): its row, under stat_lets(), and whether
  // this thread publishes it (the warp's lane 0 of a row; the tensor-core form's quad's lane 0).
  Block stat_lets() const;
  std::string stat_row(const std::string& b) const;
  std::string stat_writer() const;
  // out[row][col] = acc / the row's sum for every cell `cells` names ((accumulator, row, column)
  // index expressions, the tensor-core form's four a fragment: rows g, g, g + 8, g + 8), under
  // `guard`, after `lets`: to the output's shared buffer (and parameter, if exported), or (SIMT)
  // where direct_ says in the root (the tensor-core forms' direct output is finish_runs'). The SIMT form publishes its rows' sums to shared memory first; the
  // tensor-core form's lanes hold their two rows' (run_sum_ after quad_reduce).
  void finish(Kernel& k, const std::string& nm, const std::string& nn, const std::string& guard, const Block& lets,
              const std::vector<std::array<std::string, 3>>& cells);
  // The tensor-core form's output straight to the root (direct_), a pair of 8-column units at a
  // time: each lane's 8 quotients (its 2 columns of each unit in rows g and g + 8) exchanged within
  // its quad (transpose_quad), after which lane t holds row g + 8 (t / 2)'s 8 columns of the
  // pair's unit t % 2: one 16-byte store where the run lies inside the region and is aligned, else
  // element by element. Every lane reaches the exchanges.
  void finish_runs(Kernel& k, const std::string& nm, const std::string& nn);
  // flash_output_view's view where every sampled tile's root region is the view of its output
  // region (no element of the output's region lies in another block's root tile); else nullopt.
  std::optional<planner::StridedView> direct_output() const;
  // With the keys split over blocks (flash-decoding): each block's unnormalized outputs and its
  // rows' running maxima and sums published (split_k.h), and the tile's last block combining them
  // (cells, lets and guard as finish's) into its own accumulators and row sums; nothing unsplit.
  void combine_splits(Kernel& k, const std::string& nm, const std::string& guard, const Block& lets,
                      const std::vector<std::array<std::string, 3>>& cells);

  LoweringContext& cx_;
  const planner::AttentionCore& core_;
  bool tensor_ = false;
  int64_t rows_ = 0, dv_ = 0, dk_ = 0, keys_ = 0, bc_ = 0;  // R, DV, the head (K) width, the keys, the key tile
  int64_t tm_ = 0, tn_ = 0, um_ = 0, un_ = 0;  // micro-tiles of the scores and of the output (SIMT)
  int64_t warps_ = 0, batches_ = 0;            // a warp per row: batches of rows
  planner::HeadFold fold_;                      // grouped-query heads folded into the rows, or one matrix
  int64_t stats_ = 0;                          // the row statistics a thread keeps
  std::string first_tile_ = "0", end_tile_;    // the block's key tiles [first, end): all, or its split's
  // Causal (planner::causal_mask_of): the tiles past the block's last row's last visible key are
  // not run, and a mask the indices give is computed, not read; queries_: the scores' rows.
  std::optional<planner::CausalMask> mask_;
  int64_t queries_ = 0;
  std::string sq_, sk_, sv_, sp_, sa_, sl_;    // Q, K, V, the scores/probabilities, the rescaling factors and the sums (SIMT)
  std::string acc_, run_max_, run_sum_;        // thread-locals: the output, each batch's row statistics
  // The tensor-core form: 16-bit type, padded extents and pitches, fragments.
  DType half_ = DType::kUndefined;
  bool ring_ = false;  // the key tiles in two slots, the next one's copies in flight (planner::streams_key_tiles)
  bool kt_ = false;    // K's buffer holds Kᵀ's rows, the keys contiguous (planner::keys_contiguous)
  bool wgmma_ = false;  // the products by wgmma (sm_90a): a warpgroup per 64 rows, operands as core matrices
  int64_t dk16_ = 0, dv16_ = 0, pq_ = 0, pk_ = 0, pv_ = 0;
  int64_t rp_ = 0;      // the rows the block's warps (warpgroups) cover, Q's staged rows
  int64_t k_slot_ = 0;  // elements of a key tile's slot in K's buffer
  std::string frag_q_, frag_k_, frag_s_, frag_p_, frag_v_;
  // The output written from the registers to the root (direct_output), or nullopt: through its buffer.
  std::optional<planner::StridedView> direct_;
};

void AttentionStage::plan_tensor(Kernel& k, const std::string& v) {
  const Graph& g = cx_.g;
  half_ = g.value(node(core_.scores).inputs[0]).dtype;
  check(planner::tensor_attention(g, core_), "flash attention on tensor cores needs Q, K, P and V all float16 or all bfloat16");
  rp_ = planner::flash_tensor_rows(warps_, wgmma_);
  const int64_t rp = rp_;
  check(rows_ <= rp, "flash attention on tensor cores: ", rows_, " rows on ", warps_, " warps");
  check(!wgmma_ || planner::wgmma_attention(g, cx_.group, core_, cx_.cfg.reduce_step),
        "flash attention on wgmma: an operand does not move by cp.async, or a width exceeds 256");
  bc_ = round_up(bc_, 16);
  dk16_ = round_up(dk_, 16);
  dv16_ = round_up(dv_, 16);
  const auto pitch = [&](int64_t width) { return planner::flash_tensor_pitch(width, wgmma_); };
  pq_ = pitch(dk16_);
  kt_ = planner::keys_contiguous(g, cx_.group, core_);
  pk_ = pitch(kt_ ? bc_ : dk16_);
  k_slot_ = kt_ ? dk16_ * pk_ : bc_ * pk_;
  pv_ = pitch(dv16_);
  sq_ = k.add_shared("fq" + v, half_, rp * pq_);
  ring_ = planner::streams_key_tiles(cx_.g, cx_.group, core_);
  const int64_t slots = ring_ ? 2 : 1;
  sk_ = k.add_shared("fk" + v, half_, slots * k_slot_);
  sv_ = k.add_shared("fv" + v, half_, slots * bc_ * pv_);
  acc_ = "fo" + v;
  frag_q_ = "gq" + v;
  frag_k_ = "gk" + v;
  frag_s_ = "gs" + v;
  frag_p_ = "gp" + v;
  frag_v_ = "gv" + v;
  k.thread_locals.push_back({acc_, dv16_ / 8 * 4, DType::kF32});
  k.thread_locals.push_back({frag_s_, bc_ / 8 * 4, DType::kF32});
  // wgmma reads Q, K and V from shared memory, and P's fragments of the whole tile from registers
  // until its wait; mma.sync takes one k16 slice of P at a time.
  k.thread_locals.push_back({frag_p_, wgmma_ ? bc_ / 16 * 4 : 4, DType::kU32});
  if (wgmma_) return;
  k.thread_locals.push_back({frag_q_, dk16_ / 16 * 4, DType::kU32});
  k.thread_locals.push_back({frag_k_, 4, DType::kU32});
  k.thread_locals.push_back({frag_v_, 4, DType::kU32});
}

Stmt AttentionStage::stage(const Slot& to, DType dtype, int64_t rows, int64_t cols, int matmul, int operand,
                           const std::string& row_inside, const std::string& limit,
                           const std::function<std::vector<std::string>()>& index) {
  check(!to.keys_in_columns && to.cores == 0, "flash attention: Kᵀ's rows, and wgmma's core matrices, are staged by cp.async only");
  if (dtype == DType::kF32) {
    const std::optional<planner::StridedView> view = planner::wide_operand(cx_.g, cx_.group, core_, matmul, operand);
    if (view && cols % planner::wide_lanes(cx_.g, *view) == 0) {
      return stage_wide(to, *view, rows, cols, matmul, operand, row_inside, limit, index);
    }
  }
  const Node& mm = node(matmul);
  const TensorExpr& e = cx_.exprs.at(matmul);
  const int u = mm.inputs[static_cast<size_t>(operand)];
  // The operand's element at column `col` of the row (an index expression for ft_qd).
  const auto element = [&](const std::string& col) {
    std::vector<std::string> vars = index();
    for (std::string& v : vars) v = replace_name(v, "ft_qd", col);
    return cx_.value(u, cx_.index_of(e.accesses[static_cast<size_t>(operand)], vars));
  };
  const int64_t run = cols % 8 == 0 ? 8 : cols % 4 == 0 ? 4 : 1;
  if (run == 1) {
    const std::string inside = limit == lit(cols) ? row_inside : row_inside + " && ft_qd < " + limit;
    return thread_for("ft_e", "0", lit(rows * cols), cx_.fresh_block([&] {
      cx_.cur().push_back(let(kIndexType, "ft_qr", "ft_e / " + lit(cols)));
      cx_.cur().push_back(let(kIndexType, "ft_qd", "ft_e % " + lit(cols)));
      if (operand == 1) cx_.cur().push_back(let(kIndexType, "ft_fj", to.tile + " * " + lit(bc_) + " + ft_qr"));  // a key
      cx_.cur().push_back(let("float", "fa_x", "0.0f"));
      Block in;
      cx_.with_block(in, [&] { cx_.cur().push_back(assign("fa_x", element("ft_qd"))); });
      cx_.cur().push_back(if_then(inside, in));
      const std::string x = dtype == DType::kF32 ? "fa_x" : store_from_compute(dtype, "fa_x");
      cx_.cur().push_back(store(to.buf, slot_element(to, "ft_qr * " + lit(to.pitch) + " + ft_qd"), x));
    }));
  }
  // Runs of `run` columns a thread: where the run lies inside, the group inputs it reads along
  // the columns come as 16-byte vectors (LoweringContext::along_reads: Q and K as laid out, and
  // the rotate-half piece of a rotary embedding, whose halves are multiples of the run), and the
  // run goes to shared memory in 16-byte stores where aligned.
  const int64_t chunks = cols / run;
  const auto lane = [](int64_t t) { return "(ft_qd + " + lit(t) + ")"; };
  return thread_for("ft_e", "0", lit(rows * chunks), cx_.fresh_block([&] {
    cx_.cur().push_back(let(kIndexType, "ft_qr", "ft_e / " + lit(chunks)));
    cx_.cur().push_back(let(kIndexType, "ft_qd", "ft_e % " + lit(chunks) + " * " + lit(run)));
    if (operand == 1) cx_.cur().push_back(let(kIndexType, "ft_fj", to.tile + " * " + lit(bc_) + " + ft_qr"));  // a key
    std::vector<std::string> xs;
    for (int64_t t = 0; t < run; ++t) {
      xs.push_back("fa_r" + std::to_string(t));
      cx_.cur().push_back(let("float", xs.back(), "0.0f"));
    }
    // Lane t's element into fa_r<t>, in a scope of its own (its chain may name the same locals).
    const auto compute = [&](int64_t t) {
      Block one;
      cx_.with_block(one, [&] { cx_.cur().push_back(assign(xs[static_cast<size_t>(t)], element(lane(t)))); });
      return one;
    };
    Block whole = cx_.fresh_block([&] {
      const std::vector<LoweringContext::VectorRead> reads =
          cx_.along_reads({"ft_qd"}, run, lane, [&](const std::vector<std::string>& o) { element(o.back()); });
      cx_.with_runs(reads, run, [&] {
        for (int64_t t = 0; t < run; ++t) cx_.cur().push_back(if_then("1", compute(t)));
      });
    });
    Block edge;
    for (int64_t t = 0; t < run; ++t) edge.push_back(if_then(row_inside + " && " + lane(t) + " < " + limit, compute(t)));
    const std::string all_in = limit == lit(cols) ? row_inside : row_inside + " && ft_qd + " + lit(run) + " <= " + limit;
    cx_.cur().push_back(if_then(all_in, whole, edge));
    cx_.store_run_at(to.buf, slot_element(to, "ft_qr * " + lit(to.pitch) + " + ft_qd"), dtype, xs);
  }));
}

Stmt AttentionStage::stage_wide(const Slot& to, const planner::StridedView& view, int64_t rows, int64_t cols, int matmul,
                                int operand, const std::string& row_inside, const std::string& limit,
                                const std::function<std::vector<std::string>()>& index) {
  check(cx_.param.count(view.base) > 0, "flash attention: the view of an operand starts at value ", view.base,
        ", not a group input");
  const std::string p = cx_.param.at(view.base);
  const DType ut = cx_.g.value(view.base).dtype;
  const int64_t lanes = planner::wide_lanes(cx_.g, view), chunks = cols / lanes, count = rows * chunks;
  const int64_t threads = cx_.cfg.threads;
  const int64_t batch = planner::staging_batch(count, cx_.cfg.threads, planner::kVectorStagingLoads);
  // Chunk n of the batch moves as one vector: whole inside and aligned.
  const auto whole_chunk = [&](const std::string& n) { return "fa_n" + n + " == " + lit(lanes) + " && " + aligned16(ut, p, "fa_a" + n); };
  Block body = cx_.fresh_block([&] {
    // Where each chunk of the batch lies (fa_a: its first element in the view's base; fa_n: its
    // elements inside, 0 beyond the rows; fa_d: its place in shared memory), then its load.
    for (int64_t i = 0; i < batch; ++i) {
      const std::string n = std::to_string(i), at = "fa_a" + n, inside = "fa_n" + n;
      cx_.cur().push_back(let(kIndexType, "fa_e" + n, "ft_sb * " + lit(batch * threads) + " + " + lit(i * threads) + " + ft_thread"));
      cx_.cur().push_back(let(kIndexType, at, "0"));
      cx_.cur().push_back(let(kIndexType, inside, "0"));
      cx_.cur().push_back(let(kIndexType, "fa_d" + n, "0"));
      Block chunk;
      cx_.with_block(chunk, [&] {
        const auto [first, valid, slot] = place_chunk(to, view, "fa_e" + n, cols, lanes, matmul, operand, row_inside, limit, index);
        cx_.cur().push_back(assign(at, first));
        cx_.cur().push_back(assign(inside, valid));
        cx_.cur().push_back(assign("fa_d" + n, slot));
      });
      cx_.cur().push_back(if_then("fa_e" + n + " < " + lit(count), chunk));
      cx_.cur().push_back(vector_load("fa_w" + n, p, at, ut, whole_chunk(n)));
    }
    // Each chunk converted and stored: from its vector, or element by element.
    for (int64_t i = 0; i < batch; ++i) {
      const std::string n = std::to_string(i), at = "fa_a" + n, inside = "fa_n" + n, to_at = "fa_d" + n + " + ";
      Block whole, part;
      for (int64_t j = 0; j < lanes; ++j) {
        whole.push_back(store(to.buf, to_at + lit(j), load_as_compute(ut, vector_element("fa_w" + n, ut, static_cast<int>(j)))));
        part.push_back(store(to.buf, to_at + lit(j),
                             "(" + lit(j) + " < " + inside + " ? " + load_as_compute(ut, p + "[" + at + " + " + lit(j) + "]") + " : 0.0f)"));
      }
      cx_.cur().push_back(if_then("fa_e" + n + " < " + lit(count),
                                  {if_then(whole_chunk(n), whole, part)}));
    }
  });
  return serial_for("ft_sb", "0", lit(ceil_div(count, batch * threads)), body);
}

bool AttentionStage::stage16(Block& into, const Slot& to, int64_t rows, int64_t cols, int matmul, int operand,
                             const std::string& row_inside, const std::string& limit,
                             const std::function<std::vector<std::string>()>& index) {
  const std::optional<planner::StridedView> view = planner::async_operand(cx_.g, cx_.group, core_, matmul, operand);
  if (!view || cols % 8 != 0) {
    into.push_back(stage(to, half_, rows, cols, matmul, operand, row_inside, limit, index));
    return false;
  }
  check(cx_.param.count(view->base) > 0, "flash attention: the view of an operand starts at value ", view->base,
        ", not a group input");
  const std::string p = cx_.param.at(view->base);
  check(to.cores == 0 || rows % 8 == 0, "flash attention: core matrices of ", rows, " rows, not whole");
  into.push_back(thread_for("ft_e", "0", lit(rows * (cols / 8)), cx_.fresh_block([&] {
    const auto [first, valid, slot] = place_chunk(to, *view, "ft_e", cols, 8, matmul, operand, row_inside, limit, index);
    cx_.cur().push_back(let(kIndexType, "ft_v", valid));
    cx_.cur().push_back(let(kIndexType, "ft_at", first));
    cx_.cur().push_back(let(kIndexType, "ft_s", slot));
    cx_.cur().push_back(copy_chunk(to.buf, "ft_s", p, "ft_at", "ft_v", 8));
  })));
  return true;
}

std::array<std::string, 3> AttentionStage::place_chunk(const Slot& to, const planner::StridedView& view, const std::string& item,
                                                       int64_t cols, int64_t lanes, int matmul, int operand,
                                                       const std::string& row_inside, const std::string& limit,
                                                       const std::function<std::vector<std::string>()>& index) {
  const int64_t chunks = cols / lanes;
  if (to.cores > 0) {
    // Core matrices: a chunk's 16 bytes land at (r % 8) x 16 within their 128, so eight
    // consecutive items take the same chunk of eight consecutive rows (the staged rows are whole
    // core matrices), each quarter-warp's stores conflict-free; the next eight take the rows' next
    // chunk, so a warp still reads 64 contiguous bytes of each of 8 rows (as the products' wgmma
    // staging does, stages/mma_matmul.h).
    cx_.cur().push_back(let(kIndexType, "ft_qr", item + " / " + lit(8 * chunks) + " * 8 + " + item + " % 8"));
    cx_.cur().push_back(let(kIndexType, "ft_qd", item + " / 8 % " + lit(chunks) + " * " + lit(lanes)));
  } else {
    cx_.cur().push_back(let(kIndexType, "ft_qr", item + " / " + lit(chunks)));
    cx_.cur().push_back(let(kIndexType, "ft_qd", item + " % " + lit(chunks) + " * " + lit(lanes)));
  }
  if (operand == 1) {
    cx_.cur().push_back(let(kIndexType, "ft_fj", to.tile + " * " + lit(bc_) + (to.keys_in_columns ? " + ft_qd" : " + ft_qr")));  // a key
  }
  const std::vector<std::string> idx = cx_.index_of(cx_.exprs.at(matmul).accesses[static_cast<size_t>(operand)], index());
  return {view_element(view, idx), "(" + row_inside + " ? ft_max(0, ft_min(" + lit(lanes) + ", " + limit + " - ft_qd)) : 0)",
          slot_element(to, slot_at(to, "ft_qr", "ft_qd"))};
}

void AttentionStage::stage_keys(Block& into, const std::string& tile, const std::string& slot) {
  const std::string first = slot == "0" ? std::string("0") : "(" + slot + ") * " + lit(k_slot_);
  if (kt_) {
    // Kᵀ's rows (the head's) of the tile's keys: chunks of 8 keys, zero beyond the keys.
    const bool async = stage16(into, {sk_, first, tile, pk_, true, cores(bc_)}, dk16_, bc_, core_.scores, 1, "ft_qr < " + lit(dk_),
                               lit(keys_) + " - " + tile + " * " + lit(bc_), [&] { return vars(core_.scores, "0", "ft_fj", "ft_qr"); });
    check(async, "flash attention: Kᵀ with its keys contiguous moves by cp.async");
  } else {
    stage16(into, {sk_, first, tile, pk_, false, cores(dk16_)}, bc_, dk16_, core_.scores, 1, "ft_fj < " + lit(keys_), lit(dk_),
            [&] { return vars(core_.scores, "0", "ft_fj", "ft_qd"); });
  }
}

void AttentionStage::stage_values(Block& into, const std::string& tile, const std::string& slot,
                                  const std::string& lon, const std::string& nn) {
  const std::string first = slot == "0" ? std::string("0") : "(" + slot + ") * " + lit(bc_ * pv_);
  stage16(into, {sv_, first, tile, pv_, false, cores(dv16_)}, bc_, dv16_, core_.output, 1, "ft_fj < " + lit(keys_), nn,
          [&] { return vars(core_.output, "0", lon + " + ft_qd", "ft_fj"); });
}

void AttentionStage::stage_key_tile(Block& into, const std::string& tile, const std::string& slot,
                                    const std::string& lon, const std::string& nn) {
  stage_keys(into, tile, slot);
  stage_values(into, tile, slot, lon, nn);
}

void AttentionStage::chain_cell(const std::string& local, const std::string& row, const std::string& key, const Stmt& sink,
                                const std::string& inside) {
  const Node& soft = node(core_.softmax);
  const int qk = node(core_.scores).outputs[0];
  const Shape& ss = cx_.g.value(qk).shape;
  const size_t rank = ss.size();
  std::vector<std::string> idx = at_row(cx_.region.at(soft.inputs[0]).lo, row);
  cx_.cur().push_back(let(kIndexType, "ft_fi", idx[rank - 2]));
  cx_.cur().push_back(let(kIndexType, "ft_fj", "ft_kt * " + lit(bc_) + " + " + key));
  idx[rank - 2] = "ft_fi";
  idx[rank - 1] = "ft_fj";
  // The chain reads the scores where the softmax reads it (planner/attention.h): this cell.
  cx_.provided[qk] = [&, local](const std::vector<std::string>& where) {
    for (size_t d = rank - 2; d < rank; ++d) {
      check(ss[d] <= 1 || where[d] == idx[d], "flash attention: the chain reads the scores at ", where[d], ", not ", idx[d]);
    }
    return local;
  };
  // A causal mask the indices give: key j of row i is seen where j <= i + keys - queries (the
  // Where's condition, or a bias of 0 there and -infinity elsewhere: the same weights).
  if (mask_ && mask_->from_indices) {
    const bool where = node(mask_->node).op == "Where";
    const bool seen_true = mask_->seen_true;
    const int64_t ahead = keys_ - queries_;
    cx_.provided[mask_->operand] = [where, seen_true, ahead](const std::vector<std::string>& index) {
      const size_t n = index.size();
      const std::string seen = "((" + index[n - 1] + ") <= (" + index[n - 2] + ") + " + lit(ahead) + ")";
      if (where) return seen_true ? seen : "(!" + seen + ")";
      return "(" + seen + " ? 0.0f : (-ft_inf()))";
    };
  }
  cx_.cur().push_back(let("float", "fa_x", "(-ft_inf())"));
  Block chain;
  cx_.with_block(chain, [&] { cx_.cur().push_back(assign("fa_x", cx_.value(soft.inputs[0], idx))); });
  cx_.provided.erase(qk);
  if (mask_) cx_.provided.erase(mask_->operand);
  cx_.cur().push_back(if_then("ft_fj < " + lit(keys_) + (inside.empty() ? "" : " && " + inside), chain));
  cx_.cur().push_back(sink);
}

// Each thread's TM x TN scores of the tile (rows ft_tr + a * RT, keys ft_tc + b * CT), through the
// chain up to the softmax's input, into the probabilities' buffer.
Block AttentionStage::simt_scores(const std::string& nm) {
  const int64_t rt = ceil_div(rows_, tm_), ct = ceil_div(bc_, tn_);
  Block body = {let(kIndexType, "ft_tr", "ft_thread / " + lit(ct)), let(kIndexType, "ft_tc", "ft_thread % " + lit(ct))};
  for (int64_t a = 0; a < tm_; ++a) {
    for (int64_t b = 0; b < tn_; ++b) body.push_back(let("float", "fa_s" + std::to_string(a * tn_ + b), "0.0f"));
  }
  Block dot;
  for (int64_t a = 0; a < tm_; ++a) {
    dot.push_back(let("float", "fa_q" + std::to_string(a), sq_ + "[(ft_tr + " + lit(a * rt) + ") * " + lit(dk_ + 1) + " + ft_d]"));
  }
  for (int64_t b = 0; b < tn_; ++b) {
    dot.push_back(let("float", "fa_k" + std::to_string(b), sk_ + "[(ft_tc + " + lit(b * ct) + ") * " + lit(dk_ + 1) + " + ft_d]"));
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
        const std::string row = "(ft_tr + " + lit(a * rt) + ")", key = "(ft_tc + " + lit(b * ct) + ")";
        Block cell;
        cx_.with_block(cell, [&] {
          chain_cell("fa_s" + std::to_string(a * tn_ + b), row, key, store(sp_, row + " * " + lit(bc_) + " + " + key, "fa_x"));
        });
        cx_.cur().push_back(if_then(row + " < " + nm + " && " + key + " < " + lit(bc_), cell));
      }
    }
  });
  body.insert(body.end(), cells.begin(), cells.end());
  return {if_then("ft_thread < " + lit(rt * ct), body)};
}

// The SIMT form's softmax, a warp per row: the tile's maximum, the exponentials against the new
// running maximum (to the float probabilities), their sum folded into the running sum; lane 0
// publishes the factor rescaling the row's earlier output.
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
  const Stmt keep = store(sp_, "ft_row * " + lit(bc_) + " + ft_c", "fa_p");
  for (const Stmt& st : over_row({let("float", "fa_p", "expf(" + at + " - fa_ref)"), keep, assign(sum + "[0]", sum + "[0] + fa_p")})) {
    rescale.push_back(st);
  }
  batch.push_back(assign(sum + "[0]", "0.0f"));
  batch.push_back(if_then(busy, rescale));
  batch.push_back(warp_reduce(sum, "sum", busy));
  batch.push_back(if_then(busy, {assign(run_sum_ + "[ft_rb]", run_sum_ + "[ft_rb] * " + factor + "[0] + " + sum + "[0]"),
                                 if_then("ft_thread % " + lit(kWarpSize) + " == 0", {store(sa_, row, factor + "[0]")})}));
  return {uniform_for("ft_rb", "0", lit(batches_), batch, static_cast<int>(batches_))};
}

// Each thread's UM x UN outputs (rows ft_or + a * ORT, columns ft_oc + b * OCT): rescaled, plus
// the tile's probabilities times V.
Block AttentionStage::simt_update(const std::string& nm) {
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

void AttentionStage::finish(Kernel& k, const std::string& nm, const std::string& nn, const std::string& guard,
                            const Block& lets, const std::vector<std::array<std::string, 3>>& cells) {
  const int v = out_value();
  const Region& r = cx_.region.at(v);
  const size_t rank = r.n.size();
  std::function<std::string(size_t)> sum = [&](size_t i) { return run_sum_ + "[" + std::to_string(i % 4 / 2) + "]"; };
  if (!tensor_) {
    Block publish = stat_lets();
    publish.push_back(let(kIndexType, "ft_row", stat_row("ft_rb")));
    publish.push_back(if_then("ft_row < " + nm + " && " + stat_writer(), {store(sl_, "ft_row", run_sum_ + "[ft_rb]")}));
    k.body.push_back(serial_for("ft_rb", "0", lit(stats_), publish, static_cast<int>(stats_)));
    k.body.push_back(barrier());
    sum = [&](size_t i) { return sl_ + "[" + cells[i][1] + "]"; };
  }
  Block write = cx_.fresh_block([&] {
    cx_.cur().insert(cx_.cur().end(), lets.begin(), lets.end());
    for (size_t i = 0; i < cells.size(); ++i) {
      const auto& [acc, row, col] = cells[i];
      Block cell;
      cx_.with_block(cell, [&] {
        std::vector<std::string> o = at_row(r.lo, row);
        o[rank - 1] = "(" + r.lo[rank - 1] + " + " + col + ")";
        cx_.cur().push_back(let("float", "fa_o", acc + " / " + sum(i)));
        if (direct_) {
          cx_.cur().push_back(store(cx_.out_param.at(cx_.root), view_element(*direct_, o), store_from_compute(cx_.g.value(cx_.root).dtype, "fa_o")));
        } else {
          cx_.store_value(v, o, "fa_o");
        }
      });
      cx_.cur().push_back(if_then(row + " < " + nm + " && " + col + " < " + nn, cell));
    }
  });
  k.body.push_back(if_then(guard, write));
}

void AttentionStage::finish_runs(Kernel& k, const std::string& nm, const std::string& nn) {
  const int v = out_value();
  const Region& r = cx_.region.at(v);
  const size_t rank = r.n.size();
  const std::string id = std::to_string(v), g = "fa_g" + id, t = "fa_t" + id, q = "fa_r" + id, sent = "fa_e" + id;
  const std::string lane = "(ft_thread % " + lit(kWarpSize) + ")";
  k.body.push_back(let(kIndexType, g, lane + " / 4"));
  k.body.push_back(let(kIndexType, t, lane + " % 4"));
  k.thread_locals.push_back({q, 8, DType::kF32});
  k.thread_locals.push_back({sent, 2, DType::kF32});
  const std::string p = cx_.out_param.at(cx_.root);
  const DType dt = cx_.g.value(cx_.root).dtype;
  const auto qe = [&](int64_t c) { return q + "[" + std::to_string(c) + "]"; };
  for (int64_t u = 0; u < dv16_ / 8; u += 2) {
    // Unit u + j, row g + 8h: slot 2h + j, element e (the unit's column 2t + e).
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t j = 0; j < 2; ++j) {
        for (int64_t e = 0; e < 2; ++e) {
          k.body.push_back(assign(qe((2 * h + j) * 2 + e), acc_ + "[" + std::to_string((u + j) * 4 + 2 * h + e) + "] / " + run_sum_ +
                                                                "[" + std::to_string(h) + "]"));
        }
      }
    }
    for (Stmt& s : transpose_quad(q, sent, t)) k.body.push_back(std::move(s));
    // Lane t: slot s holds lane s's pair, so column c of its run is element c of q.
    const std::string row = "(" + warp_rows() + " + " + g + " + (" + t + " >> 1) * 8)";
    const std::string col = "(" + lit(u * 8) + " + (" + t + " & 1) * 8)";
    const Block out = cx_.fresh_block([&] {
      std::vector<std::string> o = at_row(r.lo, row);
      const auto at = [&](int64_t c) {
        o[rank - 1] = "(" + r.lo[rank - 1] + " + " + col + " + " + lit(c) + ")";
        return view_element(*direct_, o);
      };
      Block whole, edge;
      cx_.with_block(whole, [&] {
        std::vector<std::string> run;
        for (int64_t c = 0; c < 8; ++c) run.push_back(qe(c));
        cx_.store_run_at(p, at(0), dt, run);
      });
      for (int64_t c = 0; c < 8; ++c) {
        edge.push_back(if_then(col + " + " + lit(c) + " < " + nn, {store(p, at(c), store_from_compute(dt, qe(c)))}));
      }
      cx_.cur().push_back(if_then(col + " + 7 < " + nn, whole, edge));
    });
    k.body.push_back(if_then(row + " < " + nm, out));
  }
}

std::optional<planner::StridedView> AttentionStage::direct_output() const {
  std::optional<planner::StridedView> view = planner::flash_output_view(cx_.g, cx_.group, core_);
  if (!view) return std::nullopt;
  const auto elements = [](const std::vector<planner::Interval>& region) {
    int64_t n = 1;
    for (const planner::Interval& i : region) n *= i.size();
    return n;
  };
  for (int64_t t : cx_.sample_tiles()) {
    const std::map<int, std::vector<planner::Interval>> regions = cx_.numeric_regions(t);
    if (elements(regions.at(out_value())) != elements(regions.at(cx_.root))) return std::nullopt;
  }
  return view;
}

// The tile's splits each hold, per row, an output O_s not yet divided, its running maximum m_s
// and sum l_s (over their keys alone). With M the rows' greatest m_s (0 where every m_s is -inf:
// a row whose keys are all masked) and w_s = exp(m_s - M), the row's output is
// sum_s w_s O_s / sum_s w_s l_s: the last block sets its accumulators to the numerator and its
// rows' sums to the denominator, each summed in split order (the same whichever block arrives
// last), and finish divides as unsplit. A split with no key tiles has m_s = -inf, l_s = 0 and
// O_s = 0: weight 0.
void AttentionStage::combine_splits(Kernel& k, const std::string& nm, const std::string& guard, const Block& lets,
                                    const std::vector<std::array<std::string, 3>>& cells) {
  const int64_t splits = cx_.splits();
  if (splits == 1) return;
  std::vector<std::string> values;
  for (const auto& cell : cells) values.push_back(cell[0]);
  const int64_t stats = static_cast<int64_t>(values.size());  // then each row statistic's maximum and sum
  for (int64_t b = 0; b < stats_; ++b) {
    values.push_back(run_max_ + "[" + std::to_string(b) + "]");
    values.push_back(run_sum_ + "[" + std::to_string(b) + "]");
  }
  const SplitSlots slots = publish_split(cx_, k, values);
  const auto read = [&](int64_t i) { return "ft_ldcg(" + slots.buffer + ", " + slots.element("ft_s", i) + ")"; };
  // Every thread holding a row's statistics computes the row's weights and sum; the statistic's
  // writer stores the weights. Each statistic in a scope of its own.
  const std::string weights = k.add_shared("fw" + std::to_string(out_value()), DType::kF32, rows_ * splits);
  for (int64_t b = 0; b < stats_; ++b) {
    const std::string m = read(stats + 2 * b), l = read(stats + 2 * b + 1);
    Block batch = stat_lets();
    const Block rest = {
        let(kIndexType, "ft_row", stat_row(lit(b))), let("float", "fa_m", "(-ft_inf())"),
        serial_for("ft_s", "0", lit(splits), {assign("fa_m", "ft_fmaxn(fa_m, " + m + ")")}),
        let("float", "fa_ref", "(fa_m == (-ft_inf()) ? 0.0f : fa_m)"), let("float", "fa_l", "0.0f"),
        serial_for("ft_s", "0", lit(splits),
                   {let("float", "fa_w", "expf(" + m + " - fa_ref)"), assign("fa_l", "fa_l + fa_w * " + l),
                    if_then("ft_row < " + nm + " && " + stat_writer(), {store(weights, "ft_row * " + lit(splits) + " + ft_s", "fa_w")})}),
        assign(run_sum_ + "[" + std::to_string(b) + "]", "fa_l")};
    batch.insert(batch.end(), rest.begin(), rest.end());
    k.body.push_back(if_then("1", batch));
  }
  k.body.push_back(barrier());
  // Each split's outputs read as publish_split stored them: four of a thread's in one 16-byte load
  // (a warp's 512 contiguous bytes), the rest one by one.
  Block sum = lets;
  const auto weighted = [&](size_t i, const std::string& value) {
    const auto& [acc, row, col] = cells[i];
    return assign(acc, acc + " + (" + row + " < " + nm + " ? " + weights + "[" + row + " * " + lit(splits) + " + ft_s] : 0.0f) * " + value);
  };
  const size_t quad_cells = cells.size() / 4 * 4;  // publish_split's quads hold these whole
  for (size_t i = 0; i < cells.size(); ++i) sum.push_back(assign(cells[i][0], "0.0f"));
  for (size_t q = 0; q < quad_cells; q += 4) {
    const std::string quad = "fa_q" + std::to_string(q / 4);
    Block each = {vector_load_l2(quad, slots.buffer, slots.element("ft_s", static_cast<int64_t>(q)))};
    for (size_t j = 0; j < 4; ++j) each.push_back(weighted(q + j, vector_element(quad, DType::kF32, static_cast<int>(j))));
    sum.push_back(serial_for("ft_s", "0", lit(splits), each));
  }
  for (size_t i = quad_cells; i < cells.size(); ++i) {
    sum.push_back(serial_for("ft_s", "0", lit(splits), {weighted(i, read(static_cast<int64_t>(i)))}));
  }
  k.body.push_back(if_then(guard, sum));
  release_split(k);
}

void AttentionStage::emit_simt(Kernel& k, const std::string& nm, const std::string& nn) {
  const Region& r = cx_.region.at(out_value());
  const size_t rank = r.n.size();
  const std::string lon = r.lo[rank - 1];
  const std::string qk_cols = cx_.region.at(node(core_.scores).outputs[0]).lo[rank - 1];
  k.body.push_back(serial_for("ft_e", "0", lit(um_ * un_), {assign(acc_ + "[ft_e]", "0.0f")}));
  // Q's rows, once (zero beyond the region's rows: the micro-tiles read whole multiples of TM).
  k.body.push_back(stage({sq_, "0", "ft_kt", dk_ + 1}, DType::kF32, round_up(rows_, tm_), dk_, core_.scores, 0, "ft_qr < " + nm,
                         lit(dk_), [&] { return vars(core_.scores, "ft_qr", qk_cols, "ft_qd"); }));
  Block tile;
  // K's rows of the tile (zero beyond the keys and the tile), V's (and beyond the columns).
  tile.push_back(stage({sk_, "0", "ft_kt", dk_ + 1}, DType::kF32, round_up(bc_, tn_), dk_, core_.scores, 1,
                       "ft_qr < " + lit(bc_) + " && ft_fj < " + lit(keys_), lit(dk_),
                       [&] { return vars(core_.scores, "0", "ft_fj", "ft_qd"); }));
  tile.push_back(stage({sv_, "0", "ft_kt", dv_}, DType::kF32, bc_, dv_, core_.output, 1, "ft_fj < " + lit(keys_), nn,
                       [&] { return vars(core_.output, "0", lon + " + ft_qd", "ft_fj"); }));
  tile.push_back(barrier());
  for (Stmt& s : simt_scores(nm)) tile.push_back(std::move(s));
  tile.push_back(barrier());
  for (Stmt& s : online_softmax(nm)) tile.push_back(std::move(s));
  tile.push_back(barrier());
  for (Stmt& s : simt_update(nm)) tile.push_back(std::move(s));
  tile.push_back(barrier());
  k.body.push_back(uniform_for("ft_kt", first_tile_, end_tile_, tile));
  const int64_t ort = ceil_div(rows_, um_), oct = ceil_div(dv_, un_);
  std::vector<std::array<std::string, 3>> cells;
  for (int64_t a = 0; a < um_; ++a) {
    for (int64_t b = 0; b < un_; ++b) {
      cells.push_back({acc_ + "[" + std::to_string(a * un_ + b) + "]", "(ft_or + " + lit(a * ort) + ")", "(ft_oc + " + lit(b * oct) + ")"});
    }
  }
  const std::string guard = "ft_thread < " + lit(ort * oct);
  const Block lets = {let(kIndexType, "ft_or", "ft_thread / " + lit(oct)), let(kIndexType, "ft_oc", "ft_thread % " + lit(oct))};
  combine_splits(k, nm, guard, lets, cells);
  finish(k, nm, nn, guard, lets, cells);
}

// The tensor-core form's softmax on the tile's score fragments, where they lie: lane (g, t) of
// warp w holds, in n8 block j, rows 16w + g (h = 0) and 16w + g + 8 (h = 1), keys 8j + 2t and
// 8j + 2t + 1. Each score goes through the chain in its register (-inf beyond the keys and the
// rows); each lane takes the maximum of its scores of each row, the quad's four lanes (which hold
// the row's keys between them) exchange theirs by two butterflies, so all four hold the row's
// maximum; the new running maximum, the factor that rescales the row's earlier output and sum,
// and the exponentials in the fragments' registers, which a lane sums into its own partial sum of
// the row (quad_reduce adds the quad's after the last tile). No shared memory, no barrier. The
// output fragments keep their scale until rescale_output.
Block AttentionStage::fragment_softmax(const std::string& nm) {
  const std::string v = std::to_string(out_value());
  const std::string mx = "fx" + v, sum = "fy" + v, factor = "fz" + v;
  const std::string lane = "(ft_thread % " + lit(kWarpSize) + ")", w16 = warp_rows();
  const auto s_at = [&](int64_t i) { return frag_s_ + "[" + std::to_string(i) + "]"; };
  const auto h_at = [](const std::string& local, int64_t h) { return local + "[" + std::to_string(h) + "]"; };
  const int64_t cells = bc_ / 8 * 4;
  Block out;
  out.push_back(if_then("1", cx_.fresh_block([&] {
    cx_.cur().push_back(let(kIndexType, "ft_g", lane + " / 4"));
    cx_.cur().push_back(let(kIndexType, "ft_t", lane + " % 4"));
    for (int64_t i = 0; i < cells; ++i) {
      const std::string row = "(" + w16 + " + ft_g + " + lit(8 * (i % 4 / 2)) + ")";
      const std::string key = "(2 * ft_t + " + lit(i / 4 * 8 + i % 2) + ")";
      Block cell;
      cx_.with_block(cell, [&] { chain_cell(s_at(i), row, key, assign(s_at(i), "fa_x"), row + " < " + nm); });
      cx_.cur().push_back(if_then("1", cell));
    }
  })));
  for (int64_t h = 0; h < 2; ++h) out.push_back(assign(h_at(mx, h), "(-ft_inf())"));
  for (int64_t i = 0; i < cells; ++i) {
    out.push_back(assign(h_at(mx, i % 4 / 2), "ft_fmaxn(" + h_at(mx, i % 4 / 2) + ", " + s_at(i) + ")"));
  }
  for (Stmt& s : quad_reduce(mx, "max")) out.push_back(std::move(s));
  // A row that has seen only -inf subtracts 0 (its exponentials 0, its factor 0 or 1).
  Block update;
  for (int64_t h = 0; h < 2; ++h) {
    const std::string mn = "fa_mn" + std::to_string(h), ref = "fa_ref" + std::to_string(h);
    update.push_back(let("float", mn, "ft_fmaxn(" + h_at(run_max_, h) + ", " + h_at(mx, h) + ")"));
    update.push_back(let("float", ref, "(" + mn + " == (-ft_inf()) ? 0.0f : " + mn + ")"));
    update.push_back(assign(h_at(factor, h), "expf(" + h_at(run_max_, h) + " - " + ref + ")"));
    update.push_back(assign(h_at(run_max_, h), mn));
    update.push_back(assign(h_at(sum, h), "0.0f"));
  }
  for (int64_t i = 0; i < cells; ++i) {
    const int64_t h = i % 4 / 2;
    update.push_back(assign(s_at(i), "expf(" + s_at(i) + " - fa_ref" + std::to_string(h) + ")"));
    update.push_back(assign(h_at(sum, h), h_at(sum, h) + " + " + s_at(i)));
  }
  for (int64_t h = 0; h < 2; ++h) {
    update.push_back(assign(h_at(run_sum_, h), h_at(run_sum_, h) + " * " + h_at(factor, h) + " + " + h_at(sum, h)));
  }
  out.push_back(if_then("1", update));  // a scope of its own for the rows' locals
  return out;
}

Block AttentionStage::rescale_output() const {
  const std::string factor = "fz" + std::to_string(out_value());
  Block out;
  for (int64_t i = 0; i < dv16_ / 8 * 4; ++i) {
    const std::string cell = acc_ + "[" + std::to_string(i) + "]";
    out.push_back(assign(cell, cell + " * " + factor + "[" + std::to_string(i % 4 / 2) + "]"));
  }
  return out;
}

// P's A fragment for keys [16 kq, 16 kq + 16) is the probabilities of n8 blocks 2 kq and 2 kq + 1,
// each lane's own: the C layout of two n8 blocks is the A layout of an m16k16 slice (a0, a1: rows
// g and g + 8 at keys 2t, 2t + 1 of block 2 kq; a2, a3: the same of block 2 kq + 1), packed two
// to a register in the 16-bit type (one cvt for both).
std::string AttentionStage::packed_p(int64_t kq, int64_t q) const {
  const int64_t j = 2 * kq + q / 2, c = 2 * (q % 2);
  const auto s_at = [&](int64_t i) { return frag_s_ + "[" + std::to_string(j * 4 + i) + "]"; };
  return std::string(half_ == DType::kBF16 ? "ft_pack_bf2" : "ft_pack_h2") + "(" + s_at(c) + ", " + s_at(c + 1) + ")";
}

// At each butterfly a lane combines its value with its partner's, in either order the same float
// (max and sum commute), so the quad's four lanes agree.
Block AttentionStage::quad_reduce(const std::string& local, const std::string& op) const {
  const std::string got = "fr" + std::to_string(out_value());
  Block out;
  for (int m = 1; m <= 2; m *= 2) {
    for (int64_t h = 0; h < 2; ++h) out.push_back(shuffle_xor(got, h, local + "[" + std::to_string(h) + "]", m));
    for (int64_t h = 0; h < 2; ++h) {
      const std::string at = local + "[" + std::to_string(h) + "]";
      out.push_back(assign(at, warp_combine(op, at, got + "[" + std::to_string(h) + "]")));
    }
  }
  return out;
}

Block AttentionStage::stat_lets() const {
  if (!tensor_) return {};
  return {let(kIndexType, "ft_g", "ft_thread % " + lit(kWarpSize) + " / 4")};
}

std::string AttentionStage::stat_row(const std::string& b) const {
  if (tensor_) return "(" + warp_rows() + " + ft_g + 8 * (" + b + "))";
  return "((" + b + ") * " + lit(warps_) + " + ft_thread / " + lit(kWarpSize) + ")";
}

std::string AttentionStage::stat_writer() const {
  return "ft_thread % " + lit(tensor_ ? 4 : kWarpSize) + " == 0";
}

bool AttentionStage::stage_q(Kernel& k, const std::string& nm) {
  const std::string qk_cols = cx_.region.at(node(core_.scores).outputs[0]).lo[cx_.region.at(out_value()).n.size() - 1];
  k.body.push_back(serial_for("ft_e", "0", lit(dv16_ / 8 * 4), {assign(acc_ + "[ft_e]", "0.0f")}));
  return stage16(k.body, {sq_, "0", "ft_kt", pq_, false, cores(dk16_)}, rp_, dk16_, core_.scores, 0, "ft_qr < " + nm, lit(dk_),
                 [&] { return vars(core_.scores, "ft_qr", qk_cols, "ft_qd"); });
}

// The mma.sync form: warp w owns rows [16w, 16w + 16) of the tile. Q's A fragments are loaded
// once; per key tile the scores S = Q K^T accumulate in m16n8 fragments (K's rows are B's columns:
// ldmatrix without .trans), the chain and the online softmax run on them in registers
// (fragment_softmax, then rescale_output), and O += P V on fragments (P as A from the
// probabilities' registers, V as B by ldmatrix.trans). A tile has two barriers: its K and V
// staged, and its reads done before the next tile's staging.
void AttentionStage::emit_tensor(Kernel& k, const std::string& nm, const std::string& nn) {
  const Region& r = cx_.region.at(out_value());
  const size_t rank = r.n.size();
  const std::string lon = r.lo[rank - 1];
  const std::string lane = "(ft_thread % " + lit(kWarpSize) + ")";
  const std::string w16 = warp_rows();
  const bool async_q = stage_q(k, nm);
  if (async_q) k.body.push_back(copy_async_commit());
  // With two slots the first key tile's copies fly while Q's fragments load; the loop then stages
  // tile ft_kt + 1 into the slot tile ft_kt - 1 used (every warp has passed the barrier that ends
  // that tile) and waits for all but that newest group (tile ft_kt's copies, and Q's), so each
  // tile's copies overlap the previous tile's products and softmax. A last tile commits an empty
  // group, so the count stays one a tile.
  if (ring_) {
    stage_key_tile(k.body, first_tile_, first_tile_ == "0" ? "0" : "(" + first_tile_ + " & 1)", lon, nn);
    k.body.push_back(copy_async_commit());
  }
  if (async_q) k.body.push_back(copy_async_wait(ring_ ? 1 : 0));
  k.body.push_back(barrier());
  for (int64_t kq = 0; kq < dk16_ / 16; ++kq) {
    k.body.push_back(ldmatrix(frag_q_, kq * 4, 4, false, sq_,
                              "(" + w16 + " + " + lane + " % 16) * " + lit(pq_) + " + " + lit(kq * 16) + " + " + lane + " / 16 * 8"));
  }
  Block tile;
  std::string k0 = "0", v0 = "0";  // where the tile's slot starts in K's and V's buffers
  if (ring_) {
    Block next;
    stage_key_tile(next, "(ft_kt + 1)", "((ft_kt + 1) & 1)", lon, nn);
    tile.push_back(if_then("ft_kt + 1 < " + end_tile_, next));
    tile.push_back(copy_async_commit());
    tile.push_back(copy_async_wait(1));
    tile.push_back(let(kIndexType, "ft_ks", "(ft_kt & 1) * " + lit(k_slot_)));
    tile.push_back(let(kIndexType, "ft_vs", "(ft_kt & 1) * " + lit(bc_ * pv_)));
    k0 = "ft_ks";
    v0 = "ft_vs";
  } else {
    stage_key_tile(tile, "ft_kt", "0", lon, nn);
  }
  tile.push_back(barrier());
  // S = Q K^T: per 16 of the head, two n8 blocks of keys per ldmatrix.x4 (matrices: keys 0-7 at
  // columns 0-7 and 8-15, then keys 8-15); from Kᵀ's rows by .trans, as V's below.
  tile.push_back(serial_for("ft_e", "0", lit(bc_ / 8 * 4), {assign(frag_s_ + "[ft_e]", "0.0f")}));
  for (int64_t kq = 0; kq < dk16_ / 16; ++kq) {
    for (int64_t jb = 0; jb < bc_ / 16; ++jb) {
      tile.push_back(kt_ ? ldmatrix(frag_k_, 0, 4, true, sk_,
                                    slot_element({sk_, k0}, "(" + lit(kq * 16) + " + " + lane + " % 16) * " + lit(pk_) + " + " +
                                                                lit(jb * 16) + " + " + lane + " / 16 * 8"))
                         : ldmatrix(frag_k_, 0, 4, false, sk_,
                                    slot_element({sk_, k0}, "(" + lit(jb * 16) + " + " + lane + " / 16 * 8 + " + lane + " % 8) * " +
                                                                lit(pk_) + " + " + lit(kq * 16) + " + " + lane + " / 8 % 2 * 8")));
      tile.push_back(mma(frag_s_, 2 * jb * 4, frag_q_, kq * 4, frag_k_, 0, half_));
      tile.push_back(mma(frag_s_, (2 * jb + 1) * 4, frag_q_, kq * 4, frag_k_, 2, half_));
    }
  }
  for (Stmt& s : fragment_softmax(nm)) tile.push_back(std::move(s));
  for (Stmt& s : rescale_output()) tile.push_back(std::move(s));
  // O += P V: a k16 slice of P's A fragment at a time (packed_p), V by ldmatrix.trans.
  for (int64_t kq = 0; kq < bc_ / 16; ++kq) {
    for (int64_t q = 0; q < 4; ++q) tile.push_back(assign(frag_p_ + "[" + std::to_string(q) + "]", packed_p(kq, q)));
    for (int64_t jb = 0; jb < dv16_ / 16; ++jb) {
      tile.push_back(ldmatrix(frag_v_, 0, 4, true, sv_,
                              slot_element({sv_, v0}, "(" + lit(kq * 16) + " + " + lane + " % 16) * " + lit(pv_) + " + " + lit(jb * 16) + " + " + lane + " / 16 * 8")));
      tile.push_back(mma(acc_, 2 * jb * 4, frag_p_, 0, frag_v_, 0, half_));
      tile.push_back(mma(acc_, (2 * jb + 1) * 4, frag_p_, 0, frag_v_, 2, half_));
    }
  }
  tile.push_back(barrier());
  k.body.push_back(uniform_for("ft_kt", first_tile_, end_tile_, tile));
  // A split beyond the last key tile (or the rows' last visible one) runs no tile: its first
  // tile's copies still fly.
  if (ring_ && (cx_.splits() > 1 || mask_)) k.body.push_back(copy_async_wait(0));
  finish_tensor(k, nm, nn);
}

// The wgmma form: a warpgroup per 64 rows, FlashAttention-3's schedule within a warpgroup. Tile
// t issues S = Q K_t^T (Q K-major: LBO 128 bytes, SBO a row block's head; K as a K-major B, its
// rows at the same strides, or Kᵀ as an N-major one: LBO a row block of the tile's keys, SBO 128),
// a wgmma per 16 of the head, and commits it; then, from the second tile on, the previous tile's
// O += P V (values_product, P still in its registers), a group of its own. S's wait leaves that
// group in flight: the chain and the softmax's maxima, exponentials and sums run on S while the
// tensor cores compute P V, which the warpgroup then waits for before it rescales O and packs
// tile t's P over the previous one's. After the last tile, its P V. K and V move in groups of
// their own, each in two slots: K_{t+1}'s copies go out as tile t begins (into the slot S_{t-1}
// read), V_{t+1}'s as it ends (into the slot P V read for tile t - 1, waited for), so tile t waits
// for K_t's and V_{t-1}'s copies with V_t's and K_{t+1}'s in flight. Two barriers a tile: the
// copies it reads landed (each thread's fenced to the async proxy first), and every warpgroup done
// reading K_t's and V_{t-1}'s slots before they are staged again.
void AttentionStage::emit_wgmma(Kernel& k, const std::string& nm, const std::string& nn) {
  const Region& r = cx_.region.at(out_value());
  const size_t rank = r.n.size();
  const std::string lon = r.lo[rank - 1];
  check(ring_ && stage_q(k, nm), "flash attention on wgmma: Q, K and V move by cp.async");
  k.body.push_back(copy_async_commit());
  const std::string first_slot = first_tile_ == "0" ? "0" : "(" + first_tile_ + " & 1)";
  stage_keys(k.body, first_tile_, first_slot);
  k.body.push_back(copy_async_commit());
  stage_values(k.body, first_tile_, first_slot, lon, nn);
  k.body.push_back(copy_async_commit());
  const std::string next = "(ft_kt + 1)", next_slot = "((ft_kt + 1) & 1)", more = "ft_kt + 1 < " + end_tile_;
  Block tile, keys, values;
  stage_keys(keys, next, next_slot);
  tile.push_back(if_then(more, keys));
  tile.push_back(copy_async_commit());
  tile.push_back(copy_async_wait(2));
  tile.push_back(proxy_fence());
  tile.push_back(barrier());
  tile.push_back(serial_for("ft_e", "0", lit(bc_ / 8 * 4), {assign(frag_s_ + "[ft_e]", "0.0f")}));
  tile.push_back(wgmma_fence(frag_s_));
  const std::string group = "(ft_thread / " + lit(4 * kWarpSize) + ")";
  const std::string k0 = "(ft_kt & 1) * " + lit(k_slot_);
  for (int64_t kq = 0; kq < dk16_ / 16; ++kq) {
    tile.push_back(wgmma(frag_s_, 0, static_cast<int>(bc_), sq_, group + " * " + lit(64 * dk16_) + " + " + lit(kq * 128), 128,
                         dk16_ * 16, sk_, slot_element({sk_, k0}, lit(kt_ ? kq * 16 * bc_ : kq * 128)), kt_ ? bc_ * 16 : 128,
                         kt_ ? 128 : dk16_ * 16, half_, !kt_));
  }
  tile.push_back(wgmma_commit());
  tile.push_back(uniform_if("ft_pv", "ft_kt > " + first_tile_, values_product(next_slot)));  // tile t - 1's slot
  tile.push_back(wgmma_commit());
  tile.push_back(wgmma_wait(frag_s_, 1));
  for (Stmt& s : fragment_softmax(nm)) tile.push_back(std::move(s));
  tile.push_back(wgmma_wait(acc_, 0));
  for (Stmt& s : rescale_output()) tile.push_back(std::move(s));
  for (int64_t kq = 0; kq < bc_ / 16; ++kq) {
    for (int64_t q = 0; q < 4; ++q) tile.push_back(assign(frag_p_ + "[" + std::to_string(kq * 4 + q) + "]", packed_p(kq, q)));
  }
  tile.push_back(barrier());
  stage_values(values, next, next_slot, lon, nn);
  tile.push_back(if_then(more, values));
  tile.push_back(copy_async_commit());
  k.body.push_back(uniform_for("ft_kt", first_tile_, end_tile_, tile));
  // The last tile's V (a split or rows that run no tile: the first tile's copies, still in flight).
  k.body.push_back(copy_async_wait(0));
  k.body.push_back(proxy_fence());
  k.body.push_back(barrier());
  k.body.push_back(uniform_if("ft_pv", end_tile_ + " > " + first_tile_, values_product("((" + end_tile_ + " - 1) & 1)")));
  k.body.push_back(wgmma_commit());
  k.body.push_back(wgmma_wait(acc_, 0));
  finish_tensor(k, nm, nn);
}

// Each warpgroup's A fragments of a k16 slice are its warps' (wgmma's register A), V an N-major B
// (LBO a row block of V's width, SBO 128): a wgmma per 16 keys, the registers held from the fence.
Block AttentionStage::values_product(const std::string& slot) const {
  Block out = {wgmma_fence(acc_, frag_p_)};
  const std::string v0 = "(" + slot + ") * " + lit(bc_ * pv_);
  for (int64_t kq = 0; kq < bc_ / 16; ++kq) {
    out.push_back(wgmma_registers(acc_, 0, static_cast<int>(dv16_), frag_p_, kq * 4, sv_, slot_element({sv_, v0}, lit(kq * 16 * dv16_)),
                                  dv16_ * 16, 128, half_));
  }
  return out;
}

void AttentionStage::finish_tensor(Kernel& k, const std::string& nm, const std::string& nn) {
  const std::string lane = "(ft_thread % " + lit(kWarpSize) + ")", w16 = warp_rows();
  std::vector<std::array<std::string, 3>> cells;
  for (int64_t j = 0; j < dv16_ / 8; ++j) {
    for (int64_t c = 0; c < 4; ++c) {
      cells.push_back({acc_ + "[" + std::to_string(j * 4 + c) + "]", "(" + w16 + " + ft_g + " + lit(8 * (c / 2)) + ")",
                       "(2 * ft_t + " + lit(j * 8 + c % 2) + ")"});
    }
  }
  for (Stmt& s : quad_reduce(run_sum_, "sum")) k.body.push_back(std::move(s));  // the lanes' partial row sums
  const Block lets = {let(kIndexType, "ft_g", lane + " / 4"), let(kIndexType, "ft_t", lane + " % 4")};
  combine_splits(k, nm, w16 + " < " + nm, lets, cells);
  if (direct_) {
    finish_runs(k, nm, nn);
  } else {
    finish(k, nm, nn, w16 + " < " + nm, lets, cells);
  }
}

void AttentionStage::emit(Kernel& k) {
  const Region& r = cx_.region.at(out_value());
  const size_t rank = r.n.size();
  const std::string nm = region_rows(r), nn = r.n[rank - 1];
  k.body.push_back(serial_for("ft_e", "0", lit(stats_), {assign(run_max_ + "[ft_e]", "(-ft_inf())"), assign(run_sum_ + "[ft_e]", "0.0f")},
                              static_cast<int>(stats_)));
  const int64_t tiles = ceil_div(keys_, bc_);
  first_tile_ = split_first_step(cx_, k, tiles);
  end_tile_ = split_end_step(cx_, first_tile_, tiles);
  if (mask_) {
    // Row i sees the keys up to i + keys - queries: the block's rows [lo, lo + n) end their keys
    // in tile (lo + n - 1 + keys - queries) / bc (planner::visible_tiles); folded heads hold
    // every query row.
    const std::string lom = r.lo[rank - 2], query_rows = fold_.axis < 0 ? nm : lit(fold_.queries);
    k.uniform.push_back(let(kIndexType, "ft_kend",
                            "ft_min(" + end_tile_ + ", ft_fdiv(" + lom + " + " + query_rows + " + " + lit(keys_ - queries_ + bc_ - 1) +
                                ", " + lit(bc_) + "))"));
    end_tile_ = "ft_kend";
  }
  if (wgmma_) {
    emit_wgmma(k, nm, nn);
  } else if (tensor_) {
    emit_tensor(k, nm, nn);
  } else {
    emit_simt(k, nm, nn);
  }
}

}  // namespace

std::unique_ptr<AnchorStage> attention_stage(LoweringContext& cx, Kernel& k, const planner::AttentionCore& core,
                                             const std::vector<int64_t>& max_extent) {
  return std::make_unique<AttentionStage>(cx, k, core, max_extent);
}

}  // namespace fusetune::codegen::stages
