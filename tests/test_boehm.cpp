// Boehm bridge tests (host backend): finalizers return device memory,
// unsafe_free, use after heap shutdown, registered threads, the Boehm facts
// the bridge relies on (Note [Boehm facts this file relies on] in
// gc_bridge/src/boehm_collector.cpp), and every policy with the real
// collector.
//
// Note [Exact accounting under a conservative collector]
// Boehm scans thread stacks and registers conservatively: a stale copy of a
// handle pointer in a dead stack slot keeps that handle (and its device block)
// alive. The tests make "every dropped handle is reclaimed" exact by
//  - allocating in [[gnu::noinline]] helpers, so handle pointers live only in
//    frames that have returned by the time we collect;
//  - overwriting the dead stack region below the test's frame with a large
//    volatile zeroed array (clear_stack()) right before collecting, so the
//    collector's own frames cannot pick up stale pointers there (clear_stack
//    is not ASan-instrumented: an instrumented frame's redzone left the words
//    right below the caller unwritten, docs/RELIABILITY.md);
//    Clearing happens from the test body's level as well (full_collect): a
//    helper cannot clear its own frame;
//  - keeping handles that must stay alive in GC-visible roots only (globals in
//    the data segment, or a registered thread's stack) — never in std::vector
//    (malloc memory, which Boehm does not scan);
//  - where a test needs every handle young at the next partial collection,
//    allocating with GC_disable() on: a handle alive during any collection
//    (even one its own allocation triggered) is old from then on.
// That makes it exact in practice, with residues: now and then one handle
// stays reachable through a transient reference (see
// BoehmFacts.OneMinorCollectionFindsAllYoungHandles), or through bdwgc's own
// mmap hint, a scanned word of libgc's .bss equal to the first object of a
// heap section (Note [bdwgc's mmap hint is a root] in
// tests/reliability/survivors.hpp). "Device bytes return to zero" therefore
// allows a second full collection, and says so on stdout; the registered
// threads' test (test_boehm_threads.cpp) names what holds a survivor and
// allows only that hint.
// Finalizers may run on the finalizer thread concurrently with the test's own
// GC_invoke_finalizers; settle() polls (≤ 2 s) until the expected state
// rather than assuming which thread got there first.
#include "boehm_test_support.hpp"
#include "reliability/survivors.hpp"

#include <gc/gc_inline.h>  // GC_I_PTRFREE


#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using gcp_test::clear_stack;
using gcp_test::no_automatic_full;
using gcp_test::settle;

namespace {

[[maybe_unused]] const bool g_env = gcp_test::init_boehm_first();

gcp::allocator_options host_opts(std::size_t hard, std::size_t soft = 0) {
  return gcp_test::host_opts(hard, soft, std::size_t{4} << 30);
}

// A blocking full collection (+ finalizers + drain). The stack is cleared
// from the caller's level: a helper cannot clear its own frame, and its
// uninitialised slots may hold what an earlier callee left there.
[[gnu::noinline]] void full_collect_inner(gb::device_heap& h) {
  clear_stack();
  h.collect(gcp::gc_kind::blocking_full);
}
#define full_collect(h)     \
  do {                      \
    clear_stack();          \
    full_collect_inner(h);  \
  } while (0)

// Full collections until no device byte is live: the first one should do;
// a second one is allowed for a transient conservative reference (see
// BoehmFacts.OneMinorCollectionFindsAllYoungHandles) and reported. Returns
// the number of full collections it took, 0 if two did not suffice.
#define collect_until_zero(h, out)                                                           \
  do {                                                                                       \
    out = 0;                                                                                 \
    for (int attempt_ = 1; attempt_ <= 2 && out == 0; ++attempt_) {                          \
      full_collect(h);                                                                       \
      if (settle(h, [&] { return (h).allocator().live_bytes() == 0; }, 1000ms)) out = attempt_; \
    }                                                                                        \
    if (out != 1) std::printf("note: device bytes back to zero after %d full collections\n", out); \
  } while (0)

// After collect_until_zero: what two full collections left live must be one
// block of `block` bytes at most, and the heap's shutdown frees it. bdwgc
// may keep one dropped handle reachable (measured under ASan beside a CPU
// hog: Boehm.UnsafeFreeThenFinalizerNoDoubleFree says what; in
// BoehmPolicies.EveryPolicyLoopsWithoutFailures 4 of 25 such runs had one
// 1 MiB handle left, 0 in Release). Shuts `h` down; returns the bytes it
// found retained.
std::size_t expect_reclaimed_at_shutdown(gb::device_heap& h, int fulls, std::size_t block) {
  const std::size_t live = h.allocator().live_bytes();
  EXPECT_TRUE(fulls > 0 || live <= block) << live << " bytes live after two full collections";
  if (live != 0) std::printf("note: %zu bytes retained by bdwgc; freed at shutdown\n", live);
  const auto before = gb::blocks_freed_at_shutdown();
  h.shutdown();
  EXPECT_EQ(gb::blocks_freed_at_shutdown() - before, live / block);
  return live;
}

// Allocates `n` buffers of `bytes` and drops each at once, counting failures.
[[gnu::noinline]] std::size_t alloc_and_drop(gb::device_heap& h, int n, std::size_t bytes, int iteration_every = 0) {
  std::size_t failures = 0;
  for (int i = 0; i < n; ++i) {
    try {
      gb::buffer* b = h.alloc(bytes);
      static_cast<char*>(gb::device_heap::data(b))[0] = 1;  // "use" it
    } catch (const gcp::out_of_memory&) {
      ++failures;
    }
    if (iteration_every && (i + 1) % iteration_every == 0) h.iteration();
  }
  clear_stack();
  return failures;
}

}  // namespace

