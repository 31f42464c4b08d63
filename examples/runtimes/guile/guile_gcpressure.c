/* guile_gcpressure.c — the (gcpressure) extension for Guile 3.0.
 *
 * Loaded by gcpressure.scm through (load-extension "libguile-gcpressure"
 * "scm_init_gcpressure"). Device arrays are Guile foreign objects whose
 * finalizer hands the device block back with
 * gcpressure_release_from_finalizer(); the allocator's collector is Guile's
 * own bdwgc, registered as gcpressure collector callbacks (see README.md,
 * "Design"). There is one bdwgc in the process: this module, libguile and
 * libgcpressure.so all link the shared libgc.so.1.
 *
 * Compiled as C11. Every gcpressure call returns a status; a failure becomes
 * a Scheme exception (throw 'gcpressure-error STATUS-SYMBOL MESSAGE), raised
 * only after every C resource of the call is released.
 */
#define _GNU_SOURCE 1 /* dladdr */
#include <dlfcn.h>
#include <libguile.h>
#include <libguile/bdw-gc.h> /* Guile's own include of <gc/gc.h> (GC_THREADS etc.) */
#include <gc/gc_mark.h>       /* GC_get_start_callback */

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcpressure/gcpressure.h"

#ifdef GCP_GUILE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- foreign object types ------------------------------------------------ */

/* <gcpressure-heap>: slot 0 the allocator, slot 1 flags (HEAP_FLAG_*), slot 2
 * nonzero when the memory is CUDA device memory. Heaps are not finalized:
 * arrays may outlive a dropped heap object and still release into it, so the
 * allocator is destroyed only by heap-destroy! (after which array finalizers
 * get GCPRESSURE_ERR_SHUTDOWN from the tombstone and do nothing). */
static SCM heap_type;
enum { HEAP_ALLOC = 0, HEAP_KIND, HEAP_DEVICE_MEM };
enum { HEAP_FLAG_BOEHM = 1, HEAP_FLAG_NATIVE = 2 };

/* <device-array>: slot 0 the allocator, slot 1 the device pointer (callbacks
 * collector) or the gcpressure_buffer* (Boehm collector), slot 2 bytes, slot 3
 * flags. Slot 1 is NULL once freed. Foreign objects are conservatively scanned
 * GC memory, so in Boehm mode slot 1 keeps the GC-owned buffer handle alive. */
static SCM array_type;
enum { ARR_ALLOC = 0, ARR_PTR, ARR_BYTES, ARR_FLAGS };
enum { ARR_FLAG_BOEHM = 1, ARR_FLAG_DEVICE_MEM = 2 };

static SCM sym_gcpressure_error;

/* Counters of this module (atomics: finalizers may run on Guile's finalizer
 * thread while the main thread reads them). */
static uint64_t g_array_finalized;   /* device-array finalizers that released a block */
static uint64_t g_release_failed;    /* releases that found the heap destroyed */
static uint64_t g_finalized_elsewhere; /* ... of them on a thread other than the loading one */
static pthread_t g_main_thread;        /* the thread that loaded the module */

static SCM status_symbol(gcpressure_status s) {
  switch (s) {
    case GCPRESSURE_OK: return scm_from_utf8_symbol("ok");
    case GCPRESSURE_ERR_INVALID: return scm_from_utf8_symbol("invalid");
    case GCPRESSURE_ERR_OOM: return scm_from_utf8_symbol("oom");
    case GCPRESSURE_ERR_MISUSE: return scm_from_utf8_symbol("misuse");
    case GCPRESSURE_ERR_SHUTDOWN: return scm_from_utf8_symbol("shutdown");
    case GCPRESSURE_ERR_CUDA: return scm_from_utf8_symbol("cuda");
    case GCPRESSURE_ERR_UNSUPPORTED: return scm_from_utf8_symbol("unsupported");
    case GCPRESSURE_ERR_BUSY: return scm_from_utf8_symbol("busy");
    case GCPRESSURE_ERR_TRUNCATED: return scm_from_utf8_symbol("truncated");
    case GCPRESSURE_ERR_INTERNAL: return scm_from_utf8_symbol("internal");
  }
  return scm_from_utf8_symbol("unknown");
}

/* Raises (gcpressure-error STATUS MESSAGE) unless s is OK. The message is
 * copied into a Scheme string before anything else can overwrite it. */
static void check_status(gcpressure_status s, const char* who) {
  if (s == GCPRESSURE_OK) return;
  SCM msg = scm_from_utf8_string(gcpressure_last_error());
  scm_throw(sym_gcpressure_error,
            scm_list_3(scm_from_utf8_symbol(who), status_symbol(s), msg));
}

