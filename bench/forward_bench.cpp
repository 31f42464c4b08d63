// forward_bench.cpp — every collection policy on the Flux-style forward loop
// (library gcpressure_forward, bench/forward/), and the cost of a GC-owned
// device array.
//
//   forward/<policy>/<host_heap_mib>/<workload>  policy x live host heap {0, 256, 1024} MiB
//                                                x workload {steady, promote, burst, varied}
//   alloc/gc_handle/<bytes>                      allocate a GC-owned device array and drop it
//
// forward/* runs the whole loop as one benchmark iteration; "Time" is the whole
// run, with its set-up and teardown collections (the per-iteration counters
// time the loop alone). (Not ->Iterations(1): it would append "/iterations:1" to the names. A
// loop shorter than the library's minimum time is simply run again; the
// counters describe the last run.) Counters (per case; keys of forward_loop's JSON):
//   peak_reserved_x_oracle  peak reserved device bytes / the oracle's
//   time_per_iter_x_oracle  time per iteration / the oracle's
//   gc_time_fraction        time in collections the policy ran / loop wall time
//   exposed_gc_fraction     exposed GC time (policy's upper bound + the runtime's own) / wall
//   exposed_gc_s, hidden_gc_s, gc_all_s   exposed_gc_seconds, hidden_gc_seconds, gc_seconds_all
//   minor_per_iter, full_per_iter  collections the policy ran per iteration
//                           (full = whole-heap cycles, incremental or blocking)
//   runtime_per_iter        collections the runtime started itself, per iteration
//   collector_collections   every collection the collector completed
//   full_steady_any         blocking whole-heap collections of any origin after the first 10%
//   host_ms_per_iter, sync_wait_s, slack_ms  the host's own time, the wait at syncs, the slack
//   ooms                    out_of_memory caught by the loop (iteration skipped)
//   peak_reserved_MiB, time_per_iter_ms, max_pause_ms, iters (run; fewer than
//   asked when the time cap stopped it), stopped_early
// The oracle is explicit_free at the same host heap size and workload,
// measured in the same process: forward/explicit_free/<mib>/<workload> is
// registered first for each pair and its result is cached; a filtered run
// measures it on demand.
//
// Boehm is process-global. Each case's figures are deltas from its own start
// (fwd::run takes every count and time relative to the loop's start, and
// builds a new device heap and policy per run); each run starts with a full
// collection outside the timing, so an earlier case's garbage is not this
// case's work. Boehm's settings are not changed by the loop. The live host
// heap is built once per size (sizes ascending) and kept between the cases of
// that size. Environment:
//   FORWARD_BENCH_ARGS         extra forward_loop flags (model shape, limits)
//   FORWARD_BENCH_ITERS        iterations per case (default 2000 on host, 20000 on CUDA)
//   FORWARD_BENCH_MAX_SECONDS  loop-time cap per case (default 10): every_iteration
//                              at 1 GiB pays a full collection per iteration
//   GCPRESSURE_BACKEND         host | cuda | cuda_async | auto (default auto)
//   GCPRESSURE_HARD_LIMIT etc. as for examples/forward_loop
// The model and limits are forward_loop's defaults (4 layers, d=256, batch=32;
// hard limit 256 MiB on host, 50% of device memory on CUDA).
//
// alloc/gc_handle/<bytes> times boehm::device_heap::alloc + drop under the
// pressure policy, with no live host heap; the collections and finalizations
// the drops cause are amortised into the time (counters: collections and
// finalized per allocation).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <utility>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "forward.hpp"
#include "gcpressure/boehm.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"

namespace gcp = gcpressure;

namespace {

constexpr std::size_t heap_sizes[] = {0, 256, 1024};

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  return (*end == '\0' && x > 0) ? x : fallback;
}

struct bench_state {
  std::unique_ptr<fwd::host_heap> heap;
  std::map<std::pair<std::size_t, std::string>, fwd::result> oracle;  // (heap MiB, workload)
};

bench_state& state() {
  static bench_state s;
  return s;
}

