// Offload: the coordinator's slow work (importing and planning a submitted model, lowering a
// job's tasks and its search rounds, compiling an export) off its event loop.
//
// Takes work as a function that runs on one of `threads` pool threads and returns a completion,
// a function the event loop runs later (run_completions), in the order the work finished. The
// work must not touch the loop's state (it gets copies or shared, immutable objects); the
// completion may. Pool threads (and the threads their work starts) run under SCHED_IDLE (nice +10
// where that is refused), below the loop, so that on a busy machine the loop preempts them. Guarantees: a work function that throws has its Error's message passed to the
// `failed` completion given with it instead; nothing posted is lost before the destructor, which
// drops what has not started, gives up running work at its next cancellation point (core/cancel.h:
// the work runs under the pool's cancel token, raised first), and runs no completion: a
// coordinator told to stop does not wait for a model's planning to end.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/cancel.h"

namespace fusetune::coordinator {

class Offload {
 public:
  using Completion = std::function<void()>;
  using Work = std::function<Completion()>;
  using Failed = std::function<void(const std::string& error)>;

  explicit Offload(int threads);
  ~Offload();
  Offload(const Offload&) = delete;
  Offload& operator=(const Offload&) = delete;

  void post(Work work, Failed failed);
  // Runs the completions of the work finished so far, on the caller's thread; returns how many.
  size_t run_completions();
  // Work posted whose completion has not run yet.
  size_t pending() const;

 private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<Work, Failed>> queue_;
  std::deque<Completion> done_;
  size_t pending_ = 0;
  bool stopping_ = false;
  CancelToken cancel_;  // raised by the destructor: running work gives up
  std::vector<std::thread> threads_;
};

}  // namespace fusetune::coordinator
