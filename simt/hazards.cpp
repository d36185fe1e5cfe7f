#include "simt/hazards.h"

#include <algorithm>
#include <cstring>

#include "simt/executor.h"

namespace fusetune::simt {

const char* hazard_name(Hazard h) {
  switch (h) {
    case Hazard::kReadAfterWrite: return "read-after-write hazard";
    case Hazard::kWriteAfterRead: return "write-after-read hazard";
    case Hazard::kWriteAfterWrite: return "write-after-write hazard";
    case Hazard::kUninitialized: return "read of uninitialised shared memory";
    case Hazard::kAsyncInFlight: return "access of shared memory a cp.async is still copying into";
    case Hazard::kTensorInFlight: return "access of shared memory a tensor copy (TMA) is still copying into";
    case Hazard::kAsyncRead: return "store to shared memory a wgmma is still reading";
    case Hazard::kNone: break;
  }
  return "no hazard";
}

namespace {

int warp_of(int thread) { return thread / kWarpLanes; }

// Whether an earlier access by `earlier` (at its warp's epoch `e`) is ordered before `now`'s:
// the same thread, or the same warp with a warp-synchronous operation between them.
bool ordered(int earlier, uint32_t e, const Access& now) {
  return earlier == now.thread || (warp_of(earlier) == warp_of(now.thread) && e < now.wepoch);
}

// A stamp of the barrier interval just before `now`'s, in the same block run.
bool previous_interval(uint64_t stamp, Stamp now) {
  return now.epoch > 0 && stamp == Stamp{now.gen, now.epoch - 1}.packed();
}

}  // namespace

// Whether the last write is ordered before access `a`: by its thread or warp, or (a tensor copy's)
// by the mbarrier phase that completed it, which `a`'s thread observed.
bool Cell::after_write(const Access& a) const {
  return w_token != 0 ? a.observed(w_token) : ordered(w_thread, w_wepoch, a);
}

Hazard Cell::load(Stamp now, const Access& a, bool init, Access* other, bool* spans) {
  Hazard h = Hazard::kNone;
  // The barrier just passed orders this access after the last store only if nothing else does
  // (the same thread, or a warp-synchronous operation of the same warp between them).
  if (previous_interval(w_stamp, now) && !after_write(a)) *spans = true;
  if (a_thread >= 0) {
    h = a_tensor ? Hazard::kTensorInFlight : Hazard::kAsyncInFlight;
    *other = {a_thread, 0, a_site};
  } else if (init && (w_stamp >> 32) != now.gen) {
    h = Hazard::kUninitialized;
  } else if (w_stamp == now.packed() && !after_write(a)) {
    h = Hazard::kReadAfterWrite;
    *other = {w_thread, w_wepoch, w_site};
  }
  if (r_stamp != now.packed()) {
    p_stamp = r_stamp;
    p_thread = r_thread;
    p_others = r_others || r_many_warps;
    r_stamp = now.packed();
    r_thread = a.thread;
    r_wepoch = a.wepoch;
    r_site = a.site;
    r_many_warps = r_others = false;
  } else if (warp_of(r_thread) != warp_of(a.thread)) {
    r_many_warps = true;
  } else if (a.wepoch > r_wepoch) {
    r_thread = a.thread;
    r_wepoch = a.wepoch;
    r_site = a.site;
    r_others = false;
  } else if (a.wepoch == r_wepoch && a.thread != r_thread) {
    r_others = true;
  }
  return h;
}

Hazard Cell::store(Stamp now, const Access& a, Access* other, bool* spans) {
  Hazard h = Hazard::kNone;
  if (previous_interval(w_stamp, now) && !after_write(a)) *spans = true;
  if (previous_interval(r_stamp, now) &&
      (r_many_warps || warp_of(r_thread) != warp_of(a.thread) || (r_wepoch == a.wepoch && (r_thread != a.thread || r_others)))) {
    *spans = true;
  }
  if (r_stamp == now.packed() && previous_interval(p_stamp, now) && (p_thread != a.thread || p_others)) *spans = true;
  if (a_thread >= 0) {
    h = a_tensor ? Hazard::kTensorInFlight : Hazard::kAsyncInFlight;
    *other = {a_thread, 0, a_site};
  } else if (m_readers > 0) {
    h = Hazard::kAsyncRead;
    *other = {m_thread, 0, m_site};
  } else if (w_stamp == now.packed() && !after_write(a)) {
    h = Hazard::kWriteAfterWrite;
    *other = {w_thread, w_wepoch, w_site};
  } else if (r_stamp == now.packed()) {
    const bool same_warp = warp_of(r_thread) == warp_of(a.thread);
    if (r_many_warps || !same_warp || (r_wepoch == a.wepoch && (r_thread != a.thread || r_others))) {
      h = Hazard::kWriteAfterRead;
      *other = {r_thread, r_wepoch, r_site};
    }
  }
  w_stamp = now.packed();
  w_thread = a.thread;
  w_wepoch = a.wepoch;
  w_site = a.site;
  w_token = 0;
  return h;
}

Hazard Cell::issue_async(Stamp now, const Access& a, Access* other, bool* spans, bool tensor) {
  const Hazard h = store(now, a, other, spans);
  a_thread = a.thread;
  a_tensor = tensor;
  a_site = a.site;
  return h;
}

Hazard Cell::land_async(Stamp now, const Access& a, Access* other, bool* spans, uint32_t token) {
  a_thread = -1;
  a_site = nullptr;
  const Hazard h = store(now, a, other, spans);
  w_token = token;
  return h;
}

Hazard Cell::issue_async_read(Stamp now, const Access& a, Access* other, bool* spans) {
  const Hazard h = load(now, a, true, other, spans);
  ++m_readers;
  m_thread = a.thread;
  m_site = a.site;
  return h;
}

void Cell::complete_async_read(Stamp now, const Access& a) {
  if (m_readers > 0 && --m_readers == 0) {
    m_thread = -1;
    m_site = nullptr;
  }
  // Recorded as a read at the wait; a store another thread made while the read was in flight was
  // reported then (kAsyncRead), so this read's own verdict adds nothing.
  Access other;
  bool spans = false;
  load(now, a, false, &other, &spans);
}

bool ClockedCell::orders(uint32_t interval, Hazard h, int thread, const Clocks& now) const {
  if (epoch != interval) return false;
  const auto write = [&] { return w_thread >= 0 && now.after(w_thread, w_clock); };
  const auto reads = [&] {
    return std::all_of(readers.begin(), readers.end(),
                       [&](const std::pair<int32_t, uint32_t>& r) { return r.first == thread || now.after(r.first, r.second); });
  };
  switch (h) {
    case Hazard::kReadAfterWrite: return write();
    case Hazard::kWriteAfterRead: return reads();
    case Hazard::kWriteAfterWrite: return write() && reads();
    default: return false;
  }
}

void ClockedCell::record(uint32_t interval, bool store, int thread, uint32_t clock, bool tensor) {
  if (epoch != interval) {
    epoch = interval;
    w_thread = -1;
    readers.clear();
  }
  if (store) {
    w_thread = tensor ? -1 : thread;
    w_clock = clock;
    return;
  }
  for (auto& r : readers) {
    if (r.first == thread) {
      r.second = std::max(r.second, clock);
      return;
    }
  }
  readers.emplace_back(thread, clock);
}

CrossBlock::CrossBlock(size_t elements)
    : elements_(elements),
      writer_(std::make_unique<std::atomic<uint32_t>[]>(elements)),
      reader_(std::make_unique<std::atomic<uint32_t>[]>(elements)),
      value_(std::make_unique<uint64_t[]>(elements)),
      when_(std::make_unique<uint64_t[]>(elements)) {
  for (size_t i = 0; i < elements; ++i) {
    writer_[i].store(0, std::memory_order_relaxed);
    reader_[i].store(0, std::memory_order_relaxed);
  }
}

CrossBlock::Conflict CrossBlock::load(size_t element, uint32_t block) {
  if (element >= elements_) return {};
  const uint32_t me = block + 1;
  const uint32_t published = writer_[element].load(std::memory_order_acquire), w = published & ~kPublished;
  uint32_t r = 0;
  if (!reader_[element].compare_exchange_strong(r, me, std::memory_order_relaxed) && r != me && r != kMany) {
    reader_[element].store(kMany, std::memory_order_relaxed);
  }
  if (w == 0 || w == me) return {};
  Conflict c{static_cast<long long>(w - 1), true};
  if ((published & kPublished) != 0) {
    c.writer_thread = static_cast<int>(when_[element] & 0xffffffffu);
    c.writer_epoch = static_cast<uint32_t>(when_[element] >> 32);
  }
  return c;
}

CrossBlock::Conflict CrossBlock::store(size_t element, uint32_t block, const void* value, int bytes, int thread, uint32_t epoch) {
  if (element >= elements_) return {};
  const uint32_t me = block + 1;
  uint64_t mine = 0;
  std::memcpy(&mine, value, static_cast<size_t>(std::min(bytes, 8)));
  uint32_t w = 0;
  if (writer_[element].compare_exchange_strong(w, me, std::memory_order_acq_rel)) {
    value_[element] = mine;
    when_[element] = (uint64_t{epoch} << 32) | static_cast<uint32_t>(thread);
    writer_[element].store(me | kPublished, std::memory_order_release);
  } else if ((w & ~kPublished) != me) {
    while ((w & kPublished) == 0) w = writer_[element].load(std::memory_order_acquire);  // a store in flight
    return {static_cast<long long>((w & ~kPublished) - 1), true, value_[element] == mine};
  }
  const uint32_t r = reader_[element].load(std::memory_order_relaxed);
  if (r == kMany) return {kMany, false};
  if (r != 0 && r != me) return {static_cast<long long>(r - 1), false};
  return {};
}

}  // namespace fusetune::simt
