// The caching pool.
//
// Why a pool at all: cudaMalloc costs ~55 µs and synchronises the device;
// cudaMallocAsync ~1 µs. A GC'd runtime allocates a fresh array for every
// temporary, so the fast path must be a cache hit costing ~100 ns.
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
// never wrong. No device-wide synchronisation is ever needed.
//
// Note [Coalescing across owners]
// Adjacent free blocks merge when they have the same owner, or when the
// neighbour is already safe (its owner's event completed): the merged block
// then belongs to the freeing stream, with the newer sequence number.
#include "gcpressure/pool_resource.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"

namespace gcpressure {
namespace detail {

namespace {

struct segment;

struct block {
  char* ptr = nullptr;
  std::size_t size = 0;       // bytes of this block (rounded)
  std::size_t requested = 0;  // caller's bytes while allocated
  bool allocated = false;
  bool small = false;
  stream_ref owner = nullptr;  // allocating stream (live) or freeing stream (free)
  std::uint64_t free_seq = 0;
  block* prev = nullptr;
  block* next = nullptr;
  segment* seg = nullptr;
};

struct segment {
  char* base = nullptr;
  std::size_t size = 0;
  block* first = nullptr;
};

struct by_size {
  bool operator()(const block* a, const block* b) const noexcept {
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};
using free_set = std::set<block*, by_size>;

struct stream_lists {
  free_set small, large;
  event_ref event = nullptr;
  bool event_pending = false;
  std::uint64_t event_seq = 0;  // frees with seq < this are covered by `event`
  std::uint64_t safe_seq = 1;   // frees with seq < this are safe for every stream (0: always)
  free_set& for_size(bool is_small) { return is_small ? small : large; }
  bool empty() const { return small.empty() && large.empty(); }
};

}  // namespace

struct pool_impl {
  pool_options opts;
  device_resource& upstream;
  mutable std::mutex mu;
  std::unordered_map<stream_ref, stream_lists> lists;
  std::unordered_map<const void*, block*> live;
  std::vector<segment*> segments;
  std::uint64_t seq = 1;
  pool_counters c;

  pool_impl(device_resource& up, pool_options o) : opts(o), upstream(up) {}

  stream_ops& ops() { return upstream.streams(); }

