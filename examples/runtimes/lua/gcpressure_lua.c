/* gcpressure_lua.c — Lua 5.4 module `gcpressure`: device arrays owned by Lua's
 * garbage collector, whose device bytes drive that collector.
 *
 *   local gcpressure = require "gcpressure"
 *   local heap = gcpressure.new{backend = "host", hard_limit = "64MiB", policy = "pressure"}
 *   local a = heap:array(1024)            -- 1024 floats of device memory
 *   a = nil                               -- garbage: __gc gives the block back
 *
 * Note [Lua arrays]
 * A device array is a full userdata {device pointer, bytes, allocator} with a
 * __gc metamethod that calls gcpressure_release_from_finalizer (a lock-free
 * push; nothing else is allowed in a __gc). Its user value is the heap, so the
 * heap outlives its arrays; and the allocator handle outlives even the heap
 * (gcpressure_destroy leaves a tombstone), so a __gc that runs at lua_close
 * after the heap's own is harmless.
 *
 * Note [Lua collector callbacks]
 * The policy's collections run inside gcpressure_alloc / iteration / collect,
 * which only this module's C functions call, on the thread (coroutine) that
 * called them: that thread is recorded in the heap (h->L) for the duration of
 * the call, and the callbacks run lua_gc on it:
 *   generational mode (default): minor = lua_gc(L, LUA_GCSTEP, 0), which in
 *     generational mode performs one young collection (Lua 5.4 manual §2.5.2;
 *     lgc.c genstep); full = lua_gc(L, LUA_GCCOLLECT) (a major collection).
 *   incremental mode: minor = lua_gc(L, LUA_GCSTEP, 0), one basic
 *     incremental step of Lua's step size (2^13 bytes' worth of work by
 *     default; new{step_kb = n} sets it to n KiB through LUA_GCINC). Not
 *     LUA_GCSTEP with n > 0: in 5.4 that only adds n KiB to Lua's debt, which
 *     does nothing at all while Lua waits out its pause between cycles. A
 *     whole-heap cycle in slices (start_full/step_full) = basic steps until
 *     Lua reports the end of a cycle (twice when a cycle was under way at the
 *     start: it may have marked today's garbage already); full = LUA_GCCOLLECT.
 *     Lua's incremental mode has no young generation, so every reclamation is
 *     a whole-heap cycle: with a large Lua heap it costs what it costs.
 * Lua runs finalizers inside its collections (young collections and
 * LUA_GCCOLLECT call all pending ones), so there is no run_finalizers callback.
 * lua_gc runs inside lua_pcall: a Lua error (a memory error in a finalizer's
 * call set-up) must never longjmp through the library's C++ frames. A __gc
 * never calls lua_gc (Lua forbids it; lua_gc returns -1 there) and never
 * allocates; the C API answers GCPRESSURE_ERR_BUSY to collection requests
 * made from inside a collection and never nests collections itself.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "gcpressure/gcpressure.h"

#ifdef GCPRESSURE_LUA_CUDA
#include <cuda_runtime_api.h>
#endif

#define HEAP_MT "gcpressure.heap"
#define ARRAY_MT "gcpressure.array"

#define GEN_MODE 0
#define INC_MODE 1

typedef struct heap {
  gcpressure_allocator* a;
  lua_State* L; /* the thread running a library call that may collect (Note [Lua collector callbacks]) */
  int mode;     /* GEN_MODE or INC_MODE */
  int on_device; /* CUDA backend: device memory is not addressable from the CPU */
  int closed;
  int full_phase; /* incremental whole-heap cycle: ends of cycle seen since start_full */
  int at_pause;   /* our last lua_gc call left Lua between cycles (as far as we know) */
  char backend[16];
  char policy[32];
  unsigned long long minor_calls, full_calls, step_calls, gc_errors;
} heap;

typedef struct array {
  void* ptr;
  size_t bytes;
  size_t n; /* floats */
  gcpressure_allocator* a; /* valid even after gcpressure_destroy (a tombstone) */
  heap* h;                 /* valid while the array is: its user value */
  int on_device;
} array;

/* --- time --------------------------------------------------------------- */

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* --- deferred destroys --------------------------------------------------
 * A heap's __gc may run inside a collection (of another heap), where
 * gcpressure_destroy answers BUSY. Such handles wait here for the next call
 * outside one. (One Lua state is single-threaded; states on other threads
 * have their own module instance data only if loaded separately, so guard.) */

