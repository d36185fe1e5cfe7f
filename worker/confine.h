// confine_measuring_child: the last step of the measuring child (`fusetune worker-child`) before it
// runs generated code: whatever that code tries, it cannot start a program, create a process or
// reach the network.
//
// Takes nothing; call it after the device is open (the CUDA driver's own set-up may need what the
// filter refuses) and before the first candidate is loaded. Guarantees, for the rest of the
// process's life (the filter is inherited and cannot be lifted):
// - no_new_privs: no set-uid program or file capability grants anything;
// - a seccomp filter (libseccomp) that kills the process on execve and execveat (the sandbox then
//   reports the candidate as a runtime_fault naming SIGSYS), and answers EPERM to fork, vfork,
//   clone without CLONE_THREAD (a process, not a thread), socket, socketpair, ptrace and
//   process_vm_readv/writev, and ENOSYS to clone3, whose flags a filter cannot read (the C
//   library then makes its threads with clone, which the filter allows). Everything else is
//   allowed: threads, memory, files, the GPU driver's ioctls.
// Throws Error naming what the kernel refused when the filter cannot be installed.
#pragma once

namespace fusetune::worker {

void confine_measuring_child();

}  // namespace fusetune::worker
