// alloc_bench.cpp — the cost of one allocate + free pair.
//
//   alloc/pool_hit/<bytes>           device_allocator, host backend, pool hit
//   alloc/pool_hit_cuda/<bytes>      device_allocator, cuda_async backend, pool hit
//   alloc/cuda_malloc/<bytes>        cudaMalloc + cudaFree (cuda_resource)
//   alloc/cuda_malloc_async/<bytes>  cudaMallocFromPoolAsync + cudaFreeAsync on a
//                                    stream, driver pool kept warm
//   alloc/pool_hit_threads/<n>       4 KiB pool hits on one device_allocator
//                                    shared by n threads (the timed one and
//                                    n-1 doing the same), each on its own
//                                    stream; cuda_async with a GPU, else host
//   alloc/cuda_malloc_async_threads/<n>  the same with cudaMallocFromPoolAsync
//                                    + cudaFreeAsync on one driver pool (CUDA
//                                    builds only): the driver's thread-safe
//                                    allocator, side by side (issue 24)
//
// Every case times the pair on the calling thread; read the wall-clock "Time"
// column (the CUDA calls can block in the driver, which CPU time hides). Not
// UseRealTime(): it would append "/real_time" to the names, which must stay
// exactly as above. CUDA cases skip with an error where there is no device.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/host_resource.hpp"

namespace gcp = gcpressure;

