// Clock: the time a component reads, injectable (as leveldb's Env is), so that what depends on
// time (leases, heartbeats, backoff) is tested by moving a clock rather than by waiting.
//
// now() is monotonic (intervals, deadlines in memory); unix_ms() is the wall clock in
// milliseconds (deadlines stored in the database, which outlive the process). Guarantees:
// system_clock() reads std::chrono's clocks and is shared by everything that is not a test.
#pragma once

#include <chrono>
#include <cstdint>

namespace fusetune {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
  virtual int64_t unix_ms() const = 0;
};

const Clock& system_clock();

}  // namespace fusetune
