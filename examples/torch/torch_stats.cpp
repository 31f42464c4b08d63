// torch_stats.cpp — what libgcpressure_torch.so reports, and its test
// support: the stats as one JSON object (gcp_torch_stats_json: settings,
// entry-point counters, the CPython side, the profile, graph pools, the
// policy and every device's allocator), a device's usage and peaks, and the
// entry points only the CPU ctests call (a host stream handle, the native
// threads self-test).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gcpressure/config.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/json.hpp"
#include "gcpressure/policy.hpp"
#include "torch_profile.hpp"
#include "torch_shim.hpp"
#include "torch_state.hpp"

using namespace gcpressure;
using namespace gcp_torch;

namespace {

const char* capture_check_name(capture_check_mode m) {
  return m == capture_check_mode::on ? "on" : m == capture_check_mode::announced ? "announced" : "off";
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
     << ",\"gen1_every\":" << s.gen1_every << ",\"refreeze\":" << s.refreeze << ",\"handoff\":\"" << (s.pending_handoff ? "pending" : "helper")
     << "\",\"oom\":\"" << (s.oom_null ? "null" : "throw") << "\",\"capture_check\":"
     << "\"" << capture_check_name(s.capture_check) << "\"},";
  os << "\"entries\":{\"alloc_calls\":" << u(c.alloc_calls) << ",\"free_calls\":" << u(c.free_calls)
     << ",\"zero_size\":" << u(c.zero_size) << ",\"ooms\":" << u(c.ooms) << ",\"oom_retries\":" << u(c.oom_retries) << ",\"errors\":" << u(c.errors)
     << ",\"entries_with_gil\":" << u(c.entries_with_gil) << ",\"gil_released\":" << u(c.gil_released)
     << ",\"gil_released_for_wait\":" << u(c.gil_released_for_wait) << "},";
  os << "\"python\":{\"requested_minor\":" << u(c.requested_minor) << ",\"requested_full\":" << u(c.requested_full)
     << ",\"requested_gen\":[" << u(c.requested_gen[0]) << "," << u(c.requested_gen[1]) << ","
     << u(c.requested_gen[2]) << "],\"direct\":" << u(c.direct) << ",\"handed_off\":" << u(c.handed_off)
     << ",\"pending_calls\":" << u(c.pending_calls) << ",\"helper_batches\":" << u(c.helper_batches) << ",\"nudges\":" << u(c.nudges)
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
     << ",\"cost_young_us\":" << collection_cost(false) * 1e6 << ",\"cost_whole_us\":" << collection_cost(true) * 1e6
     << ",\"hook_installed\":" << (gc_hook_installed() ? "true" : "false");
  const refreeze_counts rf = refreeze_stats();  // Note [Freezing again after the heap grew]
  os << ",\"refreeze\":{\"allowed\":" << rf.allowed << ",\"done\":" << rf.done << ",\"declined\":" << rf.declined
     << ",\"objects\":" << rf.objects << ",\"live_bytes\":" << rf.live_bytes << "}},";
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
  // Each framework's bytes per device (Note [Frameworks share the devices]).
  os << "],\"clients\":[";
  first = true;
  for (int d = 0; d < k_max_devices; ++d) {
    device_slot* sl = existing(d);
    if (!sl) continue;
    os << (first ? "" : ",") << "{\"device\":" << d;
    for (int k = 0; k < k_clients; ++k) {
      const client_counters& cc = sl->clients[static_cast<std::size_t>(k)];
      os << ",\"" << k_client_names[k] << "\":{\"live_bytes\":" << u(cc.live) << ",\"peak_live_bytes\":" << u(cc.peak)
         << ",\"allocations\":" << u(cc.allocations) << ",\"frees\":" << u(cc.frees) << "}";
    }
    os << "}";
    first = false;
  }
  os << "]}";
  return os.str();
}

}  // namespace

// --- the exported C functions ---------------------------------------------------------

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

GCP_EXPORT int gcp_torch_usage(int device, size_t* live, size_t* reserved) {
  device_slot* s = existing(device);
  if (live) *live = s ? s->alloc->live_bytes() : 0;
  if (reserved) *reserved = s ? s->alloc->reserved_bytes() : 0;
  return 0;
}

GCP_EXPORT int gcp_torch_reset_peaks(int device) {
  if (device_slot* s = existing(device)) {
    s->alloc->reset_peaks();
    for (client_counters& cc : s->clients) cc.peak.store(cc.live.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  return 0;
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
