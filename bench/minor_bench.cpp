// minor_bench.cpp — what a minor collection costs: bare bdwgc, through the
// library, and inside the forward loop (docs/DESIGN.md, "What a minor costs").
//
//   boehm/minor_overhead/<heap_mib>/<young_iters>
//       One process, one live host heap of <heap_mib> MiB (fwd::host_heap: the
//       forward loop's 64-byte linked nodes, chains of 4096). Each benchmark
//       iteration runs two rounds, interleaved: <young_iters> iterations of the
//       forward loop's allocations (forward_pass with no device work: 2 arrays
//       per layer, each a GC-owned buffer and its array object, plus
//       host_allocs small GC objects), then
//         bare:    GC_start_incremental_collection + GC_collect_a_little until
//                  done, with the full frequency out of reach and no time
//                  limit (what boehm_collector::collect_minor asks of bdwgc);
//         policy:  gc_policy::collect(gc_kind::minor) — the library's minor:
//                  the same collection, its finalizers and the drain.
//       The bare round's finalizers and drain run after its timing, so both
//       rounds start from the same state. Counters (medians over the
//       iterations): bare_ms, policy_ms, ratio (= policy_ms / bare_ms),
//       mark_ms / reclaim_ms / world_ms (bdwgc's own events, policy rounds),
//       heap_MiB (bdwgc heap in use).
//   boehm/minor_in_loop/<heap_mib>/<variant>
//       The forward loop's conditions (Note [The minor in the loop]): each
//       iteration is forward_pass (real compute queued on the backend), then
//       a library minor at the sync point, then the wait for the device.
//       Variants: 0 minor while the iteration's device work is in flight
//       (the loop), 1 wait for the device first, then the minor, 2 no device
//       work at all (the minor_overhead conditions, 1 iteration's young
//       bytes), 3 no minors, each array freed when it dies (the oracle's
//       host time, without collections), 4 as 0 but the
//       sliced minor the policy runs at syncs (Note [Sliced minors]: 1 ms
//       slices back to back, then finalizers and drain), 5 as 2 with the
//       thread asleep for MINOR_BENCH_SLEEP_MS (default 5) before each minor
//       (the wait at a sync, without a device). Counters:
//       minor_ms, host_ms (the host's own time per iteration: forward_pass,
//       the allocations right after the previous minor included),
//       faults_per_iter (bdwgc write faults: SIGSEGV on a protected heap
//       page), mark_ms, reclaim_ms, world_ms, heap_MiB (medians).
//
// Environment: MINOR_BENCH_ARGS, forward_loop flags for the model and backend
// (default: the host backend and forward_loop's defaults; on the H200:
// "--backend cuda_async --layers 8 --d 4096 --batch 1024", the matrix's
// shape). MINOR_BENCH_ITERS: loop iterations per in-loop case (default 60).
// A case's figures come from its own rounds; the host heap is built once per
// size and kept. Read the counters, not "Time" (a whole round).
#ifndef GC_THREADS
#define GC_THREADS 1  // as in gc_bridge: must precede gc.h
#endif
#include <gc/gc.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/resource.h>

#include "replica.hpp"
#include "gcpressure/boehm.hpp"
#include "gcpressure/cuda_resource.hpp"

namespace gcp = gcpressure;
namespace fd = fwd::detail;

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// --- bdwgc's phases and write faults, observed ---------------------------------

// Time inside bdwgc's stopped world, its marking (MARK_START..MARK_END) and
// its reclaim set-up (RECLAIM_START..END), summed since the last take();
// chained to the library's own event hook.
struct phase_clock {
  std::atomic<std::int64_t> world_ns{0}, mark_ns{0}, reclaim_ns{0}, stop_ns{0}, restart_ns{0};
  std::int64_t t_world = 0, t_mark = 0, t_reclaim = 0, t_stop = 0, t_restart = 0;  // under the allocation lock
};
phase_clock g_phases;
GC_on_collection_event_proc g_prev_event = nullptr;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count();
}

