// The staged MatMul (scalar form; the tensor-core form is stages/mma_matmul.h) and what both
// forms share.
//
// Takes the lowering context and a MatMul of the group. stages_matmul says whether it stages: the
// candidate has a reduction step, both operands are matrices (or batches of them), and every tile's
// region is one matrix (its batch axes of extent at most 1 over the sampled tiles, `max_extent`).
// staged_matmul_stage allocates the operand slices in shared memory (A: rows x step, B: step x
// columns, sized for the largest region), picks the register-blocked micro-tile (1, 2, 4 or 8 rows
// by as many columns; the smallest, squarest one with which the block's threads cover the largest
// region) and declares its accumulators as a thread-local; with vector width 4, an operand read
// straight from a float32 input along its contiguous axis is staged in float4 quads. Its emit runs
// a block-uniform loop over the reduction steps: each step loads both slices cooperatively (zero
// beyond K; a quad only where it lies inside the slice and the operand and its address is 16-byte
// aligned, checked per quad at run time, else element loads), a barrier, each thread's micro-tile
// update, a barrier. With register micro-tiles and planner::simt_staging's ring (vector width 4,
// a float32 B input with rows of whole 16-byte chunks), the slices go to a ring of 3 slots
// instead, 2 steps ahead: B by 16-byte cp.async (zero-filled past the region and K, element by
// element where a chunk's address is not 16-byte aligned), A too where it is such an input (rows
// padded by 4 floats), else A computed or loaded by the threads as above; each step waits for
// its group, passes one barrier, issues the copies of the step two ahead into the slot the
// previous step used, and multiplies its own slot; where another stage of the group runs first
// (AnchorStage::ahead_of_stages), the prologue's B copies are issued before the group's first
// stage (emit_ring's RingAhead), so the weights load while that stage runs. Then, where planner::register_epilogue takes the product's uses and each
// micro-tile row is a whole number of 16-byte vectors of every value it writes
// (planner::sixteen_byte_runs: TN = 4 floats, 8 16-bit values), the epilogue runs from the
// registers (epilogue_run: each row's TN columns computed and stored as 16-byte vectors where
// aligned); otherwise the accumulators go to the product's shared buffer (the root's own
// accumulator allocation) for the epilogue, and to its output parameter when exported. When the
// threads cannot cover the region, the accumulators live in shared memory instead.
// The GEMV form (TileConfig::gemv; decode steps and classifier heads, where B is read once and
// staging it buys nothing): when the region has at most 8 rows and B is a float32/16-bit input
// read along its columns, only A's slice is staged per step; the block's threads are laid out as
// slices x column vectors (thread t: the 16-byte vector t % vecs of the region's columns, slice
// t / vecs), each slice takes rows slice, slice + slices, ... of the step in batches of up to
// planner::kGemvLoads rows: first every row of the batch as one guarded 16-byte load (no branch
// around it, zeros where the row is past the step or K or its vector partial or unaligned), then
// each row converted in registers (element loads where its vector was not whole) and its rows x
// vector partial products accumulated in a thread-local, so that a batch's loads are all in flight
// before the first is used (a row's load under its own branch, used right after, was one 16-byte
// load in flight a thread: the SASS of codegen 27). After the steps each thread's partials go to shared memory in
// 16-byte stores, and the slices are summed in two rounds (parts of consecutive slices per
// element by all threads, then each element's parts) into the product's accumulators. With
// split-K (stages/split_k.h) a block runs its split's steps, and the second round leaves each
// thread's share of the tile's summed plane (elements t, t + threads, ...) in registers, which the
// hand-over sums over the splits in the tile's last block before they go to the accumulators.
// Guarantees:
// the reference product up to float32 rounding (summed in K order, or per slice then in slice
// order in the GEMV form) for every tile, partial ones included; every staging loop is clamped
// to its allocation.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

bool stages_matmul(const LoweringContext& cx, const Node& n, const std::vector<int64_t>& max_extent);

// The plan both forms of a staged MatMul share.
struct StagedProduct {
  int v = -1;               // the product
  size_t m_axis = 0, n_axis = 0;
  int64_t step = 0, k = 0;  // the reduction step and extent
  std::string acc;          // the root product's accumulators (a product that is not the root uses its buffer)
};

// The shared part of the plan of MatMul n (region extents `max_extent`), with the candidate's step.
StagedProduct staged_product(const LoweringContext& cx, const Node& n, const std::vector<int64_t>& max_extent);
// Where the product's epilogue runs: with `epilogue` (register_epilogue's values), from the
// stage's registers: the product gets no buffer (LoweringContext::in_registers) and the stage
// writes those values (LoweringContext::written); without, the root product's accumulator
// allocation (`max_elems` floats; nothing for another product, whose buffer the driver makes).
void place_epilogue(LoweringContext& cx, Kernel& k, StagedProduct& p, const std::optional<std::vector<int>>& epilogue,
                    int64_t max_elems);
// Where the product's elements are accumulated for the epilogue: its shared buffer or `acc`.
std::string product_accumulators(const LoweringContext& cx, const StagedProduct& p);
// Variable values for the operand reads at row m, column nidx and reduction index kk: batch axes
// at the region's origin.
std::vector<std::string> product_vars(const LoweringContext& cx, const StagedProduct& p, const std::string& m,
                                      const std::string& nidx, const std::string& kk);
// After a barrier, the product leaves the block from its accumulators when it is exported.
void export_product(LoweringContext& cx, Kernel& k, const StagedProduct& p);
// The register epilogue (planner/epilogue.h) of product p: `outputs` (register_epilogue's values)
// at row `row` and columns col .. col + n - 1 of the product's region (expressions relative to
// the region), element(j) naming the local that holds the product at column col + j. Emits into
// the current block: where the row and all n columns lie inside the region, each output's n
// elements computed with the product provided by those locals and stored as one run
// (LoweringContext::store_run); at the region's edge, each element inside it alone.
// The index of the product's region at row `row`, column `col` (expressions relative to the region).
std::vector<std::string> product_index(const LoweringContext& cx, const StagedProduct& p, const std::string& row,
                                       const std::string& col);
// The values of `outputs` at `at` (product_index) with the product there provided by `element`, in
// the compute type; their arithmetic (and the epilogue's other operands' loads) go into the current
// block.
std::vector<std::string> epilogue_values(LoweringContext& cx, const StagedProduct& p, const std::vector<int>& outputs,
                                         const std::vector<std::string>& at, const std::string& element);
// Columns col .. col + n - 1 of the product's row `row` (region-relative index expressions; the
// product at column col + j is `element(j)`) through the epilogue into `outputs`: where all n
// lie inside the region, stored as runs (LoweringContext::store_run), with the group inputs the
// chain reads along the columns (a residual, a bias) loaded as 16-byte vectors where each is
// aligned (LoweringContext::along_reads, when the columns are the innermost axis); element by
// element at the region's edge.
void epilogue_run(LoweringContext& cx, const StagedProduct& p, const std::vector<int>& outputs, const std::string& row,
                  const std::string& col, int64_t n, const std::function<std::string(int64_t)>& element);

std::unique_ptr<AnchorStage> staged_matmul_stage(LoweringContext& cx, Kernel& k, const Node& n,
                                                 const std::vector<int64_t>& max_extent, int64_t max_elems);

}  // namespace fusetune::codegen::stages
