// gcpressure_node.cc — the Node.js (V8) addon over gcpressure's C API: the
// Heap class, V8 as the collector, errors. Arrays and compute: node_array.cc.
// The JS face is gcpressure.js; README.md has the design and its measurements.
//
// Note [V8 as the collector]
// The policy's minor is a V8 scavenge, its full a blocking mark-compact: the
// callbacks call the JS functions gc({type: 'minor'}) and gc() that
// gcpressure.js hands to the Heap constructor (V8's --expose-gc function:
// `node --expose-gc`, or, when the flag was not given, turned on at run time
// with v8.setFlagsFromString('--expose-gc') and taken from a new context).
// The flag costs nothing until gc is called; each call is a forced
// synchronous collection (scavenge: O(young generation); full: the whole
// heap, what V8 would do at its own limit). Collections only start inside
// gcpressure calls made from JS on the isolate's thread (alloc, iteration,
// synchronize, collect), so the callbacks always run where calling JS is
// allowed. No start_full/step_full: V8's incremental marking cannot be driven
// in slices from outside, so the policy uses blocking fulls.
//
// V8's own collections (scavenges on its young-generation fill, marking on
// its heap limit or on external memory) are counted through GC prologue and
// epilogue callbacks (V8's C++ API, the only use of it here besides heap
// statistics): exact counts, and prologue-to-epilogue time, a lower bound for
// incremental mark-compacts (their marking steps run between allocations).
#include "gcpressure_node.h"

#include <v8.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <string>

