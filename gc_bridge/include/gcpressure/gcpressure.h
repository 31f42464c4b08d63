/* gcpressure/gcpressure.h — the stable C API that language runtimes embed.
 *
 * Plain C (C11 and C++), opaque handles, no exceptions across the boundary:
 * every call returns a gcpressure_status; gcpressure_last_error() gives the
 * calling thread's last message. Option and callback structs start with a
 * struct_size field so they can grow without breaking callers: always fill
 * them with the *_init() functions first.
 *
 * Re-entrancy (Note [C API re-entrancy]): the runtime's collector callbacks
 * run inside gcpressure_alloc (when the policy collects) and inside
 * gcpressure_collect / gcpressure_quiet_moment / gcpressure_iteration. While
 * they run, the runtime's finalizers may call any function marked
 * "finalizer-safe" below, on the same allocator. Functions marked "not from a
 * collection" return GCPRESSURE_ERR_BUSY when called from inside one.
 * "Inside a collection" is a per-thread fact: the callbacks' thread while they
 * run, and any thread between gcpressure_enter_collection and
 * gcpressure_leave_collection (a runtime's own finalizer thread, or a
 * collection the runtime started itself, e.g. seen through CPython's
 * gc.callbacks). There, gcpressure_alloc starts no collection and never waits
 * for the one in progress on another thread.
 */
#ifndef GCPRESSURE_GCPRESSURE_H
#define GCPRESSURE_GCPRESSURE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GCPRESSURE_API_VERSION 5 /* 2: own_collections callback, gcpressure_synchronize, gcpressure_quiet_moment_ex;
                                    3: options.devices, gcpressure_device_count, gcpressure_device_allocator,
                                       gcpressure_policy_names;
                                    4: gcpressure_enter_collection / leave_collection / in_collection;
                                    5: gcpressure_options_set, gcpressure_option_names, gcpressure_parse_size;
                                       options.host_shared, pool, async_release_threshold, verbose */

typedef enum gcpressure_status {
  GCPRESSURE_OK = 0,
  GCPRESSURE_ERR_INVALID = 1,     /* null handle or pointer, zero size, bad option */
  GCPRESSURE_ERR_OOM = 2,         /* out of device memory after the reclaim ladder */
  GCPRESSURE_ERR_MISUSE = 3,      /* double free, foreign pointer, size mismatch */
  GCPRESSURE_ERR_SHUTDOWN = 4,    /* the allocator was destroyed */
  GCPRESSURE_ERR_CUDA = 5,        /* a CUDA call failed */
  GCPRESSURE_ERR_UNSUPPORTED = 6, /* e.g. CUDA backend in a build without CUDA */
  GCPRESSURE_ERR_BUSY = 7,        /* called from inside a collection where not allowed */
  GCPRESSURE_ERR_TRUNCATED = 8,   /* output buffer too small (the size needed is returned) */
  GCPRESSURE_ERR_INTERNAL = 9
} gcpressure_status;

typedef enum gcpressure_backend {
  GCPRESSURE_BACKEND_AUTO = 0, /* cuda_async with a GPU, host otherwise */
  GCPRESSURE_BACKEND_HOST = 1, /* simulated device in host memory */
  GCPRESSURE_BACKEND_CUDA = 2, /* cudaMalloc */
  GCPRESSURE_BACKEND_CUDA_ASYNC = 3
} gcpressure_backend;

typedef enum gcpressure_collector_kind {
  GCPRESSURE_COLLECTOR_CALLBACKS = 0, /* the runtime registers callbacks */
  GCPRESSURE_COLLECTOR_BOEHM = 1      /* this process's bdwgc (gcpressure_boehm_*) */
} gcpressure_collector_kind;

/* Options. gcpressure_options_init leaves every field "unset" (the values
 * in brackets); an unset field takes the GCPRESSURE_* variable, else the
 * built-in default, so a user can retune any program through the
 * environment, and a field the program sets wins over the variable. A bad
 * variable fails gcpressure_create naming it. */
