// Baseline policies, selectable like "pressure" so that one benchmark run
// compares them. Each one rebuilds a published heuristic decision by
// decision; the comments cite the source file and function of every decision
// and say where this library cannot do exactly the same.
//
// Note [Baselines take deltas]
// A runtime collector's counters are process-global (Boehm's GC_get_gc_no,
// its full-collection count, its timings): a benchmark that runs several
// cases in one process sees the collections of earlier cases. A baseline
// therefore reads collector counters only as differences from what it saw
// at its creation or at its previous call, never as absolute counts; its own
// state (CUDA.jl's MemoryStats, .NET's pressure slots) starts fresh with the
// policy, as it would in a fresh process.
//
// Note [Baselines and the synchronize hint]
// gc_policy::synchronize() calls before_block() only while the device is
// still busy. CUDA.jl overrides it (maybe_collect(true) before a blocking
// wait, its own behaviour). The others keep the default, quiet_moment(true),
// which each of them defines: at_limit, every_iteration and explicit_free do
// nothing there, dotnet advances a background gen-2 in progress by a slice.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"

namespace gcpressure {

std::unique_ptr<gc_policy> make_pressure_policy(const std::vector<device_allocator*>& devices, collector& c,
                                                policy_options o);

namespace {

constexpr double k_never = -std::numeric_limits<double>::infinity();

// Collect only when an allocation fails: the library's reclaim ladder does it
// all (gc_policy::reclaim: finish a cycle or a minor, then blocking fulls).
// This is CUDA.jl with JULIA_CUDA_GC_EARLY=false (maybe_collect returns at
// once; only retry_reclaim collects, though in its own order, which the
// cudajl policy follows) and Java's direct byte buffers
// (java.nio.Bits.reserveMemory: System.gc() only once the direct-memory
// limit is reached). Quiet moments and syncs: nothing.
class at_limit_policy final : public gc_policy {
 public:
  using gc_policy::gc_policy;
  const char* name() const noexcept override { return "at_limit"; }
  void before_allocate(device_allocator&, std::size_t, stream_ref) override {}
};

// The usual user workaround: a blocking full collection every N iterations
// (iteration()), or every N allocations with every_n_allocations. Other
// quiet moments and syncs do nothing; failures run the library's ladder.
class every_iteration_policy final : public gc_policy {
 public:
  using gc_policy::gc_policy;
  const char* name() const noexcept override { return "every_iteration"; }
  void before_allocate(device_allocator&, std::size_t, stream_ref) override {
    if (!opts_.every_n_allocations) return;
    if (++count_ % static_cast<std::uint64_t>(opts_.every_n) == 0) run_collection(gc_kind::blocking_full, gc_reason::baseline);
  }
  void iteration() override {
    if (opts_.every_n_allocations) return;
    if (++count_ % static_cast<std::uint64_t>(opts_.every_n) == 0) run_collection(gc_kind::blocking_full, gc_reason::baseline);
  }
  void quiet_moment(bool) override {}

