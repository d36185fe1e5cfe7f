#include "codegen/stages/matmul.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "codegen/scalar_ops.h"
#include "codegen/stages/split_k.h"
#include "core/error.h"
#include "planner/epilogue.h"

namespace fusetune::codegen::stages {

using planner::Access;
using planner::TensorExpr;

bool stages_matmul(const LoweringContext& cx, const Node& n, const std::vector<int64_t>& max_extent) {
  if (n.op != "MatMul" || cx.cfg.reduce_step <= 0 || cx.g.value(n.inputs[0]).shape.size() < 2 ||
      cx.g.value(n.inputs[1]).shape.size() < 2) {
    return false;
  }
  // Operands stream through shared memory one reduction step at a time; needs one matrix per
  // block: every batch axis of the region of extent 1.
  bool one_matrix = true;
  for (size_t d = 0; d + 2 < max_extent.size(); ++d) one_matrix = one_matrix && max_extent[d] <= 1;
  return one_matrix;
}

StagedProduct staged_product(const LoweringContext& cx, const Node& n, const std::vector<int64_t>& max_extent) {
  StagedProduct p;
  p.v = n.outputs[0];
  p.m_axis = max_extent.size() - 2;
  p.n_axis = max_extent.size() - 1;
  p.step = cx.cfg.reduce_step;
  p.k = cx.g.value(n.inputs[0]).shape.back();
  return p;
}

void place_epilogue(LoweringContext& cx, Kernel& k, StagedProduct& p, const std::optional<std::vector<int>>& epilogue,
                    int64_t max_elems) {
  if (epilogue) {
    cx.in_registers.insert(p.v);
    cx.written.insert(epilogue->begin(), epilogue->end());
  } else if (p.v == cx.root) {
    p.acc = k.add_shared("acc" + std::to_string(p.v), is_float(cx.g.value(p.v).dtype) ? DType::kF32 : DType::kI64,
                         std::max<int64_t>(1, max_elems));
  }
}

std::string product_accumulators(const LoweringContext& cx, const StagedProduct& p) {
  auto b = cx.buffer.find(p.v);
  return b != cx.buffer.end() ? b->second : p.acc;
}

std::vector<std::string> product_vars(const LoweringContext& cx, const StagedProduct& p, const std::string& m,
                                      const std::string& nidx, const std::string& kk) {
  std::vector<std::string> vars = cx.region.at(p.v).lo;
  vars[p.m_axis] = m;
  vars[p.n_axis] = nidx;
  vars.push_back(kk);
  return vars;
}

void export_product(LoweringContext& cx, Kernel& k, const StagedProduct& p) {
  const int v = p.v;
  if (!cx.out_param.count(v)) return;
  k.body.push_back(barrier());
  cx.region_loop(k, v, [&](const std::vector<std::string>& o) {
    cx.cur().push_back(store(cx.out_param.at(v), flat(cx.g.value(v).shape, o),
                             store_from_compute(cx.g.value(v).dtype, product_accumulators(cx, p) + "[ft_e]")));
  });
}

std::vector<std::string> product_index(const LoweringContext& cx, const StagedProduct& p, const std::string& row,
                                       const std::string& col) {
  const Region& r = cx.region.at(p.v);
  std::vector<std::string> o = r.lo;
  o[p.m_axis] = "(" + r.lo[p.m_axis] + " + " + row + ")";
  o[p.n_axis] = "(" + r.lo[p.n_axis] + " + " + col + ")";
  return o;
}

std::vector<std::string> epilogue_values(LoweringContext& cx, const StagedProduct& p, const std::vector<int>& outputs,
                                         const std::vector<std::string>& at, const std::string& element) {
  cx.provided[p.v] = [element](const std::vector<std::string>&) { return element; };
  std::vector<std::string> xs;
  for (int w : outputs) xs.push_back(cx.value(w, at));
  cx.provided.erase(p.v);
  return xs;
}

void epilogue_run(LoweringContext& cx, const StagedProduct& p, const std::vector<int>& outputs, const std::string& row,
                  const std::string& col, int64_t n, const std::function<std::string(int64_t)>& element) {
  const Region& r = cx.region.at(p.v);
  // The run's first column as a variable: element j's column is (c + j), and the group inputs
  // the chain reads along the columns (a residual, a bias) come in 16-byte vectors.
  const std::string c = "ft_rc" + std::to_string(cx.next_local());
  cx.cur().push_back(let(kIndexType, c, r.lo[p.n_axis] + " + " + col));
  const auto lane = [&](int64_t j) { return "(" + c + " + " + lit(j) + ")"; };
  const auto at = [&](const std::string& column) {
    std::vector<std::string> o = product_index(cx, p, row, col);
    o[p.n_axis] = column;
    return o;
  };
  const auto values = [&](int64_t j) { return epilogue_values(cx, p, outputs, at(lane(j)), element(j)); };
  const auto compute_and_store = [&] {
    std::vector<std::vector<std::string>> runs(outputs.size());
    for (int64_t j = 0; j < n; ++j) {
      const std::vector<std::string> xs = values(j);
      for (size_t w = 0; w < outputs.size(); ++w) runs[w].push_back(xs[w]);
    }
    for (size_t w = 0; w < outputs.size(); ++w) cx.store_run(outputs[w], at(lane(0)), runs[w]);
  };
  Block whole = cx.fresh_block([&] {
    std::vector<LoweringContext::VectorRead> reads;
    if (p.n_axis + 1 == r.n.size()) {
      reads = cx.along_reads(at(c), n, lane, [&](const std::vector<std::string>& o) {
        epilogue_values(cx, p, outputs, o, element(0));
      });
    }
    cx.with_runs(reads, n, compute_and_store);
  });
  Block edge = cx.fresh_block([&] {
    for (int64_t j = 0; j < n; ++j) {
      Block one;
      cx.with_block(one, [&] {
        const std::vector<std::string> xs = values(j);
        for (size_t w = 0; w < outputs.size(); ++w) cx.store_value(outputs[w], at(lane(j)), xs[w]);
      });
      cx.cur().push_back(if_then(col + (j ? " + " + lit(j) : "") + " < " + r.n[p.n_axis], one));
    }
  });
  cx.cur().push_back(if_then(row + " < " + r.n[p.m_axis], {if_then(col + " + " + lit(n - 1) + " < " + r.n[p.n_axis], whole, edge)}));
}

namespace {

// The scalar form's plan.
struct ScalarPlan : StagedProduct {
  std::string a, b;  // shared operand slices
  int64_t a_cap = 0, b_cap = 0;
  std::string regs;  // register-blocked accumulators (thread-local), when the threads cover the region
  bool vec_a = false, vec_b = false;  // operands staged in float4 quads
  int64_t tm = 0, tn = 0;             // the micro-tile of each thread (the GEMV form: rows x a vector)
  // The GEMV form: B read straight from memory in vectors of `lanes` columns; `vecs` of them span
  // the region's columns, `slices` = threads / vecs split each step's rows; `red` holds the
  // slices' partial products.
  bool gemv = false;
  int64_t lanes = 0, vecs = 0, slices = 0;
  int64_t parts = 0;    // the first round of the slices' sum: this many partial sums per element
  std::string red, partial;
  std::string shares;   // split-K: a thread's share of the tile's summed plane (elements t, t + threads, ...)
  int64_t share_count = 0;  // ... its elements: ceil(plane / threads)
  // The ring (planner::simt_staging; ring.async_b set): each step's slices in slot step % stages,
  // A's rows pitch_a floats apart, B's pitch_b.
  planner::MmaStaging ring;
  int64_t pitch_a = 0, pitch_b = 0, slot_a = 0, slot_b = 0;
};

class StagedMatMulStage : public AnchorStage {
 public:
  StagedMatMulStage(LoweringContext& cx, Kernel& k, const Node& node, const std::vector<int64_t>& me, int64_t max_elems)
      : cx_(cx), n_(node) {
    const int v = node.outputs[0];
    ScalarPlan& st = st_;
    static_cast<StagedProduct&>(st) = staged_product(cx, node, me);
    const TensorExpr& e = cx.exprs.at(static_cast<int>(&node - cx.g.nodes().data()));
    st.a_cap = std::max<int64_t>(1, me[st.m_axis] * st.step);
    // The GEMV form where the candidate asks, the region has at most 8 rows, B is an input read
    // along its columns and the threads cover them in vectors (planner/tiling.h's gemv_matmul).
    const bool b_input = contiguous_input(node.inputs[1], e.accesses[1], static_cast<int>(st.n_axis));
    st.lanes = b_input ? vector_lanes(cx.g.value(node.inputs[1]).dtype) : 1;
    st.vecs = (std::max<int64_t>(1, me[st.n_axis]) + st.lanes - 1) / st.lanes;
    // (B an input itself, as planner/tiling.h's gemv_matmul asks: not through a Reshape.)
    st.gemv = cx.cfg.gemv && b_input && cx.param.count(node.inputs[1]) && me[st.m_axis] <= 8 && st.vecs <= cx.cfg.threads;
    if (cx.cfg.vector >= 4) {
      st.vec_a = contiguous_input(node.inputs[0], e.accesses[0], static_cast<int>(e.out_shape.size())) &&
                 st.step % vector_lanes(cx.g.value(node.inputs[0]).dtype) == 0;
    }
    if (st.gemv) {
      st.a = k.add_shared("sa" + std::to_string(v), DType::kF32, st.a_cap);
      st.tm = std::max<int64_t>(1, me[st.m_axis]);
      st.tn = st.lanes;
      st.slices = cx.cfg.threads / st.vecs;
      st.regs = "tl" + std::to_string(v);
      k.thread_locals.push_back({st.regs, st.tm * st.tn});
      const int64_t plane = st.tm * st.vecs * st.lanes;
      st.red = k.add_shared("red" + std::to_string(v), DType::kF32, st.slices * plane);
      st.parts = std::clamp<int64_t>(cx.cfg.threads / plane, 1, st.slices);
      st.partial = k.add_shared("rp" + std::to_string(v), DType::kF32, st.parts * plane);
      if (cx.splits() > 1) {
        st.shares = "ts" + std::to_string(v);
        st.share_count = (plane + cx.cfg.threads - 1) / cx.cfg.threads;
        k.thread_locals.push_back({st.shares, st.share_count});
      }
      place_epilogue(cx, k, st, std::nullopt, max_elems);
      return;
    }
    st.b_cap = std::max<int64_t>(1, me[st.n_axis] * st.step);
    // Register blocking: each thread owns one TM x TN micro-tile of the region; the smallest
    // (squarest) micro-tile that lets the block's threads cover the largest region.
    std::tie(st.tm, st.tn) = planner::micro_tile(me[st.m_axis], me[st.n_axis], cx.cfg.threads);
    if (st.tm > 0) {
      st.regs = "tl" + std::to_string(v);
      k.thread_locals.push_back({st.regs, st.tm * st.tn});
      epilogue_ = planner::register_epilogue(cx.g, cx.group, static_cast<int>(&node - cx.g.nodes().data()));
      if (epilogue_ && !planner::sixteen_byte_runs(cx.g, *epilogue_, st.tn)) epilogue_.reset();
    }
    // Vectorised staging (the candidate's vector width): an operand read straight from a float32
    // or 16-bit input whose contiguous axis is the slice's row (A: the reduction axis, whole
    // steps of a vector, above; B: the output's columns) moves in 16-byte vectors.
    st.vec_b = cx.cfg.vector >= 4 && b_input;
    // The ring where the planner charged one (its shared memory) and the operands are read along
    // their rows (the planner sees shapes; this, the accesses).
    if (st.tm > 0) {
      const planner::MmaStaging ring = planner::simt_staging(cx.g, node, cx.computed(), cx.cfg);
      if (ring.async_b && st.vec_b) {
        st.ring = ring;
        st.ring.async_a = ring.async_a && st.vec_a;
        st.pitch_a = planner::simt_pitch_a(st.ring, st.step);
        st.pitch_b = planner::simt_pitch_b(std::max<int64_t>(1, me[st.n_axis]));
        st.slot_a = std::max<int64_t>(1, me[st.m_axis]) * st.pitch_a;
        st.slot_b = st.step * st.pitch_b;
        // The planner charged A's rows at simt_pitch_a of its own async_a: never fewer floats.
        check(st.pitch_a <= planner::simt_pitch_a(ring, st.step), "the ring's A rows exceed what the planner charged");
      }
    }
    const std::string id = std::to_string(v);
    const bool ring = st.ring.async_b;
    st.a = k.add_shared("sa" + id, DType::kF32, ring ? st.ring.stages * st.slot_a : st.a_cap);
    st.b = k.add_shared("sb" + id, DType::kF32, ring ? st.ring.stages * st.slot_b : st.b_cap);
    place_epilogue(cx, k, st, epilogue_, max_elems);
  }