typedef struct gcpressure_options {
  size_t struct_size;       /* sizeof(gcpressure_options) */
  gcpressure_backend backend; /* [AUTO]: GCPRESSURE_BACKEND, else auto */
  int device;               /* [-1]: GCPRESSURE_DEVICE, else 0 */
  size_t host_capacity;     /* simulated device size [0]: GCPRESSURE_HOST_CAPACITY, else 16 GiB */
  const char* soft_limit;   /* "4GiB", "80%", bytes [NULL]: GCPRESSURE_SOFT_LIMIT, else 75% of the hard limit.
                               Above the hard limit: GCPRESSURE_ERR_INVALID (as in gcpressure_set_limits) */
  const char* hard_limit;   /* [NULL]: GCPRESSURE_HARD_LIMIT, else device memory */
  const char* policy;       /* one of gcpressure_policy_names() [NULL]: GCPRESSURE_POLICY, else pressure */
  double gc_budget;         /* fraction of wall time for collections [0]: GCPRESSURE_GC_BUDGET, else 0.05 */
  int every_n;              /* every_iteration policy [0]: GCPRESSURE_EVERY_N, else 1 */
  int read_env;             /* legacy; nonzero: GCPRESSURE_* variables override even the fields set */
  gcpressure_collector_kind collector;
  const char* devices;      /* API version 3. "0,1": one collector and one policy over these devices
                               (gcpressure_device_allocator) [NULL]: GCPRESSURE_DEVICES, else `device` */
  /* API version 5 (read only if struct_size covers them): */
  const char* host_shared;  /* file of a host capacity shared by processes [NULL]: GCPRESSURE_HOST_SHARED */
  int pool;                 /* 0|1 [-1]: GCPRESSURE_POOL, else 1 */
  size_t async_release_threshold; /* [SIZE_MAX]: GCPRESSURE_ASYNC_RELEASE_THRESHOLD, else 0 */
  int verbose;              /* 0|1 [-1]: GCPRESSURE_VERBOSE, else 0 */
} gcpressure_options;

typedef struct gcpressure_allocator gcpressure_allocator;
typedef struct gcpressure_buffer gcpressure_buffer; /* a Boehm GC object */

/* Collector callbacks. minor: a young-generation collection (or one step of
 * the runtime's incremental collector) run to completion. full: a blocking
 * whole-heap collection. run_finalizers: runs pending finalizers, returns how
 * many (may be NULL when the runtime runs them itself during collections).
 * start_full/step_full: optional whole-heap cycle in slices; step_full returns
 * nonzero when the cycle completed (NULL: the policy uses full instead).
 * heap_bytes: optional, the runtime's own heap size. minor_is_full: nonzero
 * when the runtime has no young generation (minor marks the whole heap, as
 * bdwgc without incremental mode): such collections are then reported as
 * blocking full ones. Added in API version 1; read only if struct_size
 * covers it.
 * own_collections (API version 2; optional, NULL: unknown): the runtime's
 * own collections, those it ran outside these callbacks (on its allocation
 * counts, an explicit collect by the program), cumulative since any fixed
 * origin: *collections (all), *full_collections (whole-heap among them),
 * *seconds (their time) and *seconds_exact (nonzero: seconds is exact; 0:
 * a lower bound). They appear in the stats as runtime_collections,
 * runtime_full_collections, runtime_gc_seconds, runtime_seconds_exact. It
 * may be called from any thread that reads stats or allocates, also while a
 * collection runs on another thread: it must be thread-safe, must not
 * collect and must not call back into gcpressure. */
