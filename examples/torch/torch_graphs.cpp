// Graph pools for CUDA graph capture (Note [Graph capture] in torch_graphs.hpp)
// and the profile counters (Note [Where the microseconds go]).
#include "torch_graphs.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "torch_profile.hpp"

namespace gcp_torch {

using namespace gcpressure;

// --- profile -----------------------------------------------------------------------

bool profile::on() noexcept {
  static const bool enabled = [] {
    const char* v = std::getenv("GCP_TORCH_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

profile& P() noexcept {
  static profile* p = new profile();  // leaked: frees run from static destructors
  return *p;
}

std::string profile::json() const {
  static const char* const names[] = {"alloc", "free", "capture_check", "entry_guard", "policy_hook",
                                      "allocate_core"};
  std::ostringstream os;
  os << "{\"enabled\":" << (on() ? "true" : "false");
  for (int i = 0; i < static_cast<int>(prof_site::count); ++i)
    os << ",\"" << names[i] << "\":{\"calls\":" << calls[i].load() << ",\"ns\":" << ns[i].load() << "}";
  os << "}";
  return os.str();
}

// --- the graph pools' upstream ----------------------------------------------------

namespace {

// Stream ops under which no event ever completes and none touches CUDA: a
// graph pool reuses a block only on the stream that freed it (no query, no
// synchronisation during a capture). Its pools never call wait_pending.
class never_ready_ops final : public stream_ops {
 public:
  event_ref record(stream_ref) override { return this; }
  bool query(event_ref) override { return false; }
  void synchronize(event_ref) override {}
  void release(event_ref) noexcept override {}
};

never_ready_ops& never_ready() noexcept {
  static never_ready_ops* ops = new never_ready_ops();
  return *ops;
}

}  // namespace

// cudaMalloc in relaxed capture mode (host memory on the host backend), within
// the device's hard limit counted with the main pool's reserved bytes. It
// remembers its segments: a pool destroyed with blocks freed on several
// streams (never coalesced: no event completes) leaves segments that the
// destructor returns.
class graph_upstream final : public device_resource {
 public:
  explicit graph_upstream(graph_memory& g) : g_(g) {
    if (g.host_) real_ = std::make_unique<host_resource>(std::size_t{1} << 40);
    else real_ = std::make_unique<cuda_resource>(g.device_);
  }
  ~graph_upstream() override {
    for (auto& [p, bytes] : segs_) give_back(p, bytes);
  }

 private:
  void* do_allocate(std::size_t bytes, stream_ref) override {
    const std::size_t limit = g_.main_.hard_limit();
    const std::size_t used = g_.main_.reserved_bytes() + g_.reserved_.load();
    if (used + bytes > limit) {
      throw out_of_memory("gcpressure_torch: a CUDA graph capture needs " + format_bytes(bytes) + " more; " +
                          format_bytes(used) + " of the " + format_bytes(limit) +
                          " hard limit are reserved (main pool and graph pools), and no collection can run "
                          "during a capture");
    }
    void* p;
    {
      cuda_relaxed_capture_scope relaxed;
      p = real_->allocate(bytes);
    }
    try {
      std::lock_guard<std::mutex> lk(mu_);
      segs_.emplace(p, bytes);
    } catch (...) {
      real_->deallocate(p, bytes);
      throw out_of_memory("gcpressure_torch: no host memory for graph pool bookkeeping");
    }
    g_.reserved_.fetch_add(bytes);
    g_.note_range(p, bytes);
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, stream_ref) noexcept override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      segs_.erase(p);
    }
    give_back(p, bytes);
  }
  // cudaFree: only when a released pool is destroyed, never during a capture.
  void give_back(void* p, std::size_t bytes) noexcept {
    real_->deallocate(p, bytes);
    g_.reserved_.fetch_sub(bytes);
  }
  device_memory_info do_memory_info() const override { return real_->memory_info(); }
  stream_ops& do_streams() noexcept override { return never_ready(); }
  const char* do_name() const noexcept override { return "graph_pool"; }

  graph_memory& g_;
  std::unique_ptr<device_resource> real_;
  std::mutex mu_;
  std::unordered_map<void*, std::size_t> segs_;
};

struct graph_memory::graph_pool {
  pool_key key;
  bool anonymous = false;
  int users = 0;          // captures announced into it whose graphs are alive
  bool released = false;  // every user released
  std::unique_ptr<graph_upstream> up;
  std::unique_ptr<pool_resource> pool;
};

// --- graph_memory ------------------------------------------------------------------

std::atomic<int>& graph_memory::active_captures() noexcept {
  static std::atomic<int> n{0};
  return n;
}

graph_memory::graph_memory(device_allocator& main, int device, bool host) : main_(main), device_(device), host_(host) {}

// Pools with live blocks are leaked with the process (Note [Finalization]);
// the shim never destroys a graph_memory before exit.
graph_memory::~graph_memory() = default;

std::uint64_t graph_memory::capture_id(stream_ref s) const noexcept {
  if (test_stream_.load(std::memory_order_relaxed) == s && s != nullptr) return test_id_.load();
  return host_ ? 0 : cuda_stream_capture_id(s);
}

void graph_memory::set_test_capture(stream_ref s, std::uint64_t id) {
  test_id_.store(id);
  test_stream_.store(s);
}

graph_memory::graph_pool& graph_memory::pool_for_locked(std::uint64_t capture) {
  auto it = by_capture_.find(capture);
  if (it != by_capture_.end()) return *it->second;
  // Nobody announced this capture: an anonymous pool, never released.
  auto gp = std::make_unique<graph_pool>();
  gp->key = {~std::uint64_t{0}, next_anonymous_++};
  gp->anonymous = true;
  gp->up = std::make_unique<graph_upstream>(*this);
  gp->pool = std::make_unique<pool_resource>(*gp->up);
  graph_pool* p = gp.get();
  pools_.emplace(gp->key, std::move(gp));
  by_capture_.emplace(capture, p);
  npools_.store(static_cast<int>(pools_.size()));
  ++captures_anonymous_;
  return *p;
}

void* graph_memory::allocate(std::size_t bytes, stream_ref s, std::uint64_t capture) {
  std::lock_guard<std::mutex> lk(mu_);
  graph_pool& gp = pool_for_locked(capture);
  void* p = gp.pool->allocate(bytes, s);
  ++allocations_;
  return p;
}

void graph_memory::note_range(const void* p, std::size_t bytes) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uintptr_t lo = lo_.load();
  while (a < lo && !lo_.compare_exchange_weak(lo, a)) {
  }
  std::uintptr_t hi = hi_.load();
  while (a + bytes > hi && !hi_.compare_exchange_weak(hi, a + bytes)) {
  }
}

bool graph_memory::deallocate(void* p, std::size_t bytes, stream_ref s) noexcept {
  if (npools_.load(std::memory_order_acquire) == 0) return false;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  // A graph block was allocated (and its range noted) before it can be freed.
  if (a < lo_.load(std::memory_order_acquire) || a >= hi_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [key, gp] : pools_) {
    if (!gp->pool->owns_live(p)) continue;
    gp->pool->deallocate(p, bytes, s);
    return true;
  }
  return false;
}

bool graph_memory::begin(stream_ref s, pool_key& key) {
  const std::uint64_t capture = capture_id(s);
  if (capture == 0) return false;
  std::lock_guard<std::mutex> lk(mu_);
  if (key == pool_key{0, 0}) key = {~std::uint64_t{0} - 1, next_anonymous_++};  // a pool of its own
  auto it = pools_.find(key);
  if (it == pools_.end()) {
    auto gp = std::make_unique<graph_pool>();
    gp->key = key;
    gp->up = std::make_unique<graph_upstream>(*this);
    gp->pool = std::make_unique<pool_resource>(*gp->up);
    it = pools_.emplace(key, std::move(gp)).first;
    npools_.store(static_cast<int>(pools_.size()));
  }
  it->second->users++;
  it->second->released = false;
  by_capture_[capture] = it->second.get();
  ++captures_announced_;
  active_captures().fetch_add(1);
  return true;
}

void graph_memory::end(stream_ref s) {
  const std::uint64_t capture = capture_id(s);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = by_capture_.find(capture);
  if (capture == 0 || it == by_capture_.end() || it->second->anonymous) return;
  by_capture_.erase(it);
  active_captures().fetch_sub(1);
}

void graph_memory::release(pool_key key) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = pools_.find(key);
  if (it == pools_.end() || it->second->anonymous) return;
  if (it->second->users > 0 && --it->second->users == 0) it->second->released = true;
  release_retired_locked();
}

