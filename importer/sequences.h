// Sequences and optionals, held at import: ONNX's sequence ops (SequenceEmpty, SequenceConstruct,
// SequenceInsert, SequenceErase, SequenceAt, SequenceLength, SplitToSequence, ConcatFromSequence,
// SequenceMap) and optional ops (Optional, OptionalHasElement, OptionalGetElement) inside a
// graph, as a TensorFlow TensorArray or a scripted list becomes them.
//
// A sequence is a list of tensor values whose length is known at import; an optional is empty or
// holds one value (a tensor or a sequence). Each stands in the graph as a placeholder value
// (GraphBuilder::sequence / optional; no dtype, never read by a canonical node) that scopes, If
// branches and Loop iterations pass around like any value id. The ops work on the lists:
// SequenceAt, SequenceInsert and SequenceErase need their position known at import (a constant,
// or shape arithmetic; negative counts from the end); SequenceLength and OptionalHasElement are
// constants; SplitToSequence is Slices (equal parts of `split`, or its sizes, or one part per
// index with keepdims 0 squeezing the axis); ConcatFromSequence is a Concat (new_axis 1: of each
// element with a unit axis inserted); SequenceMap imports its body once per element (the
// additional inputs' elements at that index, or the tensors themselves).
//
// Takes such a node, its inputs' value ids and the SubgraphImporter. Guarantees: ONNX's
// semantics; a position from data, one out of range, an element of another type, a tensor where
// a sequence is due (or the reverse) is refused naming the node and the input. As graph inputs
// and outputs sequences and optionals are their tensors (importer/onnx_io.h: S[0], S[1], ...),
// which the importer binds and names.
#pragma once

#include <string>
#include <vector>

#include "importer/control_flow.h"

namespace fusetune::importer {

bool is_sequence_op(const std::string& op_type);

std::vector<int> lower_sequence_op(const onnx::NodeProto& n, const std::vector<int>& ins, const Scope& scope, GraphBuilder& b,
                                   const SubgraphImporter& import);

}  // namespace fusetune::importer
