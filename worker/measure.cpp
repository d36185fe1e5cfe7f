#include "worker/measure.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>

#include "core/error.h"
#include "proto/wire.h"

namespace fusetune::worker {

namespace {

constexpr size_t kRedzoneBytes = 256;  // keeps every buffer 256-byte aligned, as cudaMalloc does
constexpr uint32_t kMaxFrameBytes = 1u << 30;

}  // namespace

void write_frame(int fd, const std::string& bytes) {
  check(bytes.size() <= kMaxFrameBytes, "frame of ", bytes.size(), " bytes is too large");
  const auto n = static_cast<uint32_t>(bytes.size());
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += bytes;
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t w = ::write(fd, out.data() + done, out.size() - done);
    if (w < 0 && errno == EINTR) continue;
    check(w > 0, "pipe write failed: ", std::strerror(errno));
    done += static_cast<size_t>(w);
  }
}

namespace {

// Reads exactly `n` bytes; false at end of input before the first byte.
bool read_exact(int fd, char* data, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::read(fd, data + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    check(r >= 0, "pipe read failed: ", std::strerror(errno));
    if (r == 0) {
      check(done == 0, "truncated frame (", done, " of ", n, " bytes)");
      return false;
    }
    done += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

std::optional<std::string> read_frame(int fd) {
  char header[4];
  if (!read_exact(fd, header, 4)) return std::nullopt;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<unsigned char>(header[i])) << (8 * i);
  check(n <= kMaxFrameBytes, "frame header announces ", n, " bytes");
  std::string bytes(n, '\0');
  if (n > 0) check(read_exact(fd, bytes.data(), n), "truncated frame (0 of ", n, " bytes)");
  return bytes;
}

namespace {

// A candidate loaded, verified and given timing buffers: what is timed, solo or interleaved.
struct Prepared {
  wire::CandidateResult result;  // status "ok" once verified; a failure's status and detail otherwise
  std::unique_ptr<backend::Module> module;
  std::vector<std::unique_ptr<backend::Buffer>> buffers;
  std::vector<backend::Buffer*> args;
  std::string kernel;
};

Prepared prepare(const Graph& g, const wire::ChildCandidate& cc, const wire::Policy& policy, backend::Backend& backend,
                 backend::Reference& reference, const ReferenceProgress& progress) {
  const wire::Candidate& c = cc.candidate();
  Prepared p;
  wire::CandidateResult& r = p.result;
  r.set_config(c.config());
  r.set_source_digest(c.source_digest());
  p.kernel = c.kernel();
  backend::ModuleSource src;
  src.kernels.push_back({c.kernel(), c.grid(), c.threads(), c.shared_bytes(), c.library()});
  src.cuda_source = c.cuda_source();
  const std::string arch = backend.properties().arch;
  if (!cc.cubin().empty()) src.cubins[arch] = std::vector<char>(cc.cubin().begin(), cc.cubin().end());
  std::vector<int> inputs, outputs, in_place;
  planner::FusionGroup group;
  group.nodes.resize(g.nodes().size());
  std::iota(group.nodes.begin(), group.nodes.end(), 0);
  try {
    for (const wire::ParamSpec& param : c.params()) {
      check(param.value() >= 0 && param.value() < static_cast<int>(g.values().size()), "candidate ", c.config(),
            ": parameter '", param.name(), "' is bound to value ", param.value(), " of ", g.values().size());
      check(param.output() || outputs.empty(), "candidate ", c.config(), ": input parameter '", param.name(),
            "' follows an output (inputs come first)");
      (param.output() ? outputs : inputs).push_back(param.value());
      if (param.output()) in_place.push_back(param.updates_input() - 1);
      check(param.updates_input() == 0 || (param.output() && param.updates_input() >= 1 &&
                                           param.updates_input() <= static_cast<int>(inputs.size())),
            "candidate ", c.config(), ": parameter '", param.name(), "' updates input ", param.updates_input() - 1,
            " in place, which is not an input parameter before it");
    }
    p.module = backend.load_source(src);
    if (reference.inputs != inputs || reference.values.empty()) {
      if (progress.started) progress.started();
      const auto t0 = std::chrono::steady_clock::now();
      std::mt19937 draw(static_cast<std::mt19937::result_type>(policy.seed()));
      reference = backend::reference_values(g, group, inputs, draw);
      if (progress.done) progress.done(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const backend::VerifyResult v = backend::verify_kernel(g, c.kernel(), inputs, outputs, backend, *p.module, reference,
                                                           {kRedzoneBytes, policy.sample_blocks(), policy.seed(),
                                                            backend::tf32_kernel(g, group, c.config())},
                                                           in_place);
    r.set_max_abs_error(v.max_abs);
    if (!v.coverage.whole()) {
      r.set_verified_blocks(v.coverage.blocks);
      r.set_grid_blocks(v.coverage.grid);
    }
    if (!v.ok) {
      r.set_status(v.check_failed ? "check_failed" : "wrong_result");
      r.set_detail(v.detail);
      return p;
    }
    // Timing runs on fresh buffers (no redzones needed: the kernel was verified on these shapes)
    // holding the reference's inputs: drawing large inputs again took the host seconds a candidate.
    for (const wire::ParamSpec& param : c.params()) {
      if (param.updates_input() > 0) {  // the input's buffer, updated in place
        p.args.push_back(p.args.at(static_cast<size_t>(param.updates_input() - 1)));
        continue;
      }
      const Value& val = g.value(param.value());
      const size_t bytes = std::max<size_t>(1, static_cast<size_t>(numel(val.shape)) * dtype_size(val.dtype));
      p.buffers.push_back(backend.allocate(bytes));
      if (!param.output()) {
        const Tensor& t = reference.values.at(param.value());
        p.buffers.back()->upload(t.data(), t.nbytes());
      }
      p.args.push_back(p.buffers.back().get());
    }
    r.set_status("ok");
  } catch (const Error& e) {
    r.set_status("runtime_fault");
    r.set_detail(e.what());
  }
  return p;
}

backend::TimingPolicy timing_policy(const wire::Policy& policy) {
  backend::TimingPolicy tp;
  tp.warmup = policy.warmup();
  tp.min_repeats = policy.min_repeats();
  tp.max_repeats = policy.max_repeats();
  tp.min_time_ms = policy.min_time_ms();
  tp.flush_l2 = policy.flush_l2();
  return tp;
}

void set_timing(wire::CandidateResult& r, const backend::Timing& t) {
  r.set_median_us(t.median_us);
  r.set_min_us(t.min_us);
  r.set_max_us(t.max_us);
  r.set_repeats(t.repeats);
  r.set_ci_low_us(t.ci_low_us);
  r.set_ci_high_us(t.ci_high_us);
}

// Runs fn, turning an Error into a runtime fault of `r`; false when it failed.
template <typename Fn>
bool guarded(wire::CandidateResult& r, Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const Error& e) {
    r.clear_median_us();
    r.set_status("runtime_fault");
    r.set_detail(e.what());
    return false;
  }
}

// Both candidates verified: warm-up for each, then rounds of one timed run of A and one of B
// (each timed as time() times one run: the L2 flushed before it on a GPU) until both have
// min_repeats runs and together min_time_ms, at most max_repeats rounds.
void time_interleaved(Prepared& a, Prepared& b, const wire::Policy& policy) {
  const backend::TimingPolicy tp = timing_policy(policy);
  backend::TimingPolicy one = tp;
  one.warmup = 0;
  one.min_repeats = one.max_repeats = 1;
  one.min_time_ms = 0;
  Prepared* both[2] = {&a, &b};
  std::vector<double> times[2];
  double total_ms = 0;
  for (Prepared* p : both) {
    backend::TimingPolicy warm = one;
    warm.warmup = std::max(0, tp.warmup - 1);
    if (!guarded(p->result, [&] { p->module->time(p->kernel, p->args, warm); })) return;
  }
  for (int round = 0; round < std::max(1, tp.max_repeats); ++round) {
    if (round >= tp.min_repeats && total_ms >= tp.min_time_ms) break;
    for (int k = 0; k < 2; ++k) {
      Prepared& p = *both[k];
      if (!guarded(p.result, [&] { times[k].push_back(p.module->time(p.kernel, p.args, one).median_us); })) return;
      total_ms += times[k].back() / 1000;
    }
  }
  for (int k = 0; k < 2; ++k) {
    set_timing(both[k]->result, backend::summarize_times(times[k]));
    both[k]->result.set_interleaved_with(both[1 - k]->result.config());
  }
}

}  // namespace

wire::CandidateResult measure_candidate(const Graph& g, const wire::ChildCandidate& cc, const wire::Policy& policy,
                                        backend::Backend& backend, backend::Reference& reference,
                                        const ReferenceProgress& progress) {
  Prepared p = prepare(g, cc, policy, backend, reference, progress);
  if (p.result.status() == "ok" && !policy.verify_only()) {
    guarded(p.result, [&] { set_timing(p.result, p.module->time(p.kernel, p.args, timing_policy(policy))); });
  }
  return p.result;
}

std::vector<wire::CandidateResult> measure_pair(const Graph& g, const wire::ChildCandidate& a,
                                                const wire::ChildCandidate& b, const wire::Policy& policy,
                                                backend::Backend& backend, backend::Reference& reference,
                                                const ReferenceProgress& progress) {
  Prepared pa = prepare(g, a, policy, backend, reference, progress);
  Prepared pb = prepare(g, b, policy, backend, reference, progress);
  if (pa.result.status() == "ok" && pb.result.status() == "ok") {
    time_interleaved(pa, pb, policy);
  } else {  // one failed: the other is timed alone
    for (Prepared* p : {&pa, &pb}) {
      if (p->result.status() != "ok") continue;
      guarded(p->result, [&] { set_timing(p->result, p->module->time(p->kernel, p->args, timing_policy(policy))); });
    }
  }
  return {pa.result, pb.result};
}

namespace {

// A result to the supervisor: its text (a detail quoting a node name) made valid UTF-8 first, or
// the supervisor could not parse it.
void write_result(int fd, wire::CandidateResult r) {
  wire::make_strings_valid(r);
  wire::ChildReply reply;
  *reply.mutable_result() = std::move(r);
  write_frame(fd, reply.SerializeAsString());
}

}  // namespace

int serve_measurements(int in_fd, int out_fd, backend::Backend& backend) {
  while (std::optional<std::string> frame = read_frame(in_fd)) {
    wire::ChildRequest req;
    check(req.ParseFromString(*frame), "the measuring child got a malformed request");
    backend::Reference reference;
    const ReferenceProgress progress{[&] {
                                       wire::ChildReply reply;
                                       reply.set_reference_started(true);
                                       write_frame(out_fd, reply.SerializeAsString());
                                     },
                                     [&](double seconds) {
                                       wire::ChildReply reply;
                                       reply.set_reference_s(seconds);
                                       write_frame(out_fd, reply.SerializeAsString());
                                     }};
    // The sub-graph's weights, drawn from their seeds (a vocabulary's projection has 65 million),
    // are the reference's work too, not the first candidate's.
    progress.started();
    const Graph g = wire::from_subgraph(req.graph());
    if (req.policy().interleave() && req.candidates_size() == 2) {
      bool fault = false;
      for (const wire::CandidateResult& r :
           measure_pair(g, req.candidates(0), req.candidates(1), req.policy(), backend, reference, progress)) {
        write_result(out_fd, r);
        fault = fault || r.status() == "runtime_fault";
      }
      if (fault) return 3;
      continue;
    }
    for (const wire::ChildCandidate& c : req.candidates()) {
      const wire::CandidateResult r = measure_candidate(g, c, req.policy(), backend, reference, progress);
      write_result(out_fd, r);
      if (r.status() == "runtime_fault") return 3;
    }
  }
  return 0;
}

}  // namespace fusetune::worker
