#include "dashboards/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "dashboards/assets.h"

namespace fusetune::dashboards {

bool token_matches(std::string_view given, std::string_view expected) {
  // Every byte of the longer one is looked at, whatever differs and where.
  const size_t n = std::max(given.size(), expected.size());
  unsigned diff = given.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    const unsigned char b = i < expected.size() ? static_cast<unsigned char>(expected[i]) : 0;
    diff |= static_cast<unsigned>(a ^ b);
  }
  return diff == 0;
}

namespace {

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

bool loopback_address(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

std::pair<std::string, int> address_text(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  }
  return {text, port};
}

// Whether a Host header's host names this machine's loopback: localhost, 127.x.x.x or [::1].
bool loopback_host_header(std::string_view host) {
  std::string name;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    name = std::string(host.substr(1, close - 1));
    in6_addr v6{};
    return ::inet_pton(AF_INET6, name.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
  }
  name = std::string(host.substr(0, host.find(':')));
  if (name == "localhost") return true;
  in_addr v4{};
  return ::inet_pton(AF_INET, name.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One connection: the bytes read ahead of httplib's parser, and reads and writes bounded by the
// current request's deadline. httplib reads the request's head from here once it is whole.
class Connection final : public httplib::Stream {
 public:
  explicit Connection(int fd) : fd_(fd) {}

  enum class Fill { kData, kClosed, kTimeout };
  // Reads what the socket has (waiting until `deadline`) onto the buffer.
  Fill fill(Clock::time_point deadline) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, ms_until(deadline));
    if (ready == 0) return Fill::kTimeout;
    if (ready < 0) return Fill::kClosed;
    char chunk[4096];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return Fill::kClosed;
    buffer_.append(chunk, static_cast<size_t>(n));
    return Fill::kData;
  }
  std::string_view unread() const { return std::string_view(buffer_).substr(consumed_); }
  void set_deadline(Clock::time_point d) { deadline_ = d; }
  // Drops what httplib consumed, keeping what follows (a pipelined request).
  void compact() {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }

  bool is_readable() const override {
    if (consumed_ < buffer_.size()) return true;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, ms_until(deadline_)) > 0;
  }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return ::poll(&p, 1, ms_until(deadline_)) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (consumed_ == buffer_.size()) {
      if (fill(deadline_) != Fill::kData) return -1;
    }
    const size_t n = std::min(size, buffer_.size() - consumed_);
    std::memcpy(ptr, buffer_.data() + consumed_, n);
    consumed_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(fd_, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { name_of(::getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { name_of(::getsockname, ip, port); }
  socket_t socket() const override { return fd_; }

  // A refusal in full, then the connection is closed: what the peer still sends is read and
  // dropped for a moment (bounded), so that the refusal reaches it before the close.
  void refuse(int status, const std::string& reason, const std::string& body, const std::string& extra_header = "") {
    const std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                             "\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n" + extra_header + "\r\n";
    const std::string all = head + body;
    for (size_t sent = 0; sent < all.size();) {
      const ssize_t n = write(all.data() + sent, all.size() - sent);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
    ::shutdown(fd_, SHUT_WR);
    const Clock::time_point linger = Clock::now() + std::chrono::seconds(1);
    for (size_t drained = 0; drained < (1u << 20);) {
      buffer_.clear();
      consumed_ = 0;
      if (fill(linger) != Fill::kData) break;
      drained += buffer_.size();
    }
  }

 private:
  template <typename F>
  void name_of(F f, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (f(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    std::tie(ip, port) = address_text(a);
  }

  int fd_;
  std::string buffer_;
  size_t consumed_ = 0;
  Clock::time_point deadline_ = Clock::now();
};

// httplib's task queue, bounded: `n` threads, and enqueue() (on httplib's accept loop) waits for
// a free one, so that no more than `n` connections are ever accepted and open.
class ConnectionPool final : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(int n) : limit_(n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [&] { return taken_ < limit_ || stopping_; });
    ++taken_;
    jobs_.push_back(std::move(fn));
    work_.notify_one();
  }
  void shutdown() override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_.notify_all();
    room_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [&] { return !jobs_.empty() || stopping_; });
        if (jobs_.empty()) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        --taken_;
      }
      room_.notify_one();
    }
  }

  const int limit_;
  int taken_ = 0;  // connections queued or being served
  bool stopping_ = false;
  std::mutex mutex_;
  std::condition_variable work_, room_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
};

}  // namespace

