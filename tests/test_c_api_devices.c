/* test_c_api_devices.c — the C API over several devices (API version 3):
 * options.devices, gcpressure_device_count, gcpressure_device_allocator
 * (Note [C handles over several devices] in gc_bridge/src/c_api.cpp), on two
 * simulated host devices, with a callback collector written in C and with
 * Boehm. Prints "N passed, M failed" last; exits nonzero on failure.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcpressure/gcpressure.h"

#include "c_check.h"

/* A runtime with two "dead" objects, one per device: its minor collection
 * finalizes both, each releasing its block to its own device's handle. */
struct runtime {
  gcpressure_allocator* dev[2];
  void* dead[2];
  size_t bytes[2];
  int minors;
};

static void rt_minor(void* ctx) {
  struct runtime* r = ctx;
  ++r->minors;
  for (int d = 0; d < 2; ++d) {
    if (!r->dead[d]) continue;
    CHECK_ST(gcpressure_release_from_finalizer(r->dev[d], r->dead[d], r->bytes[d], NULL), GCPRESSURE_OK);
    r->dead[d] = NULL;
  }
}
static void rt_full(void* ctx) { rt_minor(ctx); }

static size_t live_of(gcpressure_allocator* a) {
  size_t live = 0, reserved = 0;
  CHECK_ST(gcpressure_usage(a, &live, &reserved), GCPRESSURE_OK);
  return live;
}

static gcpressure_options two_devices(gcpressure_collector_kind kind) {
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.host_capacity = 256 * MiB;
  o.hard_limit = "128MiB";
  o.policy = "pressure";
  o.devices = "0,1";
  o.collector = kind;
  return o;
}