#include <pthread.h>
typedef struct pending_destroy {
  gcpressure_allocator* a;
  struct pending_destroy* next;
} pending_destroy;
static pending_destroy* g_pending = NULL;
static pthread_mutex_t g_pending_mu = PTHREAD_MUTEX_INITIALIZER;

static void destroy_or_defer(gcpressure_allocator* a) {
  if (gcpressure_destroy(a) != GCPRESSURE_ERR_BUSY) return;
  pending_destroy* p = malloc(sizeof *p);
  if (!p) return; /* leaked: the allocator stays alive, which is safe */
  p->a = a;
  pthread_mutex_lock(&g_pending_mu);
  p->next = g_pending;
  g_pending = p;
  pthread_mutex_unlock(&g_pending_mu);
}

static void run_pending_destroys(void) {
  if (!g_pending) return; /* racy peek; fine: retried on the next call */
  pthread_mutex_lock(&g_pending_mu);
  pending_destroy* p = g_pending;
  g_pending = NULL;
  pthread_mutex_unlock(&g_pending_mu);
  while (p) {
    pending_destroy* next = p->next;
    destroy_or_defer(p->a);
    free(p);
    p = next;
  }
}

/* --- collector callbacks ------------------------------------------------ */

static int protected_gc(lua_State* L) {
  const int what = (int)lua_tointeger(L, 1);
  const int data = (int)lua_tointeger(L, 2);
  lua_pushinteger(L, lua_gc(L, what, data));
  return 1;
}

/* lua_gc(L, what, data) in protected mode; returns its result, or -1. */
static int run_gc(heap* h, int what, int data) {
  lua_State* L = h->L;
  if (!L || !lua_checkstack(L, 4)) {
    ++h->gc_errors;
    return -1;
  }
  lua_pushcfunction(L, protected_gc);
  lua_pushinteger(L, what);
  lua_pushinteger(L, data);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
    ++h->gc_errors;
    lua_pop(L, 1);
    return -1;
  }
  const int r = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return r;
}

static void cb_minor(void* ctx) {
  heap* h = ctx;
  ++h->minor_calls;
  const int r = run_gc(h, LUA_GCSTEP, 0);
  h->at_pause = r == 1;
}

static void cb_full(void* ctx) {
  heap* h = ctx;
  ++h->full_calls;
  h->at_pause = run_gc(h, LUA_GCCOLLECT, 0) >= 0;
}

/* A whole-heap cycle must start after the request: a cycle under way may
 * already have marked what is garbage now, so it is finished first — unless
 * our last call ended a cycle, the usual case (Lua waits for its heap to grow
 * by its pause, 100% by default, before starting another one). */
static void cb_start_full(void* ctx) {
  heap* h = ctx;
  h->full_phase = h->at_pause ? 1 : 0;
}

static int cb_step_full(void* ctx, double budget_seconds) {
  heap* h = ctx;
  const double t0 = now_seconds();
  for (;;) {
    ++h->step_calls;
    const int r = run_gc(h, LUA_GCSTEP, 0);
    h->at_pause = r == 1;
    if (r < 0) { /* no collection possible here: report done rather than spin */
      h->full_phase = 0;
      return 1;
    }
    if (r == 1 && ++h->full_phase >= 2) {
      h->full_phase = 0;
      return 1;
    }
    if (now_seconds() - t0 >= budget_seconds) return 0;
  }
}

static size_t cb_heap_bytes(void* ctx) {
  heap* h = ctx;
  if (!h->L) return 0;
  const int kb = lua_gc(h->L, LUA_GCCOUNT, 0);
  const int b = lua_gc(h->L, LUA_GCCOUNTB, 0);
  return kb < 0 || b < 0 ? 0 : (size_t)kb * 1024 + (size_t)b;
}

/* Marks `L` as the thread the callbacks run on while `h` may collect. */
#define WITH_THREAD(h, L, stmt)     \
  do {                              \
    lua_State* prev_ = (h)->L;      \
    (h)->L = (L);                   \
    stmt;                           \
    (h)->L = prev_;                 \
  } while (0)

/* --- helpers ------------------------------------------------------------ */

static int fail(lua_State* L, const char* what, gcpressure_status st) {
  return luaL_error(L, "gcpressure: %s: %s: %s", what, gcpressure_status_string(st), gcpressure_last_error());
}

