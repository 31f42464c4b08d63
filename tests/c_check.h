/* c_check.h — the checks of the plain-C tests (test_c_api.c,
 * test_c_api_devices.c): CHECK, CHECK_ST (a status), CHECK_ERR_HAS (the last
 * error mentions a string); each counts into g_pass / g_fail. Include once
 * per test program, after gcpressure/gcpressure.h. */
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

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

#endif /* GCPRESSURE_TESTS_C_CHECK_H */
