// Client: one request, one reply, to a coordinator over a DEALER socket (the CLI's submit, status,
// cancel and export). Takes an endpoint and a timeout; request() sends an Envelope and returns the
// coordinator's reply, throwing Error when none arrives in time (naming the endpoint) or when the
// coordinator answers with an error (its message).
#pragma once

#include <string>
#include <zmq.hpp>

#include "fusetune_proto/service.pb.h"
#include "proto/curve.h"

namespace fusetune::coordinator {

class Client {
 public:
  Client(zmq::context_t& context, const std::string& endpoint, int timeout_ms = 30000,
         const wire::ClientSecurity& security = {});
  wire::Envelope request(wire::Envelope e);

 private:
  zmq::socket_t socket_;
  std::string endpoint_;
  int timeout_ms_;
};

}  // namespace fusetune::coordinator
