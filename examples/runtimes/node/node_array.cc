// node_array.cc — the Node addon's device arrays (the DeviceArray class) and
// the forward loop's compute (heap.matmul, heap.biasRelu). See
// gcpressure_node.cc for the heap and the collector.
//
// Note [Finalizers run inside V8's collection]
// Built with NAPI_EXPERIMENTAL, an array's finalizer is a "basic" finalizer
// (node_api_basic_env): Node runs it synchronously inside V8's collection,
// scavenges included, instead of queueing it for the event loop. It may only
// call basic APIs: gcpressure_release_from_finalizer (lock-free, safe inside
// any collection) and napi_adjust_external_memory. So a block is back in the
// queue when gc() returns, and the policy's next drain reuses it; no
// run_finalizers callback is needed. Measured on Node 20.20 (test_module.js,
// "finalizers run inside gc()"): 1000 dropped arrays, all 1000 released by
// one gc({type: 'minor'}) with no event-loop turn. Without NAPI_EXPERIMENTAL
// Node queues finalizers to a SetImmediate: none would run during a
// synchronous JS loop, however many collections the policy asked for, and
// every block would come back only when the loop yields to the event loop.
#include <cmath>
#include <cstring>
#include <string>

#include "gcpressure_node.h"

namespace gcp_node {

namespace {

napi_ref g_array_class = nullptr;
napi_ref g_token = nullptr;  // only new_array may construct a DeviceArray

void array_finalize(node_api_basic_env env, void* data, void*) {
  array* a = static_cast<array*>(data);
  if (a->ptr_) {
    gcpressure_release_from_finalizer(a->a_, a->ptr_, a->bytes_, nullptr);  // SHUTDOWN after close: ignored
    if (a->h_->native_) {
      int64_t adjusted;
      napi_adjust_external_memory(env, -static_cast<int64_t>(a->bytes_), &adjusted);
      a->h_->external_ -= static_cast<int64_t>(a->bytes_);
    }
  }
  heap_unref(a->h_);
  delete a;
}

napi_value array_ctor(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], self, token;
  napi_get_cb_info(env, info, &argc, argv, &self, nullptr);
  bool same = false;
  if (argc == 1 && napi_get_reference_value(env, g_token, &token) == napi_ok) napi_strict_equals(env, argv[0], token, &same);
  if (!same) return throw_type(env, "gcpressure: DeviceArray cannot be constructed directly: use heap.array(n)");
  return self;
}

array* this_array(napi_env env, napi_callback_info info, size_t* argc, napi_value* argv, bool live = true) {
  napi_value self;
  napi_get_cb_info(env, info, argc, argv, &self, nullptr);
  return unwrap_array(env, self, live);
}

// a.free(): returns the block now (the finalizer then does nothing)
napi_value array_free(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  array* a = this_array(env, info, &argc, nullptr, false);
  if (!a) return nullptr;
  if (!a->ptr_) {
    // Not passed to gcpressure_free: the block may already be another array's.
    return throw_misuse(env, "gcpressure: free: misuse: this array was already freed");
  }
  gcpressure_status st = gcpressure_free(a->a_, a->ptr_, a->bytes_, nullptr);
  if (st != GCPRESSURE_OK) return throw_status(env, "free", st);  // e.g. SHUTDOWN after close: still live
  a->ptr_ = nullptr;
  if (a->h_->native_) {
    int64_t adjusted;
    napi_adjust_external_memory(env, -static_cast<int64_t>(a->bytes_), &adjusted);
    a->h_->external_ -= static_cast<int64_t>(a->bytes_);
  }
  return nullptr;
}

napi_value array_is_live(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  array* a = this_array(env, info, &argc, nullptr, false);
  if (!a) return nullptr;
  napi_value v;
  napi_get_boolean(env, a->ptr_ != nullptr, &v);
  return v;
}

napi_value array_length(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  array* a = this_array(env, info, &argc, nullptr, false);
  if (!a) return nullptr;
  napi_value v;
  napi_create_double(env, static_cast<double>(a->n_), &v);
  return v;
}

bool get_number(napi_env env, napi_value v, const char* what, double* out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t != napi_number) return throw_type(env, (std::string("gcpressure: ") + what + " must be a number").c_str()), false;
  napi_get_value_double(env, v, out);
  return true;
}

