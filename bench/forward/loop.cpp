// loop.cpp — the forward loop (forward.hpp): the live host heap, then run()
// in named steps: configure, init_model, forward_pass, end_iteration,
// record_sample, collect_results, teardown.
//
// Note [What is GC-visible here]
// Boehm finds objects from the stacks, static data and other GC objects; it
// does not scan malloc'd memory (std::vector storage, host_resource "device"
// memory, the host stream's queue). So every pointer that must keep something
// alive lives in a GC object or on the stack: the model's arrays and the host
// heap's chains hang off GC_MALLOC_UNCOLLECTABLE roots, each device array is
// a small GC_MALLOC'd `darray` pointing at its buffer handle, workloads hold
// arrays in uncollectable slots, and in-flight arrays are locals. Queued
// kernels see device pointers only (Note [Kernels take device pointers, not
// GC objects], detail.hpp).
#ifndef GC_THREADS
#define GC_THREADS 1  // as in gc_bridge: must precede gc.h
#endif
#include <gc/gc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <new>
#include <thread>

#include <time.h>

#include "detail.hpp"
#include "gcpressure/allocator.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"

namespace fwd {

using namespace detail;
using clock_type = std::chrono::steady_clock;

namespace {

double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// 56 requested bytes are a 64-byte Boehm object (one extra byte is added for
// interior pointers, then rounded to 16-byte granules); measured with GC_size.
struct heap_node {
  heap_node* next;
  heap_node* other;        // an earlier node of the same chain: the graph is not a plain list
  std::uintptr_t data[5];  // small integers: never mistaken for pointers
};
static_assert(sizeof(heap_node) == 56);

constexpr std::size_t chain_length = 4096;

}  // namespace

// --- the simulated runtime's live host heap --------------------------------------

host_heap::host_heap(std::size_t mib) : mib_(mib) {
  boehm::init();
  const auto t0 = clock_type::now();
  if (mib == 0) return;
  void* probe = GC_MALLOC(sizeof(heap_node));  // object size as Boehm rounds it
  if (!probe) throw std::bad_alloc();
  const std::size_t obj = GC_size(probe);
  probe = nullptr;
  const std::size_t n = (mib << 20) / obj;
  chains_ = (n + chain_length - 1) / chain_length;
  roots_ = static_cast<void**>(GC_MALLOC_UNCOLLECTABLE(chains_ * sizeof(void*)));
  if (!roots_) throw std::bad_alloc();
  // Nothing here is garbage: collections while building would only re-mark
  // a growing heap over and over. The caller's first collection marks it once.
  GC_disable();
  std::size_t made = 0;
  std::uint64_t rng = 0x9e3779b97f4a7c15ull;
  for (std::size_t c = 0; c < chains_ && made < n; ++c) {
    heap_node* head = nullptr;
    heap_node* recent[8] = {};
    for (std::size_t k = 0; k < chain_length && made < n; ++k, ++made) {
      auto* node = static_cast<heap_node*>(GC_MALLOC(sizeof(heap_node)));
      if (!node) {
        GC_enable();
        throw std::bad_alloc();
      }
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      node->next = head;
      node->other = recent[rng & 7];
      for (int w = 0; w < 5; ++w) node->data[w] = (made + static_cast<std::size_t>(w)) & 0xffff;
      recent[rng & 7] = node;
      head = node;
    }
    roots_[c] = head;
  }
  GC_enable();
  objects_ = made;
  bytes_ = made * obj;
  build_seconds_ = since(t0);
}

host_heap::~host_heap() {
  if (roots_) GC_FREE(roots_);  // the chains become garbage for the next full collection
}

// --- helpers of the loop ------------------------------------------------------------

namespace {

// `count` small host GC objects of 16..128 bytes, linked into a short list
// (boxed values, closures, tuples of a real runtime's iteration), dropped.
void host_garbage(int count) {
  static constexpr std::size_t sizes[] = {16, 24, 32, 48, 64, 80, 96, 128};
  void* prev = nullptr;
  for (int i = 0; i < count; ++i) {
    void* p = GC_MALLOC(sizes[i & 7]);
    if (!p) throw std::bad_alloc();
    *static_cast<void**>(p) = prev;
    prev = p;
  }
}

// Model roots: uncollectable (scanned, never freed by the collector).
struct model_roots {
  darray* x;
  darray* out;       // the last iteration's output, read back after the sync
  darray* items[1];  // W[0..layers), b[0..layers)
};

// Overwrites dead stack below the caller, where stale copies of dropped
// array pointers would keep their buffers alive for a conservative collector.
[[gnu::noinline]] void scrub_stack() {
  volatile char buf[32768];
  for (std::size_t i = 0; i < sizeof buf; i += 64) buf[i] = 0;
  std::memset(const_cast<char*>(buf), 0, sizeof buf);
}

// The bridge's finalizer thread may be running finalizers of the collection
// that just finished: run what is pending here too, and wait (up to 2 s) until
// the allocator's live bytes stop moving.
void settle_finalizers(gcp::device_allocator& a) {
  std::size_t last = a.live_bytes();
  int still = 0;
  for (int i = 0; i < 200 && still < 3; ++i) {
    while (GC_should_invoke_finalizers()) GC_invoke_finalizers();
    a.drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::size_t now = a.live_bytes();
    still = now == last ? still + 1 : 0;
    last = now;
  }
}

std::uint64_t kind(const gcp::collection_stats& c, gcp::gc_kind k) { return c.by_kind[static_cast<int>(k)]; }

std::uint64_t total(const gcp::collection_stats& s) {
  std::uint64_t n = 0;
  for (auto k : s.by_kind) n += k;
  return n;
}

// Policy whole-heap collections that blocked: blocking fulls, and cycles
// whose slices ran back to back (Note [A cycle run back to back is blocking]).
std::uint64_t policy_blocking(const gcp::collection_stats& s) {
  return kind(s, gcp::gc_kind::blocking_full) + s.blocking_cycles;
}

// One run's state. Declaration order is destruction order reversed: the
// compute (and its stream) outlives the device heap, whose pool's blocks are
// ordered on that stream.
struct loop_state {
  const options& o;
  std::FILE* progress;
  result r;
  bool cuda = false;
  std::unique_ptr<compute> comp;
  std::unique_ptr<boehm::device_heap> dh;
  std::unique_ptr<arrays> arr;
  std::unique_ptr<workload> wl;
  model_roots* roots = nullptr;
  gcp::collection_stats base;  // at the loop's start: collections during set-up are not the loop's
  std::uint64_t allocs0 = 0;
  std::uint64_t headroom_changes0 = 0, headroom_seen = 0;  // the allocator's count at the start, last seen
  double host_seconds = 0;
  clock_type::time_point t_start;

