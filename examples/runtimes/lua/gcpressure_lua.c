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
 * Lua's collector as callbacks: lua_collector.c, Note [Lua collector callbacks].
 *
 * Note [Lua error values]
 * A failed library call raises a table {kind, status, message} with the
 * metatable "gcpressure.error" (tostring gives the message), so a caller
 * tells out-of-memory from other failures by `err.kind == "out_of_memory"`
 * instead of matching text. Misuse of the module itself (bad arguments,
 * use after free or close) stays a plain Lua error string, as luaL_error
 * makes it.
 *
 * Note [Options and the environment]
 * gcpressure.new{...} only sets the options the table names; every other
 * field keeps gcpressure_options_init's "unset" value, which gcpressure_create
 * fills from the GCPRESSURE_* environment, then from the library's defaults.
 * So the environment is the default layer and explicit options override it.
 * An option key the module does not know is an error naming it (a misspelt
 * key would otherwise be silently ignored).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gcpressure_lua.h"

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


/* --- errors -------------------------------------------------------------- */

static const char* status_kind(gcpressure_status st) {
  switch (st) {
    case GCPRESSURE_ERR_OOM: return "out_of_memory";
    case GCPRESSURE_ERR_INVALID: return "invalid";
    case GCPRESSURE_ERR_MISUSE: return "misuse";
    case GCPRESSURE_ERR_SHUTDOWN: return "shutdown";
    case GCPRESSURE_ERR_CUDA: return "cuda";
    case GCPRESSURE_ERR_UNSUPPORTED: return "unsupported";
    case GCPRESSURE_ERR_BUSY: return "busy";
    default: return "internal";
  }
}

/* Note [Lua error values] */
int lgcp_fail(lua_State* L, const char* what, gcpressure_status st) {
  /* The library's message first: its pointer lasts until the next gcpressure
   * call. Its own "gcpressure: " is dropped: the message says it once. */
  const char* msg = gcpressure_last_error();
  lua_pushstring(L, strncmp(msg, "gcpressure: ", 12) == 0 ? msg + 12 : msg);
  lua_createtable(L, 0, 3);
  lua_pushfstring(L, "gcpressure: %s: %s: %s", what, gcpressure_status_string(st), lua_tostring(L, -2));
  lua_setfield(L, -2, "message");
  lua_pushstring(L, status_kind(st));
  lua_setfield(L, -2, "kind");
  lua_pushstring(L, gcpressure_status_string(st));
  lua_setfield(L, -2, "status");
  luaL_setmetatable(L, ERROR_MT);
  return lua_error(L);
}

static int error_tostring(lua_State* L) {
  lua_getfield(L, 1, "message");
  return 1;
}

heap* lgcp_check_heap(lua_State* L, int i) {
  heap* h = luaL_checkudata(L, i, HEAP_MT);
  if (h->closed) luaL_error(L, "gcpressure: the heap is closed");
  return h;
}

array* lgcp_check_array(lua_State* L, int i) {
  array* a = luaL_checkudata(L, i, ARRAY_MT);
  if (!a->ptr) luaL_error(L, "gcpressure: array used after free");
  if (a->h->closed) luaL_error(L, "gcpressure: array used after its heap was closed");
  return a;
}

/* --- options --------------------------------------------------------------- */

/* An option's value as the options table reads it: a string as is, a number
 * in decimal (integers without a fraction), a boolean as 1 or 0; NULL when
 * absent. */