static heap* check_heap(lua_State* L, int i) {
  heap* h = luaL_checkudata(L, i, HEAP_MT);
  if (h->closed) luaL_error(L, "gcpressure: the heap is closed");
  return h;
}

static array* check_array(lua_State* L, int i) {
  array* a = luaL_checkudata(L, i, ARRAY_MT);
  if (!a->ptr) luaL_error(L, "gcpressure: array used after free");
  if (a->h->closed) luaL_error(L, "gcpressure: array used after its heap was closed");
  return a;
}

/* A size option: integer bytes, or a string like "64MiB" / "80%". */
static const char* size_opt(lua_State* L, int t, const char* key, char* buf, size_t cap) {
  const char* r = NULL;
  lua_getfield(L, t, key);
  if (lua_isinteger(L, -1)) {
    snprintf(buf, cap, "%lld", (long long)lua_tointeger(L, -1));
    r = buf;
  } else if (lua_type(L, -1) == LUA_TNUMBER) {
    snprintf(buf, cap, "%.0f", lua_tonumber(L, -1));
    r = buf;
  } else if (lua_type(L, -1) == LUA_TSTRING) {
    snprintf(buf, cap, "%s", lua_tostring(L, -1));
    r = buf;
  } else if (!lua_isnil(L, -1)) {
    luaL_error(L, "gcpressure.new: option '%s' must be a number of bytes or a size string", key);
  }
  lua_pop(L, 1);
  return r;
}

static const char* string_opt(lua_State* L, int t, const char* key, const char* def, char* buf, size_t cap) {
  lua_getfield(L, t, key);
  const char* r = def;
  if (lua_type(L, -1) == LUA_TSTRING) {
    snprintf(buf, cap, "%s", lua_tostring(L, -1));
    r = buf;
  } else if (!lua_isnil(L, -1)) {
    luaL_error(L, "gcpressure.new: option '%s' must be a string", key);
  }
  lua_pop(L, 1);
  return r;
}

static lua_Number number_opt(lua_State* L, int t, const char* key, lua_Number def) {
  lua_getfield(L, t, key);
  lua_Number r = def;
  if (!lua_isnil(L, -1)) r = luaL_checknumber(L, -1);
  lua_pop(L, 1);
  return r;
}

static int bool_opt(lua_State* L, int t, const char* key, int def) {
  lua_getfield(L, t, key);
  int r = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return r;
}

/* "key":"value" from the stats JSON into out. */
static void json_string_field(const char* json, const char* key, char* out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":\"", key);
  const char* p = strstr(json, pat);
  out[0] = '\0';
  if (!p) return;
  p += strlen(pat);
  size_t i = 0;
  while (p[i] && p[i] != '"' && i + 1 < cap) {
    out[i] = p[i];
    ++i;
  }
  out[i] = '\0';
}

static int push_stats(lua_State* L, heap* h) {
  size_t need = 0;
  gcpressure_status st = gcpressure_stats_json(h->a, NULL, 0, &need);
  if (st != GCPRESSURE_ERR_TRUNCATED) return fail(L, "stats", st);
  luaL_Buffer b;
  char* buf = luaL_buffinitsize(L, &b, need);
  st = gcpressure_stats_json(h->a, buf, need, &need);
  if (st != GCPRESSURE_OK) return fail(L, "stats", st);
  luaL_pushresultsize(&b, strlen(buf));
  return 1;
}

/* --- gcpressure.new ----------------------------------------------------- */