/* Runs on whichever thread invokes finalizers: Guile's finalizer thread, or
 * ours inside a collection the policy asked for (run_finalizers below).
 * Queues only: lock-free, no CUDA call (gcpressure.h: finalizer-safe). */
static void array_finalize(SCM obj) {
  gcpressure_allocator* a = scm_foreign_object_ref(obj, ARR_ALLOC);
  void* p = scm_foreign_object_ref(obj, ARR_PTR);
  const size_t bytes = scm_foreign_object_unsigned_ref(obj, ARR_BYTES);
  const scm_t_bits flags = scm_foreign_object_unsigned_ref(obj, ARR_FLAGS);
  if (!p || (flags & ARR_FLAG_BOEHM)) return; /* freed, or the Boehm handle finalizes itself */
  scm_foreign_object_set_x(obj, ARR_PTR, NULL);
  if (!pthread_equal(pthread_self(), g_main_thread))
    __atomic_add_fetch(&g_finalized_elsewhere, 1, __ATOMIC_RELAXED);
  if (gcpressure_release_from_finalizer(a, p, bytes, NULL) == GCPRESSURE_OK)
    __atomic_add_fetch(&g_array_finalized, 1, __ATOMIC_RELAXED);
  else
    __atomic_add_fetch(&g_release_failed, 1, __ATOMIC_RELAXED);
}

/* ---- Guile's collector as gcpressure callbacks ---------------------------- */
/* Guile runs bdwgc non-incrementally: every collection marks the whole heap,
 * so "minor" and "full" are the same GC_gcollect(). Finalizers are run on our
 * thread right after (scm_run_finalizers = GC_invoke_finalizers + Guile's own
 * count), which is what `(gc)` does too. Guile's notifier has meanwhile woken
 * Guile's finalizer thread, which takes pending finalizers concurrently: each
 * runs once, on one thread or the other, and a block it queues after the
 * policy's drain returns at the next allocation's drain.
 *
 * Note [Counting Guile's own collections]
 * bdwgc counts every collection (GC_get_gc_no, exact) and, once
 * GC_start_performance_measurement() was called (at module load), the
 * milliseconds of every stop-the-world one (GC_get_full_gc_total_time, set
 * in alloc.c GC_try_to_collect_inner). Those inside our callbacks (of any
 * heap: one bdwgc per process) are the policy's; the rest are Guile's own,
 * from its allocation or a `(gc)` of the program:
 *   collections: exact (GC_get_gc_no deltas);
 *   whole-heap: = collections while bdwgc is not incremental (Guile's mode;
 *     exact); an upper bound if a 'boehm heap switched incremental mode on;
 *   seconds: from bdwgc's millisecond total: not exact (ms steps, and
 *     collections before the module loaded are not counted). */
static uint64_t g_gc_no_ours;   /* collections completed inside our callbacks */
static uint64_t g_gc_ms_ours;   /* their milliseconds */
static uint64_t g_gc_no_base;   /* GC_get_gc_no() when the module loaded */
static uint64_t g_gc_ms_base;

static void cb_collect(void* ctx) {
  (void)ctx;
  const uint64_t n0 = GC_get_gc_no(), ms0 = GC_get_full_gc_total_time();
  GC_gcollect();
  __atomic_add_fetch(&g_gc_no_ours, GC_get_gc_no() - n0, __ATOMIC_RELAXED);
  __atomic_add_fetch(&g_gc_ms_ours, GC_get_full_gc_total_time() - ms0, __ATOMIC_RELAXED);
}
static size_t cb_run_finalizers(void* ctx) {
  (void)ctx;
  const int n = scm_run_finalizers();
  return n > 0 ? (size_t)n : 0;
}
static size_t cb_heap_bytes(void* ctx) {
  (void)ctx;
  return GC_get_heap_size() - GC_get_free_bytes();
}
/* The C API's own_collections callback: thread-safe (bdwgc reads and
 * atomics), never collects (Note [Counting Guile's own collections]). */
static void own_counts(uint64_t* n, uint64_t* full, double* seconds) {
  const uint64_t all = GC_get_gc_no() - g_gc_no_base;
  const uint64_t ours = __atomic_load_n(&g_gc_no_ours, __ATOMIC_RELAXED);
  const uint64_t ms = GC_get_full_gc_total_time() - g_gc_ms_base;
  const uint64_t ms_ours = __atomic_load_n(&g_gc_ms_ours, __ATOMIC_RELAXED);
  *n = all > ours ? all - ours : 0;
  *full = *n;
  *seconds = (ms > ms_ours ? ms - ms_ours : 0) * 1e-3;
}
static void cb_own_collections(void* ctx, uint64_t* n, uint64_t* full, double* seconds, int* exact) {
  (void)ctx;
  own_counts(n, full, seconds);
  *exact = 0;
}