// --- (a) finalizers return device memory ------------------------------------------

TEST(Boehm, DroppedHandlesReturnDeviceMemory) {
  gb::device_heap h(host_opts(32 * MiB), "pressure");
  const std::size_t failures = alloc_and_drop(h, 3200, 1 * MiB);  // 100x the hard limit
  auto s = h.stats();
  EXPECT_EQ(failures, 0u);
  EXPECT_EQ(s.ooms, 0u);
  EXPECT_EQ(s.allocations, 3200u);
  EXPECT_LE(s.requested.peak, static_cast<std::int64_t>(32 * MiB));
  EXPECT_EQ(s.gc.by_kind[static_cast<int>(gcp::gc_kind::blocking_full)], 0u) << gcp::to_text(s);
  EXPECT_GT(s.gc.by_kind[static_cast<int>(gcp::gc_kind::minor)], 0u);
  std::printf("%s", gcp::to_text(s).c_str());

  int fulls;
  collect_until_zero(h, fulls);
  s = h.stats();
  const std::size_t pushed = h.allocator().deferred().pushed();
  const std::size_t retained = expect_reclaimed_at_shutdown(h, fulls, 1 * MiB) / MiB;
  EXPECT_EQ(s.requested.current, static_cast<std::int64_t>(retained * MiB));
  EXPECT_EQ(s.active_blocks.current, static_cast<std::int64_t>(retained));
  EXPECT_EQ(s.frees + retained, s.allocations);
  EXPECT_EQ(s.misuse_errors, 0u);
  EXPECT_EQ(pushed + retained, 3200u);  // each block finalized exactly once (a retained one: not yet)
}

// --- (b) unsafe_free ---------------------------------------------------------------

namespace {
gb::buffer* volatile g_keep[16];

// The handles unsafe_free_half dropped, hidden (malloc memory: holds nothing alive).
std::vector<std::uintptr_t> g_dropped;

[[gnu::noinline]] void unsafe_free_half(gb::device_heap& h, int n) {
  for (int i = 0; i < n; ++i) {
    gb::buffer* b = h.alloc(64 * 1024);
    if (i % 2 == 0)
      h.unsafe_free(b);
    else
      g_dropped.push_back(~reinterpret_cast<std::uintptr_t>(b));
  }
}

// Dropped handles still live (never finalized), each checked in a frame of
// its own (gcp_rel::inspect) so that no frame of the caller names one.
[[gnu::noinline]] std::size_t still_live(const std::vector<std::uintptr_t>& hidden) {
  std::size_t n = 0;
  for (const std::uintptr_t x : hidden) n += gcp_rel::inspect(x).live ? 1 : 0;
  clear_stack();
  return n;
}
}  // namespace

