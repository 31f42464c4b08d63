// libgcpressure_torch.so — PyTorch's CUDA memory through gcpressure's pool and
// pressure policy, with CPython's cyclic collector as the collector.
//
//   alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "gcp_torch_alloc", "gcp_torch_free")
//   torch.cuda.memory.change_current_allocator(alloc)
//
// (gcpressure_torch.py does this, and more: limits, policy, stats.)
//
// PyTorch frees tensors by reference counting; a tensor held in a reference
// cycle waits for CPython's cyclic collector, whose thresholds count objects,
// not bytes (PyTorch issue #50185). Here every allocation goes through a
// gcpressure::device_allocator (cuda_async backend, one per device) whose
// pressure policy asks CPython for a collection when device bytes justify
// one: minor = gc.collect(0) / gc.collect(1), whole heap = gc.collect(2).
//
// Built against the stable ABI (Py_LIMITED_API = 3.11): one build loads into
// any CPython >= 3.11. Nothing from libpython is linked: the symbols resolve
// from the interpreter that loads us. Two functions outside the limited API
// are looked up at run time with dlsym (PyGILState_Check, present in every
// CPython since 3.4, and Py_IsFinalizing / _Py_IsFinalizing).
//
// This file: the settings, one allocator per device under one policy (Note
// [Devices join the policy]), the stats and the exported entry points. The
// CPython side is torch_python.cpp (Note [GIL and the collection lock], Note
// [Finalization]); CUDA graph capture is torch_graphs.cpp (Note [Graph
// capture]).
//
// Note [Out of memory]
// CUDAPluggableAllocator does not check the pointer our alloc returns, so
// returning NULL would crash later in a kernel. By default (oom=throw) an
// allocation that fails after the reclaim ladder throws std::runtime_error
// ("CUDA out of memory (gcpressure): ..."); PyTorch's bindings turn it into a
// Python RuntimeError, as its own allocator's OutOfMemoryError (a
// RuntimeError) would be. oom=null returns NULL instead (ctypes callers: a C++
// exception cannot cross ctypes).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/json.hpp"
#include "gcpressure/policy.hpp"
#include "torch_graphs.hpp"
#include "torch_profile.hpp"
#include "torch_shim.hpp"

#define GCP_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace gcpressure;
using gcp_torch::graph_memory;
using gcp_torch::prof_scope;
using gcp_torch::prof_site;
using namespace gcp_torch;
using capture_check_mode = settings::capture_check_mode;

constexpr int k_max_devices = 64;

// Note [Devices join the policy]
// The process has one CPython heap, so one policy decides for every device
// (Note [One policy, N devices] in core/include/gcpressure/policy.hpp). It is
// made with the first device's allocator; PyTorch calls us per device,
// lazily, so every later device's allocator joins it with add_device(). The
// join waits for the collection lock M (Note [GIL and the collection lock]),
// and a thread that holds M may need the globals mutex (a finalizer that
// allocates on a new device, or whose allocation fails: oom_null()), so the
// join runs after the mutex is let go, under an entry_guard like any call
// that may wait for M. Until it has joined, the new allocator has no hook:
// other threads allocate there without pressure (no collection; the ladder's
// pool steps only), and synchronize() only waits. Between add_device (which
// makes the policy itself the hook) and set_hook(gate), two stores apart, an
// allocation there would skip the gate's capture check.
struct device_slot {
  std::unique_ptr<device_allocator> alloc;
  gc_policy* policy = nullptr;                 // the process's one policy (globals::policy)
  std::unique_ptr<gcp_torch::hook_gate> gate;  // the allocator's hook: the policy, off during captures
  std::unique_ptr<graph_memory> graphs;        // Note [Graph capture]
  capture_check_mode capture_check = capture_check_mode::on;
};

