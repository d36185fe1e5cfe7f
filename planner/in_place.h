// In-place updates: a ScatterND whose data nothing reads afterwards writes its update slices into
// its data's buffer, instead of copying the data whole (the buffer reuse by which TensorSSA turns
// a functional update back into an imperative one). A Loop that carries a tensor and updates a
// slice of it each iteration (ScatterND, ScatterElements, TensorScatter and slice assignment all
// lower to ScatterND; importer/control_flow.h unrolls the Loop) then moves the slices it writes,
// not the whole tensor per iteration.
//
// Takes a canonical graph and fusion groups. Guarantees (InPlaceUpdates::eligible): a group may
// update in place only if it is one ScatterND, under no guard, whose data is computed by another
// group (not a graph input, a constant or a graph output: those buffers belong to the caller or
// the plan) and read by it only as its data (not also as its updates), whose every other reader is an ancestor of the ScatterND (so it has run before the
// ScatterND writes), and whose indices are a constant of tuples inside data's extents, no two
// addressing the same slice (so one thread writes each element, without atomics, and no write
// lands outside the buffer). The group's signature (group_signature) marks the in-place form, so
// that groups of one signature share candidates and measurements only when they agree on it.
// The in-place candidates (TileConfig::in_place) cost the indices and updates read and the
// slices written (read too under a reduction); codegen/in_place_scatter.h lowers them, and
// compiler/compile_bundle.cpp gives the output its data's buffer.
#pragma once

#include <vector>

#include "core/graph.h"
#include "core/signature.h"
#include "planner/device.h"
#include "planner/fusion.h"
#include "planner/tiling.h"

namespace fusetune::planner {

class InPlaceUpdates {
 public:
  explicit InPlaceUpdates(const Graph& g);
  bool eligible(const FusionGroup& group) const;

 private:
  // True if node `a` is an ancestor of node `n` (a path of values from a's outputs to n's reads).
  bool ancestor(int a, int n) const;

  const Graph& g_;
  std::vector<int> producer_;                // per value: its producer node, -1 for inputs and constants
  std::vector<std::vector<int>> consumers_;  // per value: the nodes reading it
  std::vector<bool> graph_input_, graph_output_;
};

// subgraph_signature of the group's nodes; with `in_place`, of that form marked as updating in place.
Signature group_signature(const Graph& g, const FusionGroup& group, bool in_place);

// The in-place candidates of an eligible group: 32 to 256 threads, 1 to 8 update elements a
// thread, cost modeled as above (valid, ranked by modeled time).
std::vector<Candidate> in_place_candidates(const Graph& g, const FusionGroup& group, const Device& d,
                                           const TilingOptions& opt);

// Merges `more` into `ranked` (best first by modeled time, as tile_candidates returns them),
// keeping at most opt.top_k generated candidates (library calls stay, whatever their rank).
void merge_candidates(std::vector<Candidate>& ranked, std::vector<Candidate> more, int top_k);

}  // namespace fusetune::planner