static int l_new(lua_State* L) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  char backend_buf[32], hard_buf[64], soft_buf[64], policy_buf[64], mode_buf[32], cap_buf[64];
  const char* backend = string_opt(L, 1, "backend", "auto", backend_buf, sizeof backend_buf);
  const char* hard = size_opt(L, 1, "hard_limit", hard_buf, sizeof hard_buf);
  const char* soft = size_opt(L, 1, "soft_limit", soft_buf, sizeof soft_buf);
  const char* policy = string_opt(L, 1, "policy", NULL, policy_buf, sizeof policy_buf);
  const char* mode = string_opt(L, 1, "gc_mode", "generational", mode_buf, sizeof mode_buf);
  const char* capacity = size_opt(L, 1, "host_capacity", cap_buf, sizeof cap_buf);
  const lua_Number budget = number_opt(L, 1, "gc_budget", 0);
  const lua_Number every_n = number_opt(L, 1, "every_n", 0);
  const lua_Number step_kb = number_opt(L, 1, "step_kb", 0);
  const lua_Number device = number_opt(L, 1, "device", 0);
  const int read_env = bool_opt(L, 1, "read_env", 0);
  const int with_collector = bool_opt(L, 1, "collector", 1);

  gcpressure_options o;
  gcpressure_options_init(&o);
  if (strcmp(backend, "auto") == 0) o.backend = GCPRESSURE_BACKEND_AUTO;
  else if (strcmp(backend, "host") == 0) o.backend = GCPRESSURE_BACKEND_HOST;
  else if (strcmp(backend, "cuda") == 0) o.backend = GCPRESSURE_BACKEND_CUDA;
  else if (strcmp(backend, "cuda_async") == 0) o.backend = GCPRESSURE_BACKEND_CUDA_ASYNC;
  else return luaL_error(L, "gcpressure.new: backend must be auto, host, cuda or cuda_async (got '%s')", backend);
  int gc_mode;
  if (strcmp(mode, "generational") == 0) gc_mode = GEN_MODE;
  else if (strcmp(mode, "incremental") == 0) gc_mode = INC_MODE;
  else return luaL_error(L, "gcpressure.new: gc_mode must be generational or incremental (got '%s')", mode);
  if (capacity) {
    char* end = NULL;
    const unsigned long long c = strtoull(capacity, &end, 10);
    if (!end || *end || c == 0) return luaL_error(L, "gcpressure.new: host_capacity must be a number of bytes");
    o.host_capacity = (size_t)c;
  }
  o.hard_limit = hard;
  o.soft_limit = soft;
  o.policy = policy;
  o.gc_budget = (double)budget;
  o.every_n = (int)every_n;
  o.device = (int)device;
  o.read_env = read_env;
  if (step_kb < 0 || step_kb > 1 << 20) return luaL_error(L, "gcpressure.new: step_kb out of range");

  heap* h = lua_newuserdatauv(L, sizeof *h, 0);
  memset(h, 0, sizeof *h);
  h->closed = 1; /* until the allocator exists */
  h->mode = gc_mode;
  luaL_setmetatable(L, HEAP_MT);

  run_pending_destroys();
  gcpressure_status st = gcpressure_create(&o, &h->a);
  if (st != GCPRESSURE_OK) {
    /* UNSUPPORTED: CUDA asked for where there is none; callers may test for it */
    return luaL_error(L, "gcpressure.new: %s: %s", gcpressure_status_string(st), gcpressure_last_error());
  }
  h->closed = 0;
  if (with_collector) {
    gcpressure_collector_callbacks cb;
    gcpressure_collector_callbacks_init(&cb);
    cb.context = h;
    cb.minor = cb_minor;
    cb.full = cb_full;
    cb.heap_bytes = cb_heap_bytes;
    if (gc_mode == INC_MODE) {
      cb.start_full = cb_start_full;
      cb.step_full = cb_step_full;
    }
    st = gcpressure_set_collector(h->a, &cb);
    if (st != GCPRESSURE_OK) return fail(L, "new (set_collector)", st);
  }
  /* Lua's collector mode is a property of the whole state. */
  if (gc_mode == GEN_MODE) {
    lua_gc(L, LUA_GCGEN, 0, 0);
  } else {
    int log2_step = 0; /* 0: Lua's step size unchanged */
    if (step_kb > 0) {
      log2_step = 10;
      while (log2_step < 40 && (double)((uint64_t)1 << log2_step) < step_kb * 1024) ++log2_step;
    }
    lua_gc(L, LUA_GCINC, 0, 0, log2_step);
  }

  size_t need = 0;
  gcpressure_stats_json(h->a, NULL, 0, &need);
  char* json = malloc(need ? need : 1);
  if (json && gcpressure_stats_json(h->a, json, need, NULL) == GCPRESSURE_OK) {
    json_string_field(json, "backend", h->backend, sizeof h->backend);
    json_string_field(json, "policy", h->policy, sizeof h->policy);
  }
  free(json);
  if (!with_collector) snprintf(h->policy, sizeof h->policy, "none");
  h->on_device = strcmp(h->backend, "host") != 0;
#ifndef GCPRESSURE_LUA_CUDA
  if (h->on_device) return luaL_error(L, "gcpressure.new: backend %s needs the module built with CUDA", h->backend);
#endif
  return 1;
}

/* --- heap methods ------------------------------------------------------- */

static int heap_gc(lua_State* L) {
  heap* h = luaL_checkudata(L, 1, HEAP_MT);
  if (!h->closed && h->a) destroy_or_defer(h->a);
  h->closed = 1;
  return 0;
}

