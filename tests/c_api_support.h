/* c_api_support.h — what the plain-C tests of the C API share (test_c_api.c,
 * test_c_api_collector.c, test_c_api_runtime.c): allocators on the host
 * backend, the stats JSON, and a fake collector written in C that records
 * every call. Include once per test program, after c_check.h. Functions are
 * static inline: each program uses some of them. */
#ifndef GCPRESSURE_TESTS_C_API_SUPPORT_H
#define GCPRESSURE_TESTS_C_API_SUPPORT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcpressure/gcpressure.h"

#include "c_check.h"

/* --- helpers ------------------------------------------------------------- */

static inline gcpressure_allocator* make_host(const char* policy, const char* hard, const char* soft,
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
static inline char* stats(gcpressure_allocator* a) {
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
static inline long long json_int(const char* json, const char* key) {
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char* p = json ? strstr(json, pat) : NULL;
  if (!p) return -1;
  return strtoll(p + strlen(pat), NULL, 10);
}

static inline long long stat_int(gcpressure_allocator* a, const char* key) {
  char* j = stats(a);
  long long v = json_int(j, key);
  free(j);
  return v;
}

static inline size_t live_of(gcpressure_allocator* a) {
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

static inline int fake_new(fake_gc* g, size_t bytes) {
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

static inline void fake_finalize(fake_gc* g, fake_obj* o) {
  gcpressure_status st = gcpressure_release_from_finalizer(g->a, o->ptr, o->bytes, NULL);
  CHECK(st == GCPRESSURE_OK);
  memset(o, 0, sizeof *o);
}

static inline void fake_sweep(fake_gc* g, int whole_heap) {
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

static inline void fake_enter(fake_gc* g, const char* where) {
  if (++g->depth > g->max_depth) g->max_depth = g->depth;
  if (g->action) {
    fake_action act = g->action;
    g->action = NULL;
    act(g, where);
  }
}

static inline void fake_minor(void* ctx) {
  fake_gc* g = ctx;
  ++g->minor;
  fake_enter(g, "minor");
  fake_sweep(g, 0);
  --g->depth;
}

static inline void fake_full(void* ctx) {
  fake_gc* g = ctx;
  ++g->full;
  fake_enter(g, "full");
  fake_sweep(g, 1);
  --g->depth;
}

static inline size_t fake_run_finalizers(void* ctx) {
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

static inline void fake_start_full(void* ctx) {
  fake_gc* g = ctx;
  ++g->start_full;
  g->slices_left = g->step_full_slices;
}

static inline int fake_step_full(void* ctx, double budget) {
  fake_gc* g = ctx;
  (void)budget;
  ++g->step_full;
  fake_enter(g, "step_full");
  int done = --g->slices_left <= 0;
  if (done) fake_sweep(g, 1);
  --g->depth;
  return done;
}

static inline size_t fake_heap_bytes(void* ctx) {
  fake_gc* g = ctx;
  ++g->heap_bytes;
  return 1 * MiB;
}

static inline void fake_init(fake_gc* g, gcpressure_allocator* a) {
  memset(g, 0, sizeof *g);
  g->a = a;
  g->step_full_slices = 3;
}

static inline gcpressure_status fake_register(fake_gc* g, int with_finalizers, int with_incremental) {
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
static inline void fake_drop(fake_gc* g, int i) {
  if (i >= 0) g->objs[i].reachable = 0;
}

static inline void fake_free_all(fake_gc* g) {
  for (int i = 0; i < FAKE_MAX; ++i)
    if (g->objs[i].used) {
      CHECK_ST(gcpressure_free(g->a, g->objs[i].ptr, g->objs[i].bytes, NULL), GCPRESSURE_OK);
      memset(&g->objs[i], 0, sizeof g->objs[i]);
    }
}


#endif /* GCPRESSURE_TESTS_C_API_SUPPORT_H */
