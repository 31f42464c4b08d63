// torch_state.hpp — the per-process state of libgcpressure_torch.so
// (internal): the settings and the devices' slots behind the one mutex,
// how the entry points find or make a device's slot, and how they turn an
// exception into -1 and a message. Shared by the files that hold the entry
// points: gcpressure_torch.cpp (the slots, allocation and the per-device
// calls), torch_options.cpp (settings and set-up), torch_stats.cpp (stats and
// test support).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"
#include "torch_graphs.hpp"
#include "torch_shim.hpp"

#define GCP_EXPORT extern "C" __attribute__((visibility("default")))

// The two allocation entry points (gcpressure_torch.cpp); the native
// self-test (torch_stats.cpp) calls them.
GCP_EXPORT void* gcp_torch_alloc(std::size_t size, int device, void* stream);
GCP_EXPORT void gcp_torch_free(void* ptr, std::size_t size, int device, void* stream);

namespace gcp_torch {

using capture_check_mode = settings::capture_check_mode;

constexpr int k_max_devices = 64;

// Note [Frameworks share the devices] (torch_clients.cpp): the frameworks
// that allocate through this library, each counted apart on every device;
// index 0 is PyTorch's entry points (gcp_torch_alloc / gcp_torch_free).
constexpr const char* k_client_names[] = {"torch", "cupy", "numba", "python"};
constexpr int k_clients = static_cast<int>(sizeof k_client_names / sizeof k_client_names[0]);

// One framework's bytes on one device. Lock-free; any thread.
struct client_counters {
  std::atomic<std::uint64_t> live{0}, peak{0}, allocations{0}, frees{0};
  void on_alloc(std::size_t n) noexcept;
  void on_free(std::size_t n) noexcept;
};

// One device: its allocator and what goes with it (made by slot(), Note
// [Devices join the policy] in gcpressure_torch.cpp).
struct device_slot {
  std::unique_ptr<gcpressure::device_allocator> alloc;
  gcpressure::gc_policy* policy = nullptr;  // the process's one policy (globals::policy)
  std::unique_ptr<hook_gate> gate;          // the allocator's hook: the policy, off during captures
  std::unique_ptr<graph_memory> graphs;     // Note [Graph capture]
  capture_check_mode capture_check = capture_check_mode::on;
  std::array<client_counters, k_clients> clients{};  // Note [Frameworks share the devices]
};

struct globals {
  std::mutex mu;  // settings and device creation; never held while waiting for the GIL
  settings s;
  bool configured = false;
  std::array<std::atomic<device_slot*>, k_max_devices> devices{};
  gcpressure::collector* collector = nullptr;  // CPython's (torch_python.cpp), made with the first device
  gcpressure::gc_policy* policy = nullptr;  // every device's (Note [Devices join the policy]), made with the first; leaked
};

inline globals& G() {
  static globals* g = new globals();  // leaked: Note [Finalization]
  return *g;
}

// --- torch_options.cpp: the settings ---

// Reads the GCPRESSURE_* variables (and GCPRESSURE_TORCH_OOM) into G().s
// once. G().mu held.
void ensure_configured_locked(globals& g);
// The oom setting (Note [Out of memory]). Takes G().mu.
bool oom_null();

// --- gcpressure_torch.cpp: the devices ---

// CPython's collector, made (and configured) on first use. G().mu held.
gcpressure::collector& collector_locked(globals& g);
// Device `device`'s slot, made (and joined to the policy) on first use.
// Throws on a device index out of range.
device_slot& slot(int device);
// Whether `s`'s allocator has joined the policy yet.
bool joined(const device_slot& s) noexcept;

// gcpressure_torch.cpp: allocation and free for framework `client` (an index
// of k_client_names; the exported entry points are client 0). alloc: NULL on
// failure with last_error() set (nothrow) or throws std::runtime_error.
void* alloc_for(std::size_t size, int device, void* stream, int client, bool nothrow);
void free_for(void* ptr, std::size_t size, int device, void* stream, int client);

// Device `device`'s slot if it has allocated, else null (and for an index
// out of range).
inline device_slot* existing(int device) {
  if (device < 0 || device >= k_max_devices) return nullptr;
  return G().devices[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

// Note [Errors at a C boundary] (gcpressure/error.hpp): -1 and the message.
template <class F>
int guarded(F&& f) noexcept {
  return gcpressure::detail::call_at_c_boundary(std::forward<F>(f), [](const gcpressure::detail::caught_error& e) {
    C().errors.fetch_add(1);
    return fail(e.message);
  });
}

}  // namespace gcp_torch
