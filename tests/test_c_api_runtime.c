/* test_c_api_runtime.c — the C API as a runtime meets it, from plain C11:
 * gcpressure_enter_collection on a runtime's own finalizer thread, null and
 * foreign handles, use after destroy, the thread-local last error, threads,
 * and the Boehm convenience.
 * Prints "N passed, M failed" last; exits nonzero on failure.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, pthreads */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcpressure/gcpressure.h"

#include "c_api_support.h"
#include "c_check.h"

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
  static const c_test tests[] = {
      {"enter_collection", test_enter_collection},
      {"null_and_foreign_handles", test_null_and_foreign_handles},
      {"use_after_destroy", test_use_after_destroy},
      {"thread_local_error", test_thread_local_error},
      {"threads", test_threads},
      {"boehm", test_boehm},
  };
  return run_c_tests(tests, sizeof tests / sizeof *tests);
}