/* ---- heaps ---------------------------------------------------------------- */

/* The backend through the library's options table (gcpressure_options_set):
 * its names (cuda-async is its documented alias of cuda_async, '-' standing
 * for '_') and its message, the one GCPRESSURE_BACKEND gets. */
static void set_backend(gcpressure_options* o, SCM s) {
  if (!scm_is_symbol(s) && !scm_is_string(s))
    scm_wrong_type_arg_msg("make-device-heap", 1, s, "#f, a backend symbol or string");
  char* b = scm_to_utf8_string(scm_is_symbol(s) ? scm_symbol_to_string(s) : s);
  const gcpressure_status st = gcpressure_options_set(o, "backend", b);
  free(b);
  check_status(st, "make-device-heap");
}

/* Note [Every option of the table]
 * make-device-heap takes every option of the library's table as a keyword
 * (gcpressure.scm turns them into (NAME . TEXT) pairs); each is set here
 * through gcpressure_options_set, so its parser and its message are the ones
 * its GCPRESSURE_* variable gets. Before, only the backend, the limits and
 * the policy were taken, the limits and policy checked later and named
 * options.X in their messages. */
static void set_table_options(gcpressure_options* o, SCM alist) {
  for (SCM p = alist; scm_is_pair(p); p = scm_cdr(p)) {
    char* name = scm_to_utf8_string(scm_caar(p));
    char* text = scm_to_utf8_string(scm_cdar(p));
    const gcpressure_status st = gcpressure_options_set(o, name, text);
    free(name);
    free(text);
    check_status(st, "make-device-heap");
  }
}

/* Note [Options and the environment]: an option left out is left unset,
 * and gcpressure_create fills it from the GCPRESSURE_* environment, then from
 * its defaults; an explicit option overrides the environment. (gcpressure.scm
 * passes backend 'host unless GCPRESSURE_BACKEND is set.) */
static SCM make_heap(SCM backend, SCM options, SCM collector, SCM incremental) {
  gcpressure_options o;
  gcpressure_options_init(&o);
  if (scm_is_true(backend)) set_backend(&o, backend);
  set_table_options(&o, options);
  const int boehm = scm_is_symbol(collector) && scm_is_eq(collector, scm_from_utf8_symbol("boehm"));
  if (!boehm && !(scm_is_symbol(collector) && scm_is_eq(collector, scm_from_utf8_symbol("callbacks"))))
    scm_misc_error("make-device-heap", "unknown collector ~S (callbacks, boehm)", scm_list_1(collector));
  o.collector = boehm ? GCPRESSURE_COLLECTOR_BOEHM : GCPRESSURE_COLLECTOR_CALLBACKS;

  if (boehm) {
    /* Guile initialised bdwgc long before this (GC_INIT is idempotent) and
     * set GC_set_finalize_on_demand(1) with its own notifier and finalizer
     * thread: finalizer_thread must stay 0 so that gcpressure neither
     * replaces that notifier nor starts a second finalizer thread. This call
     * must come before gcpressure_create: device_heap's constructor would
     * otherwise initialise with the defaults (incremental + own thread). */
    check_status(gcpressure_boehm_init(scm_is_true(incremental), 0), "make-device-heap");
  } else if (scm_is_true(incremental)) {
    scm_misc_error("make-device-heap",
                   "#:incremental? needs #:collector 'boehm (Guile's callbacks collect the whole heap)", SCM_EOL);
  }

  gcpressure_allocator* a = NULL;
  gcpressure_status st = gcpressure_create(&o, &a);
  check_status(st, "make-device-heap");

  if (!boehm) {
    gcpressure_collector_callbacks cb;
    gcpressure_collector_callbacks_init(&cb);
    cb.minor = cb_collect;
    cb.full = cb_collect;
    /* GC_gcollect marks the whole heap (Guile runs bdwgc non-incrementally,
     * and GC_gcollect is a full collection even when a 'boehm heap switched
     * incremental mode on): the policy then records these minors as
     * blocking full collections and knows they left no old garbage. */
    cb.minor_is_full = 1;
    cb.run_finalizers = cb_run_finalizers;
    cb.heap_bytes = cb_heap_bytes;
    cb.own_collections = cb_own_collections;
    st = gcpressure_set_collector(a, &cb);
    if (st != GCPRESSURE_OK) {
      SCM msg = scm_from_utf8_string(gcpressure_last_error());
      gcpressure_destroy(a);
      scm_throw(sym_gcpressure_error, scm_list_3(scm_from_utf8_symbol("make-device-heap"), status_symbol(st), msg));
    }
  }
  /* The stats say which backend it took (AUTO, or the environment's). */
  char js[8192];
  const int device_mem =
      gcpressure_stats_json(a, js, sizeof js, NULL) != GCPRESSURE_OK || !strstr(js, "\"backend\":\"host\"");
  const uintptr_t flags = (boehm ? HEAP_FLAG_BOEHM : 0) | (strstr(js, "\"policy\":\"runtime_native\"") ? HEAP_FLAG_NATIVE : 0);
  void* vals[3] = {a, (void*)flags, (void*)(uintptr_t)device_mem};
  return scm_make_foreign_object_n(heap_type, 3, vals);
}

