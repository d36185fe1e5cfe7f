#include "worker/confine.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/prctl.h>

#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"

namespace fusetune::worker {

void confine_measuring_child() {
  check(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "measuring child: cannot set no_new_privs (", std::strerror(errno), ")");
  const std::unique_ptr<void, void (*)(scmp_filter_ctx)> filter(seccomp_init(SCMP_ACT_ALLOW), seccomp_release);
  check(filter != nullptr, "measuring child: cannot make a seccomp filter");
  auto rule = [&](uint32_t action, int call, const char* name, unsigned count = 0, scmp_arg_cmp cmp = {}) {
    const int rc = count == 0 ? seccomp_rule_add(filter.get(), action, call, 0) : seccomp_rule_add(filter.get(), action, call, 1, cmp);
    check(rc == 0, "measuring child: the seccomp rule for ", name, " was refused (", std::strerror(-rc), ")");
  };
  rule(SCMP_ACT_KILL_PROCESS, SCMP_SYS(execve), "execve");
  rule(SCMP_ACT_KILL_PROCESS, SCMP_SYS(execveat), "execveat");
  for (const auto& [call, name] : {std::pair{SCMP_SYS(fork), "fork"}, std::pair{SCMP_SYS(vfork), "vfork"},
                                   std::pair{SCMP_SYS(socket), "socket"}, std::pair{SCMP_SYS(socketpair), "socketpair"},
                                   std::pair{SCMP_SYS(ptrace), "ptrace"}, std::pair{SCMP_SYS(process_vm_readv), "process_vm_readv"},
                                   std::pair{SCMP_SYS(process_vm_writev), "process_vm_writev"}}) {
    rule(SCMP_ACT_ERRNO(EPERM), call, name);
  }
  // A new process: clone without CLONE_THREAD (its flags are the first argument).
  scmp_arg_cmp no_thread{};  // SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0), without C's compound literal
  no_thread.arg = 0;
  no_thread.op = SCMP_CMP_MASKED_EQ;
  no_thread.datum_a = CLONE_THREAD;
  no_thread.datum_b = 0;
  rule(SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), "clone", 1, no_thread);
  rule(SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), "clone3");
  const int rc = seccomp_load(filter.get());
  check(rc == 0, "measuring child: the kernel refused the seccomp filter (", std::strerror(-rc), ")");
}

}  // namespace fusetune::worker
