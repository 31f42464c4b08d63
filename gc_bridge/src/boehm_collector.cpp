// Boehm GC as a gcpressure collector, and process-wide Boehm set-up.
//
// Note [Boehm facts this file relies on] (Debian bdwgc 8.2.2; each checked by
// tests/test_boehm_facts.cpp)
// - GC_THREADS before gc.h; threads not made through its wrappers register
//   (thread_scope). libgccpp is never linked: it replaces operator new.
// - Incremental mode = generational: a partial collection does not clear
//   mark bits, so an object that survived one collection is found dead only
//   by the next full one. GC_start_incremental_collection() starts a partial
//   cycle unless the count of partial cycles has reached the full frequency;
//   forcing that frequency to 0 for the start makes the cycle whole-heap.
// - GC_time_limit is unlimited by default (a cycle's mark runs in one pause);
//   with a limit, marking is sliced and GC_collect_a_little() advances it.
// - Dirty bits come from mprotect here (no soft-dirty bits), so nothing may
//   write GC pages from outside (the device driver writes only device or
//   pinned non-GC memory; handles are pointer-free GC_I_PTRFREE objects).
// - With GC_THREADS, objects on thread-local free lists are marked at every
//   collection, so GC_MALLOC_ATOMIC objects can be born marked and survive
//   partial collections young; handles use GC_generic_malloc instead (Note
//   [Handles come from the global free lists] in device_heap.cpp).
// - There is no API to tell Boehm about external bytes: the policy is ours.
// Verified in the 8.2.2 source (Debian's libgc_8.2.2, `apt-get source libgc1`):
// - alloc.c GC_stopped_mark: the only GC_gc_no++, followed at once by
//   GC_EVENT_MARK_END (same thread, allocation lock held): counting MARK_END
//   splits GC_get_gc_no() exactly (Note [Every collection is counted] in
//   boehm_runtime.cpp).
// - alloc.c GC_maybe_gc: in incremental mode a cycle is whole-heap when
//   GC_need_full_gc or its static n_partial_gcs >= GC_full_freq (then it
//   runs GC_reclaim_all, GC_notify_full_gc = the start callback, and
//   GC_clear_marks, and resets n_partial_gcs); otherwise n_partial_gcs++.
//   Every partial cycle counts, ours included. GC_try_to_collect_inner
//   (GC_gcollect, and every collection without incremental mode) also calls
//   the start callback, after finishing a cycle in progress.
// - alloc.c: GC_EVENT_START/END fire only in GC_try_to_collect_inner; the
//   stopped marks of incremental cycles fire PRE_STOP_WORLD..POST_START_WORLD
//   (also when abandoned at the time limit), GC_finish_collection fires
//   RECLAIM_START/END; the mark slices GC_collect_a_little_inner runs with
//   the world running fire nothing.
// - alloc.c GC_try_to_collect_general: GC_gcollect runs finalizers inline
//   (GC_INVOKE_FINALIZERS) unless finalization is on demand.
// - pthread_support.c GC_thr_init: the GC_MARKERS variable overrides
//   GC_set_markers_count(); without either, markers = number of CPUs.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <signal.h>

#include "boehm_gc.hpp"
#include "boehm_runtime.hpp"
#include "gcpressure/boehm.hpp"
#include "gcpressure/collection_scope.hpp"

