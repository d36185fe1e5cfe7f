#include "coordinator/client.h"

#include <deque>
#include <fstream>

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

wire::Envelope Client::receive() {
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

wire::Envelope Client::request(wire::Envelope e) {
  const std::string bytes = wire::encode(std::move(e));
  socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
  return receive();
}

std::vector<wire::ModelFile> Client::upload(const std::string& name, const std::vector<UploadFile>& files,
                                            const std::function<void(uint64_t, uint64_t)>& progress) {
  constexpr size_t kInFlight = 4;  // pieces sent and not yet acknowledged
  std::vector<wire::ModelFile> named;
  uint64_t total = 0;
  for (const UploadFile& f : files) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(f.local, ec);
    check(!ec, f.local.string(), ": cannot read the model file (", ec.message(), ")");
    wire::ModelFile& m = named.emplace_back();
    m.set_path(f.path);
    m.set_size(size);
    total += size;
  }
  uint64_t acknowledged = 0;
  std::deque<uint64_t> in_flight;  // the sizes of the pieces sent and not yet acknowledged, in order
  auto await_one = [&] {
    const wire::Envelope r = receive();
    check(r.has_upload_ack() && r.upload_ack().upload() == name, "coordinator answered an upload piece with a ",
          wire::body_name(r), " message");
    acknowledged += in_flight.front();
    in_flight.pop_front();
    if (progress) progress(acknowledged, total);
  };
  wire::Envelope e;
  wire::Upload& piece = *e.mutable_upload();
  piece.set_upload(name);
  std::string data, bytes;  // reused: a fresh buffer per piece costs its page faults
  for (const UploadFile& f : files) {
    std::ifstream in(f.local, std::ios::binary);
    check(in.is_open(), f.local.string(), ": cannot read the model file");
    piece.set_path(f.path);
    uint64_t offset = 0;
    do {  // an empty file is one empty piece, so that it exists on the other side
      data.resize(wire::kUploadChunk);
      in.read(data.data(), static_cast<std::streamsize>(data.size()));
      data.resize(static_cast<size_t>(in.gcount()));
      check(!in.bad(), f.local.string(), ": reading the model file failed");
      if (in_flight.size() == kInFlight) await_one();
      piece.set_offset(offset);
      piece.set_data(data);
      e.set_version(wire::kProtocolVersion);
      check(e.SerializeToString(&bytes), "cannot serialize an upload piece");
      socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
      in_flight.push_back(data.size());
      offset += data.size();
    } while (in && !in.eof());
  }
  while (!in_flight.empty()) await_one();
  return named;
}

}  // namespace fusetune::coordinator
