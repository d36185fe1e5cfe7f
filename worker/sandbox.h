// Sandbox: the worker daemon's supervised measuring process.
//
// Takes the path of the fusetune executable and a device ("host" or a CUDA ordinal) and runs
// `fusetune worker-child --device D` with a pipe each way (worker/measure.h frames). run() sends
// a task's candidates and collects one result per candidate, in order. Guarantees: whatever a
// candidate does to the child (an illegal address, a trap, a segfault, an exit, a hang past the
// per-candidate timeout) only the child dies: that candidate is reported as runtime_fault (with
// the signal or exit status) or timeout, a fresh child is started, and the remaining candidates
// run there. The timeout does not run while the child computes the task's reference values (it
// says when it starts and ends them): wire::reference_timeout_ms bounds
// those, and a reference past it is a timeout of every candidate left, which share it. The daemon itself never executes generated code. In a sanitized build the child's
// sanitizer leaves those signals alone, so the report still names the signal.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>
#include <vector>

#include "fusetune_proto/service.pb.h"

namespace fusetune::worker {

class Sandbox {
 public:
  Sandbox(std::string executable, std::string device);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Results for the candidates of `request`, in order. When `cancel` becomes true the child is
  // killed and the results so far are returned (fewer than requested).
  std::vector<wire::CandidateResult> run(const wire::ChildRequest& request, int timeout_ms,
                                         const std::atomic<bool>* cancel = nullptr);
  // Children started after the first one (each one replaces a child that crashed, hung or faulted).
  int restarts() const { return starts_ > 1 ? starts_ - 1 : 0; }
  // Seconds the last run()'s children spent computing reference values (measured by the child).
  double reference_s() const { return reference_s_; }

 private:
  void start();
  // Kills (when `kill_first`) and reaps the child; returns how it ended ("killed by signal 11 (SIGSEGV)").
  std::string stop(bool kill_first);

  std::string executable_;
  std::string device_;
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  int starts_ = 0;
  double reference_s_ = 0;
};

}  // namespace fusetune::worker
