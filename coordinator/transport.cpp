#include "coordinator/transport.h"

#include "core/error.h"
#include "proto/wire.h"

namespace fusetune::coordinator {

std::string peer_name(const std::string& identity) {
  bool printable = !identity.empty();
  for (char c : identity) printable = printable && c >= 0x20 && c < 0x7f;
  if (printable) return identity;
  static const char* hex = "0123456789abcdef";
  std::string out = "peer-";
  for (unsigned char c : identity) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

MessageNeeds needs_of(const wire::Envelope& e) {
  switch (e.body_case()) {
    case wire::Envelope::kHello:
    case wire::Envelope::kResult: return {wire::kWorkerRole, true};
    case wire::Envelope::kHeartbeat:
    case wire::Envelope::kBye: return {wire::kWorkerRole, false};
    case wire::Envelope::kSubmit:
    case wire::Envelope::kUpload:
    case wire::Envelope::kCancel: return {wire::kClientRole, true};
    case wire::Envelope::kExportRequest: return {wire::kClientRole, false};
    default: return {};
  }
}

Transport::Transport(zmq::context_t& context, const std::string& listen, int64_t max_message_bytes,
                     const wire::ServerSecurity& security, const EventLog& log)
    : log_(log),
      auth_(security.enabled() ? std::make_unique<wire::Authenticator>(context, security, [&log](const std::string& l, const LogEvent& event) { log(LogIds{}, event, l); })
                               : nullptr),
      socket_(context, zmq::socket_type::router) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::router_mandatory, false);
  socket_.set(zmq::sockopt::maxmsgsize, max_message_bytes);
  wire::apply_server_security(socket_, security);
  try {
    // Port 0: one the system chooses (ZeroMQ's wildcard), read back as the endpoint bound.
    const bool any_port = listen.rfind("tcp://", 0) == 0 && listen.size() > 2 && listen.compare(listen.size() - 2, 2, ":0") == 0;
    socket_.bind(any_port ? listen.substr(0, listen.size() - 1) + "*" : listen);
    endpoint_ = any_port ? socket_.get(zmq::sockopt::last_endpoint) : listen;
  } catch (const zmq::error_t& e) {
    fail(listen, ": cannot listen (", e.what(), ")");
  }
}

Transport::~Transport() = default;

void Transport::send_now(const std::string& identity, const std::string& bytes) {
  socket_.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  socket_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
}

void Transport::send(const std::string& identity, wire::Envelope e) {
  std::string bytes = wire::encode(std::move(e));
  if (holding_) {  // inside a poll's transaction: sent once it commits (release)
    held_.emplace_back(identity, std::move(bytes));
    return;
  }
  send_now(identity, bytes);
}

void Outbox::send_error(const std::string& identity, const std::string& message) {
  wire::Envelope e;
  e.mutable_error()->set_message(message);
  send(identity, std::move(e));
}

// A lease sent before its commit could reach a worker and then vanish with a killed coordinator,
// its task id given to another task by the next one: what a transaction sent leaves after it.
void Transport::release() {
  holding_ = false;
  std::vector<std::pair<std::string, std::string>> out = std::move(held_);
  held_.clear();
  for (const auto& [identity, bytes] : out) send_now(identity, bytes);
}

std::set<std::string> Transport::drop_held() {
  holding_ = false;
  std::set<std::string> peers;
  for (const auto& [peer, frame] : held_) peers.insert(peer);
  held_.clear();
  return peers;
}

void Transport::poll_items(std::vector<zmq::pollitem_t>& items) {
  items.push_back({static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0});
  if (auth_) items.push_back({static_cast<void*>(auth_->socket()), 0, ZMQ_POLLIN, 0});
}

void Transport::authenticate() {
  if (auth_) auth_->handle();
}

void Transport::receive_all(const Handler& handle) {
  for (int handled = 0; handled < 10000; ++handled) {
    std::vector<zmq::message_t> parts;
    zmq::message_t part;
    if (!socket_.recv(part, zmq::recv_flags::dontwait)) break;
    parts.push_back(std::move(part));
    while (parts.back().more()) {
      zmq::message_t next;
      if (!socket_.recv(next, zmq::recv_flags::dontwait)) break;
      parts.push_back(std::move(next));
    }
    const std::string identity = parts[0].to_string();
    if (parts.size() != 2) {
      log_("ignored a message of " + std::to_string(parts.size() - 1) + " frames from " + peer_name(identity), LogLevel::kWarn);
      continue;
    }
    handle(identity, parts[1].data(), parts[1].size(), wire::peer_roles(parts[1]));
  }
}

bool Transport::allowed(const std::string& identity, const wire::Envelope& e, unsigned roles) {
  const unsigned needs = needs_of(e).role;
  if (roles & needs) return true;
  const std::string why = std::string("this peer's key is not a ") + (needs == wire::kWorkerRole ? "worker's" : "client's") +
                          " (--allow-" + (needs == wire::kWorkerRole ? "workers" : "clients") + "): it may not send " +
                          wire::body_name(e);
  ++role_refusals_;
  log_(LogIds{0, 0, peer_name(identity)}, LogEvent{"message_refused", {{"message", wire::body_name(e)}, {"why", why}}},
       "refused " + wire::body_name(e) + " from " + peer_name(identity) + ": " + why, LogLevel::kWarn);
  if (e.has_hello()) {
    wire::Envelope r;
    r.mutable_refused()->set_reason(why);
    send(identity, std::move(r));
  } else {
    send_error(identity, why);
  }
  return false;
}

}  // namespace fusetune::coordinator
