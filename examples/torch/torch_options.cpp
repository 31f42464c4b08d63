// torch_options.cpp — the settings of libgcpressure_torch.so: read once from
// the GCPRESSURE_* variables (ensure_configured_locked), then changed through
// the set-up entry points gcp_torch_init and gcp_torch_set_option (their
// parsing and checks), and gcp_torch_attach_python / gcp_torch_python_shutdown,
// which attach the library to the interpreter and detach it at exit. The
// state they write is torch_state.hpp's globals; the CPython side they
// configure is torch_python.cpp.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "gcpressure/config.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/policy.hpp"
#include "torch_shim.hpp"
#include "torch_state.hpp"

using namespace gcpressure;
using namespace gcp_torch;

namespace gcp_torch {

void ensure_configured_locked(globals& g) {
  if (g.configured) return;
  g.s.cfg = config_from_env(g.s.cfg);
  if (g.s.cfg.backend == backend_choice::automatic) g.s.cfg.backend = backend_choice::cuda_async;
  if (const char* v = std::getenv("GCPRESSURE_TORCH_OOM")) g.s.oom_null = std::strcmp(v, "null") == 0;
  g.configured = true;
}

bool oom_null() {
  globals& g = G();
  std::lock_guard<std::mutex> lk(g.mu);
  ensure_configured_locked(g);
  return g.s.oom_null;
}

}  // namespace gcp_torch

// --- the exported C functions ---------------------------------------------------------

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
    // The options table's parsers: the messages of the GCPRESSURE_* variables.
    if (backend) set_option(s.cfg, "backend", backend);
    if (s.cfg.backend == backend_choice::automatic)
      s.cfg.backend = cuda_available() ? backend_choice::cuda_async : backend_choice::host;
    if (soft_limit) set_option(s.cfg, "soft_limit", soft_limit);
    if (hard_limit) set_option(s.cfg, "hard_limit", hard_limit);
    if (policy) set_option(s.cfg, "policy", policy);
    if (gc_budget != 0) {  // 0: unset
      char text[40];
      std::snprintf(text, sizeof text, "%.17g", gc_budget);
      set_option(s.cfg, "gc_budget", text);
    }
    if ((s.cfg.backend == backend_choice::cuda || s.cfg.backend == backend_choice::cuda_async) && !cuda_available())
      return fail(no_cuda_device_message("backend"));
    g.s = s;
    if (g.collector) configure_python_collector(g.s);
    return 0;
  });
}

// Options outside gcp_torch_init (before the first allocation, except "oom"):
//   gil_wait       seconds a handed-off collection is waited for (default 1)
//   minor_generation  "auto" (default: a whole-heap gc.collect() while it costs about what a young
//                  one does, else 0, and 1 every gen1_every-th: Note [Choosing the minor's
//                  generation] in torch_python.cpp), "0", "1", "2" (every minor is a whole-heap
//                  gc.collect(): Note [A minor promotes the owner it runs beside])
//   gen1_every     see above (default 4)
//   refreeze       with auto minors, at most this many gc.freeze() of a long-lived heap that grew
//                  after install (default 2; Note [Freezing again after the heap grew] in
//                  torch_refreeze.cpp); 0: never
//   handoff        "helper" (default) or "pending" (Py_AddPendingCall)
//   oom            "throw" (default) or "null"  (Note [Out of memory])
//   every_n, verbose, host_capacity, pool, ... any option of the options
//                  table (config.hpp), parsed as its GCPRESSURE_* variable is
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
    if (find_option(k)) {
      set_option(g.s.cfg, k, v);  // a row of the options table: its parser, its message
    } else if (k == "gil_wait") {
      g.s.gil_wait = std::stod(v);
      if (!(g.s.gil_wait >= 0 && g.s.gil_wait <= 600)) return fail("gcp_torch_set_option: gil_wait in [0, 600] s");
    } else if (k == "holder_grace") {
      g.s.holder_grace = std::stod(v);
    } else if (k == "minor_generation") {
      if (v == "auto") g.s.minor_generation = -1;
      else if (v == "0" || v == "1" || v == "2") g.s.minor_generation = v[0] - '0';
      else return fail("gcp_torch_set_option: minor_generation must be auto, 0, 1 or 2");
    } else if (k == "gen1_every") {
      g.s.gen1_every = std::stoi(v);
      if (g.s.gen1_every < 1) return fail("gcp_torch_set_option: gen1_every must be >= 1");
    } else if (k == "refreeze") {
      g.s.refreeze = std::stoi(v);
      if (g.s.refreeze < 0) return fail("gcp_torch_set_option: refreeze must be >= 0");
    } else if (k == "handoff") {
      if (v != "helper" && v != "pending") return fail("gcp_torch_set_option: handoff must be helper or pending");
      g.s.pending_handoff = v == "pending";
    } else if (k == "capture_check") {
      if (v == "on") g.s.capture_check = capture_check_mode::on;
      else if (v == "announced") g.s.capture_check = capture_check_mode::announced;
      else if (v == "off") g.s.capture_check = capture_check_mode::off;
      else return fail("gcp_torch_set_option: capture_check must be on, announced or off");
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
