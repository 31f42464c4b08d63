// Boehm bridge tests (host backend): finalizers return device memory,
// unsafe_free, use after heap shutdown, and every policy with the real
// collector. The Boehm facts the bridge relies on are
// tests/test_boehm_facts.cpp; registered threads, test_boehm_threads.cpp.
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
#include "test_boehm_shared.hpp"

#include <cstdlib>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using gcp_boehm_test::g_keep;
using gcp_boehm_test::host_opts;
using gcp_test::clear_stack;
using gcp_test::settle;

namespace {

[[maybe_unused]] const bool g_env = gcp_test::init_boehm_first();

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
