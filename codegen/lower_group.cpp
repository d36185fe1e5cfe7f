#include "codegen/lower_group.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>

#include "codegen/stages/attention.h"
#include "codegen/stages/context.h"
#include "codegen/stages/conv_common.h"
#include "codegen/stages/conv_gemm.h"
#include "codegen/stages/conv_window.h"
#include "codegen/stages/dp4a_matmul.h"
#include "codegen/stages/inline.h"
#include "codegen/stages/matmul.h"
#include "codegen/stages/mma_matmul.h"
#include "codegen/stages/reduce.h"
#include "codegen/stages/row_stats.h"
#include "codegen/stages/scatter.h"
#include "codegen/barrier_ownership.h"
#include "codegen/barriers.h"
#include "codegen/in_place_scatter.h"
#include "codegen/index_width.h"
#include "codegen/uniform_constants.h"
#include "codegen/verify_ir.h"
#include "core/error.h"
#include "core/ops.h"
#include "planner/held_rows.h"
#include "planner/library_call.h"
#include "planner/library_match.h"
#include "planner/tiling.h"

// The driver of the generic tile-stage schedule: binds parameters, sets up the tile and the regions
// (stages/context.h), sizes and plans one stage per anchor (stages/*.h) in the group's order, then
// emits the stages and the element stages of inlined outputs.
namespace fusetune::codegen {

namespace {

using stages::AnchorStage;
using stages::LoweringContext;
using stages::lit;

// The largest region of a value over the sampled tiles, from which the stages size shared memory.
struct RegionBound {
  int64_t elems = 0;            // most elements
  std::vector<int64_t> extent;  // most along each axis
  int64_t rows = 0;             // a normalization's: most rows of statistics (stages/row_stats.h)
  int64_t groups = 0;           // a Conv's: most channel groups spanned (stages/conv_common.h)
};

// The normalizations planner::row_consumer pairs (stages/row_stats.h): producer node -> consumer
// node, neither absorbed by flash attention.
std::map<int, int> row_pairs(const LoweringContext& cx, const std::optional<planner::AttentionCore>& core) {
  const auto absorbed = [&](int id) { return core && std::binary_search(core->absorbed.begin(), core->absorbed.end(), id); };
  std::map<int, int> pairs;
  for (int id : cx.group.nodes) {
    const int c = planner::row_consumer(cx.g, cx.group, id);
    if (c >= 0 && !absorbed(id) && !absorbed(c)) pairs[id] = c;
  }
  return pairs;
}

// The largest region of each value over the sampled tiles; and the producers of `pairs` whose rows
// and their consumer's do not coincide in some tile (planner::rows_coincide).
struct SampledBounds {
  std::map<int, RegionBound> regions;
  std::set<int> apart;
};

SampledBounds bound_regions(const LoweringContext& cx, const std::map<int, int>& pairs) {
  SampledBounds out;
  std::map<int, RegionBound>& bound = out.regions;
  const auto output = [&](int node) { return cx.g.nodes()[static_cast<size_t>(node)].outputs[0]; };
  for (int64_t t : cx.sample_tiles()) {
    const std::map<int, std::vector<planner::Interval>> numeric = cx.numeric_regions(t);
    for (const auto& [v, region] : numeric) {
      RegionBound& b = bound[v];
      b.elems = std::max(b.elems, stages::elems(region));
      b.extent.resize(region.size(), 0);
      for (size_t d = 0; d < region.size(); ++d) b.extent[d] = std::max(b.extent[d], region[d].size());
      const int p = cx.producer_or(v);
      if (p < 0) continue;
      const Node& n = cx.g.nodes()[static_cast<size_t>(p)];
      if (n.op == "Conv" && !region.empty() && !region[1].empty()) {
        b.groups = std::max(b.groups, stages::conv_groups_spanned(cx.g, n, region));
      }
      if (find_op(n.op)->kind == OpKind::kNormalization) b.rows = std::max(b.rows, planner::normalization_rows(cx.g, n, region));
    }
    for (const auto& [p, c] : pairs) {
      if (out.apart.count(p)) continue;
      const auto a = numeric.find(output(p)), b = numeric.find(output(c));
      if (a == numeric.end() || b == numeric.end() ||
          !planner::rows_coincide(cx.g, cx.g.nodes()[static_cast<size_t>(p)], a->second, b->second)) {
        out.apart.insert(p);
      }
    }
  }
  return out;
}

// The member MatMul that stages value v as its resident A on tensor cores (planner::resident_a), or -1.
int resident_product(const LoweringContext& cx, int v, const std::map<int, RegionBound>& bound) {
  for (int id : cx.group.nodes) {
    const Node& n = cx.g.nodes()[static_cast<size_t>(id)];
    if (n.op == "MatMul" && n.inputs[0] == v && bound.count(n.outputs[0]) && stages::stages_matmul(cx, n, bound.at(n.outputs[0]).extent) &&
        stages::uses_tensor_cores(cx, n) && planner::resident_a(cx.g, cx.group, n, cx.cfg)) {
      return id;
    }
  }
  return -1;
}

// Sizes shared memory and plans the stage of every anchor, in the group's order (allocations and
// thread-locals in that order): with flash attention, the attention stage for the core's output
// and nothing for the anchors it absorbs (its scores and softmax); a normalization's row statistics; a MatMul staged on tensor cores,
// in the dp4a form (8-bit integer operands) or with register blocking; a Conv staged as an implicit GEMM or a depthwise window; else the
// generic reduction or ScatterND stage. An anchor other than the root also gets a shared buffer
// for its value, unless its stage hands it on in registers (a register epilogue, a row handoff):
// floats (64-bit integers), or, for a tensor-core product's resident A (planner::resident_a), the
// value's 16-bit type at planner::resident_pitch for the product's warps' rows.
std::map<int, std::unique_ptr<AnchorStage>> plan_stages(LoweringContext& cx, Kernel& k,
                                                        const std::optional<planner::AttentionCore>& core) {
  const std::map<int, int> pairs = row_pairs(cx, core);
  SampledBounds bounds = bound_regions(cx, pairs);
  std::map<int, RegionBound>& bound = bounds.regions;
  for (const auto& [v, b] : bound) cx.capacity[v] = b.elems;
  // Rows handed from one normalization to the next in registers: pairs whose rows coincide in
  // every sampled tile and are held alike in one batch at their most rows (planner::rows_handed).
  std::set<int> handoffs;    // producer nodes
  std::map<int, int> taken;  // consumer node -> the producer's value
  for (const auto& [p, c] : pairs) {
    const Node& pn = cx.g.nodes()[static_cast<size_t>(p)];
    const Node& cn = cx.g.nodes()[static_cast<size_t>(c)];
    const int v = pn.outputs[0];
    if (bounds.apart.count(p) || !bound.count(v) || !bound.count(cn.outputs[0]) ||
        !planner::rows_handed(cx.g, cx.group, pn, bound.at(v).rows, cn, bound.at(cn.outputs[0]).rows, cx.cfg.threads)) {
      continue;
    }
    handoffs.insert(p);
    cx.in_registers.insert(v);
    taken[c] = v;
  }
  std::map<int, std::unique_ptr<AnchorStage>> planned;
  for (int id : cx.group.nodes) {
    const Node& node = cx.g.nodes()[static_cast<size_t>(id)];
    const int v = node.outputs[0];
    std::unique_ptr<AnchorStage> stage;
    if (core && std::binary_search(core->absorbed.begin(), core->absorbed.end(), id)) continue;  // the attention stage's
    if (core && id == core->output) {
      stage = stages::attention_stage(cx, k, *core, bound[v].extent);
    } else if (find_op(node.op)->kind == OpKind::kNormalization) {
      stages::RowHandoff handoff;
      handoff.gives = handoffs.count(id) > 0;
      if (const auto t = taken.find(id); t != taken.end()) handoff.takes = t->second;
      stage = stages::row_stats_stage(cx, k, node, bound[v].rows, handoff);
    } else if (node.op == "MatMul" && stages::stages_matmul(cx, node, bound[v].extent)) {
      if (stages::uses_tensor_cores(cx, node)) {
        stage = stages::mma_matmul_stage(cx, k, node, bound[v].extent, bound[v].elems);
      } else if (stages::uses_dp4a(cx, node)) {
        stage = stages::dp4a_matmul_stage(cx, k, node, bound[v].extent, bound[v].elems);
      } else {
        stage = stages::staged_matmul_stage(cx, k, node, bound[v].extent, bound[v].elems);
      }
    } else if (node.op == "Conv" && cx.cfg.reduce_step > 0) {
      stage = cx.g.value(node.inputs[1]).shape[1] == 1 ? stages::conv_window_stage(cx, k, node, bound[v].extent, bound[v].groups)
                                                        : stages::conv_gemm_stage(cx, k, node, bound[v].extent, bound[v].groups);
    }
    if (!runs_as_stage(node)) continue;
    if (v != cx.root && !cx.in_registers.count(v)) {
      if (const int product = resident_product(cx, v, bound); product >= 0) {
        // A tensor-core product's resident A (planner::resident_a): the value in its own type,
        // the product's warps' rows (planner::mma_warps over its largest region) at the pitch.
        const Node& mm = cx.g.nodes()[static_cast<size_t>(product)];
        const std::vector<int64_t>& me = bound.at(mm.outputs[0]).extent;
        const int64_t rows = planner::mma_warps(me[me.size() - 2], me.back(), cx.cfg.threads / kWarpSize).rows();
        cx.resident_pitch[v] = planner::resident_pitch(cx.g, mm);
        cx.buffer[v] = k.add_shared("b" + std::to_string(v), cx.g.value(v).dtype, rows * cx.resident_pitch[v], 16);
      } else {
        cx.buffer[v] = k.add_shared("b" + std::to_string(v), is_float(cx.g.value(v).dtype) ? DType::kF32 : DType::kI64,
                                    std::max<int64_t>(1, bound[v].elems));
      }
    }
    if (!stage) stage = node.op == "ScatterND" ? stages::scatter_stage(cx, node) : stages::reduce_stage(cx, k, node, bound[v].elems);
    planned[v] = std::move(stage);
  }
  return planned;
}

LoweredKernel lower_generated(const Graph& g, const planner::FusionGroup& group, const planner::TileConfig& cfg,
                              const std::string& name, const LowerOptions& options) {
  LoweredKernel out;
  Kernel& k = out.kernel;
  k.name = name;
  // The candidate's threads, and the warp-specialized form's producer warpgroup after them.
  k.threads = cfg.ws ? planner::warp_specialized_registers(cfg.threads).block_threads : cfg.threads;
  LoweringContext cx(g, group, cfg, options);
  for (int v : group.inputs) {
    cx.param[v] = options.param_prefix + "in" + std::to_string(out.inputs.size());
    k.params.push_back({cx.param[v], g.value(v).dtype, numel(g.value(v).shape), false});
    out.inputs.push_back(v);
  }
  for (int v : group.outputs) {
    cx.out_param[v] = options.param_prefix + "out" + std::to_string(out.outputs.size());
    k.params.push_back({cx.out_param[v], g.value(v).dtype, numel(g.value(v).shape), true});
    out.outputs.push_back(v);
  }
  // An error names the node whose stage failed, or the group's first node.
  const auto naming = [&](const Node& node, const auto& step) {
    try {
      step();
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind("node '", 0) == 0) throw;
      fail("node '", node.name, "' (", node.op, ") of group ", group.pattern, ": ", msg);
    }
  };
  const Node& first = g.nodes()[static_cast<size_t>(group.nodes.front())];
  std::map<int, std::unique_ptr<AnchorStage>> planned;
  std::optional<planner::AttentionCore> core;
  if (cfg.flash) {
    core = planner::match_attention(g, group);
    check(core.has_value(), "lower_group: flash attention asked for a group (", group.pattern, ") without an attention core");
  }
  naming(first, [&] {
    cx.tile_setup(k);
    cx.regions(k);
    for (int v : group.outputs) {  // each exported value is computed over what the root's tiles need of it
      check(cx.region.count(v) != 0, "exported value '", g.value(v).name, "' is not read on the way to the group's root");
    }
    planned = plan_stages(cx, k, core);
  });
  // The stages in the group's order; what a later stage sets aside to run ahead of the stages
  // (AnchorStage::ahead_of_stages) goes before the first.
  const size_t first_stage = k.body.size();
  Block ahead;
  for (int id : group.nodes) {
    const Node& node = g.nodes()[static_cast<size_t>(id)];
    if (!runs_as_stage(node)) continue;
    if (core && std::binary_search(core->absorbed.begin(), core->absorbed.end(), id)) continue;
    AnchorStage& stage = *planned.at(node.outputs[0]);
    if (k.body.size() > first_stage) stage.ahead_of_stages = &ahead;
    k.body.push_back(comment("stage " + node.op + " '" + node.name + "'"));
    naming(node, [&] { stage.emit(k); });
    k.body.push_back(barrier());
  }
  if (!ahead.empty()) {
    ahead.insert(ahead.begin(), comment("copies issued ahead of the stages"));
    k.body.insert(k.body.begin() + static_cast<std::ptrdiff_t>(first_stage), ahead.begin(), ahead.end());
  }
  // The root when it is inlined, and inlined values that leave the group.
  for (int v : group.outputs) {
    if (cx.written.count(v)) continue;  // by a register epilogue
    if (cx.producer.count(v) && !runs_as_stage(g.nodes()[static_cast<size_t>(cx.producer.at(v))])) {
      naming(g.nodes()[static_cast<size_t>(cx.producer.at(v))], [&] { stages::element_stage(cx, k, v); });
    }
  }
  remove_redundant_barriers(k);
  std::vector<int64_t> blocks(static_cast<size_t>(k.grid));
  std::iota(blocks.begin(), blocks.end(), options.block_base);
  remove_unordering_barriers(k, blocks);
  const FoldResult folded = fold_uniform_constants(k, blocks);
  choose_index_width(k, blocks, folded.bounds);
  verify_ir(k);
  return out;
}

}  // namespace

