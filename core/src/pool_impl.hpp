// Internal to core/src: the caching pool's state (pool_impl), shared by its
// three rooms: pool_resource.cpp (the size-class cache: segments, best fit,
// splitting, coalescing, accounting), pool_streams.cpp (per-stream event
// and safe-frontier bookkeeping: Note [Stream-aware reuse]) and
// pool_cache.cpp (per-thread caches in front of it: Note [Thread caches]).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "gcpressure/pool_resource.hpp"

namespace gcpressure {
namespace detail {

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

// An event wait_pending/forget_stream recorded on `owner`: once it has
// completed, every free on `owner` numbered below `covers` is safe.
struct stream_wait {
  stream_ref owner = nullptr;
  event_ref event = nullptr;
  std::uint64_t covers = 0;
};

// Live blocks by address: open addressing with linear probing and
// backward-shift deletion, so a pool hit allocates no hash node.
class ptr_table {
 public:
  ptr_table() : slots_(1024) {}
  std::size_t size() const noexcept { return size_; }
  block* find(const void* p) const noexcept {
    for (std::size_t i = index(p);; i = (i + 1) & mask()) {
      const auto& e = slots_[i];
      if (!e.key) return nullptr;
      if (e.key == p) return e.value;
    }
  }
  void insert(const void* p, block* b) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    place(p, b);
    ++size_;
  }
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const auto& e : slots_)
      if (e.key) fn(e.key, e.value);
  }
  block* erase(const void* p) noexcept {
    std::size_t i = index(p);
    for (;; i = (i + 1) & mask()) {
      if (!slots_[i].key) return nullptr;
      if (slots_[i].key == p) break;
    }
    block* b = slots_[i].value;
    // Shift later entries of the probe run back into the hole.
    for (std::size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (!slots_[j].key) break;
      const std::size_t home = index(slots_[j].key);
      const bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
    return b;
  }

 private:
  struct entry {
    const void* key = nullptr;
    block* value = nullptr;
  };
  std::size_t mask() const noexcept { return slots_.size() - 1; }
  std::size_t index(const void* p) const noexcept {
    return static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(p) >> 8) * 0x9E3779B97F4A7C15ULL >> 20) & mask();
  }
  void place(const void* p, block* b) noexcept {
    std::size_t i = index(p);
    while (slots_[i].key) i = (i + 1) & mask();
    slots_[i] = {p, b};
  }
  void grow() {
    std::vector<entry> old(slots_.size() * 2);
    old.swap(slots_);
    for (const auto& e : old)
      if (e.key) place(e.key, e.value);
  }
  std::vector<entry> slots_;
  std::size_t size_ = 0;
};

// Owner of blocks whose stream was forgotten (forget_stream): their work has
// completed, so any stream may take them and no event is ever recorded.
inline stream_ref const k_any_stream = reinterpret_cast<stream_ref>(~std::uintptr_t{0});

// Note [Thread caches] (pool_cache.cpp). Counters of one thread cache,
// written under its mutex, read lock-free by the pool's sums. A slot outlives
// the cache that uses it (the pool owns the array), so a lock-free reader
// never touches freed memory.
struct alignas(64) cache_slot {
  std::atomic<std::size_t> requested{0}, allocated{0}, blocks{0};  // live, allocated from the cache
  std::atomic<std::size_t> cached{0}, cached_blocks{0};             // free, held in its bins
  std::atomic<std::uint64_t> req_total{0}, alloc_total{0}, blocks_total{0};
  std::atomic<std::uint64_t> allocations{0}, frees{0}, hits{0};
};

// Free blocks of one size freed on (or taken for) one stream.
struct cache_bin {
  stream_ref stream = nullptr;
  std::size_t size = 0;  // rounded; 0: an unused bin
  std::uint64_t used = 0;
  std::vector<block*> blocks;  // capacity reserved: a hit or free allocates nothing
};