struct globals {
  std::mutex mu;  // settings and device creation; never held while waiting for the GIL
  settings s;
  bool configured = false;
  std::array<std::atomic<device_slot*>, k_max_devices> devices{};
  gcpressure::collector* collector = nullptr;  // CPython's (torch_python.cpp), made with the first device
  gc_policy* policy = nullptr;  // every device's (Note [Devices join the policy]), made with the first; leaked
};

const char* capture_check_name(capture_check_mode m) {
  return m == capture_check_mode::on ? "on" : m == capture_check_mode::announced ? "announced" : "off";
}

globals& G() {
  static globals* g = new globals();  // leaked: Note [Finalization]
  return *g;
}

thread_local std::string t_error;

}  // namespace

int gcp_torch::fail(const std::string& msg) {
  t_error = msg;
  return -1;
}

const std::string& gcp_torch::last_error() noexcept { return t_error; }

namespace {

std::atomic<std::uint64_t> g_alloc_entries{0};  // allocation attempts, all threads
// --- devices ------------------------------------------------------------------------

void ensure_configured_locked(globals& g) {
  if (g.configured) return;
  g.s.cfg = config_from_env(g.s.cfg);
  if (g.s.cfg.backend == backend_choice::automatic) g.s.cfg.backend = backend_choice::cuda_async;
  if (const char* v = std::getenv("GCPRESSURE_TORCH_OOM")) g.s.oom_null = std::strcmp(v, "null") == 0;
  g.configured = true;
}

collector& collector_locked(globals& g) {
  if (!g.collector) {
    g.collector = &python_collector();
    configure_python_collector(g.s);
  }
  return *g.collector;
}

// Makes and publishes device `device`'s slot. Returns true if its allocator
// must still join the policy (Note [Devices join the policy]).
bool make_slot_locked(globals& g, int device) {
  ensure_configured_locked(g);
  config c = g.s.cfg;
  c.device = device;
  auto s = std::make_unique<device_slot>();
  s->alloc = std::make_unique<device_allocator>(allocator_options::from_config(c));
  const bool first = !g.policy;
  if (first)  // leaked: Note [Finalization]
    g.policy = make_policy(c.policy, *s->alloc, collector_locked(g), policy_options::from_config(c)).release();
  s->policy = g.policy;
  s->gate = std::make_unique<gcp_torch::hook_gate>(*g.policy);
  if (first) s->alloc->set_hook(s->gate.get());
  s->graphs = std::make_unique<graph_memory>(*s->alloc, device, c.backend == backend_choice::host);
  s->capture_check = g.s.capture_check;
  g.devices[static_cast<std::size_t>(device)].store(s.release(), std::memory_order_release);  // leaked
  return !first;
}

device_slot& slot(int device) {
  if (device < 0 || device >= k_max_devices) GCPRESSURE_FAIL("gcpressure_torch: device index out of range");
  globals& g = G();
  auto& at = g.devices[static_cast<std::size_t>(device)];
  if (device_slot* s = at.load(std::memory_order_acquire)) return *s;
  bool join;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    if (device_slot* s = at.load(std::memory_order_acquire)) return *s;
    join = make_slot_locked(g, device);
  }
  device_slot& s = *at.load(std::memory_order_acquire);
  if (join) {
    entry_guard guard;  // add_device waits for M
    s.policy->add_device(*s.alloc);
    s.alloc->set_hook(s.gate.get());
  }
  return s;
}

bool joined(const device_slot& s) noexcept { return s.policy->device_index(*s.alloc) < s.policy->device_count(); }

