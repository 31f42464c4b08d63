/* lua_collector.c — Lua's collector as the gcpressure collector of the Lua
 * module's heaps (see gcpressure_lua.c for the module).
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
 * never calls lua_gc (Lua forbids it; lua_gc returns -1 there); an array's
 * never allocates, a counting sentinel's allocates one table (allowed: no GC
 * step runs inside a finalizer, lgc.c GCTM). The C API answers
 * GCPRESSURE_ERR_BUSY to collection requests made from inside a collection
 * and never nests collections itself.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "gcpressure_lua.h"

double lgcp_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
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

/* Note [Counting Lua's own collections]
 * Lua 5.4 has no collection counter and no hook, so the module counts
 * completed cycles with sentinels: an unreachable table with a __gc that
 * counts and re-arms itself (makes a new unreachable sentinel). Lua calls
 * it once per completed cycle, young or whole-heap, its own or ours:
 *   cycles: exact in generational mode (every young collection and every
 *     major one calls pending finalizers before it returns, lgc.c
 *     finishgencycle); in incremental mode finalizers run in later steps,
 *     so a cycle is counted up to a few steps late (a lower bound at any
 *     instant, exact once the state is between cycles).
 *   majors (whole-heap): incremental mode: every cycle is whole-heap, so
 *     majors = cycles. Generational mode: an *old* unreachable sentinel is
 *     reclaimed only by a major collection. The old sentinel is anchored in
 *     the registry until it has survived two cycles (then it is old) and
 *     released at the next library call; a major collection inside that
 *     window is missed: a lower bound.
 *   ours vs. Lua's own: cycles counted while one of this state's collector
 *     callbacks runs (run_gc) are the policy's; the rest are Lua's own. In
 *     incremental mode a cycle the policy finished may be counted after the
 *     callback returned (finalizers run later): own is then an upper bound.
 *   seconds: Lua gives no way to time its own collections (they run inside
 *     allocations, no hook): reported as 0, marked not exact.
 * The counts belong to the Lua state (one collector), not to one heap. */
typedef struct gc_counts {
  unsigned long long cycles, majors;      /* all completed cycles seen */
  unsigned long long cycles_in_callbacks; /* ... while one of our callbacks ran */
  unsigned long long majors_in_callbacks;
  unsigned long long old_anchored_at;     /* cycles when the old sentinel was made; 0: not anchored */
  int callbacks_running;                  /* of any heap of this state */
} gc_counts;

#define COUNTS_KEY "gcpressure.gc_counts"
#define OLD_SENTINEL_KEY "gcpressure.old_sentinel"

static gc_counts* state_counts(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, COUNTS_KEY);
  gc_counts* c = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return c;
}

static void make_sentinel(lua_State* L, lua_CFunction gc, int anchored);

static int young_sentinel_gc(lua_State* L) {
  gc_counts* c = lua_touserdata(L, lua_upvalueindex(1));
  ++c->cycles;
  if (c->callbacks_running) ++c->cycles_in_callbacks;
  make_sentinel(L, young_sentinel_gc, 0);
  return 0;
}

static int old_sentinel_gc(lua_State* L) {
  gc_counts* c = lua_touserdata(L, lua_upvalueindex(1));
  ++c->majors;
  if (c->callbacks_running) ++c->majors_in_callbacks;
  make_sentinel(L, old_sentinel_gc, 1);
  return 0;
}

/* A new sentinel table whose __gc is `gc` (the counts as its upvalue);
 * anchored: kept in the registry until it is old (release_old_sentinel). */