  void emit(Kernel& k) override;

 private:
  // The GEMV form after A's staging loop for the step (in `steps`): B's rows from memory into
  // each thread's accumulators, then the slices' sum into the product's accumulators.
  // The GEMV form's steps [k0, end) (index expressions: all, or the block's split's), the slices'
  // sum and, with split-K, the splits' (stages/split_k.h), into the product's accumulators.
  void emit_gemv(Kernel& k, Block& steps, const TensorExpr& e, const Region& r, const std::string& acc, const std::string& k0,
                 const std::string& end);
  // True if value u is a float32, float16 or bfloat16 group input (or a Reshape of one, read in its
  // buffer: LoweringContext::buffer_of) whose innermost axis is indexed
  // by variable `var` alone, so consecutive values of the variable are consecutive in memory.
  bool contiguous_input(int u, const Access& a, int var) const {
    const DType t = cx_.g.value(u).dtype;
    return cx_.buffer_of(u) >= 0 && (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) &&
           !a.guarded && !a.index.empty() && a.index.back().is_var(var);
  }

  LoweringContext& cx_;
  const Node& n_;
  ScalarPlan st_;
  std::optional<std::vector<int>> epilogue_;  // the values written from registers (planner/epilogue.h)
};

void StagedMatMulStage::emit(Kernel& k) {
  const Graph& g = cx_.g;
  const Node& n = n_;
  const TensorExpr& e = cx_.exprs.at(static_cast<int>(&n - g.nodes().data()));
  const int v = n.outputs[0];
  const ScalarPlan& st = st_;
  const Region& r = cx_.region.at(v);
  const std::string acc = product_accumulators(cx_, st);
  const std::string nm = r.n[st.m_axis], nn = r.n[st.n_axis];
  const std::string step = lit(st.step);
  // Accumulators start at zero.
  if (st.regs.empty()) {
    cx_.region_loop(k, v, [&](const std::vector<std::string>&) { cx_.cur().push_back(store(acc, "ft_e", "0.0f")); });
    k.body.push_back(barrier());
  } else {
    k.body.push_back(serial_for("ft_i", "0", lit(st.tm * st.tn), {assign(st.regs + "[ft_i]", "0.0f")}));
  }
  // Each thread's micro-tile: rows [ft_tm0, ft_tm0 + TM), columns [ft_tn0, ft_tn0 + TN).
  const std::string ntn = "((" + nn + " + " + lit(st.tn - 1) + ") / " + lit(st.tn) + ")";
  const std::string owns = "ft_thread < ((" + nm + " + " + lit(st.tm - 1) + ") / " + lit(st.tm) + ") * " + ntn;
  auto micro_tile = [&]() {
    return Block{let(kIndexType, "ft_tm0", "(ft_thread / " + ntn + ") * " + lit(st.tm)),
                 let(kIndexType, "ft_tn0", "(ft_thread % " + ntn + ") * " + lit(st.tn))};
  };
  auto operand_vars = [&](const std::string& m, const std::string& nidx, const std::string& kk) {
    return product_vars(cx_, st, m, nidx, kk);
  };
  Block steps;
  // An operand's slice of step `ks` (an expression) into `out`, at `base` of its buffer (a ring
  // slot's first element; "" for 0).
  auto staging = [&](Block& out, const std::string& ks, const std::string& base, const std::string& buf, int64_t cap,
                     const std::string& count, const Access& a, int operand, bool is_a) {
    out.push_back(cx_.staging_loop(k, buf, count, cap, [&] {
      // A: e = m * step + kk; B: e = kk * n + col
      const std::string kk = is_a ? "(ft_e % " + step + ")" : "(ft_e / " + nn + ")";
      cx_.cur().push_back(let(kIndexType, "ft_k", ks + " * " + step + " + " + kk));
      const std::string m = is_a ? "(" + r.lo[st.m_axis] + " + ft_e / " + step + ")" : r.lo[st.m_axis];
      const std::string col = is_a ? r.lo[st.n_axis] : "(" + r.lo[st.n_axis] + " + ft_e % " + nn + ")";
      const auto idx = cx_.index_of(a, operand_vars(m, col, "ft_k"));
      cx_.cur().push_back(let("float", "ft_x", "0.0f"));
      Block inside;
      cx_.with_block(inside, [&] { cx_.cur().push_back(assign("ft_x", cx_.value(n.inputs[static_cast<size_t>(operand)], idx))); });
      cx_.cur().push_back(if_then("ft_k < " + lit(st.k), inside));
    }, base));
  };
  // The same slice in 16-byte vectors (4 floats or 8 16-bit values, converted to float): viewed as
  // rows x cols, contiguous along cols in the operand (A: nm x step, B: step x nn), each thread
  // loads L consecutive columns in one access when all L lie inside the slice and their address
  // is 16-byte aligned (checked per vector: a row of an odd-sized operand may start anywhere),
  // else element by element. Where a thread stages several vectors, up to kVectorStagingLoads of
  // them are loaded (converted to floats in the thread-local ft_sv) before the first is stored,
  // as the scalar staging loop batches its elements (LoweringContext::staging_loop).
  auto vector_staging = [&](Block& out, const std::string& ks, const std::string& base, const std::string& buf, int64_t cap,
                            const Access& a, int operand, bool is_a) {
    const int u = n.inputs[static_cast<size_t>(operand)];
    const DType ut = g.value(u).dtype;
    const int lanes = vector_lanes(ut);
    const std::string p = cx_.param.at(cx_.buffer_of(u));
    const std::string cols = is_a ? step : nn, rows = is_a ? nm : step;
    const std::string vectors = "((" + cols + " + " + lit(lanes - 1) + ") / " + lit(lanes) + ")";
    const int64_t max_vectors = is_a ? cap / lanes : st.step * ((cap / st.step + lanes - 1) / lanes);
    const int64_t batch = planner::staging_batch(max_vectors, cx_.cfg.threads, planner::kVectorStagingLoads);
    const std::string last = lit(lanes - 1);
    // The vector's coordinates for ft_e, as lets; its condition of being whole and aligned.
    const auto coordinates = [&] {
      cx_.cur().push_back(let(kIndexType, "ft_r", "ft_e / " + vectors));
      cx_.cur().push_back(let(kIndexType, "ft_c", "(ft_e % " + vectors + ") * " + lit(lanes)));
      cx_.cur().push_back(let(kIndexType, "ft_k", ks + " * " + step + " + " + (is_a ? "ft_c" : "ft_r")));
      const std::string m = is_a ? "(" + r.lo[st.m_axis] + " + ft_r)" : r.lo[st.m_axis];
      const std::string col = is_a ? r.lo[st.n_axis] : "(" + r.lo[st.n_axis] + " + ft_c)";
      cx_.cur().push_back(let(kIndexType, "ft_at", flat(g.value(u).shape, cx_.index_of(a, operand_vars(m, col, "ft_k")))));
      cx_.cur().push_back(let(kIndexType, "ft_s", (base.empty() ? "" : base + " + ") + "ft_r * " + cols + " + ft_c"));
      // A: the vector is L reduction steps (all in the slice: the step is a multiple of L); B: L
      // columns of one reduction step, within the slice's columns and its allocation.
      const std::string fits = is_a ? "ft_k + " + last + " < " + lit(st.k)
                                    : "ft_k < " + lit(st.k) + " && ft_c + " + last + " < " + nn + " && ft_s + " + last + " < " + lit(cap);
      // Buffers start 16-byte aligned, so an element index that is a multiple of L is.
      return fits + " && " + aligned16(ut, p, "ft_at");
    };
    // Element i of a vector that is not whole: its place in the slice exists (B: inside the
    // slice's columns and its allocation), and its value is the operand's inside K, else zero.
    const auto placed = [&](int i) { return "ft_c + " + lit(i) + " < " + nn + " && ft_s + " + lit(i) + " < " + lit(cap); };
    const auto inside = [&](int i) { return is_a ? "ft_k + " + lit(i) + " < " + lit(st.k) : "ft_k < " + lit(st.k); };
    const auto tail_value = [&](int i) {
      return "(" + inside(i) + " ? " + load_as_compute(ut, p + "[ft_at + " + lit(i) + "]") + " : 0.0f)";
    };
    // The vector's L floats (expressions) to the slice at ft_s: in 16-byte stores of 4 floats
    // where its place there is 16-byte aligned (always for A, whose rows are the step long; for B
    // where the region's width is a multiple of 4): four scalar stores by a warp's lanes, 16 bytes
    // apart, are 4-way bank conflicts.
    // (A float32 vector loaded in ft_q goes as it is.)
    const auto put = [&](const std::function<std::string(int)>& x, bool loaded) {
      Block scalars, quads;
      for (int i = 0; i < lanes; ++i) scalars.push_back(store(buf, "ft_s + " + lit(i), x(i)));
      const bool as_loaded = loaded && ut == DType::kF32;
      if (as_loaded) quads.push_back(vector_store(buf, "ft_s", "ft_q"));
      for (int h = 0; !as_loaded && h < lanes / 4; ++h) {
        const std::string local = "ft_h" + std::to_string(h);
        quads.push_back(let("float4", local,
                            "ft_pack_float4(" + x(4 * h) + ", " + x(4 * h + 1) + ", " + x(4 * h + 2) + ", " + x(4 * h + 3) + ")"));
        quads.push_back(vector_store(buf, "ft_s + " + lit(4 * h), local));
      }
      return is_a ? quads : Block{if_then("(ft_s & 3) == 0", quads, scalars)};
    };
    // A vector that is not whole, element by element: A's all in the slice, B's where placed.
    const auto tail_stores = [&](const std::function<std::string(int)>& x) {
      Block tail;
      for (int i = 0; i < lanes; ++i) {
        const Stmt e1 = store(buf, "ft_s + " + lit(i), x(i));
        tail.push_back(is_a ? e1 : if_then(placed(i), {e1}));
      }
      return tail;
    };
    const auto element = [&](int i) { return load_as_compute(ut, vector_element("ft_q", ut, i)); };
    const std::string count = "ft_min(" + rows + " * " + vectors + ", " + lit(max_vectors) + ")";
    if (batch == 1) {
      Block loop = cx_.fresh_block([&] {
        const std::string whole = coordinates();
        Block vector = {vector_load("ft_q", p, "ft_at", ut)};
        const Block stores = put(element, true);
        vector.insert(vector.end(), stores.begin(), stores.end());
        cx_.cur().push_back(if_then(whole, vector, tail_stores(tail_value)));
      });
      out.push_back(thread_for("ft_e", "0", count, loop));
      return;
    }
    // Each vector's L floats computed into ft_sv[ft_si * L ..], then stored.
    const auto held = [&](int i) { return "ft_sv[ft_si * " + lit(lanes) + " + " + lit(i) + "]"; };
    const auto guarded = [&](const std::function<void(const std::string&)>& f) {
      Block one;
      cx_.with_block(one, [&] { f(coordinates()); });
      cx_.cur().push_back(if_then("ft_e < ft_sn", one));
    };
    out.push_back(cx_.batched_loop(
        k, count, batch, "ft_sv", planner::kVectorStagingLoads * 8,
        [&] {
          guarded([&](const std::string& whole) {
            Block vector = {vector_load("ft_q", p, "ft_at", ut)};
            Block tail;
            for (int i = 0; i < lanes; ++i) {
              vector.push_back(assign(held(i), element(i)));
              tail.push_back(assign(held(i), is_a ? tail_value(i) : "(" + placed(i) + " ? " + tail_value(i) + " : 0.0f)"));
            }
            cx_.cur().push_back(if_then(whole, vector, tail));
          });
        },
        [&] {
          guarded([&](const std::string& whole) {
            cx_.cur().push_back(if_then(whole, put(held, false), tail_stores(held)));
          });
        }));
  };
  // A's slice of step ks at base, computed or loaded by the threads (in vectors where it can).
  const auto stage_a = [&](Block& out, const std::string& ks, const std::string& base) {
    if (st.vec_a) {
      vector_staging(out, ks, base, st.a, st.a_cap, e.accesses[0], 0, true);
    } else {
      staging(out, ks, base, st.a, st.a_cap, "(" + nm + " * " + step + ")", e.accesses[0], 0, true);
    }
  };
  // One step's products into each thread's micro-tile: global step `gks`, A's slice at a_base
  // with rows a_pitch apart, B's at b_base with rows b_pitch apart.
  const auto product_step = [&](const std::string& gks, const std::string& a_base, const std::string& a_pitch,
                                const std::string& b_base, const std::string& b_pitch) {
    const std::string at_a = a_base.empty() ? "" : a_base + " + ", at_b = b_base.empty() ? "" : b_base + " + ";
    Block inner;
    for (int64_t i = 0; i < st.tm; ++i) {
      const std::string row = "(ft_tm0 + " + lit(i) + ")";
      inner.push_back(let("float", "ft_ra" + std::to_string(i),
                          "(" + row + " < " + nm + " ? " + st.a + "[" + at_a + row + " * " + a_pitch + " + ft_kk] : 0.0f)"));
    }
    for (int64_t j = 0; j < st.tn; ++j) {
      const std::string col = "(ft_tn0 + " + lit(j) + ")";
      inner.push_back(let("float", "ft_rb" + std::to_string(j),
                          "(" + col + " < " + nn + " ? " + st.b + "[" + at_b + "ft_kk * " + b_pitch + " + " + col + "] : 0.0f)"));
    }
    for (int64_t i = 0; i < st.tm; ++i) {
      for (int64_t j = 0; j < st.tn; ++j) {
        const std::string cell = st.regs + "[" + std::to_string(i * st.tn + j) + "]";
        inner.push_back(assign(cell, cell + " + ft_ra" + std::to_string(i) + " * ft_rb" + std::to_string(j)));
      }
    }
    Block body = micro_tile();
    body.push_back(serial_for("ft_kk", "0", "ft_min(" + step + ", " + lit(st.k) + " - " + gks + " * " + step + ")", inner));
    return if_then(owns, body);
  };
  // The block's steps: all of them, or its split's (stages/split_k.h), then the split's sum.
  const int64_t all_steps = (st.k + st.step - 1) / st.step;
  const std::string k0 = split_first_step(cx_, k, all_steps);
  if (st.ring.async_b) {
    // The ring (planner::simt_staging; emit_ring), as the tensor-core form runs its own
    // (codegen/stages/mma_matmul.h). B moves in
    // 16-byte chunks of 4 floats along its rows (a chunk past the region's columns or K
    // zero-filled, one whose address is not 16-byte aligned stored element by element), A too
    // where it is copied asynchronously (rows past the region's zero-filled), else A is computed
    // or loaded by the threads and stored, as in the form without a ring.
    const auto slice = [&](bool is_a, const std::string& ks, const std::string& slot) {
      const std::string base = "(" + slot + ") * " + lit(is_a ? st.slot_a : st.slot_b);
      Block out;
      if (is_a && !st.ring.async_a) {
        stage_a(out, ks, base);
        return out;
      }
      const int u = n.inputs[is_a ? 0 : 1];
      const int64_t chunks = is_a ? st.step / 4 : st.pitch_b / 4;
      const CopiedSlice c{.is_a = is_a,
                          .buf = is_a ? st.a : st.b,
                          .param = cx_.param.at(cx_.buffer_of(u)),
                          .shape = g.value(u).shape,
                          .index = [&](const std::string& row, const std::string& col) {
                            const std::string m = is_a ? "(" + r.lo[st.m_axis] + " + " + row + ")" : r.lo[st.m_axis];
                            const std::string column = is_a ? r.lo[st.n_axis] : "(" + r.lo[st.n_axis] + " + " + col + ")";
                            return cx_.index_of(e.accesses[is_a ? 0 : 1], operand_vars(m, column, "ft_k"));
                          },
                          .ks = ks,
                          .nm = nm,
                          .nn = nn,
                          .row = "ft_e / " + lit(chunks),
                          .col = "ft_e % " + lit(chunks) + " * 4",
                          .at = base + " + ft_r * " + lit(is_a ? st.pitch_a : st.pitch_b) + " + ft_c",
                          .step = st.step,
                          .k = st.k,
                          .lanes = 4,
                          .count = (is_a ? st.slot_a / st.pitch_a : st.step) * chunks};
      out.push_back(copy_slice(cx_, c));
      return out;
    };
    const auto both = [&](const std::string& ks, const std::string& slot) {
      Block out = slice(true, ks, slot);
      const Block b = slice(false, ks, slot);
      out.insert(out.end(), b.begin(), b.end());
      return out;
    };
    // Where another stage of the group runs first, B's prologue copies run ahead of it.
    const RingAhead early{ahead_of_stages, [&](const std::string& ks, const std::string& slot) { return slice(true, ks, slot); },
                          [&](const std::string& ks, const std::string& slot) { return slice(false, ks, slot); }};
    emit_ring(
        cx_, k, st.ring, split_steps(cx_, all_steps), k0, both,
        [&](const std::string& gks, const std::string& slot) {
          return product_step(gks, slot + " * " + lit(st.slot_a), lit(st.pitch_a), slot + " * " + lit(st.slot_b), lit(st.pitch_b));
        },
        early);
  } else {
    stage_a(steps, "ft_ks", "");
    if (st.gemv) {
      emit_gemv(k, steps, e, r, acc, k0, split_end_step(cx_, k0, all_steps));
      return;
    }
    if (st.vec_b) {
      vector_staging(steps, "ft_ks", "", st.b, st.b_cap, e.accesses[1], 1, false);
    } else {
      staging(steps, "ft_ks", "", st.b, st.b_cap, "(" + step + " * " + nn + ")", e.accesses[1], 1, false);
    }
    steps.push_back(barrier());
    if (!st.regs.empty()) {
      steps.push_back(product_step("ft_ks", "", step, "", nn));
    } else {
      Block loop = {let(kIndexType, "ft_m", "ft_e / " + nn), let(kIndexType, "ft_n", "ft_e % " + nn),
                    let("float", "ft_s", acc + "[ft_e]")};
      Block inner = {assign("ft_s", "ft_s + " + st.a + "[ft_m * " + step + " + ft_kk] * " + st.b + "[ft_kk * " + nn + " + ft_n]")};
      loop.push_back(serial_for("ft_kk", "0", "ft_min(" + step + ", " + lit(st.k) + " - ft_ks * " + step + ")", inner));
      loop.push_back(store(acc, "ft_e", "ft_s"));
      steps.push_back(thread_for("ft_e", "0", "ft_min(" + nm + " * " + nn + ", " + lit(std::max<int64_t>(1, cx_.capacity[v] > 0 ? cx_.capacity[v] : 1)) + ")", loop));
    }
    steps.push_back(barrier());
    k.body.push_back(uniform_for("ft_ks", k0, split_end_step(cx_, k0, all_steps), steps));
  }
  if (cx_.splits() > 1) {
    check(!st.regs.empty(), "split-K needs the accumulators in registers: ", cx_.cfg.threads, " threads cannot cover the tile with micro-tiles");
    emit_split_sum(cx_, k, st.regs, st.tm * st.tn);
  }
  if (epilogue_) {  // each micro-tile row's TN columns, computed and stored as one run
    Block write = cx_.fresh_block([&] {
      for (const Stmt& s : micro_tile()) cx_.cur().push_back(s);
      for (int64_t i = 0; i < st.tm; ++i) {
        epilogue_run(cx_, st, *epilogue_, "(ft_tm0 + " + lit(i) + ")", "ft_tn0", st.tn,
                     [&](int64_t j) { return st.regs + "[" + std::to_string(i * st.tn + j) + "]"; });
      }
    });
    k.body.push_back(if_then(owns, write));
    return;
  }
  if (!st.regs.empty()) {  // registers to the shared accumulator buffer, where consumers read the product
    Block write = micro_tile();
    for (int64_t i = 0; i < st.tm; ++i) {
      for (int64_t j = 0; j < st.tn; ++j) {
        const std::string row = "(ft_tm0 + " + lit(i) + ")", col = "(ft_tn0 + " + lit(j) + ")";
        write.push_back(if_then(row + " < " + nm + " && " + col + " < " + nn,
                                {store(acc, row + " * " + nn + " + " + col, st.regs + "[" + std::to_string(i * st.tn + j) + "]")}));
      }
    }
    k.body.push_back(if_then(owns, write));
    k.body.push_back(barrier());
  }
  export_product(cx_, k, st);
}

void StagedMatMulStage::emit_gemv(Kernel& k, Block& steps, const TensorExpr& e, const Region& r, const std::string& acc,
                                  const std::string& k0, const std::string& end) {
  const Graph& g = cx_.g;
  const ScalarPlan& st = st_;
  const std::string nm = r.n[st.m_axis], nn = r.n[st.n_axis];
  const int b = n_.inputs[1];
  const DType ut = g.value(b).dtype;
  const std::string p = cx_.param.at(cx_.buffer_of(b)), step = lit(st.step), last = lit(st.lanes - 1);
  const int64_t width = st.vecs * st.lanes;
  // Thread t: the column vector t % vecs (its first column ft_c), the slice t / vecs; the slice's
  // rows of the step are ft_sl, ft_sl + slices, ... (per_thread of them), taken in batches of
  // `batch`: every row's 16-byte load of a batch is issued (a guarded load each, no branch
  // around it) before the first of them is multiplied.
  const std::string owns = "ft_thread < " + lit(st.slices * st.vecs);
  const int64_t per_thread = (st.step + st.slices - 1) / st.slices;
  const int64_t batch = planner::staging_batch(st.step, static_cast<int>(st.slices), planner::kGemvLoads);
  const Block place = {let(kIndexType, "ft_cv", "ft_thread % " + lit(st.vecs)),
                       let(kIndexType, "ft_sl", "ft_thread / " + lit(st.vecs))};
  Block compute = place;
  compute.push_back(let(kIndexType, "ft_c", "ft_cv * " + lit(st.lanes)));
  steps.push_back(barrier());  // A's slice is staged
  Block loads, products;
  for (int64_t t = 0; t < batch; ++t) {
    const std::string su = std::to_string(t), kk = "ft_kk" + su, kv = "ft_k" + su, at = "ft_at" + su, q = "ft_q" + su;
    const std::string j = "(ft_jb * " + lit(batch) + " + " + lit(t) + ")";
    loads.push_back(let(kIndexType, kk, "ft_sl + " + j + " * " + lit(st.slices)));
    loads.push_back(let(kIndexType, kv, "ft_ks * " + step + " + " + kk));
    const auto b_index = cx_.index_of(e.accesses[1], product_vars(cx_, st, r.lo[st.m_axis], "(" + r.lo[st.n_axis] + " + ft_c)", kv));
    loads.push_back(let(kIndexType, at, flat(g.value(b).shape, b_index)));
    // The row is the thread's and inside the step and K; a whole vector where its columns lie in
    // the region and its address is 16-byte aligned (a row of an odd-sized B may start anywhere),
    // else element by element (after the batch's loads).
    const std::string fits = "(" + std::string(per_thread % batch == 0 ? "" : j + " < " + lit(per_thread) + " && ") +
                             (st.step % st.slices == 0 ? "" : kk + " < " + step + " && ") + kv + " < " + lit(st.k) + ")";
    const std::string whole = "(ft_c + " + last + " < " + nn + " && " + aligned16(ut, p, at) + ")";
    loads.push_back(vector_load(q, p, at, ut, fits + " && " + whole));
    Block row, vector, scalars;
    for (int64_t i = 0; i < st.lanes; ++i) {
      const std::string bv = "ft_b" + su + "_" + std::to_string(i);
      row.push_back(let("float", bv, "0.0f"));
      vector.push_back(assign(bv, load_as_compute(ut, vector_element(q, ut, static_cast<int>(i)))));
      scalars.push_back(assign(bv, "(ft_c + " + lit(i) + " < " + nn + " ? " + load_as_compute(ut, p + "[" + at + " + " + lit(i) + "]") + " : 0.0f)"));
    }
    row.push_back(if_then(whole, vector, scalars));
    for (int64_t m = 0; m < st.tm; ++m) {
      const std::string a = "ft_a" + su + "_" + std::to_string(m);
      row.push_back(let("float", a, "(" + lit(m) + " < " + nm + " ? " + st.a + "[" + lit(m * st.step) + " + " + kk + "] : 0.0f)"));
      for (int64_t i = 0; i < st.lanes; ++i) {
        const std::string cell = st.regs + "[" + std::to_string(m * st.lanes + i) + "]";
        row.push_back(assign(cell, cell + " + " + a + " * ft_b" + su + "_" + std::to_string(i)));
      }
    }
    products.push_back(if_then(fits, row));
  }
  loads.insert(loads.end(), products.begin(), products.end());
  compute.push_back(serial_for("ft_jb", "0", lit((per_thread + batch - 1) / batch), loads));
  steps.push_back(if_then(owns, compute));
  steps.push_back(barrier());
  k.body.push_back(uniform_for("ft_ks", k0, end, steps));
  // Each slice's partial products to `red` (slice, row, column), four floats a store.
  Block partials = place;
  for (int64_t m = 0; m < st.tm; ++m) {
    for (int64_t h = 0; h < st.lanes / 4; ++h) {
      const std::string q = "ft_p" + std::to_string(m * st.lanes + 4 * h), base = st.regs + "[" ;
      const int64_t c0 = m * st.lanes + 4 * h;
      partials.push_back(let("float4", q, "ft_pack_float4(" + base + std::to_string(c0) + "], " + base + std::to_string(c0 + 1) + "], " +
                                               base + std::to_string(c0 + 2) + "], " + base + std::to_string(c0 + 3) + "])"));
      partials.push_back(vector_store(st.red, "(ft_sl * " + lit(st.tm) + " + " + lit(m) + ") * " + lit(width) + " + ft_cv * " + lit(st.lanes) + " + " + lit(4 * h), q));
    }
  }
  k.body.push_back(if_then(owns, partials));
  k.body.push_back(barrier());
  // The slices' sum in two rounds, every thread busy: `parts` partial sums of consecutive slices
  // per element of `red`'s (row, column) plane, then each element's parts, in a fixed order.
  const int64_t plane = st.tm * width, per_part = (st.slices + st.parts - 1) / st.parts;
  Block part = {let(kIndexType, "ft_o", "ft_e % " + lit(plane)), let(kIndexType, "ft_p", "ft_e / " + lit(plane)),
                let("float", "ft_sum", "0.0f")};
  part.push_back(serial_for("ft_z", "ft_p * " + lit(per_part), "ft_min(ft_p * " + lit(per_part) + " + " + lit(per_part) + ", " + lit(st.slices) + ")",
                            {assign("ft_sum", "ft_sum + " + st.red + "[ft_z * " + lit(plane) + " + ft_o]")}));
  part.push_back(store(st.partial, "ft_e", "ft_sum"));
  k.body.push_back(thread_for("ft_e", "0", lit(plane * st.parts), part));
  k.body.push_back(barrier());
  if (!st.shares.empty()) {
    // Split-K: each thread sums its share of the plane's parts (elements t, t + threads, ...) in
    // registers, the tile's last block sums the splits' shares in split order, and the elements
    // inside the region go to the accumulators.
    const int64_t shares = st.share_count;
    const auto element = [&](int64_t i) { return "(ft_thread + " + lit(i * cx_.cfg.threads) + ")"; };
    for (int64_t i = 0; i < shares; ++i) {
      const std::string share = st.shares + "[" + std::to_string(i) + "]";
      Block parts = {assign(share, "0.0f")};
      parts.push_back(serial_for("ft_z", "0", lit(st.parts),
                                 {assign(share, share + " + " + st.partial + "[ft_z * " + lit(plane) + " + " + element(i) + "]")}));
      k.body.push_back(if_then(element(i) + " < " + lit(plane), parts, {assign(share, "0.0f")}));
    }
    emit_split_sum(cx_, k, st.shares, shares);
    for (int64_t i = 0; i < shares; ++i) {
      const std::string row = element(i) + " / " + lit(width), col = element(i) + " % " + lit(width);
      k.body.push_back(if_then(element(i) + " < " + lit(plane) + " && " + row + " < " + nm + " && " + col + " < " + nn,
                               {store(acc, row + " * " + nn + " + " + col, st.shares + "[" + std::to_string(i) + "]")}));
    }
    k.body.push_back(barrier());
    export_product(cx_, k, st);
    return;
  }
  Block sum = {let(kIndexType, "ft_o", "(ft_e / " + nn + ") * " + lit(width) + " + ft_e % " + nn), let("float", "ft_sum", "0.0f")};
  sum.push_back(serial_for("ft_z", "0", lit(st.parts), {assign("ft_sum", "ft_sum + " + st.partial + "[ft_z * " + lit(plane) + " + ft_o]")}));
  sum.push_back(store(acc, "ft_e", "ft_sum"));
  k.body.push_back(thread_for("ft_e", "0", "ft_min(" + nm + " * " + nn + ", " + lit(std::max<int64_t>(1, cx_.capacity[st.v])) + ")", sum));
  k.body.push_back(barrier());
  export_product(cx_, k, st);
}

}  // namespace

std::unique_ptr<AnchorStage> staged_matmul_stage(LoweringContext& cx, Kernel& k, const Node& n,
                                                 const std::vector<int64_t>& max_extent, int64_t max_elems) {
  return std::make_unique<StagedMatMulStage>(cx, k, n, max_extent, max_elems);
}

}  // namespace fusetune::codegen::stages