device_slot* existing(int device) {
  if (device < 0 || device >= k_max_devices) return nullptr;
  return G().devices[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

bool oom_null() {
  globals& g = G();
  std::lock_guard<std::mutex> lk(g.mu);
  ensure_configured_locked(g);
  return g.s.oom_null;
}

std::string stats_json() {
  globals& g = G();
  counters& c = C();
  std::ostringstream os;
  settings s;
  const gc_policy* policy;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    ensure_configured_locked(g);
    s = g.s;
    policy = g.policy;
  }
  auto u = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  os << "{\"library\":\"gcpressure_torch\",\"version\":\"0.1.0\",\"settings\":{\"backend\":\""
     << to_string(s.cfg.backend) << "\",\"policy\":\"" << json_escape(s.cfg.policy)
     << "\",\"soft_limit\":\"" << json_escape(s.cfg.soft_limit.to_string()) << "\",\"hard_limit\":\""
     << json_escape(s.cfg.hard_limit.to_string()) << "\",\"gc_budget\":" << s.cfg.gc_budget
     << ",\"gil_wait\":" << s.gil_wait << ",\"minor_generation\":" << s.minor_generation
     << ",\"gen1_every\":" << s.gen1_every << ",\"handoff\":\"" << (s.pending_handoff ? "pending" : "helper")
     << "\",\"oom\":\"" << (s.oom_null ? "null" : "throw") << "\",\"capture_check\":"
     << "\"" << capture_check_name(s.capture_check) << "\"},";
  os << "\"entries\":{\"alloc_calls\":" << u(c.alloc_calls) << ",\"free_calls\":" << u(c.free_calls)
     << ",\"zero_size\":" << u(c.zero_size) << ",\"ooms\":" << u(c.ooms) << ",\"oom_retries\":" << u(c.oom_retries) << ",\"errors\":" << u(c.errors)
     << ",\"entries_with_gil\":" << u(c.entries_with_gil) << ",\"gil_released\":" << u(c.gil_released) << "},";
  os << "\"python\":{\"requested_minor\":" << u(c.requested_minor) << ",\"requested_full\":" << u(c.requested_full)
     << ",\"requested_gen\":[" << u(c.requested_gen[0]) << "," << u(c.requested_gen[1]) << ","
     << u(c.requested_gen[2]) << "],\"direct\":" << u(c.direct) << ",\"handed_off\":" << u(c.handed_off)
     << ",\"pending_calls\":" << u(c.pending_calls) << ",\"helper_batches\":" << u(c.helper_batches)
     << ",\"skipped_nested\":" << u(c.skipped_nested) << ",\"skipped_no_python\":" << u(c.skipped_no_python)
     << ",\"skipped_busy\":" << u(c.skipped_busy) << ",\"waits_other_collection\":" << u(c.waits_other_collection)
     << ",\"abandoned_gil_holder\":" << u(c.abandoned_gil_holder)
     << ",\"abandoned_helper_busy\":" << u(c.abandoned_helper_busy)
     << ",\"abandoned_timeout\":" << u(c.abandoned_timeout) << ",\"abandoned_no_python\":" << u(c.abandoned_no_python)
     << ",\"abandoned_main_thread\":" << u(c.abandoned_main_thread) << ",\"python_collections\":["
     << u(c.python_collections[0]) << "," << u(c.python_collections[1]) << "," << u(c.python_collections[2])
     << "],\"python_gc_seconds\":" << static_cast<double>(u(c.python_ns)) * 1e-9
     << ",\"requested_seconds\":" << static_cast<double>(u(c.requested_ns)) * 1e-9
     << ",\"unreachable\":" << u(c.unreachable) << ",\"callback_errors\":" << u(c.callback_errors)
     << ",\"hook_installed\":" << (gc_hook_installed() ? "true" : "false") << "},";
  os << "\"profile\":" << gcp_torch::P().json() << ",\"graphs\":[";
  for (int d = 0, n = 0; d < k_max_devices; ++d) {
    device_slot* sl = existing(d);
    if (!sl) continue;
    os << (n++ ? "," : "") << sl->graphs->stats_json().insert(1, "\"hook_skipped\":" + std::to_string(sl->gate->skipped()) + ",");
  }
  os << "],";
  // The one policy (Note [Devices join the policy]); each device's "gc" has its share.
  os << "\"policy\":{\"name\":\"" << json_escape(policy ? policy->name() : s.cfg.policy)
     << "\",\"devices\":" << (policy ? policy->device_count() : 0) << "},";
  os << "\"devices\":[";
  bool first = true;
  for (int d = 0; d < k_max_devices; ++d) {
    device_slot* sl = existing(d);
    if (!sl) continue;
    os << (first ? "" : ",") << sl->alloc->stats_json();
    first = false;
  }
  os << "]}";
  return os.str();
}

// Note [Errors at a C boundary] (gcpressure/error.hpp): -1 and the message.
template <class F>
int guarded(F&& f) noexcept {
  return detail::call_at_c_boundary(std::forward<F>(f), [](const detail::caught_error& e) {
    C().errors.fetch_add(1);
    return fail(e.message);
  });
}

}  // namespace

