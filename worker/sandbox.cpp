#include "worker/sandbox.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>

#include "core/error.h"
#include "proto/wire.h"
#include "worker/measure.h"

namespace fusetune::worker {

Sandbox::Sandbox(std::string executable, std::string device)
    : executable_(std::move(executable)), device_(std::move(device)) {}

Sandbox::~Sandbox() {
  if (pid_ > 0) stop(true);
}

void Sandbox::start() {
  int down[2], up[2];
  check(::pipe2(down, O_CLOEXEC) == 0 && ::pipe2(up, O_CLOEXEC) == 0, "cannot create pipes for the measuring child: ",
        std::strerror(errno));
  const std::vector<std::string> args = {executable_, "worker-child", "--device", device_};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The child's environment: ours, except that a sanitizer (in a sanitized build) must not take
  // over the signals generated code dies of (the daemon reports the signal itself), nor check for
  // leaks at exit: LeakSanitizer stops the world from a task it clones as a process, which the
  // child's seccomp filter refuses (worker/confine.h).
  std::vector<std::string> env;
  std::string asan = "ASAN_OPTIONS=", tsan = "TSAN_OPTIONS=";
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    if (var.rfind("ASAN_OPTIONS=", 0) == 0) asan = var + ":";
    else if (var.rfind("TSAN_OPTIONS=", 0) == 0) tsan = var + ":";
    else env.push_back(var);
  }
  const std::string signals = "handle_segv=0:handle_sigbus=0:handle_sigill=0:handle_sigfpe=0:handle_abort=0";
  env.push_back(asan + signals + ":detect_leaks=0");
  env.push_back(tsan + signals);
  std::vector<char*> envp;
  for (const std::string& v : env) envp.push_back(const_cast<char*>(v.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  check(pid >= 0, "cannot fork the measuring child: ", std::strerror(errno));
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::dup2(down[0], 0);
    ::dup2(up[1], 1);
    ::execve(executable_.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(down[0]);
  ::close(up[1]);
  ++starts_;
  pid_ = pid;
  to_child_ = down[1];
  from_child_ = up[0];
}

std::string Sandbox::stop(bool kill_first) {
  if (pid_ <= 0) return "not running";
  ::close(to_child_);
  ::close(from_child_);
  to_child_ = from_child_ = -1;
  if (kill_first) ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + (sigabbrev_np(sig) ? std::string("SIG") + sigabbrev_np(sig) : "?") + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

std::vector<wire::CandidateResult> Sandbox::run(const wire::ChildRequest& request, int timeout_ms,
                                                const std::atomic<bool>* cancel) {
  std::vector<wire::CandidateResult> results;
  const int n = request.candidates_size();
  reference_s_ = 0;
  auto failed = [&](const std::string& status, const std::string& detail) {
    const wire::Candidate& c = request.candidates(static_cast<int>(results.size())).candidate();
    wire::CandidateResult r;
    r.set_config(c.config());
    r.set_source_digest(c.source_digest());
    r.set_status(status);
    r.set_detail(detail);
    results.push_back(r);
  };
  int start_failures = 0;
  while (static_cast<int>(results.size()) < n) {
    if (pid_ <= 0) start();
    wire::ChildRequest rest;
    *rest.mutable_graph() = request.graph();
    *rest.mutable_policy() = request.policy();
    for (int k = static_cast<int>(results.size()); k < n; ++k) *rest.add_candidates() = request.candidates(k);
    try {
      write_frame(to_child_, rest.SerializeAsString());
    } catch (const Error&) {  // the child died before reading: start another, twice at most
      const std::string how = stop(true);
      if (++start_failures >= 2) {
        while (static_cast<int>(results.size()) < n) failed("runtime_fault", "measuring child failed to start: " + how);
      }
      continue;
    }
    // The next frame's deadline: a candidate's timeout, or the reference's own limit while the
    // child computes the task's reference values.
    const int reference_ms = wire::reference_timeout_ms(request.policy());
    bool in_reference = false;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (static_cast<int>(results.size()) < n) {
      bool ready = false;
      while (!ready) {
        if (cancel != nullptr && cancel->load()) {
          stop(true);
          return results;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) break;
        pollfd p{from_child_, POLLIN, 0};
        const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 50)));
        ready = rc > 0;
      }
      if (!ready && in_reference) {  // the remaining candidates share that reference: none can run
        stop(true);
        while (static_cast<int>(results.size()) < n) {
          failed("timeout", "the task's reference values were not computed within " + std::to_string(reference_ms) +
                                " ms; the measuring child was killed");
        }
        break;
      }
      if (!ready) {
        stop(true);
        failed("timeout", "no result within " + std::to_string(timeout_ms) + " ms; the measuring child was killed");
        break;
      }
      std::optional<std::string> frame;
      try {
        frame = read_frame(from_child_);
      } catch (const Error&) {
        frame.reset();
      }
      if (!frame) {
        failed("runtime_fault", "the measuring child " + stop(false));
        break;
      }
      wire::ChildReply reply;
      if (!reply.ParseFromString(*frame) || reply.reply_case() == wire::ChildReply::REPLY_NOT_SET) {
        failed("runtime_fault", "the measuring child sent a malformed result; it " + stop(true));
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (reply.reply_case() == wire::ChildReply::kReferenceStarted) {
        in_reference = true;
        deadline = now + std::chrono::milliseconds(reference_ms);
        continue;
      }
      in_reference = false;  // the reference is done, or a candidate's result came without it
      deadline = now + std::chrono::milliseconds(timeout_ms);
      if (reply.reply_case() == wire::ChildReply::kReferenceS) {
        reference_s_ += reply.reference_s();
        continue;
      }
      results.push_back(reply.result());
      if (reply.result().status() == "runtime_fault") {  // the child exits after a fault: reap it
        stop(false);
        break;
      }
    }
  }
  return results;
}

}  // namespace fusetune::worker
