// The coordinator's request handler under fuzzing: a real coordinator (coordinator/server.h) in
// process, fed whole messages as peers would send them, shared by the libFuzzer target
// (tools/fuzz_coordinator.cpp) and the corpus replay in the unit tests.
//
// An input is a sequence of frames, each [sender: 1 byte][length: 2 bytes, little-endian][bytes];
// the sender byte picks one of four peers (two workers' and two clients' identities, so that a
// sequence can say hello, take a lease, answer it and ask for status), and each frame's bytes are
// handled as that peer's message (Server::handle_frame); a truncated frame ends the input. Then
// the loop runs until the pool's work (a submitted model's import and planning, an export) is done
// and its answers are sent. The coordinator lives as long as the harness, so state carries across
// frames and inputs, as in a daemon. Its database and caches live in a fresh temporary directory
// (removed at the end); strays() lists anything it wrote there besides them. Guarantees of the
// coordinator checked by the users: no input stops it (an exception leaving handle_frame, an
// abort, a sanitizer report) and none makes it write a file it should not.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "coordinator/server.h"
#include "fusetune_proto/service.pb.h"
#include "proto/wire.h"

namespace fusetune::fuzz {

inline constexpr const char* kSenders[] = {"worker-0", "worker-1", "client-0", "client-1"};

// One frame of an input: from sender `sender` (an index into kSenders), the bytes of `e` as
// wire::encode makes them (or `raw` as they are).
inline std::string frame(uint8_t sender, const std::string& raw) {
  const size_t n = std::min<size_t>(raw.size(), 0xFFFF);
  std::string out;
  out += static_cast<char>(sender);
  out += static_cast<char>(n & 0xFF);
  out += static_cast<char>(n >> 8);
  out.append(raw, 0, n);
  return out;
}
inline std::string frame(uint8_t sender, const wire::Envelope& e) { return frame(sender, wire::encode(e)); }

class CoordinatorHarness {
 public:
  CoordinatorHarness()
      : dir_(std::filesystem::temp_directory_path() / ("fusetune-fuzz-coordinator-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "cache");
    ::setenv("FUSETUNE_CACHE_DIR", (dir_ / "cache").c_str(), 1);
    coordinator::ServerOptions o;
    o.listen = "inproc://fusetune-fuzz-coordinator";
    o.db = dir_ / "search.db";
    o.id = "fuzz";
    const bool verbose = std::getenv("FUZZ_COORDINATOR_VERBOSE") != nullptr;
    o.log = [verbose](const std::string& line) {
      if (verbose) std::fprintf(stderr, "coordinator: %s\n", line.c_str());
    };
    server_ = std::make_unique<coordinator::Server>(context_, o);
  }
  ~CoordinatorHarness() {
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  CoordinatorHarness(const CoordinatorHarness&) = delete;
  CoordinatorHarness& operator=(const CoordinatorHarness&) = delete;

  void feed(const uint8_t* data, size_t size) {
    size_t at = 0;
    while (at + 3 <= size) {
      const std::string sender = kSenders[data[at] % 4];
      const size_t n = static_cast<size_t>(data[at + 1]) | (static_cast<size_t>(data[at + 2]) << 8);
      at += 3;
      if (at + n > size) break;
      server_->handle_frame(sender, data + at, n);
      at += n;
    }
    for (int i = 0; i < 20000 && server_->work_in_progress() > 0; ++i) server_->poll_once(1);
    server_->poll_once(0);
  }

  // Entries of the coordinator's directory besides its database (with SQLite's -wal and -shm, and
  // the model files beside it) and its cache directory.
  std::vector<std::string> strays() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name != "search.db" && name != "search.db-wal" && name != "search.db-shm" && name != "search.db.models" &&
          name != "cache") {
        out.push_back(name);
      }
    }
    return out;
  }

 private:
  std::filesystem::path dir_;
  zmq::context_t context_;
  std::unique_ptr<coordinator::Server> server_;
};

}  // namespace fusetune::fuzz