struct thread_cache {
  static constexpr std::size_t k_bins = 8;
  std::mutex mu;  // the owner's; others take it only to flush, look up or free a block of it
  cache_slot* slot = nullptr;
  ptr_table live;  // blocks allocated from this cache and not freed
  std::array<cache_bin, k_bins> bins;
  std::uint64_t tick = 0;
  // Note [Peaks of sharded counters]: the local levels last folded.
  std::size_t req_mark = 0, alloc_mark = 0, blocks_mark = 0;
  std::uint64_t gen = ~std::uint64_t{0};
};

// Every member runs with `mu` held unless it says otherwise.
struct pool_impl {
  pool_options opts;
  device_resource& upstream;
  mutable std::mutex mu;
  std::unordered_map<stream_ref, stream_lists> lists;
  // Note [The last stream's lists]: the entry of `lists` a shared alloc or
  // free used last (null: none). An unordered_map's entries stay where they
  // are until erased, so this is valid until an erase (forget_lists).
  stream_ref lists_key = nullptr;
  stream_lists* lists_at = nullptr;
  stream_lists* find_lists(stream_ref owner) {
    if (lists_at && lists_key == owner) return lists_at;
    auto it = lists.find(owner);
    if (it == lists.end()) return nullptr;
    lists_key = owner;
    return lists_at = &it->second;
  }
  stream_lists& lists_of(stream_ref owner) {  // lists[owner]
    if (lists_at && lists_key == owner) return *lists_at;
    stream_lists& l = lists[owner];
    lists_key = owner;
    return *(lists_at = &l);
  }
  void forget_lists() noexcept { lists_at = nullptr; }  // before any erase from `lists`
  ptr_table live;
  std::vector<segment*> segments;
  std::uint64_t seq = 1;
  pool_counters c;
  // Note [Accounting]: plain counters under `mu`, mirrored for lock-free readers.
  // Peaks are atomics: thread caches fold into them without `mu`.
  std::atomic<std::size_t> req_peak{0}, alloc_peak{0}, blocks_peak{0};
  std::uint64_t req_total = 0, alloc_total = 0, blocks_total = 0;
  std::atomic<std::size_t> live_mirror{0}, alloc_mirror{0}, blocks_mirror{0};
  std::atomic<std::uint64_t> total_mirror{0}, allocs_mirror{0};

  // Note [Thread caches] (pool_cache.cpp). Lock order: caches_mu, then a
  // cache's mu, then `mu`; never two caches' mutexes at once.
  static constexpr std::size_t k_cache_slots = 64;
  const std::uint64_t id;  // unique over the process: the thread-local lookup's key
  std::mutex caches_mu;     // guards `caches` changing (creation, retirement)
  std::array<thread_cache*, k_cache_slots> caches{};
  std::array<cache_slot, k_cache_slots> slots;
  std::atomic<std::size_t> slots_used{0};       // slots below this may be non-zero
  std::atomic<std::uint64_t> peak_gen{0};       // Note [Peaks of sharded counters]
  std::atomic<std::uint64_t> retirements{0};    // a free's lookup retries when this moved
  bool caching = true;
  // Recycled block objects and set nodes: a pool hit allocates nothing.
  std::vector<block*> spare_blocks;
  std::vector<free_set::node_type> spare_nodes;

  ~pool_impl() {
    for (block* b : spare_blocks) delete b;
  }
  block* new_block() {
    if (spare_blocks.empty()) return new block;
    block* b = spare_blocks.back();
    spare_blocks.pop_back();
    *b = block{};
    return b;
  }
  void free_block(block* b) noexcept {
    if (spare_blocks.size() < 4096) {
      try {
        spare_blocks.push_back(b);
        return;
      } catch (...) {
      }
    }
    delete b;
  }
  void recycle(free_set::node_type&& nh) noexcept {
    if (nh.empty() || spare_nodes.size() >= 4096) return;
    try {
      spare_nodes.push_back(std::move(nh));
    } catch (...) {
    }
  }

