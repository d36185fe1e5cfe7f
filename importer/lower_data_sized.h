// Lowerings of the ONNX ops whose output size depends on the data: NonMaxSuppression (10, 11),
// Unique (11) and NonZero (9, 13) of run-time data, to canonical ops over a padded buffer.
//
// Each output of data-dependent size gets the bound the shapes give (NonMaxSuppression:
// batches x classes x min(max_output_boxes_per_class, boxes) rows; Unique: its input's items;
// NonZero: its input's elements), or the smaller bound the user set for it by its ONNX name
// (ImportOptions::output_bounds, `fusetune compile --bound NAME=N`), holds its data in the first
// entries along that axis, zeros after, and is registered with the builder
// (GraphBuilder::set_extent) with an int64 scalar count of the entries that hold data (a count
// over a user's bound says the bound cut count - bound entries off, which are lost);
// importer/data_extent.h carries that to the graph's outputs. Ranks come
// from pairwise comparisons (O(n^2) elements, computed, never stored as constants), positions
// from exclusive prefix counts (pairwise up to kDirectPrefix flags, in blocks beyond: about
// n^(4/3)), and the outputs are written by one ScatterND each, every entry that is not data sent
// past the bound and sliced off:
// - NonMaxSuppression: the boxes' pairwise suppression (IoU over the threshold, onnxruntime's
//   arithmetic: no suppression for an empty intersection or a box of no area) once per batch;
//   then max_output_boxes_per_class rounds, each selecting per (batch, class) the best box still
//   alive (the highest score, the lowest index among equals; over score_threshold, which NaN
//   never is) and killing those it suppresses. Rows (batch, class, box) in batch, class, then
//   selection order. max_output_boxes_per_class must be known at import (a constant or a value
//   given for an input); the thresholds may be run-time scalars.
// - Unique: its items (the elements, or the slices along `axis`) compared pairwise (equal: all
//   elements equal, NaN equal to NaN when flattened; lexicographic order, NaN last); each
//   item's first occurrence, count, and position (among the distinct items sorted, or by first
//   occurrence with sorted = 0). Y, indices and counts are padded; inverse_indices is not.
// - NonZero of a value not constant: the elements' coordinates, [rank, bound], padded on axis 1.
//   (A constant input folds to its exact result in importer/lower.cpp.)
//
// Takes a NodeLowering of such a node. Guarantees: onnxruntime's outputs in the first `count`
// entries; a size whose pairwise comparisons would exceed kMaxPairwise elements (NMS's boxes,
// Unique's items), a NonZero of more than kMaxPrefixCount elements, or more than kMaxSelections
// rounds, is refused naming the input and the size.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

inline constexpr int64_t kMaxPairwise = int64_t{1} << 26;
inline constexpr int64_t kDirectPrefix = 2048;              // prefix counts by one pairwise comparison up to here
inline constexpr int64_t kMaxPrefixCount = int64_t{1} << 24;  // NonZero's elements (blocked prefix counts)
inline constexpr int64_t kMaxSelections = 1024;

void non_max_suppression(NodeLowering& L);
void unique(NodeLowering& L);
void non_zero_padded(NodeLowering& L);

}  // namespace fusetune::importer
