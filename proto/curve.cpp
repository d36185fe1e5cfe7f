#include "proto/curve.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace fusetune::wire {

namespace fs = std::filesystem;

KeyPair generate_key_pair() {
  char pub[41] = {0}, sec[41] = {0};
  check(zmq_curve_keypair(pub, sec) == 0, "cannot generate a CURVE key pair (libzmq without CURVE support?)");
  return {pub, sec};
}

namespace {

// Writes `text` to `path` through a file that is private (0600) from the moment it exists,
// whatever the umask, and renamed into place whole: the secret is never readable by others,
// not even while it is written.
void write_private_file(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  check(fd >= 0, tmp.string(), ": cannot create (", std::strerror(errno), ")");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(tmp.string(), ": cannot write (", why, ")");
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    fail(path.string(), ": cannot write (", why, ")");
  }
}

}  // namespace

void write_key_pair(const KeyPair& keys, const fs::path& dir, const std::string& name) {
  fs::create_directories(dir);
  const fs::path key = dir / (name + ".key"), pub = dir / (name + ".pub");
  write_private_file(key, "public " + keys.public_key + "\nsecret " + keys.secret_key + "\n");
  std::ofstream out(pub);
  check(out.good(), pub.string(), ": cannot write");
  out << "public " << keys.public_key << "\n";
}

KeyPair read_key_file(const fs::path& file) {
  std::ifstream in(file);
  check(in.good(), file.string(), ": cannot read the key file");
  KeyPair k;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string field, value;
    if (!(s >> field >> value)) continue;
    check(value.size() == 40, file.string(), ": the ", field, " key is not 40 Z85 characters");
    if (field == "public") k.public_key = value;
    else if (field == "secret") k.secret_key = value;
    else fail(file.string(), ": unknown line '", field, "'");
  }
  check(!k.public_key.empty(), file.string(), ": no public key");
  return k;
}

std::set<std::string> read_public_keys(const fs::path& file_or_dir) {
  std::set<std::string> keys;
  if (fs::is_directory(file_or_dir)) {
    for (const auto& e : fs::directory_iterator(file_or_dir)) {
      if (e.path().extension() == ".pub") keys.insert(read_key_file(e.path()).public_key);
    }
    check(!keys.empty(), file_or_dir.string(), ": no .pub key files");
  } else {
    keys.insert(read_key_file(file_or_dir).public_key);
  }
  return keys;
}

void apply_client_security(zmq::socket_t& socket, const ClientSecurity& s) {
  if (!s.enabled()) return;
  check(!s.own.secret_key.empty(), "a CURVE client needs its own key pair (--key NAME.key) with the coordinator's key");
  socket.set(zmq::sockopt::curve_serverkey, s.server_public);
  socket.set(zmq::sockopt::curve_publickey, s.own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, s.own.secret_key);
}

void apply_server_security(zmq::socket_t& socket, const ServerSecurity& s) {
  if (!s.enabled()) return;
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_publickey, s.own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, s.own.secret_key);
  socket.set(zmq::sockopt::zap_domain, std::string("fusetune"));
}

unsigned peer_roles(const zmq::message_t& message) {
  // The User-Id the Authenticator gave: "worker", "client" or "worker+client".
  const char* user = zmq_msg_gets(message.handle(), "User-Id");
  if (user == nullptr) return kEveryRole;  // no CURVE: nothing to tell the roles apart by
  const std::string roles(user);
  return (roles.find("worker") != std::string::npos ? kWorkerRole : 0u) |
         (roles.find("client") != std::string::npos ? kClientRole : 0u);
}

Authenticator::Authenticator(zmq::context_t& context, const ServerSecurity& security,
                             std::function<void(const std::string&, const LogEvent&)> log)
    : socket_(context, zmq::socket_type::rep), workers_(security.workers), clients_(security.clients), log_(std::move(log)) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
}

void Authenticator::handle() {
  while (true) {
    // A ZAP request: version, request id, domain, address, identity, mechanism, credentials...
    std::vector<zmq::message_t> parts;
    zmq::message_t part;
    if (!socket_.recv(part, zmq::recv_flags::dontwait)) return;
    parts.push_back(std::move(part));
    while (parts.back().more()) {
      zmq::message_t next;
      if (!socket_.recv(next, zmq::recv_flags::none)) break;
      parts.push_back(std::move(next));
    }
    const std::string request_id = parts.size() > 1 ? parts[1].to_string() : "";
    std::string roles;
    std::string who = "a peer";
    if (parts.size() >= 7 && parts[5].to_string() == "CURVE" && parts[6].size() == 32) {
      char z85[41] = {0};
      zmq_z85_encode(z85, static_cast<const uint8_t*>(parts[6].data()), 32);
      who = "key " + std::string(z85) + " from " + parts[3].to_string();
      if (workers_.count(z85)) roles = "worker";
      if (clients_.count(z85)) roles += roles.empty() ? "client" : "+client";
    }
    const bool ok = !roles.empty();
    if (!ok && log_) log_("refused " + who + ": not among the allowed public keys", LogEvent{"key_refused", {{"peer", who}}});
    // The User-Id (the fifth part) is what ZeroMQ attaches to every message of the connection.
    const std::vector<std::string> reply = {"1.0", request_id, ok ? "200" : "400", ok ? "OK" : "key not allowed", roles, ""};
    for (size_t k = 0; k < reply.size(); ++k) {
      socket_.send(zmq::buffer(reply[k]), k + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
}

}  // namespace fusetune::wire
