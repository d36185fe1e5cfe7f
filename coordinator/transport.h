// Transport: the coordinator's ROUTER socket, the one road in and out for workers and clients.
//
// Takes a ZeroMQ context, the endpoint to bind (a tcp port 0: one the system chooses, read back as
// endpoint()), the largest message a peer may send (ZMQ_MAXMSGSIZE) and the CURVE keys (proto/
// curve.h: the authenticator is bound before the socket, so a peer is checked from its first
// handshake). Guarantees: while a transaction is held (hold), what is sent waits and leaves only
// with release(), after the commit; drop_held() forgets it and names the peers it was for, who are
// told instead that nothing was kept. A message of another shape than identity + one frame is
// logged and ignored; a message of a role the peer's key lacks (needs_of) is refused, answered and
// counted, never handled. Sending never blocks: a peer that cannot take a message loses it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "coordinator/event_log.h"
#include "fusetune_proto/service.pb.h"
#include "proto/curve.h"

namespace fusetune::coordinator {

// A peer's identity for logs: as it is when printable (workers name themselves), else in hex
// (ZeroMQ's generated identities are binary).
std::string peer_name(const std::string& identity);

// What a message asks of its sender and of the coordinator: hello, heartbeats, results and bye
// are a worker's, submissions, uploads, cancels and exports a client's, status anyone's; hellos,
// results, submissions, uploads and cancels write the database (new work).
struct MessageNeeds {
  unsigned role = wire::kEveryRole;
  bool writes = false;
};
MessageNeeds needs_of(const wire::Envelope& e);

// Where the coordinator's parts send their answers: the transport, or a test's recorder.
class Outbox {
 public:
  virtual ~Outbox() = default;
  virtual void send(const std::string& identity, wire::Envelope e) = 0;
  void send_error(const std::string& identity, const std::string& message);
};

class Transport : public Outbox {
 public:
  Transport(zmq::context_t& context, const std::string& listen, int64_t max_message_bytes,
            const wire::ServerSecurity& security, const EventLog& log);
  ~Transport() override;

  // The endpoint bound: the one asked for, with the port the system chose for port 0.
  const std::string& endpoint() const { return endpoint_; }

  void send(const std::string& identity, wire::Envelope e) override;
  // Sends after this wait for release() (a transaction is open); drop_held() forgets them and
  // returns the peers they were for.
  void hold() { holding_ = true; }
  void release();
  std::set<std::string> drop_held();

  // The sockets to poll: the ROUTER and, with CURVE, the authenticator's.
  void poll_items(std::vector<zmq::pollitem_t>& items);
  // Answers the authenticator's handshakes waiting (CURVE only).
  void authenticate();
  // Hands each message waiting (at most 10,000) to `handle` with the peer's identity, its frame and
  // the roles its key carries (proto/curve.h).
  using Handler = std::function<void(const std::string& identity, const void* data, size_t size, unsigned roles)>;
  void receive_all(const Handler& handle);
  // Whether a peer of `roles` may send `e`; a refusal is logged, answered (a hello with `refused`,
  // so that the worker stops) and counted.
  bool allowed(const std::string& identity, const wire::Envelope& e, unsigned roles);
  uint64_t role_refusals() const { return role_refusals_; }

 private:
  void send_now(const std::string& identity, const std::string& bytes);

  const EventLog& log_;
  std::unique_ptr<wire::Authenticator> auth_;  // before the socket: it must be bound when peers connect
  zmq::socket_t socket_;
  std::string endpoint_;
  bool holding_ = false;
  std::vector<std::pair<std::string, std::string>> held_;  // (peer, frame) to send after the commit
  uint64_t role_refusals_ = 0;
};

}  // namespace fusetune::coordinator