  loop_state(const options& opts, std::FILE* p) : o(opts), progress(p) {}
  ~loop_state() {
    if (roots) GC_FREE(roots);  // on an exception: unroot the model (its arrays become garbage)
  }
  gcp::device_allocator& alloc() { return dh->allocator(); }
  gcp::stream_ref stream() { return comp->stream(); }
};

// Options -> allocator and policy; the device heap and the compute.
void configure(loop_state& s, const host_heap* heap) {
  const options& o = s.o;
  s.cuda = o.backend.empty() ? gcp::cuda_available() : o.backend != "host";
  gcp::allocator_options ao;
  ao.backend = !s.cuda ? gcp::backend_kind::host
                       : (o.backend == "cuda" ? gcp::backend_kind::cuda : gcp::backend_kind::cuda_async);
  if (o.host_capacity) ao.host_capacity = o.host_capacity;
  ao.host_shared = o.host_shared;
  ao.hard_limit = o.hard_limit.is_set() ? o.hard_limit : default_hard_limit(s.cuda);
  ao.soft_limit = o.soft_limit;
  gcp::policy_options po;
  po.gc_budget = o.gc_budget;
  po.every_n = o.every_n;
  po.verbose = o.verbose;

  result& r = s.r;
  r.policy = o.policy;
  r.workload = o.workload;
  r.backend = gcp::to_string(ao.backend);
  r.iterations_requested = o.iters;
  r.layers = o.layers;
  r.d = o.d;
  r.batch = o.batch;
  r.host_allocs = o.host_allocs;
  r.host_heap_mib = o.host_heap_mib;
  r.host_heap_bytes = heap ? heap->bytes() : 0;
  r.gc_budget = o.gc_budget;
  r.hint_before_sync = o.hint_before_sync;
  r.global_array_objects = o.global_array_objects;

  // A clean start, outside the measurement: garbage of earlier runs (and the
  // host heap's first marking) is not this run's work.
  GC_gcollect();
  s.comp = make_compute(s.cuda);
  s.dh = std::make_unique<boehm::device_heap>(ao, o.policy, po);
  r.hard_limit = s.alloc().hard_limit();
  r.soft_limit = s.alloc().soft_limit();
  r.device_total = s.alloc().device_memory().total;
  s.arr = std::make_unique<arrays>(*s.dh, s.stream(), o.policy == "explicit_free", o.global_array_objects);
}

// Parameters and input, initialised on the host and uploaded; the workload.
void init_model(loop_state& s) {
  const int d = s.o.d, n = s.o.batch, L = s.o.layers;
  const std::size_t act_bytes = static_cast<std::size_t>(d) * n * sizeof(float);
  s.r.model_bytes = act_bytes + static_cast<std::size_t>(L) * (static_cast<std::size_t>(d) * d + d) * sizeof(float);
  const std::size_t root_bytes = sizeof(model_roots) + sizeof(darray*) * static_cast<std::size_t>(2 * L);
  s.roots = static_cast<model_roots*>(GC_MALLOC_UNCOLLECTABLE(root_bytes));
  if (!s.roots) throw std::bad_alloc();
  std::memset(s.roots, 0, root_bytes);
  // xorshift64*: the H200 model has 134 M weights, and a matrix of runs
  // initialises it once per run (mt19937_64 + a distribution took ~1 s).
  std::uint64_t state = s.o.seed * 0x9e3779b97f4a7c15ull + 1;
  auto uniform = [&state](float lo, float hi) {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    const auto bits = static_cast<std::uint32_t>((state * 0x2545f4914f6cdd1dull) >> 40);  // 24 bits
    return lo + (hi - lo) * static_cast<float>(bits) * (1.0f / 16777216.0f);
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto wdist = [&] { return uniform(-scale, scale); };
  auto xdist = [&] { return uniform(0.f, 1.f); };
  auto bdist = [&] { return uniform(-0.01f, 0.05f); };
  std::vector<float> host(static_cast<std::size_t>(d) * std::max(d, n));
  s.roots->x = s.arr->make(d, n);
  for (std::size_t i = 0; i < static_cast<std::size_t>(d) * n; ++i) host[i] = xdist();
  s.comp->upload(ptr(s.roots->x), host.data(), act_bytes);
  for (int l = 0; l < L; ++l) {
    darray* W = s.roots->items[l] = s.arr->make(d, d);
    for (std::size_t i = 0; i < static_cast<std::size_t>(d) * d; ++i) host[i] = wdist();
    s.comp->upload(ptr(W), host.data(), static_cast<std::size_t>(d) * d * sizeof(float));
    darray* b = s.roots->items[L + l] = s.arr->make(d, 1);
    for (int i = 0; i < d; ++i) host[static_cast<std::size_t>(i)] = bdist();
    s.comp->upload(ptr(b), host.data(), static_cast<std::size_t>(d) * sizeof(float));
  }
  s.comp->wait();
  s.wl = make_workload(s.o, workload_context{*s.arr, *s.comp, s.alloc().hard_limit(), L, act_bytes});
}

// The layers of iteration `it` and the workload's part; an out_of_memory is
// counted and the iteration's in-flight arrays dropped (the oracle frees them).
void forward_pass(loop_state& s, int it, bool last) {
  const int d = s.o.d, n = s.o.batch, L = s.o.layers;
  // In-flight arrays are locals: on the stack, so GC-visible (Note [What is GC-visible here]).
  darray* h = s.roots->x;
  darray* t = nullptr;
  darray* y = nullptr;
  auto drop_input = [&] {
    if (h != s.roots->x) s.arr->died(h);
  };
  try {
    s.wl->begin_iteration(it);
    for (int l = 0; l < L; ++l) {
      const darray* W = s.roots->items[l];
      const darray* b = s.roots->items[L + l];
      t = s.arr->make(d, n);  // W*x: the broadcast's temporary
      s.comp->gemm(ptr(W), ptr(h), ptr(t), d, n);
      y = s.arr->make(d, n);  // relu.(t .+ b)
      s.comp->bias_relu(ptr(t), ptr(b), ptr(y), d, n);
      s.wl->after_layer(it, l, t, y);
      s.arr->died(t);
      drop_input();
      t = nullptr;
      h = y;
      y = nullptr;
      host_garbage(s.o.host_allocs / L + (l < s.o.host_allocs % L ? 1 : 0));
    }
    s.wl->end_iteration(it);
    if (last) s.roots->out = h;  // read back by checksum(), after the sync
    else drop_input();
  } catch (const gcp::out_of_memory& e) {
    ++s.r.ooms;
    if (s.r.first_oom.empty()) s.r.first_oom = e.what();
    s.arr->died(t);
    s.arr->died(y);
    drop_input();
  }
}

// The sum of the last output's first column (a sanity check), read after the
// iteration's sync so that the host time does not include the device's.
void checksum(loop_state& s) {
  if (!s.roots->out) return;
  std::vector<float> col(static_cast<std::size_t>(s.o.d));
  s.comp->download(col.data(), ptr(s.roots->out), col.size() * sizeof(float));
  s.r.checksum = 0;
  for (float v : col) s.r.checksum += v;
  s.arr->died(s.roots->out);
  s.roots->out = nullptr;
}

// The end of an iteration: the iteration hint, then the policy's sync hint
// (or, with --hint-order after, a plain wait, then the hint). The hint runs
// under a device probe, so that a collection it runs while the device is
// still busy with this iteration's work is measured as hidden (Note [Exposed
// GC time], core/src/policy.cpp).
void end_iteration(loop_state& s) {
  gcp::gc_policy& p = s.dh->policy();
  if (s.o.hint_before_sync) {
    {
      gcp::gc_policy::device_probe probe(p, s.stream());
      s.dh->iteration();
    }
    s.dh->synchronize(s.stream());
  } else {
    s.comp->wait();
    s.dh->iteration();
  }
}

// The iteration's cumulative sample and its progress line.
void record_sample(loop_state& s, int it) {
  gcp::collection_stats cs;
  s.dh->policy().fill_stats(cs);
  const gcp::collection_stats& b = s.base;
  const iteration_sample x{it + 1,
                           s.alloc().live_bytes(),
                           s.alloc().reserved_bytes(),
                           total(cs) - total(b),
                           cs.gc_seconds - b.gc_seconds,
                           policy_blocking(cs) - policy_blocking(b),
                           cs.runtime_full_collections - b.runtime_full_collections,
                           cs.exposed_gc_seconds - b.exposed_gc_seconds,
                           cs.hidden_gc_seconds - b.hidden_gc_seconds};
  s.r.samples.push_back(x);
  if (const std::uint64_t changes = s.alloc().headroom_changes(); changes != s.headroom_seen) {
    s.headroom_seen = changes;
    if (s.r.headroom_change_iterations.size() < 64) s.r.headroom_change_iterations.push_back(x.iteration);
  }
  if (!s.progress) return;
  const std::uint64_t minors = kind(cs, gcp::gc_kind::minor) - kind(b, gcp::gc_kind::minor);
  std::fprintf(s.progress,
               "[ iter %5d ] pool usage: %s (%s reserved) | collections: %llu (%llu minor, %llu full) | runtime's own: "
               "%llu%s\n",
               x.iteration, gcp::format_bytes(x.live).c_str(), gcp::format_bytes(x.reserved).c_str(),
               static_cast<unsigned long long>(x.collections), static_cast<unsigned long long>(minors),
               static_cast<unsigned long long>(x.collections - minors),
               static_cast<unsigned long long>(cs.runtime_collections - b.runtime_collections),
               s.r.ooms ? (" | OOMs: " + std::to_string(s.r.ooms)).c_str() : "");
}

// The iterations, timed: host time (start to the hint) and the hint + sync.
void iterate(loop_state& s) {
  s.t_start = clock_type::now();
  const double cpu_start = process_cpu_seconds();
  for (int it = 0; it < s.o.iters; ++it) {
    const auto t_iter = clock_type::now();
    const bool out_of_time = s.o.max_seconds > 0 && since(s.t_start) >= s.o.max_seconds;
    forward_pass(s, it, it == s.o.iters - 1 || out_of_time);
    const auto t_host = clock_type::now();
    s.host_seconds += std::chrono::duration<double>(t_host - t_iter).count();
    end_iteration(s);
    s.r.sync_seconds += since(t_host);
    checksum(s);
    record_sample(s, it);
    s.r.max_iteration_seconds = std::max(s.r.max_iteration_seconds, since(t_iter));
    ++s.r.iterations;
    if (out_of_time && it + 1 < s.o.iters) {
      s.r.stopped_early = true;
      break;
    }
  }
  s.r.wall_seconds = since(s.t_start);
  s.r.cpu_seconds = process_cpu_seconds() - cpu_start;
}

// Blocking whole-heap collections of any origin after the first 10% of the
// iterations run (a collection at iteration boundary k counts for iteration k).
void steady_counts(result& r) {
  if (r.iterations == 0) return;
  const int steady_start = r.iterations / 10;
  const iteration_sample zero{};
  const iteration_sample& from = steady_start > 0 ? r.samples[steady_start - 1] : zero;
  const iteration_sample& to = r.samples.back();
  r.runtime_full_collections_steady = to.runtime_full - from.runtime_full;
  r.collections_full_steady_any = (to.blocking_full - from.blocking_full) + r.runtime_full_collections_steady;
  r.collections_full_steady = r.collections_full_steady_any;
}

void collect_results(loop_state& s) {
  result& r = s.r;
  const auto st = s.alloc().stats();
  const auto& g = st.gc;
  const auto& b = s.base;
  r.peak_live_bytes = static_cast<std::size_t>(st.requested.peak);
  r.peak_reserved_bytes = static_cast<std::size_t>(st.reserved.peak);
  r.final_live_bytes = static_cast<std::size_t>(st.requested.current);
  r.final_reserved_bytes = static_cast<std::size_t>(st.reserved.current);
  r.bytes_per_iteration = r.iterations ? static_cast<std::size_t>(s.arr->bytes_allocated() / r.iterations) : 0;
  r.collections_minor = kind(g, gcp::gc_kind::minor) - kind(b, gcp::gc_kind::minor);
  r.collections_incremental_full = kind(g, gcp::gc_kind::incremental_full) - kind(b, gcp::gc_kind::incremental_full);
  r.collections_blocking_full = kind(g, gcp::gc_kind::blocking_full) - kind(b, gcp::gc_kind::blocking_full);
  r.collections_full = r.collections_incremental_full + r.collections_blocking_full;
  r.blocking_cycles = g.blocking_cycles - b.blocking_cycles;
  steady_counts(r);
  for (int i = 0; i < 5 && i < gcp::gc_reason_count; ++i) r.collections_by_reason[i] = g.by_reason[i] - b.by_reason[i];
  r.incremental_slices = g.incremental_slices - b.incremental_slices;
  r.ladder_full_collections = st.ladder[static_cast<int>(gcp::ladder_step::full_collection)];
  r.max_pause_seconds = g.longest_pause_seconds;
  r.gc_seconds = g.gc_seconds - b.gc_seconds;
  r.exposed_gc_seconds = g.exposed_gc_seconds - b.exposed_gc_seconds;
  r.hidden_gc_seconds = g.hidden_gc_seconds - b.hidden_gc_seconds;
  r.gc_seconds_all = g.gc_seconds_all - b.gc_seconds_all;
  r.finalized = g.finalized - b.finalized;
  r.allocations = st.allocations - s.allocs0;
  r.time_per_iter = r.iterations ? r.wall_seconds / r.iterations : 0;
  r.gc_fraction = r.wall_seconds > 0 ? r.gc_seconds / r.wall_seconds : 0;
  r.exposed_gc_fraction = r.wall_seconds > 0 ? r.exposed_gc_seconds / r.wall_seconds : 0;
  r.host_seconds_per_iter = r.iterations ? s.host_seconds / r.iterations : 0;
  r.sync_wait_seconds = g.sync_wait_seconds - b.sync_wait_seconds;
  r.slack_seconds = g.slack_seconds;
  r.syncs = g.syncs - b.syncs;
  r.collections_runtime = g.runtime_collections - b.runtime_collections;
  r.runtime_full_collections = g.runtime_full_collections - b.runtime_full_collections;
  r.runtime_gc_seconds = g.runtime_gc_seconds - b.runtime_gc_seconds;
  r.runtime_seconds_exact = g.runtime_seconds_exact;
  r.collector_collections = g.collector_collections - b.collector_collections;
  r.runtime_heap_bytes = GC_get_heap_size();
  r.headroom_changes = st.headroom_changes - s.headroom_changes0;
  r.available_bytes_min = st.available_bytes_min;
  r.pool_status = gcp::to_text(st);
}

// Outside the measurement. The oracle frees what it still holds; otherwise
// the roots go and two full collections finalize what is left, so that the
// heap shuts down empty.
void teardown(loop_state& s) {
  s.wl->release();
  if (s.arr->oracle()) {
    s.arr->died(s.roots->x);
    for (int i = 0; i < 2 * s.o.layers; ++i) s.arr->died(s.roots->items[i]);
  }
  GC_FREE(s.roots);
  s.roots = nullptr;
  s.comp->wait();
  scrub_stack();
  gcp::device_allocator& a = s.alloc();
  for (int i = 0; i < 2 && a.live_bytes() > 0; ++i) {
    const std::size_t before = a.live_bytes();
    s.dh->collect(gcp::gc_kind::blocking_full);
    settle_finalizers(a);
    if (a.live_bytes() == before) break;  // what is left is retained, not garbage
  }
  s.r.live_at_exit_bytes = a.live_bytes();
  // The pool's segments go back upstream by frees ordered on the compute's
  // stream: let them run before the device heap (and its resource) goes.
  a.trim();
  s.comp->wait();
  s.wl.reset();
  s.arr.reset();
  // Conservatively retained handles (a stale stack word): their blocks go
  // with the allocator; said once in live_at_exit_bytes, not as misuse lines.
  const bool quiet = s.r.live_at_exit_bytes > 0;
  gcp::misuse_handler old = quiet ? gcp::set_misuse_handler([](const char*) {}) : nullptr;
  s.dh.reset();
  if (quiet) gcp::set_misuse_handler(old);
  s.comp.reset();
}

}  // namespace

// --- the loop ---------------------------------------------------------------------------

result run(const options& o, host_heap* heap, std::FILE* progress) {
  boehm::init();
  if (!gcp::is_policy_name(o.policy)) GCPRESSURE_FAIL("forward_loop: unknown policy '" + o.policy + "'");
  std::unique_ptr<host_heap> own_heap;
  if (!heap && o.host_heap_mib > 0) {
    own_heap = std::make_unique<host_heap>(o.host_heap_mib);
    heap = own_heap.get();
  }
  if ((heap ? heap->mib() : 0) != o.host_heap_mib)
    GCPRESSURE_FAIL("forward_loop: the host heap given holds " + std::to_string(heap ? heap->mib() : 0) +
                    " MiB, not " + std::to_string(o.host_heap_mib));

  loop_state s(o, o.quiet ? nullptr : progress);
  configure(s, heap);
  init_model(s);
  s.alloc().reset_peaks();
  s.dh->policy().fill_stats(s.base);
  s.allocs0 = s.alloc().allocation_count();
  s.headroom_changes0 = s.headroom_seen = s.alloc().headroom_changes();
  s.r.samples.reserve(static_cast<std::size_t>(o.iters));
  iterate(s);
  collect_results(s);
  if (!o.trace.empty()) write_trace(s.r, o.trace);
  teardown(s);
  return std::move(s.r);
}

}  // namespace fwd