// The live array `this` of a.fill / a.fillRandom and its N number arguments
// (nullptr, failure recorded, when any is missing or not a number).
template <size_t N>
array* this_array_numbers(napi_env env, napi_callback_info info, const char* what, const char* const (&names)[N],
                          double (&out)[N], napi_value* self) {
  size_t argc = N;
  napi_value argv[N];
  napi_get_cb_info(env, info, &argc, argv, self, nullptr);
  array* a = unwrap_array(env, *self);
  if (!a) return nullptr;
  if (argc < N) return throw_type(env, (std::string("gcpressure: ") + what + ": arguments missing").c_str()), nullptr;
  for (size_t i = 0; i < N; ++i)
    if (!get_number(env, argv[i], names[i], &out[i])) return nullptr;
  return a;
}

// a.fill(v) -> a
napi_value array_fill(napi_env env, napi_callback_info info) {
  static const char* const names[] = {"a.fill(v): v"};
  double v[1];
  napi_value self;
  array* a = this_array_numbers(env, info, "a.fill(v)", names, v, &self);
  if (!a) return nullptr;
  float* x = static_cast<float*>(a->ptr_);
  for (size_t i = 0; i < a->n_; ++i) x[i] = static_cast<float>(v[0]);
  return self;
}

// a.fillRandom(seed, scale) -> a: uniform in [-scale, scale) (xorshift, as the Lua module)
napi_value array_fill_random(napi_env env, napi_callback_info info) {
  static const char* const names[] = {"a.fillRandom: seed", "a.fillRandom: scale"};
  double v[2];
  napi_value self;
  array* a = this_array_numbers(env, info, "a.fillRandom(seed, scale)", names, v, &self);
  if (!a) return nullptr;
  const double seed = v[0], scale = v[1];
  uint64_t s = static_cast<uint64_t>(seed) * 0x9e3779b97f4a7c15ULL + 1;
  float* x = static_cast<float*>(a->ptr_);
  for (size_t i = 0; i < a->n_; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x[i] = static_cast<float>(scale) * (static_cast<float>(s >> 40) / static_cast<float>(1 << 23) - 1.0f);
  }
  return self;
}

napi_value array_sum(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  array* a = this_array(env, info, &argc, nullptr);
  if (!a) return nullptr;
  double s = 0;
  const float* x = static_cast<const float*>(a->ptr_);
  for (size_t i = 0; i < a->n_; ++i) s += x[i];
  napi_value v;
  napi_create_double(env, s, &v);
  return v;
}

// Column-major y(d x n) = W(d x d) * x(d x n): for each column of y, the
// columns of W scaled by that column of x (the compiler vectorises the inner loop).
void sgemm(const float* __restrict W, const float* __restrict x, float* __restrict y, size_t d, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    float* __restrict yj = y + d * j;
    std::memset(yj, 0, d * sizeof(float));
    for (size_t k = 0; k < d; ++k) {
      const float xk = x[d * j + k];
      const float* __restrict wk = W + d * k;
      for (size_t i = 0; i < d; ++i) yj[i] += wk[i] * xk;
    }
  }
}

// The operands of matmul / biasRelu: heap, two live arrays, two dimensions.
struct operands {
  heap* h;
  array* p;
  array* q;
  size_t d, n;
};

bool get_operands(napi_env env, napi_callback_info info, const char* what, operands* o) {
  size_t argc = 4;
  napi_value argv[4], self;
  napi_get_cb_info(env, info, &argc, argv, &self, nullptr);
  if (!(o->h = unwrap_heap(env, self))) return false;
  if (argc < 4) return throw_type(env, (std::string("gcpressure: ") + what + ": 4 arguments").c_str()), false;
  if (!(o->p = unwrap_array(env, argv[0])) || !(o->q = unwrap_array(env, argv[1]))) return false;
  if (!get_size(env, argv[2], "d", &o->d) || !get_size(env, argv[3], "n", &o->n)) return false;
  if (o->d == 0 || o->n == 0 || o->d > (1u << 20) || o->n > (1u << 30))
    return throw_range(env, (std::string("gcpressure: ") + what + ": dimensions must be in 1..2^20 (d), 1..2^30 (n)")
                                .c_str()),
           false;
  if (o->p->h_ != o->h || o->q->h_ != o->h)
    return throw_range(env, (std::string("gcpressure: ") + what + ": arrays of another heap").c_str()), false;
  return true;
}

}  // namespace

array* unwrap_array(napi_env env, napi_value v, bool must_be_live) {
  array* a = static_cast<array*>(unwrap_tagged(env, v, k_array_tag, "gcpressure: not a DeviceArray"));
  if (!a) return nullptr;
  if (must_be_live && !a->ptr_) {
    return throw_misuse(env, "gcpressure: misuse: array used after free"), nullptr;
  }
  if (must_be_live && a->h_->closed_) {
    return throw_shutdown(env, "gcpressure: use after destroy: array used after heap.close()"), nullptr;
  }
  return a;
}