// The live host heap for `mib` (null for 0), built once and kept until a case
// of another size needs a different one.
fwd::host_heap* heap_for(std::size_t mib) {
  auto& s = state();
  if (s.heap && s.heap->mib() != mib) s.heap.reset();
  if (mib > 0 && !s.heap) s.heap = std::make_unique<fwd::host_heap>(mib);
  return s.heap.get();
}

// FORWARD_BENCH_ARGS: extra forward_loop flags for every case, e.g.
// "--d 4096 --batch 1024 --layers 8" for a model that loads an H200.
fwd::options base_options() {
  std::vector<std::string> words{"forward_bench"};
  if (const char* v = std::getenv("FORWARD_BENCH_ARGS")) {
    std::istringstream in(v);
    for (std::string w; in >> w;) words.push_back(w);
  }
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  return fwd::parse_args(static_cast<int>(argv.size()), argv.data());
}

fwd::options forward_options(const std::string& policy, std::size_t mib, const std::string& workload) {
  fwd::options o = base_options();  // forward_loop's defaults + GCPRESSURE_* + FORWARD_BENCH_ARGS
  const bool cuda = o.backend.empty() ? gcp::cuda_available() : o.backend != "host";
  o.policy = policy;
  o.workload = workload;
  o.host_heap_mib = mib;
  o.iters = static_cast<int>(env_double("FORWARD_BENCH_ITERS", cuda ? 20000 : 2000));
  o.max_seconds = env_double("FORWARD_BENCH_MAX_SECONDS", 10);
  o.quiet = true;
  o.json = false;
  o.trace.clear();
  return o;
}

const fwd::result& oracle(std::size_t mib, const std::string& workload) {
  auto& s = state();
  const auto key = std::make_pair(mib, workload);
  auto it = s.oracle.find(key);
  if (it == s.oracle.end())
    it = s.oracle.emplace(key, fwd::run(forward_options("explicit_free", mib, workload), heap_for(mib), nullptr)).first;
  return it->second;
}

void set_counters(benchmark::State& st, const fwd::result& r, const fwd::result& orc) {
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  const double iters = r.iterations > 0 ? r.iterations : 1;
  st.counters["peak_reserved_x_oracle"] =
      ratio(static_cast<double>(r.peak_reserved_bytes), static_cast<double>(orc.peak_reserved_bytes));
  st.counters["time_per_iter_x_oracle"] = ratio(r.time_per_iter, orc.time_per_iter);
  st.counters["gc_time_fraction"] = r.gc_fraction;
  st.counters["exposed_gc_fraction"] = r.exposed_gc_fraction;
  st.counters["exposed_gc_s"] = r.exposed_gc_seconds;
  st.counters["hidden_gc_s"] = r.hidden_gc_seconds;
  st.counters["gc_all_s"] = r.gc_seconds_all;
  st.counters["minor_per_iter"] = static_cast<double>(r.collections_minor) / iters;
  st.counters["full_per_iter"] = static_cast<double>(r.collections_full) / iters;
  st.counters["runtime_per_iter"] = static_cast<double>(r.collections_runtime) / iters;
  st.counters["collector_collections"] = static_cast<double>(r.collector_collections);
  st.counters["full_steady"] = static_cast<double>(r.collections_full_steady);
  st.counters["full_steady_any"] = static_cast<double>(r.collections_full_steady_any);
  st.counters["host_ms_per_iter"] = r.host_seconds_per_iter * 1e3;
  st.counters["sync_wait_s"] = r.sync_wait_seconds;
  st.counters["slack_ms"] = r.slack_seconds * 1e3;
  st.counters["ooms"] = static_cast<double>(r.ooms);
  st.counters["peak_reserved_MiB"] = static_cast<double>(r.peak_reserved_bytes) / (1 << 20);
  st.counters["time_per_iter_ms"] = r.time_per_iter * 1e3;
  st.counters["max_pause_ms"] = r.max_pause_seconds * 1e3;
  st.counters["iters"] = r.iterations;
  st.counters["stopped_early"] = r.stopped_early ? 1 : 0;
  st.counters["runtime_full"] = static_cast<double>(r.runtime_full_collections);
  st.counters["runtime_full_steady"] = static_cast<double>(r.runtime_full_collections_steady);
}