static gcpressure_allocator* heap_of(SCM heap, const char* who) {
  scm_assert_foreign_object_type(heap_type, heap);
  gcpressure_allocator* a = scm_foreign_object_ref(heap, HEAP_ALLOC);
  if (!a) scm_misc_error(who, "the heap was destroyed", SCM_EOL);
  return a;
}

static SCM heap_destroy(SCM heap) {
  gcpressure_allocator* a = heap_of(heap, "heap-destroy!");
  /* Arrays already unreachable go back first (a whole-heap collection, their
   * finalizers, the drain); those still reachable stay valid memory that the
   * allocator reports and leaks (gcpressure_destroy), and their finalizers
   * later find the tombstone and do nothing. */
  check_status(gcpressure_collect(a, 1), "heap-destroy!");
  check_status(gcpressure_destroy(a), "heap-destroy!");
  scm_foreign_object_set_x(heap, HEAP_ALLOC, NULL);
  return SCM_UNSPECIFIED;
}

static SCM heap_iteration(SCM heap) {
  check_status(gcpressure_iteration(heap_of(heap, "heap-iteration!")), "heap-iteration!");
  return SCM_UNSPECIFIED;
}

static SCM heap_quiet_moment(SCM heap, SCM will_block) {
  const int wb = !SCM_UNBNDP(will_block) && scm_is_true(will_block);
  check_status(gcpressure_quiet_moment_ex(heap_of(heap, "heap-quiet-moment!"), wb), "heap-quiet-moment!");
  return SCM_UNSPECIFIED;
}

/* Waits for the work queued on STREAM (#f or absent: the default stream; an
 * integer: a cudaStream_t's address) and lets the policy collect while it runs. */
static SCM heap_synchronize(SCM heap, SCM stream) {
  void* st = NULL;
  if (!SCM_UNBNDP(stream) && scm_is_true(stream)) st = (void*)(uintptr_t)scm_to_uintptr_t(stream);
  check_status(gcpressure_synchronize(heap_of(heap, "heap-synchronize!"), st), "heap-synchronize!");
  return SCM_UNSPECIFIED;
}

static SCM heap_collect(SCM heap, SCM full) {
  check_status(gcpressure_collect(heap_of(heap, "heap-collect!"), scm_is_true(full)), "heap-collect!");
  return SCM_UNSPECIFIED;
}

static SCM heap_drain(SCM heap) {
  check_status(gcpressure_drain(heap_of(heap, "heap-drain!")), "heap-drain!");
  return SCM_UNSPECIFIED;
}

static SCM heap_stats(SCM heap) {
  gcpressure_allocator* a = heap_of(heap, "heap-stats");
  char small[4096];
  size_t need = 0;
  gcpressure_status st = gcpressure_stats_json(a, small, sizeof small, &need);
  if (st == GCPRESSURE_OK) return scm_from_utf8_string(small);
  if (st != GCPRESSURE_ERR_TRUNCATED) check_status(st, "heap-stats");
  char* big = scm_gc_malloc_pointerless(need, "heap-stats");
  check_status(gcpressure_stats_json(a, big, need, NULL), "heap-stats");
  return scm_from_utf8_string(big);
}

static SCM heap_usage(SCM heap) {
  size_t live = 0, reserved = 0;
  check_status(gcpressure_usage(heap_of(heap, "heap-usage"), &live, &reserved), "heap-usage");
  return scm_values(scm_list_2(scm_from_size_t(live), scm_from_size_t(reserved)));
}

