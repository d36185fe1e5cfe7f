#include "core/cancel.h"

namespace fusetune {

namespace {
thread_local const CancelToken* t_current = nullptr;
}  // namespace

CancelScope::CancelScope(const CancelToken* token) : previous_(t_current) { t_current = token; }

CancelScope::~CancelScope() { t_current = previous_; }

const CancelToken* current_cancel_token() { return t_current; }

void cancellation_point() {
  if (t_current != nullptr && t_current->raised()) throw Cancelled();
}

}  // namespace fusetune