static void test_callbacks_group(void) {
  gcpressure_options o = two_devices(GCPRESSURE_COLLECTOR_CALLBACKS);
  o.policy = "at_limit"; /* only the collection asked for below */
  gcpressure_allocator* a = NULL;
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
  size_t n = 0;
  CHECK_ST(gcpressure_device_count(a, &n), GCPRESSURE_OK);
  CHECK(n == 2);
  gcpressure_allocator *d0 = NULL, *d1 = NULL, *bad = NULL;
  CHECK_ST(gcpressure_device_allocator(a, 0, &d0), GCPRESSURE_OK);
  CHECK(d0 == a);
  CHECK_ST(gcpressure_device_allocator(a, 1, &d1), GCPRESSURE_OK);
  CHECK(d1 != NULL && d1 != a);
  CHECK_ST(gcpressure_device_allocator(a, 2, &bad), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("out of range");
  CHECK(bad == NULL);
  CHECK_ST(gcpressure_device_count(d1, &n), GCPRESSURE_OK);
  CHECK(n == 2);

  struct runtime rt = {{a, d1}, {NULL, NULL}, {0, 0}, 0};
  gcpressure_collector_callbacks cb;
  gcpressure_collector_callbacks_init(&cb);
  cb.context = &rt;
  cb.minor = rt_minor;
  cb.full = rt_full;
  CHECK_ST(gcpressure_set_collector(d1, &cb), GCPRESSURE_OK); /* the group's collector, from any handle */

  void *p0 = NULL, *p1 = NULL;
  CHECK_ST(gcpressure_alloc(a, 2 * MiB, NULL, &p0), GCPRESSURE_OK);
  CHECK_ST(gcpressure_alloc(d1, 6 * MiB, NULL, &p1), GCPRESSURE_OK);
  CHECK(live_of(a) == 2 * MiB);
  CHECK(live_of(d1) == 6 * MiB);
  rt.dead[0] = p0;
  rt.bytes[0] = 2 * MiB;
  rt.dead[1] = p1;
  rt.bytes[1] = 6 * MiB;
  CHECK_ST(gcpressure_collect(a, 0), GCPRESSURE_OK);
  CHECK(rt.minors == 1);
  CHECK(live_of(a) == 0);
  CHECK(live_of(d1) == 0);

  char json[8192];
  CHECK_ST(gcpressure_stats_json(d1, json, sizeof json, NULL), GCPRESSURE_OK);
  CHECK(strstr(json, "\"device\":1,") != NULL);
  CHECK(strstr(json, "\"policy_devices\":2") != NULL);
  CHECK(strstr(json, "\"reclaimed_bytes\":6291456") != NULL); /* device 1's own share */
  CHECK_ST(gcpressure_stats_json(a, json, sizeof json, NULL), GCPRESSURE_OK);
  CHECK(strstr(json, "\"reclaimed_bytes\":2097152") != NULL);

  CHECK_ST(gcpressure_set_limits(d1, 0, 4 * MiB), GCPRESSURE_OK); /* device 1 only */
  CHECK_ST(gcpressure_stats_json(d1, json, sizeof json, NULL), GCPRESSURE_OK);
  CHECK(strstr(json, "\"hard_limit\":4194304") != NULL);
  CHECK_ST(gcpressure_stats_json(a, json, sizeof json, NULL), GCPRESSURE_OK);
  CHECK(strstr(json, "\"hard_limit\":134217728") != NULL);
  CHECK_ST(gcpressure_alloc(a, 8 * MiB, NULL, &p0), GCPRESSURE_OK);
  CHECK_ST(gcpressure_free(a, p0, 8 * MiB, NULL), GCPRESSURE_OK);
  CHECK_ST(gcpressure_free(d1, p0, 8 * MiB, NULL), GCPRESSURE_ERR_MISUSE); /* not device 1's block */

  CHECK_ST(gcpressure_destroy(d1), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("gcpressure_create returned");
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
  CHECK_ST(gcpressure_alloc(d1, 1, NULL, &p1), GCPRESSURE_ERR_SHUTDOWN);
  CHECK_ST(gcpressure_device_count(d1, &n), GCPRESSURE_ERR_SHUTDOWN);
}

static void test_bad_device_lists(void) {
  gcpressure_options o = two_devices(GCPRESSURE_COLLECTOR_CALLBACKS);
  gcpressure_allocator* a = NULL;
  o.devices = "0,0";
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_INVALID);
  CHECK_ERR_HAS("options.devices");
  o.devices = "0,x";
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_ERR_INVALID);
  CHECK(a == NULL);
  /* An API version 2 caller's struct ends before `devices`: never read. */
  o.devices = (const char*)1; /* would crash if read */
  o.struct_size = offsetof(gcpressure_options, devices);
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
  size_t n = 0;
  CHECK_ST(gcpressure_device_count(a, &n), GCPRESSURE_OK);
  CHECK(n == 1);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

/* Boehm: buffers on device 1 are found by the one collector and return to
 * device 1. */
static void drop_buffers(gcpressure_allocator* d, int n) {
  for (int i = 0; i < n; ++i) {
    gcpressure_buffer* b = NULL;
    CHECK_ST(gcpressure_boehm_alloc(d, 1 * MiB, NULL, &b), GCPRESSURE_OK);
  }
}

static void test_boehm_group(void) {
  CHECK_ST(gcpressure_boehm_init(1, 1), GCPRESSURE_OK);
  gcpressure_options o = two_devices(GCPRESSURE_COLLECTOR_BOEHM);
  o.hard_limit = "32MiB";
  gcpressure_allocator *a = NULL, *d1 = NULL;
  CHECK_ST(gcpressure_create(&o, &a), GCPRESSURE_OK);
  CHECK_ST(gcpressure_device_allocator(a, 1, &d1), GCPRESSURE_OK);
  drop_buffers(d1, 200); /* 6x device 1's hard limit: its own pressure collects */
  char json[8192];
  CHECK_ST(gcpressure_stats_json(d1, json, sizeof json, NULL), GCPRESSURE_OK);
  CHECK(strstr(json, "\"ooms\":0,") != NULL);
  CHECK(live_of(a) == 0);
  size_t live = live_of(d1);
  for (int i = 0; i < 3 && live > 0; ++i) { /* a stale stack word may hold one handle for a while */
    CHECK_ST(gcpressure_collect(a, 1), GCPRESSURE_OK);
    CHECK_ST(gcpressure_drain(d1), GCPRESSURE_OK);
    live = live_of(d1);
  }
  CHECK(live <= 1 * MiB);
  CHECK_ST(gcpressure_destroy(a), GCPRESSURE_OK);
}

int main(void) {
  test_callbacks_group();
  test_bad_device_lists();
  test_boehm_group();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