/* A limit argument of heap-set-limits!: bytes (0 or #f: unchanged) or a
 * size string read as make-device-heap reads its limits ("64MiB", "64 MB",
 * "50%" of the device) by the library's parser, gcpressure_parse_size. */
static size_t limit_arg(gcpressure_allocator* a, SCM v) {
  if (scm_is_false(v)) return 0;
  if (!scm_is_string(v)) return scm_to_size_t(v);
  char js[8192];
  size_t device_total = 0;
  if (gcpressure_stats_json(a, js, sizeof js, NULL) == GCPRESSURE_OK) {
    const char* t = strstr(js, "\"device_total\":");
    if (t) device_total = (size_t)strtoull(t + 15, NULL, 10);
  }
  char* text = scm_to_utf8_string(v);
  size_t bytes = 0;
  const gcpressure_status st = gcpressure_parse_size(text, device_total, &bytes);
  free(text);
  check_status(st, "heap-set-limits!");
  return bytes;
}

static SCM heap_set_limits(SCM heap, SCM soft, SCM hard) {
  gcpressure_allocator* a = heap_of(heap, "heap-set-limits!");
  const size_t s = limit_arg(a, soft), h = limit_arg(a, hard);
  check_status(gcpressure_set_limits(a, s, h), "heap-set-limits!");
  return SCM_UNSPECIFIED;
}

/* ---- device arrays -------------------------------------------------------- */

static SCM make_array(SCM heap, SCM bytes_scm) {
  gcpressure_allocator* a = heap_of(heap, "device-array");
  const size_t bytes = scm_to_size_t(bytes_scm);
  const scm_t_bits kind = scm_foreign_object_unsigned_ref(heap, HEAP_KIND);
  const int boehm = (kind & HEAP_FLAG_BOEHM) != 0;
  /* Note [Guile's own mechanism: scm_gc_register_allocation]
   * Under --policy runtime_native (the library asks for no collection) each
   * block is reported with scm_gc_register_allocation(bytes) before it is
   * allocated: Guile's call for memory allocated outside the GC heap.
   * libguile/gc.c (3.0): it subtracts the bytes from a counter
   * (bytes_until_gc) and, when that would go below zero, resets it to
   * GC_get_heap_size() and runs GC_gcollect(): one full collection per
   * heap-size of registered bytes. Its comment: "the only real way to handle
   * continuous, high non-GC allocation is to let the GC know about it". No
   * free counterpart exists. Its collections are Guile's own (counted as
   * the runtime's); the arrays' finalizers give the blocks back. */
  if (kind & HEAP_FLAG_NATIVE) scm_gc_register_allocation(bytes);
  const scm_t_bits devmem = scm_foreign_object_unsigned_ref(heap, HEAP_DEVICE_MEM) ? ARR_FLAG_DEVICE_MEM : 0;
  if (boehm) {
    gcpressure_buffer* b = NULL;
    check_status(gcpressure_boehm_alloc(a, bytes, NULL, &b), "device-array");
    void* vals[4] = {a, b, (void*)(uintptr_t)bytes, (void*)(uintptr_t)(ARR_FLAG_BOEHM | devmem)};
    return scm_make_foreign_object_n(array_type, 4, vals);
  }
  /* Make the (finalized) Scheme object first: if that allocation fails the
   * device block is not leaked, and once the block is in it the finalizer owns
   * it. Nothing between gcpressure_alloc and the slot store can throw. */
  void* vals[4] = {a, NULL, (void*)(uintptr_t)bytes, (void*)(uintptr_t)devmem};
  SCM obj = scm_make_foreign_object_n(array_type, 4, vals);
  void* p = NULL;
  check_status(gcpressure_alloc(a, bytes, NULL, &p), "device-array");
  scm_foreign_object_set_x(obj, ARR_PTR, p);
  return obj;
}

/* The device pointer of a live array (error after device-array-free!). */
static void* array_data(SCM arr, const char* who, size_t* bytes, scm_t_bits* flags) {
  scm_assert_foreign_object_type(array_type, arr);
  void* p = scm_foreign_object_ref(arr, ARR_PTR);
  const scm_t_bits f = scm_foreign_object_unsigned_ref(arr, ARR_FLAGS);
  if (!p) scm_misc_error(who, "use of a freed device array", SCM_EOL);
  if (bytes) *bytes = scm_foreign_object_unsigned_ref(arr, ARR_BYTES);
  if (flags) *flags = f;
  if (f & ARR_FLAG_BOEHM) {
    void* d = NULL;
    check_status(gcpressure_buffer_data((const gcpressure_buffer*)p, &d), who);
    return d;
  }
  return p;
}

