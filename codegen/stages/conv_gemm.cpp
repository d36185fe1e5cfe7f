#include "codegen/stages/conv_gemm.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include "codegen/stages/conv_common.h"
#include "codegen/stages/split_k.h"

namespace fusetune::codegen::stages {

namespace {

using planner::Access;
using planner::TensorExpr;

// An int local for an index inside a staged slice or the reduction (all far below 2^31): 32-bit
// index arithmetic keeps the staging loops' register use low on the GPU.
Stmt small_let(const std::string& name, const std::string& value) { return let("int", name, "(int)(" + value + ")"); }

struct GemmPlan {
  int64_t k = 0, step = 0;
  int64_t cout_g = 0;      // output channels per group
  int64_t groups_cap = 1;  // most groups the region's channels span (patch slices per step)
  std::string a, b;        // weights [M][step], patches [groups][step][P]
  int64_t a_cap = 0, b_cap = 0;
  int64_t cols = 0;  // P: a patch slice's columns (the region's pixels, laid out with the caps)
  std::vector<int64_t> caps;  // the region's axes the slices are laid out with (columns: the axes other than 1)
  std::string regs;           // the TM x TN accumulators of each thread
  int64_t tm = 0, tn = 0;
  // The weights' rows pitch_a floats apart (planner::conv_pitch_a). The ring
  // (planner::conv_staging; ring.async_b set): each step's slices in slot step % stages.
  planner::MmaStaging ring;
  int64_t pitch_a = 0, slot_a = 0, slot_b = 0;
};

class ConvGemmStage : public AnchorStage {
 public:
  ConvGemmStage(LoweringContext& cx, const Node& n, GemmPlan plan) : cx_(cx), n_(n), st_(std::move(plan)) {}

  void emit(Kernel& k) override;

 private:
  std::vector<std::string> conv_pixel(const std::string& p, std::string* inside);
  std::vector<std::string> conv_taps(const TensorExpr& e, const std::string& kk);
  std::vector<std::string> patch_column(const std::string& col, const std::string& grp, std::string* reads);
  std::string patch_element(const TensorExpr& e, const std::string& ks, std::function<std::vector<std::string>()>* input);
  Stmt copy_patches(const TensorExpr& e, const std::string& ks, const std::string& base, const std::string& ng);
  Stmt stage_patches(Kernel& k, const TensorExpr& e, const std::string& ng);

