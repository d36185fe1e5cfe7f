// HttpServer: the coordinator's HTTP side (`--http HOST:PORT`): `/metrics`, the JSON API under
// `/api/`, and the live dashboard's page and scripts (dashboards/web/, built into the binary).
//
// Takes an address, a bearer token (required, and checked on every request, when the address is
// not loopback; optional on loopback) and the assets to serve. It serves on threads of its own
// (cpp-httplib); the answers that need the coordinator's state are made on the coordinator's loop:
// a request is queued, wake_fd() becomes readable, and the loop calls answer_pending() with the
// function that answers (so that the API and `fusetune status` read the same state the same way).
// A request the loop does not answer within 10 s gets 503. A worker, which has no such loop, gives
// answer_directly() a thread-safe answer instead: its requests are answered on the HTTP threads.
// Guarantees: no request can stop the process (an answer that throws is a 500 naming the error),
// and nothing but GET is served.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

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

class HttpServer {
 public:
  // `address`: HOST:PORT (port 0: any free one, see port()). Throws Error naming the address when
  // it cannot listen, or when it is not loopback and `token` is empty.
  HttpServer(const std::string& address, const std::string& token);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  int wake_fd() const;  // readable while requests wait for the loop
  // On the loop: answers every queued request with `answer`.
  void answer_pending(const std::function<HttpReply(const HttpRequest&)>& answer);
  // From now on, requests are answered by `answer` on the HTTP threads (it must be thread-safe).
  void answer_directly(std::function<HttpReply(const HttpRequest&)> answer);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Whether HOST (of HOST:PORT) is a loopback address.
bool is_loopback(const std::string& host);

}  // namespace fusetune::dashboards
