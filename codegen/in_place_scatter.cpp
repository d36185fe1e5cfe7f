#include "codegen/in_place_scatter.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "codegen/index_width.h"
#include "codegen/scalar_ops.h"
#include "codegen/stages/scatter.h"
#include "codegen/uniform_constants.h"
#include "codegen/verify_ir.h"
#include "core/error.h"
#include "planner/index_expr.h"

namespace fusetune::codegen {

LoweredKernel lower_in_place_scatter(const Graph& g, const planner::FusionGroup& group, const planner::TileConfig& cfg,
                                     const std::string& name, const LowerOptions& options) {
  check(group.nodes.size() == 1 && g.nodes()[static_cast<size_t>(group.nodes[0])].op == "ScatterND",
        "lower_group: the in-place form is for a group of one ScatterND, not ", group.pattern);
  check(cfg.tile.size() == 1 && cfg.tile[0] > 0 && cfg.threads > 0 && cfg.threads % kWarpSize == 0,
        "lower_group: in-place candidate ", cfg.str(), " needs a tile of update elements and whole warps");
  const Node& n = g.nodes()[static_cast<size_t>(group.nodes[0])];
  const auto lit = [](int64_t v) { return planner::index_literal(v); };
  const Value& data = g.value(n.inputs[0]);
  const Value& ids = g.value(n.inputs[1]);
  const Value& upd = g.value(n.inputs[2]);
  const int out = n.outputs[0];
  const int64_t depth = ids.shape.back();
  const int64_t elems = numel(upd.shape);
  const int64_t tuples = depth == 0 ? 0 : numel(ids.shape) / depth;
  const int64_t slice = std::max<int64_t>(1, tuples == 0 ? 1 : elems / tuples);  // an empty slice: no element to run
  const int64_t tile = cfg.tile[0];

  LoweredKernel lk;
  Kernel& k = lk.kernel;
  k.name = name;
  k.threads = cfg.threads;
  k.grid = std::max<int64_t>(1, (elems + tile - 1) / tile);
  const std::string p = options.param_prefix;
  const std::vector<int> ins = {n.inputs[0], n.inputs[1], n.inputs[2]};
  for (size_t i = 0; i < ins.size(); ++i) {
    k.params.push_back({p + "in" + std::to_string(i), g.value(ins[i]).dtype, numel(g.value(ins[i]).shape), false});
    lk.inputs.push_back(ins[i]);
  }
  const std::string o = p + "out0";
  k.params.push_back({o, g.value(out).dtype, numel(g.value(out).shape), true});
  lk.outputs = {out};
  lk.in_place = {0};  // the output is data's buffer

  // Without a reduction, float32 and 16-bit slices whose length is a whole number of 16-byte
  // vectors move a vector a thread at a time (every vector inside one slice, every address 16-byte
  // aligned: the slice's run starts at a multiple of its length); else an element at a time.
  const DType dt = g.value(out).dtype;
  const std::string red = n.attrs.s("reduction", "none");
  const int lanes = dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16 ? vector_lanes(dt) : 1;
  const bool wide = red == "none" && upd.dtype == dt && lanes > 1 && slice % lanes == 0 && tile % lanes == 0;
  const int64_t step = wide ? lanes : 1;
  // Block b's elements: [ft_e0, ft_e1), in steps of `step` (ft_e = ft_v * step).
  k.uniform.push_back(let(kIndexType, "ft_e0", "(" + std::string(kIndexType) + ")(ft_block - " + lit(options.block_base) + ") * " + lit(tile / step)));
  k.uniform.push_back(let(kIndexType, "ft_e1", "ft_min(ft_e0 + " + lit(tile / step) + ", " + lit(elems / step) + ")"));
  Block body;
  body.push_back(let(kIndexType, "ft_e", "ft_v * " + lit(step)));
  body.push_back(let(kIndexType, "ft_t", "ft_e / " + lit(slice)));
  std::string offset = "(ft_e - ft_t * " + lit(slice) + ")";
  // A tuple's index along axis j, read as int where data's extents fit it, clamped into
  // [-extent, extent) and wrapped.
  bool narrow = true;
  for (int64_t j = 0; j < depth; ++j) narrow = narrow && data.shape[static_cast<size_t>(j)] <= INT_MAX;
  int64_t stride = slice;
  for (int64_t j = depth; j-- > 0;) {
    const int64_t extent = data.shape[static_cast<size_t>(j)];
    const std::string c = "ft_c" + std::to_string(j), w = "ft_w" + std::to_string(j);
    const std::string raw = std::string(narrow ? "(int)" : "(long long)") + p + "in1[ft_t * " + lit(depth) + " + " + lit(j) + "]";
    body.push_back(let(kIndexType, c, "ft_min(ft_max(" + raw + ", " + lit(-extent) + "), " + lit(extent - 1) + ")"));
    body.push_back(let(kIndexType, w, c + " < 0 ? " + c + " + " + lit(extent) + " : " + c));
    offset = "(" + w + " * " + lit(stride) + " + " + offset + ")";
    stride *= extent;
  }
  body.push_back(let(kIndexType, "ft_o", offset));
  if (wide) {
    body.push_back(vector_load("ft_u", p + "in2", "ft_e", dt));
    body.push_back(vector_store(o, "ft_o", "ft_u", dt));
  } else {
    const std::string u = load_as_compute(upd.dtype, p + "in2[ft_e]");
    const std::string value = red == "none" ? u : stages::scatter_combine(red, is_float(dt), load_as_compute(dt, o + "[ft_o]"), u);
    body.push_back(store(o, "ft_o", store_from_compute(dt, value)));
  }
  k.body.push_back(comment("stage ScatterND '" + n.name + "' in place: update elements [ft_e0, ft_e1) x " + lit(step) + " of " + lit(elems)));
  k.body.push_back(thread_for("ft_v", "ft_e0", "ft_e1", body));

  std::vector<int64_t> blocks(static_cast<size_t>(k.grid));
  std::iota(blocks.begin(), blocks.end(), options.block_base);
  const FoldResult folded = fold_uniform_constants(k, blocks);
  choose_index_width(k, blocks, folded.bounds);
  verify_ir(k);
  return lk;
}

}  // namespace fusetune::codegen
