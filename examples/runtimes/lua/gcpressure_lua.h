/* gcpressure_lua.h — what the Lua module's two files share: the heap and
 * array userdata and the helpers that raise the module's errors.
 * gcpressure_lua.c: the module, heaps, collector callbacks;
 * lua_array.c: array methods and the compute kernels. Internal: the module
 * is built with hidden visibility, only luaopen_gcpressure is exported. */
#ifndef GCPRESSURE_LUA_H
#define GCPRESSURE_LUA_H

#include <stddef.h>

#include <lauxlib.h>
#include <lua.h>

#include "gcpressure/gcpressure.h"

#define HEAP_MT "gcpressure.heap"
#define ARRAY_MT "gcpressure.array"
#define ERROR_MT "gcpressure.error"

#define GEN_MODE 0
#define INC_MODE 1

struct gc_counts; /* lua_collector.c */

typedef struct heap {
  gcpressure_allocator* a;
  struct gc_counts* counts; /* the state's collection counts (Note [Counting Lua's own collections]) */
  lua_State* L; /* the thread running a library call that may collect (Note [Lua collector callbacks]) */
  int mode;     /* GEN_MODE or INC_MODE */
  int on_device; /* CUDA backend: device memory is not addressable from the CPU */
  int closed;
  int full_phase; /* incremental whole-heap cycle: ends of cycle seen since start_full */
  int at_pause;   /* our last lua_gc call left Lua between cycles (as far as we know) */
  int native;     /* runtime_native: LUA_GCSTEP by each allocation's KiB (lua_collector.c) */
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

/* Raises the module's error value for a failed library call: a table
 * {kind, status, message} with metatable ERROR_MT (tostring gives message).
 * kind: "out_of_memory", "invalid", "misuse", "shutdown", "cuda",
 * "unsupported", "busy", "internal". Never returns. */
int lgcp_fail(lua_State* L, const char* what, gcpressure_status st);
heap* lgcp_check_heap(lua_State* L, int i);
array* lgcp_check_array(lua_State* L, int i);
/* A new array userdata of n floats / bytes allocated from h (heap at index 1). */
int lgcp_new_array(lua_State* L, heap* h, size_t n, size_t bytes);
void lgcp_fill_floats(array* a, float v);

/* Marks `L` as the thread the callbacks run on while `h` may collect. */
#define WITH_THREAD(h, L, stmt) \
  do {                          \
    lua_State* prev_ = (h)->L;  \
    (h)->L = (L);               \
    stmt;                       \
    (h)->L = prev_;             \
  } while (0)

/* lua_collector.c */
double lgcp_now(void); /* monotonic seconds */
/* Registers Lua's collector as h's callbacks (raises on failure). */
void lgcp_register_collector(lua_State* L, heap* h);
/* Note [Lua's own mechanism: LUA_GCSTEP by the allocation's KiB]. */
void lgcp_native_step(lua_State* L, size_t bytes);
/* Switches the whole state's collector to GEN_MODE or INC_MODE (step in KiB; 0: Lua's). */
void lgcp_set_gc_mode(lua_State* L, int mode, lua_Number step_kb);
/* Note [Counting Lua's own collections]: the sentinels (idempotent), their
 * upkeep after each library call, and the counts. */
void lgcp_install_counters(lua_State* L, heap* h);
void lgcp_release_old_sentinel(lua_State* L);
void lgcp_own_counts(lua_State* L, int mode, unsigned long long* n, unsigned long long* whole);
unsigned long long lgcp_all_cycles(lua_State* L);

/* lua_array.c */
int lgcp_heap_matmul(lua_State* L);
int lgcp_heap_bias_relu(lua_State* L);
int lgcp_array_gc(lua_State* L);
int lgcp_array_len(lua_State* L);
int lgcp_array_tostring(lua_State* L);
extern const luaL_Reg lgcp_array_methods[];

#endif /* GCPRESSURE_LUA_H */
