/* lua_array.c — the Lua module's device arrays: their methods and the
 * forward loop's compute (see gcpressure_lua.c, Note [Lua arrays]). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gcpressure_lua.h"

#ifdef GCPRESSURE_LUA_CUDA
#include <cuda_runtime_api.h>
#endif

/* --- compute ------------------------------------------------------------
 * Host backend: CPU loops on the (host-addressable) device pointer. CUDA
 * backend: the memory traffic is the same, the arithmetic is replaced by a
 * cudaMemsetAsync on the default stream (this module has no kernels). */

void lgcp_fill_floats(array* a, float v) {
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
  array* a = lgcp_check_array(L, 1);
  lgcp_fill_floats(a, (float)luaL_checknumber(L, 2));
  lua_settop(L, 1);
  return 1;
}

/* a:fill_random(seed, scale) -> a : uniform in [-scale, scale) */
static int array_fill_random(lua_State* L) {
  array* a = lgcp_check_array(L, 1);
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
  array* a = lgcp_check_array(L, 1);
  const lua_Integer i = luaL_checkinteger(L, 2);
  luaL_argcheck(L, i >= 1 && (size_t)i <= a->n, 2, "index out of range");
  float v;
  read_floats(a, (size_t)(i - 1), 1, &v);
  lua_pushnumber(L, v);
  return 1;
}

/* a:set(i, v), 1-based */
static int array_set(lua_State* L) {
  array* a = lgcp_check_array(L, 1);
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
  array* a = lgcp_check_array(L, 1);
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
int lgcp_heap_matmul(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  array* w = lgcp_check_array(L, 2);
  array* x = lgcp_check_array(L, 3);
  const lua_Integer m = luaL_checkinteger(L, 4), k = luaL_checkinteger(L, 5), n = luaL_checkinteger(L, 6);
  luaL_argcheck(L, m > 0 && k > 0 && n > 0, 4, "dimensions must be positive");
  luaL_argcheck(L, w->n >= (size_t)(m * k), 2, "W is smaller than m x k");
  luaL_argcheck(L, x->n >= (size_t)(k * n), 3, "X is smaller than k x n");
  lgcp_new_array(L, h, (size_t)(m * n), (size_t)(m * n) * sizeof(float));
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
int lgcp_heap_bias_relu(lua_State* L) {
  heap* h = lgcp_check_heap(L, 1);
  array* t = lgcp_check_array(L, 2);
  array* b = lgcp_check_array(L, 3);
  const lua_Integer m = luaL_checkinteger(L, 4), n = luaL_checkinteger(L, 5);
  luaL_argcheck(L, m > 0 && n > 0, 4, "dimensions must be positive");
  luaL_argcheck(L, t->n >= (size_t)(m * n), 2, "T is smaller than m x n");
  luaL_argcheck(L, b->n >= (size_t)m, 3, "b is shorter than m");
  lgcp_new_array(L, h, (size_t)(m * n), (size_t)(m * n) * sizeof(float));
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
int lgcp_array_gc(lua_State* L) {
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
  if (st != GCPRESSURE_OK) return lgcp_fail(L, "free", st);
  return 0;
}

int lgcp_array_len(lua_State* L) {
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

int lgcp_array_tostring(lua_State* L) {
  array* a = luaL_checkudata(L, 1, ARRAY_MT);
  if (a->ptr) lua_pushfstring(L, "gcpressure.array (%I floats, %p)", (lua_Integer)a->n, a->ptr);
  else lua_pushstring(L, "gcpressure.array (freed)");
  return 1;
}

const luaL_Reg lgcp_array_methods[] = {
    {"fill", array_fill},       {"fill_random", array_fill_random}, {"get", array_get},
    {"set", array_set},         {"sum", array_sum},                 {"free", array_free},
    {"bytes", array_bytes},     {"is_live", array_is_live},         {NULL, NULL},
};
