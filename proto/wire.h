// Wire: the tuning protocol's version, framing and conversions (proto/service.proto).
//
// Takes Envelopes and canonical graphs; guarantees: encode() produces one frame stamped with
// kProtocolVersion; decode() accepts any bytes and either returns a well-formed Envelope or throws
// Error saying what was wrong (not a protobuf message, no body, a version outside what this build
// speaks), so a daemon can log and ignore garbage. Sub-graph conversion is lossless for canonical
// graphs: to_subgraph(group) keeps the group's nodes, its external inputs (constants with their
// data) and its exported values, and from_subgraph rebuilds a Graph that validates, with the
// values renumbered in the message's order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "core/graph.h"
#include "fusetune_proto/service.pb.h"
#include "planner/fusion.h"

namespace fusetune::wire {

// Bumped whenever a message changes meaning; kMinProtocolVersion is the oldest peer still served.
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint32_t kMinProtocolVersion = 1;

std::string encode(Envelope e);
Envelope decode(const void* data, size_t size);
// The name of the envelope's body ("hello", "task", ...), for logs.
std::string body_name(const Envelope& e);

// zmq::poll that treats a signal's interruption (EINTR: a SIGTERM arriving) as "nothing yet",
// so the caller's loop sees its stop flag instead of an exception.
void poll(zmq::pollitem_t* items, size_t count, int timeout_ms);

// A fusion group of `g`, as planner::describe_group leaves it, as a standalone sub-graph.
Subgraph to_subgraph(const Graph& g, const planner::FusionGroup& group);
Graph from_subgraph(const Subgraph& s);

}  // namespace fusetune::wire