void forward(benchmark::State& st, const std::string& policy, std::size_t mib, const std::string& workload) {
  fwd::result r;
  try {
    fwd::host_heap* heap = heap_for(mib);
    const fwd::options o = forward_options(policy, mib, workload);
    for (auto _ : st) r = fwd::run(o, heap, nullptr);
    const auto key = std::make_pair(mib, workload);
    if (policy == "explicit_free" && !state().oracle.count(key)) state().oracle.emplace(key, r);
    set_counters(st, r, oracle(mib, workload));
    st.SetLabel(r.backend + (r.stopped_early ? ", stopped early by the time cap" : ""));
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

void gc_handle(benchmark::State& st, std::size_t bytes) {
  try {
    heap_for(0);  // no live host heap
    gcp::boehm::init();
    gcp::config c = gcp::config_from_env();
    gcp::allocator_options ao = gcp::allocator_options::from_config(c);
    auto heap = std::make_unique<gcp::boehm::device_heap>(ao, "pressure", gcp::policy_options::from_config(c));
    gcp::boehm::buffer* warm = heap->alloc(bytes);  // the pool's first segment stays out of the timing
    benchmark::DoNotOptimize(warm);
    warm = nullptr;
    gcp::collection_stats before;
    heap->policy().fill_stats(before);
    const std::uint64_t fin0 = heap->allocator().deferred().pushed();
    for (auto _ : st) {
      gcp::boehm::buffer* b = heap->alloc(bytes);
      benchmark::DoNotOptimize(b);
    }
    gcp::collection_stats after;
    heap->policy().fill_stats(after);
    std::uint64_t n = 0;
    for (int k = 0; k < gcp::gc_kind_count; ++k) n += after.by_kind[k] - before.by_kind[k];
    const double allocs = static_cast<double>(st.iterations());
    st.counters["collections_per_alloc"] = n / allocs;
    st.counters["finalized_per_alloc"] = static_cast<double>(heap->allocator().deferred().pushed() - fin0) / allocs;
    st.counters["peak_reserved_MiB"] = static_cast<double>(heap->stats().reserved.peak) / (1 << 20);
    st.SetItemsProcessed(st.iterations());
    st.SetLabel(std::string("pressure, ") + gcp::to_string(ao.backend));
    // Teardown: finalize what was dropped; a handle a stale stack word still
    // points at goes with the allocator, silently.
    for (int i = 0; i < 2 && heap->allocator().live_bytes() > 0; ++i) heap->collect(gcp::gc_kind::blocking_full);
    gcp::misuse_handler old = gcp::set_misuse_handler([](const char*) {});
    heap.reset();
    gcp::set_misuse_handler(old);
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

void register_case(const std::string& policy, std::size_t mib, const std::string& workload) {
  benchmark::RegisterBenchmark(("forward/" + policy + "/" + std::to_string(mib) + "/" + workload).c_str(),
                               [policy, mib, workload](benchmark::State& st) { forward(st, policy, mib, workload); })
      ->Unit(benchmark::kMillisecond);
}

bool register_forward_benchmarks() {
  for (std::size_t mib : heap_sizes)
    for (const char* const* w = fwd::workload_names(); *w; ++w) {
      // The oracle first, so that the other policies of this pair compare with it.
      register_case("explicit_free", mib, *w);
      for (const char* const* p = gcp::policy_names(); *p; ++p)
        if (std::string(*p) != "explicit_free") register_case(*p, mib, *w);
    }
  for (std::size_t n : {std::size_t{4096}, std::size_t{1} << 20, std::size_t{64} << 20})
    benchmark::RegisterBenchmark(("alloc/gc_handle/" + std::to_string(n)).c_str(),
                                 [n](benchmark::State& st) { gc_handle(st, n); });
  return true;
}

[[maybe_unused]] const bool registered = register_forward_benchmarks();

}  // namespace
