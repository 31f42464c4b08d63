/* tests/install/c_consumer.c — a plain C program against the installed C API
 * (pkg-config gcpressure, and gcpressure::gcpressure through find_package):
 * GC-owned device buffers on this process's bdwgc, dropped without a free,
 * bounded by a hard limit. Exits nonzero with a message on any failure. */
#include <gcpressure/gcpressure.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    gcpressure_status st_ = (call);                                                     \
    if (st_ != GCPRESSURE_OK) {                                                         \
      fprintf(stderr, "c_consumer: %s failed: %s (%s)\n", #call, gcpressure_status_string(st_), \
              gcpressure_last_error());                                                 \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

/* 200 MiB through a 32 MiB limit: only collections make room. In its own
 * function so that no handle stays in main's frame, which bdwgc scans
 * conservatively: a handle still there is reachable, a genuine leak at destroy. */
static int run(gcpressure_allocator* a, size_t* peak) {
  const size_t mib = (size_t)1 << 20;
  size_t live = 0, reserved = 0;
  int i;
  for (i = 0; i < 200; ++i) {
    gcpressure_buffer* b = NULL;
    void* d = NULL;
    CHECK(gcpressure_boehm_alloc(a, mib, NULL, &b));
    CHECK(gcpressure_buffer_data(b, &d));
    if (!d || gcpressure_buffer_size(b) != mib) {
      fprintf(stderr, "c_consumer: bad buffer\n");
      return 1;
    }
    CHECK(gcpressure_iteration(a));
    CHECK(gcpressure_usage(a, &live, &reserved));
    if (reserved > *peak) *peak = reserved;
  }
  return 0;
}

int main(void) {
  const size_t mib = (size_t)1 << 20;
  gcpressure_options o;
  gcpressure_allocator* a = NULL;
  size_t peak = 0;
  CHECK(gcpressure_boehm_init(0, 1)); /* no incremental mode; finalizers on gcpressure's thread */
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.hard_limit = "32MiB";
  o.collector = GCPRESSURE_COLLECTOR_BOEHM;
  CHECK(gcpressure_create(&o, &a));
  if (run(a, &peak) != 0) return 1;
  if (peak > 32 * mib) {
    fprintf(stderr, "c_consumer: reserved %zu bytes, above the 32 MiB hard limit\n", peak);
    return 1;
  }
  CHECK(gcpressure_collect(a, 1)); /* collect, finalize, drain: nothing is live at destroy */
  CHECK(gcpressure_destroy(a));
  printf("c_consumer: gcpressure %s, 200 MiB allocated, peak reserved %zu MiB\n", gcpressure_version(), peak / mib);
  return 0;
}
