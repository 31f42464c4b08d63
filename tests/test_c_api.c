/* test_c_api.c — the C API from plain C11 (no C++, no GoogleTest): creation,
 * options and their errors, backends, alloc/free, limits and the OOM report,
 * stats JSON, release and drain. The collector's side is in
 * test_c_api_collector.c, handles, threads and Boehm in test_c_api_runtime.c;
 * what they share in c_api_support.h.
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

int main(void) {
  static const c_test tests[] = {
      {"basics", test_basics},
      {"options", test_options},
      {"backends", test_backends},
      {"alloc_free", test_alloc_free},
      {"limits_and_oom", test_limits_and_oom},
      {"stats_json", test_stats_json},
      {"release_and_drain", test_release_and_drain},
  };
  return run_c_tests(tests, sizeof tests / sizeof *tests);
}