TEST(Boehm, UnsafeFreeThenFinalizerNoDoubleFree) {
  gb::device_heap h(host_opts(64 * MiB), "pressure");
  gb::buffer* b = h.alloc(1 * MiB);
  g_keep[0] = b;
  EXPECT_TRUE(gb::device_heap::is_live(b));
  EXPECT_NO_THROW(gb::device_heap::data(b));
  h.unsafe_free(b);
  EXPECT_FALSE(gb::device_heap::is_live(b));
  EXPECT_EQ(h.allocator().live_bytes(), 0u);  // freed at once
  EXPECT_THROW(gb::device_heap::data(b), gcp::logic_error);
  EXPECT_THROW(h.unsafe_free(b), gcp::logic_error);
  try {
    h.unsafe_free(b);
  } catch (const gcp::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("double unsafe_free"), std::string::npos) << e.what();
  }
  EXPECT_THROW(h.unsafe_free(nullptr), gcp::logic_error);
  // A buffer of another heap.
  {
    gb::device_heap other(host_opts(64 * MiB), "pressure");
    gb::buffer* ob = other.alloc(4096);
    g_keep[1] = ob;
    EXPECT_THROW(h.unsafe_free(ob), gcp::logic_error);
    EXPECT_TRUE(gb::device_heap::is_live(ob));
    other.unsafe_free(ob);
    g_keep[1] = nullptr;
  }
  g_keep[0] = nullptr;

  // Many handles, half freed by hand; then all dropped and collected: each
  // block is freed exactly once.
  //
  // Exactly once, not necessarily by the collections: bdwgc may keep one
  // dropped handle reachable (Note [Exact accounting under a conservative
  // collector]). Measured at 590b7e5 (after fb3801c), 2 cores, one `yes` hog,
  // Debug+ASan/UBSan: the old "every block freed by two full collections"
  // failed 9 of 600 runs (Release 0 of 400). In all 18 instrumented failures
  // one dropped handle of the last ~35 survived both collections and the 2 s
  // settle: never finalized (pushed 99), marked by bdwgc, the first object
  // of a heap block; in the 10 searched, its finalizer still registered, the
  // finalization queue empty, and no word in any readable mapping (roots,
  // thread stacks, write-protected heap pages, libgc's .bss) pointing at it
  // besides bdwgc's unscanned block headers. Neither a collection from a
  // fresh registered thread nor growing the heap (so not Note [bdwgc's mmap
  // hint is a root]) nor zeroing the main thread's vector registers freed
  // it; what holds it is not pinned down. Not the finalizer/drain race of
  // fb3801c (that leaves a handle finalized with its block live). So the
  // test checks what the library promises: a retained handle (at most one)
  // is not finalized, its block is still allocated (no double free) and the
  // heap's shutdown frees it (Note [Blocks still allocated at shutdown],
  // device_heap.cpp). With this: 0 of 850 failed, 3 of them took that path.
  g_dropped.clear();
  g_dropped.reserve(100);
  unsafe_free_half(h, 200);
  clear_stack();  // its dead frame held the last (dropped) handle
  int fulls;
  collect_until_zero(h, fulls);
  const std::size_t retained = still_live(g_dropped);
  const auto s = h.stats();
  EXPECT_EQ(g_dropped.size(), 100u);
  EXPECT_LE(retained, 1u) << "dropped handles still live after two full collections";
  EXPECT_EQ(s.requested.current, static_cast<std::int64_t>(retained * 64 * 1024));
  EXPECT_EQ(s.allocations, 201u);
  EXPECT_EQ(s.frees + retained, s.allocations);
  EXPECT_EQ(s.misuse_errors, 0u) << "a finalizer freed a block that unsafe_free had freed";
  // Only the handles never freed by hand were finalized (the 101
  // unsafe_free'd ones had their finalizers cancelled or made no-ops).
  EXPECT_EQ(h.allocator().deferred().pushed() + retained, 100u);
  if (retained != 0) std::printf("note: %zu dropped handle(s) retained by bdwgc; freed at shutdown\n", retained);
  const auto freed_at_shutdown = gb::blocks_freed_at_shutdown();
  h.shutdown();
  EXPECT_EQ(gb::blocks_freed_at_shutdown() - freed_at_shutdown, retained);
}

// --- (c) use after heap shutdown -----------------------------------------------------

namespace {
gb::buffer* volatile g_orphans[8];

[[gnu::noinline]] void make_orphans(gb::device_heap& h) {
  for (auto& o : g_orphans) o = h.alloc(256 * 1024);
  clear_stack();
}
[[gnu::noinline]] void drop_orphans() {
  for (auto& o : g_orphans) o = nullptr;
  clear_stack();
}
}  // namespace

// The checks run in their own frames, so that no copy of an orphan pointer is
// left in the test body's frame for the conservative stack scan to find
// (under ASan the loop variable's slot kept one handle alive).
[[gnu::noinline]] void check_orphans_refused() {
  for (auto* o : g_orphans) {
    EXPECT_THROW(gb::device_heap::data(o), gcp::logic_error);
    try {
      gb::device_heap::data(o);
    } catch (const gcp::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos) << e.what();
    }
  }
}

[[gnu::noinline]] void check_orphans_live() {
  for (auto* o : g_orphans) EXPECT_NO_THROW(gb::device_heap::data(o));
}

[[gnu::noinline]] void check_new_heap_refuses(gb::device_heap& h2) {
  EXPECT_THROW(gb::device_heap::data(g_orphans[0]), gcp::logic_error);
  EXPECT_THROW(h2.unsafe_free(g_orphans[0]), gcp::logic_error);
}

