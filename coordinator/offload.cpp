#include "coordinator/offload.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include <exception>

#include "core/error.h"

namespace fusetune::coordinator {

Offload::Offload(int threads) {
  for (int t = 0; t < std::max(1, threads); ++t) threads_.emplace_back([this] { loop(); });
}

Offload::~Offload() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  cancel_.raise();
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Offload::post(Work work, Failed failed) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(work), std::move(failed));
    ++pending_;
  }
  wake_.notify_one();
}

size_t Offload::run_completions() {
  std::deque<Completion> ready;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ready.swap(done_);
    pending_ -= ready.size();
  }
  for (Completion& c : ready) c();
  return ready.size();
}

size_t Offload::pending() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return pending_;
}

void Offload::loop() {
  // Below the event loop (SCHED_IDLE, inherited by the threads its work starts; nice +10 where
  // that is refused): on a busy machine the loop preempts the pool at once and answers its peers.
  const sched_param idle{};
  if (::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &idle) != 0) {
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
  }
  for (;;) {
    std::pair<Work, Failed> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    Completion completion;
    try {
      const CancelScope scope(&cancel_);
      completion = item.first();
    } catch (const Cancelled&) {
      completion = [] {};  // given up as the pool stops: its completion never runs
    } catch (const std::exception& e) {
      completion = [failed = std::move(item.second), what = std::string(e.what())] { failed(what); };
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    done_.push_back(completion ? std::move(completion) : Completion([] {}));
  }
}

}  // namespace fusetune::coordinator
