// CompilePool: the worker daemon's compiler. Builds each candidate of a task on its own (so one
// candidate's compile error cannot hide the others), on `jobs` threads at once: NVRTC to a cubin
// for the worker's architecture with ptxas's resource report, or the system C++ compiler building
// the same CUDA text for the host executor (simt/module.h: compile). A cache keyed by the SHA-256
// of the source, the architecture and the options answers a candidate compiled before (within
// this process; cubins with their ptxas reports are also cached on disk, which sets `cached` as
// well, and host builds by simt/module.h). Guarantees: one output per candidate, in order; a failure is
// an output with ok = false and the compiler's message, never an exception. A library call
// (Candidate::library) needs no compiling and is ok at once. One pool may serve several callers at
// once (a machine's devices, worker/machine.h): at most `jobs` compilations run at a time in all.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "fusetune_proto/service.pb.h"

namespace fusetune::worker {

struct CompileOutput {
  bool ok = false;
  std::string error;
  double compile_ms = 0;
  std::string cubin;
  int registers = 0;
  int64_t shared_bytes = 0;
  int spill_bytes = 0;
  bool cached = false;
};

class CompilePool {
 public:
  // `arch` is the worker's architecture ("sm_90"), or "host" for the host backend.
  CompilePool(std::string arch, int jobs);
  std::vector<CompileOutput> compile(const std::vector<wire::Candidate>& candidates);
  int jobs() const { return jobs_; }
  std::string compiler() const;

 private:
  CompileOutput compile_one(const wire::Candidate& c);
  std::string arch_;
  int jobs_;
  std::mutex mutex_;
  std::map<std::string, CompileOutput> cache_;
  std::condition_variable room_;  // a compilation ended
  int running_ = 0;               // compilations in progress, across callers
};

}  // namespace fusetune::worker
