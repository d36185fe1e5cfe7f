// Cancellation: long work (importing and planning a model, lowering its candidates, the barrier
// analysis over a grid's blocks) given up when whoever waits for it stops.
//
// A CancelToken is raised once, from any thread or a signal handler (raise is one lock-free
// atomic store). Work runs under a token while a CancelScope is open on its thread; parallel_for
// hands the scope's token to its own threads. Long loops call cancellation_point(), which throws
// Cancelled once the current token is raised, and costs one atomic load otherwise (nothing at all
// without a token). Guarantees: Cancelled is not an Error, so no handler that turns an Error into a
// failed candidate, task or job takes it for one: it unwinds to whoever opened the scope (the
// coordinator's pool drops the work; `tune` says it was interrupted). Work without a scope is never
// cancelled.
#pragma once

#include <atomic>
#include <exception>

namespace fusetune {

class CancelToken {
 public:
  void raise() { raised_.store(true, std::memory_order_relaxed); }
  bool raised() const { return raised_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> raised_{false};
  static_assert(std::atomic<bool>::is_always_lock_free, "raise() must be safe in a signal handler");
};

struct Cancelled : std::exception {
  const char* what() const noexcept override { return "cancelled"; }
};

// Makes `token` the current one on this thread until the scope closes (scopes nest).
class CancelScope {
 public:
  explicit CancelScope(const CancelToken* token);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const CancelToken* previous_;
};

const CancelToken* current_cancel_token();
// Throws Cancelled when the current token is raised.
void cancellation_point();

}  // namespace fusetune