 private:
  std::atomic<std::uint64_t> count_{0};
};

// --- cudajl ----------------------------------------------------------------------
//
// Note [CUDA.jl's maybe_collect]
// Source: JuliaGPU/CUDA.jl, CUDACore/src/memory.jl (src/memory.jl before
// the split into CUDACore), `maybe_collect(will_block::Bool=false)`, called
// by `pool_alloc` before every allocation and with will_block=true by
// `synchronize_object` when the stream is not done yet (CUDACore/src/
// synchronization.jl: "if we're about to wait, now may be a good time for a
// GC pause"). Decision by decision:
//  1. size: re-estimated when `current_time - stats.size_updated > 10`
//     seconds (so on the first call): the hard limit if set
//     (JULIA_CUDA_HARD_MEMORY_LIMIT), else the soft limit if set
//     (JULIA_CUDA_SOFT_MEMORY_LIMIT), else `free_memory() + stats.live`
//     plus the pool's cached-but-unused bytes (`cached_memory() -
//     used_memory()`). Here: hard limit set = the allocator's hard limit
//     differs from the device total; soft limit set = policy_options::
//     soft_limit_set (the allocator always has a soft limit, 75% of the hard
//     one by default, so it cannot tell); cached = reserved - allocated.
//  2. pressure = live / size, live = bytes allocated and not yet freed. It
//     excludes the request (pool_alloc accounts it after allocating). Frees
//     queued by finalizers count as freed: CUDA.jl v5's finalizers free at
//     once (`pool_free` -> `account!`), ours queue the block until a drain.
//  3. min_pressure = 0.75, 0.50 when will_block; below it, return.
//  4. gc_rate = last_gc_time / (current_time - last_time), where
//     last_gc_time is an EMA (0.75 old + 0.25 new) of `@elapsed GC.gc(false)`
//     (collection + finalizers; here + the drain).
//  5. max_gc_rate = 0.05 (a constant there, so not policy_options::gc_budget),
//     x2 if `last_freed > 0.1*size`, x2 if will_block, x2 if pressure > 0.90,
//     x2 if pressure > 0.95; return if gc_rate > max_gc_rate.
//  6. `last_time = current_time` is stamped BEFORE the collection, so the
//     next rate's denominator includes this collection's own time.
//  7. GC.gc(false): an incremental (young) collection -> gc_kind::minor;
//     last_freed = live before - live after.
// Several devices: CUDA.jl keeps this state per device (`memory_stats(dev::
// CuDevice=device())` over `PerDevice{MemoryStats}`), and maybe_collect
// reads the current device's, the one allocating or synchronizing; here the
// allocation's or the synchronize's device. A hint without a device
// (quiet_moment) checks every device in turn. last_freed is what the
// collection freed on that device.
// Not reproduced: the host/unified-memory pool that competes for "dominant"
// (no unified memory here), and the race between Julia tasks that may both
// collect: here a thread that finds another collecting skips the check.
class cudajl_policy final : public gc_policy {
 public:
  cudajl_policy(const std::vector<device_allocator*>& d, collector& c, policy_options o)
      : gc_policy(d, c, o), stats_(detail::device_list::capacity) {
    for (auto& s : stats_) s.last_time = now();
  }
  const char* name() const noexcept override { return "cudajl"; }
  void before_allocate(device_allocator& a, std::size_t, stream_ref) override { maybe_collect(a, false); }
  void quiet_moment(bool will_block) override {
    for (std::size_t i = 0, n = device_count(); i < n; ++i) maybe_collect(device(i), will_block);
  }
  // CUDA.jl sees no iteration boundaries; a loop's blocking syncs reach it
  // through synchronize() (before_block).
  void iteration() override {}
  bool reclaim(device_allocator& a, ladder_step step) override;

 protected:
  void before_block(device_allocator& on, const std::function<bool()>&) override { maybe_collect(on, true); }
  void device_added(std::size_t i) override { stats_[i].last_time = now(); }

 private:
  struct memory_stats {  // CUDA.jl's MemoryStats, one per device
    double size = 0;
    double size_updated = k_never;
    double last_time = 0;
    double last_gc_time = 0;  // EMA of collection seconds
    double last_freed = 0;
  };
  void maybe_collect(device_allocator& a, bool will_block);
  static double live(const device_allocator& a);
  double estimate_size(const device_allocator& a) const;

