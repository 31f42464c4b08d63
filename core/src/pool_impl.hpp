// Internal to core/src: the caching pool's state (pool_impl), shared by its
// two rooms: pool_resource.cpp (the size-class cache: segments, best fit,
// splitting, coalescing, accounting) and pool_streams.cpp (per-stream event
// and safe-frontier bookkeeping: Note [Stream-aware reuse]).
#pragma once

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

// Every member runs with `mu` held unless it says otherwise.
struct pool_impl {
  pool_options opts;
  device_resource& upstream;
  mutable std::mutex mu;
  std::unordered_map<stream_ref, stream_lists> lists;
  ptr_table live;
  std::vector<segment*> segments;
  std::uint64_t seq = 1;
  pool_counters c;
  // Note [Accounting]: plain counters under `mu`, mirrored for lock-free readers.
  std::size_t req_peak = 0, alloc_peak = 0, blocks_peak = 0;
  std::uint64_t req_total = 0, alloc_total = 0, blocks_total = 0;
  std::atomic<std::size_t> live_mirror{0};
  std::atomic<std::uint64_t> total_mirror{0}, allocs_mirror{0};
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

  pool_impl(device_resource& up, pool_options o) : opts(o), upstream(up) {}
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
  void erase_free(block* b) { recycle(lists[b->owner].for_size(b->small).extract(b)); }
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
};

}  // namespace detail
}  // namespace gcpressure
