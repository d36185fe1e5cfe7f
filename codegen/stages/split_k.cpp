#include "codegen/stages/split_k.h"

#include "core/error.h"

namespace fusetune::codegen::stages {

int64_t split_steps(const LoweringContext& cx, int64_t steps) { return (steps + cx.splits() - 1) / cx.splits(); }

std::string split_first_step(LoweringContext& cx, Kernel& k, int64_t steps) {
  if (cx.splits() == 1) return "0";
  k.uniform.push_back(let(kIndexType, "ft_k0", "ft_split * " + lit(split_steps(cx, steps))));
  return "ft_k0";
}

std::string split_end_step(const LoweringContext& cx, const std::string& k0, int64_t steps) {
  if (cx.splits() == 1) return lit(steps);
  return "ft_min(" + k0 + " + " + lit(split_steps(cx, steps)) + ", " + lit(steps) + ")";
}

SplitSlots publish_split(LoweringContext& cx, Kernel& k, const std::vector<std::string>& values, DType dtype) {
  const int64_t splits = cx.splits();
  check(splits > 1, "split-K: publishing a block's values without a split");
  check(k.scratch.empty(), "split-K: a kernel with two split reductions");
  // Named with the part's prefix: a packed kernel's split parts each have their own.
  const std::string flags = cx.options.param_prefix + "ft_flags", partials = cx.options.param_prefix + "ft_partials";
  const int64_t n = static_cast<int64_t>(values.size()), threads = k.threads;
  const int64_t quads = dtype == DType::kF32 ? n / 4 : 0;  // whole float32 quads, then the rest
  const int64_t slot = n * threads;                          // one block's values
  // A counter for each tile, whose splits are consecutive blocks (LoweringContext's tile order)
  // from the kernel's first (pack_kernels moves a part's to its range).
  k.scratch.push_back({flags, DType::kU32, cx.tiles(), true, 0, splits});
  k.scratch.push_back({partials, dtype, cx.tiles() * splits * slot, true});
  const std::string last = k.add_shared(cx.options.param_prefix + "ft_last", DType::kF32, 1);
  // Value i of thread t: in quad i / 4 (4 threads' floats apart, a thread's four together) for i
  // below 4 x quads, else one by one (threads' values together).
  SplitSlots out{partials, [=](const std::string& split, int64_t i) {
                   const std::string block = "(ft_tile * " + lit(splits) + " + " + split + ") * " + lit(slot) + " + ";
                   if (i < 4 * quads) return block + lit(i / 4 * 4 * threads + i % 4) + " + ft_thread * 4";
                   return block + lit(4 * quads * threads + (i - 4 * quads) * threads) + " + ft_thread";
                 }};
  k.body.push_back(comment("split-K: this block's partial values, then the last block of the tile combines them"));
  // A thread's float32 values four in one 16-byte store (a warp's stores are 512 contiguous
  // bytes), the rest (and 32-bit integers) one by one (a warp's, 128).
  for (int64_t q = 0; q < quads; ++q) {
    const size_t first = static_cast<size_t>(4 * q);
    const std::string quad = "ft_pq" + std::to_string(q), ctype = vector_ctype(dtype);
    k.body.push_back(let(ctype, quad, "ft_pack_" + ctype + "(" + values[first] + ", " + values[first + 1] + ", " +
                                          values[first + 2] + ", " + values[first + 3] + ")"));
    k.body.push_back(vector_store(partials, out.element("ft_split", 4 * q), quad, dtype));
  }
  for (int64_t i = 4 * quads; i < n; ++i) k.body.push_back(store(partials, out.element("ft_split", i), values[static_cast<size_t>(i)]));
  k.body.push_back(fence());
  k.body.push_back(barrier());
  k.body.push_back(if_then("ft_thread == 0", {atomic(flags, "ft_tile", "1u", "add", "ft_arrived"),
                                              store(last, "0", "(ft_arrived == " + std::to_string(splits - 1) + "u ? 1.0f : 0.0f)")}));
  k.body.push_back(barrier());
  k.body.push_back(exit_unless(last + "[0] != 0.0f"));
  k.body.push_back(fence());
  return out;
}

void release_split(Kernel& k) { k.body.push_back(if_then("ft_thread == 0", {atomic(k.scratch.front().name, "ft_tile", "0u", "exch")})); }

void emit_split_sum(LoweringContext& cx, Kernel& k, const std::string& acc, int64_t count, const std::string& op, DType dtype) {
  if (cx.splits() == 1) return;
  check(dtype == DType::kF32 || (dtype == DType::kU32 && op == "sum"), "split-K sums float32 or uint32 accumulators, or takes float32 maxima");
  std::vector<std::string> cells;
  for (int64_t i = 0; i < count; ++i) cells.push_back(acc + "[" + std::to_string(i) + "]");
  const SplitSlots slots = publish_split(cx, k, cells, dtype);
  for (const std::string& cell : cells) k.body.push_back(assign(cell, op == "max" ? "(-ft_inf())" : dtype == DType::kU32 ? "0u" : "0.0f"));
  // Each split's slot read as it was stored: a float32 quad in one 16-byte load (a warp's 512
  // contiguous bytes), the rest one by one.
  Block sum;
  const int64_t quads = dtype == DType::kF32 ? count / 4 : 0;
  for (int64_t q = 0; q < quads; ++q) {
    const std::string quad = "ft_sq" + std::to_string(q);
    sum.push_back(vector_load_l2(quad, slots.buffer, slots.element("ft_s", 4 * q)));
    for (int64_t j = 0; j < 4; ++j) {
      const std::string& cell = cells[static_cast<size_t>(4 * q + j)];
      sum.push_back(assign(cell, warp_combine(op, cell, vector_element(quad, DType::kF32, static_cast<int>(j)))));
    }
  }
  for (int64_t i = 4 * quads; i < count; ++i) {
    const std::string& cell = cells[static_cast<size_t>(i)];
    sum.push_back(assign(cell, warp_combine(op, cell, "ft_ldcg(" + slots.buffer + ", " + slots.element("ft_s", i) + ")")));
  }
  k.body.push_back(serial_for("ft_s", "0", lit(cx.splits()), sum));
  release_split(k);
}

}  // namespace fusetune::codegen::stages