static SCM array_p(SCM x) {
  return scm_from_bool(SCM_STRUCTP(x) && scm_is_eq(SCM_STRUCT_VTABLE(x), array_type));
}

static SCM array_bytes(SCM arr) {
  scm_assert_foreign_object_type(array_type, arr);
  return scm_from_size_t(scm_foreign_object_unsigned_ref(arr, ARR_BYTES));
}

static SCM array_live_p(SCM arr) {
  scm_assert_foreign_object_type(array_type, arr);
  return scm_from_bool(scm_foreign_object_ref(arr, ARR_PTR) != NULL);
}

/* Frees at once (CUDA.jl's unsafe_free!); the finalizer then does nothing. */
static SCM array_free(SCM arr) {
  scm_assert_foreign_object_type(array_type, arr);
  gcpressure_allocator* a = scm_foreign_object_ref(arr, ARR_ALLOC);
  void* p = scm_foreign_object_ref(arr, ARR_PTR);
  const size_t bytes = scm_foreign_object_unsigned_ref(arr, ARR_BYTES);
  const scm_t_bits flags = scm_foreign_object_unsigned_ref(arr, ARR_FLAGS);
  if (!p) scm_misc_error("device-array-free!", "device array already freed", SCM_EOL);
  scm_foreign_object_set_x(arr, ARR_PTR, NULL);
  if (flags & ARR_FLAG_BOEHM)
    check_status(gcpressure_buffer_unsafe_free(a, (gcpressure_buffer*)p), "device-array-free!");
  else
    check_status(gcpressure_free(a, p, bytes, NULL), "device-array-free!");
  return SCM_UNSPECIFIED;
}

/* ---- compute primitives (float32) ----------------------------------------
 * Host backend: plain CPU loops on the "device" pointer (host memory).
 * CUDA memory (GCP_GUILE_WITH_CUDA builds): the memory traffic stays the same
 * and the arithmetic is replaced by cudaMemsetAsync on the default stream —
 * no kernel is built here; the values are then not meaningful (documented). */

static float* floats(SCM arr, const char* who, size_t need_floats, int* device) {
  size_t bytes = 0;
  scm_t_bits flags = 0;
  float* p = array_data(arr, who, &bytes, &flags);
  if (bytes / sizeof(float) < need_floats)
    scm_misc_error(who, "device array of ~A bytes is too small for ~A floats",
                   scm_list_2(scm_from_size_t(bytes), scm_from_size_t(need_floats)));
  *device = (flags & ARR_FLAG_DEVICE_MEM) != 0;
  return p;
}

#ifdef GCP_GUILE_WITH_CUDA
static void device_memset(void* p, int v, size_t bytes, const char* who) {
  cudaError_t e = cudaMemsetAsync(p, v, bytes, 0);
  if (e != cudaSuccess) scm_misc_error(who, "cudaMemsetAsync: ~A", scm_list_1(scm_from_utf8_string(cudaGetErrorString(e))));
}
#else
static void device_memset(void* p, int v, size_t bytes, const char* who) {
  (void)p, (void)v, (void)bytes;
  scm_misc_error(who, "CUDA device memory in a module built without CUDA", SCM_EOL);
}
#endif

static SCM array_fill(SCM arr, SCM value) {
  size_t bytes = 0;
  scm_t_bits flags = 0;
  float* p = array_data(arr, "device-array-fill!", &bytes, &flags);
  const float v = (float)scm_to_double(value);
  if (flags & ARR_FLAG_DEVICE_MEM) {
    device_memset(p, 0, bytes, "device-array-fill!");
    return SCM_UNSPECIFIED;
  }
  for (size_t i = 0, n = bytes / sizeof(float); i < n; ++i) p[i] = v;
  return SCM_UNSPECIFIED;
}