TEST(Boehm, UseAfterHeapShutdown) {
  auto h = std::make_unique<gb::device_heap>(host_opts(64 * MiB), "pressure");
  make_orphans(*h);
  check_orphans_live();
  h.reset();  // the heap goes; the handles stay reachable
  check_orphans_refused();
  // A new heap may reuse the slot: the old handles must still be refused.
  gb::device_heap h2(host_opts(64 * MiB), "pressure");
  check_new_heap_refuses(h2);

  const auto before = gb::orphaned_finalizations();
  drop_orphans();
  full_collect(h2);  // collects and finalizes the orphans: must not crash
  bool ok = settle(h2, [&] { return gb::orphaned_finalizations() >= before + 8; });
  if (!ok) {  // a stale register copy can survive one collection; a second must find it
    drop_orphans();
    full_collect(h2);
    ok = settle(h2, [&] { return gb::orphaned_finalizations() >= before + 8; });
  }
  EXPECT_TRUE(ok) << "orphaned finalizations: " << gb::orphaned_finalizations() - before << " of 8";
  // Their blocks never reach the new heap's queue.
  EXPECT_EQ(h2.allocator().deferred().pushed(), 0u);
  EXPECT_EQ(h2.stats().misuse_errors, 0u);
}

// --- (e) the Boehm facts ----------------------------------------------------------

TEST(BoehmFacts, IncrementalModeIsOnAndProtectionIsMprotect) {
  gb::device_heap h(host_opts(64 * MiB), "pressure");
  EXPECT_TRUE(gb::initialized());
  EXPECT_NE(GC_is_incremental_mode(), 0);
  // Dirty bits from mprotect: the pointer heap is write-protected between
  // collections (0 would mean a VDB that needs no protection, e.g. soft-dirty).
  const int needs = GC_incremental_protection_needs();
  std::printf("GC_incremental_protection_needs() = %d\n", needs);
  EXPECT_NE(needs & GC_PROTECTS_POINTER_HEAP, 0);
  // Our init leaves Boehm without a time limit (generational only: the
  // mutator's allocations never advance a cycle; Note [Who advances a cycle]
  // in boehm_runtime.cpp) and its full frequency at the default (Note [Who
  // owns whole-heap cycles] in boehm_collector.cpp).
  EXPECT_EQ(GC_get_time_limit(), static_cast<unsigned long>(GC_TIME_UNLIMITED));
  EXPECT_EQ(GC_get_full_freq(), 19);
}

TEST(BoehmFacts, HandlesArePointerFreeGcObjects) {
  gb::device_heap h(host_opts(64 * MiB), "pressure");
  gb::buffer* b = h.alloc(4096);
  g_keep[2] = b;
  EXPECT_NE(GC_base(b), nullptr) << "the handle is not a GC object";
  std::size_t sz = 0;
  EXPECT_EQ(GC_get_kind_and_size(b, &sz), GC_I_PTRFREE) << "the handle is scanned for pointers";
  EXPECT_EQ(GC_is_heap_ptr(gb::device_heap::data(b)), 0) << "the device block lives in the GC heap";
  h.unsafe_free(b);
  g_keep[2] = nullptr;
}

TEST(BoehmFacts, LibgccppIsNotLoaded) {
  std::ifstream maps("/proc/self/maps");
  ASSERT_TRUE(maps.good());
  std::string line;
  bool gc = false;
  while (std::getline(maps, line)) {
    EXPECT_EQ(line.find("libgccpp"), std::string::npos) << line;
    if (line.find("libgc.so") != std::string::npos) gc = true;
  }
  EXPECT_TRUE(gc) << "libgc is not a shared library in this process";
}

TEST(BoehmFacts, ThreadsMustRegister) {
  gb::init();
  EXPECT_NE(GC_thread_is_registered(), 0);  // the main thread
  int unregistered = -1, in_scope = -1, after = -1;
  std::thread([&] {
    unregistered = GC_thread_is_registered();
    {
      gb::thread_scope reg;
      in_scope = GC_thread_is_registered();
      {
        gb::thread_scope nested;  // no-op: already registered
      }
      EXPECT_NE(GC_thread_is_registered(), 0) << "a nested thread_scope unregistered the thread";
    }
    after = GC_thread_is_registered();
  }).join();
  EXPECT_EQ(unregistered, 0) << "std::thread is registered without a thread_scope";
  EXPECT_NE(in_scope, 0);
  EXPECT_EQ(after, 0);
}

namespace {
gb::buffer* volatile g_survivor;

[[gnu::noinline]] void make_survivor(gb::device_heap& h) {
  g_survivor = h.alloc(3 * MiB);
  clear_stack();
}
[[gnu::noinline]] void drop_survivor() {
  g_survivor = nullptr;
  clear_stack();
}
[[gnu::noinline]] void make_young_garbage(gb::device_heap& h) {
  GC_disable();  // no collection may see it alive
  h.alloc(1 * MiB);
  GC_enable();
  clear_stack();
}
[[gnu::noinline]] void minor_with_clean_stack(gb::device_heap& h) {
  clear_stack();
  h.gc().collect_minor();
}
}  // namespace

