// Verification of a generated kernel against the reference interpreter, the differential check
// every candidate passes before it is timed.
//
// Takes a graph, a group, its lowered kernel, and a backend with the kernel's module loaded.
// Draws fresh random inputs for the group's non-constant inputs (normal floats; integer inputs in
// the range their consumers accept: Gather indices within the axis, including negative ones),
// binds constants as they are, poisons the output buffers (all bytes 0xFF: NaN for floats),
// launches, and compares every output with the reference kernels run node by node on the same
// inputs, under the per-dtype tolerance of reference/compare.h (an output computed through a
// narrower float type, such as a float16 product widened by a Cast, under that type's: the two
// sides round it from sums in different orders). With redzones, every buffer sits
// inside a larger allocation whose margins hold a known byte pattern that must survive the
// launch. On the host backend the launch runs under the SIMT executor's checks (race, barrier,
// bounds, uninitialised shared memory): a finding fails the verification with check_failed set.
// Guarantees: a kernel that leaves any output element unwritten, computes it wrongly beyond the
// bound, (with redzones) writes outside its buffers, or fails a check, fails.
// With VerifyOptions::sample_blocks the host runs only that many blocks of a larger grid
// (Module::launch_sample: the first, the last, others drawn from the seed): the checks cover what
// those blocks do, and the output elements they wrote (those no longer holding the poison; for
// integer outputs, whose values may be all ones, the sample runs a second time over zeroed
// outputs, and an element either run changed counts as written) are compared; elements of other blocks are not, so coverage of the whole output is not proven. A
// sample that wrote no output element fails. The result says how many blocks of the grid ran.
// With VerifyOptions::tf32 (a kernel that rounds float32 MatMul operands to TF32, the precision
// policy `--precision tf32`: tf32_kernel says which) float32 outputs compare under
// reference::tf32_tolerance.
#pragma once

#include <map>
#include <random>
#include <string>

#include "backend/backend.h"
#include "codegen/lower_group.h"
#include "planner/fusion.h"
#include "reference/compare.h"

namespace fusetune::backend {

struct VerifyOptions {
  size_t redzone_bytes = 0;   // margins around every buffer that must survive the launch
  int64_t sample_blocks = 0;  // run at most this many blocks of the grid (host); 0: all
  uint64_t seed = 0;          // draws the sampled blocks
  bool tf32 = false;          // the kernel computes float32 MatMuls on TF32 tensor cores
};

// True if candidate `config` (planner::TileConfig::str()) of a group of graph g runs a float32
// MatMul on tensor cores, as TF32: the config asks for them (`mma`) and the group has such a
// MatMul, or it is a library call in TF32 mode (cuBLASLt's or cuDNN's).
bool tf32_kernel(const Graph& g, const planner::FusionGroup& group, const std::string& config);

// The tolerance a kernel's output v is compared under, against the reference's `values` of the
// group whose inputs are `inputs`: v's dtype's (float32: looser, against the reference's double
// accumulation; TF32's under `tf32`), loosened to every narrower float's it is computed through,
// and, behind a Softmax over 16-bit scores, by 3 u max|x| of its scale (u the scores' unit
// roundoff, x the scores that weigh: within 20 of their row's greatest): the reference rounds the
// scores at each op where a fused kernel keeps them in float, and exp makes that a relative error
// of the weights.
reference::Tolerance output_tolerance(const Graph& g, int v, const std::map<int, Tensor>& values,
                                      const std::vector<int>& inputs, bool tf32);

struct VerifyResult {
  bool ok = true;
  Coverage coverage;          // the blocks run, of the grid (whole unless sampled)
  int64_t compared = 0;       // output elements compared with the reference
  bool check_failed = false;  // the host executor's checks found something (detail says what)
  std::string detail;  // first mismatch or finding, for a failure message
  double max_abs = 0;
};

// What a kernel is compared against: the group's inputs `inputs` drawn from `rng` (constants as
// they are) and the reference's value of everything the group computes, by graph value. The
// candidates of one group share it (measuring and dry runs compute it once per task).
struct Reference {
  std::vector<int> inputs;
  std::map<int, Tensor> values;
};
Reference reference_values(const Graph& g, const planner::FusionGroup& group, const std::vector<int>& inputs,
                           std::mt19937& rng);

// The kernel `kernel` of `module` with parameters bound to graph values `inputs` then `outputs`,
// against `reference` (whose inputs must be `inputs`). `in_place` (LoweredKernel::in_place): per
// output, the index of the input whose buffer it is bound to (-1, or empty: a poisoned buffer of
// its own); such a kernel runs its whole grid (an element the sample's blocks did not update
// cannot be told from one they did), and the input's buffer is compared as that output.
VerifyResult verify_kernel(const Graph& g, const std::string& kernel, const std::vector<int>& inputs,
                           const std::vector<int>& outputs, Backend& backend, Module& module, const Reference& reference,
                           const VerifyOptions& options = {}, const std::vector<int>& in_place = {});
// The same with a reference drawn from `rng`.
inline VerifyResult verify_kernel(const Graph& g, const planner::FusionGroup& group, const std::string& kernel,
                                  const std::vector<int>& inputs, const std::vector<int>& outputs, Backend& backend,
                                  Module& module, std::mt19937& rng, const VerifyOptions& options = {}) {
  return verify_kernel(g, kernel, inputs, outputs, backend, module, reference_values(g, group, inputs, rng), options);
}
inline VerifyResult verify_kernel(const Graph& g, const planner::FusionGroup& group, const codegen::LoweredKernel& lk,
                                  Backend& backend, Module& module, std::mt19937& rng, const VerifyOptions& options = {}) {
  return verify_kernel(g, lk.kernel.name, lk.inputs, lk.outputs, backend, module, reference_values(g, group, lk.inputs, rng), options,
                       lk.in_place);
}

// Random data: floats normal (0, 1), integers uniform in [lo, hi].
Tensor random_tensor(DType dtype, const Shape& shape, int64_t lo, int64_t hi, std::mt19937& rng);

// Random data for a group input, in the range its consumers in the group accept (an integer
// input from which the group computes indices: zeros).
Tensor random_group_input(const Graph& g, const planner::FusionGroup& group, int value, std::mt19937& rng);

}  // namespace fusetune::backend