// --- the exported C functions ---------------------------------------------------------

namespace {
void* alloc_impl(size_t size, int device, void* stream, bool nothrow) {
  prof_scope timed(prof_site::alloc);
  C().alloc_calls.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) {
    C().zero_size.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  std::string err;
  try {
    device_slot& s = slot(device);
    if (s.capture_check == capture_check_mode::on ||
        (s.capture_check == capture_check_mode::announced && graph_memory::active_captures().load() > 0)) {
      // Note [Graph capture]: no hook, no GIL, no event
      std::uint64_t capture;
      {
        prof_scope t(prof_site::capture_check);
        capture = s.graphs->capture_id(stream);
      }
      if (capture) return s.graphs->allocate(size, stream, capture);
    }
    std::optional<entry_guard> guard;
    {
      prof_scope t(prof_site::entry_guard);
      guard.emplace();
    }
    // Note [Retrying an OOM under contention]: while one thread runs the
    // reclaim ladder, others keep allocating (the policy lets them past a
    // running collection); they can take what the ladder freed before its
    // retry. If other threads entered during a failed call, try again (at
    // most twice); a thread allocating alone gets the failure at once.
    for (int attempt = 0;; ++attempt) {
      const std::uint64_t before = g_alloc_entries.fetch_add(1, std::memory_order_relaxed) + 1;
      try {
        prof_scope t(prof_site::allocate_core);
        return s.alloc->allocate(size, stream);
      } catch (const out_of_memory&) {
        if (attempt >= 2 || g_alloc_entries.load(std::memory_order_relaxed) == before) throw;
        C().oom_retries.fetch_add(1, std::memory_order_relaxed);
      }
    }
  } catch (const out_of_memory& e) {
    C().ooms.fetch_add(1, std::memory_order_relaxed);
    err = std::string("CUDA out of memory (gcpressure): ") + e.what();
  } catch (const std::exception& e) {
    C().errors.fetch_add(1, std::memory_order_relaxed);
    err = std::string("gcpressure_torch: allocation failed: ") + e.what();
  }
  t_error = err;
  if (nothrow || oom_null()) return nullptr;
  throw std::runtime_error(err);
}
}  // namespace

// The allocation function CUDAPluggableAllocator calls. Any thread, with or
// without the GIL. Zero bytes: NULL (PyTorch never frees a NULL data pointer).
// Note [Out of memory] for failures.
GCP_EXPORT void* gcp_torch_alloc(size_t size, int device, void* stream) {
  return alloc_impl(size, device, stream, false);
}

// The same, returning NULL on failure whatever the oom option says: for
// callers that cannot take a C++ exception (ctypes).
GCP_EXPORT void* gcp_torch_alloc_nothrow(size_t size, int device, void* stream) {
  return alloc_impl(size, device, stream, true);
}

// The free function CUDAPluggableAllocator calls: the block goes back to the
// pool at once, ordered on `stream` (the allocation's stream). Never takes
// the collection lock, never touches Python; safe from finalizers, during
// interpreter shutdown and at process exit. Misuse is reported on stderr.
GCP_EXPORT void gcp_torch_free(void* ptr, size_t size, int device, void* stream) {
  prof_scope timed(prof_site::free);
  C().free_calls.fetch_add(1, std::memory_order_relaxed);
  if (!ptr) return;
  device_slot* s = existing(device);
  if (!s) {
    std::fprintf(stderr, "gcpressure_torch: free of %p on device %d, which never allocated\n", ptr, device);
    return;
  }
  if (s->graphs->deallocate(ptr, size, stream)) return;  // a graph pool's block (Note [Graph capture])
  s->alloc->deallocate(ptr, size, stream);
}