namespace gcp_node {

const napi_type_tag k_heap_tag = {0x6763707265737375ULL, 0x6e6f646568656170ULL};
const napi_type_tag k_array_tag = {0x6763707265737375ULL, 0x6e6f646561727279ULL};

namespace {

// Note [Failures are returned; JS throws them]
// No addon function calls napi_throw. An N-API function that throws leaves
// the exception in the env's last_exception until the call returns to JS,
// where Node rethrows it with v8::Isolate::ThrowException, which allocates
// the exception's message object. A scavenge there runs the arrays' basic
// finalizers inside the collection (Note [Finalizers run inside V8's
// collection]) through node_napi_env__::CallFinalizer, which, seeing the
// still-set last_exception, reports it as uncaught
// (node::errors::TriggerUncaughtException) and so calls JS inside the GC:
// V8's fatal check AllowJavascriptExecution::IsAllowed, SIGTRAP. Measured on
// Node 20.20: 3 of 3 runs of OOMs thrown while dropped arrays await
// finalization (test_module.js, "OOMs thrown while V8 finalizes arrays");
// the crash of node_forward_loop_unmanaged once under ctest -j2. So a failing
// function records its Error in g_failure and returns; the entry wrapper
// returns that Error as the call's value (JS-side nothing else returns an
// Error) and gcpressure.js throws it from JS, where no napi exception is
// pending. An exception raised by JS during a call (none is expected: the
// options are copied to plain data properties first) is taken the same way.
napi_ref g_failure = nullptr;

napi_value throw_with(napi_env env, napi_status (*make)(napi_env, napi_value, napi_value, napi_value*),
                      gcpressure_status st, const char* code_text, const char* msg) {
  napi_value code, text, err, num;
  napi_create_string_utf8(env, code_text, NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text);
  make(env, code, text, &err);
  napi_create_int32(env, static_cast<int32_t>(st), &num);
  napi_set_named_property(env, err, "status", num);
  if (g_failure) napi_delete_reference(env, g_failure);
  napi_create_reference(env, err, 1, &g_failure);  // Note [Failures are returned; JS throws them]
  return nullptr;
}

// --- V8's own collections ---------------------------------------------------
std::atomic<uint64_t> g_minor{0}, g_full{0};
std::atomic<double> g_seconds{0};
int g_in_callback = 0;  // > 0 while our minor/full callback runs (JS thread)
std::chrono::steady_clock::time_point g_start;

void gc_prologue(v8::Isolate*, v8::GCType, v8::GCCallbackFlags) { g_start = std::chrono::steady_clock::now(); }

void gc_epilogue(v8::Isolate*, v8::GCType type, v8::GCCallbackFlags) {
  if (g_in_callback) return;  // the policy's own: counted by the library
  const bool minor = type & (v8::kGCTypeScavenge | v8::kGCTypeMinorMarkCompact);
  const bool full = type & v8::kGCTypeMarkSweepCompact;
  if (!minor && !full) return;  // marking steps, weak-callback passes
  (minor ? g_minor : g_full).fetch_add(1, std::memory_order_relaxed);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
  g_seconds.store(g_seconds.load(std::memory_order_relaxed) + s, std::memory_order_relaxed);
}

void own_collections(void*, uint64_t* collections, uint64_t* full, double* seconds, int* exact) {
  const uint64_t f = g_full.load(std::memory_order_relaxed);
  *collections = g_minor.load(std::memory_order_relaxed) + f;
  *full = f;
  *seconds = g_seconds.load(std::memory_order_relaxed);
  *exact = 0;  // incremental marking steps are not timed
}

size_t heap_bytes(void*) {
  v8::Isolate* iso = v8::Isolate::GetCurrent();
  if (!iso) return 0;
  v8::HeapStatistics s;
  iso->GetHeapStatistics(&s);
  return s.used_heap_size();
}

// Calls the heap's minor or full JS function; an exception it throws is
// cleared and counted (a collector callback has no way to report it).
void call_gc(heap* h, napi_ref fn) {
  napi_env env = h->env_;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  napi_value f, recv, result;
  ++g_in_callback;
  if (napi_get_reference_value(env, fn, &f) != napi_ok || napi_get_undefined(env, &recv) != napi_ok ||
      napi_call_function(env, recv, f, 0, nullptr, &result) != napi_ok) {
    ++h->callback_errors_;
    bool pending = false;
    napi_value ex;
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending) napi_get_and_clear_last_exception(env, &ex);
  }
  --g_in_callback;
  napi_close_handle_scope(env, scope);
}

void cb_minor(void* ctx) { call_gc(static_cast<heap*>(ctx), static_cast<heap*>(ctx)->minor_fn_); }
void cb_full(void* ctx) { call_gc(static_cast<heap*>(ctx), static_cast<heap*>(ctx)->full_fn_); }

// --- options ------------------------------------------------------------------
// Note [Every option of the table]
// Each key of the options object is an option of the library's table
// (gcpressure_option_names: backend, hard_limit, gc_budget, verbose, ...),
// set through gcpressure_options_set, so its parser and its message are the
// ones its GCPRESSURE_* variable gets; or the addon's own `collector`. A
// value is a string as is, a number in decimal (an integer without a
// fraction) or a boolean as 1 or 0: the text the variable would hold.
// The option `key` of o: false when absent or undefined.
bool get_opt(napi_env env, napi_value o, const char* key, napi_value* v, napi_valuetype* t) {
  bool has = false;
  if (napi_has_named_property(env, o, key, &has) != napi_ok || !has) return false;
  napi_get_named_property(env, o, key, v);
  napi_typeof(env, *v, t);
  return *t != napi_undefined;
}

// The text of an option's value (see the Note); false (thrown) for another type.
bool option_text(napi_env env, const char* key, napi_value v, napi_valuetype t, std::string* out) {
  char buf[256];
  size_t len = 0;
  if (t == napi_string) {
    if (napi_get_value_string_utf8(env, v, buf, sizeof buf, &len) != napi_ok || len + 1 >= sizeof buf) {
      throw_type(env, (std::string("gcpressure: Heap: option '") + key + "' is too long").c_str());
      return false;
    }
    *out = std::string(buf, len);
  } else if (t == napi_number) {
    double x = 0;
    napi_get_value_double(env, v, &x);
    const bool integral = std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9007199254740992.0;
    std::snprintf(buf, sizeof buf, integral ? "%.0f" : "%.17g", x);
    *out = buf;
  } else if (t == napi_boolean) {
    bool b = false;
    napi_get_value_bool(env, v, &b);
    *out = b ? "1" : "0";
  } else {
    throw_type(env, (std::string("gcpressure: Heap: option '") + key + "' must be a string, a number or a boolean")
                        .c_str());
    return false;
  }
  return true;
}

bool is_table_option(const char* key) {
  for (const char* const* n = gcpressure_option_names(); *n; ++n)
    if (std::strcmp(*n, key) == 0) return true;
  return false;
}

std::string known_options() {
  std::string all;
  for (const char* const* n = gcpressure_option_names(); *n; ++n) all += std::string(*n) + ", ";
  return all + "collector";
}

// Fills o from the options object (Note [Every option of the table]); the
// policy's text into *policy; false when an exception was thrown.
bool read_options(napi_env env, napi_value obj, gcpressure_options* o, bool* collector, std::string* policy) {
  napi_value names;
  uint32_t n = 0;
  napi_get_property_names(env, obj, &names);
  napi_get_array_length(env, names, &n);
  for (uint32_t i = 0; i < n; ++i) {
    napi_value k, v;
    napi_valuetype t;
    char key[64];
    size_t len;
    napi_get_element(env, names, i, &k);
    napi_get_value_string_utf8(env, k, key, sizeof key, &len);
    if (!get_opt(env, obj, key, &v, &t)) continue;  // undefined: left unset
    if (std::strcmp(key, "collector") == 0) {
      if (t != napi_boolean) return throw_type(env, "gcpressure: Heap: option 'collector' must be a boolean"), false;
      napi_get_value_bool(env, v, collector);
      continue;
    }
    if (!is_table_option(key))
      return throw_type(env, ("gcpressure: Heap: unknown option '" + std::string(key) + "' (known: " +
                              known_options() + ")").c_str()), false;
    std::string text;
    if (!option_text(env, key, v, t, &text)) return false;
    if (gcpressure_options_set(o, key, text.c_str()) != GCPRESSURE_OK)
      return throw_range(env, gcpressure_last_error()), false;
    if (std::strcmp(key, "policy") == 0) *policy = o->policy;
  }
  return true;
}

// --- the Heap class -------------------------------------------------------------

void destroy_allocator(heap* h) {
  if (h->closed_) return;
  h->closed_ = true;
  gcpressure_status st = gcpressure_destroy(h->a_);
  if (st != GCPRESSURE_OK) std::fprintf(stderr, "gcpressure (node): destroy: %s\n", gcpressure_last_error());
  // h->a_ stays: the C API keeps a tombstone and answers GCPRESSURE_ERR_SHUTDOWN.
}

// Note [Closing a heap]
// The Heap object's finalizer runs inside V8's collection, where
// gcpressure_destroy must not run (it may be inside the policy's own
// collection on this thread: "not from a collection"), so it posts the
// destroy to run after the collection (node_api_post_finalizer). Arrays still
// alive then are the C API's documented leak; their finalizers later get
// GCPRESSURE_ERR_SHUTDOWN from the tombstone, which they ignore.
void heap_destroy_later(napi_env env, void* data, void*) {
  heap* h = static_cast<heap*>(data);
  destroy_allocator(h);
  if (h->minor_fn_) napi_delete_reference(env, h->minor_fn_);
  if (h->full_fn_) napi_delete_reference(env, h->full_fn_);
  h->minor_fn_ = h->full_fn_ = nullptr;
  heap_unref(h);
}

void heap_finalize(node_api_basic_env env, void* data, void*) {
  node_api_post_finalizer(env, heap_destroy_later, data, nullptr);
}

napi_value heap_ctor(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], self;
  napi_get_cb_info(env, info, &argc, argv, &self, nullptr);
  napi_valuetype t0 = napi_undefined, t1 = napi_undefined, t2 = napi_undefined;
  if (argc >= 1) napi_typeof(env, argv[0], &t0);
  if (argc >= 3) napi_typeof(env, argv[1], &t1), napi_typeof(env, argv[2], &t2);
  if (t0 != napi_object || t1 != napi_function || t2 != napi_function)
    return throw_type(env, "gcpressure: new Heap(options, minorGc, fullGc): an options object and two functions");
  gcpressure_options o;
  gcpressure_options_init(&o);
  bool collector = true;
  std::string policy;
  if (!read_options(env, argv[0], &o, &collector, &policy)) return nullptr;
  heap* h = new heap;
  h->env_ = env;
  h->collector_ = collector;
  h->native_ = policy == "runtime_native";
  gcpressure_status st = gcpressure_create(&o, &h->a_);
  if (st != GCPRESSURE_OK) {
    delete h;
    return throw_status(env, "Heap", st);
  }
  std::string js(1 << 16, '\0');
  if (gcpressure_stats_json(h->a_, js.data(), js.size(), nullptr) == GCPRESSURE_OK &&
      !std::strstr(js.c_str(), "\"backend\":\"host\"")) {
    gcpressure_destroy(h->a_);
    delete h;
    return throw_with(env, napi_create_error, GCPRESSURE_ERR_UNSUPPORTED, "GCPRESSURE_ERR_UNSUPPORTED",
                      "gcpressure: Heap: unsupported: this addon computes on the CPU: backend host only");
  }
  napi_create_reference(env, argv[1], 1, &h->minor_fn_);
  napi_create_reference(env, argv[2], 1, &h->full_fn_);
  if (collector) {
    gcpressure_collector_callbacks c;
    gcpressure_collector_callbacks_init(&c);
    c.context = h;
    c.minor = cb_minor;
    c.full = cb_full;
    c.run_finalizers = nullptr;  // Note [Finalizers run inside V8's collection]
    c.heap_bytes = heap_bytes;
    c.own_collections = own_collections;
    st = gcpressure_set_collector(h->a_, &c);
    if (st != GCPRESSURE_OK) {
      napi_value err = throw_status(env, "Heap", st);
      heap_destroy_later(env, h, nullptr);
      return err;
    }
  }
  napi_wrap(env, self, h, heap_finalize, nullptr, nullptr);
  napi_type_tag_object(env, self, &k_heap_tag);
  return self;
}