static const char* text_opt(lua_State* L, int t, const char* key, char* buf, size_t cap) {
  const char* r = NULL;
  lua_getfield(L, t, key);
  if (lua_isinteger(L, -1)) {
    snprintf(buf, cap, "%lld", (long long)lua_tointeger(L, -1));
    r = buf;
  } else if (lua_type(L, -1) == LUA_TNUMBER) {
    snprintf(buf, cap, "%.17g", lua_tonumber(L, -1));
    r = buf;
  } else if (lua_type(L, -1) == LUA_TSTRING) {
    snprintf(buf, cap, "%s", lua_tostring(L, -1));
    r = buf;
  } else if (lua_type(L, -1) == LUA_TBOOLEAN) {
    snprintf(buf, cap, "%d", lua_toboolean(L, -1));
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
  if (st != GCPRESSURE_ERR_TRUNCATED) return lgcp_fail(L, "stats", st);
  luaL_Buffer b;
  char* buf = luaL_buffinitsize(L, &b, need);
  st = gcpressure_stats_json(h->a, buf, need, &need);
  if (st != GCPRESSURE_OK) return lgcp_fail(L, "stats", st);
  luaL_pushresultsize(&b, strlen(buf));
  return 1;
}


/* Note [Options and the environment]: every key of `t` must be one of these:
 * the library's options (gcpressure_option_names) and this module's own. */
static const char* const module_options[] = {"gc_mode", "step_kb", "read_env", "collector", NULL};

static int is_library_option(const char* k) {
  for (const char* const* n = gcpressure_option_names(); *n; ++n)
    if (strcmp(*n, k) == 0) return 1;
  return 0;
}

static void check_option_keys(lua_State* L, int t) {
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "gcpressure.new: option keys must be strings (got a %s)", luaL_typename(L, -1));
    const char* k = lua_tostring(L, -1);
    int known = is_library_option(k);
    for (const char* const* o = module_options; *o && !known; ++o) known = strcmp(*o, k) == 0;
    if (!known) {
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (const char* const* n = gcpressure_option_names(); *n; ++n) {
        luaL_addstring(&b, *n);
        luaL_addstring(&b, ", ");
      }
      luaL_addstring(&b, "gc_mode, step_kb, read_env, collector");
      luaL_pushresult(&b);
      luaL_error(L, "gcpressure.new: unknown option '%s' (known: %s)", k, lua_tostring(L, -1));
    }
  }
}

static int has_opt(lua_State* L, int t, const char* key) {
  const int present = lua_getfield(L, t, key) != LUA_TNIL;
  lua_pop(L, 1);
  return present;
}

/* The options struct from the table at t; only the options it names are
 * set (Note [Options and the environment]), each through the library's
 * options table (gcpressure_options_set): its parser and its message, the
 * ones its GCPRESSURE_* variable gets. */
static void read_options(lua_State* L, int t, gcpressure_options* o) {
  gcpressure_options_init(o);
  check_option_keys(L, t);
  for (const char* const* n = gcpressure_option_names(); *n; ++n) {
    char buf[256];
    const char* v = text_opt(L, t, *n, buf, sizeof buf);
    if (!v) continue;
    const gcpressure_status st = gcpressure_options_set(o, *n, v);
    if (st != GCPRESSURE_OK) lgcp_fail(L, "new", st);
  }
  if (has_opt(L, t, "read_env")) o->read_env = bool_opt(L, t, "read_env", 0);
}

/* --- gcpressure.new ----------------------------------------------------- */

