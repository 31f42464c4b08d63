/* test_c_api_collector.c — the C API's collector side, from plain C11: a fake
 * collector written in C (c_api_support.h) that records every call, callback
 * struct versioning, the C contract (the environment as the default layer,
 * soft above hard, the errno-like last error), the runtime's own collections,
 * the sync hint, and re-entrancy from inside its callbacks (what a runtime's
 * finalizers may and may not do).
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

int main(void) {
  static const c_test tests[] = {
      {"collector_callbacks", test_collector_callbacks},
      {"contract_env", test_contract_env},
      {"contract", test_contract},
      {"own_collections", test_own_collections},
      {"sync_hint", test_sync_hint},
      {"reentrancy", test_reentrancy},
  };
  return run_c_tests(tests, sizeof tests / sizeof *tests);
}
