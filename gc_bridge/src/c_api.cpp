// The C API: status codes, thread-local messages, tombstoned handles.
//
// Note [C API re-entrancy]
// Collector callbacks run inside the policy's collection_scope (Note [Inside
// a collection], core/include/gcpressure/collection_scope.hpp). From there, the
// runtime's finalizers may alloc/free/release/drain (no allocator lock is held
// while a collection runs — Note [Locks and collections]); calls that would
// start another collection return GCPRESSURE_ERR_BUSY instead of recursing
// into a collector that is not re-entrant (Lua's, CPython's).
#include "gcpressure/gcpressure.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/boehm.hpp"
#include "gcpressure/collection_scope.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"
#include "c_api_internal.hpp"

using namespace gcpressure;
using gcpressure::c_detail::fail;
using gcpressure::c_detail::guarded;

namespace {

constexpr std::uint64_t k_live = 0x6763707265737321ULL;  // "gcpress!"
constexpr std::uint64_t k_dead = 0x646561646465616dULL;

thread_local std::string t_error;

// A C caller may store any int in an enum field; in C++ loading an
// out-of-range value through the enum type is undefined, so read the bits.
template <class E>
int enum_value(const E& e) noexcept {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<int>(v);
}


// Note [No nested collections]: a callback may run runtime code (a
// finalizer) that allocates; the policy calls every callback inside its
// collection_scope, so that allocation never reaches the policy again and
// no callback runs nested (runtime collectors are not re-entrant: Lua's and
// CPython's refuse or corrupt).
//
// Note [Counting a callback runtime's collections]: each callback that
// returns is one completed collection of the policy's (a step_full only when
// it completes the cycle); the runtime's own come from its own_collections
// callback. Counters are atomics: the policy calls under its lock, stats
// are read from any thread.
class callback_collector final : public collector {
 public:
  explicit callback_collector(const gcpressure_collector_callbacks& c) : cb_(c) {}
  const char* name() const noexcept override { return "callbacks"; }
  void collect_minor() override {
    timed_call t(*this, cb_.minor_is_full != 0);
    cb_.minor(cb_.context);
  }
  bool minor_is_whole_heap() const noexcept override { return cb_.minor_is_full != 0; }
  void start_full() override {
    collection_scope s;
    const auto t0 = std::chrono::steady_clock::now();
    if (cb_.start_full) cb_.start_full(cb_.context);
    add_time(t0);
  }
  bool step_full(double budget) override {
    if (!cb_.step_full) {
      timed_call t(*this, true);
      cb_.full(cb_.context);
      return true;
    }
    collection_scope s;
    const auto t0 = std::chrono::steady_clock::now();
    const bool done = cb_.step_full(cb_.context, budget) != 0;
    add_time(t0);
    if (done) count(true);
    return done;
  }
  void collect_full() override {
    timed_call t(*this, true);
    cb_.full(cb_.context);
  }
  std::size_t run_finalizers() override {
    collection_scope s;
    return cb_.run_finalizers ? cb_.run_finalizers(cb_.context) : 0;
  }
  collector_counters counters() const override {
    collector_counters c;
    std::uint64_t own = 0, own_full = 0;
    double own_s = 0;
    int exact = 0;
    if (cb_.own_collections) cb_.own_collections(cb_.context, &own, &own_full, &own_s, &exact);
    c.own_collections = own;
    c.own_full_collections = own_full;
    c.own_seconds = own_s;
    c.own_seconds_exact = cb_.own_collections && exact != 0;
    c.collections = ours_.load(std::memory_order_relaxed) + own;
    c.full_collections = ours_full_.load(std::memory_order_relaxed) + own_full;
    c.seconds = static_cast<double>(ns_.load(std::memory_order_relaxed)) * 1e-9 + own_s;
    c.heap_bytes = cb_.heap_bytes ? cb_.heap_bytes(cb_.context) : 0;
    return c;
  }

 private:
  // One whole collection through a callback: in the collection scope, timed,
  // counted when it returns.
  class timed_call {
   public:
    timed_call(callback_collector& c, bool full) : c_(c), full_(full), t0_(std::chrono::steady_clock::now()) {}
    ~timed_call() {
      c_.add_time(t0_);
      c_.count(full_);
    }
    timed_call(const timed_call&) = delete;
    timed_call& operator=(const timed_call&) = delete;

