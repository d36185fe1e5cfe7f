// Signature: a canonical, platform-independent digest of a sub-graph, the search database's key.
//
// Takes a graph and a set of its nodes. Guarantees: the digest depends only on the ops, their
// attributes, dtypes and static shapes, the edges between the nodes and the boundary tensors
// (graph inputs and constants as dtype+shape, except single-element constants, which kernels
// may bake in, by value); never on node or tensor names, nor on the order in
// which the nodes are stored. Nodes are put in a canonical topological order (ready nodes ordered
// by a structural hash of what they compute and how their results are used); boundary tensors are
// numbered by first use in that order. The canonical form is text (see signature.cpp), returned
// with its SHA-256 so the database can keep both. kSignatureVersion changes whenever the form
// does; tests pin a golden digest so that a change is seen.
#pragma once

#include <span>
#include <string>

#include "core/graph.h"

namespace fusetune {

inline constexpr int kSignatureVersion = 1;
inline constexpr int64_t kInlineConstantElements = 1;

struct Signature {
  std::string digest;          // "v1:" + 64 hex digits
  std::string canonical_form;  // the text that was hashed
};

Signature subgraph_signature(const Graph& g, std::span<const int> node_ids);
Signature node_signature(const Graph& g, int node_id);
Signature graph_signature(const Graph& g);

}  // namespace fusetune
