// Curve: ZeroMQ CURVE security for the tuning service. Workers execute code that arrives over the
// network, so a coordinator given a key pair accepts only peers whose public keys it was given,
// and workers and clients given the coordinator's public key talk to nothing else.
//
// Key files (written by `fusetune keys generate NAME`): NAME.key holds both halves
// ("public Z85\nsecret Z85\n", mode 0600), NAME.pub the public half. read_public_keys takes a .pub
// file or a directory of them. The Authenticator is the coordinator's ZAP handler (ZeroMQ's
// authentication protocol, served on inproc://zeromq.zap.01 of the coordinator's context): it
// accepts a CURVE client whose key is allowed, as a worker or as a client, and tags the
// connection with those roles (peer_roles reads them off each message); it refuses any other
// key, logging the refusal.
// Guarantees: every file problem throws Error naming the file; a socket configured here refuses
// to connect in plain text to a CURVE peer and vice versa.
#pragma once

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <zmq.hpp>

#include "core/log.h"

namespace fusetune::wire {

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // empty for a public key file
};

KeyPair generate_key_pair();
void write_key_pair(const KeyPair& keys, const std::filesystem::path& dir, const std::string& name);
KeyPair read_key_file(const std::filesystem::path& file);
std::set<std::string> read_public_keys(const std::filesystem::path& file_or_dir);

// A worker's or client's side: the coordinator's public key and its own pair.
struct ClientSecurity {
  std::string server_public;
  KeyPair own;
  bool enabled() const { return !server_public.empty(); }
};
void apply_client_security(zmq::socket_t& socket, const ClientSecurity& security);

// The coordinator's side: its pair and the public keys it accepts, by role: a worker's key may
// say hello and report results, a client's may submit, upload, cancel and export (both may ask
// for status); a key in both sets has both roles.
struct ServerSecurity {
  KeyPair own;
  std::set<std::string> workers;
  std::set<std::string> clients;
  bool enabled() const { return !own.secret_key.empty(); }
};
void apply_server_security(zmq::socket_t& socket, const ServerSecurity& security);

// A peer's roles, from the key it authenticated with (every role without CURVE).
enum PeerRole : unsigned { kWorkerRole = 1, kClientRole = 2, kEveryRole = kWorkerRole | kClientRole };
// The roles the Authenticator gave the connection a message came on (its ZAP User-Id).
unsigned peer_roles(const zmq::message_t& message);

class Authenticator {
 public:
  // Accepts a key of `security`'s workers or clients and tags its connection with its roles.
  Authenticator(zmq::context_t& context, const ServerSecurity& security, std::function<void(const std::string&, const LogEvent&)> log);
  zmq::socket_t& socket() { return socket_; }
  // Answers every pending authentication request.
  void handle();

 private:
  zmq::socket_t socket_;
  std::set<std::string> workers_, clients_;
  std::function<void(const std::string&, const LogEvent&)> log_;
};

}  // namespace fusetune::wire