namespace {

constexpr std::size_t sizes[] = {4096, std::size_t{1} << 20, std::size_t{64} << 20};

// The full path a runtime takes (hook check, accounting, checked free), served
// from the pool's cache after the first iteration.
void pool_hit(benchmark::State& state, gcp::backend_kind backend, std::size_t bytes) {
  if (backend != gcp::backend_kind::host && !gcp::cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  gcp::allocator_options o;
  o.backend = backend;
  gcp::device_allocator a(o);
  a.free(a.allocate(bytes), bytes);  // warm: the first allocation creates a segment
  for (auto _ : state) {
    void* p = a.allocate(bytes);
    benchmark::DoNotOptimize(p);
    a.free(p, bytes);
  }
  const auto s = a.stats();
  // ~1.0 when every timed allocation hit the cache (the warm-up is the miss).
  state.counters["hit_rate"] = s.allocations ? static_cast<double>(s.pool_hits) / static_cast<double>(s.allocations) : 0;
  state.counters["upstream_allocs"] = static_cast<double>(s.upstream_allocations);
  state.SetLabel(gcp::to_string(backend));
}

void cuda_malloc(benchmark::State& state, std::size_t bytes) {
  if (!gcp::cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  gcp::cuda_resource r;
  r.deallocate(r.allocate(bytes), bytes);  // context creation stays out of the timing
  for (auto _ : state) {
    void* p = r.allocate(bytes);
    benchmark::DoNotOptimize(p);
    r.deallocate(p, bytes);
  }
}

void cuda_malloc_async(benchmark::State& state, std::size_t bytes) {
  if (!gcp::cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  // Release threshold "infinite": the driver pool keeps what it has across
  // synchronisations, so every timed pair is a driver-pool hit.
  gcp::cuda_async_resource r(0, std::numeric_limits<std::size_t>::max());
  gcp::stream_ref s = gcp::cuda_stream_create();
  r.deallocate(r.allocate(bytes, s), bytes, s);
  gcp::cuda_stream_synchronize(s);
  for (auto _ : state) {
    void* p = r.allocate(bytes, s);
    benchmark::DoNotOptimize(p);
    r.deallocate(p, bytes, s);
  }
  // Outside the timed loop: only the host-side cost of the pair is measured;
  // the stream work it queued is negligible and drained here.
  gcp::cuda_stream_synchronize(s);
  gcp::cuda_stream_destroy(s);
}

// A stream per thread: host_stream or a CUDA stream.
struct bench_stream {
  explicit bench_stream(bool cuda) : cuda_(cuda) {
    if (cuda_) ref_ = gcp::cuda_stream_create();
    else host_ = std::make_unique<gcp::host_stream>(), ref_ = host_->ref();
  }
  ~bench_stream() {
    if (cuda_) gcp::cuda_stream_destroy(ref_);
  }
  bench_stream(const bench_stream&) = delete;
  bench_stream& operator=(const bench_stream&) = delete;
  gcp::stream_ref ref() const { return ref_; }

 private:
  bool cuda_;
  std::unique_ptr<gcp::host_stream> host_;
  gcp::stream_ref ref_ = nullptr;
};

// Runs `pair(stream)` on n-1 other threads, each on its own stream, while
// the benchmark thread times `pair` on streams[0]: the wall time of one pair
// under contention (real threads; Google Benchmark's ->Threads(n) would
// rename the cases).
template <class Pair>
void time_with_others(benchmark::State& state, const std::vector<std::unique_ptr<bench_stream>>& streams, Pair pair) {
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::thread> others;
  for (std::size_t t = 1; t < streams.size(); ++t)
    others.emplace_back([&, s = streams[t]->ref()] {
      started.fetch_add(1);
      while (!stop.load(std::memory_order_relaxed)) pair(s);
    });
  while (started.load() + 1 < static_cast<int>(streams.size())) std::this_thread::yield();
  const gcp::stream_ref mine = streams[0]->ref();
  for (auto _ : state) pair(mine);
  stop = true;
  for (auto& t : others) t.join();
}

// Pool hits while n-1 other threads hit the same pool: what sharing one
// allocator costs (issue 24: per-thread caches, pool_cache.cpp).
void pool_hit_threads(benchmark::State& state, int threads) {
  constexpr std::size_t bytes = 4096;
  const bool cuda = gcp::cuda_available();
  gcp::allocator_options o;
  o.backend = cuda ? gcp::backend_kind::cuda_async : gcp::backend_kind::host;
  std::vector<std::unique_ptr<bench_stream>> streams;  // outlive the allocator
  for (int t = 0; t < threads; ++t) streams.push_back(std::make_unique<bench_stream>(cuda));
  gcp::device_allocator a(o);
  for (const auto& s : streams) a.free(a.allocate(bytes, s->ref()), bytes, s->ref());  // warm each stream's list
  time_with_others(state, streams, [&a](gcp::stream_ref s) {
    void* p = a.allocate(bytes, s);
    benchmark::DoNotOptimize(p);
    a.free(p, bytes, s);
  });
  for (auto& s : streams) a.forget_stream(s->ref());
  const auto st = a.stats();
  state.counters["hit_rate"] = st.allocations ? static_cast<double>(st.pool_hits) / static_cast<double>(st.allocations) : 0;
  state.SetLabel(gcp::to_string(o.backend));
}

#ifdef GCPRESSURE_BENCH_CUDA
// cudaMallocAsync's driver pool from n threads, a stream each (as
// cuda_malloc_async: release threshold infinite, so every pair is a hit).
void cuda_malloc_async_threads(benchmark::State& state, int threads) {
  constexpr std::size_t bytes = 4096;
  if (!gcp::cuda_available()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  gcp::cuda_async_resource r(0, std::numeric_limits<std::size_t>::max());
  std::vector<std::unique_ptr<bench_stream>> streams;
  for (int t = 0; t < threads; ++t) streams.push_back(std::make_unique<bench_stream>(true));
  for (const auto& s : streams) r.deallocate(r.allocate(bytes, s->ref()), bytes, s->ref());
  for (const auto& s : streams) gcp::cuda_stream_synchronize(s->ref());
  time_with_others(state, streams, [&r](gcp::stream_ref s) {
    void* p = r.allocate(bytes, s);
    benchmark::DoNotOptimize(p);
    r.deallocate(p, bytes, s);
  });
  for (const auto& s : streams) gcp::cuda_stream_synchronize(s->ref());
}
#endif

template <class Fn>
void add(const std::string& name, Fn&& fn) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn));
}

// One registration per size, the size in the name, so that results keep the
// exact names alloc/<case>/<bytes> whatever the library's argument formatting.
bool register_alloc_benchmarks() {
  for (std::size_t n : sizes) {
    const std::string bytes = std::to_string(n);
    add("alloc/pool_hit/" + bytes, [n](benchmark::State& st) { pool_hit(st, gcp::backend_kind::host, n); });
    add("alloc/pool_hit_cuda/" + bytes, [n](benchmark::State& st) { pool_hit(st, gcp::backend_kind::cuda_async, n); });
    add("alloc/cuda_malloc/" + bytes, [n](benchmark::State& st) { cuda_malloc(st, n); });
    add("alloc/cuda_malloc_async/" + bytes, [n](benchmark::State& st) { cuda_malloc_async(st, n); });
  }
  for (int t : {1, 2, 4, 8, 16})
    add("alloc/pool_hit_threads/" + std::to_string(t), [t](benchmark::State& st) { pool_hit_threads(st, t); });
#ifdef GCPRESSURE_BENCH_CUDA
  for (int t : {1, 8})
    add("alloc/cuda_malloc_async_threads/" + std::to_string(t),
        [t](benchmark::State& st) { cuda_malloc_async_threads(st, t); });
#endif
  return true;
}

[[maybe_unused]] const bool registered = register_alloc_benchmarks();

}  // namespace