void GC_CALLBACK phase_hook(GC_EventType e) {
  phase_clock& p = g_phases;
  auto add = [](std::atomic<std::int64_t>& sum, std::int64_t& t0) {
    if (t0) sum.fetch_add(now_ns() - t0, std::memory_order_relaxed);
    t0 = 0;
  };
  switch (e) {
    case GC_EVENT_PRE_STOP_WORLD: p.t_world = p.t_stop = now_ns(); break;
    case GC_EVENT_POST_STOP_WORLD: add(p.stop_ns, p.t_stop); break;
    case GC_EVENT_PRE_START_WORLD: p.t_restart = now_ns(); break;
    case GC_EVENT_POST_START_WORLD:
      add(p.world_ns, p.t_world);
      add(p.restart_ns, p.t_restart);
      break;
    case GC_EVENT_MARK_START: p.t_mark = now_ns(); break;
    case GC_EVENT_MARK_END: add(p.mark_ns, p.t_mark); break;
    case GC_EVENT_RECLAIM_START: p.t_reclaim = now_ns(); break;
    case GC_EVENT_RECLAIM_END: add(p.reclaim_ns, p.t_reclaim); break;
    default: break;
  }
  if (g_prev_event) g_prev_event(e);
}

// stop_ms + restart_ms: stopping and restarting the registered threads
// (signals and their acknowledgements, pthread_stop_world.c).
struct phases {
  double world_ms, mark_ms, reclaim_ms, stop_ms, restart_ms;
};
phases take_phases() {
  auto take = [](std::atomic<std::int64_t>& a) { return static_cast<double>(a.exchange(0)) * 1e-6; };
  return {take(g_phases.world_ns), take(g_phases.mark_ns), take(g_phases.reclaim_ns), take(g_phases.stop_ns),
          take(g_phases.restart_ns)};
}

// Per-round phase samples and their medians as counters.
struct phase_samples {
  std::vector<double> world, mark, reclaim, stop, restart;
  void add(const phases& p) {
    world.push_back(p.world_ms);
    mark.push_back(p.mark_ms);
    reclaim.push_back(p.reclaim_ms);
    stop.push_back(p.stop_ms);
    restart.push_back(p.restart_ms);
  }
  void report(benchmark::State& st) const;
};

// bdwgc's write faults: its SIGSEGV handler (mprotect dirty bits) runs once
// per first write to a protected heap page after each collection; counted by
// a handler chained in front of it.
std::atomic<std::uint64_t> g_faults{0};
struct sigaction g_gc_segv;
void count_fault(int sig, siginfo_t* si, void* ctx) {
  g_faults.fetch_add(1, std::memory_order_relaxed);
  if (g_gc_segv.sa_flags & SA_SIGINFO) g_gc_segv.sa_sigaction(sig, si, ctx);
  else if (g_gc_segv.sa_handler != SIG_DFL && g_gc_segv.sa_handler != SIG_IGN) g_gc_segv.sa_handler(sig);
  else abort();
}

void observe_gc() {
  static const bool once = [] {
    gcp::boehm::init();
    g_prev_event = GC_get_on_collection_event();
    GC_set_on_collection_event(phase_hook);
    struct sigaction sa {};
    sa.sa_sigaction = count_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_gc_segv);
    return true;
  }();
  (void)once;
}

double markers() {
  GC_prof_stats_s s{};
  GC_get_prof_stats(&s, sizeof s);
  return static_cast<double>(s.markers_m1) + 1;
}

// Page faults the kernel served (not bdwgc's SIGSEGVs): fresh or remapped pages.
std::uint64_t minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_minflt);
}

double unmapped_mib() { return static_cast<double>(GC_get_unmapped_bytes()) / (1 << 20); }

double heap_mib() {
  GC_word heap = 0, free_bytes = 0, unmapped = 0, since = 0, total = 0;
  GC_get_heap_usage_safe(&heap, &free_bytes, &unmapped, &since, &total);
  return static_cast<double>(heap - free_bytes) / (1 << 20);
}

void phase_samples::report(benchmark::State& st) const {
  st.counters["world_ms"] = median(world);
  st.counters["mark_ms"] = median(mark);
  st.counters["reclaim_ms"] = median(reclaim);
  st.counters["stop_ms"] = median(stop);
  st.counters["restart_ms"] = median(restart);
  st.counters["heap_MiB"] = heap_mib();
  st.counters["markers"] = markers();
}

// --- the loop's pieces ------------------------------------------------------------