// With incremental (generational) mode on, an object that survived one
// collection is not found dead by later partial collections, only by a
// whole-heap one: the forced-full start (full frequency 0) must make the
// incremental cycle whole-heap.
TEST(BoehmFacts, SurvivorIsOldOnlyAWholeHeapCycleReclaimsIt) {
  gb::device_heap h(host_opts(64 * MiB), "explicit_free");  // no policy collections
  auto& gc = h.gc();
  auto& a = h.allocator();
  no_automatic_full guard;
  const int freq = GC_get_full_freq();
  const auto fulls0 = gc.counters().full_collections;
  make_survivor(h);
  minor_with_clean_stack(h);  // it survives: reachable from a global
  settle(h, [] { return true; }, 0ms);
  ASSERT_EQ(a.live_bytes(), 3 * MiB);
  const auto pushed0 = a.deferred().pushed();

  drop_survivor();
  make_young_garbage(h);  // control: partial collections do find young garbage
  ASSERT_EQ(a.live_bytes(), 4 * MiB);
  for (int i = 0; i < 3; ++i) minor_with_clean_stack(h);
  std::this_thread::sleep_for(50ms);  // let the finalizer thread act, if anything is pending
  settle(h, [&] { return a.live_bytes() <= 3 * MiB; });
  ASSERT_EQ(gc.counters().full_collections, fulls0) << "a full collection ran: the test proves nothing";
  EXPECT_EQ(a.deferred().pushed(), pushed0 + 1) << "partial collections did not find the young garbage";
  EXPECT_EQ(a.live_bytes(), 3 * MiB) << "a partial collection reclaimed an old object";

  // A whole-heap cycle in slices.
  clear_stack();
  gc.start_full();
  EXPECT_TRUE(gc.full_in_progress());
  EXPECT_EQ(GC_get_full_freq(), freq) << "start_full did not restore the full frequency";
  while (!gc.step_full(0.002)) {
  }
  EXPECT_FALSE(gc.full_in_progress());
  EXPECT_EQ(gc.counters().full_collections, fulls0 + 1) << "the forced cycle was not a full one";
  const bool ok = settle(h, [&] { return a.live_bytes() == 0; });
  EXPECT_TRUE(ok) << "the whole-heap cycle did not reclaim the old handle";
  EXPECT_EQ(a.deferred().pushed(), pushed0 + 2);
}

namespace {
struct holder {
  gb::buffer* slot;
  void* pad[7];
};
holder* volatile g_holder;

[[gnu::noinline]] void store_young_into_old(gb::device_heap& h) {
  GC_disable();  // the handle must be young at the next collection
  gb::buffer* b = h.alloc(2 * MiB);
  g_holder->slot = b;  // a write into an old, write-protected GC page
  GC_enable();
  clear_stack();
}
[[gnu::noinline]] void clear_holder() {
  g_holder->slot = nullptr;
  clear_stack();
}
}  // namespace

// Dirty bits (mprotect here): a young handle stored only into an old object
// must survive a partial collection — the write fault marks the old object's
// page dirty, and the partial collection rescans it. Under AddressSanitizer
// this needs Boehm's SIGSEGV handler to be allowed (ASAN_OPTIONS
// handle_segv=1, the default, not 2; allow_user_segv_handler not 0).
TEST(BoehmFacts, WritesIntoOldObjectsAreSeenByPartialCollections) {
  gb::device_heap h(host_opts(64 * MiB), "explicit_free");
  auto& a = h.allocator();
  no_automatic_full guard;
  g_holder = static_cast<holder*>(GC_MALLOC(sizeof(holder)));
  clear_stack();
  h.gc().collect_full();  // the holder is old; its page is protected
  const auto pushed0 = a.deferred().pushed();
  store_young_into_old(h);
  for (int i = 0; i < 2; ++i) minor_with_clean_stack(h);
  std::this_thread::sleep_for(20ms);
  settle(h, [] { return true; }, 0ms);
  EXPECT_EQ(a.deferred().pushed(), pushed0) << "a partial collection freed a handle stored in an old object";
  EXPECT_EQ(a.live_bytes(), 2 * MiB);
  EXPECT_NO_THROW(gb::device_heap::data(g_holder->slot));
  clear_holder();
  clear_stack();
  h.gc().collect_full();
  EXPECT_TRUE(settle(h, [&] { return a.live_bytes() == 0; }));
  g_holder = nullptr;
}

