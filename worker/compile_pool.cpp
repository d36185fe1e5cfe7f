#include "worker/compile_pool.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "backend/backend.h"
#include "backend/nvrtc.h"
#include "core/error.h"
#include "core/sha256.h"
#include "simt/module.h"

namespace fusetune::worker {

CompilePool::CompilePool(std::string arch, int jobs) : arch_(std::move(arch)), jobs_(std::max(1, jobs)) {}

std::string CompilePool::compiler() const {
  if (arch_ == "host") return simt::compiler_identity(simt::default_compiler());
  return backend::nvrtc_available() ? "nvrtc " + backend::nvrtc_version() : "nvrtc unavailable";
}

CompileOutput CompilePool::compile_one(const wire::Candidate& c) {
  if (!c.library().empty()) {  // a library call: nothing to compile
    CompileOutput out;
    out.ok = true;
    return out;
  }
  const std::string& source = c.cuda_source();
  const std::string key = sha256_hex(source + "\n// arch: " + arch_ + "\n// compiler: " + compiler());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      CompileOutput out = it->second;
      out.cached = true;
      return out;
    }
  }
  {  // a place among the pool's `jobs` compilations
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [&] { return running_ < jobs_; });
    ++running_;
  }
  CompileOutput out;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (arch_ == "host") {
      simt::compile(source);
      out.shared_bytes = c.shared_bytes();
    } else {
      const backend::CompiledCuda cc = backend::compile_cuda_cached(source, arch_);
      out.cached = cc.cached;
      out.cubin.assign(cc.cubin.begin(), cc.cubin.end());
      if (auto r = cc.resources.find(c.kernel()); r != cc.resources.end()) {
        out.registers = r->second.registers;
        out.shared_bytes = c.shared_bytes() + r->second.shared_bytes;
        out.spill_bytes = r->second.spill_store_bytes + r->second.spill_load_bytes;
      }
    }
    out.ok = true;
  } catch (const std::exception& e) {  // Error, or anything else a compiler threw: a status, never an escape
    out.error = e.what();
  }
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mutex_);
  --running_;
  room_.notify_one();
  cache_[key] = out;
  return out;
}

std::vector<CompileOutput> CompilePool::compile(const std::vector<wire::Candidate>& candidates) {
  std::vector<CompileOutput> out(candidates.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < candidates.size(); k = next++) out[k] = compile_one(candidates[k]);
  };
  std::vector<std::thread> threads;
  const size_t n = std::min<size_t>(static_cast<size_t>(jobs_), candidates.size());
  for (size_t t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  return out;
}

}  // namespace fusetune::worker