  std::vector<memory_stats> stats_;  // guarded by collect_mu_
};

double cudajl_policy::live(const device_allocator& a) {
  const std::size_t live = a.live_bytes();
  const std::size_t queued = a.deferred().pending_bytes();
  return static_cast<double>(live > queued ? live - queued : 0);
}

double cudajl_policy::estimate_size(const device_allocator& a) const {
  const allocator_stats s = a.stats();  // limits, device memory and the pool cache, once
  if (s.hard_limit != s.device_memory.total) return static_cast<double>(s.hard_limit);
  if (opts_.soft_limit_set) return static_cast<double>(s.soft_limit);
  return static_cast<double>(s.device_memory.free) + live(a) + static_cast<double>(s.cached);
}

void cudajl_policy::maybe_collect(device_allocator& a, bool will_block) {
  std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
  if (!lk.owns_lock()) return;
  const std::size_t dev = device_index(a);
  if (dev == device_count()) return;
  memory_stats& stats = stats_[dev];
  const double current_time = now();
  if (current_time - stats.size_updated > 10) {  // 1.
    stats.size = estimate_size(a);
    stats.size_updated = current_time;
  }
  const double pressure = stats.size > 0 ? live(a) / stats.size : 0;  // 2.
  if (pressure < (will_block ? 0.50 : 0.75)) return;                  // 3.
  // 4. Julia: 0/0 is NaN and `NaN > max` is false, so with no collection
  // yet (last_gc_time 0) the rate never blocks; x/0 is Inf and blocks.
  const double since = current_time - stats.last_time;
  const double gc_rate =
      stats.last_gc_time == 0 ? 0 : since > 0 ? stats.last_gc_time / since : std::numeric_limits<double>::infinity();
  double max_gc_rate = 0.05;  // 5.
  if (stats.last_freed > 0.1 * stats.size) max_gc_rate *= 2;
  if (will_block) max_gc_rate *= 2;
  if (pressure > 0.90) max_gc_rate *= 2;
  if (pressure > 0.95) max_gc_rate *= 2;
  if (gc_rate > max_gc_rate) return;
  stats.last_time = current_time;  // 6.
  const outcome o = run_collection(gc_kind::minor, will_block ? gc_reason::quiet_moment : gc_reason::early);  // 7.
  stats.last_freed = static_cast<double>(o.devices[dev].reclaimed);
  stats.last_gc_time = 0.75 * stats.last_gc_time + 0.25 * o.seconds;
}

// Note [CUDA.jl's out-of-memory path]
// Source: CUDACore/src/memory.jl, `retry_reclaim_slow`, retrying the
// allocation after each phase. With a stream-ordered pool (cudaMallocAsync;
// here every backend but plain `cuda`): 1 synchronize(state.stream),
// 2 device_synchronize(), 3 GC.gc(false) + device_synchronize(),
// 4 GC.gc(true) + device_synchronize(), 5 trim(pool), 6 reclaim_hooks.
// Without one: GC.gc(false), GC.gc(true), hooks. The allocator's ladder
// (core/src/allocator.cpp) runs release_cache, finish_and_drain,
// wait_streams, full_collection, full_collection_2, drain, trim, retrying
// after each step that did something, and hands the three collector steps
// to this hook. Mapped in order:
//  - release_cache (allocator): no CUDA.jl phase; CUDA's own pool reuses
//    its cached memory implicitly, ours returns idle segments first.
//  - finish_and_drain, the first hook step of every ladder run: phases 1+2,
//    waiting for the streams that hold pending frees (wait_pending); if that
//    waited for something, the allocation is retried. If nothing was
//    pending, phases 1+2 could not have helped and phase 3 runs at once.
//  - the next hook steps (full_collection, full_collection_2) run the next
//    phase not yet run: 3 (minor + wait_pending), then 4 (blocking full +
//    wait_pending), then nothing (CUDA.jl collects at most twice).
//  - drain, trim (allocator): phase 5. Phase 6 has no counterpart.
// The phase reached is per thread: two threads' ladders do not share it.
struct ladder_progress {
  const void* owner = nullptr;
  int next_phase = 0;
};
thread_local ladder_progress t_cudajl_ladder;

bool cudajl_policy::reclaim(device_allocator& a, ladder_step step) {
  const bool stream_ordered = a.backend() != backend_kind::cuda;
  auto& lp = t_cudajl_ladder;
  if (step == ladder_step::finish_and_drain || lp.owner != this) lp = {this, stream_ordered ? 1 : 3};
  switch (step) {
    case ladder_step::finish_and_drain:
    case ladder_step::full_collection:
    case ladder_step::full_collection_2: break;
    default: return false;
  }
  if (lp.next_phase == 1) {
    lp.next_phase = 3;
    if (a.wait_pending() > 0) return true;
  }
  if (lp.next_phase == 3 || lp.next_phase == 4) {
    const gc_kind kind = lp.next_phase == 3 ? gc_kind::minor : gc_kind::blocking_full;
    ++lp.next_phase;
    run_collection(kind, gc_reason::ladder);
    if (stream_ordered) a.wait_pending();
    return true;
  }
  return false;
}

// --- dotnet ----------------------------------------------------------------------
//
// Note [.NET's AddMemoryPressure]
// Source: dotnet/runtime, src/coreclr/vm/comutilnative.cpp,
// GCInterface::AddMemoryPressure, RemoveMemoryPressure,
// CheckCollectionCount and GarbageCollectModeAny (the managed
// GC.AddMemoryPressure calls them; older runtimes had the same algorithm as
// NewAddMemoryPressure). Constants: MIN_MEMORYPRESSURE_BUDGET = 4 MB (64-bit),
// MAX_MEMORYPRESSURE_RATIO = 10, MEM_PRESSURE_COUNT = 4 slots. Here every
// allocation is an AddMemoryPressure(bytes) and every free a
// RemoveMemoryPressure(bytes); frees are seen as the allocator's live bytes
// falling between two calls. Decision by decision:
//  1. CheckCollectionCount: if gen-2 collections happened since the last
//     look (ANY cause: the runtime's own, the ladder's, ours), m_iteration++
//     (once, however many) and the slot m_iteration % 4 is cleared.
//  2. add[p] += bytes -> newMemValue; add/rem = sums of the other 3 slots.
//  3. Only if newMemValue >= 4 MB: budget = 4 MB; once m_iteration >= 4,
//     budget = 40 MB if add >= rem * 10 (also when both are 0), else
//     (add * 1024 / rem) * budget / 1024 if add > rem (integer arithmetic).
//  4. If still over: budget = max(budget, GetCurrentObjSize() / 3), the
//     managed heap -> collector_counters::heap_bytes.
//  5. If still over: only if GetNow() - GetLastGCStartTime(2) >
//     GetLastGCDuration(2) * 5 ("20% of GC duty cycle").
//  6. GarbageCollectModeAny(2) = GarbageCollect(2, false,
//     collection_non_blocking): a background gen-2. Here: a whole-heap
//     cycle started with one slice (step_full_cycle), advanced one slice per
//     later allocation or hint until it completes; never collect_full.
//     .NET then calls CheckCollectionCount at once, after the background
//     GC has started (gc.cpp do_background_gc waits for that); we take the
//     gen-2 count to have risen by then (counts rise when a GC starts), so
//     the slot rotates at the start, and its completion is not counted
//     again. (Had the count not risen yet, .NET would rotate at the first
//     call after it does: the same slots, one boundary later.)
// Timing of gen-2s (5.): ours start when induced; their duration is the
// time spent in their slices and finalizers. A background GC's duration is
// its elapsed time, but it runs on its own thread as fast as it can, so its
// elapsed time is its work; our cycle's span from start to last slice would
// add the mutator's time between slices, an artefact of our pacing (one
// slice per allocation or hint). One finished by the ladder, outside this
// policy's calls, is timed from its start to when it is noticed. A gen-2 this
// policy did not run is seen late, through the counters: its duration is
// taken as the collector seconds that passed since the previous call (all
// collections then, an upper bound when the collector times them all;
// Boehm's incremental slices are not timed, so there it may be lower) and
// its start as that long before now.
// Not reproduced: an allocation made while another thread holds the
// collection lock is not counted (.NET's counters are lock-free atomics).
class dotnet_policy final : public gc_policy {
 public:
  // .NET's memory-pressure counters are process-wide (one GC heap): with
  // several devices every device's allocations and frees go to the same slots.
  dotnet_policy(const std::vector<device_allocator*>& d, collector& c, policy_options o) : gc_policy(d, c, o) {
    const collector_counters k = c.counters();  // Note [Baselines take deltas]
    gen2_seen_ = k.full_collections;
    seconds_seen_ = k.seconds;
    last_live_ = live_all();
  }
  const char* name() const noexcept override { return "dotnet"; }
  // A device added later brings its live bytes: not a RemoveMemoryPressure.
  void device_added(std::size_t i) override { last_live_ += device(i).live_bytes(); }