namespace gcpressure::boehm {

namespace {

std::atomic<bool> g_initialized{false};

// The finalizer thread's state is leaked on purpose: the thread is detached
// and may still run while static destructors do.
struct finalizer_thread_state {
  std::mutex mu;
  std::condition_variable cv;
  bool pending = false;
};
finalizer_thread_state* g_fin = nullptr;

void GC_CALLBACK notify_finalizers() {
  {
    std::lock_guard<std::mutex> lk(g_fin->mu);
    g_fin->pending = true;
  }
  g_fin->cv.notify_one();
}

// Note [One finalizer runner at a time]
// The policy measures what a collection reclaimed right after running the
// finalizers and draining. If the finalizer thread were half-way through a
// finalizer then (it popped the object, has not pushed the block yet), the
// block would be missed and the policy would learn a wrong live set. Both
// runners take this (recursive: a finalizer may allocate and, on its own
// thread, reach run_finalizers again) gate around GC_invoke_finalizers.
// The same holds half-way through a drain: the deferred queue's drain takes
// the whole list at once and frees its entries after, so a drain that finds
// the queue empty while the finalizer thread's drain_all holds the list
// returns with those blocks still counted live. Measured (issue: CI's ASan
// round, BoehmStaleStack.ClearingBelowTheCallerFreesWhatDeadFramesNamed got
// 65536 live bytes for 0): 19 of 1200 runs on a 2-core machine (with and
// without a CPU hog), its sibling AHintsCollection... 7 of 300; in the 7
// instrumented failures the buffer was already finalized, and in 6 the
// finalizer thread was inside drain_all at the failed check, its drain then
// freeing exactly those 65536 bytes. Not a stale stack word, not bdwgc's
// mmap hint: no collection ran between the check and the release. So the
// thread drains under the gate too, and run_finalizers() drains every heap
// under it before returning: when it returns, every block whose finalizer has
// run is freed, whichever runner ran it.
std::recursive_mutex& finalize_gate() {
  static auto* m = new std::recursive_mutex;  // leaked: the detached thread outlives statics
  return *m;
}

// Note [TSan leaves the finalizer thread deaf]
// Under ThreadSanitizer (GCC 12's libtsan) a registered thread can come out
// of bdwgc's suspend handler with every signal blocked: measured from
// /proc/<pid>/task/<tid>/status, the finalizer thread's SigBlk went from the
// handler's mask straight to "all" and stayed there, bdwgc's stop-the-world
// signal stayed pending, and after 150 resends bdwgc aborted ("Signals
// delivery fails constantly"; c_api 1 run in 12, BoehmDevices.
// BuffersReturnToTheirOwnDevice 5 in 9, three at once). Plain builds never
// block these signals. So under TSan the loop unblocks bdwgc's two signals
// before each wait: a deaf thread hears the next resend within one wait.
void unblock_gc_signals_under_tsan() {
#if defined(__SANITIZE_THREAD__)
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, GC_get_suspend_signal());
  sigaddset(&set, GC_get_thr_restart_signal());
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
#endif
}

// Note [The finalizer thread parks outside the collector's view]
// A registered thread parked in a wait is stopped by a signal at every
// collection, and bdwgc scans its registers as saved in the signal frame and
// its stack from there. The finalizer thread parks right after running
// finalizers and draining, so those registers can still hold a handle it
// touched: measured (tests/reliability, a survivor search over the
// RegisteredThreads workload), 1 handle of 2400 kept alive by a word in the
// parked finalizer thread's signal frame, 240 bytes below its futex wait's
// stack pointer, in about 2 runs of 3 on this machine. GC_do_blocking is
// bdwgc's way to block: the thread is not signalled while inside, and only
// its stack above the call (with the callee-saved registers pushed at entry)
// is scanned. The wait touches no GC memory, as GC_do_blocking requires.
void* wait_for_work(void*) {
  std::unique_lock<std::mutex> lk(g_fin->mu);
  g_fin->cv.wait_for(lk, std::chrono::milliseconds(50), [] { return g_fin->pending; });
  g_fin->pending = false;
  return nullptr;
}

void finalizer_loop() {
  thread_scope reg;
  for (;;) {
    unblock_gc_signals_under_tsan();
#if defined(__SANITIZE_THREAD__)
    // Note [TSan leaves the finalizer thread deaf]: under TSan the thread
    // must take bdwgc's signals during its wait to hear a resend; measured
    // with GC_do_blocking there: c_api and BoehmDevices.
    // BuffersReturnToTheirOwnDevice aborted ("Signals delivery fails
    // constantly") in 2 of 3 tsan_boehm rounds at load 8; with the plain
    // wait 4 of 5 rounds at that load were green, the fifth failed one
    // test (load-bound, as docs in scripts/test.sh say).
    // TSan's round runs without incremental mode, where no parked
    // register can keep a young handle past the next minor.
    wait_for_work(nullptr);
#else
    GC_do_blocking(wait_for_work, nullptr);
#endif
    if (GC_should_invoke_finalizers()) {
      // A client's finalizer that allocates device memory from here is
      // inside the collection that found its object (Note [Inside a
      // collection]): served without the policy, never waiting for it.
      collection_scope inside;
      std::lock_guard<std::recursive_mutex> gate(finalize_gate());
      GC_invoke_finalizers();
    }
    std::lock_guard<std::recursive_mutex> gate(finalize_gate());  // Note [One finalizer runner at a time]
    detail::drain_all();
  }
}

// Note [Vendor libraries are not roots]
// bdwgc scans the data segments of every loaded library as roots at every
// collection. cuBLAS/cuBLASLt and friends carry hundreds of MiB of static
// data (measured: a 309 ms mark of an empty heap in a binary that merely links
// cuBLAS), yet they never hold pointers to objects of a client's GC heap.
// Skipping them makes a minor collection cost what the runtime's own heap
// costs.
int GC_CALLBACK scan_library(const char* name, void*, std::size_t) {
  if (!name) return 1;
  static const char* const skip[] = {"libcublas", "libcublasLt", "libcudart", "libcuda.so", "libnvidia",
                                     "libcudnn",  "libnccl",     "libcufft",  "libcurand",  "libcusparse",
                                     "libcusolver", "libnvrtc",  "libnvJitLink", "libcupti", "libtorch_cuda",
                                     "libc10_cuda", "libnvToolsExt"};
  for (const char* s : skip)
    if (std::strstr(name, s)) return 0;
  return 1;
}

}  // namespace

