// Interpreter: runs a whole canonical Graph on the host with the reference kernels.
//
// Takes the graph and one tensor per graph input (in graph-input order, matching dtype and shape);
// returns one tensor per graph output. Intermediates are freed after their last use, so peak memory
// stays near the live set. A guarded node runs only when its guards hold (core/graph.h): the
// branch an If's run-time condition does not pick computes nothing, and its IfMerge reads the
// other. `progress`, when set, is called after each node (done, total).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "core/graph.h"

namespace fusetune::reference {

using Progress = std::function<void(size_t done, size_t total)>;

std::vector<Tensor> run_graph(const Graph& g, std::span<const Tensor> inputs, const Progress& progress = {});

}  // namespace fusetune::reference