heap* this_heap(napi_env env, napi_callback_info info, size_t* argc, napi_value* argv) {
  napi_value self;
  napi_get_cb_info(env, info, argc, argv, &self, nullptr);
  return unwrap_heap(env, self);
}

// heap.array(n): n float32 elements
napi_value heap_array(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  heap* h = this_heap(env, info, &argc, argv);
  size_t n;
  if (!h) return nullptr;
  if (argc < 1) return throw_type(env, "gcpressure: heap.array(n): n is missing");
  if (!get_size(env, argv[0], "heap.array(n): n", &n)) return nullptr;
  return new_array(env, h, n);
}

using simple_call = gcpressure_status (*)(gcpressure_allocator*);
template <simple_call F>
napi_value heap_simple(napi_env env, napi_callback_info info, const char* what) {
  size_t argc = 0;
  heap* h = this_heap(env, info, &argc, nullptr);
  if (!h) return nullptr;
  gcpressure_status st = F(h->a_);
  if (st != GCPRESSURE_OK) return throw_status(env, what, st);
  return nullptr;
}

gcpressure_status do_sync(gcpressure_allocator* a) { return gcpressure_synchronize(a, nullptr); }
gcpressure_status do_full(gcpressure_allocator* a) { return gcpressure_collect(a, 1); }
gcpressure_status do_minor(gcpressure_allocator* a) { return gcpressure_collect(a, 0); }