typedef struct gcpressure_collector_callbacks {
  size_t struct_size; /* sizeof(gcpressure_collector_callbacks) */
  void* context;
  void (*minor)(void* context);
  void (*full)(void* context);
  size_t (*run_finalizers)(void* context);
  void (*start_full)(void* context);
  int (*step_full)(void* context, double budget_seconds);
  size_t (*heap_bytes)(void* context);
  int minor_is_full;
  void (*own_collections)(void* context, uint64_t* collections, uint64_t* full_collections, double* seconds,
                          int* seconds_exact);
} gcpressure_collector_callbacks;

/* Fills defaults and struct_size. Thread-safe; finalizer-safe. */
void gcpressure_options_init(gcpressure_options* o);
void gcpressure_collector_callbacks_init(gcpressure_collector_callbacks* c);

/* The calling thread's last error message ("" if none yet). Like errno: set
 * by every call that returns an error status, NOT cleared by calls that
 * succeed, so read it right after a call failed. The pointer stays valid
 * until the thread's next gcpressure call. Thread-safe; finalizer-safe. */
const char* gcpressure_last_error(void);
const char* gcpressure_status_string(gcpressure_status s);
const char* gcpressure_version(void);
/* The policy names gcpressure_options.policy accepts, a NULL-terminated
 * array of static strings (the library's one list; bindings should list
 * names from it rather than repeat them). API version 3. Thread-safe;
 * finalizer-safe. */
const char* const* gcpressure_policy_names(void);

/* Sets one option of `o` from text, parsed and checked by the library's
 * options table (the parser of its GCPRESSURE_* variable, so "64 MB", "80%",
 * "cuda_sync" or "1" mean here what they mean in the environment). `name` is
 * a name of gcpressure_option_names() ("hard_limit") or its variable
 * ("GCPRESSURE_HARD_LIMIT"). GCPRESSURE_ERR_INVALID on an unknown name or a
 * bad value, with the message the variable would give (naming the option as
 * `name` spells it); `o` is then unchanged. Strings are copied: `value` need
 * not outlive the call (the copies live as long as the process, one per
 * distinct value). API version 5. Thread-safe; not finalizer-safe. */
gcpressure_status gcpressure_options_set(gcpressure_options* o, const char* name, const char* value);
/* The names gcpressure_options_set accepts, a NULL-terminated array of
 * static strings in the order of README.md's configuration table. API
 * version 5. Thread-safe; finalizer-safe. */
const char* const* gcpressure_option_names(void);
/* Parses a size as the library does ("512MiB", "64 MB" = 64 MiB, "4G",
 * "1048576"; all units binary). A percentage ("80%") is resolved against
 * `device_total`, an error when it is 0; "80%avail" is an error here (it
 * follows the memory at run time: give it to gcpressure_options_set).
 * GCPRESSURE_ERR_INVALID with the library's message on bad input. API
 * version 5. Thread-safe; finalizer-safe. */
gcpressure_status gcpressure_parse_size(const char* text, size_t device_total, size_t* bytes);

/* Marks the calling thread as inside a collection until the matching
 * gcpressure_leave_collection (API version 4): for a thread that runs a
 * collection or its finalizers outside the collector callbacks, such as the
 * runtime's own finalizer thread while it runs finalizers, or the thread of
 * a collection the runtime started on its own (CPython: gc.callbacks "start"
 * and "stop"). Inside, gcpressure_alloc is served without starting a
 * collection and without waiting for one running on another thread (it
 * fails with GCPRESSURE_ERR_OOM where only a collection would have helped),
 * and the calls marked "not from a collection" return GCPRESSURE_ERR_BUSY.
 * Nests (a depth, per thread); applies to every allocator. Always
 * GCPRESSURE_OK. Thread-safe; finalizer-safe. */
gcpressure_status gcpressure_enter_collection(void);
/* Ends one gcpressure_enter_collection of the calling thread.
 * GCPRESSURE_ERR_MISUSE (nothing changes) when the thread has none open, so
 * a stray leave never ends a collection the library itself runs. Thread-safe;
 * finalizer-safe. */
