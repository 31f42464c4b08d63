/* test_c_api.c — the C API from plain C11 (no C++, no GoogleTest).
 *
 * Exercises every function in gcpressure/gcpressure.h and its errors: option
 * and callback struct versioning, both collector kinds on the host backend,
 * alloc/free/release/drain, a fake collector written in C that records every
 * call, re-entrancy from inside its callbacks (what a runtime's finalizers
 * may and may not do), stats JSON, limits and the OOM report, null handles,
 * zero sizes, double and foreign frees, use after destroy, and the Boehm
 * convenience. Prints "N passed, M failed" last; exits nonzero on failure.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, pthreads */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcpressure/gcpressure.h"

#include "c_check.h"

/* --- helpers ------------------------------------------------------------- */

static gcpressure_allocator* make_host(const char* policy, const char* hard, const char* soft,
                                       gcpressure_collector_kind kind) {
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.host_capacity = 256 * MiB;
  o.policy = policy;
  o.hard_limit = hard;
  o.soft_limit = soft;
  o.collector = kind;
  gcpressure_allocator* a = NULL;
  gcpressure_status st = gcpressure_create(&o, &a);
  if (st != GCPRESSURE_OK) {
    fprintf(stderr, "make_host(%s, %s): %s: %s\n", policy ? policy : "(default)", hard ? hard : "-",
            gcpressure_status_string(st), gcpressure_last_error());
    return NULL;
  }
  return a;
}

/* The stats JSON in a malloc'd string (NULL on error). */
static char* stats(gcpressure_allocator* a) {
  size_t need = 0;
  if (gcpressure_stats_json(a, NULL, 0, &need) != GCPRESSURE_ERR_TRUNCATED || need == 0) return NULL;
  char* buf = malloc(need);
  if (!buf) return NULL;
  if (gcpressure_stats_json(a, buf, need, NULL) != GCPRESSURE_OK) {
    free(buf);
    return NULL;
  }
  return buf;
}

/* The integer after "key": (first occurrence), -1 if absent. */
static long long json_int(const char* json, const char* key) {
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char* p = json ? strstr(json, pat) : NULL;
  if (!p) return -1;
  return strtoll(p + strlen(pat), NULL, 10);
}

static long long stat_int(gcpressure_allocator* a, const char* key) {
  char* j = stats(a);
  long long v = json_int(j, key);
  free(j);
  return v;
}

static size_t live_of(gcpressure_allocator* a) {
  size_t live = (size_t)-1;
  gcpressure_usage(a, &live, NULL);
  return live;
}

/* --- a fake collector, in C ---------------------------------------------
 * A heap of objects, each owning a device block. The mutator drops an object
 * by marking it unreachable; minor finds unreachable young objects, full
 * finds every unreachable one; their finalizers run in run_finalizers (or at
 * once when the runtime says it runs them itself). Every call is recorded. */

#define FAKE_MAX 256

typedef struct fake_obj {
  void* ptr;
  size_t bytes;
  int used, reachable, old, pending;
} fake_obj;

typedef struct fake_gc fake_gc;
typedef void (*fake_action)(fake_gc* g, const char* where);

struct fake_gc {
  gcpressure_allocator* a;
  fake_obj objs[FAKE_MAX];
  int minor, full, run_fin, start_full, step_full, heap_bytes;
  int depth, max_depth;
  int finalize_in_collection; /* no run_finalizers: finalizers run inside minor/full */
  fake_action action;         /* one-shot, run inside the next callback */
  int step_full_slices;       /* step_full returns done after this many slices */
  int slices_left;
};

static int fake_new(fake_gc* g, size_t bytes) {
  for (int i = 0; i < FAKE_MAX; ++i) {
    if (g->objs[i].used) continue;
    void* p = NULL;
    if (gcpressure_alloc(g->a, bytes, NULL, &p) != GCPRESSURE_OK) return -1;
    fake_obj o = {p, bytes, 1, 1, 0, 0};
    g->objs[i] = o;
    return i;
  }
  return -1;
}

static void fake_finalize(fake_gc* g, fake_obj* o) {
  gcpressure_status st = gcpressure_release_from_finalizer(g->a, o->ptr, o->bytes, NULL);
  CHECK(st == GCPRESSURE_OK);
  memset(o, 0, sizeof *o);
}

static void fake_sweep(fake_gc* g, int whole_heap) {
  for (int i = 0; i < FAKE_MAX; ++i) {
    fake_obj* o = &g->objs[i];
    if (!o->used || o->pending) continue;
    if (!o->reachable && (whole_heap || !o->old)) {
      if (g->finalize_in_collection) fake_finalize(g, o);
      else o->pending = 1;
    } else {
      o->old = 1; /* survivors are promoted */
    }
  }
}

static void fake_enter(fake_gc* g, const char* where) {
  if (++g->depth > g->max_depth) g->max_depth = g->depth;
  if (g->action) {
    fake_action act = g->action;
    g->action = NULL;
    act(g, where);
  }
}

static void fake_minor(void* ctx) {
  fake_gc* g = ctx;
  ++g->minor;
  fake_enter(g, "minor");
  fake_sweep(g, 0);
  --g->depth;
}

static void fake_full(void* ctx) {
  fake_gc* g = ctx;
  ++g->full;
  fake_enter(g, "full");
  fake_sweep(g, 1);
  --g->depth;
}

static size_t fake_run_finalizers(void* ctx) {
  fake_gc* g = ctx;
  ++g->run_fin;
  ++g->depth;
  if (g->depth > g->max_depth) g->max_depth = g->depth;
  size_t n = 0;
  for (int i = 0; i < FAKE_MAX; ++i)
    if (g->objs[i].used && g->objs[i].pending) {
      fake_finalize(g, &g->objs[i]);
      ++n;
    }
  --g->depth;
  return n;
}

static void fake_start_full(void* ctx) {
  fake_gc* g = ctx;
  ++g->start_full;
  g->slices_left = g->step_full_slices;
}

static int fake_step_full(void* ctx, double budget) {
  fake_gc* g = ctx;
  (void)budget;
  ++g->step_full;
  fake_enter(g, "step_full");
  int done = --g->slices_left <= 0;
  if (done) fake_sweep(g, 1);
  --g->depth;
  return done;
}

static size_t fake_heap_bytes(void* ctx) {
  fake_gc* g = ctx;
  ++g->heap_bytes;
  return 1 * MiB;
}

static void fake_init(fake_gc* g, gcpressure_allocator* a) {
  memset(g, 0, sizeof *g);
  g->a = a;
  g->step_full_slices = 3;
}

static gcpressure_status fake_register(fake_gc* g, int with_finalizers, int with_incremental) {
  gcpressure_collector_callbacks cb;
  gcpressure_collector_callbacks_init(&cb);
  cb.context = g;
  cb.minor = fake_minor;
  cb.full = fake_full;
  cb.heap_bytes = fake_heap_bytes;
  if (with_finalizers) cb.run_finalizers = fake_run_finalizers;
  else g->finalize_in_collection = 1;
  if (with_incremental) {
    cb.start_full = fake_start_full;
    cb.step_full = fake_step_full;
  }
  return gcpressure_set_collector(g->a, &cb);
}

/* Drop object i (it becomes garbage). */
static void fake_drop(fake_gc* g, int i) {
  if (i >= 0) g->objs[i].reachable = 0;
}

static void fake_free_all(fake_gc* g) {
  for (int i = 0; i < FAKE_MAX; ++i)
    if (g->objs[i].used) {
      CHECK_ST(gcpressure_free(g->a, g->objs[i].ptr, g->objs[i].bytes, NULL), GCPRESSURE_OK);
      memset(&g->objs[i], 0, sizeof g->objs[i]);
    }
}

/* --- tests ----------------------------------------------------------------- */

