// Wire: the tuning protocol's version, framing and conversions (proto/service.proto).
//
// Takes Envelopes and canonical graphs; guarantees: encode() produces one frame stamped with
// kProtocolVersion; decode() accepts any bytes and either returns a well-formed Envelope or throws
// Error saying what was wrong (not a protobuf message, no body, a version outside what this build
// speaks), so a daemon can log and ignore garbage. Every `string` field encode() writes is valid
// UTF-8 (make_strings_valid): proto3 refuses to parse a message whose string field is not, so a
// peer's text quoted into one (a node name in an error) would otherwise make the whole message
// unreadable to its receiver. Sub-graph conversion keeps what a kernel
// depends on: to_subgraph(group) keeps the group's nodes, its external inputs and its exported
// values; constants travel with their data, except weights (float constants of more than one
// element, every value finite and below kMaxDrawnMagnitude, more than kMaskValues distinct
// values): their values do not change what a
// kernel does (they are parameters of the signature, core/signature.h), so only their mean,
// standard deviation and a seed travel, and from_subgraph draws them (weight_draws/draw_weight:
// the same values on every receiver, for the kernel and the reference alike). Indices, shape data,
// masks of other types and the scalars folded into the code travel as they are. from_subgraph
// rebuilds a Graph that validates, with the values renumbered in the message's order; a task
// therefore costs bytes for its structure, not for its group's weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "core/graph.h"
#include "fusetune_proto/service.pb.h"
#include "planner/fusion.h"

namespace fusetune::wire {

// Bumped whenever a message changes meaning; kMinProtocolVersion is the oldest peer still served.
// 2: weights are drawn by the receiver (Generated); 3: a model's files may travel in Upload pieces.
inline constexpr uint32_t kProtocolVersion = 3;
inline constexpr uint32_t kMinProtocolVersion = 2;

// The largest piece of a file an Upload carries; the client sends pieces of kUploadChunk (BERT-base's
// 440 MB, bench/submit_cost.sh: 1.0 s in pieces of 4 MB, 1.6 s of 16 MB, 1.4 s of 1 MB).
inline constexpr size_t kMaxUploadChunk = size_t{64} << 20;
inline constexpr size_t kUploadChunk = size_t{4} << 20;

// The most a task's reference values may take the measuring child (Policy.reference_timeout_ms,
// or 5 minutes where it is 0): the worker's bound on them, and part of a lease's deadline.
inline constexpr int kReferenceTimeoutMs = 300000;
inline int reference_timeout_ms(const Policy& p) {
  return p.reference_timeout_ms() > 0 ? p.reference_timeout_ms() : kReferenceTimeoutMs;
}

std::string encode(Envelope e);
// Every `string` field of `m` and of the messages it holds, made valid UTF-8 by valid_utf8
// (core/inert_text.h); `bytes` fields stay as they are.
void make_strings_valid(google::protobuf::Message& m);
Envelope decode(const void* data, size_t size);
// The name of the envelope's body ("hello", "task", ...), for logs.
std::string body_name(const Envelope& e);

// zmq::poll that treats a signal's interruption (EINTR: a SIGTERM arriving) as "nothing yet",
// so the caller's loop sees its stop flag instead of an exception.
void poll(zmq::pollitem_t* items, size_t count, int timeout_ms);

// Weights with a value of this magnitude or more (a float -inf mask written as -3.4e38, a float16
// mask's -65504: sentinels) travel as they are.
inline constexpr double kMaxDrawnMagnitude = 65504;  // float16's largest finite value
// So do float constants of at most this many distinct values: additive masks (0 and -10000, as
// LLaMA's float16 export writes its causal mask), fills. Drawn, a mask becomes uniform noise of
// +-10,000, on which no kernel that adds in float matches the reference's float16 additions.
inline constexpr size_t kMaskValues = 16;

// The draws standing for weight `t` (seeded by `seed`), or nullopt when its data must travel.
std::optional<Generated> weight_draws(const Tensor& t, uint64_t seed);
// The weight `name` drawn for `gen`: uniform over mean ± sqrt(3) stddev, the same for every
// receiver; impossible bounds throw Error naming it.
Tensor draw_weight(const std::string& name, DType dtype, const Shape& shape, const Generated& gen);

// A fusion group of `g`, as planner::describe_group leaves it, as a standalone sub-graph.
Subgraph to_subgraph(const Graph& g, const planner::FusionGroup& group);
Graph from_subgraph(const Subgraph& s);

}  // namespace fusetune::wire