gcpressure_status gcpressure_leave_collection(void);
/* 1 while the calling thread is inside a collection (the callbacks' thread
 * while they run, or between enter and leave), else 0. Thread-safe;
 * finalizer-safe. */
int gcpressure_in_collection(void);

/* Creates an allocator for one device, or a group over options.devices:
 * the handle returned is device index 0's and the group's (Note [C handles
 * over several devices] in gc_bridge/src/c_api.cpp). Thread-safe; not from
 * a collection. */
gcpressure_status gcpressure_create(const gcpressure_options* o, gcpressure_allocator** out);
/* Destroys it, in this order: with GCPRESSURE_COLLECTOR_BOEHM, a blocking
 * whole-heap collection, the finalizers it made pending and a drain first
 * (so garbage buffers return their blocks and are not reported); with
 * callbacks, only a drain of what finalizers queued (the runtime may be
 * half torn down: run your own full collection and finalizers first, e.g.
 * lua_close before gcpressure_destroy). Then the memory is released.
 * GC-owned buffers (gcpressure_boehm_alloc) still live then, e.g. named by
 * a dead stack slot, are freed and invalid from then on
 * (GCPRESSURE_VERBOSE=1 says how many). Blocks from gcpressure_alloc still
 * live: a documented leak (reported on stderr), never a use-after-free, as
 * the runtime may still use or release them. Later calls on `a` return
 * GCPRESSURE_ERR_SHUTDOWN (the handle's few bytes are kept as a tombstone
 * for that). Not from a collection. */
gcpressure_status gcpressure_destroy(gcpressure_allocator* a);

/* Registers the runtime's collector and (re)creates the policy over it.
 * Not from a collection, and not while other calls on the same allocator are
 * in flight on other threads (it replaces the policy they would use): call it
 * once, right after gcpressure_create. */
gcpressure_status gcpressure_set_collector(gcpressure_allocator* a, const gcpressure_collector_callbacks* c);

/* Allocates device memory on `stream` (cudaStream_t or host stream; NULL the
 * default). May run collections through the callbacks first. Thread-safe;
 * finalizer-safe (no nested collection is started). */
gcpressure_status gcpressure_alloc(gcpressure_allocator* a, size_t bytes, void* stream, void** out);
/* Frees now, ordered on `stream`. Double free, foreign pointer and size
 * mismatch return GCPRESSURE_ERR_MISUSE. Thread-safe; finalizer-safe. */
gcpressure_status gcpressure_free(gcpressure_allocator* a, void* ptr, size_t bytes, void* stream);
/* The call a runtime's finalizer makes: queues the block (lock-free, no CUDA);
 * it returns to the pool at the next safe point. The pointer is not checked
 * here (a finalizer has nothing to do with an error): a double or foreign
 * release is reported at the next drain (any allocation, gcpressure_drain,
 * a collection), as a misuse message on stderr and in misuse_errors of the
 * stats, and the block is not freed twice. Thread-safe; finalizer-safe;
 * safe inside a collection and at any lock state. */
gcpressure_status gcpressure_release_from_finalizer(gcpressure_allocator* a, void* ptr, size_t bytes, void* stream);

/* Policy hints and explicit collections. Thread-safe; not from a collection
 * (GCPRESSURE_ERR_BUSY there); not from a finalizer. */
gcpressure_status gcpressure_quiet_moment(gcpressure_allocator* a);
/* quiet_moment with will_block nonzero: the host is about to wait for the
 * device (for runtimes whose sync calls cannot go through
 * gcpressure_synchronize). gcpressure_quiet_moment(a) is
 * gcpressure_quiet_moment_ex(a, 0). */
gcpressure_status gcpressure_quiet_moment_ex(gcpressure_allocator* a, int will_block);
/* The host is about to wait for all work queued on `stream` (cudaStream_t or
 * host stream; NULL the default): runs due collection work while that work
 * still runs, then blocks until it has completed. Call it instead of the
 * runtime's own stream synchronize. Without a registered collector it only
 * synchronizes. Thread-safe; not from a collection (GCPRESSURE_ERR_BUSY);
 * not from a finalizer. */
