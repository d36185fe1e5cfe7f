// A progress line on stderr for long work: redrawn in place on a terminal, printed every 10%
// otherwise and at least every 30 s while the work goes on (a tune whose first task takes minutes
// still says how far it is), silent for work that finishes within half a second (with
// FUSETUNE_PROGRESS=lines in the environment: every update as a line of its own from the start, at
// most ten a second and the last always, which the Python package's progress callbacks read); once
// part is done it says about how long the rest takes at the rate so far.
#pragma once

#include <chrono>
#include <string>

namespace fusetune::cli {

// When a line shows: not before `silent_for` has passed, and in the 10% mode again after
// `quiet_at_most` without one.
struct ProgressPace {
  std::chrono::milliseconds silent_for{500};
  std::chrono::milliseconds quiet_at_most{30000};
};

class ProgressLine {
 public:
  explicit ProgressLine(std::string label, ProgressPace pace = {});
  ~ProgressLine();
  // `detail` follows the count ("12 measured, 3 cache hits").
  void update(size_t done, size_t total, const std::string& detail = "");

 private:
  std::string label_;
  ProgressPace pace_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
  // Redrawn in place (a terminal), a line every tenth (a pipe), or a line every update
  // (FUSETUNE_PROGRESS=lines).
  enum class Mode { kRedraw, kDeciles, kLines } mode_;
  bool shown_ = false;
  int last_decile_ = -1;
};

}  // namespace fusetune::cli