  void before_allocate(device_allocator&, std::size_t bytes, stream_ref) override {
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;
    check_collection_count();
    const bool worked = advance_cycle();
    note_removals();
    if (add_memory_pressure(bytes) || worked) {
      note_removals();  // finalizers of what completed free now: the new slot's removals
      absorb_own_work();
    }
    last_live_ = live_all() + bytes;
  }

  void quiet_moment(bool) override {
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;
    check_collection_count();
    note_removals();
    if (advance_cycle()) {
      note_removals();
      absorb_own_work();
    }
  }

 private:
  static constexpr std::uint64_t k_min_budget = std::uint64_t{4} * 1024 * 1024;
  static constexpr std::uint64_t k_max_ratio = 10;
  static constexpr int k_slots = 4;

  std::size_t slot() const noexcept { return static_cast<std::size_t>(iteration_ % k_slots); }

  std::size_t live_all() const noexcept {
    std::size_t live = 0;
    for (std::size_t i = 0, n = device_count(); i < n; ++i) live += device(i).live_bytes();
    return live;
  }

  void rotate() {
    ++iteration_;
    add_[slot()] = 0;
    rem_[slot()] = 0;
  }

  // 1. Gen-2s since the previous call that this policy did not run.
  void check_collection_count() {
    const collector_counters k = gc_.counters();
    std::uint64_t seen = k.full_collections > gen2_seen_ ? k.full_collections - gen2_seen_ : 0;
    const double seconds = k.seconds > seconds_seen_ ? k.seconds - seconds_seen_ : 0;
    gen2_seen_ = k.full_collections;
    seconds_seen_ = k.seconds;
    if (cycle_running_ && !full_cycle_active()) {
      // Ours, finished outside this policy's calls (the ladder runs cycles
      // in progress to completion): its start already rotated the slot.
      cycle_running_ = false;
      gen2_duration_ = now() - gen2_start_;
      if (seen > 0) --seen;
    }
    if (seen == 0) return;
    gen2_duration_ = seconds;
    gen2_start_ = now() - seconds;
    rotate();
  }

