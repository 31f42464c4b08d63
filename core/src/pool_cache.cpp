// The caching pool's per-thread caches: free blocks a thread may reuse on
// the same stream without the pool lock. The shared pool behind them is
// pool_resource.cpp; the shared state pool_impl.hpp.
//
// Note [Thread caches]
// Every pool hit used to take the pool's one mutex: one thread's 4 KiB pair
// cost ~175 ns, eight threads on eight streams ~4.5 µs each on 2 cores and
// ~14 µs on a 16-core H200 host (issue 24). As in tcmalloc and mimalloc, each
// thread now has a cache in front of the shared pool, for requests up to
// 128 KiB:
// - A bin holds free blocks of one rounded size freed on (or taken for) one
//   stream; a thread has 8 bins, the least recently used one is flushed
//   when a ninth (stream, size) comes. A hit pops a block, records it in the
//   cache's own live table and counters: it takes the cache's mutex, which
//   other threads take only to flush it, to look a pointer up or to free a
//   block of it, never the pool lock.
// - Blocks move in batches: an empty bin takes half its capacity from the
//   shared pool under one lock (the first block by the shared rules, the
//   rest from the stream's own free list); a full bin gives half back. A
//   bin holds at most 256 KiB (2 to 64 blocks).
// - Stream safety is the shared pool's (Note [Stream-aware reuse]): a bin
//   serves only its own stream, where reuse needs no event; a block goes to
//   another stream only through the shared lists, which it enters with a
//   sequence number taken when it is given back, later than its free, so the
//   event that makes it safe covers the free (conservative, never wrong).
// - To the shared pool a cached block is allocated (never coalesced, never
//   released); the cache owns it. Accounting is exact: live bytes, blocks
//   and totals are the shared counters plus every cache's slot, summed;
//   cached bytes count as reserved and not allocated, so they are
//   reclaimable. release_cached(), wait_pending() (so trim() and the reclaim
//   ladder's first steps) flush every cache into the shared lists before
//   they look at them; forget_stream() flushes that stream's bins.
// - A thread that ends returns its cache: free blocks to the shared lists,
//   live ones to the shared live table, its counters to the shared ones. A
//   pool that is destroyed first retires every cache itself; a registry of
//   live pools (by a process-unique id) lets the ending thread tell.
// - Lock order: caches_mu, a cache's mu, the pool's mu; nothing here calls
//   the allocation hook, so no collection or finalizer runs under any of
//   them (Note [Locks and collections], allocator.cpp).
// At most 64 threads have a cache per pool; others use the shared path.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "gcpressure/config.hpp"
#include "gcpressure/pool_resource.hpp"
#include "pool_impl.hpp"

