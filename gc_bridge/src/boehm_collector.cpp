// Boehm GC as a gcpressure collector, and process-wide Boehm set-up.
//
// Note [Boehm facts this file relies on] (Debian bdwgc 8.2.2; each checked by
// tests/test_boehm.cpp)
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
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "boehm_gc.hpp"
#include "gcpressure/boehm.hpp"

namespace gcpressure::boehm {

namespace {

std::atomic<bool> g_initialized{false};
std::atomic<std::uint64_t> g_full_starts{0};
std::atomic<std::uint64_t> g_gc_ns{0};
std::atomic<std::int64_t> g_gc_started_ns{0};
GC_on_collection_event_proc g_prev_event = nullptr;
GC_start_callback_proc g_prev_start = nullptr;  // e.g. Guile's before-GC hook

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Called with the GC lock held: only atomics here.
void GC_CALLBACK on_full_start() {
  g_full_starts.fetch_add(1, std::memory_order_relaxed);
  if (g_prev_start) g_prev_start();
}

void GC_CALLBACK on_event(GC_EventType e) {
  if (e == GC_EVENT_START) g_gc_started_ns.store(now_ns(), std::memory_order_relaxed);
  if (e == GC_EVENT_END) {
    const auto t0 = g_gc_started_ns.load(std::memory_order_relaxed);
    if (t0) g_gc_ns.fetch_add(static_cast<std::uint64_t>(now_ns() - t0), std::memory_order_relaxed);
  }
  if (g_prev_event) g_prev_event(e);
}

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
std::recursive_mutex& finalize_gate() {
  static auto* m = new std::recursive_mutex;  // leaked: the detached thread outlives statics
  return *m;
}

void finalizer_loop() {
  thread_scope reg;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(g_fin->mu);
      g_fin->cv.wait_for(lk, std::chrono::milliseconds(50), [] { return g_fin->pending; });
      g_fin->pending = false;
    }
    if (GC_should_invoke_finalizers()) {
      std::lock_guard<std::recursive_mutex> gate(finalize_gate());
      GC_invoke_finalizers();
    }
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

// Settings a minor collection runs with (see collect_minor).
struct gc_settings {
  int full_freq;
  unsigned long time_limit;
};

void* GC_CALLBACK swap_settings(void* p) {
  auto* s = static_cast<gc_settings*>(p);
  const gc_settings old{GC_get_full_freq(), GC_get_time_limit()};
  GC_set_full_freq(s->full_freq);
  GC_set_time_limit(s->time_limit);
  *s = old;
  return nullptr;
}

void* GC_CALLBACK set_full_freq(void* p) {
  auto* v = static_cast<int*>(p);
  const int old = GC_get_full_freq();
  GC_set_full_freq(*v);
  *v = old;
  return nullptr;
}

std::atomic<bool> g_full_active{false};
std::atomic<GC_word> g_full_start_no{0};

}  // namespace

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
    if (opt.finalizer_thread) GC_set_finalize_on_demand(1);
    if (opt.incremental) GC_enable_incremental();
    GC_INIT();
    GC_allow_register_threads();
    if (opt.incremental && opt.time_limit_ms) GC_set_time_limit(opt.time_limit_ms);
    if (opt.full_freq >= 0) {
      int v = opt.full_freq;
      GC_call_with_alloc_lock(set_full_freq, &v);
    }
    // Chain, never replace, the runtime's own hooks (Guile has both).
    g_prev_start = GC_get_start_callback();
    GC_set_start_callback(on_full_start);
    g_prev_event = GC_get_on_collection_event();
    GC_set_on_collection_event(on_event);
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

void boehm_collector::collect_minor() {
  if (!GC_is_incremental_mode()) {
    GC_gcollect();
    return;
  }
  // Note [A minor stays minor]: bdwgc turns every (full_freq+1)-th partial
  // cycle into a full one, which here would be a stop-the-world whole-heap
  // mark (seen: an 893 ms pause at a 1 GiB heap). And with a time limit the
  // first stopped mark of a partial cycle is abandoned and redone (20-30 ms
  // wasted). So a minor the policy asks for runs with the full frequency out
  // of reach and no time limit: one short stopped mark of roots and dirty
  // pages. Whole-heap work happens only in start_full/step_full slices.
  gc_settings minor{1 << 30, GC_TIME_UNLIMITED};
  GC_call_with_alloc_lock(swap_settings, &minor);
  GC_start_incremental_collection();
  while (GC_collect_a_little()) {
  }
  GC_call_with_alloc_lock(swap_settings, &minor);  // restores
}

bool boehm_collector::has_incremental_full() const noexcept { return GC_is_incremental_mode() != 0; }
bool boehm_collector::minor_is_whole_heap() const noexcept { return GC_is_incremental_mode() == 0; }

void boehm_collector::start_full() {
  if (!GC_is_incremental_mode()) {
    g_full_active.store(true);
    return;
  }
  // A cycle already under way would absorb the start: finish it first.
  while (GC_collect_a_little()) {
  }
  int zero = 0;
  GC_call_with_alloc_lock(set_full_freq, &zero);  // next cycle is whole-heap
  g_full_start_no.store(GC_get_gc_no());
  GC_start_incremental_collection();
  GC_call_with_alloc_lock(set_full_freq, &zero);  // restores the old frequency
  g_full_active.store(true);
}

bool boehm_collector::step_full(double budget_seconds) {
  if (!g_full_active.load()) return true;
  if (!GC_is_incremental_mode()) {
    GC_gcollect();
    g_full_active.store(false);
    return true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto budget = std::chrono::duration<double>(budget_seconds);
  // The cycle is done once the collection count moved past its start (the
  // mutator's own allocations may have finished it for us).
  while (GC_get_gc_no() == g_full_start_no.load()) {
    if (!GC_collect_a_little() && GC_get_gc_no() == g_full_start_no.load()) {
      // Nothing in progress and the count did not move: the start did not
      // take (GC disabled); report done rather than spin.
      break;
    }
    if (std::chrono::steady_clock::now() - t0 >= budget) return false;
  }
  g_full_active.store(false);
  return true;
}

bool boehm_collector::full_in_progress() const { return g_full_active.load(); }

void boehm_collector::collect_full() { GC_gcollect(); }

std::size_t boehm_collector::run_finalizers() {
  std::lock_guard<std::recursive_mutex> gate(finalize_gate());  // Note [One finalizer runner at a time]
  return static_cast<std::size_t>(GC_invoke_finalizers());
}

collector_counters boehm_collector::counters() const {
  collector_counters c;
  c.collections = GC_get_gc_no();
  c.full_collections = g_full_starts.load(std::memory_order_relaxed);
  c.seconds = static_cast<double>(g_gc_ns.load(std::memory_order_relaxed)) * 1e-9;
  GC_word heap = 0, free_bytes = 0, unmapped = 0, since = 0, total = 0;
  GC_get_heap_usage_safe(&heap, &free_bytes, &unmapped, &since, &total);
  c.heap_bytes = heap > free_bytes ? heap - free_bytes : 0;
  return c;
}

}  // namespace gcpressure::boehm
