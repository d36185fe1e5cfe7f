// Measurement of candidate kernels inside the worker's child process, and the frames the daemon
// and its child exchange on a pipe.
//
// measure_candidate takes a task's sub-graph, one candidate (sources, launch shape, parameter
// bindings, and a cubin when the backend is CUDA), the task's policy and a backend. It loads the
// kernel, verifies it against the reference kernels on inputs drawn from the policy's seed (each
// buffer inside redzones, outputs poisoned; backend/verify.h), and only when it is correct times
// it under the policy (backend::TimingPolicy), unless the policy says verify_only. Guarantees: the
// result's status is "ok" only for a verified candidate, timed unless verify_only (0 repeats); a wrong result, a write outside a buffer, or an error while
// loading or launching gives "wrong_result" or "runtime_fault", and a finding of the host
// executor's checks (race, barrier, bounds, uninitialised shared memory) "check_failed", with the
// reason in `detail`.
//
// serve_measurements is the child's main loop: it reads ChildRequest frames from `in_fd`, writes
// one ChildReply frame with a CandidateResult per candidate, in order, to `out_fd` (a request of
// two candidates with Policy::interleave measures them as a pair; its text valid UTF-8,
// wire::make_strings_valid), a reference_started frame before it draws the sub-graph's weights
// and before it computes a reference, a reference_s frame after the reference, and returns 0 at
// end of input.
// After a runtime fault it returns 3 (a GPU context is not trusted after one); the daemon starts a
// fresh child for the remaining candidates.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/verify.h"
#include "core/graph.h"
#include "fusetune_proto/service.pb.h"

namespace fusetune::worker {

// Told when a task's reference values start and finish being computed (the child tells its
// daemon: a reference of large tensors takes the host seconds, and it is not the candidate's time).
// Either function may be empty.
struct ReferenceProgress {
  std::function<void()> started;
  std::function<void(double seconds)> done;
};

// `reference` is the request's reference (backend::Reference): drawn from the policy's seed by the
// first candidate that needs it (or needs other inputs), reused by the others, so that a task's
// candidates are compared against one reference computed once. A candidate is timed on the
// reference's inputs (uploaded afresh, without redzones), not on inputs drawn again.
wire::CandidateResult measure_candidate(const Graph& g, const wire::ChildCandidate& c, const wire::Policy& policy,
                                        backend::Backend& backend, backend::Reference& reference,
                                        const ReferenceProgress& progress = {});
// Two candidates verified, then timed in turn (Policy::interleave): both results interleaved, in
// order; when one fails to verify or load, the other is timed alone.
std::vector<wire::CandidateResult> measure_pair(const Graph& g, const wire::ChildCandidate& a,
                                                const wire::ChildCandidate& b, const wire::Policy& policy,
                                                backend::Backend& backend, backend::Reference& reference,
                                                const ReferenceProgress& progress = {});

int serve_measurements(int in_fd, int out_fd, backend::Backend& backend);

// Frames: a 4-byte little-endian length, then the bytes. read_frame returns nullopt at a clean
// end of input; both throw Error on a broken pipe or a truncated frame.
void write_frame(int fd, const std::string& bytes);
std::optional<std::string> read_frame(int fd);

}  // namespace fusetune::worker