/* heap:close() (also __close): one full collection first, so that dropped
 * arrays give their blocks back, then the allocator goes. Arrays still
 * reachable become unusable (their blocks are a reported leak). */
static int heap_close(lua_State* L) {
  heap* h = luaL_checkudata(L, 1, HEAP_MT);
  if (!h->closed && h->a) {
    if (strcmp(h->policy, "none") != 0) WITH_THREAD(h, L, gcpressure_collect(h->a, 1));
    gcpressure_status st = gcpressure_destroy(h->a);
    if (st != GCPRESSURE_OK) return fail(L, "close", st);
  }
  h->closed = 1;
  return 0;
}

/* heap:array(n [, value]) — n floats (uninitialised unless value is given) */
static int new_array(lua_State* L, heap* h, size_t n, size_t bytes) {
  array* arr = lua_newuserdatauv(L, sizeof *arr, 1);
  memset(arr, 0, sizeof *arr);
  luaL_setmetatable(L, ARRAY_MT);
  lua_pushvalue(L, 1); /* the heap outlives its arrays */
  lua_setiuservalue(L, -2, 1);
  void* p = NULL;
  gcpressure_status st;
  WITH_THREAD(h, L, st = gcpressure_alloc(h->a, bytes, NULL, &p));
  run_pending_destroys();
  if (st != GCPRESSURE_OK) return fail(L, "alloc", st);
  arr->ptr = p;
  arr->bytes = bytes;
  arr->n = n;
  arr->a = h->a;
  arr->h = h;
  arr->on_device = h->on_device;
  return 1;
}

static void fill_floats(array* a, float v);

static int heap_array(lua_State* L) {
  heap* h = check_heap(L, 1);
  const lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n > 0 && (lua_Unsigned)n < ((lua_Unsigned)1 << 46), 2, "length must be positive");
  const int fill = !lua_isnoneornil(L, 3);
  const float v = fill ? (float)luaL_checknumber(L, 3) : 0.0f;
  lua_settop(L, 2);
  new_array(L, h, (size_t)n, (size_t)n * sizeof(float));
  if (fill) fill_floats(lua_touserdata(L, -1), v);
  return 1;
}

/* heap:alloc(nbytes) — raw bytes (length nbytes / 4 floats) */
static int heap_alloc(lua_State* L) {
  heap* h = check_heap(L, 1);
  const lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n > 0, 2, "size must be positive");
  return new_array(L, h, (size_t)n / sizeof(float), (size_t)n);
}

static int heap_simple(lua_State* L, gcpressure_status (*fn)(gcpressure_allocator*), const char* what) {
  heap* h = check_heap(L, 1);
  gcpressure_status st;
  WITH_THREAD(h, L, st = fn(h->a));
  run_pending_destroys();
  if (st != GCPRESSURE_OK) return fail(L, what, st);
  return 0;
}

static int heap_iteration(lua_State* L) { return heap_simple(L, gcpressure_iteration, "iteration"); }
static int heap_quiet_moment(lua_State* L) { return heap_simple(L, gcpressure_quiet_moment, "quiet_moment"); }
static int heap_drain(lua_State* L) { return heap_simple(L, gcpressure_drain, "drain"); }
static int heap_trim(lua_State* L) { return heap_simple(L, gcpressure_trim, "trim"); }

/* heap:collect([full]) */
static int heap_collect(lua_State* L) {
  heap* h = check_heap(L, 1);
  const int full = lua_toboolean(L, 2);
  gcpressure_status st;
  WITH_THREAD(h, L, st = gcpressure_collect(h->a, full));
  run_pending_destroys();
  if (st != GCPRESSURE_OK) return fail(L, "collect", st);
  return 0;
}

static int heap_stats(lua_State* L) { return push_stats(L, check_heap(L, 1)); }

/* heap:usage() -> live, reserved */
static int heap_usage(lua_State* L) {
  heap* h = check_heap(L, 1);
  size_t live = 0, reserved = 0;
  gcpressure_status st = gcpressure_usage(h->a, &live, &reserved);
  if (st != GCPRESSURE_OK) return fail(L, "usage", st);
  lua_pushinteger(L, (lua_Integer)live);
  lua_pushinteger(L, (lua_Integer)reserved);
  return 2;
}

