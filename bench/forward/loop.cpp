// loop.cpp — the forward loop (forward.hpp): the live host heap, then run()
// in named steps: configure, init_model, forward_pass, end_iteration,
// record_sample, collect_results, teardown. The per-replica steps
// (init_model, forward_pass, checksum) are in replica.cpp (Note [Replicas]).
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
#include <string>
#include <thread>
#include <vector>

#include <time.h>
#include <unistd.h>

#include "replica.hpp"
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

// Overwrites dead stack below the caller, where stale copies of dropped
// array pointers would keep their buffers alive for a conservative collector.
[[gnu::noinline]] void scrub_stack() {
  volatile char buf[32768];
  for (std::size_t i = 0; i < sizeof buf; i += 64) buf[i] = 0;
  std::memset(const_cast<char*>(buf), 0, sizeof buf);
}

// Device bytes live on every device of `h`.
// Headroom changes seen by every device's allocator (other tenants).
std::uint64_t headroom_changes(boehm::device_heap& h) {
  std::uint64_t n = 0;
  for (std::size_t k = 0; k < h.device_count(); ++k) n += h.allocator(k).headroom_changes();
  return n;
}

std::size_t live_bytes(boehm::device_heap& h) {
  std::size_t n = 0;
  for (std::size_t k = 0; k < h.device_count(); ++k) n += h.allocator(k).live_bytes();
  return n;
}