// Note [Who owns whole-heap cycles] (for docs/DESIGN.md; measured by h1,
// 2026-12-01, host backend, a shared 2-core CPU machine, the tree at
// fe57ca6: Boehm's own counts come from Note [Every collection is counted])
// Question: should runtime_options.full_freq default to "out of reach", so
// that only the policy starts whole-heap cycles? Answer: no; the default
// stays Boehm's (-1: 19, or GC_FULL_FREQUENCY), because in incremental mode
// Boehm's own whole-heap collections do not come from the frequency:
// GC_finish_collection (alloc.c) sets GC_need_full_gc after a partial one
// when the used heap grew by more than min_bytes_allocd() since the last
// full, and GC_maybe_gc then runs a full whatever GC_full_freq says.
// Measured, 3 runs each, GC_FULL_FREQUENCY=19 vs 10^9 (Boehm reads it at
// GC_INIT; init() keeps it when full_freq is -1):
//   build/h1/examples/forward_loop --backend host --host-heap-mib H
//     --host-allocs A --iters 400 --json --quiet
//   H=256 A=300 (the brief's command): Boehm's own collections 0 and 0 in
//     every run (min_bytes_allocd scales with the 256 MiB live heap); heap in
//     use 259-267 vs 259 MiB.
//   H=256 A=3000: own 0 and 0; heap in use 283-307 vs 291-299 MiB.
//   H=0 A=300: own 70-90 (whole-heap 11-16) vs 84-86 (14-16); heap < 1 MiB.
//   H=0 A=3000: own 728-794 (whole-heap 188-214) vs 654-776 (155-209).
//   Again at 0d22b5e (Boehm without a time limit by default), H=0 A=300:
//   own 92-100 (whole-heap 12-20) vs 89-97 (15-20); heap < 1 MiB.
// So the frequency changes neither the counts nor the heap here, and
// taking it out of reach would drop Boehm's only periodic reclamation of
// old *host* garbage for runtimes whose policy looks at device bytes. The
// policy learns of Boehm's own whole-heap collections through
// counters().own_full_collections instead. GC_INITIAL_HEAP_SIZE=64M at H=0
// A=300 did not change them either (own 74-77, whole-heap 9-10, vs 72-82,
// 10-11): min_bytes_allocd() follows the bytes in use, not the heap size.
// alloc.c: a stopped mark with a time limit, and GC_collect_a_little_inner
// with one, set GC_parallel_mark_disabled, so only minors without a time
// limit mark in parallel; time-limited slices (whole-heap, and sliced
// minors) never do.
//
// Note [One marker for minors] (runtime_options.markers defaults to 1)
// Measured on the H200's host (16 CPUs, so bdwgc's default is 16 markers),
// bench/minor_bench.cpp boehm/minor_in_loop/256/*: the forward loop's
// allocations (8 x Dense(4096), batch 1024, cuda_async) over a 256 MiB heap
// of 64-byte linked nodes, a library minor after every iteration; per case
// the median of 60 minors, 3 cases per variant (bench/RESULTS.md, 2026-12-02):
//   markers  minor, device busy / idle / no device   mark phase   host ms/iter
//   16       7.06 / 6.80 / 7.51 ms                    4.9-7.1 ms   1.35-2.5
//   1        3.48 / 3.67 / 3.13 ms                    2.0-2.4 ms   0.08-0.42
// (host ms/iter: the loop's own allocations and launches, 0.17-0.40 ms with
// no minors.) With 16 markers only the process's first case was fast (3.67
// ms, host 0.57 ms); every later one ran at 6.2-8.6 ms with 1.35-2.5 ms of
// host time, the heap holding 2.5-3.3 MiB of unmapped blocks and the kernel
// serving ~6 page faults per iteration. With one marker all 12 cases (720
// minors) stayed at 3.1-3.7 ms, no block unmapped, no page faults: the
// in-loop minor is 1.11x the one with no device (target 1.3x), and the
// minor fits the ~5.2 ms the host waits at a sync. A partial collection's
// work is mostly serial (GC_read_dirty and GC_protect_heap, then
// GC_push_next_marked_dirty over every block, then little marking), and
// parallel marking keeps approximate block mark counts (mark.c, reclaim.c:
// never decremented to zero); which of bdwgc's paths turns 16 markers into
// the slow state is not pinned down (the sliced minor, marked by one thread
// in the same 16-marker process, was slow too: 5.3-7.7 ms, host 1.0-2.5).
// The price: blocking whole-heap collections (GC_gcollect: shutdown, the
// reclaim ladder, baselines' blocking fulls, bdwgc's own) mark in one thread;
// the policy's whole-heap cycles are sliced and never marked in parallel.
// GC_MARKERS or runtime_options.markers = 0 give bdwgc's default back.
void init(const runtime_options& o) {
  static std::once_flag once;
  std::call_once(once, [&] {
    // Note [Sharing bdwgc with a runtime]: when the runtime (Guile) has
    // already initialised bdwgc and installed its own finalizer notifier,
    // its finalization is left alone whatever `o` asks: no second finalizer
    // thread, no new notifier, no mode switch behind its back.
    const bool runtime_owns = GC_is_init_called() && GC_get_finalizer_notifier() != nullptr;
    runtime_options opt = o;
    if (runtime_owns) {
      opt.finalizer_thread = false;
      opt.incremental = opt.incremental && GC_is_incremental_mode();
    }
    if (!runtime_owns && opt.skip_vendor_roots) GC_register_has_static_roots_callback(scan_library);
    if (opt.markers > 0 && !GC_is_init_called()) GC_set_markers_count(opt.markers);  // before GC_INIT or never
    if (opt.finalizer_thread) GC_set_finalize_on_demand(1);
    if (opt.incremental) GC_enable_incremental();
    GC_INIT();
    GC_allow_register_threads();
    auto& rt = detail::boehm_runtime::instance();
    rt.configure(opt.full_freq >= 0 ? opt.full_freq : GC_get_full_freq(),
                 opt.incremental && opt.time_limit_ms ? opt.time_limit_ms : GC_get_time_limit());
    rt.install_hooks();
    if (opt.finalizer_thread) {
      g_fin = new finalizer_thread_state;
      GC_set_finalizer_notifier(notify_finalizers);
      std::thread(finalizer_loop).detach();
    }
    g_initialized.store(true);
  });
}