// Chooses the backend ("auto", "host", "cuda", "cuda_async"; NULL: cuda_async
// or $GCPRESSURE_BACKEND), limits ("4GiB", "80%", bytes; NULL: 75% of the
// hard limit / the device), policy (NULL: "pressure") and GC time budget
// (0: 0.05). GCPRESSURE_* variables are read first; arguments override them.
// Only before the first allocation. Returns 0, or -1 (gcp_torch_last_error).
GCP_EXPORT int gcp_torch_init(const char* backend, const char* soft_limit, const char* hard_limit,
                              const char* policy, double gc_budget) {
  return guarded([&] {
    globals& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    for (int d = 0; d < k_max_devices; ++d)
      if (existing(d)) return fail("gcp_torch_init: too late, the allocator has already allocated");
    ensure_configured_locked(g);
    settings s = g.s;
    if (backend) s.cfg.backend = parse_backend(backend, "gcp_torch_init backend");  // throws, naming it
    if (s.cfg.backend == backend_choice::automatic)
      s.cfg.backend = cuda_available() ? backend_choice::cuda_async : backend_choice::host;
    if (soft_limit) s.cfg.soft_limit = parse_size(soft_limit, "soft_limit");
    if (hard_limit) s.cfg.hard_limit = parse_size(hard_limit, "hard_limit");
    if (policy) {
      if (!is_policy_name(policy))
        return fail(std::string("gcp_torch_init: unknown policy '") + policy + "' (expected " +
                    policy_names_text(", ", " or ") + ")");
      s.cfg.policy = policy;
    }
    if (gc_budget < 0 || gc_budget > 1) return fail("gcp_torch_init: gc_budget must be in [0, 1]");
    if (gc_budget > 0) s.cfg.gc_budget = gc_budget;
    if ((s.cfg.backend == backend_choice::cuda || s.cfg.backend == backend_choice::cuda_async) && !cuda_available())
      return fail("gcp_torch_init: a CUDA backend was asked for, but no CUDA device is usable");
    g.s = s;
    if (g.collector) configure_python_collector(g.s);
    return 0;
  });
}