/* Deterministic uniform values in [-scale, scale] (xorshift64*). */
static SCM array_fill_random(SCM arr, SCM seed, SCM scale) {
  size_t bytes = 0;
  scm_t_bits flags = 0;
  float* p = array_data(arr, "device-array-fill-random!", &bytes, &flags);
  uint64_t x = scm_to_uint64(seed) * 0x9E3779B97F4A7C15ULL + 1;
  const double s = scm_to_double(scale);
  if (flags & ARR_FLAG_DEVICE_MEM) {
    device_memset(p, 0, bytes, "device-array-fill-random!");
    return SCM_UNSPECIFIED;
  }
  for (size_t i = 0, n = bytes / sizeof(float); i < n; ++i) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    const double u = (double)((x * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
    p[i] = (float)((2 * u - 1) * s);
  }
  return SCM_UNSPECIFIED;
}

/* y[m x n] = W[m x k] * x[k x n], row-major. */
static SCM gemm(SCM y, SCM w, SCM x, SCM m_, SCM k_, SCM n_) {
  const size_t m = scm_to_size_t(m_), k = scm_to_size_t(k_), n = scm_to_size_t(n_);
  int dy, dw, dx;
  float* Y = floats(y, "gemm!", m * n, &dy);
  const float* W = floats(w, "gemm!", m * k, &dw);
  const float* X = floats(x, "gemm!", k * n, &dx);
  if (dy || dw || dx) {
    device_memset(Y, 0, m * n * sizeof(float), "gemm!");
    return SCM_UNSPECIFIED;
  }
  for (size_t i = 0; i < m; ++i) {
    float* yr = Y + i * n;
    for (size_t j = 0; j < n; ++j) yr[j] = 0.0f;
    for (size_t p = 0; p < k; ++p) {
      const float a = W[i * k + p];
      const float* xr = X + p * n;
      for (size_t j = 0; j < n; ++j) yr[j] += a * xr[j];
    }
  }
  return SCM_UNSPECIFIED;
}

/* out[i, j] = max(in[i, j] + b[i], 0): relu.(in .+ b) for in of m x n. */
static SCM bias_relu(SCM out, SCM in, SCM b, SCM m_, SCM n_) {
  const size_t m = scm_to_size_t(m_), n = scm_to_size_t(n_);
  int d0, d1, d2;
  float* O = floats(out, "bias-relu!", m * n, &d0);
  const float* I = floats(in, "bias-relu!", m * n, &d1);
  const float* B = floats(b, "bias-relu!", m, &d2);
  if (d0 || d1 || d2) {
    device_memset(O, 0, m * n * sizeof(float), "bias-relu!");
    return SCM_UNSPECIFIED;
  }
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      const float v = I[i * n + j] + B[i];
      O[i * n + j] = v > 0 ? v : 0;
    }
  return SCM_UNSPECIFIED;
}

static SCM array_sum(SCM arr) {
  size_t bytes = 0;
  scm_t_bits flags = 0;
  const float* p = array_data(arr, "device-array-sum", &bytes, &flags);
  if (flags & ARR_FLAG_DEVICE_MEM) return scm_from_double(NAN);
  double s = 0;
  for (size_t i = 0, n = bytes / sizeof(float); i < n; ++i) s += p[i];
  return scm_from_double(s);
}

static SCM array_ref(SCM arr, SCM idx) {
  size_t bytes = 0;
  scm_t_bits flags = 0;
  const float* p = array_data(arr, "device-array-ref", &bytes, &flags);
  const size_t i = scm_to_size_t(idx);
  if (i >= bytes / sizeof(float)) scm_out_of_range("device-array-ref", idx);
  if (flags & ARR_FLAG_DEVICE_MEM) scm_misc_error("device-array-ref", "not on CUDA device memory", SCM_EOL);
  return scm_from_double(p[i]);
}

/* ---- module-level facts for the README's checks --------------------------- */

static SCM module_counters(void) {
  return scm_list_4(
      scm_cons(scm_from_utf8_symbol("arrays-finalized"),
               scm_from_uint64(__atomic_load_n(&g_array_finalized, __ATOMIC_RELAXED))),
      scm_cons(scm_from_utf8_symbol("releases-after-destroy"),
               scm_from_uint64(__atomic_load_n(&g_release_failed, __ATOMIC_RELAXED))),
      scm_cons(scm_from_utf8_symbol("finalized-on-other-threads"),
               scm_from_uint64(__atomic_load_n(&g_finalized_elsewhere, __ATOMIC_RELAXED))),
      scm_cons(scm_from_utf8_symbol("gc-incremental"), scm_from_bool(GC_is_incremental_mode())));
}

static SCM gc_collections(void) { return scm_from_uintmax(GC_get_gc_no()); }

/* Guile's own collections since the module loaded: (count whole-heap seconds). */
static SCM own_collections(void) {
  uint64_t n = 0, full = 0;
  double seconds = 0;
  own_counts(&n, &full, &seconds);
  return scm_list_3(scm_from_uint64(n), scm_from_uint64(full), scm_from_double(seconds));
}

/* The shared object a code address belongs to ("" if unknown). */
static SCM library_of(void* fn) {
  Dl_info info;
  if (!fn || !dladdr(fn, &info) || !info.dli_fname) return scm_from_utf8_string("");
  return scm_from_utf8_string(info.dli_fname);
}

