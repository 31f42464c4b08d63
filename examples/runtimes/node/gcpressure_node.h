// gcpressure_node.h — shared declarations of the Node.js addon
// (gcpressure_node.cc: heap, collector, errors; node_array.cc: device arrays
// and the forward loop's compute). See README.md.
#pragma once

#define NAPI_EXPERIMENTAL  // Note [Finalizers run inside V8's collection]
#include <node_api.h>

#include <cstddef>
#include <cstdint>

#include "gcpressure/gcpressure.h"

namespace gcp_node {

// One gcpressure allocator and the JS functions that collect V8's heap. Owned
// by its JS Heap object and by every live array made from it (refs_): the
// struct outlives all of them, the allocator is destroyed at close() or when
// the Heap object is collected (Note [Closing a heap]).
struct heap {
  gcpressure_allocator* a_ = nullptr;
  napi_env env_ = nullptr;
  napi_ref minor_fn_ = nullptr;  // gc({type: 'minor'}): a scavenge
  napi_ref full_fn_ = nullptr;   // gc(): a blocking mark-compact
  bool closed_ = false;
  bool native_ = false;      // runtime_native: napi_adjust_external_memory per array
  bool collector_ = false;   // a collector is registered
  int refs_ = 1;             // the Heap object + live arrays (JS thread only)
  int64_t external_ = 0;     // bytes reported with napi_adjust_external_memory, now
  uint64_t callback_errors_ = 0;
};

// A device array: n float32 elements on the heap's device.
struct array {
  heap* h_ = nullptr;
  gcpressure_allocator* a_ = nullptr;
  void* ptr_ = nullptr;  // nullptr once freed (explicitly or by the finalizer)
  size_t bytes_ = 0;
  size_t n_ = 0;
};

extern const napi_type_tag k_heap_tag;
extern const napi_type_tag k_array_tag;

// Records the C API's failure as a JS Error, for js_entry to return and
// gcpressure.js to throw (Note [Errors]); returns nullptr.
napi_value throw_status(napi_env env, const char* what, gcpressure_status st);
// What a JS entry point returns: the failure recorded by throw_* (or a JS
// exception pending) as an Error value, else `result` (Note [Failures are
// returned; JS throws them]). Every function the addon exports is js_entry<F>.
napi_value take_failure(napi_env env, napi_value result);
template <napi_callback F>
napi_value js_entry(napi_env env, napi_callback_info info) {
  return take_failure(env, F(env, info));
}
// Record a TypeError / RangeError with `msg` (as throw_status); return nullptr.
napi_value throw_type(napi_env env, const char* msg);
napi_value throw_range(napi_env env, const char* msg);
// Binding-side misuse (double free, use after free) and use after close().
napi_value throw_misuse(napi_env env, const char* msg);
napi_value throw_shutdown(napi_env env, const char* msg);
// argv[i] as a non-negative integer that fits size_t (throws otherwise).
bool get_size(napi_env env, napi_value v, const char* what, size_t* out);
// The heap / array behind `v` (type-tagged; throws TypeError otherwise).
heap* unwrap_heap(napi_env env, napi_value v);
// The native object behind a value tagged `tag` (records TypeError `not_it` otherwise).
void* unwrap_tagged(napi_env env, napi_value v, const napi_type_tag& tag, const char* not_it);
array* unwrap_array(napi_env env, napi_value v, bool must_be_live = true);
void heap_unref(heap* h);

// node_array.cc
napi_status define_array_class(napi_env env, napi_value exports);
// A new array of n floats on h (records the failure, returns nullptr).
napi_value new_array(napi_env env, heap* h, size_t n);
napi_value heap_matmul(napi_env env, napi_callback_info info);
napi_value heap_bias_relu(napi_env env, napi_callback_info info);

}  // namespace gcp_node
