#include "planner/verify_plan.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace fusetune::planner {

namespace {

// The groups checked, in plan order: a fusion's, or a plan's.
using Groups = std::vector<const FusionGroup*>;

std::string group_name(const Groups& groups, size_t k) {
  return "group " + std::to_string(k) + " (" + groups[k]->pattern + ")";
}

std::string value_name(const Graph& g, int v) { return "value " + std::to_string(v) + " '" + g.value(v).name + "'"; }

// The group of each node; every node in exactly one group, each group's nodes in graph order.
std::vector<int> partition(const Graph& g, const Groups& groups) {
  const size_t n_nodes = g.nodes().size();
  std::vector<int> group_of_node(n_nodes, -1);
  for (size_t k = 0; k < groups.size(); ++k) {
    const std::vector<int>& nodes = groups[k]->nodes;
    if (nodes.empty()) fail("plan: partition: ", group_name(groups, k), " has no node");
    if (!std::is_sorted(nodes.begin(), nodes.end())) {
      fail("plan: partition: the nodes of ", group_name(groups, k), " are not in graph order");
    }
    for (int n : nodes) {
      if (n < 0 || static_cast<size_t>(n) >= n_nodes) {
        fail("plan: partition: ", group_name(groups, k), " names node ", n, ", not a node of the graph");
      }
      if (const int other = group_of_node[static_cast<size_t>(n)]; other >= 0) {
        fail("plan: partition: node ", n, " (", g.nodes()[static_cast<size_t>(n)].op, ") is in ",
             group_name(groups, static_cast<size_t>(other)), " and in ", group_name(groups, k));
      }
      group_of_node[static_cast<size_t>(n)] = static_cast<int>(k);
    }
  }
  for (size_t n = 0; n < n_nodes; ++n) {
    if (group_of_node[n] < 0) {
      fail("plan: partition: node ", n, " (", g.nodes()[n].op, " '", g.nodes()[n].name, "') is in no group");
    }
  }
  return group_of_node;
}

// Partition, boundary and order of `groups` (their launch ids 0 .. launches - 1).
void verify_groups(const Graph& g, const Groups& groups, int n_launches) {
  const std::vector<int> group_of_node = partition(g, groups);
  const size_t n_nodes = g.nodes().size(), n_groups = groups.size();
  std::vector<int> group_of_value(g.values().size(), -1);  // -1: a graph input or a constant
  for (size_t n = 0; n < n_nodes; ++n) {
    for (int o : g.nodes()[n].outputs) {
      if (o != kNoValue) group_of_value[static_cast<size_t>(o)] = group_of_node[n];
    }
  }
  std::set<int> launches;
  std::map<int, const FusionGroup*> first_of_launch;
  for (const FusionGroup* fg : groups) {
    launches.insert(fg->launch);
    const FusionGroup* first = first_of_launch.emplace(fg->launch, fg).first->second;
    if (first->guards != fg->guards) {
      fail("plan: guards: launch ", fg->launch, " packs ", fg->pattern, " and ", first->pattern, ", which run under other guards");
    }
  }
  if (static_cast<int>(launches.size()) != n_launches ||
      (!launches.empty() && (*launches.begin() != 0 || *launches.rbegin() != n_launches - 1))) {
    fail("plan: order: launch ids are not 0 .. ", n_launches - 1, " (", launches.size(), " distinct ids from ",
         launches.empty() ? 0 : *launches.begin(), ")");
  }
  // What other groups and the graph's outputs read of each group.
  std::vector<std::set<int>> read_outside(n_groups);
  for (size_t n = 0; n < n_nodes; ++n) {
    for (int in : reads(g.nodes()[n])) {  // a guard's condition too
      const int owner = group_of_value[static_cast<size_t>(in)];
      if (owner >= 0 && owner != group_of_node[n]) read_outside[static_cast<size_t>(owner)].insert(in);
    }
  }
  for (int o : g.outputs()) {
    if (const int owner = group_of_value[static_cast<size_t>(o)]; owner >= 0) read_outside[static_cast<size_t>(owner)].insert(o);
  }
  for (size_t k = 0; k < n_groups; ++k) {
    const FusionGroup& fg = *groups[k];
    // boundary
    std::set<int> reads;
    for (int n : fg.nodes) {
      for (int in : g.nodes()[static_cast<size_t>(n)].inputs) {
        if (in != kNoValue && group_of_value[static_cast<size_t>(in)] != static_cast<int>(k)) reads.insert(in);
      }
    }
    const std::set<int> inputs(fg.inputs.begin(), fg.inputs.end()), outputs(fg.outputs.begin(), fg.outputs.end());
    for (int v : reads) {
      if (!inputs.count(v)) {
        fail("plan: boundary: ", group_name(groups, k), " reads ", value_name(g, v), " from outside without it among its inputs");
      }
    }
    for (int v : inputs) {
      if (!reads.count(v)) {
        fail("plan: boundary: ", group_name(groups, k), " lists ", value_name(g, v),
             " as an input that none of its nodes reads from outside");
      }
    }
    for (int v : read_outside[k]) {
      if (!outputs.count(v)) {
        fail("plan: boundary: ", value_name(g, v), " of ", group_name(groups, k),
             " is read outside it but is not among its outputs");
      }
    }
    for (int v : outputs) {
      if (!read_outside[k].count(v)) {
        fail("plan: boundary: ", group_name(groups, k), " exports ", value_name(g, v), ", which nothing outside it reads");
      }
    }
    // guards: one set for the group, its conditions written before it runs
    for (int n : fg.nodes) {
      if (g.nodes()[static_cast<size_t>(n)].guards != fg.guards) {
        fail("plan: guards: ", group_name(groups, k), " holds node '", g.nodes()[static_cast<size_t>(n)].name, "' of other guards");
      }
    }
    std::set<int> before = reads;
    for (const Guard& gd : fg.guards) {
      if (group_of_value[static_cast<size_t>(gd.cond)] != static_cast<int>(k)) before.insert(gd.cond);
    }
    // order
    for (int v : before) {
      const int owner = group_of_value[static_cast<size_t>(v)];
      if (owner < 0) continue;
      const FusionGroup& writer = *groups[static_cast<size_t>(owner)];
      if (static_cast<size_t>(owner) > k) {
        fail("plan: order: ", group_name(groups, k), " reads ", value_name(g, v), " of ",
             group_name(groups, static_cast<size_t>(owner)), ", which comes after it");
      }
      if (writer.launch >= fg.launch) {
        fail("plan: order: ", group_name(groups, k), " (launch ", fg.launch, ") reads ", value_name(g, v), " of ",
             group_name(groups, static_cast<size_t>(owner)), " (launch ", writer.launch, "), which does not run before it");
      }
    }
  }
}

}  // namespace

void verify_fusion(const Graph& g, const FusionPlan& fusion) {
  Groups groups;
  for (const FusionGroup& fg : fusion.groups) groups.push_back(&fg);
  verify_groups(g, groups, fusion.launches());
}

void verify_plan(const Graph& g, const ModelPlan& plan) {
  Groups groups;
  for (const GroupPlan& gp : plan.groups) groups.push_back(&gp.group);
  verify_groups(g, groups, plan.launches);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const GroupPlan& gp = plan.groups[k];
    if (gp.candidates.empty()) fail("plan: choice: ", group_name(groups, k), " has no candidate");
    if (gp.chosen >= gp.candidates.size()) {
      fail("plan: choice: ", group_name(groups, k), " chose candidate ", gp.chosen, " of ", gp.candidates.size());
    }
    const Candidate& chosen = gp.candidates[gp.chosen];
    if (!chosen.cost.valid) {
      fail("plan: choice: ", group_name(groups, k), " chose ", chosen.config.str(), ", which is not valid: ", chosen.cost.reject);
    }
  }
}

}  // namespace fusetune::planner