/* How bdwgc is set up now: finalize-on-demand, and which library's notifier
 * (Guile swaps its own notifiers as its finalizer thread starts, so the
 * library is what can be checked, not one address). */
static SCM bdwgc_setup(void) {
  union { GC_finalizer_notifier_proc f; void* p; } n = {GC_get_finalizer_notifier()};
  union { GC_start_callback_proc f; void* p; } st = {GC_get_start_callback()};
  return scm_list_5(
      scm_cons(scm_from_utf8_symbol("finalize-on-demand"), scm_from_bool(GC_get_finalize_on_demand())),
      scm_cons(scm_from_utf8_symbol("notifier-library"), library_of(n.p)),
      scm_cons(scm_from_utf8_symbol("start-callback-library"), library_of(st.p)),
      scm_cons(scm_from_utf8_symbol("incremental"), scm_from_bool(GC_is_incremental_mode())),
      scm_cons(scm_from_utf8_symbol("gc-library"), library_of((void*)GC_gcollect)));
}

void scm_init_gcpressure(void) {
  g_main_thread = pthread_self();
  GC_start_performance_measurement(); /* Note [Counting Guile's own collections] */
  g_gc_no_base = GC_get_gc_no();
  g_gc_ms_base = GC_get_full_gc_total_time();
  sym_gcpressure_error = scm_from_utf8_symbol("gcpressure-error");
  heap_type = scm_make_foreign_object_type(scm_from_utf8_symbol("gcpressure-heap"),
                                           scm_list_3(scm_from_utf8_symbol("allocator"),
                                                      scm_from_utf8_symbol("kind"),
                                                      scm_from_utf8_symbol("device-memory")),
                                           NULL);
  array_type = scm_make_foreign_object_type(
      scm_from_utf8_symbol("device-array"),
      scm_list_4(scm_from_utf8_symbol("allocator"), scm_from_utf8_symbol("data"), scm_from_utf8_symbol("bytes"),
                 scm_from_utf8_symbol("flags")),
      array_finalize);
  scm_c_define("<gcpressure-heap>", heap_type);
  scm_c_define("<device-array>", array_type);
  scm_c_define_gsubr("%make-device-heap", 4, 0, 0, make_heap);
  scm_c_define_gsubr("heap-destroy!", 1, 0, 0, heap_destroy);
  scm_c_define_gsubr("heap-iteration!", 1, 0, 0, heap_iteration);
  scm_c_define_gsubr("heap-quiet-moment!", 1, 1, 0, heap_quiet_moment);
  scm_c_define_gsubr("heap-synchronize!", 1, 1, 0, heap_synchronize);
  scm_c_define_gsubr("%heap-collect!", 2, 0, 0, heap_collect);
  scm_c_define_gsubr("heap-drain!", 1, 0, 0, heap_drain);
  scm_c_define_gsubr("heap-stats", 1, 0, 0, heap_stats);
  scm_c_define_gsubr("heap-usage", 1, 0, 0, heap_usage);
  scm_c_define_gsubr("heap-set-limits!", 3, 0, 0, heap_set_limits);
  scm_c_define_gsubr("%device-array", 2, 0, 0, make_array);
  scm_c_define_gsubr("device-array?", 1, 0, 0, array_p);
  scm_c_define_gsubr("device-array-bytes", 1, 0, 0, array_bytes);
  scm_c_define_gsubr("device-array-live?", 1, 0, 0, array_live_p);
  scm_c_define_gsubr("device-array-free!", 1, 0, 0, array_free);
  scm_c_define_gsubr("device-array-fill!", 2, 0, 0, array_fill);
  scm_c_define_gsubr("device-array-fill-random!", 3, 0, 0, array_fill_random);
  scm_c_define_gsubr("device-array-sum", 1, 0, 0, array_sum);
  scm_c_define_gsubr("device-array-ref", 2, 0, 0, array_ref);
  scm_c_define_gsubr("gemm!", 6, 0, 0, gemm);
  scm_c_define_gsubr("bias-relu!", 5, 0, 0, bias_relu);
  scm_c_define_gsubr("%gcpressure-module-counters", 0, 0, 0, module_counters);
  scm_c_define_gsubr("%bdwgc-collections", 0, 0, 0, gc_collections);
  scm_c_define_gsubr("%guile-own-collections", 0, 0, 0, own_collections);
  scm_c_define_gsubr("%bdwgc-setup", 0, 0, 0, bdwgc_setup);
  scm_c_define("%gcpressure-version", scm_from_utf8_string(gcpressure_version()));
}