napi_value heap_iteration(napi_env e, napi_callback_info i) { return heap_simple<gcpressure_iteration>(e, i, "iteration"); }
napi_value heap_synchronize(napi_env e, napi_callback_info i) { return heap_simple<do_sync>(e, i, "synchronize"); }
napi_value heap_collect_full(napi_env e, napi_callback_info i) { return heap_simple<do_full>(e, i, "collect"); }
napi_value heap_collect_minor(napi_env e, napi_callback_info i) { return heap_simple<do_minor>(e, i, "collect"); }
napi_value heap_drain(napi_env e, napi_callback_info i) { return heap_simple<gcpressure_drain>(e, i, "drain"); }

// Note [Limits as text]
// heap.setLimits(soft, hard) takes each limit as gp.open takes it: a number
// of bytes (0, undefined or null: unchanged) or a size string ("64 MB",
// "64MiB", "50%" of the device). A string is first given to
// gcpressure_options_set under the limit's own name, so a bad one gets the
// constructor's message (naming soft_limit or hard_limit: the bad-value
// table's text), then read into bytes by gcpressure_parse_size against the
// device's total, as the Lua and Guile bindings read theirs. "N%avail"
// follows the memory at run time, which a limit set now cannot: parse_size
// refuses it.
bool limit_arg(napi_env env, heap* h, napi_value v, const char* name, size_t* out) {
  napi_valuetype t = napi_undefined;
  if (v) napi_typeof(env, v, &t);
  *out = 0;
  if (t == napi_undefined || t == napi_null) return true;
  const std::string what = std::string("heap.setLimits: ") + name;
  if (t == napi_number) return get_size(env, v, what.c_str(), out);
  if (t != napi_string) return throw_type(env, ("gcpressure: " + what + " must be a number or a string").c_str()), false;
  std::string text;
  if (!option_text(env, name, v, t, &text)) return false;
  gcpressure_options scratch;
  gcpressure_options_init(&scratch);
  if (gcpressure_options_set(&scratch, name, text.c_str()) != GCPRESSURE_OK)
    return throw_range(env, gcpressure_last_error()), false;
  std::string js(1 << 14, '\0');
  size_t device_total = 0;
  if (gcpressure_stats_json(h->a_, js.data(), js.size(), nullptr) == GCPRESSURE_OK)
    if (const char* at = std::strstr(js.c_str(), "\"device_total\":")) device_total = std::strtoull(at + 15, nullptr, 10);
  if (gcpressure_parse_size(text.c_str(), device_total, out) != GCPRESSURE_OK)
    return throw_range(env, gcpressure_last_error()), false;
  return true;
}