napi_value new_array(napi_env env, heap* h, size_t n) {
  if (n > SIZE_MAX / sizeof(float)) return throw_range(env, "gcpressure: heap.array(n): n * 4 bytes overflows");
  const size_t bytes = n * sizeof(float);
  void* p = nullptr;
  gcpressure_status st = gcpressure_alloc(h->a_, bytes, nullptr, &p);
  if (st != GCPRESSURE_OK) return throw_status(env, "alloc", st);
  napi_value cls, token, obj;
  if (napi_get_reference_value(env, g_array_class, &cls) != napi_ok ||
      napi_get_reference_value(env, g_token, &token) != napi_ok || napi_new_instance(env, cls, 1, &token, &obj) != napi_ok) {
    gcpressure_free(h->a_, p, bytes, nullptr);
    return nullptr;  // an exception is pending
  }
  array* a = new array;
  a->h_ = h;
  a->a_ = h->a_;
  a->ptr_ = p;
  a->bytes_ = bytes;
  a->n_ = n;
  ++h->refs_;
  napi_wrap(env, obj, a, array_finalize, nullptr, nullptr);
  napi_type_tag_object(env, obj, &k_array_tag);
  if (h->native_) {
    // Note [The runtime's own mechanism]: V8 is told, nothing else happens.
    int64_t adjusted;
    napi_adjust_external_memory(env, static_cast<int64_t>(bytes), &adjusted);
    h->external_ += static_cast<int64_t>(bytes);
  }
  return obj;
}

// heap.matmul(W, x, d, n) -> y = W (d x d) * x (d x n), column-major, a new array
napi_value heap_matmul(napi_env env, napi_callback_info info) {
  operands o;
  if (!get_operands(env, info, "heap.matmul(W, x, d, n)", &o)) return nullptr;
  if (o.p->n_ < o.d * o.d || o.q->n_ < o.d * o.n)
    return throw_range(env, "gcpressure: heap.matmul: W is smaller than d x d or x smaller than d x n");
  napi_value y = new_array(env, o.h, o.d * o.n);
  if (!y) return nullptr;
  array* ya;
  napi_unwrap(env, y, reinterpret_cast<void**>(&ya));
  // W and x are still live: new_array's collection cannot free what JS holds.
  sgemm(static_cast<const float*>(o.p->ptr_), static_cast<const float*>(o.q->ptr_), static_cast<float*>(ya->ptr_), o.d,
        o.n);
  return y;
}

// heap.biasRelu(t, b, d, n) -> y = relu.(t .+ b), t d x n, b of length d, a new array
napi_value heap_bias_relu(napi_env env, napi_callback_info info) {
  operands o;
  if (!get_operands(env, info, "heap.biasRelu(t, b, d, n)", &o)) return nullptr;
  if (o.p->n_ < o.d * o.n || o.q->n_ < o.d)
    return throw_range(env, "gcpressure: heap.biasRelu: t is smaller than d x n or b shorter than d");
  napi_value y = new_array(env, o.h, o.d * o.n);
  if (!y) return nullptr;
  array* ya;
  napi_unwrap(env, y, reinterpret_cast<void**>(&ya));
  const float* t = static_cast<const float*>(o.p->ptr_);
  const float* b = static_cast<const float*>(o.q->ptr_);
  float* out = static_cast<float*>(ya->ptr_);
  for (size_t j = 0; j < o.n; ++j)
    for (size_t i = 0; i < o.d; ++i) {
      const float v = t[o.d * j + i] + b[i];
      out[o.d * j + i] = v > 0.f ? v : 0.f;
    }
  return y;
}

napi_status define_array_class(napi_env env, napi_value exports) {
  const napi_property_descriptor props[] = {
      {"free", nullptr, js_entry<array_free>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"isLive", nullptr, js_entry<array_is_live>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"fill", nullptr, js_entry<array_fill>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"fillRandom", nullptr, js_entry<array_fill_random>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"sum", nullptr, js_entry<array_sum>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"length", nullptr, nullptr, js_entry<array_length>, nullptr, nullptr, napi_configurable, nullptr},
  };
  napi_value cls, token;
  napi_status s = napi_define_class(env, "DeviceArray", NAPI_AUTO_LENGTH, js_entry<array_ctor>, nullptr,
                                    sizeof props / sizeof props[0], props, &cls);
  if (s != napi_ok) return s;
  napi_create_object(env, &token);
  napi_create_reference(env, cls, 1, &g_array_class);
  napi_create_reference(env, token, 1, &g_token);
  return napi_set_named_property(env, exports, "DeviceArray", cls);
}

}  // namespace gcp_node