static int l_new(lua_State* L) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  gcpressure_options o;
  read_options(L, 1, &o);
  char mode_buf[32];
  const char* mode = string_opt(L, 1, "gc_mode", "generational", mode_buf, sizeof mode_buf);
  int gc_mode;
  if (strcmp(mode, "generational") == 0) gc_mode = GEN_MODE;
  else if (strcmp(mode, "incremental") == 0) gc_mode = INC_MODE;
  else return luaL_error(L, "gcpressure.new: gc_mode must be generational or incremental (got '%s')", mode);
  const lua_Number step_kb = number_opt(L, 1, "step_kb", 0);
  if (step_kb < 0 || step_kb > 1 << 20) return luaL_error(L, "gcpressure.new: step_kb out of range");
  const int with_collector = bool_opt(L, 1, "collector", 1);

  heap* h = lua_newuserdatauv(L, sizeof *h, 0);
  memset(h, 0, sizeof *h);
  h->closed = 1; /* until the allocator exists */
  h->mode = gc_mode;
  luaL_setmetatable(L, HEAP_MT);

  run_pending_destroys();
  gcpressure_status st = gcpressure_create(&o, &h->a);
  /* UNSUPPORTED: CUDA asked for where there is none; callers may test err.kind */
  if (st != GCPRESSURE_OK) return lgcp_fail(L, "new", st);
  h->closed = 0;
  lgcp_install_counters(L, h);
  lgcp_set_gc_mode(L, gc_mode, step_kb);
  if (with_collector) lgcp_register_collector(L, h);

  size_t need = 0;
  gcpressure_stats_json(h->a, NULL, 0, &need);
  char* json = malloc(need ? need : 1);
  if (json && gcpressure_stats_json(h->a, json, need, NULL) == GCPRESSURE_OK) {
    json_string_field(json, "backend", h->backend, sizeof h->backend);
    json_string_field(json, "policy", h->policy, sizeof h->policy);
  }
  free(json);
  if (!with_collector) snprintf(h->policy, sizeof h->policy, "none");
  h->native = strcmp(h->policy, "runtime_native") == 0;
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
    if (st != GCPRESSURE_OK) return lgcp_fail(L, "close", st);
  }
  h->closed = 1;
  return 0;
}

/* After a call that may have collected: deferred work of this module, then
 * the call's status (raised on failure; 0 otherwise). */
static int after_call(lua_State* L, gcpressure_status st, const char* what) {
  run_pending_destroys();
  lgcp_release_old_sentinel(L);
  return st == GCPRESSURE_OK ? 0 : lgcp_fail(L, what, st);
}

int lgcp_new_array(lua_State* L, heap* h, size_t n, size_t bytes) {
  array* arr = lua_newuserdatauv(L, sizeof *arr, 1);
  memset(arr, 0, sizeof *arr);
  luaL_setmetatable(L, ARRAY_MT);
  lua_pushvalue(L, 1); /* the heap outlives its arrays */
  lua_setiuservalue(L, -2, 1);
  void* p = NULL;
  gcpressure_status st;
  if (h->native) lgcp_native_step(L, bytes);
  WITH_THREAD(h, L, st = gcpressure_alloc(h->a, bytes, NULL, &p));
  after_call(L, st, "alloc");
  arr->ptr = p;
  arr->bytes = bytes;
  arr->n = n;
  arr->a = h->a;
  arr->h = h;
  arr->on_device = h->on_device;
  return 1;
}

/* No array may exceed 2^48 bytes (256 TiB, beyond any device): a larger
 * request is a mistake, said as "too large", not sent to the allocator. */
#define MAX_ARRAY_BYTES ((lua_Unsigned)1 << 48)

/* A positive count of `unit`-byte elements at argument i. */
static size_t count_arg(lua_State* L, int i, size_t unit) {
  lua_Integer n;
  if (lua_isinteger(L, i)) {
    n = lua_tointeger(L, i);
  } else {
    const lua_Number x = luaL_checknumber(L, i);
    if (x >= 0x1p62) luaL_argerror(L, i, "too large (at most 2^48 bytes)");
    if (x != floor(x)) luaL_argerror(L, i, "must be an integer");
    n = (lua_Integer)x;
  }
  if (n <= 0) luaL_argerror(L, i, unit == 1 ? "size must be positive" : "length must be positive");
  if ((lua_Unsigned)n > MAX_ARRAY_BYTES / unit) luaL_argerror(L, i, "too large (at most 2^48 bytes)");
  return (size_t)n;
}

/* heap:array(n [, value]) — n floats (uninitialised unless value is given) */
static int heap_array(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  const size_t n = count_arg(L, 2, sizeof(float));
  const int fill = !lua_isnoneornil(L, 3);
  const float v = fill ? (float)luaL_checknumber(L, 3) : 0.0f;
  lua_settop(L, 2);
  lgcp_new_array(L, h, n, n * sizeof(float));
  if (fill) lgcp_fill_floats(lua_touserdata(L, -1), v);
  return 1;
}

