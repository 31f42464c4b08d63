// GC-owned device buffers: allocation, finalizers, unsafe_free, shutdown.
#include <cstdint>
#include <cstdio>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "boehm_gc.hpp"
#include <gc/gc_inline.h>  // GC_I_PTRFREE (after boehm_gc.hpp: needs GC_THREADS)
#include "gcpressure/boehm.hpp"
#include "gcpressure/error.hpp"

namespace gcpressure::boehm {

// The GC object a runtime's array points to. Pointer-free
// (GC_MALLOC_ATOMIC): the collector never scans it, and the device pointer is
// hidden as well, so no bit pattern in it can keep anything alive.
struct buffer {
  GC_hidden_pointer ptr;
  std::size_t bytes;
  stream_ref stream;
  std::uint32_t slot;
  std::uint32_t generation;
  std::atomic<int> state;  // see buffer_state
};

// Note [Stale stack words]
// bdwgc scans every thread's stack conservatively, from the collecting
// frame's stack pointer to the stack's base. A hint (iteration, sync) is
// called right after the iteration's code returned, and the frames of the
// policy and the collector below it land where that code's frames were:
// whatever slots they do not write still hold the dead frames' words, among
// them pointers to arrays the program has dropped. The collection then finds
// such an array reachable, promotes it, and only a whole-heap cycle frees it
// (on the H200 at a 1 GiB host heap, a sync every 8 iterations: live bytes
// grew by one 16 MiB activation at every minor taken at a hint, 560 MiB to
// 2.6 GiB in 130 minors, where the same loop's minors at syncs left live
// flat). bdwgc clears stale stack parts itself only in its allocator
// (GC_clear_stack, misc.c), not at the points this library collects from.
// So every hint and user collection first zeroes the 32 KiB below its
// caller's frame: ~1 us, and the frames the collection pushes there hold
// zeros wherever they do not write. Deeper stale words are below the
// collector's own stack pointer and never scanned. Volatile stores (not
// dead to the compiler) and no AddressSanitizer instrumentation, whose
// redzones would leave the words right below the caller unwritten (as
// tests/test_support.hpp's clear_stack).
[[gnu::noinline, gnu::no_sanitize_address]] void clear_stale_stack() noexcept {
  volatile std::uintptr_t words[32 * 1024 / sizeof(std::uintptr_t)];
  for (auto& w : words) w = 0;
}

namespace {

// released: its heap freed the block at shutdown (Note [Blocks still
// allocated at shutdown]).
enum buffer_state : int { live = 0, freed = 1, finalized = 2, released = 3 };

detail::slot g_slots[detail::slot_count];
std::atomic<std::uint64_t> g_orphaned{0};
std::atomic<std::uint64_t> g_freed_at_shutdown{0};

// Note [Finalizers only queue]: runs on whatever thread invokes finalizers.
void GC_CALLBACK finalize(void* obj, void*) {
  auto* b = static_cast<buffer*>(obj);
  int expected = live;
  if (!b->state.compare_exchange_strong(expected, finalized)) {  // unsafe_free or shutdown got there first
    if (expected == released) g_orphaned.fetch_add(1);            // Note [Shutdown]: its heap is gone
    return;
  }
  detail::slot& s = g_slots[b->slot];
  s.users.fetch_add(1);
  device_allocator* a = s.alloc.load();
  if (a && s.generation.load() == b->generation) {
    if (!a->deferred().push(GC_REVEAL_POINTER(b->ptr), b->bytes, b->stream)) g_orphaned.fetch_add(1);
  } else {
    g_orphaned.fetch_add(1);  // Note [Shutdown]: its heap is gone, the block went with it
  }
  s.users.fetch_sub(1);
}

[[noreturn]] void misuse(const buffer* b, const char* what) {
  std::ostringstream os;
  os << what << " (buffer " << static_cast<const void*>(b) << ")";
  GCPRESSURE_FAIL(os.str());
}

}  // namespace

namespace detail {
slot* slots() noexcept { return g_slots; }

void drain_all() noexcept {
  for (auto& s : g_slots) {
    if (!s.taken.load(std::memory_order_relaxed)) continue;
    s.users.fetch_add(1);
    if (auto* a = s.alloc.load()) a->drain();
    s.users.fetch_sub(1);
  }
}
}  // namespace detail

std::uint64_t orphaned_finalizations() noexcept { return g_orphaned.load(); }
std::uint64_t blocks_freed_at_shutdown() noexcept { return g_freed_at_shutdown.load(); }

device_heap::device_heap(const options& o) {
  const config c = resolve_config(o);
  open(allocator_options::per_device(c), c.policy, policy_options::from_config(c));
}

device_heap::device_heap(allocator_options a, const std::string& policy, policy_options p) {
  open({a}, policy, p);
}

device_heap::device_heap(const std::vector<allocator_options>& devices, const std::string& policy, policy_options p) {
  open(devices, policy, p);
}

// Each device's allocator takes a finalizer slot of its own: a buffer names
// its slot, so its finalizer finds its device's queue without the heap.
void device_heap::open(const std::vector<allocator_options>& a, const std::string& policy, const policy_options& p) {
  GCPRESSURE_EXPECTS(!a.empty(), "device_heap: no device");
  init();
  try {
    std::vector<device_allocator*> raw;
    for (const allocator_options& o : a) {
      devices_.push_back(device_slot{std::make_unique<device_allocator>(o)});
      raw.push_back(devices_.back().alloc.get());
    }
    policy_ = make_policy(policy, raw, collector_, p);
    verbose_ = p.verbose;
    for (device_slot& d : devices_) {
      for (std::uint32_t i = 0; i < detail::slot_count && !d.taken; ++i) {
        bool expected = false;
        if (!g_slots[i].taken.compare_exchange_strong(expected, true)) continue;
        d.slot = i;
        d.generation = g_slots[i].generation.fetch_add(1) + 1;
        d.taken = true;
        g_slots[i].alloc.store(d.alloc.get());
      }
      if (!d.taken) GCPRESSURE_FAIL("device_heap: more than 256 device allocators alive at once");
    }
  } catch (...) {
    release_slots();  // nothing was allocated through them yet
    policy_.reset();
    devices_.clear();
    throw;
  }
}

// Note [Shutdown]: finalizers that run from now on see a new generation and
// do nothing; wait for those already looking at an allocator.
void device_heap::release_slots() noexcept {
  for (device_slot& d : devices_) {
    if (!d.taken) continue;
    detail::slot& s = g_slots[d.slot];
    s.alloc.store(nullptr);
    s.generation.fetch_add(1);
    while (s.users.load() != 0) std::this_thread::yield();
    s.taken.store(false);
    d.taken = false;
  }
}

std::unique_ptr<device_heap> device_heap::from_env() { return std::make_unique<device_heap>(); }

namespace {
// Note [Exact accounting under a conservative collector] (tests/test_boehm.cpp):
// the collector's own frames, built over this region, may keep stale copies
// of handle pointers from earlier deeper calls. Zeroing it first lets the
// teardown collection find every dropped handle that only such a copy holds.
// Not ASan-instrumented, so that no unwritten redzone sits between the buffer
// and the caller (tests/test_support.hpp, clear_stack).
[[gnu::noinline, gnu::no_sanitize_address]] void scrub_stack_below() {
  volatile char buf[32 * 1024];
  for (auto& c : buf) c = 0;
}
}  // namespace

// Note [Blocks still allocated at shutdown]
// The teardown collection returns the blocks of every buffer it finds
// garbage, but bdwgc is conservative: a buffer the program dropped can still
// be named by a dead stack slot or a saved register of a frame older than
// this one — main()'s, when the heap is a local of main, and always so in an
// unoptimised build (the README's example kept its last 64 MiB buffer that
// way in 5 runs of 5, and the pool then reported it as leaked). No collector
// can tell that slot from a live reference. Once the heap is gone no handle
// can reach its block (data() throws, finalizers do nothing), so the heap
// frees the block of every buffer of its own still live after the teardown
// collection — those bdwgc still marks: a stale slot or register, or a
// buffer kept in a global — and marks it `released`; nothing is leaked and
// nothing reported (GCPRESSURE_VERBOSE=1 says how many;
// blocks_freed_at_shutdown() counts them). Buffers are found by walking the
// marked objects (GC_enumerate_reachable_objects_inner, mark bits valid
// right after the collection): pointer-free, buffer-sized, naming this
// heap's slot and generation, state live. Blocks taken through allocator()
// or the C API's gcpressure_alloc are the caller's: they stay allocated and
// the pool reports them (a documented leak, never a free under the caller).
namespace {
struct heap_ids {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> slots;  // (slot, generation) of each device
  std::vector<std::pair<buffer*, std::size_t>> found;          // a live buffer and its device index
};

void GC_CALLBACK note_live_buffer(void* obj, std::size_t bytes, void* data) {
  if (bytes < sizeof(buffer) || GC_get_kind_and_size(obj, nullptr) != GC_I_PTRFREE) return;
  auto& ids = *static_cast<heap_ids*>(data);
  auto* b = static_cast<buffer*>(obj);
  if (b->state.load(std::memory_order_relaxed) != live) return;
  for (std::size_t i = 0; i < ids.slots.size(); ++i)
    if (ids.slots[i] == std::make_pair(b->slot, b->generation)) ids.found.emplace_back(b, i);
}

void* GC_CALLBACK find_live_buffers(void* data) {
  GC_enumerate_reachable_objects_inner(note_live_buffer, data);
  return nullptr;
}
}  // namespace

std::pair<std::size_t, std::size_t> device_heap::release_live_buffers() {
  heap_ids ids;
  bool any = false;
  for (const device_slot& d : devices_) {
    ids.slots.emplace_back(d.slot, d.generation);
    any = any || d.alloc->live_bytes() != 0;
  }
  if (!any) return {0, 0};
  GC_call_with_alloc_lock(find_live_buffers, &ids);
  std::size_t blocks = 0, bytes = 0;
  for (auto [b, i] : ids.found) {
    int expected = live;
    if (!b->state.compare_exchange_strong(expected, released)) continue;  // its finalizer ran meanwhile
    devices_[i].alloc->deallocate(GC_REVEAL_POINTER(b->ptr), b->bytes, b->stream);
    ++blocks;
    bytes += b->bytes;
  }
  return {blocks, bytes};
}

void device_heap::shutdown() {
  if (devices_.empty()) return;
  scrub_stack_below();
  collector_.collect_full();
  collector_.run_finalizers();
  for (device_slot& d : devices_) d.alloc->drain();
  std::pair<std::size_t, std::size_t> freed{0, 0};
  try {
    freed = release_live_buffers();
  } catch (const std::bad_alloc&) {
    // no memory for the list: those blocks stay allocated and the pool reports them
  }
  g_freed_at_shutdown.fetch_add(freed.first);
  if (freed.first != 0 && verbose_)
    std::fprintf(stderr,
                 "gcpressure: heap shut down with %zu buffer(s) (%s) the collector still found through a root "
                 "(a global, or a stack slot or register the program no longer uses: Boehm scans "
                 "conservatively); their blocks are freed and the handles invalid from here on\n",
                 freed.first, format_bytes(freed.second).c_str());
  release_slots();
  policy_.reset();
  devices_.clear();
}

device_heap::~device_heap() { shutdown(); }

device_allocator& device_heap::allocator(std::size_t device) {
  if (devices_.empty()) GCPRESSURE_FAIL("device_heap: used after shutdown()");
  if (device >= devices_.size())
    GCPRESSURE_FAIL("device_heap: device index " + std::to_string(device) + " out of range (the heap has " +
                    std::to_string(devices_.size()) + ")");
  return *devices_[device].alloc;
}

gc_policy& device_heap::policy() {
  if (!policy_) GCPRESSURE_FAIL("device_heap: used after shutdown()");
  return *policy_;
}

allocator_stats device_heap::stats(std::size_t device) const {
  return const_cast<device_heap*>(this)->allocator(device).stats();
}

std::size_t device_heap::device_of(const buffer* b) const {
  if (!b) GCPRESSURE_FAIL("device_of: null buffer");
  for (std::size_t i = 0; i < devices_.size(); ++i)
    if (b->slot == devices_[i].slot && b->generation == devices_[i].generation) return i;
  misuse(b, "device_of: the buffer belongs to another heap");
}

buffer* device_heap::alloc(std::size_t bytes, stream_ref stream, std::size_t device) {
  device_allocator& a = allocator(device);
  const device_slot& d = devices_[device];
  void* p = a.allocate(bytes, stream);
  // Note [Handles come from the global free lists]
  // Not GC_MALLOC_ATOMIC: with thread-local allocation (GC_THREADS), objects
  // on a thread's local free list are marked at every collection (bdwgc's
  // GC_mark_thread_local_fls_for), and a partial collection does not clear
  // marks, so a handle taken from such a list is born marked and survives
  // every partial collection until the next full one — minors would miss a
  // large share of young dead handles. GC_generic_malloc allocates from the
  // global free lists, whose mark bits are cleared at the end of every
  // collection. Still pointer-free (GC_I_PTRFREE); checked by
  // tests/test_boehm_facts.cpp (BoehmFacts.*YoungHandles*).
  void* mem = GC_generic_malloc(sizeof(buffer), GC_I_PTRFREE);
  if (!mem) {
    a.deallocate(p, bytes, stream);
    throw out_of_memory("gcpressure: the host GC heap has no room for a 48-byte buffer handle");
  }
  auto* b = new (mem) buffer{GC_HIDE_POINTER(p), bytes, stream, d.slot, d.generation, {live}};
  GC_register_finalizer_no_order(b, finalize, nullptr, nullptr, nullptr);
  return b;
}

void device_heap::unsafe_free(buffer* b) {
  if (!b) GCPRESSURE_FAIL("unsafe_free: null buffer");
  if (devices_.empty()) GCPRESSURE_FAIL("device_heap: used after shutdown()");
  std::size_t i = 0;
  while (i < devices_.size() && (b->slot != devices_[i].slot || b->generation != devices_[i].generation)) ++i;
  if (i == devices_.size()) misuse(b, "unsafe_free: the buffer belongs to another heap");
  int expected = live;
  if (!b->state.compare_exchange_strong(expected, freed))
    misuse(b, expected == freed ? "unsafe_free: buffer already freed (double unsafe_free)"
                                : "unsafe_free: buffer already finalized");
  GC_register_finalizer_no_order(b, nullptr, nullptr, nullptr, nullptr);  // nothing left to finalize
  devices_[i].alloc->free(GC_REVEAL_POINTER(b->ptr), b->bytes, b->stream);
}

void* device_heap::data(const buffer* b) {
  if (!b) GCPRESSURE_FAIL("data: null buffer");
  const int st = b->state.load();
  if (st == released) misuse(b, "data: use after its heap shut down");
  if (st != live) misuse(b, "data: use after free");
  if (b->slot >= detail::slot_count) misuse(b, "data: not a buffer (use after free, its memory reused)");
  const detail::slot& s = g_slots[b->slot];
  if (s.generation.load() != b->generation || !s.alloc.load()) misuse(b, "data: use after its heap shut down");
  return GC_REVEAL_POINTER(b->ptr);
}

std::size_t device_heap::size(const buffer* b) noexcept { return b ? b->bytes : 0; }
stream_ref device_heap::stream(const buffer* b) noexcept { return b ? b->stream : nullptr; }
bool device_heap::is_live(const buffer* b) noexcept {
  // A freed buffer's memory may hold another object by now: its fields are
  // checked, never trusted as an index (seen: a test's inspection of a
  // recorded handle, under UBSan).
  if (!b || b->state.load() != live || b->slot >= detail::slot_count) return false;
  const detail::slot& s = g_slots[b->slot];
  return s.generation.load() == b->generation && s.alloc.load() != nullptr;  // false once its heap is gone
}

void* alloc_array_object(std::size_t bytes) noexcept {
  return GC_generic_malloc(bytes, GC_I_NORMAL);  // Note [Handles come from the global free lists]
}

}  // namespace gcpressure::boehm
