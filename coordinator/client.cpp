#include "coordinator/client.h"

#include "core/error.h"
#include "proto/wire.h"

namespace fusetune::coordinator {

Client::Client(zmq::context_t& context, const std::string& endpoint, int timeout_ms,
               const wire::ClientSecurity& security)
    : socket_(context, zmq::socket_type::dealer), endpoint_(endpoint), timeout_ms_(timeout_ms) {
  socket_.set(zmq::sockopt::linger, 0);
  wire::apply_client_security(socket_, security);
  socket_.connect(endpoint);
}

wire::Envelope Client::request(wire::Envelope e) {
  const std::string bytes = wire::encode(std::move(e));
  socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
  zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
  wire::poll(&item, 1, timeout_ms_);
  zmq::message_t reply;
  check((item.revents & ZMQ_POLLIN) && socket_.recv(reply, zmq::recv_flags::dontwait), "no reply from the coordinator at ",
        endpoint_, " within ", timeout_ms_ / 1000.0,
        " s (is it running? with CURVE keys, are --coordinator-key and --key right?)");
  wire::Envelope r = wire::decode(reply.data(), reply.size());
  check(!r.has_error(), "coordinator: ", r.error().message());
  return r;
}

}  // namespace fusetune::coordinator