/* heap:alloc(nbytes) — raw bytes (length nbytes / 4 floats) */
static int heap_alloc(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  const size_t n = count_arg(L, 2, 1);
  return lgcp_new_array(L, h, n / sizeof(float), n);
}

static int heap_simple(lua_State* L, gcpressure_status (*fn)(gcpressure_allocator*), const char* what) {
  heap* h = lgcp_check_heap(L, 1);
  gcpressure_status st;
  WITH_THREAD(h, L, st = fn(h->a));
  return after_call(L, st, what);
}

static int heap_iteration(lua_State* L) { return heap_simple(L, gcpressure_iteration, "iteration"); }
static int heap_drain(lua_State* L) { return heap_simple(L, gcpressure_drain, "drain"); }
static int heap_trim(lua_State* L) { return heap_simple(L, gcpressure_trim, "trim"); }

/* heap:quiet_moment([will_block]): a hint; will_block = the host is about to
 * wait for the device (when the wait cannot go through heap:synchronize). */
static int heap_quiet_moment(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  gcpressure_status st;
  WITH_THREAD(h, L, st = gcpressure_quiet_moment_ex(h->a, lua_toboolean(L, 2)));
  return after_call(L, st, "quiet_moment");
}

/* heap:synchronize([stream]): waits for the work queued on `stream` (nil:
 * the default stream; a light userdata or an integer address: a
 * cudaStream_t) and lets the policy collect while that work runs. */
static int heap_synchronize(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  void* stream = NULL;
  if (lua_type(L, 2) == LUA_TLIGHTUSERDATA) stream = lua_touserdata(L, 2);
  else if (!lua_isnoneornil(L, 2)) stream = (void*)(uintptr_t)luaL_checkinteger(L, 2);
  gcpressure_status st;
  WITH_THREAD(h, L, st = gcpressure_synchronize(h->a, stream));
  return after_call(L, st, "synchronize");
}

/* heap:collect([full]) */
static int heap_collect(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  gcpressure_status st;
  WITH_THREAD(h, L, st = gcpressure_collect(h->a, lua_toboolean(L, 2)));
  return after_call(L, st, "collect");
}

static int heap_stats(lua_State* L) { return push_stats(L, lgcp_check_heap(L, 1)); }

/* heap:usage() -> live, reserved */
static int heap_usage(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  size_t live = 0, reserved = 0;
  gcpressure_status st = gcpressure_usage(h->a, &live, &reserved);
  if (st != GCPRESSURE_OK) return lgcp_fail(L, "usage", st);
  lua_pushinteger(L, (lua_Integer)live);
  lua_pushinteger(L, (lua_Integer)reserved);
  return 2;
}

/* A limit argument of heap:set_limits: bytes (0 or nil: unchanged) or a
 * size string read as gcpressure.new reads its limits ("64MiB", "64 MB",
 * "50%" of the device) by the library's parser, gcpressure_parse_size. */
static size_t limit_arg(lua_State* L, heap* h, int i) {
  if (lua_type(L, i) != LUA_TSTRING) {
    const lua_Integer b = luaL_optinteger(L, i, 0);
    luaL_argcheck(L, b >= 0, i, "negative");
    return (size_t)b;
  }
  push_stats(L, h); /* the device's total, for a percentage */
  const char* total = strstr(lua_tostring(L, -1), "\"device_total\":");
  const size_t device_total = total ? (size_t)strtoull(total + 15, NULL, 10) : 0;
  lua_pop(L, 1);
  size_t bytes = 0;
  const gcpressure_status st = gcpressure_parse_size(lua_tostring(L, i), device_total, &bytes);
  if (st != GCPRESSURE_OK) lgcp_fail(L, "set_limits", st);
  return bytes;
}

/* heap:set_limits(soft, hard): bytes or size strings (limit_arg); 0 or nil
 * leaves one unchanged */
static int heap_set_limits(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  const size_t soft = limit_arg(L, h, 2), hard = limit_arg(L, h, 3);
  gcpressure_status st = gcpressure_set_limits(h->a, soft, hard);
  if (st != GCPRESSURE_OK) return lgcp_fail(L, "set_limits", st);
  return 0;
}