// Options outside gcp_torch_init (before the first allocation, except "oom"):
//   host_capacity  simulated device size of the host backend ("1GiB")
//   gil_wait       seconds a handed-off collection is waited for (default 1)
//   minor_generation  "auto" (default: 0, and 1 every gen1_every-th), "0", "1"
//   gen1_every     see above (default 4)
//   handoff        "helper" (default) or "pending" (Py_AddPendingCall)
//   oom            "throw" (default) or "null"  (Note [Out of memory])
//   every_n        the every_iteration policy's N
//   verbose        "1": one stderr line per collection
//   capture_check  "on" (default): every allocation asks whether its stream
//                  is capturing a CUDA graph (Note [Graph capture]);
//                  "announced": only while a capture announced by the Python
//                  hooks runs (torch.cuda.graph, torch.compile), saving the
//                  call otherwise; "off": never (no graph is ever captured)
GCP_EXPORT int gcp_torch_set_option(const char* key, const char* value) {
  if (!key || !value) return fail("gcp_torch_set_option: null key or value");
  return guarded([&] {
    globals& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    ensure_configured_locked(g);
    const std::string k = key, v = value;
    bool allocated = false;
    for (int d = 0; d < k_max_devices; ++d) allocated = allocated || existing(d);
    if (k == "oom") {
      if (v != "throw" && v != "null") return fail("gcp_torch_set_option: oom must be throw or null");
      g.s.oom_null = v == "null";
      return 0;
    }
    if (allocated) return fail("gcp_torch_set_option: '" + k + "' only before the first allocation");
    if (k == "host_capacity") {
      g.s.cfg.host_capacity = parse_size(v, "host_capacity").bytes;
      if (!g.s.cfg.host_capacity) return fail("gcp_torch_set_option: host_capacity must be a size in bytes");
    } else if (k == "gil_wait") {
      g.s.gil_wait = std::stod(v);
      if (!(g.s.gil_wait >= 0 && g.s.gil_wait <= 600)) return fail("gcp_torch_set_option: gil_wait in [0, 600] s");
    } else if (k == "holder_grace") {
      g.s.holder_grace = std::stod(v);
    } else if (k == "minor_generation") {
      if (v == "auto") g.s.minor_generation = -1;
      else if (v == "0" || v == "1") g.s.minor_generation = v[0] - '0';
      else return fail("gcp_torch_set_option: minor_generation must be auto, 0 or 1");
    } else if (k == "gen1_every") {
      g.s.gen1_every = std::stoi(v);
      if (g.s.gen1_every < 1) return fail("gcp_torch_set_option: gen1_every must be >= 1");
    } else if (k == "handoff") {
      if (v != "helper" && v != "pending") return fail("gcp_torch_set_option: handoff must be helper or pending");
      g.s.pending_handoff = v == "pending";
    } else if (k == "every_n") {
      g.s.cfg.every_n = std::stoi(v);
      if (g.s.cfg.every_n < 1) return fail("gcp_torch_set_option: every_n must be >= 1");
    } else if (k == "capture_check") {
      if (v == "on") g.s.capture_check = capture_check_mode::on;
      else if (v == "announced") g.s.capture_check = capture_check_mode::announced;
      else if (v == "off") g.s.capture_check = capture_check_mode::off;
      else return fail("gcp_torch_set_option: capture_check must be on, announced or off");
    } else if (k == "verbose") {
      g.s.cfg.verbose = v == "1" || v == "true";
    } else {
      return fail("gcp_torch_set_option: unknown option '" + k + "'");
    }
    if (g.collector) configure_python_collector(g.s);
    return 0;
  });
}

// Call with the GIL held (ctypes.PyDLL), from the main thread if
// is_main_thread: imports gc.collect, adds the gc.callbacks entry that counts
// CPython's collections, starts the helper thread. Optional — without it the
// first collection does the same lazily — but it makes stats complete from
// the start. Returns 0 or -1.
GCP_EXPORT int gcp_torch_attach_python(int is_main_thread) {
  if (!gil_check_available()) return fail("gcp_torch_attach_python: PyGILState_Check not found in this process");
  if (!python_alive() || !holds_gil()) return fail("gcp_torch_attach_python: call it with the GIL held (ctypes.PyDLL)");
  if (is_main_thread) g_main_thread.store(self_id());
  if (!ensure_gc_objects()) return fail("gcp_torch_attach_python: cannot import gc.collect");
  {
    std::lock_guard<std::mutex> lk(G().mu);
    ensure_configured_locked(G());
    collector_locked(G());
  }
  start_helper();
  return 0;
}

// atexit: no Python code from here on (Note [Finalization]). Waiters give up.
GCP_EXPORT void gcp_torch_python_shutdown(void) { python_shutdown(); }

// A collection asked for by the user (policy reason "user"): minor (0) or
// whole heap (1). Any thread; the GIL may be held.
GCP_EXPORT int gcp_torch_collect(int device, int full) {
  return guarded([&] {
    device_slot& s = slot(device);
    entry_guard guard;
    s.policy->collect(full ? gc_kind::blocking_full : gc_kind::minor);
    return 0;
  });
}

// Hints: an iteration boundary / a quiet moment (few temporaries alive).
GCP_EXPORT int gcp_torch_iteration(int device) {
  return guarded([&] {
    device_slot& s = slot(device);
    entry_guard guard;
    s.policy->iteration();
    return 0;
  });
}