namespace {

// A library candidate: no generated body, the call and its parameter bindings.
LoweredKernel lower_library_call(const Graph& g, const planner::FusionGroup& group, const planner::TileConfig& cfg,
                                 const std::string& name, const LowerOptions& options) {
  const auto match = planner::match_library_call(g, group);
  check(match.has_value(), "lower_group: the group (", group.pattern, ") is not a pattern ", cfg.library, " runs");
  std::string why;
  const auto call = planner::library_call(match->call, cfg.library, cfg.algorithm, &why);
  check(call.has_value(), "lower_group: ", why);
  LoweredKernel out;
  out.kernel.name = name;
  out.kernel.library = call->to_json();
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
  if (cfg.in_place) return lower_in_place_scatter(g, group, cfg, name, options);
  check(cfg.threads > 0 && cfg.threads % 32 == 0, "lower_group: threads must be a positive multiple of 32");
  return lower_generated(g, group, cfg, name, options);
}

LoweredKernel pack_kernels(const std::vector<LoweredKernel>& parts, const std::string& name) {
  check(!parts.empty(), "pack_kernels: nothing to pack");
  if (parts.size() == 1) {
    LoweredKernel one = parts[0];
    one.kernel.name = name;
    if (one.kernel.library.empty()) verify_ir(one.kernel);
    return one;
  }
  LoweredKernel out;
  Kernel& k = out.kernel;
  k.name = name;
  k.threads = parts[0].kernel.threads;
  k.grid = 0;
  k.index_bits = 32;
  for (const LoweredKernel& p : parts) {
    check(p.kernel.library.empty(), "pack_kernels: a library call cannot be packed");
  }
  std::vector<Param> outs;
  for (const LoweredKernel& p : parts) {
    check(p.kernel.threads == k.threads, "pack_kernels: parts have ", p.kernel.threads, " and ", k.threads, " threads");
    const int64_t base = k.grid;
    k.grid += p.kernel.grid;
    for (const Param& prm : p.kernel.params) (prm.output ? outs : k.params).push_back(prm);
    k.shared.insert(k.shared.end(), p.kernel.shared.begin(), p.kernel.shared.end());
    // A split-K part's counters and partial products, named with its prefix; its counters count
    // its own range of blocks.
    for (Param scratch : p.kernel.scratch) {
      if (scratch.group_blocks > 0) scratch.first_block += base;
      k.scratch.push_back(std::move(scratch));
    }
    // A thread-local of a name another part declares too is a stage's scratch array (a staging
    // loop's batch, ft_sx; accumulators are named by their value): one array, as large as the
    // largest, serves both, since a block runs one part.
    for (const ThreadLocal& t : p.kernel.thread_locals) {
      const auto same = std::find_if(k.thread_locals.begin(), k.thread_locals.end(), [&](const ThreadLocal& x) { return x.name == t.name; });
      if (same == k.thread_locals.end()) {
        k.thread_locals.push_back(t);
        continue;
      }
      check(same->dtype == t.dtype, "pack_kernels: thread-local '", t.name, "' is ", dtype_name(same->dtype), " in one part and ",
            dtype_name(t.dtype), " in another");
      same->count = std::max(same->count, t.count);
    }
    k.shared_bytes = std::max(k.shared_bytes, p.kernel.shared_bytes);
    k.index_bits = std::max(k.index_bits, p.kernel.index_bits);  // int only when every part proved it
    k.body.push_back(part("ft_block >= " + lit(base) + " && ft_block < " + lit(k.grid), p.kernel.uniform, p.kernel.body));
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      const int own = o < p.in_place.size() ? p.in_place[o] : -1;
      out.in_place.push_back(own < 0 ? -1 : own + static_cast<int>(out.inputs.size()));
    }
    out.inputs.insert(out.inputs.end(), p.inputs.begin(), p.inputs.end());
    out.outputs.insert(out.outputs.end(), p.outputs.begin(), p.outputs.end());
  }
  k.params.insert(k.params.end(), outs.begin(), outs.end());  // inputs first, then outputs, as LoweredKernel binds
  if (std::all_of(out.in_place.begin(), out.in_place.end(), [](int i) { return i < 0; })) out.in_place.clear();
  verify_ir(k);
  return out;
}

}  // namespace fusetune::codegen