// heap.setLimits(soft, hard): Note [Limits as text]
napi_value heap_set_limits(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2] = {nullptr, nullptr};
  heap* h = this_heap(env, info, &argc, argv);
  size_t soft = 0, hard = 0;
  if (h && h->closed_) {  // the C API's tombstone answers, before a percentage needs the device
    const gcpressure_status st = gcpressure_set_limits(h->a_, 0, 0);
    return throw_status(env, "setLimits", st == GCPRESSURE_OK ? GCPRESSURE_ERR_SHUTDOWN : st);
  }
  if (!h || !limit_arg(env, h, argc > 0 ? argv[0] : nullptr, "soft_limit", &soft) ||
      !limit_arg(env, h, argc > 1 ? argv[1] : nullptr, "hard_limit", &hard))
    return nullptr;
  const gcpressure_status st = gcpressure_set_limits(h->a_, soft, hard);
  if (st != GCPRESSURE_OK) return throw_status(env, "setLimits", st);
  return nullptr;
}

// heap.stats(): the library's stats as a JSON string
napi_value heap_stats(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  heap* h = this_heap(env, info, &argc, nullptr);
  if (!h) return nullptr;
  std::string buf(8192, '\0');
  size_t need = 0;
  gcpressure_status st = gcpressure_stats_json(h->a_, buf.data(), buf.size(), &need);
  if (st == GCPRESSURE_ERR_TRUNCATED) {
    buf.assign(need, '\0');
    st = gcpressure_stats_json(h->a_, buf.data(), buf.size(), &need);
  }
  if (st != GCPRESSURE_OK) return throw_status(env, "stats", st);
  napi_value out;
  napi_create_string_utf8(env, buf.c_str(), NAPI_AUTO_LENGTH, &out);
  return out;
}