  LoweringContext& cx_;
  const Node& n_;
  GemmPlan st_;
};

// Emits lets decomposing column `p` (of the columns laid out with the caps) of the region of the
// Conv's output into its batch and spatial coordinates (the channel axis is left empty for the
// caller); *inside is the condition that the column is a pixel of this block's region.
std::vector<std::string> ConvGemmStage::conv_pixel(const std::string& p, std::string* inside) {
  const Region& r = cx_.region.at(n_.outputs[0]);
  const std::vector<int64_t>& caps = st_.caps;
  std::vector<std::string> o(r.n.size());
  int64_t inner = 1;
  *inside = "1";
  for (size_t d = r.n.size(); d-- > 0;) {
    if (d == 1) continue;
    const std::string q = "ft_q" + std::to_string(d);
    cx_.cur().push_back(small_let(q, "(" + p + " / " + lit(inner) + ") % " + lit(caps[d])));
    o[d] = "(" + r.lo[d] + " + " + q + ")";
    *inside += " && " + q + " < " + r.n[d];
    inner *= caps[d];
  }
  return o;
}

// Emits lets decomposing reduction index `kk` (input channel of the group, then the window taps,
// row-major as the weights are laid out) into the reduction variables.
std::vector<std::string> ConvGemmStage::conv_taps(const TensorExpr& e, const std::string& kk) {
  std::vector<std::string> vars;
  int64_t stride = 1;
  for (int64_t x : e.reduce_extents) stride *= x;
  for (size_t q = 0; q < e.reduce_extents.size(); ++q) {
    stride /= e.reduce_extents[q];
    vars.push_back("ft_rv" + std::to_string(q));
    cx_.cur().push_back(small_let(vars.back(), "(" + kk + " / " + lit(stride) + ") % " + lit(e.reduce_extents[q])));
  }
  return vars;
}

// Column `col` of the patch slice of group `grp` (of those the region's rows span): emits the lets
// of its pixel and returns the Conv's variables for it (the input channel's first of the group at
// axis 1; the taps follow); *reads is the condition that it reads the input (a region with rows,
// the column a pixel of the region). A region with no output channel (a consumer's tile outside
// them: a Concat's other input, a Pad's border) has a first channel past the last, whose group may
// not exist: nothing loads.
std::vector<std::string> ConvGemmStage::patch_column(const std::string& col, const std::string& grp, std::string* reads) {
  const Region& r = cx_.region.at(n_.outputs[0]);
  std::string pixel;
  std::vector<std::string> vars = conv_pixel(col, &pixel);
  vars[1] = "(((" + r.lo[1] + " / " + lit(st_.cout_g) + ") + " + grp + ") * " + lit(st_.cout_g) + ")";
  *reads = r.n[1] + " > 0 && " + pixel;
  return vars;
}

// Element ft_e of step `ks`'s patch slice (group ft_e / (step x P), reduction index ks x step +
// (ft_e / P) % step, column ft_e % P; the input channel follows from the group, any output channel
// of it): emits the lets of its K index ft_k and its column's pixel and returns the condition that
// it reads the input (inside K, a region with rows, the column a pixel of the region); *input,
// called inside that condition's branch, emits the lets of the input's index and returns it.
std::string ConvGemmStage::patch_element(const TensorExpr& e, const std::string& ks, std::function<std::vector<std::string>()>* input) {
  const std::string np = lit(st_.cols);
  cx_.cur().push_back(small_let("ft_k", ks + " * " + lit(st_.step) + " + (ft_e / " + np + ") % " + lit(st_.step)));
  std::string reads;
  std::vector<std::string> vars = patch_column("ft_e % " + np, "ft_e / " + lit(st_.step * st_.cols), &reads);
  *input = [this, &e, vars]() mutable {
    for (const std::string& t : conv_taps(e, "ft_k")) vars.push_back(t);
    return cx_.index_of(e.accesses[0], vars);
  };
  return "ft_k < " + lit(st_.k) + " && " + reads;
}

// The ring's patch slice of step `ks` at `base` (groups x step x P, as the form without a ring lays
// it out): one 4-byte cp.async an element, zero-filled (nothing read) outside the input, past K,
// for columns outside the region and for a region without rows.
Stmt ConvGemmStage::copy_patches(const TensorExpr& e, const std::string& ks, const std::string& base, const std::string& ng) {
  const int x = n_.inputs[0];
  const Shape& shape = cx_.g.value(x).shape;
  const std::string param = cx_.param.at(x);
  const Stmt zero = copy_async(st_.b, base + " + ft_e", param, "0", "0", 4);
  Block loop = cx_.fresh_block([&] {
    std::function<std::vector<std::string>()> input;
    const std::string reads = patch_element(e, ks, &input);
    Block inside;
    cx_.with_block(inside, [&] {
      const auto idx = input();
      const Stmt copy = copy_async(st_.b, base + " + ft_e", param, flat(shape, idx), "4", 4);
      cx_.cur().push_back(e.accesses[0].guarded ? if_then(cx_.in_range(shape, idx), {copy}, {zero}) : copy);
    });
    cx_.cur().push_back(if_then(reads, inside, {zero}));
  });
  return thread_for("ft_e", "0", ng + " * " + lit(st_.step * st_.cols), loop);
}

// The patch slice of step ft_ks staged by the threads (the form without a ring; laid out as
// copy_patches lays it): thread t takes the slice's columns c = t, t + threads, ... (group c / P,
// column c % P), decodes each column's pixel once, and walks the step's K rows in batches of
// planner::kStagingLoads, a batch's loads in flight together before its stores. The K row is the
// same for every lane of a warp (its taps decode once a warp), and consecutive lanes take
// consecutive pixels: loads along an image row coalesce, stores fall in distinct banks. (Element
// by element, every patch element decoded its row, pixel and taps with a dozen divisions.)
Stmt ConvGemmStage::stage_patches(Kernel& k, const TensorExpr& e, const std::string& ng) {
  const int x = n_.inputs[0];
  const int64_t batch = planner::kStagingLoads;
  const std::string np = lit(st_.cols), step = lit(st_.step);
  k.declare_local("ft_sx", batch);
  Block column = cx_.fresh_block([&] {
    cx_.cur().push_back(small_let("ft_gi", "ft_c / " + np));
    cx_.cur().push_back(small_let("ft_p", "ft_c % " + np));
    std::string reads;
    const std::vector<std::string> vars = patch_column("ft_p", "ft_gi", &reads);
    cx_.cur().push_back(small_let("ft_live", "(" + reads + ") ? 1 : 0"));
    Block rows;
    for (int64_t i = 0; i < batch; ++i) {
      rows.push_back(assign("ft_sx[" + lit(i) + "]", "0.0f"));
      Block one = cx_.fresh_block([&] {
        cx_.cur().push_back(small_let("ft_k", "ft_ks * " + step + " + ft_kb + " + lit(i)));
        Block inside;
        cx_.with_block(inside, [&] {
          std::vector<std::string> at = vars;
          for (const std::string& t : conv_taps(e, "ft_k")) at.push_back(t);
          const auto idx = cx_.index_of(e.accesses[0], at);
          const std::string target = "ft_sx[" + lit(i) + "]";
          if (e.accesses[0].guarded) {
            Block in_input;
            cx_.with_block(in_input, [&] { cx_.cur().push_back(assign(target, cx_.value(x, idx))); });
            cx_.cur().push_back(if_then(cx_.in_range(cx_.g.value(x).shape, idx), in_input));
          } else {
            cx_.cur().push_back(assign(target, cx_.value(x, idx)));
          }
        });
        cx_.cur().push_back(if_then("ft_live && ft_kb + " + lit(i) + " < " + step + " && ft_k < " + lit(st_.k), inside));
      });
      rows.push_back(if_then("1", one));  // a scope of its own: its lets are the next batch row's too
    }
    for (int64_t i = 0; i < batch; ++i) {
      rows.push_back(if_then("ft_kb + " + lit(i) + " < " + step,
                             {store(st_.b, "(ft_gi * " + step + " + ft_kb + " + lit(i) + ") * " + np + " + ft_p",
                                    "ft_sx[" + lit(i) + "]")}));
    }
    Block walk;
    walk.push_back(small_let("ft_kb", "ft_kbi * " + lit(batch)));
    walk.insert(walk.end(), rows.begin(), rows.end());
    cx_.cur().push_back(serial_for("ft_kbi", "0", lit((st_.step + batch - 1) / batch), walk));
  });
  return thread_for("ft_c", "0", ng + " * " + np, column);
}

// Each step of the reduction loads the weight slice (M x step) and the im2col patches of every
// group the rows touch (groups x step x P; zero outside the input, past K, for columns outside
// the region and for a region without rows) into shared memory, then every thread updates its
// TM x TN accumulators; after the last step each thread writes its micro-tile (plus the bias)
// where the Conv's value goes: its shared buffer for the epilogue, and global memory when
// exported.
void ConvGemmStage::emit(Kernel& k) {
  const Graph& g = cx_.g;
  const Node& n = n_;
  const TensorExpr& e = cx_.exprs.at(static_cast<int>(&n - g.nodes().data()));
  const int v = n.outputs[0];
  const GemmPlan& st = st_;
  const Region& r = cx_.region.at(v);
  const std::string nm = r.n[1], step = lit(st.step), kk_total = lit(st.k);
  const int64_t cols = st.cols;
  const std::string np = lit(cols);
  const std::string g0 = "(" + r.lo[1] + " / " + lit(st.cout_g) + ")";
  const std::string ng = st.groups_cap == 1 ? "1"
                                            : "ft_min(" + r.hi[1] + " / " + lit(st.cout_g) + " - " + g0 + " + 1, " +
                                                  lit(st.groups_cap) + ")";
  k.body.push_back(serial_for("ft_i", "0", lit(st.tm * st.tn), {assign(st.regs + "[ft_i]", "0.0f")}));
  // Interleaved micro-tiles: thread t is row lane t / ntn of nrow and column lane t % ntn of ntn,
  // and owns rows lane + i x nrow (i < TM) and columns lane + j x ntn (j < TN). A warp's reads of
  // one fragment register fall on consecutive rows (an odd pitch: distinct banks) and consecutive
  // columns of the patches, and its stores of one cell on consecutive pixels.
  const int64_t ntn = (cols + st.tn - 1) / st.tn, nrow = (st.caps[1] + st.tm - 1) / st.tm;
  const std::string owns = "ft_thread < " + lit(nrow * ntn);
  const Block micro_tile = {small_let("ft_tm0", "ft_thread / " + lit(ntn)), small_let("ft_tn0", "ft_thread % " + lit(ntn))};
  const auto row_of = [&](int64_t i) { return "(ft_tm0 + " + lit(i * nrow) + ")"; };
  const auto col_of = [&](int64_t j) { return "(ft_tn0 + " + lit(j * ntn) + ")"; };
  // The micro-tile update of global step `gks`: the thread's rows and columns; the weights at
  // a_base with rows a_pitch apart, the patches at b_base; a row reads the patches of its own
  // group.
  const auto update_step = [&](const std::string& gks, const std::string& a_base, const std::string& a_pitch,
                               const std::string& b_base) {
    const std::string at_a = a_base.empty() ? "" : a_base + " + ", at_b = b_base.empty() ? "" : b_base + " + ";
    Block update = micro_tile;
    Block inner;
    for (int64_t i = 0; i < st.tm; ++i) {
      const std::string row = row_of(i), is = std::to_string(i);
      if (st.groups_cap > 1) {
        update.push_back(small_let("ft_g" + is,
                                   "ft_min((" + r.lo[1] + " + " + row + ") / " + lit(st.cout_g) + " - " + g0 + ", " + ng + " - 1)"));
      }
      inner.push_back(let("float", "ft_ra" + is,
                          "(" + row + " < " + nm + " ? " + st.a + "[" + at_a + row + " * " + a_pitch + " + ft_kk] : 0.0f)"));
    }
    auto patch = [&](const std::string& group, int64_t j) {
      const std::string col = col_of(j);
      const std::string at = st.b + "[" + at_b + "(" + group + " * " + step + " + ft_kk) * " + np + " + " + col + "]";
      return ntn * st.tn == cols ? at : "(" + col + " < " + np + " ? " + at + " : 0.0f)";
    };
    for (int64_t j = 0; j < st.tn; ++j) {
      if (st.groups_cap == 1) inner.push_back(let("float", "ft_rb" + std::to_string(j), patch("0", j)));
    }
    for (int64_t i = 0; i < st.tm; ++i) {
      for (int64_t j = 0; j < st.tn; ++j) {
        const std::string cell = st.regs + "[" + std::to_string(i * st.tn + j) + "]";
        const std::string b = st.groups_cap == 1 ? "ft_rb" + std::to_string(j) : patch("ft_g" + std::to_string(i), j);
        inner.push_back(assign(cell, cell + " + ft_ra" + std::to_string(i) + " * " + b));
      }
    }
    update.push_back(serial_for("ft_kk", "0", "ft_min(" + step + ", " + kk_total + " - " + gks + " * " + step + ")", inner));
    return if_then(owns, update);
  };
  // The block's steps: all of them, or its split's (stages/split_k.h), then the split's sum.
  const int64_t all_steps = (st.k + st.step - 1) / st.step;
  const std::string k0 = split_first_step(cx_, k, all_steps);
  if (st.ring.async_b) {
    // The ring (planner::conv_staging; emit_ring): no slice passes through the threads'
    // registers. The weights move in 16-byte chunks of 4 floats along K (rows past the region and
    // K zero-filled; a chunk whose address is not 16-byte aligned, element by element), the
    // patches an element at a time (copy_patches).
    const int64_t chunks = st.step / 4;
    const auto slices = [&](const std::string& ks, const std::string& slot) {
      const CopiedSlice weights{.is_a = true,
                                .buf = st.a,
                                .param = cx_.param.at(n.inputs[1]),
                                .shape = {g.value(n.inputs[1]).shape[0], st.k},  // [C_out][K], as laid out
                                .index = [&](const std::string& row, const std::string&) {
                                  return std::vector<std::string>{"(" + r.lo[1] + " + " + row + ")", "ft_k"};
                                },
                                .ks = ks,
                                .nm = nm,
                                .nn = "",
                                .row = "ft_e / " + lit(chunks),
                                .col = "ft_e % " + lit(chunks) + " * 4",
                                .at = "(" + slot + ") * " + lit(st.slot_a) + " + ft_r * " + lit(st.pitch_a) + " + ft_c",
                                .step = st.step,
                                .k = st.k,
                                .lanes = 4,
                                .count = st.caps[1] * chunks};
      return Block{copy_slice(cx_, weights), copy_patches(e, ks, "(" + slot + ") * " + lit(st.slot_b), ng)};
    };
    emit_ring(cx_, k, st.ring, split_steps(cx_, all_steps), k0, slices, [&](const std::string& gks, const std::string& slot) {
      return update_step(gks, slot + " * " + lit(st.slot_a), lit(st.pitch_a), slot + " * " + lit(st.slot_b));
    });
  } else {
    Block steps;
    // Weights: element e of the slice is row e / step, reduction index ks * step + e % step. A
    // float32 input of the group is read as laid out, [C_out][K] row-major (element m x K + k, no
    // tap decoded); weights the group computes through their index map.
    const int w = n.inputs[1];
    const bool laid_out = !cx_.produced().count(w) && g.value(w).dtype == DType::kF32 && cx_.param.count(cx_.buffer_of(w));
    steps.push_back(cx_.staging_loop(k, st.a, nm + " * " + step, st.caps[1] * st.step, [&] {
      cx_.cur().push_back(small_let("ft_k", "ft_ks * " + step + " + ft_e % " + step));
      cx_.cur().push_back(let("float", "ft_x", "0.0f"));
      Block inside;
      cx_.with_block(inside, [&] {
        const std::string row = "(" + r.lo[1] + " + ft_e / " + step + ")";
        if (laid_out) {
          cx_.cur().push_back(assign("ft_x", cx_.param.at(cx_.buffer_of(w)) + "[" + row + " * " + kk_total + " + ft_k]"));
          return;
        }
        std::vector<std::string> vars = r.lo;
        vars[1] = row;
        for (const std::string& t : conv_taps(e, "ft_k")) vars.push_back(t);
        cx_.cur().push_back(assign("ft_x", cx_.value(w, cx_.index_of(e.accesses[1], vars))));
      });
      cx_.cur().push_back(if_then("ft_k < " + kk_total, inside));
    }, "", st.step, st.pitch_a));
    // Patches (stage_patches).
    steps.push_back(stage_patches(k, e, ng));
    steps.push_back(barrier());
    steps.push_back(update_step("ft_ks", "", lit(st.pitch_a), ""));
    steps.push_back(barrier());
    k.body.push_back(uniform_for("ft_ks", k0, split_end_step(cx_, k0, all_steps), steps));
  }
  emit_split_sum(cx_, k, st.regs, st.tm * st.tn);
  // The epilogue's input: each cell of the micro-tile, plus the bias.
  const bool bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  Block write = cx_.fresh_block([&] {
    cx_.cur().insert(cx_.cur().end(), micro_tile.begin(), micro_tile.end());
    for (int64_t j = 0; j < st.tn; ++j) {
      const std::string col = col_of(j);
      Block column;
      std::string pixel;
      cx_.with_block(column, [&] {
        std::vector<std::string> o = conv_pixel(col, &pixel);
        Block cells;
        cx_.with_block(cells, [&] {
          for (int64_t i = 0; i < st.tm; ++i) {
            const std::string row = row_of(i);
            Block cell;
            cx_.with_block(cell, [&] {
              o[1] = "(" + r.lo[1] + " + " + row + ")";
              std::string result = st.regs + "[" + std::to_string(i * st.tn + j) + "]";
              if (bias) result += " + " + cx_.value(n.inputs[2], {o[1]});
              cx_.store_value(v, o, result);
            });
            cx_.cur().push_back(if_then(row + " < " + nm, cell));
          }
        });
        cx_.cur().push_back(if_then(pixel, cells));
      });
      cx_.cur().push_back(if_then(col + " < " + np, column));
    }
  });
  k.body.push_back(if_then(owns, write));
}

}  // namespace

std::unique_ptr<AnchorStage> conv_gemm_stage(LoweringContext& cx, Kernel& k, const Node& n,
                                             const std::vector<int64_t>& max_extent, int64_t max_groups) {
  const int v = n.outputs[0];
  const Shape& w = cx.g.value(n.inputs[1]).shape;
  const std::string tag = std::to_string(v);
  GemmPlan st;
  st.k = numel(w) / w[0];
  st.step = cx.cfg.reduce_step;
  st.cout_g = conv_cout_per_group(cx.g, n);
  st.groups_cap = std::max<int64_t>(1, max_groups);
  int64_t pixels = 1;
  for (int64_t x : max_extent) st.caps.push_back(std::max<int64_t>(1, x));
  for (size_t d = 0; d < max_extent.size(); ++d) pixels *= d == 1 ? 1 : st.caps[d];
  std::tie(st.tm, st.tn) = planner::micro_tile(st.caps[1], pixels, cx.cfg.threads);
  if (st.tm == 0) return nullptr;
  st.cols = pixels;
  st.b_cap = st.groups_cap * st.step * pixels;
  st.ring = planner::conv_staging(cx.g, n, cx.produced(), cx.cfg);
  st.pitch_a = planner::conv_pitch_a(st.ring, st.step);
  st.a_cap = st.caps[1] * st.pitch_a;
  if (st.ring.async_b) {
    st.slot_a = st.a_cap;
    st.slot_b = st.b_cap;
  }
  const int stages = st.ring.async_b ? st.ring.stages : 1;
  st.a = k.add_shared("ca" + tag, DType::kF32, st.ring.async_b ? stages * st.slot_a : st.a_cap);
  st.b = k.add_shared("cb" + tag, DType::kF32, stages * st.b_cap);
  st.regs = "tc" + tag;
  k.thread_locals.push_back({st.regs, st.tm * st.tn});
  return std::make_unique<ConvGemmStage>(cx, n, std::move(st));
}

}  // namespace fusetune::codegen::stages
