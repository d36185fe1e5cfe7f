// The plan verifier: the invariants of a fusion (planner/fusion.h's guarantees) and of a chosen
// plan (select.h's), checked on every plan plan_model returns (and on the fusion with the
// compiler's --verify-each), so that a planning bug stops there, naming the rule it broke, rather
// than showing later as a wrong or racing kernel.
//
// Takes a canonical graph and a fusion or plan of it. verify_fusion checks partition, boundary
// and order; verify_plan those and choice:
//   partition: every node of the graph is in exactly one group; a group's nodes are in graph
//     order and there is at least one;
//   boundary: a group's inputs are exactly the values its nodes read from outside it, and its
//     outputs exactly the values it computes that another group reads (as an input or as a
//     guard's condition) or the graph returns;
//   guards: every node of a group has the group's guards (core/graph.h), and groups packed into
//     one launch have the same;
//   order: a group reads the values (inputs, and its guards' conditions) of other groups only from groups before it in the plan and
//     from launches with a smaller id (launches run in id order; groups packed into one launch
//     read nothing of each other), and the launch ids are 0 .. launches - 1;
//   choice: each group has candidates and its chosen one exists and is valid.
// Throws Error naming the rule, the group (its index and pattern) and the node or value at fault;
// returns when every rule holds.
#pragma once

#include "core/graph.h"
#include "planner/select.h"

namespace fusetune::planner {

void verify_fusion(const Graph& g, const FusionPlan& fusion);
void verify_plan(const Graph& g, const ModelPlan& plan);

}  // namespace fusetune::planner