gcpressure_status gcpressure_synchronize(gcpressure_allocator* a, void* stream);
gcpressure_status gcpressure_iteration(gcpressure_allocator* a);
gcpressure_status gcpressure_collect(gcpressure_allocator* a, int full);

/* Maintenance. drain: finalizer-safe. trim: not from a collection. */
gcpressure_status gcpressure_drain(gcpressure_allocator* a);
gcpressure_status gcpressure_trim(gcpressure_allocator* a);
/* Limits in bytes (0 leaves a limit unchanged). Thread-safe; finalizer-safe. */
gcpressure_status gcpressure_set_limits(gcpressure_allocator* a, size_t soft, size_t hard);
/* Live (requested) and reserved bytes. Thread-safe; finalizer-safe. */
gcpressure_status gcpressure_usage(gcpressure_allocator* a, size_t* live, size_t* reserved);
/* Stats as one JSON object into buf (NUL-terminated). *needed (if not NULL)
 * gets the size including the NUL; GCPRESSURE_ERR_TRUNCATED if cap is too
 * small. Thread-safe; finalizer-safe. */
gcpressure_status gcpressure_stats_json(gcpressure_allocator* a, char* buf, size_t cap, size_t* needed);

/* --- Boehm convenience, for runtimes built on bdwgc (one bdwgc per process) --- */
/* Initialises bdwgc for gcpressure (idempotent; later arguments are
 * ignored). Call it from the main thread before other threads allocate.
 * A plain C program passes (1, 1): incremental (generational) mode, so the
 * policy's minor collections are cheap, and finalizers run by a gcpressure
 * thread, so device blocks return without the program calling
 * GC_invoke_finalizers. Pass finalizer_thread 0 only when the runtime runs
 * bdwgc's finalizers itself (Guile; it is detected and kept anyway). */
gcpressure_status gcpressure_boehm_init(int incremental, int finalizer_thread);
/* A GC-owned device buffer (allocator created with GCPRESSURE_COLLECTOR_BOEHM).
 * Its finalizer queues the block. Thread-safe for registered threads. */
gcpressure_status gcpressure_boehm_alloc(gcpressure_allocator* a, size_t bytes, void* stream, gcpressure_buffer** out);
/* The device pointer (GCPRESSURE_ERR_MISUSE after unsafe_free). */
gcpressure_status gcpressure_buffer_data(const gcpressure_buffer* b, void** out);
size_t gcpressure_buffer_size(const gcpressure_buffer* b);
/* Frees now; the finalizer later does nothing. Finalizer-safe. */
gcpressure_status gcpressure_buffer_unsafe_free(gcpressure_allocator* a, gcpressure_buffer* b);

/* --- Several devices, one collector (API version 3) --- */
/* The number of devices of a's group (1 for a single device). Thread-safe;
 * finalizer-safe. */
gcpressure_status gcpressure_device_count(gcpressure_allocator* a, size_t* n);
/* The handle of device `index` (0 .. count-1; 0 is the group handle) of a's
 * group. Calls on it act on that device's allocator: alloc, free,
 * release_from_finalizer, drain, trim, set_limits, usage, stats_json (its gc
 * section: the shared collections, that device's reclaimed bytes),
 * synchronize (a stream of that device) and boehm_alloc. The collector
 * (set_collector), the policy and its hints are the group's whichever handle
 * is passed. Valid until the group handle is destroyed; gcpressure_destroy on
 * it is GCPRESSURE_ERR_INVALID. Thread-safe; finalizer-safe. */
gcpressure_status gcpressure_device_allocator(gcpressure_allocator* a, size_t index, gcpressure_allocator** out);

#ifdef __cplusplus
}
#endif

#endif /* GCPRESSURE_GCPRESSURE_H */