  // RemoveMemoryPressure for the frees since the previous look.
  void note_removals() {
    const std::size_t live = live_all();
    if (live < last_live_) rem_[slot()] = saturating_add(rem_[slot()], last_live_ - live);
    last_live_ = live;
  }

  // Counters moved by this policy's own work are not someone else's gen-2.
  void absorb_own_work() {
    const collector_counters k = gc_.counters();
    gen2_seen_ = k.full_collections;
    seconds_seen_ = k.seconds;
  }

  // 6. One slice of the background gen-2 in progress. True if one ran.
  bool advance_cycle() {
    if (!cycle_running_) return false;
    outcome o;
    if (step_full_cycle(gc_reason::baseline, &o)) {
      cycle_running_ = false;
      gen2_duration_ = o.seconds;
    }
    return true;
  }

  // 2.-6. True if it induced a gen-2.
  bool add_memory_pressure(std::size_t bytes) {
    const std::uint64_t mem = add_[slot()] = saturating_add(add_[slot()], bytes);
    std::uint64_t add = 0, rem = 0;
    for (std::size_t i = 0; i < k_slots; ++i) {
      if (i == slot()) continue;
      add += add_[i];
      rem += rem_[i];
    }
    if (mem < k_min_budget) return false;  // 3.
    std::uint64_t budget = k_min_budget;
    if (iteration_ >= k_slots) {
      if (add >= rem * k_max_ratio) budget = k_min_budget * k_max_ratio;
      else if (add > rem) budget = (add * 1024 / rem) * budget / 1024;
    }
    if (mem < budget) return false;
    budget = std::max<std::uint64_t>(budget, gc_.counters().heap_bytes / 3);  // 4.
    if (mem < budget) return false;
    if (!(now() - gen2_start_ > gen2_duration_ * 5)) return false;  // 5.
    if (cycle_running_) return false;  // a background gen-2 is running: it goes on (advance_cycle)
    gen2_start_ = now();               // 6.
    cycle_running_ = true;
    rotate();
    outcome o;
    if (step_full_cycle(gc_reason::baseline, &o)) {
      cycle_running_ = false;
      gen2_duration_ = o.seconds;
    }
    return true;
  }