  pool_impl(device_resource& up, pool_options o);
  stream_ops& ops() { return upstream.streams(); }

  // Per-stream bookkeeping (pool_streams.cpp).
  bool poll(stream_ref owner, stream_lists& s);
  std::vector<stream_wait> record_waits(stream_ref only);
  void synchronize_all(std::vector<stream_wait>& waits);  // without `mu`
  void reindex_safe();
  bool is_safe(const block* b) const {
    if (b->owner == k_any_stream) return true;
    auto it = lists.find(b->owner);
    return it != lists.end() && b->free_seq < it->second.safe_seq;
  }

  // The size-class cache (pool_resource.cpp).
  block* take_from(free_set& set, std::size_t size, std::uint64_t safe_below);
  block* find_free(std::size_t size, bool is_small, stream_ref stream);
  void insert_free(block* b);
  void erase_free(block* b) { recycle(lists_of(b->owner).for_size(b->small).extract(b)); }
  // Note [Segments near the limit]; `headroom`: the upstream's (SIZE_MAX: no limit).
  std::size_t segment_size(std::size_t rounded, std::size_t headroom) const;
  block* new_segment(std::size_t rounded, bool is_small, stream_ref stream);
  void split(block* b, std::size_t rounded);
  bool mergeable(const block* n, stream_ref owner) const {
    return n && !n->allocated && (n->owner == owner || is_safe(n));
  }
  void coalesce(block* b);
  // Merges b->next (free, already out of the free lists) into `b`, which
  // keeps the newer sequence number.
  void absorb_next(block* b) noexcept;
  std::size_t release_idle() noexcept;
  // Frees `b` (out of every live table) into the free lists; `stream` is
  // its new owner. Returns b's requested bytes.
  std::size_t free_shared(block* b, stream_ref stream) noexcept;
  void note_shared_alloc() noexcept;  // Note [Peaks of sharded counters]

  // Thread caches (pool_cache.cpp); none of these run with `mu` held.
  bool cachable(std::size_t rounded) const noexcept;
  thread_cache* my_cache() noexcept;  // creates it on a thread's first use; null when no slot is free
  void* cache_allocate(thread_cache& tc, std::size_t bytes, std::size_t rounded, stream_ref stream);
  // Frees `p` if some live table holds it (and, `strict`, with `bytes`
  // requested). Returns its requested bytes, 0 when no table holds it.
  std::size_t free_any(void* p, std::size_t bytes, stream_ref stream, bool strict) noexcept;
  // Moves every cached free block (of `only`'s bins; null: all) to the free lists.
  std::size_t flush_caches(stream_ref only) noexcept;
  void retire(thread_cache* tc) noexcept;  // its thread ends or the pool does
  void retire_all() noexcept;              // the pool's destructor
  void fold_peaks() noexcept;
  // Under the cache's mu (pool_cache.cpp).
  cache_bin* bin_for(thread_cache& tc, stream_ref stream, std::size_t size);
  bool refill(thread_cache& tc, cache_bin& bin);
  void cache_put(thread_cache& tc, block* b, stream_ref stream) noexcept;
  // `own`: tc is this thread's cache (the block may stay in it). `found`: a table held p.
  std::size_t free_from(thread_cache& tc, bool own, void* p, std::size_t bytes, stream_ref stream, bool strict,
                        bool& found) noexcept;
  void give_back(block* b, stream_ref stream) noexcept;  // under `mu`: a cached block into the free lists
  thread_cache* new_cache() noexcept;
  struct sums {
    std::size_t requested = 0, allocated = 0, blocks = 0, cached = 0, cached_blocks = 0;
    std::uint64_t req_total = 0, alloc_total = 0, blocks_total = 0, allocations = 0, frees = 0, hits = 0;
  };
  sums cache_sums() const noexcept;  // lock-free
  std::size_t live_requested(const void* p) noexcept;  // takes the locks; 0: not live
};

}  // namespace detail
}  // namespace gcpressure
