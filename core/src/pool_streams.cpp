// The caching pool's per-stream bookkeeping: which freed blocks another
// stream may take (events and safe frontiers), and the waits that make
// them safe (wait_pending, forget_stream). The size-class cache itself is
// in pool_resource.cpp; the shared state in pool_impl.hpp.
//
// Note [Stream-aware reuse]
// A freed block is owned by the stream it was freed on. That stream may reuse
// it at once: its later work runs after the work that used the block. Another
// stream may reuse it only after all work queued on the owner before the free
// has completed. We never record an event per free (a cudaEventRecord costs
// microseconds); instead every free gets a sequence number, and when a stream B
// misses in its own lists, we record one event on each other owner stream S
// (covering every free on S so far) and remember its sequence number. Once
// that event has completed, every block of S freed before it is "safe": any
// stream may take it. Recording the event later than the free is conservative,
// never wrong. Reuse never needs a device-wide synchronisation (the `cuda`
// backend's cudaFree, when trim returns a segment upstream, does
// synchronize the device: docs/DESIGN.md, Invariants).
#include <algorithm>
#include <exception>
#include <vector>

#include "gcpressure/pool_resource.hpp"
#include "pool_impl.hpp"

namespace gcpressure {
namespace detail {

// Updates `s`'s event state without blocking; returns true if its safe
// frontier moved.
bool pool_impl::poll(stream_ref owner, stream_lists& s) {
  if (owner == k_any_stream) return false;
  if (s.event_pending && ops().query(s.event)) {
    ops().release(s.event);
    s.event = nullptr;
    s.event_pending = false;
    s.safe_seq = s.event_seq;
    return true;
  }
  if (!s.event_pending && !s.empty() && s.safe_seq < seq) {
    s.event = ops().record(owner);
    s.event_pending = true;
    s.event_seq = seq;
    return poll(owner, s);
  }
  return false;
}

// Note [Waiting outside the lock], step 1 (caller holds `mu`): one event
// per owner with frees not known safe; with `only`, one on that stream.
std::vector<stream_wait> pool_impl::record_waits(stream_ref only) {
  std::vector<stream_wait> out;
  try {
    for (auto& [owner, l] : lists) {
      if (owner == k_any_stream) continue;
      if (only ? owner != only : (l.empty() || l.safe_seq >= seq)) continue;
      out.push_back({owner, nullptr, seq});
      out.back().event = ops().record(owner);
    }
  } catch (...) {
    for (const auto& w : out)
      if (w.event) ops().release(w.event);
    throw;
  }
  return out;
}

// Step 2 (without `mu`): waits for and releases every event, also when a
// synchronize throws (cuda_error), which is then rethrown.
void pool_impl::synchronize_all(std::vector<stream_wait>& waits) {
  std::exception_ptr failed;
  for (auto& w : waits) {
    if (!failed) try {
        ops().synchronize(w.event);
      } catch (...) {
        failed = std::current_exception();
      }
    ops().release(w.event);
    w.event = nullptr;
  }
  if (failed) std::rethrow_exception(failed);
}

// Step 3 (caller holds `mu`): the blocks now safe for every stream are
// re-indexed as such (free_seq 0), merging safe free neighbours freed on
// different streams. Blocks still unsafe keep their owner and number.
void pool_impl::reindex_safe() {
  for (auto& [owner, l] : lists)
    for (free_set* set : {&l.small, &l.large})
      for (auto it = set->begin(); it != set->end();) {
        if (is_safe(*it)) recycle(set->extract(it++));
        else ++it;
      }
  for (auto* sg : segments) {
    for (block* b = sg->first; b; b = b->next) {
      if (b->allocated || !is_safe(b)) continue;
      while (b->next && !b->next->allocated && is_safe(b->next)) absorb_next(b);
      b->free_seq = 0;
      insert_free(b);
    }
  }
}

}  // namespace detail

using detail::block;
using detail::free_set;

// Note [Waiting outside the lock]
// wait_pending and forget_stream block on events that may take as long as a
// kernel. Holding the pool mutex meanwhile would stall every thread's pool
// hit behind another stream's work. So they run in three steps:
//   1. under the lock, record one event per owner stream with frees not yet
//      known safe, and remember the sequence number it covers (every free
//      with a smaller number came before the record, on that stream);
//   2. without the lock, synchronize those events (they are private to this
//      call: poll() never sees them, so nobody else queries or releases them);
//   3. under the lock again, raise each owner's safe frontier to the number
//      its event covered (never lower it: poll() may have moved it further),
//      and re-index only the blocks now safe.
// Frees that happen between 1 and 3 get larger numbers than any event of
// step 1 covers, so they stay owned and unsafe: a block freed on A is still
// never handed to B before A's work queued before the free has completed.
// Meanwhile other threads allocate, free and poll as usual.
std::size_t pool_resource::wait_pending() {
  auto& s = *impl_;
  s.flush_caches(nullptr);  // Note [Thread caches]: cached blocks become everyone's too
  std::vector<detail::stream_wait> waits;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    waits = s.record_waits(nullptr);
  }
  s.synchronize_all(waits);  // Note [Waiting outside the lock]
  std::lock_guard<std::mutex> lk(s.mu);
  for (const auto& w : waits) {
    auto it = s.lists.find(w.owner);
    if (it != s.lists.end()) it->second.safe_seq = std::max(it->second.safe_seq, w.covers);
  }
  s.c.events_waited += waits.size();
  s.reindex_safe();
  return waits.size();
}

void pool_resource::forget_stream(stream_ref stream) {
  auto& s = *impl_;
  if (stream == detail::k_any_stream) return;
  s.flush_caches(stream);  // Note [Thread caches]: no bin may keep the stream
  // Note [Waiting outside the lock]. Frees on the stream that race with its
  // forgetting are covered by another round (the caller stops using it).
  for (;;) {
    std::vector<detail::stream_wait> waits;
    {
      std::lock_guard<std::mutex> lk(s.mu);
      if (s.lists.find(stream) == s.lists.end()) return;
      waits = s.record_waits(stream);  // the stream's last events from the pool
    }
    s.synchronize_all(waits);
    std::lock_guard<std::mutex> lk(s.mu);
    auto it = s.lists.find(stream);
    if (it == s.lists.end()) return;  // forgotten by a concurrent call
    auto& l = it->second;
    const std::uint64_t covers = waits.empty() ? 0 : waits.front().covers;
    std::vector<block*> moved;
    for (free_set* set : {&l.small, &l.large})
      for (auto b = set->begin(); b != set->end();)
        if ((*b)->free_seq < covers) {
          moved.push_back(*b);
          b = set->erase(b);
        } else {
          ++b;
        }
    for (block* b : moved) {
      b->owner = detail::k_any_stream;
      b->free_seq = 0;
    }
    const bool done = l.empty();
    if (done) {
      if (l.event_pending) s.ops().release(l.event);
      s.forget_lists();
      s.lists.erase(it);
    }
    for (block* b : moved) s.insert_free(b);
    // Live blocks allocated on it keep it as owner only until they are freed
    // (on a stream the caller names), so nothing else refers to it.
    if (done) {
      s.reindex_safe();  // its blocks merge with safe neighbours: whole free segments can be released
      return;
    }
  }
}

std::size_t pool_resource::trim() {
  wait_pending();
  return release_cached();
}

}  // namespace gcpressure