  static std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
    return a + b < a ? std::numeric_limits<std::uint64_t>::max() : a + b;
  }

  std::array<std::uint64_t, k_slots> add_{}, rem_{};
  std::uint64_t iteration_ = 0;
  std::uint64_t gen2_seen_ = 0;
  double seconds_seen_ = 0;
  std::size_t last_live_ = 0;
  bool cycle_running_ = false;
  double gen2_start_ = k_never;  // no gen-2 yet: the duty-cycle check passes
  double gen2_duration_ = 0;
};

// The oracle: the caller frees every block itself; this policy never asks
// for a collection, not even when an allocation fails (reclaim does
// nothing, so the ladder's collector steps are no-ops). The runtime may
// still collect on its own; those collections are counted as the runtime's.
class explicit_free_policy final : public gc_policy {
 public:
  using gc_policy::gc_policy;
  const char* name() const noexcept override { return "explicit_free"; }
  void before_allocate(device_allocator&, std::size_t, stream_ref) override {}
  bool reclaim(device_allocator&, ladder_step) override { return false; }
};

// The runtime's own mechanism as the baseline (issue 23): the library asks
// for no collection, ever (as explicit_free), and the caller does not free
// either. A binding selecting it reports each block through its runtime's
// own external-memory call instead (V8 napi_adjust_external_memory, .NET
// GC.AddMemoryPressure, Guile scm_gc_register_allocation, Lua LUA_GCSTEP,
// CPython gc.collect() every N; bdwgc has none: its own allocation pace), so
// what bounds device memory is only that runtime's rule. Its collections are
// counted as the runtime's own. The name lives here, in the one list, so
// that every binding selects it with --policy runtime_native.
class runtime_native_policy final : public gc_policy {
 public:
  using gc_policy::gc_policy;
  const char* name() const noexcept override { return "runtime_native"; }
  void before_allocate(device_allocator&, std::size_t, stream_ref) override {}
  bool reclaim(device_allocator&, ladder_step) override { return false; }
};

// The one list of policy names (help texts and name checks elsewhere should
// be built from policy_names(), not repeat it).
const char* const k_names[] = {"pressure", "at_limit", "every_iteration", "cudajl", "dotnet", "explicit_free", "runtime_native",
                            nullptr};

}  // namespace

const char* const* policy_names() noexcept { return k_names; }

bool is_policy_name(std::string_view name) noexcept {
  for (const char* const* n = k_names; *n; ++n)
    if (name == *n) return true;
  return false;
}

std::string policy_names_text(std::string_view sep, std::string_view last_sep) {
  if (last_sep.empty()) last_sep = sep;
  std::string out;
  for (const char* const* n = k_names; *n; ++n) {
    if (n != k_names) out += n[1] ? sep : last_sep;
    out += *n;
  }
  return out;
}

std::unique_ptr<gc_policy> make_policy(const std::string& name, device_allocator& a, collector& c, policy_options o) {
  return make_policy(name, std::vector<device_allocator*>{&a}, c, o);
}

std::unique_ptr<gc_policy> make_policy(const std::string& name, const std::vector<device_allocator*>& d, collector& c,
                                       policy_options o) {
  if (name == "pressure") return make_pressure_policy(d, c, o);
  if (name == "at_limit") return std::make_unique<at_limit_policy>(d, c, o);
  if (name == "every_iteration") return std::make_unique<every_iteration_policy>(d, c, o);
  if (name == "cudajl") return std::make_unique<cudajl_policy>(d, c, o);
  if (name == "dotnet") return std::make_unique<dotnet_policy>(d, c, o);
  if (name == "explicit_free") return std::make_unique<explicit_free_policy>(d, c, o);
  if (name == "runtime_native") return std::make_unique<runtime_native_policy>(d, c, o);
  GCPRESSURE_FAIL("unknown policy '" + name + "' (expected " + policy_names_text(", ", " or ") + ")");
}

}  // namespace gcpressure
