// The Boehm facts the bridge relies on (Note [Boehm facts this file relies
// on] in gc_bridge/src/boehm_collector.cpp), each checked against the
// installed bdwgc: incremental (generational) mode with mprotect dirty bits,
// handles as pointer-free GC objects, thread registration, what partial and
// whole-heap collections find, the finalizer thread, and why handles come
// from bdwgc's global free lists. Part of the test_boehm binary, whose
// test_boehm.cpp initialises Boehm; Note [Exact accounting under a
// conservative collector] there says how these tests keep dropped handles
// unreachable.
#include "boehm_test_support.hpp"
#include "test_boehm_shared.hpp"

#include <gc/gc_inline.h>  // GC_I_PTRFREE

#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using gcp_boehm_test::g_keep;
using gcp_boehm_test::host_opts;
using gcp_test::clear_stack;
using gcp_test::no_automatic_full;
using gcp_test::settle;

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
