/* shutdown_capi_helper.c — the C API at shutdown, from a plain C program as a
 * runtime would use it (issue 6, "Shutdown"; run by test_shutdown.cpp).
 *
 * Usage: gcpressure_shutdown_capi_helper capi-after-destroy
 * main creates a Boehm-collected allocator, allocates raw blocks and GC-owned
 * buffers and returns. An atexit handler then (after main):
 *  - destroys the allocator with all of them live: the raw blocks are a
 *    documented leak, reported on stderr, never a free; the buffers' blocks
 *    are freed (Note [Blocks still allocated at shutdown]);
 *  - writes the raw blocks (still the caller's memory: ASan proves no
 *    use-after-free);
 *  - checks that every call on the destroyed allocator returns
 *    GCPRESSURE_ERR_SHUTDOWN and buffer_data returns GCPRESSURE_ERR_MISUSE;
 *  - drops the handles and collects: their finalizers run for an allocator
 *    that is gone and must do nothing.
 * Exit status 0; 3 with a message when a check fails. */
#define GC_THREADS 1
#include <gc/gc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gcpressure/gcpressure.h"

#define N_HANDLES 64
#define N_RAW 8

static gcpressure_buffer* volatile g_handles[N_HANDLES]; /* GC roots */
static gcpressure_allocator* g_a;
static void* g_raw[N_RAW];
static int g_ready;

static void fail(const char* what) {
  fprintf(stderr, "shutdown_capi_helper: FAILED: %s (last error: %s)\n", what, gcpressure_last_error());
  fflush(stderr);
  _exit(3);
}

static void __attribute__((noinline)) clear_stack(void) {
  volatile char buf[64 * 1024];
  memset((char*)buf, 0, sizeof buf);
}

static void __attribute__((noinline)) drop_and_collect(void) {
  for (int i = 0; i < N_HANDLES; ++i) g_handles[i] = NULL;
  clear_stack();
  GC_gcollect();
  GC_invoke_finalizers();
}

static void after_main(void) {
  if (!g_ready) return;
  if (gcpressure_destroy(g_a) != GCPRESSURE_OK) fail("destroy");
  for (int i = 0; i < N_RAW; ++i) memset(g_raw[i], 0x5A, 4096);
  void* p = NULL;
  size_t live = 0;
  if (gcpressure_alloc(g_a, 64, NULL, &p) != GCPRESSURE_ERR_SHUTDOWN) fail("alloc after destroy");
  if (gcpressure_free(g_a, g_raw[0], 4096, NULL) != GCPRESSURE_ERR_SHUTDOWN) fail("free after destroy");
  if (gcpressure_usage(g_a, &live, NULL) != GCPRESSURE_ERR_SHUTDOWN) fail("usage after destroy");
  if (gcpressure_drain(g_a) != GCPRESSURE_ERR_SHUTDOWN) fail("drain after destroy");
  if (gcpressure_trim(g_a) != GCPRESSURE_ERR_SHUTDOWN) fail("trim after destroy");
  if (gcpressure_collect(g_a, 1) != GCPRESSURE_ERR_SHUTDOWN) fail("collect after destroy");
  if (gcpressure_release_from_finalizer(g_a, g_raw[1], 4096, NULL) != GCPRESSURE_ERR_SHUTDOWN)
    fail("release_from_finalizer after destroy");
  if (gcpressure_buffer_unsafe_free(g_a, (gcpressure_buffer*)g_handles[0]) != GCPRESSURE_ERR_SHUTDOWN)
    fail("unsafe_free after destroy");
  void* d = (void*)1;
  if (gcpressure_buffer_data((gcpressure_buffer*)g_handles[1], &d) != GCPRESSURE_ERR_MISUSE || d != NULL)
    fail("buffer_data after destroy");
  if (gcpressure_destroy(g_a) != GCPRESSURE_ERR_SHUTDOWN) fail("second destroy");
  drop_and_collect();
  printf("capi-after-destroy: all calls after destroy refused; handles collected after main\n");
  fflush(stdout);
}

static void __attribute__((noinline)) fill(void) {
  for (int i = 0; i < N_HANDLES; ++i) {
    gcpressure_buffer* b = NULL;
    if (gcpressure_boehm_alloc(g_a, 256 * 1024, NULL, &b) != GCPRESSURE_OK) fail("boehm_alloc");
    g_handles[i] = b;
  }
  for (int i = 0; i < N_RAW; ++i)
    if (gcpressure_alloc(g_a, 4096, NULL, &g_raw[i]) != GCPRESSURE_OK) fail("alloc");
  clear_stack();
}

int main(int argc, char** argv) {
  if (argc != 2 || strcmp(argv[1], "capi-after-destroy") != 0) {
    fprintf(stderr, "usage: %s capi-after-destroy\n", argv[0]);
    return 2;
  }
  atexit(after_main);
  if (gcpressure_boehm_init(1, 1) != GCPRESSURE_OK) fail("boehm_init");
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.host_capacity = (size_t)1 << 30;
  o.hard_limit = "256MiB";
  o.collector = GCPRESSURE_COLLECTOR_BOEHM;
  if (gcpressure_create(&o, &g_a) != GCPRESSURE_OK) fail("create");
  fill();
  g_ready = 1;
  return 0;
}