namespace gcpressure {
namespace detail {

namespace {

constexpr std::size_t k_cache_max = std::size_t{128} << 10;  // the largest request a cache serves
constexpr std::size_t k_bin_bytes = std::size_t{256} << 10;  // a bin's capacity

std::size_t bin_capacity(std::size_t size) noexcept { return std::clamp<std::size_t>(k_bin_bytes / size, 2, 64); }

// Never destroyed: a thread may end after static destruction.
std::mutex& pools_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<std::uint64_t, pool_impl*>& pools() {
  static auto* m = new std::unordered_map<std::uint64_t, pool_impl*>;
  return *m;
}
std::atomic<std::uint64_t> g_next_id{1};

struct tls_entry {
  std::uint64_t pool;
  thread_cache* cache;  // null: no slot was free, this thread uses the shared path
};

thread_local bool t_ended = false;  // trivially destructible: readable after tls_caches is gone

struct tls_caches {
  std::vector<tls_entry> entries;
  ~tls_caches() {
    t_ended = true;
    std::lock_guard<std::mutex> g(pools_mu());
    for (const auto& e : entries) {
      auto it = pools().find(e.pool);
      if (it != pools().end() && e.cache) it->second->retire(e.cache);
    }
  }
};
thread_local tls_caches t_caches;

void store_add(std::atomic<std::size_t>& a, std::size_t d) noexcept {
  a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
}
void store_sub(std::atomic<std::size_t>& a, std::size_t d) noexcept {
  a.store(a.load(std::memory_order_relaxed) - d, std::memory_order_relaxed);
}
void store_inc(std::atomic<std::uint64_t>& a, std::uint64_t d = 1) noexcept {
  a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
}
void atomic_max(std::atomic<std::size_t>& a, std::size_t v) noexcept {
  std::size_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

pool_impl::pool_impl(device_resource& up, pool_options o)
    : opts(o), upstream(up), id(g_next_id.fetch_add(1, std::memory_order_relaxed)), caching(o.thread_caches) {
  std::lock_guard<std::mutex> g(pools_mu());
  pools().emplace(id, this);
}

bool pool_impl::cachable(std::size_t rounded) const noexcept {
  return caching && rounded <= k_cache_max && rounded <= opts.small_threshold;
}

thread_cache* pool_impl::my_cache() noexcept {
  if (t_ended) return nullptr;
  for (const auto& e : t_caches.entries)
    if (e.pool == id) return e.cache;
  return new_cache();
}

thread_cache* pool_impl::new_cache() noexcept {
  auto& v = t_caches.entries;
  try {
    if (v.size() >= 8) {  // drop the entries of pools gone
      std::lock_guard<std::mutex> g(pools_mu());
      v.erase(std::remove_if(v.begin(), v.end(), [](const tls_entry& e) { return !pools().count(e.pool); }), v.end());
    }
    v.reserve(v.size() + 1);
    auto tc = std::make_unique<thread_cache>();
    std::lock_guard<std::mutex> g(caches_mu);
    thread_cache* got = nullptr;
    for (std::size_t i = 0; i < k_cache_slots; ++i) {
      if (caches[i]) continue;
      tc->slot = &slots[i];
      got = caches[i] = tc.release();
      if (slots_used.load(std::memory_order_relaxed) < i + 1) slots_used.store(i + 1, std::memory_order_release);
      break;
    }
    v.push_back({id, got});
    return got;
  } catch (...) {
    return nullptr;  // no memory for a cache: the shared path
  }
}

// The bin of (stream, size), made from the least recently used one if none.
cache_bin* pool_impl::bin_for(thread_cache& tc, stream_ref stream, std::size_t size) {
  cache_bin* victim = &tc.bins[0];
  for (auto& b : tc.bins) {
    if (b.size == size && b.stream == stream) {
      b.used = ++tc.tick;
      return &b;
    }
    if (victim->size != 0 && (b.size == 0 || b.used < victim->used)) victim = &b;
  }
  // Counted before the blocks go back: once given back another thread may
  // reuse their records at once (TSan: a read of b->size here raced
  // new_block's reset of the same record in another thread's split).
  for (block* b : victim->blocks) {
    store_sub(tc.slot->cached, b->size);
    store_sub(tc.slot->cached_blocks, 1);
  }
  if (!victim->blocks.empty()) {
    std::lock_guard<std::mutex> lk(mu);
    for (block* b : victim->blocks) give_back(b, victim->stream);
  }
  victim->blocks.clear();
  victim->size = 0;
  victim->blocks.reserve(bin_capacity(size));
  victim->stream = stream;
  victim->size = size;
  victim->used = ++tc.tick;
  return victim;
}

// Fills an empty bin with up to half its capacity in one lock. Returns
// false when the first block needed a new segment (a miss).
bool pool_impl::refill(thread_cache& tc, cache_bin& bin) {
  const std::size_t want = std::max<std::size_t>(1, bin_capacity(bin.size) / 2);
  std::lock_guard<std::mutex> lk(mu);
  block* b = find_free(bin.size, true, bin.stream);
  const bool hit = b != nullptr;
  if (!b) b = new_segment(bin.size, true, bin.stream);
  for (;;) {
    b->owner = bin.stream;
    split(b, bin.size);
    b->allocated = true;  // the cache's now
    bin.blocks.push_back(b);
    store_add(tc.slot->cached, b->size);
    store_add(tc.slot->cached_blocks, 1);
    if (bin.blocks.size() == want) break;
    auto own = lists.find(bin.stream);
    if (own == lists.end() || !(b = take_from(own->second.small, bin.size, UINT64_MAX))) break;
  }
  // The first block serves this allocation (a fresh segment's start, as
  // without a cache); the rest then in address order.
  std::reverse(bin.blocks.begin(), bin.blocks.end());
  return hit;
}

void pool_impl::give_back(block* b, stream_ref stream) noexcept {
  b->allocated = false;
  b->requested = 0;
  b->owner = stream;
  b->free_seq = seq++;  // later than its free: Note [Thread caches]
  try {
    coalesce(b);
  } catch (...) {
    // As in a shared free: the block stays out of the index rather than corrupt it.
  }
}

void* pool_impl::cache_allocate(thread_cache& tc, std::size_t bytes, std::size_t rounded, stream_ref stream) {
  std::lock_guard<std::mutex> lk(tc.mu);
  cache_bin* bin = bin_for(tc, stream, rounded);
  const bool hit = bin->blocks.empty() ? refill(tc, *bin) : true;
  block* b = bin->blocks.back();
  tc.live.insert(b->ptr, b);  // may throw bad_alloc: the block stays in the bin
  bin->blocks.pop_back();
  b->requested = bytes;
  cache_slot& s = *tc.slot;
  store_sub(s.cached, b->size);
  store_sub(s.cached_blocks, 1);
  store_add(s.requested, bytes);
  store_add(s.allocated, b->size);
  store_add(s.blocks, 1);
  store_inc(s.req_total, bytes);
  store_inc(s.alloc_total, b->size);
  store_inc(s.blocks_total);
  store_inc(s.allocations);
  if (hit) store_inc(s.hits);
  // Note [Peaks of sharded counters]
  const std::size_t req = s.requested.load(std::memory_order_relaxed), al = s.allocated.load(std::memory_order_relaxed),
                    nb = s.blocks.load(std::memory_order_relaxed);
  const std::uint64_t gen = peak_gen.load(std::memory_order_acquire);
  if (req > tc.req_mark || al > tc.alloc_mark || nb > tc.blocks_mark || gen != tc.gen) {
    tc.req_mark = req;
    tc.alloc_mark = al;
    tc.blocks_mark = nb;
    tc.gen = gen;
    fold_peaks();
  }
  return b->ptr;
}

// A block freed from this thread's cache stays in it; a full bin gives half
// of its blocks (and this one) back in one lock.
void pool_impl::cache_put(thread_cache& tc, block* b, stream_ref stream) noexcept {
  const std::size_t size = std::max(b->requested ? round_up(b->requested, opts.min_block) : b->size, opts.min_block);
  cache_bin* bin = nullptr;
  try {
    bin = bin_for(tc, stream, std::min(size, b->size));
  } catch (...) {
    // No memory for a bin: the shared lists take it.
  }
  if (bin && bin->blocks.size() < bin_capacity(bin->size)) {
    b->requested = 0;
    b->owner = stream;
    bin->blocks.push_back(b);  // within the reserved capacity
    store_add(tc.slot->cached, b->size);
    store_add(tc.slot->cached_blocks, 1);
    return;
  }
  std::lock_guard<std::mutex> lk(mu);
  give_back(b, stream);
  if (!bin) return;
  const std::size_t half = bin->blocks.size() / 2;  // the oldest half
  for (std::size_t k = 0; k < half; ++k) {
    block* o = bin->blocks[k];
    store_sub(tc.slot->cached, o->size);
    store_sub(tc.slot->cached_blocks, 1);
    give_back(o, bin->stream);
  }
  bin->blocks.erase(bin->blocks.begin(), bin->blocks.begin() + static_cast<std::ptrdiff_t>(half));
}

std::size_t pool_impl::free_from(thread_cache& tc, bool own, void* p, std::size_t bytes, stream_ref stream,
                                 bool strict, bool& found) noexcept {
  std::lock_guard<std::mutex> lk(tc.mu);
  block* b = tc.live.find(p);
  found = b != nullptr;
  if (!b) return 0;
  const std::size_t had = b->requested;
  if (strict && had != bytes) return had;
  tc.live.erase(p);
  cache_slot& s = *tc.slot;
  store_sub(s.requested, had);
  store_sub(s.allocated, b->size);
  store_sub(s.blocks, 1);
  store_inc(s.frees);
  if (own) {
    cache_put(tc, b, stream);
  } else {
    std::lock_guard<std::mutex> m(mu);
    give_back(b, stream);
  }
  return had;
}

// Note [Frees the caches never served]
// A free whose size no cache serves (over 128 KiB: 1 MiB arrays from CuPy,
// issue 22; every free with caches off) looks in the shared table first,
// under the pool lock alone: it used to take this thread's cache lock for a
// lookup that could only miss (and to make this thread a cache it would
// never use), ~130 of the 1 MiB pair's ~1 400 instructions (callgrind,
// 2026-12-06). A pointer is in one table at a time, so the order changes
// nothing but the cost; a miss (a wrong size given, bytes 0, a block moving
// out of a retiring cache) takes the full search below.
std::size_t pool_impl::free_any(void* p, std::size_t bytes, stream_ref stream, bool strict) noexcept {
  bool found = false;
  const auto from_shared = [&]() -> std::size_t {  // the shared table's lookup, under `mu`
    std::lock_guard<std::mutex> lk(mu);
    block* b = live.find(p);
    found = b != nullptr;
    if (!b) return 0;
    if (strict && b->requested != bytes) return b->requested;
    live.erase(p);
    return free_shared(b, stream);
  };
  if (!caching || bytes > std::min(k_cache_max, opts.small_threshold)) {  // rounds to more: !cachable()
    const std::size_t had = from_shared();
    if (found) return had;
  }
  thread_cache* mine = my_cache();
  // A block moves between tables only when a cache retires: a lookup that
  // raced with one looks again.
  for (int round = 0; round < 2; ++round) {
    const std::uint64_t seen = retirements.load(std::memory_order_acquire);
    if (mine) {
      const std::size_t had = free_from(*mine, true, p, bytes, stream, strict, found);
      if (found) return had;
    }
    {
      const std::size_t had = from_shared();
      if (found) return had;
    }
    {
      std::lock_guard<std::mutex> g(caches_mu);
      for (thread_cache* tc : caches) {
        if (!tc || tc == mine) continue;
        const std::size_t had = free_from(*tc, false, p, bytes, stream, strict, found);
        if (found) return had;
      }
    }
    if (retirements.load(std::memory_order_acquire) == seen) break;
  }
  return 0;
}

std::size_t pool_impl::live_requested(const void* p) noexcept {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (const block* b = live.find(p)) return b->requested;
  }
  std::lock_guard<std::mutex> g(caches_mu);
  for (thread_cache* tc : caches) {
    if (!tc) continue;
    std::lock_guard<std::mutex> lk(tc->mu);
    if (const block* b = tc->live.find(p)) return b->requested;
  }
  std::lock_guard<std::mutex> lk(mu);  // a block of a cache that retired meanwhile
  const block* b = live.find(p);
  return b ? b->requested : 0;
}

std::size_t pool_impl::flush_caches(stream_ref only) noexcept {
  std::size_t moved = 0;
  std::lock_guard<std::mutex> g(caches_mu);
  for (thread_cache* tc : caches) {
    if (!tc) continue;
    std::lock_guard<std::mutex> lk(tc->mu);
    std::lock_guard<std::mutex> m(mu);
    for (auto& bin : tc->bins) {
      if (only && bin.stream != only) continue;
      for (block* b : bin.blocks) {
        moved += b->size;
        store_sub(tc->slot->cached, b->size);
        store_sub(tc->slot->cached_blocks, 1);
        give_back(b, bin.stream);
      }
      bin.blocks.clear();
      if (only) bin.size = 0;  // the stream is going away: its key must not stay
    }
  }
  return moved;
}

void pool_impl::retire(thread_cache* tc) noexcept {
  std::lock_guard<std::mutex> g(caches_mu);
  {
    std::lock_guard<std::mutex> lk(tc->mu);
    std::lock_guard<std::mutex> m(mu);
    for (auto& bin : tc->bins)
      for (block* b : bin.blocks) give_back(b, bin.stream);
    try {
      tc->live.for_each([&](const void* p, block* b) { live.insert(p, b); });
    } catch (...) {
      // No memory to move them: they stay allocated, unfreeable (reported at the pool's end).
    }
    cache_slot& s = *tc->slot;
    c.requested += s.requested.load(std::memory_order_relaxed);
    c.allocated += s.allocated.load(std::memory_order_relaxed);
    req_total += s.req_total.load(std::memory_order_relaxed);
    alloc_total += s.alloc_total.load(std::memory_order_relaxed);
    blocks_total += s.blocks_total.load(std::memory_order_relaxed);
    c.allocations += s.allocations.load(std::memory_order_relaxed);
    c.frees += s.frees.load(std::memory_order_relaxed);
    c.hits += s.hits.load(std::memory_order_relaxed);
    for (auto* a : {&s.requested, &s.allocated, &s.blocks, &s.cached, &s.cached_blocks}) a->store(0, std::memory_order_relaxed);
    for (auto* a : {&s.req_total, &s.alloc_total, &s.blocks_total, &s.allocations, &s.frees, &s.hits})
      a->store(0, std::memory_order_relaxed);
    live_mirror.store(c.requested, std::memory_order_relaxed);
    alloc_mirror.store(c.allocated, std::memory_order_relaxed);
    blocks_mirror.store(live.size(), std::memory_order_relaxed);
    total_mirror.store(req_total, std::memory_order_relaxed);
    allocs_mirror.store(c.allocations, std::memory_order_relaxed);
  }
  caches[static_cast<std::size_t>(tc->slot - slots.data())] = nullptr;
  delete tc;
  retirements.fetch_add(1, std::memory_order_acq_rel);
}

void pool_impl::retire_all() noexcept {
  {
    std::lock_guard<std::mutex> g(pools_mu());  // waits for a thread retiring its cache here
    pools().erase(id);
  }
  for (std::size_t i = 0; i < k_cache_slots; ++i) {
    thread_cache* tc;
    {
      std::lock_guard<std::mutex> g(caches_mu);
      tc = caches[i];
    }
    if (tc) retire(tc);
  }
}

pool_impl::sums pool_impl::cache_sums() const noexcept {
  sums t;
  const std::size_t n = slots_used.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    const cache_slot& s = slots[i];
    t.requested += s.requested.load(std::memory_order_relaxed);
    t.allocated += s.allocated.load(std::memory_order_relaxed);
    t.blocks += s.blocks.load(std::memory_order_relaxed);
    t.cached += s.cached.load(std::memory_order_relaxed);
    t.cached_blocks += s.cached_blocks.load(std::memory_order_relaxed);
    t.req_total += s.req_total.load(std::memory_order_relaxed);
    t.alloc_total += s.alloc_total.load(std::memory_order_relaxed);
    t.blocks_total += s.blocks_total.load(std::memory_order_relaxed);
    t.allocations += s.allocations.load(std::memory_order_relaxed);
    t.frees += s.frees.load(std::memory_order_relaxed);
    t.hits += s.hits.load(std::memory_order_relaxed);
  }
  return t;
}

// Note [Peaks of sharded counters]
// A peak of a sum of per-thread counters would need every allocation to
// touch one shared line. Instead a cache folds (sums every slot and the
// shared counters into the peaks) when one of its own levels rises above
// the level it last folded at, or when the shared part may have risen since
// (peak_gen: every shared-path allocation and reset_peaks move it). With one
// thread that is exact: between two folds the shared part did not rise and
// the local one stayed at or below the folded level. With several, a peak
// that only a coincidence of other threads' unfolded levels reached can be
// missed: the peak is then at least every sum one thread could observe.
void pool_impl::fold_peaks() noexcept {
  const sums t = cache_sums();
  atomic_max(req_peak, live_mirror.load(std::memory_order_relaxed) + t.requested);
  atomic_max(alloc_peak, alloc_mirror.load(std::memory_order_relaxed) + t.allocated);
  atomic_max(blocks_peak, blocks_mirror.load(std::memory_order_relaxed) + t.blocks);
}

void pool_impl::note_shared_alloc() noexcept {
  live_mirror.store(c.requested, std::memory_order_relaxed);
  alloc_mirror.store(c.allocated, std::memory_order_relaxed);
  blocks_mirror.store(live.size(), std::memory_order_relaxed);
  total_mirror.store(req_total, std::memory_order_relaxed);
  allocs_mirror.store(c.allocations, std::memory_order_relaxed);
  fold_peaks();
  peak_gen.fetch_add(1, std::memory_order_release);
}

}  // namespace detail
}  // namespace gcpressure
