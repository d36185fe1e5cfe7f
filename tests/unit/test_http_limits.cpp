// The HTTP side's limits (dashboards/http_server.h), each against a real server on a free loopback
// port and a raw socket that sends what an attacker would: a head over its bytes or lines, a body
// (plain, gzip, chunked), slow and idle connections beyond the cap, a rebound Host header, a wrong
// token; and the limits' own ranges and the bound-address loopback rule.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "core/error.h"
#include "dashboards/http_server.h"

namespace fusetune::dashboards {
namespace {

// A client connection to 127.0.0.1:port.
class Peer {
 public:
  explicit Peer(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Peer() { ::close(fd_); }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  bool connected() const { return connected_; }
  // Sends all of `bytes`; false once the server has hung up.
  bool send(const std::string& bytes) {
    for (size_t at = 0; at < bytes.size();) {
      const ssize_t n = ::send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }
  // What arrives within `wait_ms` of silence: until the server closes or goes quiet. Reading
  // stops early once `until` has arrived (when given).
  std::string receive(int wait_ms, const std::string& until = "") {
    std::string got;
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, wait_ms) <= 0) return got;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return got;
      got.append(buf, static_cast<size_t>(n));
      if (!until.empty() && got.find(until) != std::string::npos) return got;
    }
  }
  // Whether the server closed the connection within `wait_ms` (reading and dropping what comes).
  bool closed_within(int wait_ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    for (;;) {
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
      pollfd p{fd_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, left) <= 0) return false;
      char buf[4096];
      if (::recv(fd_, buf, sizeof buf, 0) <= 0) return true;
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return -1;
  return std::stoi(response.substr(9, 3));
}

std::string get(int port, const std::string& extra = "") {
  return "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n" + extra + "\r\n";
}

constexpr int kWait = 20'000;  // ms: how long a test waits for an answer that must come

HttpOptions on_loopback(HttpOptions o) {
  if (o.address.empty()) o.address = "127.0.0.1:0";
  return o;
}

struct Served {
  explicit Served(const HttpOptions& o) : server(on_loopback(o)) {
    server.answer_directly([](const HttpRequest& r) { return HttpReply{200, "text/plain", "served " + r.path + "\n"}; });
  }
  int port() const { return server.port(); }
  HttpServer server;
};

// The server answers a plain request on a new connection.
void expect_serving(int port) {
  Peer p(port);
  ASSERT_TRUE(p.connected());
  ASSERT_TRUE(p.send(get(port, "Connection: close\r\n")));
  const std::string r = p.receive(kWait);
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("served /metrics"), std::string::npos) << r;
}

TEST(HttpLimits, AHeadOverItsBytesOrLinesIsRefusedAndTheServerStopsReadingIt) {
  HttpOptions o;
  o.max_header_bytes = 4096;
  o.max_header_lines = 8;
  Served s(o);
  {
    Peer p(s.port());
    std::string head = get(s.port());
    head.insert(head.size() - 2, std::string(5000, 'a').insert(0, "X-Big: ") + "\r\n");
    ASSERT_TRUE(p.send(head));
    const std::string r = p.receive(kWait);
    EXPECT_EQ(status_of(r), 431) << r;
    EXPECT_NE(r.find("over 4096 bytes"), std::string::npos) << r;
  }
  {
    Peer p(s.port());
    std::string lines;
    for (int i = 0; i < 12; ++i) lines += "X-Line-" + std::to_string(i) + ": x\r\n";
    ASSERT_TRUE(p.send(get(s.port(), lines)));
    const std::string r = p.receive(kWait);
    EXPECT_EQ(status_of(r), 431) << r;
    EXPECT_NE(r.find("13 header lines, over 8"), std::string::npos) << r;
  }
  {
    // The attack of issue 26: 40,000 header lines of 8 KB (322 MB). The server hangs up long
    // before: what it reads is bounded by the head's limit and a short drain after its refusal.
    Peer p(s.port());
    ASSERT_TRUE(p.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
    const std::string line = "X-Flood: " + std::string(8180, 'f') + "\r\n";
    size_t sent = 0;
    for (int i = 0; i < 40'000 && p.send(line); ++i) sent += line.size();
    EXPECT_LT(sent, 64u << 20) << "the server read " << sent << " bytes of one request's head";
  }
  expect_serving(s.port());
}

TEST(HttpLimits, ARequestBodyIsRefusedBeforeAByteOfItIsRead) {
  Served s(HttpOptions{});
  // Each announces a body and sends none of it: the refusal cannot have waited for it.
  for (const std::string& extra : {std::string("Content-Length: 100000000\r\n"),
                                   std::string("Content-Encoding: gzip\r\nContent-Length: 306000\r\n"),
                                   std::string("Transfer-Encoding: chunked\r\n")}) {
    Peer p(s.port());
    ASSERT_TRUE(p.send(get(s.port(), extra)));
    const std::string r = p.receive(kWait);
    EXPECT_EQ(status_of(r), 413) << extra << r;
    EXPECT_NE(r.find("takes no request bodies"), std::string::npos) << r;
  }
  {
    Peer p(s.port());  // Content-Length: 0 is no body
    ASSERT_TRUE(p.send(get(s.port(), "Content-Length: 0\r\nConnection: close\r\n")));
    EXPECT_EQ(status_of(p.receive(kWait)), 200);
  }
  {
    Peer p(s.port());  // a header given twice is refused rather than guessed at
    ASSERT_TRUE(p.send(get(s.port(), "Content-Length: 0\r\nContent-Length: 5\r\n")));
    const std::string r = p.receive(kWait);
    EXPECT_EQ(status_of(r), 400) << r;
  }
  expect_serving(s.port());
}

TEST(HttpLimits, NoMoreConnectionsThanTheCapAreServedAndSlowHeadsAreCutAtTheTimeout) {
  HttpOptions o;
  o.max_connections = 2;
  o.timeout_ms = 60'000;  // the slow heads below are finished or dropped by the test
  Served s(o);
  Peer slow1(s.port()), slow2(s.port());
  ASSERT_TRUE(slow1.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  ASSERT_TRUE(slow2.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  Peer third(s.port());  // the kernel completes its handshake; the server must not take it up
  ASSERT_TRUE(third.connected());
  ASSERT_TRUE(third.send(get(s.port(), "Connection: close\r\n")));
  EXPECT_EQ(third.receive(1000), "") << "a third connection was served while two held the cap of 2";
  ASSERT_TRUE(slow1.send("Connection: close\r\n\r\n"));  // frees a slot
  EXPECT_EQ(status_of(slow1.receive(kWait)), 200);
  EXPECT_EQ(status_of(third.receive(kWait)), 200);

  HttpOptions quick;
  quick.timeout_ms = 300;
  Served q(quick);
  Peer dribbling(q.port());
  ASSERT_TRUE(dribbling.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "));
  const std::string r = dribbling.receive(kWait);
  EXPECT_EQ(status_of(r), 408) << r;
  EXPECT_NE(r.find("within 300 ms"), std::string::npos) << r;
  Peer silent(q.port());
  EXPECT_TRUE(silent.closed_within(kWait)) << "a connection that sent nothing was kept";
  expect_serving(q.port());
}

TEST(HttpLimits, AKeptAliveConnectionServesSeveralRequestsAndIsClosedWhenIdle) {
  HttpOptions o;
  o.keep_alive_ms = 300;
  Served s(o);
  Peer p(s.port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(p.send(get(s.port())));
    const std::string r = p.receive(kWait, "served /metrics\n");
    EXPECT_EQ(status_of(r), 200) << "request " << i << ": " << r;
  }
  EXPECT_TRUE(p.closed_within(kWait)) << "an idle kept-alive connection was not closed";

  HttpOptions no_keep_alive;
  no_keep_alive.keep_alive_ms = 0;
  Served n(no_keep_alive);
  Peer once(n.port());
  ASSERT_TRUE(once.send(get(n.port())));
  const std::string r = once.receive(kWait);  // until the server closes
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
}

TEST(HttpLimits, OnLoopbackTheHostHeaderMustNameLoopbackAndATokenIsCheckedFirst) {
  Served s(HttpOptions{});
  EXPECT_TRUE(s.server.loopback());
  for (const std::string& host : {std::string("127.0.0.1:") + std::to_string(s.port()), std::string("localhost"),
                                  std::string("127.9.9.9"), std::string("[::1]:80")}) {
    Peer p(s.port());
    ASSERT_TRUE(p.send("GET /metrics HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"));
    EXPECT_EQ(status_of(p.receive(kWait)), 200) << host;
  }
  for (const std::string& head :
       {std::string("GET /metrics HTTP/1.1\r\nHost: rebound.attacker.example\r\n\r\n"),
        std::string("GET /metrics HTTP/1.1\r\nHost: 127.attacker.example\r\n\r\n"),
        std::string("GET /metrics HTTP/1.1\r\n\r\n")}) {
    Peer p(s.port());
    ASSERT_TRUE(p.send(head));
    const std::string r = p.receive(kWait);
    EXPECT_EQ(status_of(r), 403) << head << r;
  }
  HttpOptions tokened;
  tokened.token = "s3cret";
  Served t(tokened);
  for (const auto& [auth, want] : std::vector<std::pair<std::string, int>>{
           {"", 401}, {"Authorization: Bearer s3cre\r\n", 401}, {"Authorization: Bearer s3cret!\r\n", 401},
           {"Authorization: Bearer s3cret\r\n", 200}}) {
    Peer p(t.port());
    ASSERT_TRUE(p.send(get(t.port(), auth + "Connection: close\r\n")));
    const std::string r = p.receive(kWait);
    EXPECT_EQ(status_of(r), want) << auth << r;
    if (want == 401) {
      EXPECT_NE(r.find("WWW-Authenticate: Bearer"), std::string::npos) << r;
    }
  }
}

TEST(HttpLimits, LoopbackIsTheBoundAddressNotTheTextOfIt) {
  HttpOptions o;
  o.address = "127.0.0.2:0";  // all of 127/8 is loopback
  EXPECT_TRUE(HttpServer(o).loopback());
  o.address = "0.0.0.0:0";
  try {
    HttpServer any(o);
    FAIL() << "served beyond loopback without a token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beyond loopback the dashboard needs a bearer token"), std::string::npos) << e.what();
  }
  o.token = "t";
  EXPECT_FALSE(HttpServer(o).loopback());
  o.token = "";
  o.address = "127.attacker.example:0";  // a name that merely starts like loopback: not listened on, or needs a token
  EXPECT_THROW(HttpServer{o}, Error);
}

TEST(HttpLimits, EachLimitIsRangeCheckedAndNamesItsFlag) {
  const std::vector<std::pair<void (*)(HttpOptions&), std::string>> cases = {
      {[](HttpOptions& o) { o.max_connections = 0; }, "--http-max-connections 0"},
      {[](HttpOptions& o) { o.max_connections = 100'000; }, "--http-max-connections 100000"},
      {[](HttpOptions& o) { o.max_header_bytes = 100; }, "--http-max-header-kb"},
      {[](HttpOptions& o) { o.max_header_lines = 2; }, "--http-max-headers 2"},
      {[](HttpOptions& o) { o.timeout_ms = 0; }, "--http-timeout-s 0"},
      {[](HttpOptions& o) { o.keep_alive_ms = -1000; }, "--http-keep-alive-s -1"},
  };
  for (const auto& [set, flag] : cases) {
    HttpOptions o;
    o.address = "127.0.0.1:0";
    set(o);
    try {
      HttpServer bad(o);
      ADD_FAILURE() << flag << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  }
}

TEST(HttpLimits, TokenComparisonLooksAtEveryByte) {
  EXPECT_TRUE(token_matches("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(token_matches("Bearer ab", "Bearer abc"));
  EXPECT_FALSE(token_matches("Bearer abcd", "Bearer abc"));
  EXPECT_FALSE(token_matches("Bearer abd", "Bearer abc"));
  EXPECT_FALSE(token_matches("", "Bearer abc"));
  EXPECT_TRUE(token_matches("", ""));
  EXPECT_FALSE(token_matches(std::string("Bearer abc\0", 11), "Bearer abc"));
}

}  // namespace
}  // namespace fusetune::dashboards
