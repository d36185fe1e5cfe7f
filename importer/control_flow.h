// Control flow: ONNX's If, Loop and Scan inlined into the graph being imported, their subgraphs
// imported in place (the importer's node loop, through SubgraphImporter, with the enclosing
// scopes' names visible).
//   - If: a condition known at import (a constant, shape arithmetic, or a graph input whose value
//     the import was given: ImportOptions::input_values) picks the branch imported; the other is
//     never read. A condition known only at run time (one bool) imports both branches, the nodes
//     of each guarded by the condition (core/graph.h: the runtime runs the branch it picks), and
//     each output becomes an IfMerge of the two branch results, which must have one dtype and
//     shape (not a sequence, an optional or a value of data-dependent size).
//   - Loop: the trip count and the condition must be known at import before each iteration (a
//     body whose condition output is computed from data cannot be unrolled); the body is imported
//     once per iteration (iteration number a constant), the loop-carried values threaded through,
//     each scan output's per-iteration values stacked on a new first axis (Reshape, Concat).
//   - Scan (opset 9 on): the body is imported once per element of the scan axis (the scan inputs'
//     slices taken by a Gather at that index, last first for a reverse direction), the states
//     threaded through, the scan outputs stacked along their axes (reversed for a reverse
//     direction).
// Unrolling bounds the work: at most kMaxIterations iterations of one node.
//
// Takes a control-flow node, its inputs' value ids and the scope its subgraphs see. Guarantees:
// ONNX's semantics for those cases; what cannot be decided at import (a Loop's trip count or
// condition from data, a Scan of opset 8) and an If decided at run time whose branches give
// different types are refused naming the node and the input or output.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "fusetune_proto/onnx_subset.pb.h"
#include "importer/builder.h"

namespace fusetune::importer {

using Scope = std::unordered_map<std::string, int>;

// Imports `body` with the names of `outer` visible and its inputs bound to `inputs` (in order);
// returns its outputs' value ids. `prefix` is prepended to the names of the nodes and values the
// copy makes.
using SubgraphImporter = std::function<std::vector<int>(const onnx::GraphProto& body, const Scope& outer,
                                                        const std::vector<int>& inputs, const std::string& prefix)>;

inline constexpr int64_t kMaxIterations = 4096;

bool is_control_flow(const std::string& op_type);

// Attribute `name` of node n as an integer, or the fallback when the node does not set it.
int64_t int_attr(const onnx::NodeProto& n, const std::string& name, int64_t fallback);
// The attributes an inlined op defines: any other one is refused, as lowering refuses one.
void check_attributes(const onnx::NodeProto& n, const std::set<std::string>& known);
// A scalar node n needs at import: its input k (value id ins[k]), known (a constant, or computed
// from inputs whose values were given), one element; an Error names the input and `what` else.
int64_t known_scalar(const onnx::NodeProto& n, const GraphBuilder& b, const std::vector<int>& ins, size_t k, const char* what);

// The names the node's subgraphs read from enclosing scopes (what the node depends on besides its
// inputs), added to `names`.
void outer_names(const onnx::NodeProto& n, std::set<std::string>& names);

// Inlines control-flow node n (opset `opset`, its inputs' value ids `ins`, kNoValue where absent)
// and returns the value ids of its outputs.
std::vector<int> lower_control_flow(const onnx::NodeProto& n, int64_t opset, const std::vector<int>& ins, const Scope& scope,
                                    GraphBuilder& b, const SubgraphImporter& import);

}  // namespace fusetune::importer
