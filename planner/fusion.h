// Fusion: partitions a canonical graph into fusion groups, each of which becomes one kernel
// launch (or one packed launch of several independent groups).
//
// Takes a Graph (constants included) and options. Guarantees: every node is in exactly one group;
// every group has one sink (a node whose result no other member reads: the node its tiles are
// computed for); the groups, ordered as returned, form a DAG (no group reads a value a later
// group produces); no node is duplicated (no recomputation); a group holds at most one anchor of
// each kind the rules below allow. The rules, applied in this order (FusionStitching/Welder-style
// exploration, greedy, deterministic):
//   1. epilogue: a light op (element-wise, broadcast, data movement) joins its producer's group
//      when it is that value's only consumer (bias, activation, residual, scale, transposes),
//      except an Expand or Tile that repeats the value (grouped-query attention's K and V) or a
//      Gather that grows it (a convolution's patches, each element read by up to a window's
//      taps): the repeat stays with its consumers, so the value is written (or computed) once and
//      read through it;
//   2. prologue: a light group whose result has a single consumer node joins that consumer's group
//      (element-wise chains into reductions and contractions, transposes into index maps); again
//      after stitching, where a light group feeds only a stitched group (Swin's relative position
//      bias, gathered and scaled, into its window attention: the merge a scores group alone lost);
//   3. stitching: a reduction joins a reduction or contraction group that produces its input when
//      it reduces the innermost axis of extent <= max_row (layer norm after a projection), and a
//      contraction joins the reduction group that produces its left operand (softmax followed by
//      MatMul: attention; a norm and the projection after it) under the same bound or, with a
//      cost function, at any row length (a decode step's RMSNorm over 2,048 features: one row on
//      chip, the merge kept where it does not lose); before those, a softmax over the last axis whose
//      probabilities (through Casts) are the left operand of a MatMul joins its scores' group and
//      that MatMul's at once when the three form an attention core (planner/attention.h: attention
//      at any length, tiled by flash attention) and, with a cost function, the three cost less
//      together than apart; beyond the bound only so (a prefill of 512 keys whose scores and
//      softmax alone, whole rows on chip, model slower than apart becomes one flash kernel, not
//      three launches with the scores in DRAM); then, with a cost function
//      that keeps the merge, back-to-back products: a MatMul whose left operand is another
//      product's rows through light ops (a GRU step's reset gate times h, a narrow MLP) joins that
//      product's group when the rows are at most max_row long and neither group holds a reduction
//      (a block computes the first product's rows whole, then the second); before those, row
//      epilogues, with a cost function that keeps the merge: a light group whose results have the
//      shape of the rows a row reduction of another group reduces (at most max_row long) joins
//      that group although the reduction's result has readers elsewhere too, where it leaves as a
//      side output (a NonMaxSuppression round: its ArgMax and the marking-off of what the pick
//      suppresses in one kernel), and row chains: a group of row reductions reading the rows
//      (same shape, at most max_row long) another group's row reductions produced joins it, up to
//      8 reductions a group (a block runs the next rounds after it; past that the kernels'
//      compile time grows faster than launches are saved: 48 took 233 s to compile and verify
//      tf_detector_tail, 8 take 13 s);
//   4. states: after the rules above, a light group that reads a light producer's value element
//      for element at its shape joins it while later groups read that value too (the value
//      leaves as a side output: a recurrent cell's new state), if the cost function keeps the
//      merge, and rule 1 runs again; every later merge must keep such a state read element for
//      element, so that the group's tiles compute all of it;
//   5. packing: independent groups that read the same input (sibling projections, the consumers
//      of one product's column slices) or are small are packed into one launch.
// Nodes merge, and groups pack, only under the same guards (core/graph.h): a launch runs one
// branch of an If decided at run time, or none. A group depends on the groups producing its
// guards' conditions as on those producing its inputs.
// Each merge is refused when it would create a cycle between groups, when it would put a
// ScatterND with a node computing its indices or updates (the scatter reads them from memory),
// and, when a cost function is given, when the merged group would cost more than its parts.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/graph.h"

namespace fusetune::planner {

// Modeled or measured cost of running a set of nodes as one kernel (microseconds).
using GroupCost = std::function<double(const std::vector<int>& nodes)>;

struct FusionOptions {
  bool epilogue = true;
  bool prologue = true;
  bool stitch = true;
  bool pack = true;
  int64_t max_row = 1024;            // longest reduced axis a block keeps on chip
  int64_t small_group_elements = 4096;  // groups this small may be packed together
  // When set, prologue and stitching merges are kept only if the merged group costs no more than
  // its two parts (Welder's rule: a fusion must not lose); otherwise they follow the rules alone.
  GroupCost cost;
};

struct FusionGroup {
  std::vector<int> nodes;    // node ids in graph (topological) order
  std::vector<int> inputs;   // values read from outside the group (graph inputs, constants, other groups)
  std::vector<int> outputs;  // values used outside the group or graph outputs
  std::string pattern;       // e.g. "MatMul+Add+Erf", named after the anchor and the ops around it
  int launch = 0;            // groups with the same launch id run in one packed launch
  std::vector<Guard> guards;  // its nodes' (all alike): the group runs when they hold
};

// What a group reads before it runs: its inputs, then its guards' conditions.
std::vector<int> group_reads(const FusionGroup& group);

struct FusionPlan {
  std::vector<FusionGroup> groups;
  int launches() const;
};

FusionPlan fuse(const Graph& g, const FusionOptions& options = {});

// One group per node: the unfused baseline.
FusionPlan unfused(const Graph& g);

// What selection knows of a group's chosen candidate when it packs launches: a library call
// shares no launch (solo); a kernel whose blocks cooperate (split-K) runs only at its own thread
// count, so a launch holding one holds groups of that count alone (a packed launch runs at its
// parts' greatest: compiler/compile_bundle.h).
struct PackTerms {
  bool solo = false;
  bool own_threads = false;
  int threads = 0;  // the candidate's
};

// Rule 5 on its own: assigns launch ids to an ordered list of groups, packing independent siblings
// and small groups under `terms` (per group; empty: none). Used by fuse(), and again after
// selection has split some groups. Launch ids are numbered so that running launches in increasing
// id order runs every group after the groups it reads from (by dependency depth, then first
// appearance).
void pack_launches(const Graph& g, FusionPlan& plan, const FusionOptions& options, const std::vector<PackTerms>& terms = {});

// Fills inputs/outputs/pattern of a group from its nodes.
void describe_group(const Graph& g, FusionGroup& group);

// The group of every node of `g`, described: a group's standalone sub-graph (proto/wire.h
// from_subgraph) as the job planner lowers its candidates.
FusionGroup whole_graph_group(const Graph& g);

}  // namespace fusetune::planner
