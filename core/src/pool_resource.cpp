// The caching pool.
//
// Why a pool at all: cudaMalloc costs ~55 µs and synchronises the device;
// cudaMallocAsync ~1 µs. A GC'd runtime allocates a fresh array for every
// temporary, so the fast path must be a cache hit costing ~100 ns.
//
// This file is the size-class cache: segments from the upstream, best fit
// per owner stream, splitting, coalescing, accounting. Which stream may take
// a freed block (events, safe frontiers, waits) is pool_streams.cpp; the
// shared state pool_impl.hpp.
//
// Note [Coalescing across owners]
// Adjacent free blocks merge when they have the same owner, or when the
// neighbour is already safe (its owner's event completed): the merged block
// then belongs to the freeing stream, with the newer sequence number.
#include <algorithm>
#include <sstream>

#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/pool_resource.hpp"
#include "pool_impl.hpp"

namespace gcpressure {
namespace detail {

namespace {

// A search key for free_set::lower_bound (thread-local: no allocation).
block* probe(std::size_t size) {
  static thread_local block p;
  p.size = size;
  p.ptr = nullptr;
  return &p;
}

}  // namespace

block* pool_impl::take_from(free_set& set, std::size_t size, std::uint64_t safe_below) {
  for (auto it = set.lower_bound(probe(size)); it != set.end(); ++it)
    if ((*it)->free_seq < safe_below) {
      block* b = *it;
      recycle(set.extract(it));
      return b;
    }
  return nullptr;
}

block* pool_impl::find_free(std::size_t size, bool is_small, stream_ref stream) {
  if (stream_lists* own = find_lists(stream))
    if (block* b = take_from(own->for_size(is_small), size, UINT64_MAX)) return b;
  // Cross-stream: only blocks whose owner's event has completed.
  for (auto& [owner, s] : lists) {
    if (owner == stream || s.for_size(is_small).empty()) continue;
    poll(owner, s);
    const std::uint64_t safe = owner == k_any_stream ? UINT64_MAX : s.safe_seq;
    if (block* b = take_from(s.for_size(is_small), size, safe)) return b;
  }
  return nullptr;
}

void pool_impl::insert_free(block* b) {
  free_set& set = lists_of(b->owner).for_size(b->small);
  if (!spare_nodes.empty()) {
    free_set::node_type nh = std::move(spare_nodes.back());
    spare_nodes.pop_back();
    nh.value() = b;
    set.insert(std::move(nh));
  } else {
    set.insert(b);
  }
}

// Note [Segments near the limit]
// A segment is shared (small, medium) or rounded up (large: to 2 MiB, the
// CUDA driver's page) so that later requests reuse it without a trip
// upstream. Both leave bytes a stream of one request size cannot use: the
// tail of a 20 MiB segment holding 8 MiB blocks (4 MiB), the rounding of an
// 11 MiB block (1 MiB). With a 64 MiB hard limit, 8 MiB blocks used to fit 6
// (three 20 MiB segments, 12 MiB of tails cached and unusable) and 7 MiB
// blocks 6. Two rules make the bytes under a limit usable:
// - a medium segment holds a whole number of the request that opened it,
//   floor(20 MiB / r) blocks rounded up to 2 MiB: 16 MiB for 8 MiB blocks,
//   14 MiB for 7 MiB ones (no tail for one size; mixed sizes share it as
//   before);
// - near the limit, where the upstream's headroom after this segment could
//   not hold another one like it, the segment is exact (the request rounded
//   to min_block).
// Blocks of every size from 1 to 33 MiB then fill a 64 MiB limit to within
// one block (Pool.BlocksOfEverySizeFillTheLimit). Far from a limit the 2 MiB
// rounding of large segments stays (as in PyTorch's allocator): 11 MiB
// blocks under a 1 GiB limit fit 85, not 93.
std::size_t pool_impl::segment_size(std::size_t rounded, std::size_t headroom) const {
  std::size_t n;
  if (rounded <= opts.small_threshold) {
    n = opts.small_segment;
  } else if (rounded <= opts.medium_threshold) {
    const std::size_t k = std::max<std::size_t>(1, opts.medium_segment / rounded);
    n = round_up(k * rounded, opts.large_round);
  } else {
    n = round_up(rounded, opts.large_round);
  }
  if (n > rounded && headroom / 2 < n) return rounded;
  return n;
}

block* pool_impl::new_segment(std::size_t rounded, bool is_small, stream_ref stream) {
  std::size_t n = segment_size(rounded, upstream.headroom());
  void* p;
  try {
    p = upstream.allocate(n, stream);
  } catch (const out_of_memory&) {
    // A shared segment that does not fit (under a small hard limit, or on
    // a nearly full device) must not fail a request that fits by itself.
    if (n == rounded) {
      ++c.upstream_failures;
      throw;
    }
    n = rounded;
    try {
      p = upstream.allocate(n, stream);
    } catch (...) {
      ++c.upstream_failures;
      throw;
    }
  } catch (...) {
    ++c.upstream_failures;
    throw;
  }
  auto* seg = new segment{static_cast<char*>(p), n, nullptr};
  auto* b = new_block();
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

void pool_impl::split(block* b, std::size_t rounded) {
  const std::size_t rest = b->size - rounded;
  const bool worth = b->small ? rest >= opts.min_block : rest > opts.small_threshold;
  if (!worth) return;
  auto* r = new_block();
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

// Merges free neighbours into `b` (which is free, not yet indexed).
void pool_impl::coalesce(block* b) {
  if (mergeable(b->prev, b->owner)) {
    block* p = b->prev;
    erase_free(p);
    p->owner = b->owner;
    absorb_next(p);
    b = p;
  }
  if (mergeable(b->next, b->owner)) {
    erase_free(b->next);
    absorb_next(b);
  }
  insert_free(b);
}

void pool_impl::absorb_next(block* b) noexcept {
  block* n = b->next;
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  b->free_seq = std::max(b->free_seq, n->free_seq);
  free_block(n);
}

// Returns segments that are one free block upstream, ordered on the owner
// stream (the upstream orders the free after that stream's work).
std::size_t pool_impl::release_idle() noexcept {
  std::size_t released = 0;
  for (std::size_t i = 0; i < segments.size();) {
    segment* seg = segments[i];
    block* b = seg->first;
    if (b->allocated || b->size != seg->size) {
      ++i;
      continue;
    }
    erase_free(b);
    upstream.deallocate(seg->base, seg->size, b->owner == k_any_stream ? nullptr : b->owner);
    ++c.upstream_frees;
    c.reserved -= seg->size;
    released += seg->size;
    free_block(b);
    delete seg;
    segments[i] = segments.back();
    segments.pop_back();
  }
  forget_lists();
  for (auto it = lists.begin(); it != lists.end();) {
    if (it->second.empty() && !it->second.event_pending) it = lists.erase(it);
    else ++it;
  }
  return released;
}

std::size_t pool_impl::free_shared(block* b, stream_ref stream) noexcept {
  const std::size_t had = b->requested;
  c.allocated -= b->size;
  c.requested -= b->requested;
  ++c.frees;
  live_mirror.store(c.requested, std::memory_order_relaxed);
  alloc_mirror.store(c.allocated, std::memory_order_relaxed);
  blocks_mirror.store(live.size(), std::memory_order_relaxed);
  b->allocated = false;
  b->requested = 0;
  b->owner = stream;
  b->free_seq = seq++;
  try {
    coalesce(b);
  } catch (...) {
    // std::set node allocation failed: keep the block out of the index
    // (leaked to the cache, never reused) rather than corrupt it.
  }
  return had;
}

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
  s.retire_all();  // Note [Thread caches]: cached blocks back, live ones into `live`
  std::lock_guard<std::mutex> lk(s.mu);
  s.release_idle();
  if (s.live.size() != 0) {
    std::ostringstream os;
    os << "pool_resource destroyed with " << s.live.size() << " live block(s) (" << format_bytes(s.c.allocated)
       << "); their " << s.segments.size() << " segment(s) are leaked, not freed, so late frees stay harmless";
    detail::report_misuse(os.str());
    for (auto* seg : s.segments) detail::leaked_on_purpose(seg->base);  // Note [Leaks on purpose]
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
  if (s.cachable(rounded))
    if (detail::thread_cache* tc = s.my_cache()) return s.cache_allocate(*tc, bytes, rounded, stream);
  std::lock_guard<std::mutex> lk(s.mu);
  block* b = s.find_free(rounded, is_small, stream);
  if (b) ++s.c.hits;
  else b = s.new_segment(rounded, is_small, stream);
  b->owner = stream;
  s.split(b, rounded);
  b->allocated = true;
  b->requested = bytes;
  s.live.insert(b->ptr, b);
  s.c.allocated += b->size;
  s.c.requested += bytes;
  s.req_total += bytes;
  s.alloc_total += b->size;
  ++s.blocks_total;
  ++s.c.allocations;
  s.note_shared_alloc();  // mirrors and peaks
  return b->ptr;
}

void pool_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  deallocate_sized(p, bytes, stream);
}

std::size_t pool_resource::deallocate_sized(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (!p) return 0;
  auto& s = *impl_;
  const std::size_t had = s.free_any(p, bytes, stream, false);
  if (had == 0 || (bytes != had && bytes != 0)) {
    {
      std::lock_guard<std::mutex> lk(s.mu);
      ++s.c.misuse_errors;
    }
    std::ostringstream os;
    if (had == 0)
      os << "pool_resource::deallocate: " << p << " (" << bytes
         << " bytes) is not a live block of this pool (double free or foreign pointer); ignored";
    else
      os << "pool_resource::deallocate: " << p << " freed with " << bytes << " bytes but was allocated with " << had
         << "; freed anyway";
    detail::report_misuse(os.str());
  }
  return had;
}

std::size_t pool_resource::free_if_live(void* p, std::size_t bytes, stream_ref stream) noexcept {
  return p ? impl_->free_any(p, bytes, stream, true) : 0;
}

std::size_t pool_resource::release_cached() noexcept {
  impl_->flush_caches(nullptr);  // Note [Thread caches]: cached bytes are reclaimable
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->release_idle();
}

bool pool_resource::owns_live(const void* p) const noexcept { return impl_->live_requested(p) != 0; }

std::size_t pool_resource::live_size(const void* p) const noexcept { return impl_->live_requested(p); }

// Lock-free: the shared mirrors plus every thread cache's slot.
std::size_t pool_resource::live_bytes() const noexcept {
  return impl_->live_mirror.load(std::memory_order_relaxed) + impl_->cache_sums().requested;
}
std::uint64_t pool_resource::total_requested() const noexcept {
  return impl_->total_mirror.load(std::memory_order_relaxed) + impl_->cache_sums().req_total;
}
std::uint64_t pool_resource::allocations() const noexcept {
  return impl_->allocs_mirror.load(std::memory_order_relaxed) + impl_->cache_sums().allocations;
}

void pool_resource::reset_peaks() noexcept {
  auto& s = *impl_;
  std::lock_guard<std::mutex> g(s.caches_mu);
  std::lock_guard<std::mutex> lk(s.mu);
  const auto t = s.cache_sums();
  s.req_peak.store(s.c.requested + t.requested, std::memory_order_relaxed);
  s.alloc_peak.store(s.c.allocated + t.allocated, std::memory_order_relaxed);
  s.blocks_peak.store(s.live.size() + t.blocks, std::memory_order_relaxed);
  s.peak_gen.fetch_add(1, std::memory_order_release);  // every cache folds at its next allocation
}

pool_counters pool_resource::counters() const noexcept {
  auto& s = *impl_;
  std::lock_guard<std::mutex> g(s.caches_mu);  // no cache retires while we sum
  std::lock_guard<std::mutex> lk(s.mu);
  const auto t = s.cache_sums();
  pool_counters c = s.c;
  c.requested += t.requested;
  c.allocated += t.allocated;
  c.live_blocks = s.live.size() + t.blocks;
  c.allocations += t.allocations;
  c.frees += t.frees;
  c.hits += t.hits;
  c.local_cached = t.cached;
  const auto stat = [](std::size_t cur, const std::atomic<std::size_t>& peak, std::uint64_t total) {
    return stat_value{static_cast<std::int64_t>(cur),
                      static_cast<std::int64_t>(std::max(cur, peak.load(std::memory_order_relaxed))),
                      static_cast<std::int64_t>(total)};
  };
  c.requested_stat = stat(c.requested, s.req_peak, s.req_total + t.req_total);
  c.allocated_stat = stat(c.allocated, s.alloc_peak, s.alloc_total + t.alloc_total);
  c.blocks_stat = stat(c.live_blocks, s.blocks_peak, s.blocks_total + t.blocks_total);
  c.segments = s.segments.size();
  c.free_blocks = t.cached_blocks;
  c.pending_blocks = 0;
  for (auto& [owner, l] : s.lists) {
    c.free_blocks += l.small.size() + l.large.size();
    for (const free_set* set : {&l.small, &l.large}) {
      if (!set->empty()) c.largest_free = std::max(c.largest_free, (*set->rbegin())->size);
      for (const auto* b : *set)
        if (b->free_seq >= l.safe_seq) ++c.pending_blocks;
    }
  }
  // What release_idle() would return now.
  for (const auto* seg : s.segments)
    if (!seg->first->allocated && seg->first->size == seg->size) c.releasable += seg->size;
  return c;
}

}  // namespace gcpressure