bool initialized() noexcept { return g_initialized.load(); }

thread_scope::thread_scope() {
  if (GC_thread_is_registered()) return;
  GC_stack_base sb;
  if (GC_get_stack_base(&sb) != GC_SUCCESS) return;
  registered_ = GC_register_my_thread(&sb) == GC_SUCCESS;
}

thread_scope::~thread_scope() {
  if (registered_) GC_unregister_my_thread();
}

boehm_collector::boehm_collector() { init(); }

// Every call goes to the one owner of process-wide Boehm state (Note [One
// owner of process-wide Boehm state] in boehm_runtime.hpp).
void boehm_collector::collect_minor() { detail::boehm_runtime::instance().collect_minor(); }
bool boehm_collector::minor_is_whole_heap() const noexcept { return GC_is_incremental_mode() == 0; }
bool boehm_collector::has_incremental_minor() const noexcept { return GC_is_incremental_mode() != 0; }
void boehm_collector::start_minor() { detail::boehm_runtime::instance().start_minor(); }
bool boehm_collector::step_minor(double budget_seconds) {
  return detail::boehm_runtime::instance().step_minor(budget_seconds);
}
void boehm_collector::start_full() { detail::boehm_runtime::instance().start_full(); }
bool boehm_collector::step_full(double budget_seconds) { return detail::boehm_runtime::instance().step_full(budget_seconds); }
bool boehm_collector::full_in_progress() const noexcept { return detail::boehm_runtime::instance().full_in_progress(); }
void boehm_collector::collect_full() { detail::boehm_runtime::instance().collect_full(); }

// Note [One finalizer runner at a time]: returns with the blocks of every
// finalizer that ran (here or on the finalizer thread) freed.
std::size_t boehm_collector::run_finalizers() {
  std::lock_guard<std::recursive_mutex> gate(finalize_gate());
  const auto ran = static_cast<std::size_t>(GC_invoke_finalizers());
  detail::drain_all();
  return ran;
}

collector_counters boehm_collector::counters() const { return detail::boehm_runtime::instance().counters(); }

std::uint64_t boehm_collector::policy_collections() noexcept {
  return detail::boehm_runtime::instance().policy_collections();
}

}  // namespace gcpressure::boehm