/* heap:set_limits(soft, hard) in bytes; 0 or nil leaves one unchanged */
static int heap_set_limits(lua_State* L) {
  heap* h = check_heap(L, 1);
  const lua_Integer soft = luaL_optinteger(L, 2, 0), hard = luaL_optinteger(L, 3, 0);
  luaL_argcheck(L, soft >= 0, 2, "negative");
  luaL_argcheck(L, hard >= 0, 3, "negative");
  gcpressure_status st = gcpressure_set_limits(h->a, (size_t)soft, (size_t)hard);
  if (st != GCPRESSURE_OK) return fail(L, "set_limits", st);
  return 0;
}

/* heap:info() -> {backend, policy, gc_mode, minor_calls, full_calls, step_calls, gc_errors} */
static int heap_info(lua_State* L) {
  heap* h = check_heap(L, 1);
  lua_createtable(L, 0, 8);
  lua_pushstring(L, h->backend);
  lua_setfield(L, -2, "backend");
  lua_pushstring(L, h->policy);
  lua_setfield(L, -2, "policy");
  lua_pushstring(L, h->mode == GEN_MODE ? "generational" : "incremental");
  lua_setfield(L, -2, "gc_mode");
  lua_pushinteger(L, (lua_Integer)h->minor_calls);
  lua_setfield(L, -2, "minor_calls");
  lua_pushinteger(L, (lua_Integer)h->full_calls);
  lua_setfield(L, -2, "full_calls");
  lua_pushinteger(L, (lua_Integer)h->step_calls);
  lua_setfield(L, -2, "step_calls");
  lua_pushinteger(L, (lua_Integer)h->gc_errors);
  lua_setfield(L, -2, "gc_errors");
  lua_pushboolean(L, h->on_device);
  lua_setfield(L, -2, "on_device");
  return 1;
}

static int heap_tostring(lua_State* L) {
  heap* h = luaL_checkudata(L, 1, HEAP_MT);
  if (h->closed) lua_pushstring(L, "gcpressure.heap (closed)");
  else lua_pushfstring(L, "gcpressure.heap (%s, %s, %s GC)", h->backend, h->policy,
                       h->mode == GEN_MODE ? "generational" : "incremental");
  return 1;
}

/* --- compute ------------------------------------------------------------
 * Host backend: CPU loops on the (host-addressable) device pointer. CUDA
 * backend: the memory traffic is the same, the arithmetic is replaced by a
 * cudaMemsetAsync on the default stream (this module has no kernels). */

static void fill_floats(array* a, float v) {
#ifdef GCPRESSURE_LUA_CUDA
  if (a->on_device) {
    if (v == 0.0f) {
      cudaMemsetAsync(a->ptr, 0, a->bytes, 0);
      return;
    }
    float* tmp = malloc(a->n * sizeof(float));
    if (!tmp) return;
    for (size_t i = 0; i < a->n; ++i) tmp[i] = v;
    cudaMemcpy(a->ptr, tmp, a->n * sizeof(float), cudaMemcpyHostToDevice);
    free(tmp);
    return;
  }
#endif
  float* x = a->ptr;
  for (size_t i = 0; i < a->n; ++i) x[i] = v;
}

static int device_memset(array* a) {
#ifdef GCPRESSURE_LUA_CUDA
  if (a->on_device) {
    cudaMemsetAsync(a->ptr, 0, a->bytes, 0);
    return 1;
  }
#endif
  (void)a;
  return 0;
}

/* a:fill(v) -> a */
static int array_fill(lua_State* L) {
  array* a = check_array(L, 1);
  fill_floats(a, (float)luaL_checknumber(L, 2));
  lua_settop(L, 1);
  return 1;
}

/* a:fill_random(seed, scale) -> a : uniform in [-scale, scale) */
static int array_fill_random(lua_State* L) {
  array* a = check_array(L, 1);
  uint64_t s = (uint64_t)luaL_optinteger(L, 2, 1) * 0x9e3779b97f4a7c15ULL + 1;
  const float scale = (float)luaL_optnumber(L, 3, 1.0);
  float* x = a->on_device ? malloc(a->n * sizeof(float)) : a->ptr;
  if (!x) return luaL_error(L, "gcpressure: out of host memory");
  for (size_t i = 0; i < a->n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x[i] = scale * ((float)(s >> 40) / (float)(1 << 23) - 1.0f);
  }
#ifdef GCPRESSURE_LUA_CUDA
  if (a->on_device) {
    cudaMemcpy(a->ptr, x, a->n * sizeof(float), cudaMemcpyHostToDevice);
    free(x);
  }
#endif
  lua_settop(L, 1);
  return 1;
}