// httplib's server with this file's connection handling (see the header's guarantees).
class BoundedServer final : public httplib::Server {
 public:
  explicit BoundedServer(const HttpOptions& o) : o_(o) {
    new_task_queue = [n = o.max_connections] { return new ConnectionPool(n); };
  }

  // After binding: whether the bound address is loopback.
  bool bound_to_loopback() const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    return ::getsockname(svr_sock_, reinterpret_cast<sockaddr*>(&a), &len) == 0 && loopback_address(a);
  }
  void set_loopback(bool loopback) { loopback_ = loopback; }
  void close_listener() {
    const socket_t s = svr_sock_.exchange(INVALID_SOCKET);
    if (s != INVALID_SOCKET) ::close(s);
  }
  // Ends every open connection's wait, so that stopping does not wait on slow peers.
  void end_connections() {
    const std::lock_guard<std::mutex> lock(open_mutex_);
    stopping_ = true;
    for (const int fd : open_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    {
      const std::lock_guard<std::mutex> lock(open_mutex_);
      if (stopping_) {
        ::close(sock);
        return false;
      }
      open_.insert(sock);
    }
    Connection c(sock);
    for (int served = 0; served < kRequestsPerConnection; ++served) {
      if (!serve_one(c, served == 0, served + 1 == kRequestsPerConnection)) break;
    }
    {
      const std::lock_guard<std::mutex> lock(open_mutex_);
      open_.erase(sock);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return true;
  }

  // Reads one request's head, refuses it or hands it to httplib; whether the connection goes on.
  bool serve_one(Connection& c, bool first, bool last) {
    // The first byte: the request's, or a kept-alive connection's next.
    const auto idle_until = Clock::now() + std::chrono::milliseconds(first ? o_.timeout_ms : o_.keep_alive_ms);
    while (c.unread().empty()) {
      if (c.fill(idle_until) != Connection::Fill::kData) return false;
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(o_.timeout_ms);
    c.set_deadline(deadline);
    size_t end = std::string_view::npos;
    for (;;) {
      end = c.unread().find("\r\n\r\n");
      if (end != std::string_view::npos && end + 4 <= static_cast<size_t>(o_.max_header_bytes)) break;
      if (c.unread().size() > static_cast<size_t>(o_.max_header_bytes)) {
        c.refuse(431, "Request Header Fields Too Large",
                 "the request's head is over " + std::to_string(o_.max_header_bytes) + " bytes\n");
        return false;
      }
      const Connection::Fill f = c.fill(deadline);
      if (f == Connection::Fill::kClosed) return false;
      if (f == Connection::Fill::kTimeout) {
        c.refuse(408, "Request Timeout",
                 "the request's head did not arrive within " + std::to_string(o_.timeout_ms) + " ms\n");
        return false;
      }
    }
    const std::string_view head = c.unread().substr(0, end);
    std::map<std::string, std::vector<std::string_view>> fields;
    int lines = 0;
    for (size_t at = head.find("\r\n"); at != std::string_view::npos;) {
      const size_t next = head.find("\r\n", at + 2);
      const std::string_view line = head.substr(at + 2, next == std::string_view::npos ? std::string_view::npos : next - at - 2);
      ++lines;
      const size_t colon = line.find(':');
      if (colon != std::string_view::npos) fields[lower(line.substr(0, colon))].push_back(trim(line.substr(colon + 1)));
      at = next;
    }
    if (lines > o_.max_header_lines) {
      c.refuse(431, "Request Header Fields Too Large",
               "the request has " + std::to_string(lines) + " header lines, over " + std::to_string(o_.max_header_lines) + "\n");
      return false;
    }
    for (const char* once : {"host", "authorization", "content-length", "transfer-encoding"}) {
      if (fields[once].size() > 1) {
        c.refuse(400, "Bad Request", std::string("the header ") + once + " is given twice\n");
        return false;
      }
    }
    if (!o_.token.empty()) {
      const std::string_view given = fields["authorization"].empty() ? std::string_view() : fields["authorization"][0];
      if (!token_matches(given, "Bearer " + o_.token)) {
        c.refuse(401, "Unauthorized", "a bearer token is required (Authorization: Bearer TOKEN)\n", "WWW-Authenticate: Bearer\r\n");
        return false;
      }
    }
    if (loopback_ && (fields["host"].empty() || !loopback_host_header(fields["host"][0]))) {
      c.refuse(403, "Forbidden",
               "this server is bound to loopback: the Host header must name localhost, 127.x.x.x or [::1]\n");
      return false;
    }
    const bool body = !fields["transfer-encoding"].empty() ||
                      (!fields["content-length"].empty() && fields["content-length"][0] != "0");
    if (body) {
      c.refuse(413, "Content Too Large", "this server takes no request bodies\n");
      return false;
    }
    bool closed = false;
    const bool close = last || o_.keep_alive_ms == 0;
    const bool ok = process_request(c, close, closed, nullptr);
    c.compact();
    return ok && !closed && !close;
  }

  // A kept-alive connection is closed after this many requests, so that no peer keeps its slot.
  static constexpr int kRequestsPerConnection = 100;
  const HttpOptions o_;
  bool loopback_ = true;
  std::mutex open_mutex_;
  std::set<int> open_;
  bool stopping_ = false;
};

struct HttpServer::State {
  explicit State(const HttpOptions& o) : options(o), http(o) {}
  HttpOptions options;
  BoundedServer http;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  int port = 0;
  bool loopback = true;
  int wake = -1;
  std::mutex mutex;
  bool stopping = false;
  std::deque<std::pair<HttpRequest, std::promise<HttpReply>>> pending;
  std::function<HttpReply(const HttpRequest&)> direct;  // answer_directly's

  HttpReply ask_loop(HttpRequest r) {
    std::future<HttpReply> answer;
    {
      const std::lock_guard<std::mutex> lock(mutex);
      if (stopping) return {503, "text/plain", "the coordinator is stopping\n"};
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

HttpServer::HttpServer(const HttpOptions& o) {
  const std::string& address = o.address;
  const size_t colon = address.rfind(':');
  check(colon != std::string::npos && colon > 0, "--http ", address, ": give HOST:PORT (127.0.0.1:8080)");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  check(port >= 0 && port <= 65535, "--http ", address, ": the port is not a number from 0 to 65535");
  check(o.max_connections >= 1 && o.max_connections <= 1024, "--http-max-connections ", o.max_connections, ": from 1 to 1024");
  check(o.max_header_bytes >= 1024 && o.max_header_bytes <= (1 << 20), "--http-max-header-kb ", o.max_header_bytes / 1024,
        ": from 1 to 1024");
  check(o.max_header_lines >= 4 && o.max_header_lines <= 1000, "--http-max-headers ", o.max_header_lines, ": from 4 to 1000");
  check(o.timeout_ms >= 100 && o.timeout_ms <= 600'000, "--http-timeout-s ", o.timeout_ms / 1000.0, ": from 0.1 to 600");
  check(o.keep_alive_ms >= 0 && o.keep_alive_ms <= 600'000, "--http-keep-alive-s ", o.keep_alive_ms / 1000.0, ": from 0 to 600");
  s_ = std::make_unique<State>(o);
  s_->port = port == 0 ? s_->http.bind_to_any_port(host) : (s_->http.bind_to_port(host, port) ? port : -1);
  check(s_->port > 0, "--http ", address, ": cannot listen there (in use, or not an address of this machine)");
  s_->loopback = s_->http.bound_to_loopback();
  if (!s_->loopback && o.token.empty()) {
    s_->http.close_listener();
    throw Error("--http " + address +
                ": beyond loopback the dashboard needs a bearer token (--http-token-file FILE or FUSETUNE_HTTP_TOKEN)");
  }
  s_->http.set_loopback(s_->loopback);
  s_->wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  check(s_->wake >= 0, "--http: cannot make an eventfd");
  for (const Asset& a : assets()) {
    s_->http.Get(a.path == "/index.html" ? "/" : a.path, [a](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(a.bytes), a.content_type);
    });
  }
  State* st = s_.get();
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
  s_->thread = std::thread([st] {
    st->http.listen_after_bind();
    st->listen_returned = true;
  });
}

HttpServer::~HttpServer() {
  {
    const std::lock_guard<std::mutex> lock(s_->mutex);
    s_->stopping = true;
    for (auto& [r, p] : s_->pending) p.set_value({503, "text/plain", "the coordinator is stopping\n"});
    s_->pending.clear();
  }
  s_->http.end_connections();
  // stop() acts only once the accept loop runs: wait for it to start (or to have ended).
  while (!s_->http.is_running() && !s_->listen_returned) std::this_thread::yield();
  s_->http.stop();
  if (s_->thread.joinable()) s_->thread.join();
  ::close(s_->wake);
}

int HttpServer::port() const { return s_->port; }
bool HttpServer::loopback() const { return s_->loopback; }
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