std::size_t graph_memory::release_retired() {
  std::lock_guard<std::mutex> lk(mu_);
  return release_retired_locked();
}

std::size_t graph_memory::release_retired_locked() {
  if (active_captures().load() > 0) return 0;  // cudaFree synchronises the device
  std::size_t freed = 0;
  for (auto it = pools_.begin(); it != pools_.end();) {
    graph_pool& gp = *it->second;
    bool mapped = false;
    for (auto& [c, p] : by_capture_) mapped = mapped || p == &gp;
    if (!gp.released || mapped || gp.pool->counters().live_blocks != 0) {
      ++it;
      continue;
    }
    const std::size_t before = reserved_.load();
    it = pools_.erase(it);  // the pool, then its upstream: every segment goes back
    const std::size_t bytes = before - reserved_.load();
    freed += bytes;
    bytes_released_ += bytes;
    ++pools_released_;
  }
  npools_.store(static_cast<int>(pools_.size()));
  return freed;
}

std::string graph_memory::stats_json() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::size_t live = 0, live_blocks = 0;
  for (auto& [key, gp] : pools_) {
    const pool_counters c = gp->pool->counters();
    live += c.requested;
    live_blocks += c.live_blocks;
  }
  std::ostringstream os;
  os << "{\"device\":" << device_ << ",\"pools\":" << pools_.size() << ",\"reserved\":" << reserved_.load()
     << ",\"live\":" << live << ",\"live_blocks\":" << live_blocks << ",\"allocations\":" << allocations_
     << ",\"captures_announced\":" << captures_announced_ << ",\"captures_anonymous\":" << captures_anonymous_
     << ",\"running_captures\":" << by_capture_.size() << ",\"pools_released\":" << pools_released_
     << ",\"bytes_released\":" << bytes_released_ << "}";
  return os.str();
}

// --- hook_gate -----------------------------------------------------------------------

void hook_gate::before_allocate(device_allocator& a, std::size_t bytes, stream_ref s) {
  if (graph_memory::active_captures().load(std::memory_order_relaxed) > 0) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  prof_scope t(prof_site::policy_hook);
  static_cast<allocation_hook&>(policy_).before_allocate(a, bytes, s);
}

bool hook_gate::reclaim(device_allocator& a, ladder_step step) {
  if (graph_memory::active_captures().load() > 0) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return policy_.reclaim(a, step);
}

}  // namespace gcp_torch