GCP_EXPORT int gcp_torch_quiet_moment(int device) {
  return guarded([&] {
    device_slot& s = slot(device);
    entry_guard guard;
    s.policy->quiet_moment();
    return 0;
  });
}

// The host is about to wait for all work queued on `stream` (issue 11):
// runs the collection work that is due while that work still runs, then
// blocks until it has completed (gc_policy::synchronize, Note [Collect in the
// device's time] in core/src/policy.cpp). Any thread, the GIL held or not
// (the Python side calls it through ctypes.CDLL: released); not from a
// finalizer (it may collect and block). During a capture
// (this stream's, or any announced one) it does nothing: synchronising there
// is illegal, and the caller's own synchronize reports it as PyTorch does.
GCP_EXPORT int gcp_torch_synchronize(int device, void* stream) {
  return guarded([&] {
    device_slot& s = slot(device);
    if (graph_memory::active_captures().load() > 0 || s.graphs->capture_id(stream)) return 0;
    entry_guard guard;
    if (joined(s)) {
      s.policy->synchronize(stream, s.alloc.get());
    } else {  // another thread is joining it (Note [Devices join the policy]): only wait
      stream_ops& ops = s.alloc->streams();
      event_ref e = ops.record(stream);
      try {
        ops.synchronize(e);
      } catch (...) {
        ops.release(e);
        throw;
      }
      ops.release(e);
    }
    return 0;
  });
}

// CUDA graphs (Note [Graph capture]; gcpressure_torch.py calls these from
// its wrappers of CUDAGraph.capture_begin / capture_end and a weakref
// finalizer on the graph); any thread, not from a finalizer (graph_release
// may cudaFree). capture_begin: `stream` has just begun capturing
// into PyTorch's pool {pool_hi, pool_lo} ({0, 0}: a pool of its own; the key
// used is written to *out_hi/*out_lo). Returns 0, or -1 if the stream is not
// capturing. capture_end: before PyTorch ends the capture. graph_release: a
// graph that captured into the pool was destroyed.
GCP_EXPORT int gcp_torch_capture_begin(int device, void* stream, unsigned long long pool_hi,
                                       unsigned long long pool_lo, unsigned long long* out_hi,
                                       unsigned long long* out_lo) {
  return guarded([&] {
    gcp_torch::pool_key key{pool_hi, pool_lo};
    if (!slot(device).graphs->begin(stream, key)) return fail("gcp_torch_capture_begin: the stream is not capturing");
    if (out_hi) *out_hi = key.first;
    if (out_lo) *out_lo = key.second;
    return 0;
  });
}

GCP_EXPORT int gcp_torch_capture_end(int device, void* stream) {
  return guarded([&] {
    slot(device).graphs->end(stream);
    return 0;
  });
}

GCP_EXPORT int gcp_torch_graph_release(int device, unsigned long long pool_hi, unsigned long long pool_lo) {
  return guarded([&] {
    if (device_slot* s = existing(device)) s->graphs->release({pool_hi, pool_lo});
    return 0;
  });
}

// Test support (CPU ctests, host backend): allocations on `stream` behave as
// if it captured, with capture id `id` (0: no longer).
GCP_EXPORT int gcp_torch_test_capture(int device, void* stream, unsigned long long id) {
  return guarded([&] {
    slot(device).graphs->set_test_capture(stream, id);
    return 0;
  });
}

// Test support: a new host_stream (the host backend's streams: an in-order
// worker thread each) as a stream handle; never destroyed. NULL on failure.
GCP_EXPORT void* gcp_torch_test_host_stream(void) {
  try {
    return (new host_stream())->ref();
  } catch (const std::exception& e) {
    fail(e.what());
    return nullptr;
  }
}

// Returns idle cached memory to the driver (torch.cuda.empty_cache's job).
GCP_EXPORT int gcp_torch_trim(int device) {
  return guarded([&] {
    device_slot* s = existing(device);
    if (!s) return 0;
    entry_guard guard;
    s->alloc->drain();
    s->alloc->trim();
    s->graphs->release_retired();
    return 0;
  });
}

