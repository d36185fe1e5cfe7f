#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cancel.h"

namespace fusetune {

namespace {

thread_local int parallel_depth = 0;

}  // namespace

bool inside_parallel_for() { return parallel_depth > 0; }

void parallel_for(size_t n, const std::function<void(size_t)>& fn, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const size_t workers = std::min(n, static_cast<size_t>(threads));
  std::atomic<size_t> next{0};
  std::mutex mutex;
  size_t failed_at = n;
  std::exception_ptr failure;
  const CancelToken* token = current_cancel_token();  // the caller's, on every thread
  auto work = [&] {
    const CancelScope scope(token);
    ++parallel_depth;
    struct Leave {
      ~Leave() { --parallel_depth; }
    } leave;
    for (size_t i = next++; i < n; i = next++) {
      try {
        cancellation_point();
        fn(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (i < failed_at) {
          failed_at = i;
          failure = std::current_exception();
        }
      }
    }
  };
  if (workers <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < workers; ++t) pool.emplace_back(work);
    for (std::thread& t : pool) t.join();
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace fusetune