static void read_floats(array* a, size_t first, size_t count, float* out) {
#ifdef GCPRESSURE_LUA_CUDA
  if (a->on_device) {
    cudaMemcpy(out, (float*)a->ptr + first, count * sizeof(float), cudaMemcpyDeviceToHost);
    return;
  }
#endif
  memcpy(out, (float*)a->ptr + first, count * sizeof(float));
}

/* a:get(i), 1-based */
static int array_get(lua_State* L) {
  array* a = check_array(L, 1);
  const lua_Integer i = luaL_checkinteger(L, 2);
  luaL_argcheck(L, i >= 1 && (size_t)i <= a->n, 2, "index out of range");
  float v;
  read_floats(a, (size_t)(i - 1), 1, &v);
  lua_pushnumber(L, v);
  return 1;
}

/* a:set(i, v), 1-based */
static int array_set(lua_State* L) {
  array* a = check_array(L, 1);
  const lua_Integer i = luaL_checkinteger(L, 2);
  luaL_argcheck(L, i >= 1 && (size_t)i <= a->n, 2, "index out of range");
  const float v = (float)luaL_checknumber(L, 3);
#ifdef GCPRESSURE_LUA_CUDA
  if (a->on_device) {
    cudaMemcpy((float*)a->ptr + (i - 1), &v, sizeof v, cudaMemcpyHostToDevice);
    return 0;
  }
#endif
  ((float*)a->ptr)[i - 1] = v;
  return 0;
}

/* a:sum() */
static int array_sum(lua_State* L) {
  array* a = check_array(L, 1);
  double s = 0;
  float buf[1024];
  for (size_t i = 0; i < a->n; i += 1024) {
    const size_t c = a->n - i < 1024 ? a->n - i : 1024;
    read_floats(a, i, c, buf);
    for (size_t k = 0; k < c; ++k) s += buf[k];
  }
  lua_pushnumber(L, s);
  return 1;
}

/* heap:matmul(W, X, m, k, n) -> Y = W (m x k) * X (k x n), row-major, a new array */
static int heap_matmul(lua_State* L) {
  heap* h = check_heap(L, 1);
  array* w = check_array(L, 2);
  array* x = check_array(L, 3);
  const lua_Integer m = luaL_checkinteger(L, 4), k = luaL_checkinteger(L, 5), n = luaL_checkinteger(L, 6);
  luaL_argcheck(L, m > 0 && k > 0 && n > 0, 4, "dimensions must be positive");
  luaL_argcheck(L, w->n >= (size_t)(m * k), 2, "W is smaller than m x k");
  luaL_argcheck(L, x->n >= (size_t)(k * n), 3, "X is smaller than k x n");
  new_array(L, h, (size_t)(m * n), (size_t)(m * n) * sizeof(float));
  array* y = lua_touserdata(L, -1);
  if (device_memset(y)) return 1;
  const float* W = w->ptr;
  const float* X = x->ptr;
  float* Y = y->ptr;
  for (lua_Integer i = 0; i < m; ++i) {
    float* yi = Y + i * n;
    for (lua_Integer j = 0; j < n; ++j) yi[j] = 0;
    for (lua_Integer p = 0; p < k; ++p) {
      const float wip = W[i * k + p];
      const float* xp = X + p * n;
      for (lua_Integer j = 0; j < n; ++j) yi[j] += wip * xp[j];
    }
  }
  return 1;
}

/* heap:bias_relu(T, b, m, n) -> Y = relu.(T .+ b), T m x n, b of length m, a new array */
static int heap_bias_relu(lua_State* L) {
  heap* h = check_heap(L, 1);
  array* t = check_array(L, 2);
  array* b = check_array(L, 3);
  const lua_Integer m = luaL_checkinteger(L, 4), n = luaL_checkinteger(L, 5);
  luaL_argcheck(L, m > 0 && n > 0, 4, "dimensions must be positive");
  luaL_argcheck(L, t->n >= (size_t)(m * n), 2, "T is smaller than m x n");
  luaL_argcheck(L, b->n >= (size_t)m, 3, "b is shorter than m");
  new_array(L, h, (size_t)(m * n), (size_t)(m * n) * sizeof(float));
  array* y = lua_touserdata(L, -1);
  if (device_memset(y)) return 1;
  const float* T = t->ptr;
  const float* B = b->ptr;
  float* Y = y->ptr;
  for (lua_Integer i = 0; i < m; ++i) {
    const float bi = B[i];
    for (lua_Integer j = 0; j < n; ++j) {
      const float v = T[i * n + j] + bi;
      Y[i * n + j] = v > 0 ? v : 0;
    }
  }
  return 1;
}

