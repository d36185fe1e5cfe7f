#include "proto/curve.h"

#include <sys/stat.h>

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

void write_key_pair(const KeyPair& keys, const fs::path& dir, const std::string& name) {
  fs::create_directories(dir);
  const fs::path key = dir / (name + ".key"), pub = dir / (name + ".pub");
  {
    std::ofstream out(key);
    check(out.good(), key.string(), ": cannot write");
    out << "public " << keys.public_key << "\nsecret " << keys.secret_key << "\n";
  }
  ::chmod(key.c_str(), 0600);
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

Authenticator::Authenticator(zmq::context_t& context, std::set<std::string> allowed,
                             std::function<void(const std::string&)> log)
    : socket_(context, zmq::socket_type::rep), allowed_(std::move(allowed)), log_(std::move(log)) {
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
    bool ok = false;
    std::string who = "a peer";
    if (parts.size() >= 7 && parts[5].to_string() == "CURVE" && parts[6].size() == 32) {
      char z85[41] = {0};
      zmq_z85_encode(z85, static_cast<const uint8_t*>(parts[6].data()), 32);
      who = "key " + std::string(z85) + " from " + parts[3].to_string();
      ok = allowed_.count(z85) != 0;
    }
    if (!ok && log_) log_("refused " + who + ": not among the allowed public keys");
    const std::vector<std::string> reply = {"1.0", request_id, ok ? "200" : "400", ok ? "OK" : "key not allowed", "", ""};
    for (size_t k = 0; k < reply.size(); ++k) {
      socket_.send(zmq::buffer(reply[k]), k + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
}

}  // namespace fusetune::wire