static void test_basics(void) {
  CHECK(strcmp(gcpressure_last_error(), "") == 0); /* nothing failed on this thread yet */
  CHECK(gcpressure_version() != NULL && gcpressure_version()[0] != '\0');
  CHECK(GCPRESSURE_API_VERSION >= 1);
  for (int s = GCPRESSURE_OK; s <= GCPRESSURE_ERR_INTERNAL; ++s) {
    const char* t = gcpressure_status_string((gcpressure_status)s);
    CHECK(t != NULL && t[0] != '\0' && strcmp(t, "unknown status") != 0);
  }
  CHECK(strcmp(gcpressure_status_string((gcpressure_status)99), "unknown status") == 0);
  CHECK(strcmp(gcpressure_status_string(GCPRESSURE_ERR_MISUSE), gcpressure_status_string(GCPRESSURE_ERR_SHUTDOWN)) != 0);
}

static void test_options(void) {
  gcpressure_options o;
  memset(&o, 0xab, sizeof o);
  gcpressure_options_init(&o);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.backend == GCPRESSURE_BACKEND_AUTO);
  CHECK(o.collector == GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(o.device == -1); /* unset: GCPRESSURE_DEVICE, else 0 */
  CHECK(o.host_capacity == 0 && o.every_n == 0 && o.read_env == 0 && o.gc_budget == 0.0);
  CHECK(o.soft_limit == NULL && o.hard_limit == NULL && o.policy == NULL);
  gcpressure_options_init(NULL); /* must not crash */

  gcpressure_collector_callbacks cb;
  memset(&cb, 0xab, sizeof cb);
  gcpressure_collector_callbacks_init(&cb);
  CHECK(cb.struct_size == sizeof cb);
  CHECK(cb.context == NULL && cb.minor == NULL && cb.full == NULL && cb.run_finalizers == NULL);
  CHECK(cb.start_full == NULL && cb.step_full == NULL && cb.heap_bytes == NULL);
  gcpressure_collector_callbacks_init(NULL);

  gcpressure_allocator* a = (gcpressure_allocator*)&o;
  CHECK_ST(gcpressure_create(NULL, &a), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_create(&o, NULL), GCPRESSURE_ERR_INVALID);

  /* struct_size: too small (an uninitialised struct), absurdly large */
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.struct_size = 0;
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_INVALID);
  CHECK(a == NULL);
  CHECK_ERR_HAS("struct_size");
  o.struct_size = sizeof(size_t);
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_INVALID);
  o.struct_size = (size_t)1 << 20;
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_INVALID);

  /* a newer caller's larger struct is accepted */
  struct {
    gcpressure_options o;
    char future_fields[32];
  } big;
  memset(&big, 0, sizeof big);
  gcpressure_options_init(&big.o);
  big.o.struct_size = sizeof big;
  big.o.backend = GCPRESSURE_BACKEND_HOST;
  big.o.host_capacity = 64 * MiB;
  CHECK_ST(gcpressure_create(&big.o, &a), GCPRESSURE_OK);
  CHECK(a != NULL);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);

  /* bad fields */
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.host_capacity = 64 * MiB;
  gcpressure_options bad = o;
  bad.backend = (gcpressure_backend)42;
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("backend");
  bad = o;
  bad.collector = (gcpressure_collector_kind)7;
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("collector");
  bad = o;
  bad.device = -2;
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  bad = o;
  bad.gc_budget = 1.5;
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  bad.gc_budget = -0.1;
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  bad = o;
  bad.every_n = -2;
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  bad = o;
  bad.hard_limit = "lots";
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("lots");
  bad = o;
  bad.soft_limit = "12 parsecs";
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  bad = o;
  bad.hard_limit = "0";
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  CHECK(a == NULL);

  /* unknown policy, and every known one */
  bad = o;
  bad.policy = "bogus";
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("bogus");
  /* every name gcpressure_policy_names() lists is accepted and reported as
   * itself; the list holds the default and has no duplicates */
  const char* const* policies = gcpressure_policy_names();
  CHECK(policies != NULL && policies[0] != NULL);
  int has_default = 0;
  size_t n_policies = 0;
  for (; policies && policies[n_policies]; ++n_policies) {
    has_default = has_default || strcmp(policies[n_policies], "pressure") == 0;
    for (size_t k = 0; k < n_policies; ++k) CHECK(strcmp(policies[k], policies[n_policies]) != 0);
  }
  CHECK(has_default);
  CHECK(n_policies >= 2);
  CHECK_ST(gcpressure_create(&bad, &a), GCPRESSURE_ERR_INVALID); /* "bogus" again: the error names every known one */
  for (size_t i = 0; i < n_policies; ++i) CHECK_ERR_HAS(policies[i]);
  for (size_t i = 0; i < n_policies; ++i) {
    gcpressure_options p = o;
    p.policy = policies[i];
    a = NULL;
    CHECK_ST(gcpressure_create(&p, &a), GCPRESSURE_OK);
    if (!a) continue;
    fake_gc g;
    fake_init(&g, a);
    CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
    char* j = stats(a);
    char want[64];
    snprintf(want, sizeof want, "\"policy\":\"%s\"", policies[i]);
    CHECK(j && strstr(j, want));
    free(j);
    CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
  }

  /* read_env: GCPRESSURE_* variables override the fields */
  setenv("GCPRESSURE_HARD_LIMIT", "3MiB", 1);
  gcpressure_options e = o;
  e.hard_limit = "5MiB";
  a = NULL;
  CHECK_ST(gcpressure_create(&e, &a), GCPRESSURE_OK); /* read_env 0: the field */
  CHECK(stat_int(a, "hard_limit") == (long long)(5 * MiB));
  gcpressure_destroy(a);
  e.read_env = 1;
  CHECK_ST(gcpressure_create(&e, &a), GCPRESSURE_OK); /* read_env 1: the variable */
  CHECK(stat_int(a, "hard_limit") == (long long)(3 * MiB));
  gcpressure_destroy(a);
  setenv("GCPRESSURE_POLICY", "nonsense", 1);
  CHECK_ST(gcpressure_create(&e, &a), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("GCPRESSURE_POLICY");
  unsetenv("GCPRESSURE_POLICY");
  unsetenv("GCPRESSURE_HARD_LIMIT");
}

/* CUDA asked for where there is none: UNSUPPORTED. Whether there is a GPU is
 * read from what AUTO picked (the stats' backend). */
static void test_backends(void) {
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_AUTO;
  o.hard_limit = "16MiB";
  gcpressure_allocator* a = NULL;
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
  if (!a) return;
  char* j = stats(a);
  CHECK(j != NULL);
  const int host = j && strstr(j, "\"backend\":\"host\"") != NULL;
  free(j);
  void* p = NULL;
  CHECK_ST(gcpressure_alloc(a, 4096, NULL, &p), GCPRESSURE_OK);
  CHECK_ST(gcpressure_free(a, p, 4096, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
  printf("  AUTO picked the %s backend\n", host ? "host" : "CUDA");
  if (host) {
    o.backend = GCPRESSURE_BACKEND_CUDA;
    CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_UNSUPPORTED);
    CHECK(a == NULL);
    CHECK_ERR_HAS("CUDA");
    o.backend = GCPRESSURE_BACKEND_CUDA_ASYNC;
    CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_UNSUPPORTED);
  } else {
    o.backend = GCPRESSURE_BACKEND_CUDA;
    CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
    if (a) {
      CHECK_ST(gcpressure_alloc(a, 1 * MiB, NULL, &p), GCPRESSURE_OK);
      CHECK_ST(gcpressure_free(a, p, 1 * MiB, NULL), GCPRESSURE_OK);
      CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
    }
  }
}