static void set_int(lua_State* L, const char* key, unsigned long long v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, key);
}

/* heap:info() -> {backend, policy, gc_mode, on_device, minor_calls, full_calls,
 * step_calls, gc_errors, lua_collections, lua_full_collections} (the last two:
 * Lua's own cycles, Note [Counting Lua's own collections]) */
static int heap_info(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  lgcp_release_old_sentinel(L);
  lua_createtable(L, 0, 10);
  lua_pushstring(L, h->backend);
  lua_setfield(L, -2, "backend");
  lua_pushstring(L, h->policy);
  lua_setfield(L, -2, "policy");
  lua_pushstring(L, h->mode == GEN_MODE ? "generational" : "incremental");
  lua_setfield(L, -2, "gc_mode");
  lua_pushboolean(L, h->on_device);
  lua_setfield(L, -2, "on_device");
  set_int(L, "minor_calls", h->minor_calls);
  set_int(L, "full_calls", h->full_calls);
  set_int(L, "step_calls", h->step_calls);
  set_int(L, "gc_errors", h->gc_errors);
  unsigned long long own = 0, own_full = 0;
  lgcp_own_counts(L, h->mode, &own, &own_full);
  set_int(L, "lua_collections", own);
  set_int(L, "lua_full_collections", own_full);
  set_int(L, "lua_cycles_all", lgcp_all_cycles(L));
  return 1;
}

static int heap_tostring(lua_State* L) {
  heap* h = luaL_checkudata(L, 1, HEAP_MT);
  if (h->closed) lua_pushstring(L, "gcpressure.heap (closed)");
  else lua_pushfstring(L, "gcpressure.heap (%s, %s, %s GC)", h->backend, h->policy,
                       h->mode == GEN_MODE ? "generational" : "incremental");
  return 1;
}

/* --- module ------------------------------------------------------------- */

static int l_now(lua_State* L) {
  lua_pushnumber(L, lgcp_now());
  return 1;
}

static int l_version(lua_State* L) {
  lua_pushstring(L, gcpressure_version());
  return 1;
}

static const luaL_Reg heap_methods[] = {
    {"array", heap_array},
    {"alloc", heap_alloc},
    {"matmul", lgcp_heap_matmul},
    {"bias_relu", lgcp_heap_bias_relu},
    {"iteration", heap_iteration},
    {"quiet_moment", heap_quiet_moment},
    {"synchronize", heap_synchronize},
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

static const luaL_Reg functions[] = {
    {"new", l_new},
    {"now", l_now},
    {"version", l_version},
    {NULL, NULL},
};

/* A metatable `name` with __index = methods (if any) and the given metamethods. */
static void new_metatable(lua_State* L, const char* name, const luaL_Reg* methods, const luaL_Reg* meta) {
  if (luaL_newmetatable(L, name)) {
    if (methods) {
      lua_newtable(L);
      luaL_setfuncs(L, methods, 0);
      lua_setfield(L, -2, "__index");
    }
    luaL_setfuncs(L, meta, 0);
  }
  lua_pop(L, 1);
}

__attribute__((visibility("default"))) int luaopen_gcpressure(lua_State* L) {
  static const luaL_Reg heap_meta[] = {
      {"__gc", heap_gc}, {"__close", heap_close}, {"__tostring", heap_tostring}, {NULL, NULL}};
  static const luaL_Reg array_meta[] = {
      {"__gc", lgcp_array_gc}, {"__len", lgcp_array_len}, {"__tostring", lgcp_array_tostring}, {NULL, NULL}};
  static const luaL_Reg error_meta[] = {{"__tostring", error_tostring}, {NULL, NULL}};
  new_metatable(L, HEAP_MT, heap_methods, heap_meta);
  new_metatable(L, ARRAY_MT, lgcp_array_methods, array_meta);
  new_metatable(L, ERROR_MT, NULL, error_meta);
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

