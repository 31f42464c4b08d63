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
// This file: one allocator per device under one policy (Note [Devices join
// the policy]; the state itself is torch_state.hpp) and the entry points
// that allocate, free, collect, hint and manage a device's memory. The
// settings and set-up entry points are torch_options.cpp; the stats and the
// test support, torch_stats.cpp. The CPython side is torch_python.cpp (Note
// [GIL and the collection lock], Note [Finalization]); CUDA graph capture is
// torch_graphs.cpp (Note [Graph capture]).
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
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"
#include "torch_graphs.hpp"
#include "torch_profile.hpp"
#include "torch_shim.hpp"
#include "torch_state.hpp"

using namespace gcpressure;
using namespace gcp_torch;

namespace {
thread_local std::string t_error;
}  // namespace

int gcp_torch::fail(const std::string& msg) {
  t_error = msg;
  return -1;
}

const std::string& gcp_torch::last_error() noexcept { return t_error; }

// --- devices ------------------------------------------------------------------------

namespace gcp_torch {

collector& collector_locked(globals& g) {
  if (!g.collector) {
    g.collector = &python_collector();
    configure_python_collector(g.s);
  }
  return *g.collector;
}

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

namespace {

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

}  // namespace

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

}  // namespace gcp_torch

// --- the exported C functions ---------------------------------------------------------

namespace {
std::atomic<std::uint64_t> g_alloc_entries{0};  // allocation attempts, all threads

void* alloc_impl(size_t size, int device, void* stream, int client, bool nothrow) {
  prof_scope timed(prof_site::alloc);
  C().alloc_calls.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) {
    C().zero_size.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  std::string err;
  try {
    device_slot& s = slot(device);
    // The legacy default stream (null) is never capturing (CUDA refuses a
    // capture on it): CuPy's and Numba's allocations there skip the query.
    if (stream != nullptr && (s.capture_check == capture_check_mode::on ||
                              (s.capture_check == capture_check_mode::announced &&
                               graph_memory::active_captures().load() > 0))) {
      // Note [Graph capture]: no hook, no GIL, no event
      std::uint64_t capture;
      {
        prof_scope t(prof_site::capture_check);
        capture = s.graphs->capture_id(stream);
      }
      if (capture) {
        void* p = s.graphs->allocate(size, stream, capture);
        s.clients[static_cast<std::size_t>(client)].on_alloc(size);
        return p;
      }
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
        void* p = s.alloc->allocate(size, stream);
        s.clients[static_cast<std::size_t>(client)].on_alloc(size);
        return p;
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

void* gcp_torch::alloc_for(size_t size, int device, void* stream, int client, bool nothrow) {
  return alloc_impl(size, device, stream, client, nothrow);
}

void gcp_torch::free_for(void* ptr, size_t size, int device, void* stream, int client) {
  prof_scope timed(prof_site::free);
  C().free_calls.fetch_add(1, std::memory_order_relaxed);
  if (!ptr) return;
  device_slot* s = existing(device);
  if (!s) {
    std::fprintf(stderr, "gcpressure_torch: free of %p on device %d, which never allocated\n", ptr, device);
    return;
  }
  s->clients[static_cast<std::size_t>(client)].on_free(size);
  if (s->graphs->deallocate(ptr, size, stream)) return;  // a graph pool's block (Note [Graph capture])
  s->alloc->deallocate(ptr, size, stream);
}

// The allocation function CUDAPluggableAllocator calls. Any thread, with or
// without the GIL. Zero bytes: NULL (PyTorch never frees a NULL data pointer).
// Note [Out of memory] for failures.
GCP_EXPORT void* gcp_torch_alloc(size_t size, int device, void* stream) {
  return alloc_impl(size, device, stream, 0, false);
}

// The same, returning NULL on failure whatever the oom option says: for
// callers that cannot take a C++ exception (ctypes).
GCP_EXPORT void* gcp_torch_alloc_nothrow(size_t size, int device, void* stream) {
  return alloc_impl(size, device, stream, 0, true);
}

// The free function CUDAPluggableAllocator calls: the block goes back to the
// pool at once, ordered on `stream` (the allocation's stream). Never takes
// the collection lock, never touches Python; safe from finalizers, during
// interpreter shutdown and at process exit. Misuse is reported on stderr.
GCP_EXPORT void gcp_torch_free(void* ptr, size_t size, int device, void* stream) {
  free_for(ptr, size, device, stream, 0);
}

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

namespace {

// Limits in bytes on `a` (0 leaves one unchanged). Returns 0 or -1.
int set_limits_on(device_allocator& a, size_t soft, size_t hard) {
  const size_t h = hard ? hard : a.hard_limit();
  size_t s = soft ? soft : a.soft_limit();
  if (soft && s > h) return fail(soft_above_hard_message(s, h));  // Note [Soft above hard]
  a.set_hard_limit(h);
  a.set_soft_limit(std::min(s, h));
  return 0;
}

// Note [Limits as text]
// A limit given as text is read by core's size parser, the one
// GCPRESSURE_SOFT_LIMIT / _HARD_LIMIT and gcp_torch_init use, naming
// `what` ("soft_limit"), so "64MiB", "64 MB" and "50%" mean here what they
// mean there (a percentage of this device's memory). "N%avail" follows the
// memory at run time, which a limit set now cannot (set_hard_limit pins it):
// an error, as at the C API's gcpressure_parse_size. NULL: 0 (unchanged).
size_t limit_bytes(const device_allocator& a, const char* text, const std::string& what) {
  if (!text) return 0;
  const size_spec spec = parse_size(text, what);
  if (spec.of_available)
    throw gcpressure::logic_error("gcpressure: invalid value for " + what + ": '" + text +
                                  "' (N%avail follows the memory at run time; set it with gcp_torch_init)");
  return spec.resolve(a.device_memory().total);
}

}  // namespace

// Limits in bytes (0 leaves one unchanged). Any time.
GCP_EXPORT int gcp_torch_set_limits(int device, size_t soft, size_t hard) {
  return guarded([&] { return set_limits_on(*slot(device).alloc, soft, hard); });
}

// Limits as text ("64MiB", "64 MB", "50%", bytes; NULL leaves one
// unchanged: Note [Limits as text]). Any time. Returns 0 or -1.
GCP_EXPORT int gcp_torch_set_limits_text(int device, const char* soft, const char* hard) {
  return guarded([&] {
    device_allocator& a = *slot(device).alloc;
    const size_t h = limit_bytes(a, hard, "hard_limit"), s = limit_bytes(a, soft, "soft_limit");
    return set_limits_on(a, s, h);
  });
}

GCP_EXPORT const char* gcp_torch_last_error(void) { return t_error.c_str(); }