   private:
    collection_scope scope_;
    callback_collector& c_;
    bool full_;
    std::chrono::steady_clock::time_point t0_;
  };
  void add_time(std::chrono::steady_clock::time_point t0) noexcept {
    const auto d = std::chrono::steady_clock::now() - t0;
    ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(), std::memory_order_relaxed);
  }
  void count(bool full) noexcept {
    ours_.fetch_add(1, std::memory_order_relaxed);
    if (full) ours_full_.fetch_add(1, std::memory_order_relaxed);
  }

  gcpressure_collector_callbacks cb_;
  std::atomic<std::uint64_t> ours_{0}, ours_full_{0};
  std::atomic<std::int64_t> ns_{0};
};

}  // namespace

gcpressure_status c_detail::fail(gcpressure_status s, std::string msg) {
  t_error = std::move(msg);
  return s;
}

// Note [C handles over several devices]
// gcpressure_create returns the group's handle (device index 0); with
// several devices (options.devices, GCPRESSURE_DEVICES) it also owns one
// member handle per further device (gcpressure_device_allocator). Every
// handle names one device's allocator: alloc/free/usage/stats/limits/
// synchronize act on it. The collector, the policy and the hints are the
// group's, whichever handle is passed. Only the group handle is destroyed;
// its members become tombstones with it.
struct gcpressure_allocator {
  std::uint64_t magic = k_live;
  gcpressure_allocator* group = nullptr;           // a member's group handle; nullptr for the group itself
  std::size_t index = 0;                           // device index within the group
  // The group's state (unused in members):
  std::unique_ptr<boehm::device_heap> heap;        // GCPRESSURE_COLLECTOR_BOEHM
  std::vector<std::unique_ptr<device_allocator>> allocs;  // GCPRESSURE_COLLECTOR_CALLBACKS, one per device
  std::vector<gcpressure_allocator*> members;      // devices 1..n-1 (owned; leaked as tombstones on destroy)
  std::unique_ptr<callback_collector> collector;
  std::unique_ptr<gc_policy> policy;
  std::string policy_name;
  policy_options popts;

  gcpressure_allocator& g() { return group ? *group : *this; }
  std::size_t devices() { return g().heap ? g().heap->device_count() : g().allocs.size(); }
  device_allocator& a() { return g().heap ? g().heap->allocator(index) : *g().allocs[index]; }
  gc_policy* p() { return g().heap ? &g().heap->policy() : g().policy.get(); }
  std::vector<device_allocator*> all() {
    std::vector<device_allocator*> v;
    for (auto& x : g().allocs) v.push_back(x.get());
    return v;
  }
};

namespace {

gcpressure_status check(gcpressure_allocator* a) {
  if (!a) return fail(GCPRESSURE_ERR_INVALID, "gcpressure: null allocator handle");
  if (a->magic == k_dead) return fail(GCPRESSURE_ERR_SHUTDOWN, "gcpressure: the allocator was destroyed");
  if (a->magic != k_live) return fail(GCPRESSURE_ERR_INVALID, "gcpressure: not an allocator handle");
  return GCPRESSURE_OK;
}

#define GCP_CHECK(a)                                  \
  do {                                                \
    gcpressure_status st_ = check(a);                 \
    if (st_ != GCPRESSURE_OK) return st_;             \
  } while (0)

#define GCP_NOT_IN_COLLECTION(what)                                                                   \
  do {                                                                                               \
    if (in_collection())                                                                             \
      return fail(GCPRESSURE_ERR_BUSY, std::string("gcpressure: ") + what +                          \
                                           " called from inside a collection; not allowed there"); \
  } while (0)

// A hint to the group's policy (none without a registered collector: then
// nothing to do): checked, never from inside a collection, exceptions mapped.
template <class F>
gcpressure_status policy_hint(gcpressure_allocator* a, const char* what, F&& f) {
  GCP_CHECK(a);
  GCP_NOT_IN_COLLECTION(what);
  boehm::clear_stale_stack();  // Note [Stale stack words]
  return guarded([&] {
    if (gc_policy* p = a->p()) f(*p);
    return GCPRESSURE_OK;
  });
}

}  // namespace