  // Updates `s`'s event state without blocking; returns true if its safe
  // frontier moved.
  bool poll(stream_ref owner, stream_lists& s) {
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

  bool is_safe(const block* b) {
    auto it = lists.find(b->owner);
    return it != lists.end() && b->free_seq < it->second.safe_seq;
  }

  block* take_from(free_set& set, std::size_t size, std::uint64_t safe_below) {
    for (auto it = set.lower_bound(probe(size)); it != set.end(); ++it)
      if ((*it)->free_seq < safe_below) {
        block* b = *it;
        set.erase(it);
        return b;
      }
    return nullptr;
  }

  static block* probe(std::size_t size) {
    static thread_local block p;
    p.size = size;
    p.ptr = nullptr;
    return &p;
  }

  block* find_free(std::size_t size, bool is_small, stream_ref stream) {
    auto own = lists.find(stream);
    if (own != lists.end())
      if (block* b = take_from(own->second.for_size(is_small), size, UINT64_MAX)) return b;
    // Cross-stream: only blocks whose owner's event has completed.
    for (auto& [owner, s] : lists) {
      if (owner == stream || s.for_size(is_small).empty()) continue;
      poll(owner, s);
      if (block* b = take_from(s.for_size(is_small), size, s.safe_seq)) return b;
    }
    return nullptr;
  }

  void insert_free(block* b) { lists[b->owner].for_size(b->small).insert(b); }
  void erase_free(block* b) { lists[b->owner].for_size(b->small).erase(b); }

  std::size_t segment_size(std::size_t rounded) const {
    if (rounded <= opts.small_threshold) return opts.small_segment;
    if (rounded <= opts.medium_threshold) return opts.medium_segment;
    return round_up(rounded, opts.large_round);
  }

  block* new_segment(std::size_t rounded, bool is_small, stream_ref stream) {
    const std::size_t n = segment_size(rounded);
    void* p;
    try {
      p = upstream.allocate(n, stream);
    } catch (...) {
      ++c.upstream_failures;
      throw;
    }
    auto* seg = new segment{static_cast<char*>(p), n, nullptr};
    auto* b = new block;
    b->ptr = seg->base;
    b->size = n;
    b->small = is_small;
    b->owner = stream;
    // A fresh segment is ordered on `stream` (cudaMallocAsync): its unused
    // remainder needs an event before another stream may take it.
    b->free_seq = seq++;
    b->seg = seg;
    seg->first = b;
    segments.push_back(seg);
    ++c.upstream_allocations;
    c.reserved += n;
    return b;
  }

  void split(block* b, std::size_t rounded) {
    const std::size_t rest = b->size - rounded;
    const bool worth = b->small ? rest >= opts.min_block : rest > opts.small_threshold;
    if (!worth) return;
    auto* r = new block;
    r->ptr = b->ptr + rounded;
    r->size = rest;
    r->small = b->small;
    r->owner = b->owner;
    r->free_seq = b->free_seq;
    r->seg = b->seg;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = rounded;
    insert_free(r);
  }

  bool mergeable(const block* n, stream_ref owner) {
    return n && !n->allocated && (n->owner == owner || is_safe(n));
  }

  // Merges free neighbours into `b` (which is free, not yet indexed).
  void coalesce(block* b) {
    if (mergeable(b->prev, b->owner)) {
      block* p = b->prev;
      erase_free(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next) b->next->prev = p;
      p->owner = b->owner;
      p->free_seq = std::max(p->free_seq, b->free_seq);
      delete b;
      b = p;
    }
    if (mergeable(b->next, b->owner)) {
      block* n = b->next;
      erase_free(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next) n->next->prev = b;
      b->free_seq = std::max(b->free_seq, n->free_seq);
      delete n;
    }
    insert_free(b);
  }

  // Returns segments that are one free block upstream, ordered on the owner
  // stream (the upstream orders the free after that stream's work).
  std::size_t release_idle() noexcept {
    std::size_t released = 0;
    for (std::size_t i = 0; i < segments.size();) {
      segment* seg = segments[i];
      block* b = seg->first;
      if (b->allocated || b->size != seg->size) {
        ++i;
        continue;
      }
      erase_free(b);
      upstream.deallocate(seg->base, seg->size, b->owner);
      ++c.upstream_frees;
      c.reserved -= seg->size;
      released += seg->size;
      delete b;
      delete seg;
      segments[i] = segments.back();
      segments.pop_back();
    }
    for (auto it = lists.begin(); it != lists.end();) {
      if (it->second.empty() && !it->second.event_pending) it = lists.erase(it);
      else ++it;
    }
    return released;
  }
};

}  // namespace detail

using detail::block;
using detail::free_set;

pool_resource::pool_resource(device_resource& upstream, pool_options opts)
    : upstream_(upstream), impl_(std::make_unique<detail::pool_impl>(upstream, opts)) {
  GCPRESSURE_EXPECTS(opts.min_block >= alignment && opts.min_block % alignment == 0,
                     "pool_options.min_block must be a multiple of 256");
  GCPRESSURE_EXPECTS(opts.small_segment >= opts.small_threshold, "pool_options: small_segment < small_threshold");
}

pool_resource::~pool_resource() {
  auto& s = *impl_;
  std::lock_guard<std::mutex> lk(s.mu);
  s.release_idle();
  if (!s.live.empty()) {
    std::ostringstream os;
    os << "pool_resource destroyed with " << s.live.size() << " live block(s) (" << format_bytes(s.c.allocated)
       << "); their " << s.segments.size() << " segment(s) are leaked, not freed, so late frees stay harmless";
    detail::report_misuse(os.str());
  }
  for (auto& [owner, l] : s.lists)
    if (l.event_pending) s.ops().release(l.event);
  // Block bookkeeping of leaked segments.
  for (auto* seg : s.segments) {
    for (auto* b = seg->first; b;) {
      auto* n = b->next;
      delete b;
      b = n;
    }
    delete seg;
  }
}

std::size_t pool_resource::rounded_size(std::size_t bytes) const noexcept {
  return round_up(bytes ? bytes : 1, impl_->opts.min_block);
}

void* pool_resource::do_allocate(std::size_t bytes, stream_ref stream) {
  GCPRESSURE_EXPECTS(bytes > 0, "pool_resource::allocate: zero-byte request");
  if (bytes > max_request_bytes) {
    throw out_of_memory("pool_resource: request of " + std::to_string(bytes) + " bytes exceeds the maximum of " +
                        std::to_string(max_request_bytes));
  }
  auto& s = *impl_;
  const std::size_t rounded = rounded_size(bytes);
  const bool is_small = rounded <= s.opts.small_threshold;
  std::lock_guard<std::mutex> lk(s.mu);
  block* b = s.find_free(rounded, is_small, stream);
  if (b) ++s.c.hits;
  else b = s.new_segment(rounded, is_small, stream);
  b->owner = stream;
  s.split(b, rounded);
  b->allocated = true;
  b->requested = bytes;
  s.live.emplace(b->ptr, b);
  s.c.allocated += b->size;
  s.c.requested += bytes;
  return b->ptr;
}

void pool_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  deallocate_sized(p, bytes, stream);
}

std::size_t pool_resource::deallocate_sized(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (!p) return 0;
  auto& s = *impl_;
  std::unique_lock<std::mutex> lk(s.mu);
  auto it = s.live.find(p);
  if (it == s.live.end()) {
    ++s.c.misuse_errors;
    lk.unlock();
    std::ostringstream os;
    os << "pool_resource::deallocate: " << p << " (" << bytes
       << " bytes) is not a live block of this pool (double free or foreign pointer); ignored";
    detail::report_misuse(os.str());
    return 0;
  }
  block* b = it->second;
  s.live.erase(it);
  const bool size_ok = bytes == b->requested || bytes == 0;
  const std::size_t had = b->requested;
  s.c.allocated -= b->size;
  s.c.requested -= b->requested;
  b->allocated = false;
  b->requested = 0;
  b->owner = stream;
  b->free_seq = s.seq++;
  try {
    s.coalesce(b);
  } catch (...) {
    // std::set node allocation failed: keep the block out of the index
    // (leaked to the cache, never reused) rather than corrupt it.
  }
  if (!size_ok) {
    ++s.c.misuse_errors;
    lk.unlock();
    std::ostringstream os;
    os << "pool_resource::deallocate: " << p << " freed with " << bytes << " bytes but was allocated with " << had
       << "; freed anyway";
    detail::report_misuse(os.str());
  }
  return had;
}

std::size_t pool_resource::release_cached() noexcept {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->release_idle();
}

std::size_t pool_resource::wait_pending() {
  auto& s = *impl_;
  std::lock_guard<std::mutex> lk(s.mu);
  std::size_t waited = 0;
  for (auto& [owner, l] : s.lists) {
    if (l.empty() || l.safe_seq >= s.seq) continue;
    if (!l.event_pending) {
      l.event = s.ops().record(owner);
      l.event_pending = true;
      l.event_seq = s.seq;
    }
    s.ops().synchronize(l.event);
    s.ops().release(l.event);
    l.event = nullptr;
    l.event_pending = false;
    l.safe_seq = l.event_seq;
    ++waited;
  }
  s.c.events_waited += waited;
  // Every free block is now safe for every stream: rebuild the index so
  // that neighbours freed on different streams merge.
  for (auto& [owner, l] : s.lists) {
    l.small.clear();
    l.large.clear();
  }
  for (auto* seg : s.segments) {
    for (block* b = seg->first; b; b = b->next) {
      if (b->allocated) continue;
      while (b->next && !b->next->allocated) {
        block* n = b->next;
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        delete n;
      }
      b->free_seq = 0;
      s.insert_free(b);
    }
  }
  return waited;
}

std::size_t pool_resource::trim() {
  wait_pending();
  return release_cached();
}

bool pool_resource::owns_live(const void* p) const noexcept {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->live.count(p) != 0;
}

std::size_t pool_resource::live_size(const void* p) const noexcept {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto it = impl_->live.find(p);
  return it == impl_->live.end() ? 0 : it->second->requested;
}

pool_counters pool_resource::counters() const noexcept {
  auto& s = *impl_;
  std::lock_guard<std::mutex> lk(s.mu);
  pool_counters c = s.c;
  c.live_blocks = s.live.size();
  c.segments = s.segments.size();
  c.free_blocks = 0;
  c.pending_blocks = 0;
  for (auto& [owner, l] : s.lists) {
    c.free_blocks += l.small.size() + l.large.size();
    for (const free_set* set : {&l.small, &l.large})
      for (const auto* b : *set)
        if (b->free_seq >= l.safe_seq) ++c.pending_blocks;
  }
  return c;
}

// --- limiting_adaptor ---------------------------------------------------------

void* limiting_adaptor::do_allocate(std::size_t bytes, stream_ref stream) {
  GCPRESSURE_EXPECTS(bytes > 0, "limiting_adaptor::allocate: zero-byte request");
  const std::size_t n = round_up(bytes, alignment);
  {
    std::lock_guard<std::mutex> lk(mu_);
    const std::size_t lim = limit();
    const std::size_t cur = used();
    if (bytes > max_request_bytes || n > lim || cur > lim - n) {
      std::ostringstream os;
      os << "hard limit: reserving " << bytes << " more bytes would exceed the hard limit of " << lim << " bytes ("
         << cur << " reserved)";
      throw out_of_memory(os.str());
    }
    usage_.add(static_cast<std::int64_t>(n));
  }
  try {
    return upstream_.allocate(bytes, stream);
  } catch (...) {
    usage_.sub(static_cast<std::int64_t>(n));
    throw;
  }
}

void limiting_adaptor::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (!p) return;
  upstream_.deallocate(p, bytes, stream);
  usage_.sub(static_cast<std::int64_t>(round_up(bytes, alignment)));
}

}  // namespace gcpressure