// The live host heap for `mib`, built once and kept until another size is asked.
fwd::host_heap* heap_for(std::size_t mib) {
  static std::unique_ptr<fwd::host_heap> h;
  if (h && h->mib() != mib) h.reset();
  if (mib > 0 && !h) h = std::make_unique<fwd::host_heap>(mib);
  return h.get();
}

// MINOR_BENCH_ARGS: forward_loop flags (model shape, backend).
fwd::options loop_options() {
  std::vector<std::string> words{"minor_bench", "--backend", "host"};
  if (const char* v = std::getenv("MINOR_BENCH_ARGS")) {
    std::istringstream in(v);
    for (std::string w; in >> w;) words.push_back(w);
  }
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  fwd::options o = fwd::parse_args(static_cast<int>(argv.size()), argv.data());
  o.policy = "at_limit";  // nothing collects unless asked: every minor here is the bench's
  o.quiet = true;
  return o;
}

bool uses_cuda(const fwd::options& o) { return o.backend != "host"; }

// Device work that is never done: forward_pass's allocations without compute.
class no_compute final : public fd::compute {
 public:
  gcp::stream_ref stream() noexcept override { return nullptr; }
  void gemm(const float*, const float*, float*, int, int) override {}
  void bias_relu(const float*, const float*, float*, int, int) override {}
  void fill(void*, std::size_t) override {}
  void upload(void*, const void*, std::size_t) override {}
  void download(void*, const void*, std::size_t) override {}
  void wait() override {}
};

// A device heap (policy at_limit: it collects only when asked) and one
// replica of the forward loop's model on it. Declaration order: the compute
// outlives the heap, the heap outlives the replica.
struct loop_rig {
  fwd::options o;
  std::unique_ptr<fd::compute> comp;
  std::unique_ptr<gcp::boehm::device_heap> dh;
  fd::replica rp;
  fwd::result r;
  int it = 0;

  // oracle: the loop frees each array the moment it dies (unsafe_free).
  loop_rig(const fwd::options& opts, bool device_work, bool oracle = false) : o(opts) {
    const bool cuda = uses_cuda(o);
    comp = device_work ? fd::make_compute(cuda, 0) : std::make_unique<no_compute>();
    gcp::allocator_options ao;
    ao.backend = !cuda ? gcp::backend_kind::host
                       : (o.backend == "cuda" ? gcp::backend_kind::cuda : gcp::backend_kind::cuda_async);
    ao.hard_limit = o.hard_limit.is_set() ? o.hard_limit : fwd::default_hard_limit(cuda);
    gcp::policy_options po;
    dh = std::make_unique<gcp::boehm::device_heap>(ao, "at_limit", po);
    rp.comp = comp.get();
    rp.arr = std::make_unique<fd::arrays>(*dh, comp->stream(), 0, oracle, o.global_array_objects);
    fd::init_model(rp, o, dh->allocator(0).hard_limit());
  }
  ~loop_rig() {
    comp->wait();
    fd::release(rp, o.layers);
  }
  void pass() { fd::forward_pass(rp, o, it++, false, r); }
  // The library's minor: the collection, its finalizers, the drain.
  void minor() { dh->collect(gcp::gc_kind::minor); }
  // The sliced minor (the policy's at a sync), its slices back to back.
  void sliced_minor() {
    gcp::boehm::boehm_collector& c = dh->gc();
    c.start_minor();
    while (!c.step_minor(1e-3)) {
    }
    settle();
  }
  // What a collection left pending, outside any timing.
  void settle() {
    dh->gc().run_finalizers();
    dh->allocator(0).drain();
  }
};

// The bare bdwgc partial collection collect_minor asks for (Note [A minor
// stays minor], gc_bridge/src/boehm_runtime.cpp): full frequency out of
// reach, no time limit. The bench's thread is the only one collecting.
double bare_partial_ms() {
  const int freq = GC_get_full_freq();
  const unsigned long limit = GC_get_time_limit();
  GC_set_full_freq(1 << 30);
  GC_set_time_limit(GC_TIME_UNLIMITED);
  const auto t0 = clock_type::now();
  GC_start_incremental_collection();
  while (GC_collect_a_little()) {
  }
  const double ms = ms_since(t0);
  GC_set_full_freq(freq);
  GC_set_time_limit(limit);
  return ms;
}