static void make_sentinel(lua_State* L, lua_CFunction gc, int anchored) {
  if (!lua_checkstack(L, 4)) return; /* a count lost, never an error inside __gc */
  lua_getfield(L, LUA_REGISTRYINDEX, COUNTS_KEY);
  gc_counts* c = lua_touserdata(L, -1);
  lua_newtable(L);                   /* the sentinel */
  lua_createtable(L, 0, 1);          /* its metatable */
  lua_pushvalue(L, -3);
  lua_pushcclosure(L, gc, 1);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  if (anchored && c) {
    c->old_anchored_at = c->cycles + 1; /* +1: 0 means "not anchored" */
    lua_setfield(L, LUA_REGISTRYINDEX, OLD_SENTINEL_KEY);
  } else {
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* Lets the old sentinel go once it survived two cycles (it is old then). */
void lgcp_release_old_sentinel(lua_State* L) {
  gc_counts* c = state_counts(L);
  if (!c || !c->old_anchored_at || c->cycles + 1 < c->old_anchored_at + 2) return;
  c->old_anchored_at = 0;
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, OLD_SENTINEL_KEY);
}

void lgcp_install_counters(lua_State* L, heap* h) {
  h->counts = state_counts(L);
  if (h->counts) return;
  gc_counts* c = lua_newuserdatauv(L, sizeof *c, 0); /* the registry keeps it for the state's life */
  memset(c, 0, sizeof *c);
  lua_setfield(L, LUA_REGISTRYINDEX, COUNTS_KEY);
  make_sentinel(L, young_sentinel_gc, 0);
  make_sentinel(L, old_sentinel_gc, 1);
  h->counts = c;
}

/* Lua's own cycles and whole-heap cycles (Note [Counting Lua's own collections]). */
static void counts_of(const gc_counts* c, int mode, unsigned long long* n, unsigned long long* whole) {
  *n = c ? c->cycles - c->cycles_in_callbacks : 0;
  *whole = !c ? 0 : mode == INC_MODE ? *n : c->majors - c->majors_in_callbacks;
}

void lgcp_own_counts(lua_State* L, int mode, unsigned long long* n, unsigned long long* whole) {
  counts_of(state_counts(L), mode, n, whole);
}

/* The C API's own_collections callback. It runs on the thread calling into
 * the allocator (a Lua state is single-threaded) and only reads counters.
 * Counts: Note [Counting Lua's own collections]; seconds: none known (0, not exact). */
static void cb_own_collections(void* ctx, uint64_t* n, uint64_t* full, double* seconds, int* exact) {
  const heap* h = ctx;
  unsigned long long own = 0, own_full = 0;
  counts_of(h->counts, h->mode, &own, &own_full);
  *n = own;
  *full = own_full;
  *seconds = 0;
  *exact = 0;
}

unsigned long long lgcp_all_cycles(lua_State* L) {
  gc_counts* c = state_counts(L);
  return c ? c->cycles : 0;
}

/* Note [Lua's own mechanism: LUA_GCSTEP by the allocation's KiB]
 * Under --policy runtime_native (the library asks for no collection) each
 * allocation of n bytes calls lua_gc(L, LUA_GCSTEP, ceil(n / 1024)) first:
 * the idiom for memory Lua does not see. Lua 5.4's lapi.c adds that many
 * KiB to the collector's debt and runs luaC_checkGC, so the block counts as
 * if Lua had allocated it (manual §4.6 "LUA_GCSTEP: performs an incremental
 * step of garbage collection, corresponding to the allocation of stepsize
 * Kbytes"): a young collection when the debt crosses the generational
 * mode's minor multiplier (20% of the heap), an incremental step otherwise.
 * Lua never learns about frees: the debt only grows. The collections it
 * runs are Lua's own (counted as the runtime's, not in a callback), and its
 * finalizers give blocks back before the allocation drains the queue. */
void lgcp_native_step(lua_State* L, size_t bytes) {
  const size_t kb = (bytes + 1023) / 1024;
  if (!lua_checkstack(L, 4)) return;
  lua_pushcfunction(L, protected_gc);
  lua_pushinteger(L, LUA_GCSTEP);
  lua_pushinteger(L, kb > INT32_MAX ? INT32_MAX : (lua_Integer)kb);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) lua_pop(L, 1); /* a memory error in a finalizer's set-up */
  else lua_pop(L, 1);
}

static int gc_in_callback(heap* h, int what, int data) {
  gc_counts* c = h->L ? state_counts(h->L) : NULL;
  if (c) ++c->callbacks_running;
  const int r = run_gc(h, what, data);
  if (c) --c->callbacks_running;
  return r;
}

static void cb_minor(void* ctx) {
  heap* h = ctx;
  ++h->minor_calls;
  const int r = gc_in_callback(h, LUA_GCSTEP, 0);
  h->at_pause = r == 1;
}

static void cb_full(void* ctx) {
  heap* h = ctx;
  ++h->full_calls;
  h->at_pause = gc_in_callback(h, LUA_GCCOLLECT, 0) >= 0;
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
  const double t0 = lgcp_now();
  for (;;) {
    ++h->step_calls;
    const int r = gc_in_callback(h, LUA_GCSTEP, 0);
    h->at_pause = r == 1;
    if (r < 0) { /* no collection possible here: report done rather than spin */
      h->full_phase = 0;
      return 1;
    }
    if (r == 1 && ++h->full_phase >= 2) {
      h->full_phase = 0;
      return 1;
    }
    if (lgcp_now() - t0 >= budget_seconds) return 0;
  }
}

static size_t cb_heap_bytes(void* ctx) {
  heap* h = ctx;
  if (!h->L) return 0;
  const int kb = lua_gc(h->L, LUA_GCCOUNT, 0);
  const int b = lua_gc(h->L, LUA_GCCOUNTB, 0);
  return kb < 0 || b < 0 ? 0 : (size_t)kb * 1024 + (size_t)b;
}
/* Lua's collector mode is a property of the whole state. */
void lgcp_set_gc_mode(lua_State* L, int mode, lua_Number step_kb) {
  if (mode == GEN_MODE) {
    lua_gc(L, LUA_GCGEN, 0, 0);
    return;
  }
  int log2_step = 0; /* 0: Lua's step size unchanged */
  if (step_kb > 0) {
    log2_step = 10;
    while (log2_step < 40 && (double)((uint64_t)1 << log2_step) < step_kb * 1024) ++log2_step;
  }
  lua_gc(L, LUA_GCINC, 0, 0, log2_step);
}

void lgcp_register_collector(lua_State* L, heap* h) {
  gcpressure_collector_callbacks cb;
  gcpressure_collector_callbacks_init(&cb);
  cb.context = h;
  cb.minor = cb_minor;
  cb.full = cb_full;
  cb.heap_bytes = cb_heap_bytes;
  cb.own_collections = cb_own_collections;
  if (h->mode == INC_MODE) {
    cb.start_full = cb_start_full;
    cb.step_full = cb_step_full;
  }
  const gcpressure_status st = gcpressure_set_collector(h->a, &cb);
  if (st != GCPRESSURE_OK) lgcp_fail(L, "new (set_collector)", st);
}

