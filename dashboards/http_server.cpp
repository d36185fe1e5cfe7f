#include "dashboards/http_server.h"

#include <httplib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "dashboards/assets.h"

namespace fusetune::dashboards {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

struct HttpServer::State {
  httplib::Server http;
  std::thread thread;
  int port = 0;
  int wake = -1;
  std::string token;
  std::mutex mutex;
  std::deque<std::pair<HttpRequest, std::promise<HttpReply>>> pending;
  std::function<HttpReply(const HttpRequest&)> direct;  // answer_directly's

  HttpReply ask_loop(HttpRequest r) {
    std::future<HttpReply> answer;
    {
      const std::lock_guard<std::mutex> lock(mutex);
      if (direct) {
        try {
          return direct(r);
        } catch (const std::exception& e) {
          return {500, "text/plain", std::string(e.what()) + "\n"};
        }
      }
      pending.emplace_back(std::move(r), std::promise<HttpReply>());
      answer = pending.back().second.get_future();
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake, &one, sizeof one);
    if (answer.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      return {503, "text/plain", "the coordinator's loop did not answer within 10 s\n"};
    }
    return answer.get();
  }
};

HttpServer::HttpServer(const std::string& address, const std::string& token) : s_(std::make_unique<State>()) {
  const size_t colon = address.rfind(':');
  check(colon != std::string::npos && colon > 0, "--http ", address, ": give HOST:PORT (127.0.0.1:8080)");
  const std::string host = address.substr(0, colon);
  int port = -1;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  check(port >= 0 && port <= 65535, "--http ", address, ": the port is not a number from 0 to 65535");
  check(is_loopback(host) || !token.empty(), "--http ", address,
        ": beyond loopback the dashboard needs a bearer token (--http-token or FUSETUNE_HTTP_TOKEN)");
  s_->token = token;
  s_->wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  check(s_->wake >= 0, "--http: cannot make an eventfd");
  State* st = s_.get();
  s_->http.set_pre_routing_handler([st](const httplib::Request& req, httplib::Response& res) {
    if (st->token.empty() || req.get_header_value("Authorization") == "Bearer " + st->token) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content("a bearer token is required (Authorization: Bearer TOKEN)\n", "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  for (const Asset& a : assets()) {
    s_->http.Get(a.path == "/index.html" ? "/" : a.path, [a](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(a.bytes), a.content_type);
    });
  }
  auto to_loop = [st](const httplib::Request& req, httplib::Response& res) {
    HttpRequest r;
    r.path = req.path;
    for (const auto& [k, v] : req.params) r.query[k] = v;
    const HttpReply reply = st->ask_loop(std::move(r));
    res.status = reply.status;
    res.set_content(reply.body, reply.content_type);
  };
  s_->http.Get("/metrics", to_loop);
  s_->http.Get(R"(/api/.*)", to_loop);
  s_->port = port == 0 ? s_->http.bind_to_any_port(host) : (s_->http.bind_to_port(host, port) ? port : -1);
  check(s_->port > 0, "--http ", address, ": cannot listen there (in use, or not an address of this machine)");
  s_->thread = std::thread([st] { st->http.listen_after_bind(); });
}

HttpServer::~HttpServer() {
  s_->http.stop();
  if (s_->thread.joinable()) s_->thread.join();
  {
    const std::lock_guard<std::mutex> lock(s_->mutex);
    for (auto& [r, p] : s_->pending) p.set_value({503, "text/plain", "the coordinator is stopping\n"});
    s_->pending.clear();
  }
  ::close(s_->wake);
}

int HttpServer::port() const { return s_->port; }
int HttpServer::wake_fd() const { return s_->wake; }

void HttpServer::answer_directly(std::function<HttpReply(const HttpRequest&)> answer) {
  const std::lock_guard<std::mutex> lock(s_->mutex);
  s_->direct = std::move(answer);
}

void HttpServer::answer_pending(const std::function<HttpReply(const HttpRequest&)>& answer) {
  uint64_t n = 0;
  [[maybe_unused]] const ssize_t got = ::read(s_->wake, &n, sizeof n);
  std::deque<std::pair<HttpRequest, std::promise<HttpReply>>> todo;
  {
    const std::lock_guard<std::mutex> lock(s_->mutex);
    todo.swap(s_->pending);
  }
  for (auto& [r, p] : todo) {
    try {
      p.set_value(answer(r));
    } catch (const std::exception& e) {
      p.set_value({500, "text/plain", std::string(e.what()) + "\n"});
    }
  }
}

}  // namespace fusetune::dashboards
