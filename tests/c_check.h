/* c_check.h — the checks of the plain-C tests (test_c_api.c,
 * test_c_api_collector.c, test_c_api_runtime.c, test_c_api_devices.c):
 * CHECK, CHECK_ST (a status), CHECK_ERR_HAS (the last error mentions a
 * string); each counts into g_pass / g_fail; run_c_tests runs a program's
 * table of tests. Include once per test program, after
 * gcpressure/gcpressure.h. */
#ifndef GCPRESSURE_TESTS_C_CHECK_H
#define GCPRESSURE_TESTS_C_CHECK_H

#include <stdio.h>
#include <string.h>

#include "gcpressure/gcpressure.h"

static int g_pass = 0, g_fail = 0;

#define CHECK(cond)                                                                                 \
  do {                                                                                              \
    if (cond) {                                                                                     \
      ++g_pass;                                                                                     \
    } else {                                                                                        \
      ++g_fail;                                                                                     \
      fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond,              \
              gcpressure_last_error());                                                             \
    }                                                                                               \
  } while (0)

#define CHECK_ST(call, expect)                                                                      \
  do {                                                                                              \
    gcpressure_status st_ = (call);                                                                 \
    if (st_ == (expect)) {                                                                          \
      ++g_pass;                                                                                     \
    } else {                                                                                        \
      ++g_fail;                                                                                     \
      fprintf(stderr, "FAIL %s:%d: %s returned %d (%s), expected %s; last error: %s\n", __FILE__,   \
              __LINE__, #call, (int)st_, gcpressure_status_string(st_), #expect,                    \
              gcpressure_last_error());                                                             \
    }                                                                                               \
  } while (0)

#define CHECK_ERR_HAS(needle)                                                                       \
  do {                                                                                              \
    const char* e_ = gcpressure_last_error();                                                       \
    if (e_ && strstr(e_, (needle))) {                                                               \
      ++g_pass;                                                                                     \
    } else {                                                                                        \
      ++g_fail;                                                                                     \
      fprintf(stderr, "FAIL %s:%d: last error \"%s\" does not mention \"%s\"\n", __FILE__,          \
              __LINE__, e_ ? e_ : "(null)", (needle));                                              \
    }                                                                                               \
  } while (0)

/* A program's tests, run in order: "[ RUN  ] name" and "[  OK  ] name" (or
 * FAIL) for each, "N passed, M failed" last; the exit status. */
typedef struct c_test {
  const char* name;
  void (*fn)(void);
} c_test;

static inline int run_c_tests(const c_test* tests, size_t n) {
  setvbuf(stdout, NULL, _IONBF, 0);
  for (size_t i = 0; i < n; ++i) {
    const int before = g_fail;
    printf("[ RUN  ] %s\n", tests[i].name);
    tests[i].fn();
    printf("[ %s ] %s\n", g_fail == before ? " OK " : "FAIL", tests[i].name);
  }
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

#endif /* GCPRESSURE_TESTS_C_CHECK_H */