static void test_alloc_free(void) {
  gcpressure_allocator* a = make_host(NULL, "64MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  gcpressure_allocator* b = make_host(NULL, "64MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a && b);
  if (!a || !b) return;
  void* p = NULL;
  CHECK_ST(gcpressure_alloc(a, 1000, NULL, &p), GCPRESSURE_OK);
  CHECK(p != NULL && ((uintptr_t)p % 256) == 0);
  if (p) memset(p, 0x5a, 1000); /* host backend: real memory */
  size_t live = 0, reserved = 0;
  CHECK_ST(gcpressure_usage(a, &live, &reserved), GCPRESSURE_OK);
  CHECK(live == 1000 && reserved >= 1000);
  CHECK_ST(gcpressure_usage(a, NULL, NULL), GCPRESSURE_OK);

  /* zero size, null out, null handle */
  void* q = (void*)&live;
  CHECK_ST(gcpressure_alloc(a, 0, NULL, &q), GCPRESSURE_ERR_INVALID);
  CHECK(q == NULL);
  CHECK_ERR_HAS("zero");
  CHECK_ST(gcpressure_alloc(a, 16, NULL, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_alloc(NULL, 16, NULL, &q), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("null");
  /* absurd size: OOM at once, with a report */
  CHECK_ST(gcpressure_alloc(a, SIZE_MAX / 2, NULL, &q), GCPRESSURE_ERR_OOM);
  CHECK(q == NULL);

  /* frees: null, size mismatch, foreign pointers, another allocator's block, double free */
  CHECK_ST(gcpressure_free(a, NULL, 1000, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_free(NULL, p, 1000, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_free(a, p, 999, NULL), GCPRESSURE_ERR_MISUSE);
  CHECK_ERR_HAS("1000");
  int on_stack = 0;
  CHECK_ST(gcpressure_free(a, &on_stack, sizeof on_stack, NULL), GCPRESSURE_ERR_MISUSE);
  CHECK_ST(gcpressure_free(a, (char*)p + 256, 256, NULL), GCPRESSURE_ERR_MISUSE); /* interior pointer */
  void* pb = NULL;
  CHECK_ST(gcpressure_alloc(b, 1000, NULL, &pb), GCPRESSURE_OK);
  CHECK_ST(gcpressure_free(a, pb, 1000, NULL), GCPRESSURE_ERR_MISUSE);
  CHECK_ST(gcpressure_free(b, pb, 1000, NULL), GCPRESSURE_OK);
  CHECK(live_of(a) == 1000); /* failed frees changed nothing */
  CHECK_ST(gcpressure_free(a, p, 1000, NULL), GCPRESSURE_OK);
  CHECK(live_of(a) == 0);
  CHECK_ST(gcpressure_free(a, p, 1000, NULL), GCPRESSURE_ERR_MISUSE);
  CHECK_ERR_HAS("double free");
  CHECK(stat_int(a, "misuse_errors") >= 5);
  CHECK(stat_int(a, "allocations") == 1 && stat_int(a, "frees") == 1);

  /* many sizes, reused from the pool */
  void* ps[64];
  for (int i = 0; i < 64; ++i) CHECK_ST(gcpressure_alloc(a, (size_t)(i + 1) * 4099, NULL, &ps[i]), GCPRESSURE_OK);
  for (int i = 0; i < 64; ++i) CHECK_ST(gcpressure_free(a, ps[i], (size_t)(i + 1) * 4099, NULL), GCPRESSURE_OK);
  CHECK(live_of(a) == 0);

  /* without a collector: no collection to ask for; hints are no-ops */
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("no collector");
  CHECK_ST(gcpressure_quiet_moment(a), GCPRESSURE_OK);
  CHECK_ST(gcpressure_iteration(a), GCPRESSURE_OK);
  CHECK_ST(gcpressure_drain(a), GCPRESSURE_OK);
  CHECK_ST(gcpressure_trim(a), GCPRESSURE_OK);
  size_t r2 = 1;
  gcpressure_usage(a, NULL, &r2);
  CHECK(r2 == 0); /* trim returned every idle segment */

  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
  CHECK_ST(gcpressure_destroy(b), GCPRESSURE_OK);
}

static void test_limits_and_oom(void) {
  gcpressure_allocator* a = make_host(NULL, "2MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  CHECK(stat_int(a, "hard_limit") == (long long)(2 * MiB));
  CHECK(stat_int(a, "soft_limit") == (long long)(2 * MiB / 4 * 3));
  void *p = NULL, *q = NULL;
  CHECK_ST(gcpressure_alloc(a, 1 * MiB, NULL, &p), GCPRESSURE_OK);
  CHECK_ST(gcpressure_alloc(a, 1536 * KiB, NULL, &q), GCPRESSURE_ERR_OOM);
  CHECK(q == NULL);
  CHECK_ERR_HAS("out of memory");
  CHECK_ERR_HAS("hard limit");
  CHECK_ERR_HAS("hard limit 2.00 MiB");
  CHECK_ERR_HAS("1.50 MiB");
  CHECK_ERR_HAS("ladder");
  CHECK_ERR_HAS("no collector");
  CHECK(stat_int(a, "ooms") == 1);

  /* raise the limit: the same request fits */
  CHECK_ST(gcpressure_set_limits(a, 0, 32 * MiB), GCPRESSURE_OK);
  CHECK(stat_int(a, "hard_limit") == (long long)(32 * MiB));
  CHECK(stat_int(a, "soft_limit") == (long long)(2 * MiB / 4 * 3)); /* unchanged */
  CHECK_ST(gcpressure_alloc(a, 1536 * KiB, NULL, &q), GCPRESSURE_OK);
  CHECK_ST(gcpressure_set_limits(a, 3 * MiB, 0), GCPRESSURE_OK);
  CHECK(stat_int(a, "soft_limit") == (long long)(3 * MiB));
  CHECK_ST(gcpressure_set_limits(a, 0, 0), GCPRESSURE_OK); /* nothing changes */
  CHECK(stat_int(a, "hard_limit") == (long long)(32 * MiB) && stat_int(a, "soft_limit") == (long long)(3 * MiB));
  CHECK_ST(gcpressure_set_limits(a, 40 * MiB, 32 * MiB), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("soft");
  CHECK_ST(gcpressure_set_limits(a, 40 * MiB, 0), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_set_limits(NULL, 0, 0), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_free(a, q, 1536 * KiB, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_free(a, p, 1 * MiB, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_trim(a), GCPRESSURE_OK);
  /* lowering the hard limit under the soft one (left as is): the soft one follows */
  CHECK_ST(gcpressure_set_limits(a, 0, 2 * MiB), GCPRESSURE_OK);
  CHECK(stat_int(a, "hard_limit") == (long long)(2 * MiB) && stat_int(a, "soft_limit") == (long long)(2 * MiB));
  /* a request that fits by itself gets an exact-size segment when the
   * pool's shared 20 MiB segment does not fit under the limit */
  CHECK_ST(gcpressure_alloc(a, 1536 * KiB, NULL, &q), GCPRESSURE_OK);
  CHECK_ST(gcpressure_alloc(a, 1 * MiB, NULL, &p), GCPRESSURE_ERR_OOM);
  CHECK_ERR_HAS("hard limit");
  CHECK_ST(gcpressure_free(a, q, 1536 * KiB, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_alloc(a, 1 * MiB, NULL, &q), GCPRESSURE_OK);
  CHECK_ST(gcpressure_free(a, q, 1 * MiB, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

static void test_stats_json(void) {
  gcpressure_allocator* a = make_host("pressure", "32MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  size_t need = 0;
  CHECK_ST(gcpressure_stats_json(a, NULL, 0, &need), GCPRESSURE_ERR_TRUNCATED);
  CHECK(need > 100);
  CHECK_ERR_HAS("too small");
  char small[8];
  memset(small, 'x', sizeof small);
  size_t need2 = 0;
  CHECK_ST(gcpressure_stats_json(a, small, sizeof small, &need2), GCPRESSURE_ERR_TRUNCATED);
  CHECK(need2 == need && small[0] == '\0');
  CHECK_ST(gcpressure_stats_json(a, small, 0, NULL), GCPRESSURE_ERR_TRUNCATED);
  char* buf = malloc(need);
  CHECK_ST(gcpressure_stats_json(a, buf, need - 1, NULL), GCPRESSURE_ERR_TRUNCATED); /* one short: no room for the NUL */
  size_t need3 = 0;
  CHECK_ST(gcpressure_stats_json(a, buf, need, &need3), GCPRESSURE_OK);
  CHECK(need3 == need && strlen(buf) + 1 == need);
  CHECK(buf[0] == '{' && buf[need - 2] == '}');
  CHECK(strstr(buf, "\"backend\":\"host\"") != NULL);
  CHECK(strstr(buf, "\"reserved\":{\"current\":") != NULL);
  CHECK(strstr(buf, "\"gc\":{\"policy\":\"\"") != NULL); /* no collector yet: no policy */
  CHECK(json_int(buf, "hard_limit") == (long long)(32 * MiB));
  free(buf);
  CHECK_ST(gcpressure_stats_json(NULL, NULL, 0, &need), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

static void test_release_and_drain(void) {
  gcpressure_allocator* a = make_host(NULL, "64MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  void* p[3];
  for (int i = 0; i < 3; ++i) CHECK_ST(gcpressure_alloc(a, 100 * KiB, NULL, &p[i]), GCPRESSURE_OK);
  for (int i = 0; i < 3; ++i) CHECK_ST(gcpressure_release_from_finalizer(a, p[i], 100 * KiB, NULL), GCPRESSURE_OK);
  CHECK(live_of(a) == 300 * KiB); /* queued, not yet returned */
  CHECK(stat_int(a, "deferred_pending") == 3);
  CHECK_ST(gcpressure_drain(a), GCPRESSURE_OK);
  CHECK(live_of(a) == 0);
  CHECK(stat_int(a, "deferred_pending") == 0);
  /* the next allocation drains too */
  void* q = NULL;
  CHECK_ST(gcpressure_alloc(a, 100 * KiB, NULL, &q), GCPRESSURE_OK);
  CHECK_ST(gcpressure_release_from_finalizer(a, q, 100 * KiB, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_alloc(a, 100 * KiB, NULL, &q), GCPRESSURE_OK);
  CHECK(live_of(a) == 100 * KiB);
  CHECK_ST(gcpressure_free(a, q, 100 * KiB, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_release_from_finalizer(a, NULL, 10, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_release_from_finalizer(NULL, q, 10, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_drain(NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_trim(NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

static void test_collector_callbacks(void) {
  gcpressure_allocator* a = make_host("at_limit", "64MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  fake_gc g;
  fake_init(&g, a);
  gcpressure_collector_callbacks cb;
  gcpressure_collector_callbacks_init(&cb);
  CHECK_ST(gcpressure_set_collector(a, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_set_collector(NULL, &cb), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_ERR_INVALID); /* minor and full missing */
  CHECK_ERR_HAS("required");
  cb.context = &g;
  cb.minor = fake_minor;
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_ERR_INVALID); /* full missing */
  cb.full = fake_full;
  cb.struct_size = 0;
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("struct_size");
  cb.struct_size = 2 * sizeof(void*); /* ends before minor and full: too old to be real */
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_ERR_INVALID);
  cb.struct_size = 8192;
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_ERR_INVALID);

  /* an older caller's smaller struct: fields past struct_size are not read */
  cb.struct_size = offsetof(gcpressure_collector_callbacks, run_finalizers);
  cb.run_finalizers = fake_run_finalizers; /* beyond struct_size: must be ignored */
  cb.heap_bytes = fake_heap_bytes;
  g.finalize_in_collection = 1;
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_OK);
  int i0 = fake_new(&g, 1 * MiB);
  CHECK(i0 >= 0);
  fake_drop(&g, i0);
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_OK);
  CHECK(g.minor == 1 && g.run_fin == 0 && g.full == 0);
  CHECK(live_of(a) == 0); /* finalized inside minor, drained after it */

  /* the whole struct, with run_finalizers */
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
  int keep = fake_new(&g, 1 * MiB);
  int young = fake_new(&g, 2 * MiB);
  CHECK(keep >= 0 && young >= 0);
  fake_drop(&g, young);
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_OK);
  CHECK(g.minor == 1 && g.run_fin == 1 && g.full == 0);
  CHECK(live_of(a) == 1 * MiB);
  /* keep is old now: a minor does not find it, a full does */
  fake_drop(&g, keep);
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_OK);
  CHECK(live_of(a) == 1 * MiB);
  CHECK_ST(gcpressure_collect(a, 1), GCPRESSURE_OK);
  CHECK(g.full == 1 && g.run_fin == 3);
  CHECK(live_of(a) == 0);
  char* j = stats(a);
  CHECK(json_int(j, "minor") == 2 && json_int(j, "blocking_full") == 1 && json_int(j, "user") == 3);
  CHECK(json_int(j, "finalized") == 3); /* every release_from_finalizer on this allocator */
  CHECK(j && strstr(j, "\"policy\":\"at_limit\""));
  free(j);
  /* at_limit: hints never collect */
  CHECK_ST(gcpressure_quiet_moment(a), GCPRESSURE_OK);
  CHECK_ST(gcpressure_iteration(a), GCPRESSURE_OK);
  CHECK(g.minor == 2 && g.full == 1);
  /* replacing the collector (and the policy) is allowed */
  fake_gc g2;
  fake_init(&g2, a);
  CHECK_ST(fake_register(&g2, 1, 1), GCPRESSURE_OK);
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_OK);
  CHECK(g2.minor == 1 && g.minor == 2);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);

  /* every_iteration, every 3rd: a blocking full from gcpressure_iteration */
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.host_capacity = 256 * MiB;
  o.policy = "every_iteration";
  o.every_n = 3;
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
  for (int it = 1; it <= 9; ++it) {
    fake_drop(&g, fake_new(&g, 256 * KiB));
    CHECK_ST(gcpressure_iteration(a), GCPRESSURE_OK);
  }
  CHECK(g.full == 3 && g.minor == 0);
  CHECK(live_of(a) == 0);
  CHECK(stat_int(a, "baseline") == 3);
  CHECK_ST(gcpressure_quiet_moment(a), GCPRESSURE_OK);
  CHECK(g.full == 3);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);

  /* pressure: dropping garbage drives minor collections; memory stays bounded */
  a = make_host("pressure", "64MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 1), GCPRESSURE_OK);
  int fails = 0;
  for (int it = 0; it < 400; ++it) {
    int k = fake_new(&g, 1 * MiB);
    if (k < 0) ++fails;
    fake_drop(&g, k);
    if (it % 10 == 0) CHECK_ST(gcpressure_iteration(a), GCPRESSURE_OK);
  }
  CHECK(fails == 0);
  CHECK(g.minor > 0 && g.max_depth == 1);
  j = stats(a);
  CHECK(json_int(j, "ooms") == 0);
  CHECK(json_int(j, "minor") > 0);
  CHECK(j && strstr(j, "\"reserved\":{") && json_int(strstr(j, "\"reserved\":{"), "peak") <= (long long)(64 * MiB));
  free(j);
  printf("  pressure over 400 MiB of garbage (64 MiB limit): %d minor, %d full, %d incremental slices\n", g.minor,
         g.full, g.step_full);
  fake_free_all(&g);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

/* --- the C contract ----------------------------------------------------------
 * The environment is the default layer (unset fields take GCPRESSURE_*, set
 * ones win); a soft limit above the hard one is an error at create and in
 * set_limits; the last error is errno-like (not cleared by success); a
 * double or foreign release from a finalizer is reported at the next drain. */
static void test_contract_env(void) {
  setenv("GCPRESSURE_BACKEND", "host", 1);
  setenv("GCPRESSURE_HARD_LIMIT", "3MiB", 1);
  setenv("GCPRESSURE_POLICY", "at_limit", 1);
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.host_capacity = 64 * MiB;
  gcpressure_allocator* a = NULL;
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
  fake_gc g;
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
  char* j = stats(a);
  CHECK(json_int(j, "hard_limit") == (long long)(3 * MiB));
  CHECK(j && strstr(j, "\"policy\":\"at_limit\"") && strstr(j, "\"backend\":\"host\""));
  free(j);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
  o.hard_limit = "5MiB";
  o.policy = "pressure";
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
  j = stats(a);
  CHECK(json_int(j, "hard_limit") == (long long)(5 * MiB));
  CHECK(j && strstr(j, "\"policy\":\"pressure\""));
  free(j);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
  setenv("GCPRESSURE_HARD_LIMIT", "lots", 1);
  o.hard_limit = NULL;
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("GCPRESSURE_HARD_LIMIT");
  unsetenv("GCPRESSURE_BACKEND");
  unsetenv("GCPRESSURE_HARD_LIMIT");
  unsetenv("GCPRESSURE_POLICY");
}

static void test_contract(void) {
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.host_capacity = 64 * MiB;
  o.hard_limit = "8MiB";
  o.soft_limit = "16MiB";
  gcpressure_allocator* a = NULL;
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("soft limit above hard limit (soft 16.00 MiB, hard 8.00 MiB)");
  CHECK(a == NULL);
  o.soft_limit = "80%"; /* of the 64 MiB device: 51 MiB */
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_INVALID);
  o.soft_limit = "8MiB";
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
  if (!a) return;
  CHECK_ST(gcpressure_set_limits(a, 16 * MiB, 0), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("soft limit above hard limit");
  CHECK_ST(gcpressure_set_limits(a, 0, 4 * MiB), GCPRESSURE_OK); /* the soft limit left as is follows */
  CHECK(stat_int(a, "soft_limit") == (long long)(4 * MiB) && stat_int(a, "hard_limit") == (long long)(4 * MiB));

  /* errno-like: a success does not clear the last error */
  void* p = NULL;
  CHECK_ST(gcpressure_alloc(a, 0, NULL, &p), GCPRESSURE_ERR_INVALID);
  char msg[256];
  snprintf(msg, sizeof msg, "%s", gcpressure_last_error());
  CHECK(msg[0] != '\0');
  size_t live = 1;
  CHECK_ST(gcpressure_usage(a, &live, NULL), GCPRESSURE_OK);
  CHECK(strcmp(gcpressure_last_error(), msg) == 0);

  /* foreign and double releases: accepted now, reported at the next drain */
  static char foreign[256];
  const long long misuse0 = stat_int(a, "misuse_errors");
  CHECK_ST(gcpressure_release_from_finalizer(a, foreign, sizeof foreign, NULL), GCPRESSURE_OK);
  CHECK(stat_int(a, "misuse_errors") == misuse0);
  fprintf(stderr, "  (two misuse reports are expected here)\n");
  CHECK_ST(gcpressure_drain(a), GCPRESSURE_OK);
  CHECK(stat_int(a, "misuse_errors") == misuse0 + 1);
  CHECK_ST(gcpressure_alloc(a, 4096, NULL, &p), GCPRESSURE_OK);
  CHECK_ST(gcpressure_release_from_finalizer(a, p, 4096, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_release_from_finalizer(a, p, 4096, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_drain(a), GCPRESSURE_OK);
  CHECK(stat_int(a, "misuse_errors") == misuse0 + 2);
  CHECK(live_of(a) == 0);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

/* --- the runtime's own collections (API version 2) --------------------------
 * A runtime that also collects on its own reports it through
 * own_collections; the stats carry it as runtime_* and the collector's total
 * is the policy's completed callbacks plus the runtime's own. */
typedef struct own_counts {
  uint64_t collections, full;
  double seconds;
  int exact, calls;
} own_counts;
static own_counts g_own;

static void fake_own(void* ctx, uint64_t* collections, uint64_t* full, double* seconds, int* exact) {
  (void)ctx;
  ++g_own.calls;
  *collections = g_own.collections;
  *full = g_own.full;
  *seconds = g_own.seconds;
  *exact = g_own.exact;
}

static void test_own_collections(void) {
  gcpressure_allocator* a = make_host("at_limit", "64MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  memset(&g_own, 0, sizeof g_own);
  g_own.collections = 100; /* counted before the policy existed: not in its stats */
  g_own.full = 10;
  g_own.seconds = 1.0;
  fake_gc g;
  fake_init(&g, a);
  gcpressure_collector_callbacks cb;
  gcpressure_collector_callbacks_init(&cb);
  CHECK(cb.own_collections == NULL);
  cb.context = &g;
  cb.minor = fake_minor;
  cb.full = fake_full;
  cb.run_finalizers = fake_run_finalizers;
  cb.own_collections = fake_own;
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_OK);
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_OK);
  CHECK_ST(gcpressure_collect(a, 1), GCPRESSURE_OK);
  g_own.collections += 7; /* the runtime collects on its own: 7, 2 of them whole-heap, 0.25 s */
  g_own.full += 2;
  g_own.seconds += 0.25;
  g_own.exact = 1;
  char* j = stats(a);
  CHECK(json_int(j, "runtime_collections") == 7);
  CHECK(json_int(j, "runtime_full_collections") == 2);
  CHECK(json_int(j, "collector_collections") == 2 + 7); /* minor + full + own */
  CHECK(j && strstr(j, "\"runtime_gc_seconds\":0.250000"));
  CHECK(j && strstr(j, "\"runtime_seconds_exact\":true"));
  free(j);
  g_own.exact = 0;
  j = stats(a);
  CHECK(j && strstr(j, "\"runtime_seconds_exact\":false"));
  free(j);
  CHECK(g_own.calls >= 3);

  /* an API-version-1 caller: own_collections is past its struct_size, never read */
  cb.struct_size = offsetof(gcpressure_collector_callbacks, own_collections);
  const int calls = g_own.calls;
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_OK);
  g_own.collections += 5;
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_OK);
  j = stats(a);
  CHECK(json_int(j, "runtime_collections") == 0);
  CHECK(json_int(j, "collector_collections") == 1);
  CHECK(j && strstr(j, "\"runtime_seconds_exact\":false"));
  free(j);
  CHECK(g_own.calls == calls);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

/* --- the sync hint ----------------------------------------------------------
 * gcpressure_synchronize counts a sync in the policy's stats and returns
 * once the stream's work is done; without a collector it only waits.
 * quiet_moment_ex(will_block) reaches the policy's quiet_moment: with
 * every_iteration it is not an iteration, so it never collects there. */
static void test_sync_hint(void) {
  gcpressure_allocator* a = make_host("pressure", "64MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  CHECK_ST(gcpressure_synchronize(a, NULL), GCPRESSURE_OK); /* no collector yet: a plain wait */
  CHECK(stat_int(a, "syncs") == 0);
  fake_gc g;
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 1), GCPRESSURE_OK);
  for (int i = 0; i < 3; ++i) CHECK_ST(gcpressure_synchronize(a, NULL), GCPRESSURE_OK);
  CHECK(stat_int(a, "syncs") == 3);
  CHECK_ST(gcpressure_quiet_moment_ex(a, 1), GCPRESSURE_OK);
  CHECK_ST(gcpressure_quiet_moment_ex(a, 0), GCPRESSURE_OK);
  CHECK(g.max_depth <= 1);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);

  a = make_host("every_iteration", NULL, NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
  CHECK_ST(gcpressure_quiet_moment_ex(a, 1), GCPRESSURE_OK);
  CHECK(g.full == 0 && g.minor == 0);
  CHECK_ST(gcpressure_iteration(a), GCPRESSURE_OK);
  CHECK(g.full == 1);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

/* --- re-entrancy: what a finalizer running inside a collection may do ------ */

typedef struct reentry {
  void* foreign_block; /* freed with gcpressure_free from inside */
  size_t foreign_bytes;
  gcpressure_status collect_st, quiet_st, iter_st, trim_st, setc_st, destroy_st, create_st, sync_st, quiet_ex_st;
  gcpressure_status alloc_st, free_st, release_st, drain_st, usage_st, stats_st, limits_st, nested_free_st;
  char busy_msg[256];
  int ran;
} reentry;
static reentry g_re;

static void act_reenter(fake_gc* g, const char* where) {
  (void)where;
  reentry* r = &g_re;
  r->ran = 1;
  gcpressure_collector_callbacks cb;
  gcpressure_collector_callbacks_init(&cb);
  cb.minor = fake_minor;
  cb.full = fake_full;
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  gcpressure_allocator* other = NULL;
  /* not from a collection: BUSY */
  r->collect_st = gcpressure_collect(g->a, 1);
  snprintf(r->busy_msg, sizeof r->busy_msg, "%s", gcpressure_last_error());
  r->quiet_st = gcpressure_quiet_moment(g->a);
  r->iter_st = gcpressure_iteration(g->a);
  r->sync_st = gcpressure_synchronize(g->a, NULL);
  r->quiet_ex_st = gcpressure_quiet_moment_ex(g->a, 1);
  r->trim_st = gcpressure_trim(g->a);
  r->setc_st = gcpressure_set_collector(g->a, &cb);
  r->destroy_st = gcpressure_destroy(g->a);
  r->create_st = gcpressure_create(&o, &other);
  /* finalizer-safe: allowed */
  r->free_st = gcpressure_free(g->a, r->foreign_block, r->foreign_bytes, NULL);
  void* p = NULL;
  r->alloc_st = gcpressure_alloc(g->a, 4 * KiB, NULL, &p);
  r->nested_free_st = p ? gcpressure_free(g->a, p, 4 * KiB, NULL) : GCPRESSURE_ERR_INTERNAL;
  void* p2 = NULL;
  if (gcpressure_alloc(g->a, 8 * KiB, NULL, &p2) == GCPRESSURE_OK)
    r->release_st = gcpressure_release_from_finalizer(g->a, p2, 8 * KiB, NULL);
  else
    r->release_st = GCPRESSURE_ERR_INTERNAL;
  r->drain_st = gcpressure_drain(g->a);
  size_t live = 0;
  r->usage_st = gcpressure_usage(g->a, &live, NULL);
  size_t need = 0;
  r->stats_st = gcpressure_stats_json(g->a, NULL, 0, &need);
  r->limits_st = gcpressure_set_limits(g->a, 0, 0);
}

static void check_reentry(void) {
  const reentry* r = &g_re;
  CHECK(r->ran);
  CHECK(r->collect_st == GCPRESSURE_ERR_BUSY);
  CHECK(strstr(r->busy_msg, "inside a collection") != NULL);
  CHECK(r->quiet_st == GCPRESSURE_ERR_BUSY);
  CHECK(r->iter_st == GCPRESSURE_ERR_BUSY);
  CHECK(r->sync_st == GCPRESSURE_ERR_BUSY);
  CHECK(r->quiet_ex_st == GCPRESSURE_ERR_BUSY);
  CHECK(r->trim_st == GCPRESSURE_ERR_BUSY);
  CHECK(r->setc_st == GCPRESSURE_ERR_BUSY);
  CHECK(r->destroy_st == GCPRESSURE_ERR_BUSY);
  CHECK(r->create_st == GCPRESSURE_ERR_BUSY);
  CHECK(r->free_st == GCPRESSURE_OK);
  CHECK(r->alloc_st == GCPRESSURE_OK);
  CHECK(r->nested_free_st == GCPRESSURE_OK);
  CHECK(r->release_st == GCPRESSURE_OK);
  CHECK(r->drain_st == GCPRESSURE_OK);
  CHECK(r->usage_st == GCPRESSURE_OK);
  CHECK(r->stats_st == GCPRESSURE_ERR_TRUNCATED);
  CHECK(r->limits_st == GCPRESSURE_OK);
}

static gcpressure_status g_nested_st;
static void act_nested_alloc(fake_gc* g, const char* where) {
  (void)where;
  void* p = NULL;
  g_nested_st = gcpressure_alloc(g->a, 64 * KiB, NULL, &p);
  if (p) gcpressure_free(g->a, p, 64 * KiB, NULL);
}

static void test_reentrancy(void) {
  /* (1) at_limit with a hard limit: the allocation that does not fit runs
   * the reclaim ladder, whose first collector step calls minor. */
  gcpressure_allocator* a = make_host("at_limit", "4MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  fake_gc g;
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
  memset(&g_re, 0, sizeof g_re);
  g_re.foreign_bytes = 512 * KiB;
  CHECK_ST(gcpressure_alloc(a, g_re.foreign_bytes, NULL, &g_re.foreign_block), GCPRESSURE_OK);
  /* 3.5 MiB of garbage: with the foreign block, both 2 MiB segments are full */
  for (int i = 0; i < 7; ++i) fake_drop(&g, fake_new(&g, 512 * KiB));
  CHECK(live_of(a) == 4 * MiB);
  g.action = act_reenter;
  void* big = NULL;
  CHECK_ST(gcpressure_alloc(a, 512 * KiB, NULL, &big), GCPRESSURE_OK);
  CHECK(g.minor >= 1 && g.max_depth == 1);
  check_reentry();
  CHECK(live_of(a) == 512 * KiB);
  CHECK(stat_int(a, "finish_and_drain") >= 1);
  CHECK(stat_int(a, "ooms") == 0);
  CHECK_ST(gcpressure_free(a, big, 512 * KiB, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);

  /* (2) every_iteration: gcpressure_iteration runs full; the same rules */
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.host_capacity = 64 * MiB;
  o.policy = "every_iteration";
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 0, 0), GCPRESSURE_OK); /* finalizers run inside full */
  memset(&g_re, 0, sizeof g_re);
  g_re.foreign_bytes = 1000;
  CHECK_ST(gcpressure_alloc(a, g_re.foreign_bytes, NULL, &g_re.foreign_block), GCPRESSURE_OK);
  fake_drop(&g, fake_new(&g, 64 * KiB));
  g.action = act_reenter;
  CHECK_ST(gcpressure_iteration(a), GCPRESSURE_OK);
  CHECK(g.full == 1 && g.max_depth == 1);
  check_reentry();
  CHECK(live_of(a) == 0);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);

  /* (3) no nested collection: a finalizer's allocation that does not fit,
   * inside a collection the user asked for, must not re-enter the collector
   * (the ladder's collector steps are skipped there; the allocation fails). */
  a = make_host("at_limit", "2MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
  int h1 = fake_new(&g, 1 * MiB), h2 = fake_new(&g, 1 * MiB); /* the 2 MiB segment is full */
  CHECK(h1 >= 0 && h2 >= 0);
  g_nested_st = GCPRESSURE_OK;
  g.action = act_nested_alloc;
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_OK);
  CHECK(g_nested_st == GCPRESSURE_ERR_OOM);
  CHECK(g.minor == 1 && g.full == 0 && g.max_depth == 1);
  CHECK(live_of(a) == 2 * MiB);
  fake_free_all(&g);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

/* --- gcpressure_enter_collection: a runtime's own finalizer thread --------- */

static int g_cb_inside = -1;
static gcpressure_status g_cb_leave_st = GCPRESSURE_OK;
static void act_probe_scope(fake_gc* g, const char* where) {
  (void)g;
  (void)where;
  g_cb_inside = gcpressure_in_collection();
  g_cb_leave_st = gcpressure_leave_collection(); /* not ours to end */
}

static void* other_thread_inside(void* arg) {
  *(int*)arg = gcpressure_in_collection();
  return NULL;
}

static void test_enter_collection(void) {
  CHECK(gcpressure_in_collection() == 0);
  CHECK_ST(gcpressure_leave_collection(), GCPRESSURE_ERR_MISUSE);
  CHECK_ERR_HAS("gcpressure_enter_collection");
  CHECK(gcpressure_in_collection() == 0);

  gcpressure_allocator* a = make_host("at_limit", "2MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  fake_gc g;
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
  const int h = fake_new(&g, 1536 * KiB);
  fake_drop(&g, h); /* garbage only a collection can return */

  /* Inside: what a finalizer may do is served; no callback runs. */
  CHECK_ST(gcpressure_enter_collection(), GCPRESSURE_OK);
  CHECK(gcpressure_in_collection() == 1);
  int other = -1;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, other_thread_inside, &other) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(other == 0); /* per thread */
  CHECK_ST(gcpressure_collect(a, 1), GCPRESSURE_ERR_BUSY);
  CHECK_ST(gcpressure_quiet_moment(a), GCPRESSURE_ERR_BUSY);
  void* p = NULL;
  CHECK_ST(gcpressure_alloc(a, 256 * KiB, NULL, &p), GCPRESSURE_OK);
  CHECK_ST(gcpressure_free(a, p, 256 * KiB, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_alloc(a, 1 * MiB, NULL, &p), GCPRESSURE_ERR_OOM); /* only a collection would help */
  CHECK_ERR_HAS("no collector");
  CHECK(g.minor == 0 && g.full == 0 && g.run_fin == 0);
  CHECK_ST(gcpressure_enter_collection(), GCPRESSURE_OK); /* nests */
  CHECK_ST(gcpressure_leave_collection(), GCPRESSURE_OK);
  CHECK(gcpressure_in_collection() == 1);
  CHECK_ST(gcpressure_leave_collection(), GCPRESSURE_OK);
  CHECK(gcpressure_in_collection() == 0);

  /* Outside again: the same allocation collects and fits. */
  CHECK_ST(gcpressure_alloc(a, 1 * MiB, NULL, &p), GCPRESSURE_OK);
  CHECK(g.minor + g.full >= 1);
  CHECK_ST(gcpressure_free(a, p, 1 * MiB, NULL), GCPRESSURE_OK);

  /* Inside a callback: in a collection, and a leave cannot end the library's. */
  g.action = act_probe_scope;
  CHECK_ST(gcpressure_collect(a, 1), GCPRESSURE_OK);
  CHECK(g_cb_inside == 1);
  CHECK(g_cb_leave_st == GCPRESSURE_ERR_MISUSE);
  CHECK(gcpressure_in_collection() == 0);
  fake_free_all(&g);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

static void test_null_and_foreign_handles(void) {
  void* p = NULL;
  size_t n = 0;
  gcpressure_collector_callbacks cb;
  gcpressure_collector_callbacks_init(&cb);
  CHECK_ST(gcpressure_destroy(NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_set_collector(NULL, &cb), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_alloc(NULL, 1, NULL, &p), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_free(NULL, &n, 1, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_release_from_finalizer(NULL, &n, 1, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_quiet_moment(NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_quiet_moment_ex(NULL, 1), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_synchronize(NULL, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_iteration(NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_collect(NULL, 1), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_drain(NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_trim(NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_set_limits(NULL, 1, 2), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_usage(NULL, &n, &n), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_stats_json(NULL, NULL, 0, &n), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_boehm_alloc(NULL, 1, NULL, (gcpressure_buffer**)&p), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_buffer_unsafe_free(NULL, (gcpressure_buffer*)&n), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_buffer_data(NULL, &p), GCPRESSURE_ERR_INVALID);
  CHECK(gcpressure_buffer_size(NULL) == 0);
  /* something that is not an allocator */
  static uint64_t not_a_handle[64];
  gcpressure_allocator* f = (gcpressure_allocator*)not_a_handle;
  CHECK_ST(gcpressure_alloc(f, 1, NULL, &p), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("not an allocator");
  CHECK_ST(gcpressure_destroy(f), GCPRESSURE_ERR_INVALID);
}

static void test_use_after_destroy(void) {
  gcpressure_allocator* a = make_host("pressure", "16MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  fake_gc g;
  fake_init(&g, a);
  CHECK_ST(fake_register(&g, 1, 0), GCPRESSURE_OK);
  void *p = NULL, *leaked = NULL;
  CHECK_ST(gcpressure_alloc(a, 4096, NULL, &p), GCPRESSURE_OK);
  CHECK_ST(gcpressure_alloc(a, 4096, NULL, &leaked), GCPRESSURE_OK);
  CHECK_ST(gcpressure_free(a, p, 4096, NULL), GCPRESSURE_OK);
  fprintf(stderr, "  (a report of one leaked live block is expected here)\n");
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK); /* a live block: a documented leak, never a crash */
  gcpressure_collector_callbacks cb;
  gcpressure_collector_callbacks_init(&cb);
  cb.minor = fake_minor;
  cb.full = fake_full;
  size_t n = 0;
  gcpressure_buffer* b = NULL;
  CHECK_ST(gcpressure_alloc(a, 4096, NULL, &p), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ERR_HAS("destroyed");
  CHECK_ST(gcpressure_free(a, leaked, 4096, NULL), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_release_from_finalizer(a, leaked, 4096, NULL), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_quiet_moment(a), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_quiet_moment_ex(a, 0), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_synchronize(a, NULL), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_iteration(a), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_drain(a), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_trim(a), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_set_limits(a, 0, 0), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_usage(a, &n, &n), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_stats_json(a, NULL, 0, &n), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_boehm_alloc(a, 16, NULL, &b), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_ERR_SHUTDOWN);
}

/* The last error is per thread. */
static void* error_thread(void* arg) {
  (void)arg;
  int* ok = malloc(sizeof *ok);
  *ok = strcmp(gcpressure_last_error(), "") == 0;
  void* p;
  *ok = *ok && gcpressure_alloc(NULL, 1, NULL, &p) == GCPRESSURE_ERR_INVALID;
  *ok = *ok && strstr(gcpressure_last_error(), "null allocator") != NULL;
  return ok;
}

static void test_thread_local_error(void) {
  gcpressure_allocator* a = make_host(NULL, "16MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  void* p = NULL;
  CHECK_ST(gcpressure_alloc(a, 0, NULL, &p), GCPRESSURE_ERR_INVALID);
  char mine[256];
  snprintf(mine, sizeof mine, "%s", gcpressure_last_error());
  pthread_t t;
  void* res = NULL;
  CHECK(pthread_create(&t, NULL, error_thread, NULL) == 0);
  CHECK(pthread_join(t, &res) == 0);
  CHECK(res && *(int*)res);
  free(res);
  CHECK(strcmp(mine, gcpressure_last_error()) == 0); /* the other thread's error is not ours */
  gcpressure_destroy(a);
}

/* Finalizers on other threads: allocations and releases from four threads at
 * once (as a runtime's finalizer thread would), drained by the main one. */
typedef struct worker {
  gcpressure_allocator* a;
  int ok;
} worker;

static void* worker_main(void* arg) {
  worker* w = arg;
  w->ok = 1;
  for (int i = 0; i < 2000; ++i) {
    void* p = NULL;
    const size_t n = (size_t)(i % 7 + 1) * 1000;
    if (gcpressure_alloc(w->a, n, NULL, &p) != GCPRESSURE_OK) {
      w->ok = 0;
      continue;
    }
    if (i % 2) w->ok &= gcpressure_release_from_finalizer(w->a, p, n, NULL) == GCPRESSURE_OK;
    else w->ok &= gcpressure_free(w->a, p, n, NULL) == GCPRESSURE_OK;
  }
  return NULL;
}

static void test_threads(void) {
  gcpressure_allocator* a = make_host(NULL, "64MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL);
  if (!a) return;
  pthread_t t[4];
  worker w[4];
  for (int i = 0; i < 4; ++i) {
    w[i].a = a;
    CHECK(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
  }
  for (int i = 0; i < 4; ++i) CHECK_ST(gcpressure_drain(a), GCPRESSURE_OK);
  for (int i = 0; i < 4; ++i) {
    pthread_join(t[i], NULL);
    CHECK(w[i].ok);
  }
  CHECK_ST(gcpressure_drain(a), GCPRESSURE_OK);
  CHECK(live_of(a) == 0);
  CHECK(stat_int(a, "allocations") == 8000 && stat_int(a, "frees") == 8000);
  CHECK(stat_int(a, "misuse_errors") == 0);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

/* --- the Boehm convenience ------------------------------------------------- */

static gcpressure_buffer* g_survivor; /* static data: a Boehm root */

static void test_boehm(void) {
  CHECK_ST(gcpressure_boehm_init(1, 1), GCPRESSURE_OK);
  CHECK_ST(gcpressure_boehm_init(1, 1), GCPRESSURE_OK); /* idempotent */
  gcpressure_allocator* a = make_host("pressure", "16MiB", NULL, GCPRESSURE_COLLECTOR_BOEHM);
  gcpressure_allocator* cbk = make_host(NULL, "16MiB", NULL, GCPRESSURE_COLLECTOR_CALLBACKS);
  CHECK(a != NULL && cbk != NULL);
  if (!a || !cbk) return;
  gcpressure_buffer* b = NULL;
  CHECK_ST(gcpressure_boehm_alloc(a, 1000, NULL, &b), GCPRESSURE_OK);
  CHECK(b != NULL);
  void* d = NULL;
  CHECK_ST(gcpressure_buffer_data(b, &d), GCPRESSURE_OK);
  CHECK(d != NULL && ((uintptr_t)d % 256) == 0);
  if (d) memset(d, 1, 1000);
  CHECK(gcpressure_buffer_size(b) == 1000);
  CHECK(live_of(a) == 1000);
  CHECK_ST(gcpressure_buffer_data(b, NULL), GCPRESSURE_ERR_INVALID);

  /* errors */
  gcpressure_buffer* z = (gcpressure_buffer*)&d;
  CHECK_ST(gcpressure_boehm_alloc(a, 0, NULL, &z), GCPRESSURE_ERR_INVALID);
  CHECK(z == NULL);
  CHECK_ST(gcpressure_boehm_alloc(a, 16, NULL, NULL), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_boehm_alloc(cbk, 16, NULL, &z), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("BOEHM");
  CHECK_ST(gcpressure_buffer_unsafe_free(cbk, b), GCPRESSURE_ERR_INVALID);
  CHECK_ST(gcpressure_buffer_unsafe_free(a, NULL), GCPRESSURE_ERR_INVALID);
  gcpressure_collector_callbacks cb;
  gcpressure_collector_callbacks_init(&cb);
  cb.minor = fake_minor;
  cb.full = fake_full;
  CHECK_ST(gcpressure_set_collector(a, &cb), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("Boehm");

  /* unsafe_free, twice; data after free */
  CHECK_ST(gcpressure_buffer_unsafe_free(a, b), GCPRESSURE_OK);
  CHECK(live_of(a) == 0);
  CHECK_ST(gcpressure_buffer_unsafe_free(a, b), GCPRESSURE_ERR_MISUSE);
  CHECK_ERR_HAS("double unsafe_free");
  d = (void*)&d;
  CHECK_ST(gcpressure_buffer_data(b, &d), GCPRESSURE_ERR_MISUSE);
  CHECK(d == NULL);
  CHECK_ERR_HAS("use after free");

  /* a buffer of another Boehm heap */
  gcpressure_allocator* a2 = make_host("pressure", "16MiB", NULL, GCPRESSURE_COLLECTOR_BOEHM);
  gcpressure_buffer* other = NULL;
  CHECK_ST(gcpressure_boehm_alloc(a2, 512, NULL, &other), GCPRESSURE_OK);
  CHECK_ST(gcpressure_buffer_unsafe_free(a, other), GCPRESSURE_ERR_MISUSE);
  CHECK_ERR_HAS("another heap");
  CHECK_ST(gcpressure_buffer_unsafe_free(a2, other), GCPRESSURE_OK);
  CHECK_ST(gcpressure_destroy(a2), GCPRESSURE_OK);

  /* dropped buffers: 256 MiB through a 16 MiB limit, reclaimed by collections */
  int fails = 0;
  for (int i = 0; i < 256; ++i) {
    gcpressure_buffer* t = NULL;
    if (gcpressure_boehm_alloc(a, 1 * MiB, NULL, &t) != GCPRESSURE_OK) {
      ++fails;
      fprintf(stderr, "  boehm_alloc %d: %s\n", i, gcpressure_last_error());
    }
    t = NULL;
    if (i % 16 == 0) CHECK_ST(gcpressure_iteration(a), GCPRESSURE_OK);
  }
  CHECK(fails == 0);
  CHECK_ST(gcpressure_collect(a, 1), GCPRESSURE_OK);
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_OK);
  char* j = stats(a);
  CHECK(json_int(j, "ooms") == 0);
  CHECK(json_int(j, "finalized") > 200);
  CHECK(j && strstr(j, "\"policy\":\"pressure\""));
  CHECK(j && json_int(strstr(j, "\"reserved\":{"), "peak") <= (long long)(16 * MiB));
  free(j);

  /* destroy with a live buffer: its data is gone (MISUSE), its finalizer does nothing */
  CHECK_ST(gcpressure_boehm_alloc(a, 4096, NULL, &g_survivor), GCPRESSURE_OK);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
  CHECK_ST(gcpressure_buffer_data(g_survivor, &d), GCPRESSURE_ERR_MISUSE);
  CHECK_ERR_HAS("shut down");
  CHECK(gcpressure_buffer_size(g_survivor) == 4096);
  CHECK_ST(gcpressure_buffer_unsafe_free(a, g_survivor), GCPRESSURE_ERR_SHUTDOWN);
  g_survivor = NULL;
  CHECK_ST(gcpressure_destroy(cbk), GCPRESSURE_OK);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  static const struct {
    const char* name;
    void (*fn)(void);
  } tests[] = {
      {"basics", test_basics},
      {"options", test_options},
      {"backends", test_backends},
      {"alloc_free", test_alloc_free},
      {"limits_and_oom", test_limits_and_oom},
      {"stats_json", test_stats_json},
      {"release_and_drain", test_release_and_drain},
      {"collector_callbacks", test_collector_callbacks},
      {"contract_env", test_contract_env},
      {"contract", test_contract},
      {"own_collections", test_own_collections},
      {"sync_hint", test_sync_hint},
      {"reentrancy", test_reentrancy},
      {"enter_collection", test_enter_collection},
      {"null_and_foreign_handles", test_null_and_foreign_handles},
      {"use_after_destroy", test_use_after_destroy},
      {"thread_local_error", test_thread_local_error},
      {"threads", test_threads},
      {"boehm", test_boehm},
  };
  for (size_t i = 0; i < sizeof tests / sizeof *tests; ++i) {
    const int before = g_fail;
    printf("[ RUN  ] %s\n", tests[i].name);
    tests[i].fn();
    printf("[ %s ] %s\n", g_fail == before ? " OK " : "FAIL", tests[i].name);
  }
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