void minor_overhead(benchmark::State& st) {
  try {
    observe_gc();
    const auto mib = static_cast<std::size_t>(st.range(0));
    const int young = static_cast<int>(st.range(1));
    heap_for(mib);
    loop_rig rig(loop_options(), false);
    GC_gcollect();  // a clean start: earlier cases' garbage is not this case's
    rig.settle();
    std::vector<double> bare, lib;
    phase_samples ph;
    for (auto _ : st) {
      for (int i = 0; i < young; ++i) rig.pass();
      take_phases();
      bare.push_back(bare_partial_ms());
      take_phases();
      rig.settle();
      for (int i = 0; i < young; ++i) rig.pass();
      const auto t0 = clock_type::now();
      rig.minor();
      lib.push_back(ms_since(t0));
      ph.add(take_phases());
    }
    const double b = median(bare), l = median(lib);
    st.counters["bare_ms"] = b;
    st.counters["bare_ms_p90"] = quantile(bare, 0.9);
    st.counters["policy_ms_p90"] = quantile(lib, 0.9);
    st.counters["policy_ms"] = l;
    st.counters["ratio"] = b > 0 ? l / b : 0;
    ph.report(st);
    st.SetLabel(rig.o.backend);
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

// Note [The minor in the loop]
// The forward loop's minor at a sync point (issue 20: 6-11 ms in the loop at
// a 256 MiB heap, 4.0-4.9 ms alone). Each variant changes one condition of
// the loop; the minor is the library's in every one.
void minor_in_loop(benchmark::State& st) {
  try {
    observe_gc();
    const auto mib = static_cast<std::size_t>(st.range(0));
    const int variant = static_cast<int>(st.range(1));
    const char* n = std::getenv("MINOR_BENCH_ITERS");
    const int iters = n && *n ? std::max(4, std::atoi(n)) : 60;
    const char* z = std::getenv("MINOR_BENCH_SLEEP_MS");
    const double sleep_ms = z && *z ? std::atof(z) : 5.0;
    heap_for(mib);
    loop_rig rig(loop_options(), variant != 2 && variant != 5, variant == 3);
    GC_gcollect();
    rig.settle();
    std::vector<double> minor, host, faults, pagefaults;
    phase_samples ph;
    for (auto _ : st) {
      for (int i = 0; i < iters; ++i) {
        const std::uint64_t f0 = g_faults.load(), pf0 = minor_faults();
        auto t0 = clock_type::now();
        rig.pass();
        host.push_back(ms_since(t0));
        if (variant == 1) rig.comp->wait();
        if (variant == 5) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms));
        if (variant != 3) {
          take_phases();
          t0 = clock_type::now();
          if (variant == 4) rig.sliced_minor();
          else rig.minor();
          minor.push_back(ms_since(t0));
          ph.add(take_phases());
        }
        rig.comp->wait();
        faults.push_back(static_cast<double>(g_faults.load() - f0));
        pagefaults.push_back(static_cast<double>(minor_faults() - pf0));
      }
    }
    st.counters["minor_ms"] = median(minor);
    st.counters["minor_ms_p90"] = quantile(minor, 0.9);
    st.counters["minor_ms_p10"] = quantile(minor, 0.1);
    st.counters["host_ms"] = median(host);
    st.counters["faults_per_iter"] = median(faults);
    st.counters["pagefaults_per_iter"] = median(pagefaults);
    st.counters["unmapped_MiB"] = unmapped_mib();
    ph.report(st);
    st.SetLabel(rig.o.backend);
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

bool register_minor_benchmarks() {
  auto* b = benchmark::RegisterBenchmark("boehm/minor_overhead", minor_overhead);
  b->Unit(benchmark::kMillisecond);
  for (long mib : {256L, 1024L})
    for (long young : {1L, 25L}) b->Args({mib, young});
  b->Args({16, 1});  // CI's smoke case
  auto* l = benchmark::RegisterBenchmark("boehm/minor_in_loop", minor_in_loop);
  l->Unit(benchmark::kMillisecond)->Iterations(1);
  for (long v : {0L, 1L, 2L, 3L, 4L, 5L}) l->Args({256, v});
  return true;
}

[[maybe_unused]] const bool registered = register_minor_benchmarks();

}  // namespace
