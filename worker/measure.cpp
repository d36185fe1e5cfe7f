#include "worker/measure.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/verify.h"
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

wire::CandidateResult measure_candidate(const Graph& g, const wire::ChildCandidate& cc, const wire::Policy& policy,
                                        backend::Backend& backend) {
  const wire::Candidate& c = cc.candidate();
  wire::CandidateResult r;
  r.set_config(c.config());
  r.set_source_digest(c.source_digest());
  backend::ModuleSource src;
  src.kernels.push_back({c.kernel(), c.grid(), c.threads(), c.shared_bytes(), c.library()});
  src.cuda_source = c.cuda_source();
  const std::string arch = backend.properties().arch;
  if (!cc.cubin().empty()) src.cubins[arch] = std::vector<char>(cc.cubin().begin(), cc.cubin().end());
  std::vector<int> inputs, outputs;
  for (const wire::ParamSpec& p : c.params()) {
    check(p.value() >= 0 && p.value() < static_cast<int>(g.values().size()), "candidate ", c.config(), ": parameter '",
          p.name(), "' is bound to value ", p.value(), " of ", g.values().size());
    (p.output() ? outputs : inputs).push_back(p.value());
  }
  planner::FusionGroup group;
  group.nodes.resize(g.nodes().size());
  std::iota(group.nodes.begin(), group.nodes.end(), 0);
  try {
    std::unique_ptr<backend::Module> module = backend.load_source(src);
    std::mt19937 rng(static_cast<std::mt19937::result_type>(policy.seed()));
    const backend::VerifyResult v =
        backend::verify_kernel(g, group, c.kernel(), inputs, outputs, backend, *module, rng, kRedzoneBytes);
    r.set_max_abs_error(v.max_abs);
    if (!v.ok) {
      r.set_status(v.check_failed ? "check_failed" : "wrong_result");
      r.set_detail(v.detail);
      return r;
    }
    // Timing runs on fresh buffers (no redzones needed: the kernel was verified on these shapes).
    std::vector<std::unique_ptr<backend::Buffer>> buffers;
    std::vector<backend::Buffer*> args;
    for (const wire::ParamSpec& p : c.params()) {
      const Value& val = g.value(p.value());
      const size_t bytes = std::max<size_t>(1, static_cast<size_t>(numel(val.shape)) * dtype_size(val.dtype));
      buffers.push_back(backend.allocate(bytes));
      if (!p.output()) {
        const Tensor t = backend::random_group_input(g, group, p.value(), rng);
        buffers.back()->upload(t.data(), t.nbytes());
      }
      args.push_back(buffers.back().get());
    }
    backend::TimingPolicy tp;
    tp.warmup = policy.warmup();
    tp.min_repeats = policy.min_repeats();
    tp.max_repeats = policy.max_repeats();
    tp.min_time_ms = policy.min_time_ms();
    tp.flush_l2 = policy.flush_l2();
    const backend::Timing t = module->time(c.kernel(), args, tp);
    r.set_status("ok");
    r.set_median_us(t.median_us);
    r.set_min_us(t.min_us);
    r.set_max_us(t.max_us);
    r.set_repeats(t.repeats);
  } catch (const Error& e) {
    r.set_status("runtime_fault");
    r.set_detail(e.what());
  }
  return r;
}

int serve_measurements(int in_fd, int out_fd, backend::Backend& backend) {
  while (std::optional<std::string> frame = read_frame(in_fd)) {
    wire::ChildRequest req;
    check(req.ParseFromString(*frame), "the measuring child got a malformed request");
    const Graph g = wire::from_subgraph(req.graph());
    for (const wire::ChildCandidate& c : req.candidates()) {
      const wire::CandidateResult r = measure_candidate(g, c, req.policy(), backend);
      write_frame(out_fd, r.SerializeAsString());
      if (r.status() == "runtime_fault") return 3;
    }
  }
  return 0;
}

}  // namespace fusetune::worker