extern "C" {

void gcpressure_collector_callbacks_init(gcpressure_collector_callbacks* c) {
  if (!c) return;
  std::memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
}

const char* gcpressure_last_error(void) { return t_error.c_str(); }

const char* gcpressure_status_string(gcpressure_status s) {
  switch (enum_value(s)) {
    case GCPRESSURE_OK: return "ok";
    case GCPRESSURE_ERR_INVALID: return "invalid argument";
    case GCPRESSURE_ERR_OOM: return "out of memory";
    case GCPRESSURE_ERR_MISUSE: return "misuse";
    case GCPRESSURE_ERR_SHUTDOWN: return "use after destroy";
    case GCPRESSURE_ERR_CUDA: return "CUDA error";
    case GCPRESSURE_ERR_UNSUPPORTED: return "unsupported";
    case GCPRESSURE_ERR_BUSY: return "busy (inside a collection)";
    case GCPRESSURE_ERR_TRUNCATED: return "buffer too small";
    case GCPRESSURE_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* gcpressure_version(void) { return "0.1.0"; }

const char* const* gcpressure_policy_names(void) { return policy_names(); }

// Note [Inside a collection], for a runtime's threads the callbacks do not
// cover (its finalizer thread, CPython's gc.callbacks start and stop). Not a
// second fact: t_c_entered only counts this thread's enters made here, so
// that a stray leave (say, from inside a callback) cannot end the scope of
// a collection the library is running.
namespace {
thread_local int t_c_entered = 0;
}  // namespace

gcpressure_status gcpressure_enter_collection(void) {
  enter_collection();
  ++t_c_entered;
  return GCPRESSURE_OK;
}

gcpressure_status gcpressure_leave_collection(void) {
  if (t_c_entered == 0)
    return fail(GCPRESSURE_ERR_MISUSE,
                "gcpressure_leave_collection: no gcpressure_enter_collection of this thread to end");
  --t_c_entered;
  leave_collection();
  return GCPRESSURE_OK;
}

int gcpressure_in_collection(void) { return in_collection() ? 1 : 0; }

gcpressure_status gcpressure_create(const gcpressure_options* o, gcpressure_allocator** out) {
  if (!o || !out) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_create: null options or out pointer");
  *out = nullptr;
  if (o->struct_size < offsetof(gcpressure_options, collector) + sizeof(o->collector) || o->struct_size > 4096)
    return fail(GCPRESSURE_ERR_INVALID, "gcpressure_create: options.struct_size is wrong; call gcpressure_options_init first");
  GCP_NOT_IN_COLLECTION("gcpressure_create");
  return guarded([&]() -> gcpressure_status {
    options opts;
    if (const gcpressure_status st = c_detail::read_options(*o, opts); st != GCPRESSURE_OK) return st;
    // Note [The environment is the default layer]; read_env (legacy): the
    // variables override the fields instead.
    const config c = o->read_env ? config_from_env(apply_options(opts, config{})) : resolve_config(opts);
    if ((c.backend == backend_choice::cuda || c.backend == backend_choice::cuda_async) && !cuda_available())
      return fail(GCPRESSURE_ERR_UNSUPPORTED, no_cuda_device_message("backend"));
    const int kind = enum_value(o->collector);
    if (kind != GCPRESSURE_COLLECTOR_BOEHM && kind != GCPRESSURE_COLLECTOR_CALLBACKS)
      return fail(GCPRESSURE_ERR_INVALID, "gcpressure_create: unknown collector kind");

    auto h = std::make_unique<gcpressure_allocator>();
    h->policy_name = c.policy;
    h->popts = policy_options::from_config(c);
    const auto ao = allocator_options::per_device(c);
    if (kind == GCPRESSURE_COLLECTOR_BOEHM) {
      h->heap = std::make_unique<boehm::device_heap>(ao, c.policy, h->popts);
    } else {
      for (const auto& one : ao) h->allocs.push_back(std::make_unique<device_allocator>(one));
    }
    // A soft limit above the hard one fails in device_allocator's constructor
    // (Note [Soft above hard] in config.hpp), the same message everywhere.
    for (std::size_t i = 1; i < ao.size(); ++i) {
      auto m = std::make_unique<gcpressure_allocator>();
      m->group = h.get();
      m->index = i;
      h->members.push_back(m.release());
    }
    *out = h.release();
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_destroy(gcpressure_allocator* a) {
  GCP_CHECK(a);
  GCP_NOT_IN_COLLECTION("gcpressure_destroy");
  if (a->group)
    return fail(GCPRESSURE_ERR_INVALID, "gcpressure_destroy: a device handle of a group (gcpressure_device_allocator); "
                                        "destroy the handle gcpressure_create returned");
  return guarded([&] {
    a->policy.reset();
    a->collector.reset();
    a->heap.reset();
    a->allocs.clear();
    // The shells stay: later calls get GCPRESSURE_ERR_SHUTDOWN (its
    // members are reachable from it; Note [Leaks on purpose]).
    for (gcpressure_allocator* m : a->members) m->magic = k_dead;
    a->magic = k_dead;
    detail::leaked_on_purpose(a);
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_set_collector(gcpressure_allocator* a, const gcpressure_collector_callbacks* c) {
  GCP_CHECK(a);
  GCP_NOT_IN_COLLECTION("gcpressure_set_collector");
  if (a->g().heap) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_set_collector: this allocator uses the Boehm collector");
  if (!c || c->struct_size < offsetof(gcpressure_collector_callbacks, full) + sizeof(c->full) || c->struct_size > 4096)
    return fail(GCPRESSURE_ERR_INVALID, "gcpressure_set_collector: null callbacks or bad struct_size");
  if (!c->minor || !c->full) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_set_collector: minor and full are required");
  return guarded([&] {
    gcpressure_collector_callbacks cb;
    gcpressure_collector_callbacks_init(&cb);
    std::memcpy(&cb, c, std::min(c->struct_size, sizeof cb));
    cb.struct_size = sizeof cb;
    gcpressure_allocator& g = a->g();
    g.policy.reset();  // unhooks before its collector goes
    g.collector = std::make_unique<callback_collector>(cb);
    g.policy = make_policy(g.policy_name, a->all(), *g.collector, g.popts);
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_alloc(gcpressure_allocator* a, size_t bytes, void* stream, void** out) {
  GCP_CHECK(a);
  if (!out) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_alloc: null out pointer");
  *out = nullptr;
  if (bytes == 0) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_alloc: zero-byte request");
  return guarded([&] {
    *out = a->a().allocate(bytes, stream);
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_free(gcpressure_allocator* a, void* ptr, size_t bytes, void* stream) {
  GCP_CHECK(a);
  if (!ptr) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_free: null pointer");
  try {
    a->a().free(ptr, bytes, stream);
    return GCPRESSURE_OK;
  } catch (const gcpressure::logic_error& e) {
    return fail(GCPRESSURE_ERR_MISUSE, e.what());
  } catch (...) {
    return fail(GCPRESSURE_ERR_INTERNAL, "gcpressure_free: unexpected exception");
  }
}

gcpressure_status gcpressure_release_from_finalizer(gcpressure_allocator* a, void* ptr, size_t bytes, void* stream) {
  GCP_CHECK(a);
  if (!ptr) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_release_from_finalizer: null pointer");
  if (!a->a().deferred().push(ptr, bytes, stream))
    return fail(GCPRESSURE_ERR_OOM, "gcpressure_release_from_finalizer: no host memory for the queue node");
  return GCPRESSURE_OK;
}

gcpressure_status gcpressure_quiet_moment(gcpressure_allocator* a) {
  return policy_hint(a, "gcpressure_quiet_moment", [](gc_policy& p) { p.quiet_moment(); });
}

gcpressure_status gcpressure_quiet_moment_ex(gcpressure_allocator* a, int will_block) {
  return policy_hint(a, "gcpressure_quiet_moment_ex", [will_block](gc_policy& p) { p.quiet_moment(will_block != 0); });
}

gcpressure_status gcpressure_synchronize(gcpressure_allocator* a, void* stream) {
  GCP_CHECK(a);
  GCP_NOT_IN_COLLECTION("gcpressure_synchronize");
  boehm::clear_stale_stack();  // Note [Stale stack words]
  return guarded([&] {
    if (auto* p = a->p()) {
      p->synchronize(stream, &a->a());
      return GCPRESSURE_OK;
    }
    // No collector registered yet: nothing to schedule, only wait.
    stream_ops& ops = a->a().streams();
    const auto release = [&ops](void* e) { ops.release(e); };
    const std::unique_ptr<void, decltype(release)> event(ops.record(stream), release);
    ops.synchronize(event.get());
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_iteration(gcpressure_allocator* a) {
  return policy_hint(a, "gcpressure_iteration", [](gc_policy& p) { p.iteration(); });
}

gcpressure_status gcpressure_collect(gcpressure_allocator* a, int full) {
  GCP_CHECK(a);
  GCP_NOT_IN_COLLECTION("gcpressure_collect");
  boehm::clear_stale_stack();  // Note [Stale stack words]
  return guarded([&] {
    auto* p = a->p();
    if (!p) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_collect: no collector registered");
    p->collect(full ? gc_kind::blocking_full : gc_kind::minor);
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_drain(gcpressure_allocator* a) {
  GCP_CHECK(a);
  a->a().drain();
  return GCPRESSURE_OK;
}

gcpressure_status gcpressure_trim(gcpressure_allocator* a) {
  GCP_CHECK(a);
  GCP_NOT_IN_COLLECTION("gcpressure_trim");
  return guarded([&] {
    a->a().drain();
    a->a().trim();
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_set_limits(gcpressure_allocator* a, size_t soft, size_t hard) {
  GCP_CHECK(a);
  auto& al = a->a();
  const size_t h = hard ? hard : al.hard_limit();
  size_t s = soft ? soft : al.soft_limit();
  // Note [Soft above hard] (config.hpp): a soft limit given above the hard
  // limit is an error, here and at creation; one left as it was (0 here,
  // unset there) follows a lower hard limit.
  if (s > h && soft) return fail(GCPRESSURE_ERR_INVALID, soft_above_hard_message(s, h));
  if (s > h) s = h;
  al.set_hard_limit(h);
  al.set_soft_limit(s);
  return GCPRESSURE_OK;
}

gcpressure_status gcpressure_usage(gcpressure_allocator* a, size_t* live, size_t* reserved) {
  GCP_CHECK(a);
  if (live) *live = a->a().live_bytes();
  if (reserved) *reserved = a->a().reserved_bytes();
  return GCPRESSURE_OK;
}

gcpressure_status gcpressure_stats_json(gcpressure_allocator* a, char* buf, size_t cap, size_t* needed) {
  GCP_CHECK(a);
  return guarded([&] {
    const std::string j = a->a().stats_json();
    if (needed) *needed = j.size() + 1;
    if (!buf || cap < j.size() + 1) {
      if (buf && cap) buf[0] = '\0';
      return fail(GCPRESSURE_ERR_TRUNCATED, "gcpressure_stats_json: buffer too small");
    }
    std::memcpy(buf, j.c_str(), j.size() + 1);
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_boehm_init(int incremental, int finalizer_thread) {
  return guarded([&] {
    boehm::runtime_options o;
    o.incremental = incremental != 0;
    o.finalizer_thread = finalizer_thread != 0;
    boehm::init(o);
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_boehm_alloc(gcpressure_allocator* a, size_t bytes, void* stream, gcpressure_buffer** out) {
  GCP_CHECK(a);
  if (!out) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_boehm_alloc: null out pointer");
  *out = nullptr;
  if (!a->g().heap) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_boehm_alloc: allocator not created with GCPRESSURE_COLLECTOR_BOEHM");
  if (bytes == 0) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_boehm_alloc: zero-byte request");
  return guarded([&] {
    *out = reinterpret_cast<gcpressure_buffer*>(a->g().heap->alloc(bytes, stream, a->index));
    return GCPRESSURE_OK;
  });
}

gcpressure_status gcpressure_buffer_data(const gcpressure_buffer* b, void** out) {
  if (!b || !out) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_buffer_data: null buffer or out pointer");
  try {
    *out = boehm::device_heap::data(reinterpret_cast<const boehm::buffer*>(b));
    return GCPRESSURE_OK;
  } catch (const std::exception& e) {
    *out = nullptr;
    return fail(GCPRESSURE_ERR_MISUSE, e.what());
  }
}

size_t gcpressure_buffer_size(const gcpressure_buffer* b) {
  return boehm::device_heap::size(reinterpret_cast<const boehm::buffer*>(b));
}

gcpressure_status gcpressure_buffer_unsafe_free(gcpressure_allocator* a, gcpressure_buffer* b) {
  GCP_CHECK(a);
  if (!b) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_buffer_unsafe_free: null buffer");
  if (!a->g().heap) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_buffer_unsafe_free: not a Boehm allocator");
  try {
    a->g().heap->unsafe_free(reinterpret_cast<boehm::buffer*>(b));
    return GCPRESSURE_OK;
  } catch (const std::exception& e) {
    return fail(GCPRESSURE_ERR_MISUSE, e.what());
  }
}

gcpressure_status gcpressure_device_count(gcpressure_allocator* a, size_t* n) {
  GCP_CHECK(a);
  if (!n) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_device_count: null out pointer");
  *n = a->devices();
  return GCPRESSURE_OK;
}

gcpressure_status gcpressure_device_allocator(gcpressure_allocator* a, size_t index, gcpressure_allocator** out) {
  GCP_CHECK(a);
  if (!out) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_device_allocator: null out pointer");
  *out = nullptr;
  gcpressure_allocator& g = a->g();
  if (index >= a->devices())
    return fail(GCPRESSURE_ERR_INVALID, "gcpressure_device_allocator: device index " + std::to_string(index) +
                                            " out of range (the group has " + std::to_string(a->devices()) + ")");
  *out = index == 0 ? &g : g.members[index - 1];
  return GCPRESSURE_OK;
}

}  // extern "C"
