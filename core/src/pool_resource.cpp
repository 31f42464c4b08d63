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
#include <exception>
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

}  // namespace

// Owner of blocks whose stream was forgotten (forget_stream): their work has
// completed, so any stream may take them and no event is ever recorded.
stream_ref const k_any_stream = reinterpret_cast<stream_ref>(~std::uintptr_t{0});

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

  // Updates `s`'s event state without blocking; returns true if its safe
  // frontier moved.
  bool poll(stream_ref owner, stream_lists& s) {
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
  std::vector<stream_wait> record_waits(stream_ref only) {
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
  void synchronize_all(std::vector<stream_wait>& waits) {
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
  void reindex_safe() {
    for (auto& [owner, l] : lists)
      for (free_set* set : {&l.small, &l.large})
        for (auto it = set->begin(); it != set->end();) {
          if (is_safe(*it)) recycle(set->extract(it++));
          else ++it;
        }
    for (auto* sg : segments) {
      for (block* b = sg->first; b; b = b->next) {
        if (b->allocated || !is_safe(b)) continue;
        while (b->next && !b->next->allocated && is_safe(b->next)) {
          block* n = b->next;
          b->size += n->size;
          b->next = n->next;
          if (n->next) n->next->prev = b;
          free_block(n);
        }
        b->free_seq = 0;
        insert_free(b);
      }
    }
  }

  bool is_safe(const block* b) {
    if (b->owner == k_any_stream) return true;
    auto it = lists.find(b->owner);
    return it != lists.end() && b->free_seq < it->second.safe_seq;
  }

  block* take_from(free_set& set, std::size_t size, std::uint64_t safe_below) {
    for (auto it = set.lower_bound(probe(size)); it != set.end(); ++it)
      if ((*it)->free_seq < safe_below) {
        block* b = *it;
        recycle(set.extract(it));
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
      const std::uint64_t safe = owner == k_any_stream ? UINT64_MAX : s.safe_seq;
      if (block* b = take_from(s.for_size(is_small), size, safe)) return b;
    }
    return nullptr;
  }

  void insert_free(block* b) {
    free_set& set = lists[b->owner].for_size(b->small);
    if (!spare_nodes.empty()) {
      free_set::node_type nh = std::move(spare_nodes.back());
      spare_nodes.pop_back();
      nh.value() = b;
      set.insert(std::move(nh));
    } else {
      set.insert(b);
    }
  }
  void erase_free(block* b) { recycle(lists[b->owner].for_size(b->small).extract(b)); }

  std::size_t segment_size(std::size_t rounded) const {
    if (rounded <= opts.small_threshold) return opts.small_segment;
    if (rounded <= opts.medium_threshold) return opts.medium_segment;
    return round_up(rounded, opts.large_round);
  }

  block* new_segment(std::size_t rounded, bool is_small, stream_ref stream) {
    std::size_t n = segment_size(rounded);
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

  void split(block* b, std::size_t rounded) {
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
      free_block(b);
      b = p;
    }
    if (mergeable(b->next, b->owner)) {
      block* n = b->next;
      erase_free(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next) n->next->prev = b;
      b->free_seq = std::max(b->free_seq, n->free_seq);
      free_block(n);
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
      upstream.deallocate(seg->base, seg->size, b->owner == k_any_stream ? nullptr : b->owner);
      ++c.upstream_frees;
      c.reserved -= seg->size;
      released += seg->size;
      free_block(b);
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
  if (s.live.size() != 0) {
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
  s.live.insert(b->ptr, b);
  s.c.allocated += b->size;
  s.c.requested += bytes;
  s.req_peak = std::max(s.req_peak, s.c.requested);
  s.alloc_peak = std::max(s.alloc_peak, s.c.allocated);
  s.blocks_peak = std::max(s.blocks_peak, s.live.size());
  s.req_total += bytes;
  s.alloc_total += b->size;
  ++s.blocks_total;
  ++s.c.allocations;
  s.live_mirror.store(s.c.requested, std::memory_order_relaxed);
  s.total_mirror.store(s.req_total, std::memory_order_relaxed);
  s.allocs_mirror.store(s.c.allocations, std::memory_order_relaxed);
  return b->ptr;
}

void pool_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  deallocate_sized(p, bytes, stream);
}

std::size_t pool_resource::deallocate_sized(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (!p) return 0;
  auto& s = *impl_;
  std::unique_lock<std::mutex> lk(s.mu);
  block* b = s.live.erase(p);
  if (!b) {
    ++s.c.misuse_errors;
    lk.unlock();
    std::ostringstream os;
    os << "pool_resource::deallocate: " << p << " (" << bytes
       << " bytes) is not a live block of this pool (double free or foreign pointer); ignored";
    detail::report_misuse(os.str());
    return 0;
  }
  const bool size_ok = bytes == b->requested || bytes == 0;
  const std::size_t had = b->requested;
  s.c.allocated -= b->size;
  s.c.requested -= b->requested;
  ++s.c.frees;
  s.live_mirror.store(s.c.requested, std::memory_order_relaxed);
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

bool pool_resource::owns_live(const void* p) const noexcept {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->live.find(p) != nullptr;
}

std::size_t pool_resource::live_size(const void* p) const noexcept {
  std::lock_guard<std::mutex> lk(impl_->mu);
  const block* b = impl_->live.find(p);
  return b ? b->requested : 0;
}

std::size_t pool_resource::live_bytes() const noexcept { return impl_->live_mirror.load(std::memory_order_relaxed); }
std::uint64_t pool_resource::total_requested() const noexcept {
  return impl_->total_mirror.load(std::memory_order_relaxed);
}
std::uint64_t pool_resource::allocations() const noexcept { return impl_->allocs_mirror.load(std::memory_order_relaxed); }

void pool_resource::reset_peaks() noexcept {
  auto& s = *impl_;
  std::lock_guard<std::mutex> lk(s.mu);
  s.req_peak = s.c.requested;
  s.alloc_peak = s.c.allocated;
  s.blocks_peak = s.live.size();
}

pool_counters pool_resource::counters() const noexcept {
  auto& s = *impl_;
  std::lock_guard<std::mutex> lk(s.mu);
  pool_counters c = s.c;
  c.live_blocks = s.live.size();
  c.requested_stat = {static_cast<std::int64_t>(s.c.requested), static_cast<std::int64_t>(s.req_peak),
                      static_cast<std::int64_t>(s.req_total)};
  c.allocated_stat = {static_cast<std::int64_t>(s.c.allocated), static_cast<std::int64_t>(s.alloc_peak),
                      static_cast<std::int64_t>(s.alloc_total)};
  c.blocks_stat = {static_cast<std::int64_t>(s.live.size()), static_cast<std::int64_t>(s.blocks_peak),
                   static_cast<std::int64_t>(s.blocks_total)};
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
  void* p;
  try {
    p = upstream_.allocate(bytes, stream);
  } catch (...) {
    usage_.sub(static_cast<std::int64_t>(n));
    throw;
  }
  try {
    std::lock_guard<std::mutex> lk(mu_);
    live_.emplace(p, n);
  } catch (...) {
    upstream_.deallocate(p, bytes, stream);
    usage_.sub(static_cast<std::int64_t>(n));
    throw out_of_memory("limiting_adaptor: no host memory for bookkeeping");
  }
  return p;
}

void limiting_adaptor::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (!p) return;
  std::size_t n = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.find(p);
    if (it != live_.end()) {
      n = it->second;
      live_.erase(it);
    }
  }
  if (n == 0) {
    std::ostringstream os;
    os << "limiting_adaptor::deallocate: " << p << " (" << bytes
       << " bytes) is not a live allocation of this resource (double free or foreign pointer); ignored";
    detail::report_misuse(os.str());
    return;
  }
  upstream_.deallocate(p, bytes, stream);
  usage_.sub(static_cast<std::int64_t>(n));
}

}  // namespace gcpressure
