// HttpServer: the coordinator's HTTP side (`--http HOST:PORT`): `/metrics`, the JSON API under
// `/api/`, and the live dashboard's page and scripts (dashboards/web/, built into the binary); a
// worker's `--metrics` side too.
//
// Takes the options below: an address, a bearer token (required, and checked on every request,
// when the bound address is not loopback; optional on loopback) and the limits. It serves on
// threads of its own (cpp-httplib parses and routes; the connection, the request's head and every
// refusal are this file's); the answers that need the coordinator's state are made on the
// coordinator's loop: a request is queued, wake_fd() becomes readable, and the loop calls
// answer_pending() with the function that answers (so that the API and `fusetune status` read the
// same state the same way). A request the loop does not answer within 10 s gets 503. A worker,
// which has no such loop, gives answer_directly() a thread-safe answer instead: its requests are
// answered on the HTTP threads.
//
// Guarantees, whatever a peer sends:
// - at most `max_connections` connections are open (each has a thread; the others wait in the
//   kernel's backlog, holding no descriptor of ours);
// - a request's head (request line and headers) is at most `max_header_bytes` and
//   `max_header_lines` lines (else 431) and arrives within `timeout_ms` of its first byte (else
//   408); an idle connection is closed after `keep_alive_ms`; a response that the peer does not
//   read within `timeout_ms` is abandoned;
// - no request body is read: nothing served takes one, so a request announcing one
//   (Content-Length other than 0, or Transfer-Encoding) gets 413 before a byte of it is read,
//   and nothing is ever inflated;
// - on a loopback-bound server the Host header must name a loopback host (else 403), so a page
//   whose name was rebound to 127.0.0.1 cannot read the token-less dashboard; loopback is decided
//   on the address the socket is bound to, never on the text of the address;
// - the token is compared in constant time, before the request reaches the parser of its URL;
// - no request can stop the process (an answer that throws is a 500 naming the error), and
//   nothing but GET is served.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace fusetune::dashboards {

struct HttpRequest {
  std::string path;                          // "/api/jobs/3"
  std::map<std::string, std::string> query;  // ?since=12
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

struct HttpOptions {
  std::string address;  // HOST:PORT; port 0: any free one (see HttpServer::port())
  std::string token;    // the bearer token; empty: none (allowed on loopback only)
  int max_connections = 32;
  int max_header_bytes = 16 * 1024;
  int max_header_lines = 64;
  int timeout_ms = 10'000;
  int keep_alive_ms = 5'000;
};

class HttpServer {
 public:
  // Throws Error naming the address when it cannot listen, when the bound address is not loopback
  // and the token is empty, or when a limit is out of its range.
  explicit HttpServer(const HttpOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  bool loopback() const;  // whether the bound address is a loopback one
  int wake_fd() const;    // readable while requests wait for the loop
  // On the loop: answers every queued request with `answer`.
  void answer_pending(const std::function<HttpReply(const HttpRequest&)>& answer);
  // From now on, requests are answered by `answer` on the HTTP threads (it must be thread-safe).
  void answer_directly(std::function<HttpReply(const HttpRequest&)> answer);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Whether `given` equals `expected`, in a time that depends on their lengths only.
bool token_matches(std::string_view given, std::string_view expected);

}  // namespace fusetune::dashboards
