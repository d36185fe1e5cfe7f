// Test helper: a Clock (core/clock.h) that moves only when the test moves it, so that what depends
// on time (leases, heartbeats, backoff) is tested by moving the clock rather than by waiting.
// Takes nothing; guarantees advance() moves now() and unix_ms() by exactly what it adds, and that
// either may be read from another thread while the test advances it (such a reader may see one
// moved a moment before the other).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/clock.h"

namespace fusetune::testing {

class ManualClock : public Clock {
 public:
  TimePoint now() const override { return TimePoint(std::chrono::nanoseconds(now_ns_.load())); }
  int64_t unix_ms() const override { return unix_ms_.load(); }
  void advance(std::chrono::milliseconds d) {
    now_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    unix_ms_ += d.count();
  }

 private:
  std::atomic<int64_t> now_ns_{0};
  std::atomic<int64_t> unix_ms_{1'800'000'000'000};
};

}  // namespace fusetune::testing