/* --- array methods ------------------------------------------------------ */

/* __gc: the only thing a finalizer may do (Note [Lua arrays]) */
static int array_gc(lua_State* L) {
  array* a = luaL_checkudata(L, 1, ARRAY_MT);
  if (a->ptr) gcpressure_release_from_finalizer(a->a, a->ptr, a->bytes, NULL);
  a->ptr = NULL;
  return 0;
}

/* a:free() — frees now (the later __gc does nothing); a second free is an error */
static int array_free(lua_State* L) {
  array* a = luaL_checkudata(L, 1, ARRAY_MT);
  if (!a->ptr) return luaL_error(L, "gcpressure: array freed twice");
  if (a->h->closed) return luaL_error(L, "gcpressure: array freed after its heap was closed");
  gcpressure_status st = gcpressure_free(a->a, a->ptr, a->bytes, NULL);
  a->ptr = NULL;
  if (st != GCPRESSURE_OK) return fail(L, "free", st);
  return 0;
}

static int array_len(lua_State* L) {
  array* a = luaL_checkudata(L, 1, ARRAY_MT);
  lua_pushinteger(L, a->ptr ? (lua_Integer)a->n : 0);
  return 1;
}

static int array_bytes(lua_State* L) {
  array* a = luaL_checkudata(L, 1, ARRAY_MT);
  lua_pushinteger(L, a->ptr ? (lua_Integer)a->bytes : 0);
  return 1;
}

static int array_is_live(lua_State* L) {
  array* a = luaL_checkudata(L, 1, ARRAY_MT);
  lua_pushboolean(L, a->ptr != NULL);
  return 1;
}

static int array_tostring(lua_State* L) {
  array* a = luaL_checkudata(L, 1, ARRAY_MT);
  if (a->ptr) lua_pushfstring(L, "gcpressure.array (%I floats, %p)", (lua_Integer)a->n, a->ptr);
  else lua_pushstring(L, "gcpressure.array (freed)");
  return 1;
}

/* --- module ------------------------------------------------------------- */

static int l_now(lua_State* L) {
  lua_pushnumber(L, now_seconds());
  return 1;
}

static int l_version(lua_State* L) {
  lua_pushstring(L, gcpressure_version());
  return 1;
}

static const luaL_Reg heap_methods[] = {
    {"array", heap_array},
    {"alloc", heap_alloc},
    {"matmul", heap_matmul},
    {"bias_relu", heap_bias_relu},
    {"iteration", heap_iteration},
    {"quiet_moment", heap_quiet_moment},
    {"collect", heap_collect},
    {"drain", heap_drain},
    {"trim", heap_trim},
    {"stats", heap_stats},
    {"usage", heap_usage},
    {"set_limits", heap_set_limits},
    {"info", heap_info},
    {"close", heap_close},
    {NULL, NULL},
};

static const luaL_Reg array_methods[] = {
    {"fill", array_fill},       {"fill_random", array_fill_random}, {"get", array_get},
    {"set", array_set},         {"sum", array_sum},                 {"free", array_free},
    {"bytes", array_bytes},     {"is_live", array_is_live},         {NULL, NULL},
};

static const luaL_Reg functions[] = {
    {"new", l_new},
    {"now", l_now},
    {"version", l_version},
    {NULL, NULL},
};

__attribute__((visibility("default"))) int luaopen_gcpressure(lua_State* L) {
  if (luaL_newmetatable(L, HEAP_MT)) {
    luaL_newlib(L, heap_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, heap_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, heap_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, heap_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, ARRAY_MT)) {
    luaL_newlib(L, array_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, array_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, array_len);
    lua_setfield(L, -2, "__len");
    lua_pushcfunction(L, array_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  luaL_newlib(L, functions);
  lua_pushfstring(L, "gcpressure %s (Lua module)", gcpressure_version());
  lua_setfield(L, -2, "_VERSION");
  lua_pushboolean(L,
#ifdef GCPRESSURE_LUA_CUDA
                  1
#else
                  0
#endif
  );
  lua_setfield(L, -2, "with_cuda");
  return 1;
}