// heap.info(): what the binding itself knows
napi_value heap_info(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  heap* h = this_heap(env, info, &argc, nullptr);
  if (!h) return nullptr;
  napi_value o, v;
  napi_create_object(env, &o);
  napi_get_boolean(env, h->native_, &v);
  napi_set_named_property(env, o, "runtimeNative", v);
  napi_get_boolean(env, h->collector_, &v);
  napi_set_named_property(env, o, "collector", v);
  napi_get_boolean(env, h->closed_, &v);
  napi_set_named_property(env, o, "closed", v);
  napi_create_double(env, static_cast<double>(h->external_), &v);
  napi_set_named_property(env, o, "externalBytes", v);
  napi_create_double(env, static_cast<double>(h->callback_errors_), &v);
  napi_set_named_property(env, o, "callbackErrors", v);
  napi_create_double(env, static_cast<double>(g_minor.load() ), &v);
  napi_set_named_property(env, o, "v8Scavenges", v);
  napi_create_double(env, static_cast<double>(g_full.load()), &v);
  napi_set_named_property(env, o, "v8MarkCompacts", v);
  napi_create_double(env, g_seconds.load(), &v);
  napi_set_named_property(env, o, "v8GcSeconds", v);
  return o;
}

// heap.close(): destroys the allocator now (later calls: GCPRESSURE_ERR_SHUTDOWN)
napi_value heap_close(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  heap* h = this_heap(env, info, &argc, nullptr);
  if (!h) return nullptr;
  if (gcpressure_in_collection()) return throw_status(env, "close", GCPRESSURE_ERR_BUSY);
  // The C API's destroy with callbacks only drains: collect first, so that
  // the garbage's (synchronous) finalizers return their blocks.
  if (!h->closed_ && h->full_fn_) call_gc(h, h->full_fn_);
  destroy_allocator(h);
  return nullptr;
}

// policyNames(): the library's one list
napi_value policy_names(napi_env env, napi_callback_info) {
  napi_value arr, s;
  napi_create_array(env, &arr);
  uint32_t i = 0;
  for (const char* const* p = gcpressure_policy_names(); *p; ++p, ++i) {
    napi_create_string_utf8(env, *p, NAPI_AUTO_LENGTH, &s);
    napi_set_element(env, arr, i, s);
  }
  return arr;
}

}  // namespace

// Note [Errors]
// A failed C API call throws an Error whose message is "gcpressure: WHAT:
// STATUS: " and the C API's own message (gcpressure_last_error), whose code
// is the status's enum name (err.code === 'GCPRESSURE_ERR_OOM') and whose
// status is its number. Wrong JS types throw TypeError, values out of range
// RangeError, both with code GCPRESSURE_ERR_INVALID.
napi_value throw_status(napi_env env, const char* what, gcpressure_status st) {
  static const char* const codes[] = {"GCPRESSURE_OK",           "GCPRESSURE_ERR_INVALID", "GCPRESSURE_ERR_OOM",
                                      "GCPRESSURE_ERR_MISUSE",   "GCPRESSURE_ERR_SHUTDOWN", "GCPRESSURE_ERR_CUDA",
                                      "GCPRESSURE_ERR_UNSUPPORTED", "GCPRESSURE_ERR_BUSY", "GCPRESSURE_ERR_TRUNCATED",
                                      "GCPRESSURE_ERR_INTERNAL"};
  const std::string msg = std::string("gcpressure: ") + what + ": " + gcpressure_status_string(st) + ": " +
                          gcpressure_last_error();
  const unsigned i = static_cast<unsigned>(st);
  return throw_with(env, st == GCPRESSURE_ERR_INVALID ? napi_create_range_error : napi_create_error, st,
                    i < 10 ? codes[i] : "GCPRESSURE_ERR_INTERNAL", msg.c_str());
}


napi_value throw_type(napi_env env, const char* msg) {
  return throw_with(env, napi_create_type_error, GCPRESSURE_ERR_INVALID, "GCPRESSURE_ERR_INVALID", msg);
}

napi_value throw_range(napi_env env, const char* msg) {
  return throw_with(env, napi_create_range_error, GCPRESSURE_ERR_INVALID, "GCPRESSURE_ERR_INVALID", msg);
}

napi_value throw_misuse(napi_env env, const char* msg) {
  return throw_with(env, napi_create_error, GCPRESSURE_ERR_MISUSE, "GCPRESSURE_ERR_MISUSE", msg);
}

napi_value throw_shutdown(napi_env env, const char* msg) {
  return throw_with(env, napi_create_error, GCPRESSURE_ERR_SHUTDOWN, "GCPRESSURE_ERR_SHUTDOWN", msg);
}