// The bridge's finalizer thread may be running finalizers of the collection
// that just finished: run what is pending here too, and wait (up to 2 s) until
// the live bytes of every device stop moving.
void settle_finalizers(boehm::device_heap& h) {
  std::size_t last = live_bytes(h);
  int still = 0;
  for (int i = 0; i < 200 && still < 3; ++i) {
    while (GC_should_invoke_finalizers()) GC_invoke_finalizers();
    for (std::size_t k = 0; k < h.device_count(); ++k) h.allocator(k).drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::size_t now = live_bytes(h);
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
// computes (and their streams) outlive the device heap, whose pools' blocks
// are ordered on those streams; the replicas' arrays and workloads go first.
struct loop_state {
  const options& o;
  std::FILE* progress;
  result r;
  bool cuda = false;
  std::vector<std::unique_ptr<compute>> comps;  // one per replica
  std::unique_ptr<boehm::device_heap> dh;
  std::vector<std::unique_ptr<replica>> reps;   // Note [Replicas]
  gcp::collection_stats base;  // at the loop's start: collections during set-up are not the loop's
  std::uint64_t headroom_changes0 = 0, headroom_seen = 0;  // every device's count at the start, last seen
  double host_seconds = 0;
  std::size_t peak_seen = 0;  // the highest reserved peak of any device seen at an iteration's end
  clock_type::time_point t_start;

  loop_state(const options& opts, std::FILE* p) : o(opts), progress(p) {}
};

// The device ordinal of replica k.
int ordinal(const options& o, int k) {
  return o.device_ordinals.empty() ? k : o.device_ordinals[static_cast<std::size_t>(k)];
}

// Options -> one allocator per replica's device, and the policy.
std::vector<gcp::allocator_options> device_options(const options& o, bool cuda) {
  gcp::allocator_options ao;
  ao.backend = !cuda ? gcp::backend_kind::host
                     : (o.backend == "cuda" ? gcp::backend_kind::cuda : gcp::backend_kind::cuda_async);
  if (o.host_capacity) ao.host_capacity = o.host_capacity;
  ao.host_shared = o.host_shared;
  ao.hard_limit = o.hard_limit.is_set() ? o.hard_limit : default_hard_limit(cuda);
  ao.soft_limit = o.soft_limit;
  ao.pool = o.pool;
  ao.async_release_threshold = o.async_release_threshold;
  std::vector<gcp::allocator_options> v(static_cast<std::size_t>(o.devices), ao);
  for (int k = 0; k < o.devices; ++k) v[static_cast<std::size_t>(k)].device = ordinal(o, k);
  return v;
}

// Options -> allocators and policy; the device heap, the computes and the
// replicas' arrays.
void configure(loop_state& s, const host_heap* heap) {
  const options& o = s.o;
  s.cuda = o.backend.empty() ? gcp::cuda_available() : o.backend != "host";
  if (s.cuda && !gcp::cuda_available()) throw gcp::logic_error(gcp::no_cuda_device_message("--backend"));
  int top = 0;  // the highest ordinal asked for
  for (int k = 0; k < o.devices; ++k) top = std::max(top, ordinal(o, k));
  if (s.cuda && top >= gcp::cuda_device_count())
    throw gcp::logic_error("device " + std::to_string(top) + " asked for (--devices or GCPRESSURE_DEVICE(S)), but " +
                           std::to_string(gcp::cuda_device_count()) + " CUDA device(s) are usable");
  const std::vector<gcp::allocator_options> ao = device_options(o, s.cuda);
  gcp::policy_options po;
  po.gc_budget = o.gc_budget;
  po.every_n = o.every_n;
  po.verbose = o.verbose;

  result& r = s.r;
  r.policy = o.policy;
  r.workload = o.workload;
  r.backend = gcp::to_string(ao[0].backend);
  r.iterations_requested = o.iters;
  r.layers = o.layers;
  r.d = o.d;
  r.batch = o.batch;
  r.host_allocs = o.host_allocs;
  r.host_heap_mib = o.host_heap_mib;
  r.host_heap_bytes = heap ? heap->bytes() : 0;
  r.gc_budget = o.gc_budget;
  r.hint_before_sync = o.hint_before_sync;
  r.sync_every = o.sync_every;
  r.global_array_objects = o.global_array_objects;
  r.device_count = o.devices;

  // A clean start, outside the measurement: garbage of earlier runs (and the
  // host heap's first marking) is not this run's work.
  GC_gcollect();
  for (int k = 0; k < o.devices; ++k) s.comps.push_back(make_compute(s.cuda, ordinal(o, k)));
  s.dh = std::make_unique<boehm::device_heap>(ao, o.policy, po);
  r.hard_limit = s.dh->allocator(0).hard_limit();
  r.soft_limit = s.dh->allocator(0).soft_limit();
  r.device_total = s.dh->allocator(0).device_memory().total;
  for (int k = 0; k < o.devices; ++k) {
    auto rp = std::make_unique<replica>();
    rp->device = static_cast<std::size_t>(k);
    rp->comp = s.comps[rp->device].get();
    rp->arr = std::make_unique<arrays>(*s.dh, rp->comp->stream(), rp->device, o.policy == "explicit_free",
                                       o.global_array_objects);
    s.reps.push_back(std::move(rp));
  }
}

// The end of iteration `it`: the iteration hint, then the policy's sync hint
// for every replica's stream (or, with --hint-order after, a plain wait for
// each, then the hint). With --sync-every K the wait comes only every K
// iterations and after the last one (`last`); the hint comes every time.
// The hint runs under a device probe, so that a collection it runs while the
// device is still busy with queued work is measured as hidden (Note [Exposed
// GC time], core/src/policy.cpp). With several replicas the probe watches
// replica 0's stream, whose work was queued first and so ends first: hidden
// stays a lower bound (and exposed an upper bound) whatever the other
// devices still have queued.
void end_iteration(loop_state& s, int it, bool last) {
  gcp::gc_policy& p = s.dh->policy();
  const int k = s.o.sync_every;
  const bool sync = last || (k > 0 && (it + 1) % k == 0);
  if (s.o.hint_before_sync) {
    {
      gcp::gc_policy::device_probe probe(p, s.reps[0]->comp->stream(), &s.dh->allocator(0));
      s.dh->iteration();
    }
    if (sync)
      for (auto& rp : s.reps) s.dh->synchronize(rp->comp->stream(), rp->device);
  } else {
    if (sync)
      for (auto& rp : s.reps) rp->comp->wait();
    s.dh->iteration();
  }
}

// The iteration's cumulative sample (device bytes summed over the devices)
// and its progress line.
void record_sample(loop_state& s, int it) {
  gcp::collection_stats cs;
  s.dh->policy().fill_stats(cs);
  const gcp::collection_stats& b = s.base;
  iteration_sample x{it + 1,
                     0,
                     0,
                     total(cs) - total(b),
                     cs.gc_seconds - b.gc_seconds,
                     policy_blocking(cs) - policy_blocking(b),
                     cs.runtime_full_collections - b.runtime_full_collections,
                     cs.exposed_gc_seconds - b.exposed_gc_seconds,
                     cs.hidden_gc_seconds - b.hidden_gc_seconds};
  for (std::size_t k = 0; k < s.dh->device_count(); ++k) {
    x.live += s.dh->allocator(k).live_bytes();
    x.reserved += s.dh->allocator(k).reserved_bytes();
  }
  s.r.samples.push_back(x);
  // The iteration whose run set the peak (peak_reserved_iteration): the
  // allocators' peaks are kept between samples, so a rise since the last
  // sample happened in this iteration (or its hint and sync).
  std::size_t peak = 0;
  for (std::size_t k = 0; k < s.dh->device_count(); ++k)
    peak = std::max(peak, static_cast<std::size_t>(s.dh->allocator(k).stats().reserved.peak));
  if (peak > s.peak_seen) {
    s.peak_seen = peak;
    s.r.peak_reserved_iteration = x.iteration;
  }
  if (const std::uint64_t changes = headroom_changes(*s.dh); changes != s.headroom_seen) {
    s.headroom_seen = changes;
    if (s.r.headroom_change_iterations.size() < 64) s.r.headroom_change_iterations.push_back(x.iteration);
  }
  if (!s.progress) return;
  const std::uint64_t minors = kind(cs, gcp::gc_kind::minor) - kind(b, gcp::gc_kind::minor);
  std::fprintf(s.progress,
               "[ iter %5d ] pool usage: %s (%s reserved) | collections: %llu (%llu minor, %llu full) | runtime's own: "
               "%llu%s%s\n",
               x.iteration, gcp::format_bytes(x.live).c_str(), gcp::format_bytes(x.reserved).c_str(),
               static_cast<unsigned long long>(x.collections), static_cast<unsigned long long>(minors),
               static_cast<unsigned long long>(x.collections - minors),
               static_cast<unsigned long long>(cs.runtime_collections - b.runtime_collections),
               s.r.ooms ? (" | OOMs: " + std::to_string(s.r.ooms)).c_str() : "",
               s.headroom_seen > s.headroom_changes0
                   ? (" | headroom changes: " + std::to_string(s.headroom_seen - s.headroom_changes0)).c_str()
                   : "");
}

// The iterations, timed: host time (start to the hint) and the hint + sync.
void iterate(loop_state& s) {
  s.t_start = clock_type::now();
  const double cpu_start = process_cpu_seconds();
  for (int it = 0; it < s.o.iters; ++it) {
    const auto t_iter = clock_type::now();
    const bool out_of_time = (s.o.max_seconds > 0 && since(s.t_start) >= s.o.max_seconds) ||
                             (!s.o.stop_file.empty() && ::access(s.o.stop_file.c_str(), F_OK) == 0);
    const bool last = it == s.o.iters - 1 || out_of_time;
    for (auto& rp : s.reps) forward_pass(*rp, s.o, it, last, s.r);
    const auto t_host = clock_type::now();
    s.host_seconds += std::chrono::duration<double>(t_host - t_iter).count();
    end_iteration(s, it, last);
    s.r.sync_seconds += since(t_host);
    for (auto& rp : s.reps) checksum(*rp, s.o.d);
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
  s.r.checksum = s.reps[0]->checksum;
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

// Each device's figures; the top-level byte figures from them (peaks: the
// most-pressed device; the rest: totals, see forward.hpp).
void collect_devices(loop_state& s) {
  result& r = s.r;
  r.devices.clear();
  r.peak_live_bytes = r.peak_reserved_bytes = r.final_live_bytes = r.final_reserved_bytes = 0;
  r.allocations = r.ladder_full_collections = 0;
  std::string status;
  for (auto& rp : s.reps) {
    const gcp::allocator_stats st = s.dh->stats(rp->device);
    device_result d;
    d.device = st.device;
    d.peak_live_bytes = static_cast<std::size_t>(st.requested.peak);
    d.peak_reserved_bytes = static_cast<std::size_t>(st.reserved.peak);
    d.final_live_bytes = static_cast<std::size_t>(st.requested.current);
    d.reclaimed_bytes = st.gc.reclaimed_bytes - rp->base.reclaimed_bytes;
    d.finalized = st.gc.finalized - rp->base.finalized;
    d.allocations = st.allocations - rp->allocs0;
    d.ooms = rp->ooms;
    d.hard_limit = s.dh->allocator(rp->device).hard_limit();
    d.soft_limit = s.dh->allocator(rp->device).soft_limit();
    d.device_total = s.dh->allocator(rp->device).device_memory().total;
    r.peak_live_bytes = std::max(r.peak_live_bytes, d.peak_live_bytes);
    r.peak_reserved_bytes = std::max(r.peak_reserved_bytes, d.peak_reserved_bytes);
    r.final_live_bytes += d.final_live_bytes;
    r.final_reserved_bytes += static_cast<std::size_t>(st.reserved.current);
    r.allocations += d.allocations;
    r.ladder_full_collections += st.ladder[static_cast<int>(gcp::ladder_step::full_collection)];
    if (!status.empty()) status += '\n';
    status += gcp::to_text(st);
    r.devices.push_back(d);
  }
  r.pool_status = status;
  std::uint64_t bytes = 0;
  for (auto& rp : s.reps) bytes += rp->arr->bytes_allocated();
  r.bytes_per_iteration = r.iterations ? static_cast<std::size_t>(bytes / r.iterations) : 0;
}

void collect_results(loop_state& s) {
  result& r = s.r;
  collect_devices(s);
  gcp::collection_stats g;  // the policy's own view: shared counts, finalized over every device
  s.dh->policy().fill_stats(g);
  const auto& b = s.base;
  r.collections_minor = kind(g, gcp::gc_kind::minor) - kind(b, gcp::gc_kind::minor);
  r.collections_incremental_full = kind(g, gcp::gc_kind::incremental_full) - kind(b, gcp::gc_kind::incremental_full);
  r.collections_blocking_full = kind(g, gcp::gc_kind::blocking_full) - kind(b, gcp::gc_kind::blocking_full);
  r.collections_full = r.collections_incremental_full + r.collections_blocking_full;
  r.blocking_cycles = g.blocking_cycles - b.blocking_cycles;
  steady_counts(r);
  for (int i = 0; i < 5 && i < gcp::gc_reason_count; ++i) r.collections_by_reason[i] = g.by_reason[i] - b.by_reason[i];
  r.incremental_slices = g.incremental_slices - b.incremental_slices;
  r.max_pause_seconds = g.longest_pause_seconds;
  r.gc_seconds = g.gc_seconds - b.gc_seconds;
  r.exposed_gc_seconds = g.exposed_gc_seconds - b.exposed_gc_seconds;
  r.exposed_gc_seconds_charged = g.exposed_gc_seconds_charged - b.exposed_gc_seconds_charged;
  r.exposed_gc_seconds_untimed = g.exposed_gc_seconds_untimed - b.exposed_gc_seconds_untimed;
  r.hidden_gc_seconds = g.hidden_gc_seconds - b.hidden_gc_seconds;
  r.gc_seconds_all = g.gc_seconds_all - b.gc_seconds_all;
  r.finalized = g.finalized - b.finalized;
  r.time_per_iter = r.iterations ? r.wall_seconds / r.iterations : 0;
  r.gc_fraction = r.wall_seconds > 0 ? r.gc_seconds / r.wall_seconds : 0;
  r.exposed_gc_fraction = r.wall_seconds > 0 ? r.exposed_gc_seconds / r.wall_seconds : 0;
  r.exposed_gc_fraction_charged = r.wall_seconds > 0 ? r.exposed_gc_seconds_charged / r.wall_seconds : 0;
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
  r.headroom_changes = headroom_changes(*s.dh) - s.headroom_changes0;
  r.available_bytes_min = ~std::size_t{0};
  for (std::size_t k = 0; k < s.dh->device_count(); ++k)
    r.available_bytes_min = std::min<std::size_t>(r.available_bytes_min, s.dh->stats(k).available_bytes_min);
}

// Outside the measurement. The oracle frees what it still holds; otherwise
// the roots go and two full collections finalize what is left, so that the
// heap shuts down empty.
void teardown(loop_state& s) {
  for (auto& rp : s.reps) release(*rp, s.o.layers);
  for (auto& c : s.comps) c->wait();
  scrub_stack();
  for (int i = 0; i < 2 && live_bytes(*s.dh) > 0; ++i) {
    const std::size_t before = live_bytes(*s.dh);
    s.dh->collect(gcp::gc_kind::blocking_full);
    settle_finalizers(*s.dh);
    if (live_bytes(*s.dh) == before) break;  // what is left is retained, not garbage
  }
  s.r.live_at_exit_bytes = live_bytes(*s.dh);
  // The pools' segments go back upstream by frees ordered on the computes'
  // streams: let them run before the device heap (and its resources) goes.
  for (std::size_t k = 0; k < s.dh->device_count(); ++k) s.dh->allocator(k).trim();
  for (auto& c : s.comps) c->wait();
  s.reps.clear();
  // Conservatively retained handles (a stale stack word): their blocks go
  // with the allocators; said once in live_at_exit_bytes, not as misuse lines.
  const bool quiet = s.r.live_at_exit_bytes > 0;
  gcp::misuse_handler old = quiet ? gcp::set_misuse_handler([](const char*) {}) : nullptr;
  s.dh.reset();
  if (quiet) gcp::set_misuse_handler(old);
  s.comps.clear();
}

}  // namespace

// --- the loop ---------------------------------------------------------------------------

result run(const options& o, host_heap* heap, std::FILE* progress) {
  boehm::init();
  if (!gcp::is_policy_name(o.policy)) GCPRESSURE_FAIL("forward_loop: unknown policy '" + o.policy + "'");
  if (o.devices < 1) GCPRESSURE_FAIL("forward_loop: devices must be at least 1, not " + std::to_string(o.devices));
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
  for (auto& rp : s.reps)
    s.r.model_bytes += init_model(*rp, o, s.dh->allocator(rp->device).hard_limit());
  for (auto& rp : s.reps) {
    gcp::device_allocator& a = s.dh->allocator(rp->device);
    a.reset_peaks();
    rp->allocs0 = a.allocation_count();
    s.peak_seen = std::max(s.peak_seen, a.reserved_bytes());
  }
  // A cycle the collector finished but the policy has not yet recorded would
  // make the collector's count and the policy's disagree (Note in
  // gc_policy::finish_cycle); settled here and before the results.
  s.dh->policy().finish_cycle();
  s.dh->policy().fill_stats(s.base);
  for (const std::uint64_t k : s.base.by_kind) s.r.collections_before_loop += k;
  for (auto& rp : s.reps) s.r.allocations_before_loop += rp->allocs0;
  for (auto& rp : s.reps) s.dh->policy().fill_stats_for(s.dh->allocator(rp->device), rp->base);
  s.headroom_changes0 = s.headroom_seen = headroom_changes(*s.dh);
  s.r.samples.reserve(static_cast<std::size_t>(o.iters));
  iterate(s);
  s.dh->policy().finish_cycle();
  collect_results(s);
  if (!o.trace.empty()) write_trace(s.r, o.trace);
  teardown(s);
  return std::move(s.r);
}

}  // namespace fwd