namespace {
struct node {
  node* next;
  char pad[1024 - sizeof(node*)];
};
node* volatile g_list;

[[gnu::noinline]] void build_list(std::size_t bytes) {
  GC_disable();
  node* head = nullptr;
  for (std::size_t i = 0; i < bytes / sizeof(node); ++i) {
    auto* n = static_cast<node*>(GC_MALLOC(sizeof(node)));
    ASSERT_NE(n, nullptr);
    n->next = head;
    head = n;
  }
  g_list = head;
  GC_enable();
  clear_stack();
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

// Minor collections are much cheaper than full ones with a big host heap, and
// the whole-heap cycle runs in slices shorter than a blocking full collection.
TEST(BoehmFacts, MinorIsCheaperThanFullOnABigHeap) {
  gb::device_heap h(host_opts(64 * MiB), "explicit_free");
  auto& gc = h.gc();
  build_list(200 * MiB);
  gc.collect_full();  // everything is marked and old now
  double minor = 1e9, full = 1e9, longest_slice = 0, cycle = 0;
  for (int i = 0; i < 3; ++i) minor = std::min(minor, seconds_of([&] { gc.collect_minor(); }));
  for (int i = 0; i < 2; ++i) full = std::min(full, seconds_of([&] { gc.collect_full(); }));
  // The cycle is measured up to three times and the attempt with the
  // shortest longest slice kept: on a loaded machine one slice may be
  // preempted, which says nothing about how Boehm divides the work.
  int slices = 0;
  longest_slice = 1e9;
  for (int attempt = 0; attempt < 3 && longest_slice * 4 >= full; ++attempt) {
    int n = 0;
    double longest = 0;
    const double c = seconds_of([&] {
      gc.start_full();
      for (;;) {
        bool done = false;
        longest = std::max(longest, seconds_of([&] { done = gc.step_full(0.002); }));
        ++n;
        if (done) break;
      }
    });
    if (longest < longest_slice) {
      longest_slice = longest;
      slices = n;
      cycle = c;
    }
  }
  std::printf("200 MiB host heap: minor %.2f ms, blocking full %.2f ms, incremental cycle %.2f ms in %d slices "
              "(longest %.2f ms)\n",
              minor * 1e3, full * 1e3, cycle * 1e3, slices, longest_slice * 1e3);
  EXPECT_LT(minor, full);
  EXPECT_LT(minor * 4, full) << "a minor collection is not much cheaper than a full one";
  // The whole-heap cycle is really sliced: no slice is a disguised blocking
  // collection. (Slices overshoot their 2 ms budget: Boehm's final
  // stop-the-world mark and sweep set-up are not divisible.)
  EXPECT_LT(longest_slice * 4, full) << "a slice of the incremental cycle was nearly a full collection";
  EXPECT_GT(slices, 1);
  g_list = nullptr;
  clear_stack();
  gc.collect_full();
}

namespace {
[[gnu::noinline]] void alloc_and_drop_young(gb::device_heap& h, int n) {
  for (int i = 0; i < n; ++i) h.alloc(128 * 1024);
  clear_stack();
}
}  // namespace

// The finalizer thread runs finalizers (and drains) without anyone calling
// GC_invoke_finalizers.
TEST(BoehmFacts, FinalizerThreadRunsFinalizersUnasked) {
  gb::device_heap h(host_opts(64 * MiB), "explicit_free");
  auto& a = h.allocator();
  const auto pushed0 = a.deferred().pushed();
  alloc_and_drop_young(h, 8);
  ASSERT_EQ(a.live_bytes(), 8u * 128 * 1024);
  clear_stack();
  h.gc().collect_minor();  // no run_finalizers here
  const auto end = std::chrono::steady_clock::now() + 2s;
  while (a.deferred().pushed() == pushed0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(1ms);
  EXPECT_GT(a.deferred().pushed(), pushed0) << "no finalizer ran within 2 s without GC_invoke_finalizers";
  // The finalizer thread drains as well: the bytes come back without a drain here.
  while (a.live_bytes() != 0 && std::chrono::steady_clock::now() < end + 2s) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(a.live_bytes(), 0u);
}

// --- young handles and bdwgc's thread-local free lists -------------------------------
//
// With GC_THREADS, GC_MALLOC_ATOMIC takes objects from a thread-local free
// list, and every collection marks the objects on those lists
// (GC_mark_thread_local_fls_for). A partial collection does not clear marks,
// so an object handed out from such a list is born marked: it survives every
// partial collection until the next full one, young and dead as it is. The
// bridge therefore allocates handles with GC_generic_malloc(.., GC_I_PTRFREE)
// (global free lists, whose marks are cleared after each collection).

namespace {
std::atomic<int> g_raw_finalized{0};
void GC_CALLBACK count_finalizer(void*, void*) { g_raw_finalized.fetch_add(1); }

// GC disabled meanwhile: an object alive during a collection (e.g. one that
// an allocation in this loop triggers) is old, and would rightly survive the
// next partial collection. We want every object young.
[[gnu::noinline]] void raw_alloc_and_drop(int n, bool thread_local_lists) {
  GC_disable();
  for (int i = 0; i < n; ++i) {
    void* p = thread_local_lists ? GC_MALLOC_ATOMIC(48) : GC_generic_malloc(48, GC_I_PTRFREE);
    GC_register_finalizer_no_order(p, count_finalizer, nullptr, nullptr, nullptr);
  }
  GC_enable();
  clear_stack();
}

// Finalizers may also run on the finalizer thread: wait until none is pending
// and the count is stable.
int raw_settle() {
  for (;;) {
    GC_invoke_finalizers();
    const int before = g_raw_finalized.load();
    std::this_thread::sleep_for(10ms);
    if (!GC_should_invoke_finalizers() && g_raw_finalized.load() == before) return before;
  }
}

struct round_result {
  int allocated = 0, found = 0;
  bool had_full = false;
};

std::vector<round_result> raw_rounds(gb::boehm_collector& gc, bool thread_local_lists) {
  std::vector<round_result> out;
  for (int r = 0; r < 10; ++r) {
    const int before = raw_settle();
    const auto fulls = gc.counters().full_collections;
    raw_alloc_and_drop(200, thread_local_lists);
    clear_stack();
    gc.collect_minor();
    round_result rr;
    rr.allocated = 200;
    rr.found = raw_settle() - before;
    rr.had_full = gc.counters().full_collections != fulls;
    out.push_back(rr);
  }
  return out;
}
}  // namespace

TEST(BoehmFacts, ThreadLocalAllocationsSurvivePartialCollections) {
  gb::init();
  gb::boehm_collector gc;
  no_automatic_full guard;
  clear_stack();
  gc.collect_full();
  raw_settle();
  const auto global = raw_rounds(gc, false);
  const auto local = raw_rounds(gc, true);
  bool local_missed = false;
  std::string trace = "global lists:";
  for (auto& r : global) {
    trace.append(" ").append(std::to_string(r.found)).append(r.had_full ? "F" : "");
    if (!r.had_full) {  // tolerance 2: see BoehmFacts.OneMinorCollectionFindsAllYoungHandles
      EXPECT_GE(r.found, r.allocated - 2) << "a partial collection missed young dead objects (global lists)";
    }
  }
  trace += "\nthread-local lists:";
  for (auto& r : local) {
    trace.append(" ").append(std::to_string(r.found)).append(r.had_full ? "F" : "");
    if (!r.had_full && r.found <= r.allocated - 10) local_missed = true;
  }
  std::printf("found per partial collection (of 200; F: a full one ran)\n%s\n", trace.c_str());
  // Documents why the bridge avoids GC_MALLOC_ATOMIC. If a bdwgc update makes
  // this fail, thread-local allocation became safe for handles again.
  EXPECT_TRUE(local_missed) << "thread-local allocations no longer survive partial collections\n" << trace;
}

namespace {
[[gnu::noinline]] void alloc_and_drop_many(gb::device_heap& h, int n) {
  for (int i = 0; i < n; ++i) h.alloc(4096);
  clear_stack();
}
}  // namespace

// One minor collection finds (nearly) every young dead handle: the bridge's
// handles come from the global free lists. With GC_MALLOC_ATOMIC a partial
// collection missed 2-14% of them here (rounds of 500) and this test fails. Tolerance: Boehm is conservative,
// and in about half the runs one handle of a round stays reachable through a
// transient reference we could not pin down (far more often with the
// finalizer thread running: 7/10 runs against 1/10 without it; a later
// collection finds it, so it was not promoted) — never more than 1 per round.
TEST(BoehmFacts, OneMinorCollectionFindsAllYoungHandles) {
  gb::device_heap h(host_opts(256 * MiB), "explicit_free");
  auto& a = h.allocator();
  auto& gc = h.gc();
  constexpr int n = 500;
  int checked = 0;
  for (int round = 0; round < 8; ++round) {
    const auto pushed0 = a.deferred().pushed();
    const auto gc_no = gc.counters().collections;
    // Not under GC_disable(): with it, this test did not see
    // GC_MALLOC_ATOMIC's problem (observed, not explained). Rounds in which
    // Boehm collected on its own are not checked instead.
    alloc_and_drop_many(h, n);
    const bool quiet = gc.counters().collections == gc_no;  // no collection saw them alive
    clear_stack();
    gc.collect_minor();
    settle(h, [&] { return a.deferred().pushed() - pushed0 >= n; }, 300ms);
    const auto found = a.deferred().pushed() - pushed0;
    if (!quiet) continue;
    ++checked;
    EXPECT_GE(found, static_cast<std::uint64_t>(n - 2))
        << "round " << round << ": a minor collection found " << found << " of " << n << " young dead handles";
  }
  EXPECT_GE(checked, 4) << "Boehm collected during most allocation rounds: nothing checked";
}

// --- (3) every policy with the real collector -----------------------------------------

namespace {
[[gnu::noinline]] std::size_t explicit_loop(gb::device_heap& h, int n, std::size_t bytes) {
  for (int i = 0; i < n; ++i) h.unsafe_free(h.alloc(bytes));
  clear_stack();
  return 0;
}
}  // namespace

TEST(BoehmPolicies, EveryPolicyLoopsWithoutFailures) {
  for (const char* const* n = gcp::policy_names(); *n; ++n) {
    SCOPED_TRACE(*n);
    gb::device_heap h(host_opts(32 * MiB), *n);
    const std::string name = *n;
    // runtime_native asks for no collection and the caller frees nothing:
    // bdwgc alone, which runs out here (RuntimeNativeIsBdwgcAlone below).
    if (name == "runtime_native") continue;
    std::size_t failures;
    if (name == "explicit_free") failures = explicit_loop(h, 320, 1 * MiB);
    else failures = alloc_and_drop(h, 320, 1 * MiB, /*iteration_every=*/4);  // 10x the hard limit
    const auto s = h.stats();
    std::printf("%-16s minor %3llu, incremental full %3llu, blocking full %3llu, ladder %llu, gc %.2f ms, longest %.2f ms\n",
                *n, static_cast<unsigned long long>(s.gc.by_kind[0]), static_cast<unsigned long long>(s.gc.by_kind[1]),
                static_cast<unsigned long long>(s.gc.by_kind[2]),
                static_cast<unsigned long long>(s.ladder[static_cast<int>(gcp::ladder_step::finish_and_drain)]),
                s.gc.gc_seconds * 1e3, s.gc.longest_pause_seconds * 1e3);
    EXPECT_EQ(failures, 0u);
    EXPECT_EQ(s.ooms, 0u);
    EXPECT_EQ(s.allocations, 320u);
    EXPECT_EQ(s.gc.policy, name);
    if (name == "explicit_free") {
      EXPECT_EQ(s.gc.by_kind[0] + s.gc.by_kind[1] + s.gc.by_kind[2], 0u);
    }
    if (name == "pressure") {
      EXPECT_EQ(s.gc.by_kind[static_cast<int>(gcp::gc_kind::blocking_full)], 0u);
    }
    int fulls;
    collect_until_zero(h, fulls);
    EXPECT_EQ(h.stats().misuse_errors, 0u);
    expect_reclaimed_at_shutdown(h, fulls, 1 * MiB);
  }
}

// The runtime's own mechanism in C++ over bdwgc (issue 23): bdwgc has no call
// for memory allocated elsewhere, so runtime_native is its allocation-paced
// schedule alone. 1 MiB blocks behind 16-byte handles: bdwgc never sees a
// reason to collect, and the allocations run out; a user collection still
// returns every block.
TEST(BoehmPolicies, RuntimeNativeIsBdwgcAlone) {
  gb::device_heap h(host_opts(32 * MiB), "runtime_native");
  const std::size_t failures = alloc_and_drop(h, 64, 1 * MiB);
  EXPECT_GT(failures, 0u) << "runtime_native collected on its own";
  EXPECT_EQ(h.stats().ooms, failures);
  EXPECT_EQ(h.stats().gc.policy, "runtime_native");
  EXPECT_EQ(h.stats().gc.by_kind[0] + h.stats().gc.by_kind[1] + h.stats().gc.by_kind[2], 0u);
  int fulls;
  collect_until_zero(h, fulls);
  EXPECT_GT(fulls, 0);
}

TEST(BoehmPolicies, ExplicitFreeWithoutFreesFails) {
  gb::device_heap h(host_opts(32 * MiB), "explicit_free");
  const std::size_t failures = alloc_and_drop(h, 64, 1 * MiB);
  EXPECT_GT(failures, 0u) << "explicit_free collected: dropped handles were reclaimed";
  EXPECT_EQ(h.stats().ooms, failures);
  EXPECT_EQ(h.stats().gc.by_kind[0] + h.stats().gc.by_kind[1] + h.stats().gc.by_kind[2], 0u);
  int fulls;
  collect_until_zero(h, fulls);  // a user collection still returns the memory
  EXPECT_GT(fulls, 0);
}