// The value a JS entry point returns: the recorded failure or pending JS
// exception if there is one (cleared), else `result`.
napi_value take_failure(napi_env env, napi_value result) {
  napi_value err = nullptr;
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value ex;
    bool is_error = false;
    napi_get_and_clear_last_exception(env, &ex);
    napi_is_error(env, ex, &is_error);
    if (is_error) {
      err = ex;
    } else {  // a non-Error thrown by JS: boxed, so that the wrapper sees an Error
      napi_value text;
      napi_create_string_utf8(env, "gcpressure: a JS value was thrown during the call (see .cause)", NAPI_AUTO_LENGTH,
                              &text);
      napi_create_error(env, nullptr, text, &err);
      napi_set_named_property(env, err, "cause", ex);
    }
  }
  if (g_failure) {
    napi_value recorded;
    if (!err && napi_get_reference_value(env, g_failure, &recorded) == napi_ok) err = recorded;
    napi_delete_reference(env, g_failure);
    g_failure = nullptr;
  }
  return err ? err : result;
}

bool get_size(napi_env env, napi_value v, const char* what, size_t* out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t != napi_number) return throw_type(env, (std::string("gcpressure: ") + what + " must be a number").c_str()), false;
  double d;
  napi_get_value_double(env, v, &d);
  if (!(d >= 0) || d != static_cast<double>(static_cast<uint64_t>(d)) || d > 9007199254740991.0)
    return throw_range(env, (std::string("gcpressure: ") + what + " must be a non-negative integer").c_str()), false;
  *out = static_cast<size_t>(d);
  return true;
}

void* unwrap_tagged(napi_env env, napi_value v, const napi_type_tag& tag, const char* not_it) {
  bool tagged = false;
  void* p = nullptr;
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t != napi_object || napi_check_object_type_tag(env, v, &tag, &tagged) != napi_ok || !tagged ||
      napi_unwrap(env, v, &p) != napi_ok)
    return throw_type(env, not_it), nullptr;
  return p;
}

heap* unwrap_heap(napi_env env, napi_value v) {
  return static_cast<heap*>(unwrap_tagged(env, v, k_heap_tag, "gcpressure: not a Heap"));
}

void heap_unref(heap* h) {
  if (--h->refs_ == 0) delete h;
}

}  // namespace gcp_node

using namespace gcp_node;

NAPI_MODULE_INIT() {
  static bool hooked = false;
  if (!hooked) {
    hooked = true;
    v8::Isolate* iso = v8::Isolate::GetCurrent();
    iso->AddGCPrologueCallback(gc_prologue);
    iso->AddGCEpilogueCallback(gc_epilogue);
  }
  const napi_property_descriptor methods[] = {
      {"array", nullptr, js_entry<heap_array>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"matmul", nullptr, js_entry<heap_matmul>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"biasRelu", nullptr, js_entry<heap_bias_relu>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"iteration", nullptr, js_entry<heap_iteration>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"synchronize", nullptr, js_entry<heap_synchronize>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"collectFull", nullptr, js_entry<heap_collect_full>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"collectMinor", nullptr, js_entry<heap_collect_minor>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"drain", nullptr, js_entry<heap_drain>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"setLimits", nullptr, js_entry<heap_set_limits>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"stats", nullptr, js_entry<heap_stats>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"info", nullptr, js_entry<heap_info>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
      {"close", nullptr, js_entry<heap_close>, nullptr, nullptr, nullptr, napi_default_method, nullptr},
  };
  napi_value cls, names;
  napi_define_class(env, "Heap", NAPI_AUTO_LENGTH, js_entry<heap_ctor>, nullptr, sizeof methods / sizeof methods[0], methods,
                    &cls);
  napi_set_named_property(env, exports, "Heap", cls);
  napi_create_function(env, "policyNames", NAPI_AUTO_LENGTH, js_entry<policy_names>, nullptr, &names);
  napi_set_named_property(env, exports, "policyNames", names);
  if (define_array_class(env, exports) != napi_ok) return nullptr;
  return exports;
}