// Limits in bytes (0 leaves one unchanged). Any time.
GCP_EXPORT int gcp_torch_set_limits(int device, size_t soft, size_t hard) {
  return guarded([&] {
    device_allocator& a = *slot(device).alloc;
    const size_t h = hard ? hard : a.hard_limit();
    size_t s = soft ? soft : a.soft_limit();
    if (soft && s > h) return fail("gcp_torch_set_limits: soft limit above hard limit");
    a.set_hard_limit(h);
    a.set_soft_limit(std::min(s, h));
    return 0;
  });
}

GCP_EXPORT int gcp_torch_usage(int device, size_t* live, size_t* reserved) {
  device_slot* s = existing(device);
  if (live) *live = s ? s->alloc->live_bytes() : 0;
  if (reserved) *reserved = s ? s->alloc->reserved_bytes() : 0;
  return 0;
}

GCP_EXPORT int gcp_torch_reset_peaks(int device) {
  if (device_slot* s = existing(device)) s->alloc->reset_peaks();
  return 0;
}

// Stats as one JSON object. Writes it (NUL-terminated) if cap is enough;
// returns the size needed including the NUL. Any thread, GIL or not.
GCP_EXPORT size_t gcp_torch_stats_json(char* buf, size_t cap) {
  std::string j;
  try {
    j = stats_json();
  } catch (const std::exception& e) {
    j = std::string("{\"error\":\"") + json_escape(e.what()) + "\"}";
  }
  if (buf && cap >= j.size() + 1) std::memcpy(buf, j.c_str(), j.size() + 1);
  else if (buf && cap) buf[0] = '\0';
  return j.size() + 1;
}

GCP_EXPORT const char* gcp_torch_last_error(void) { return t_error.c_str(); }

// Test support (CPU ctests): `threads` native threads that Python has never
// seen — like autograd's device threads — each allocate `iters` blocks of
// `bytes`, keeping the last `keep`, writing a tag into each and checking it
// before the free. Call through ctypes.CDLL (GIL released). Returns the number
// of failed allocations (NULL with oom=null) plus corrupted blocks, or -1.
GCP_EXPORT long gcp_torch_selftest_native(int threads, int iters, size_t bytes, int keep, int device) {
  if (threads < 1 || iters < 1 || bytes < 8 || keep < 1) return fail("gcp_torch_selftest_native: bad arguments");
  bool host;
  {
    std::lock_guard<std::mutex> lk(G().mu);
    ensure_configured_locked(G());
    host = G().s.cfg.backend == backend_choice::host;
  }
  std::atomic<long> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<void*> held;
      for (int i = 0; i < iters; ++i) {
        void* p = nullptr;
        try {
          p = gcp_torch_alloc(bytes, device, nullptr);
        } catch (const std::exception&) {
          p = nullptr;
        }
        if (!p) {
          bad.fetch_add(1);
          continue;
        }
        if (host) {
          const unsigned long tag = (static_cast<unsigned long>(t) << 32) | static_cast<unsigned long>(i);
          std::memcpy(p, &tag, sizeof tag);
          std::memcpy(static_cast<char*>(p) + bytes - sizeof tag, &tag, sizeof tag);
        }
        held.push_back(p);
        if (static_cast<int>(held.size()) > keep) {
          void* q = held.front();
          held.erase(held.begin());
          if (host) {
            unsigned long a, b;
            std::memcpy(&a, q, sizeof a);
            std::memcpy(&b, static_cast<char*>(q) + bytes - sizeof b, sizeof b);
            if (a != b) bad.fetch_add(1);
          }
          gcp_torch_free(q, bytes, device, nullptr);
        }
      }
      for (void* q : held) gcp_torch_free(q, bytes, device, nullptr);
    });
  }
  for (auto& th : ts) th.join();
  return bad.load();
}
