// forward.hpp — gcpressure_forward: the Flux-style forward loop of
// ../shared/context/flux-issue-gpu-memory-growing.txt as a library. The
// command line (examples/forward_loop), the forward/* benchmarks
// (bench/forward_bench.cpp) and the CI matrix (bench/forward/matrix_check.cmake)
// all run this one loop.
//
// The model: `layers` Dense layers y = relu.(W*x .+ b) (column-major, as in
// Julia). Every layer call allocates its output and its broadcast temporary
// (W*x) as GC-owned device arrays (boehm::device_heap::alloc) wrapped in small
// GC host objects, and the loop just drops them, as Julia code does. Under the
// explicit_free policy the loop instead calls unsafe_free on each array the
// moment it dies: the oracle. W, b and the input x are allocated once and kept
// reachable from an uncollectable GC root. The workloads (workload.hpp) add
// arrays that live longer, bursts and varied sizes on top of this loop.
//
// With --devices N the model is replicated on N devices (Note [Replicas] in
// replica.hpp) under one policy; Note [Figures over several devices] below
// says how the result's figures cover them.
//
// The compute is asynchronous on every backend (compute.hpp): cuBLAS on a CUDA
// stream, or the CPU on a host_stream's worker thread; the host runs ahead
// and waits at the end of each iteration through the policy's sync hint.
//
// The simulated runtime around it: a live host heap of `host_heap_mib` MiB of
// 64-byte linked GC objects (host_heap, built once and reusable across runs),
// plus `host_allocs` small host GC allocations per iteration that die at once.
//
// Thread safety: one run at a time per process (Boehm is process-global, and
// a run owns the calling thread's GC state). Call from a thread registered
// with Boehm (the main thread is, after boehm::init()). Nothing here is
// finalizer-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "gcpressure/config.hpp"

namespace fwd {

// Bad command line: what() says what was wrong.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad environment (a GCPRESSURE_* variable): not a command-line mistake, so
// forward_loop prints no usage text for it.
class environment_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct options {
  // "host" | "cuda" (cudaMalloc) | "cuda_async" (cudaMallocAsync); "" = cuda_async
  // when a GPU is usable, else host. The library's names (backend_kind).
  std::string backend;
  // Any of gcpressure::policy_names() / workload_names(); for parse_args and
  // expand() also a comma list or "all" (run() takes one name).
  std::string policy = "pressure";
  std::string workload = "steady";
  int reps = 1;                     // expand(): repetitions of the policy x workload matrix
  int iters = 2000;
  int layers = 4;
  int d = 256;
  int batch = 32;                   // with d=256, 4 layers: about 1 ms per iteration on the host backend
  std::size_t host_heap_mib = 0;
  int host_allocs = 300;            // small host GC allocations per iteration (garbage)
  gcpressure::size_spec hard_limit; // unset: forward_loop's default (see default_hard_limit)
  gcpressure::size_spec soft_limit; // unset: the library's (75% of the hard limit)
  std::size_t host_capacity = 0;    // simulated device size on the host backend; 0 = core's default
  // Data-parallel replicas of the model, one per device (Note [Replicas] in
  // replica.hpp): CUDA devices 0..devices-1, or as many simulated devices of
  // host_capacity on the host backend, each with the same limits; one policy
  // over all of them.
  int devices = 1;
  // The devices' ordinals (GCPRESSURE_DEVICES, or GCPRESSURE_DEVICE alone);
  // empty: 0..devices-1. --devices N clears it, --devices 0,2 and --device D
  // set it (Note [--devices: a count or a list], cli.cpp; flags win).
  std::vector<int> device_ordinals;
  bool pool = true;                     // GCPRESSURE_POOL: the library's pool caches freed blocks
  std::size_t async_release_threshold = 0;  // GCPRESSURE_ASYNC_RELEASE_THRESHOLD (cuda_async backend)
  std::string host_shared;          // host backend: GCPRESSURE_HOST_SHARED (a capacity shared with other processes)
  double gc_budget = 0.05;
  int every_n = 1;
  bool verbose = false;             // the policy's per-collection lines on stderr
  double max_seconds = 0;           // > 0: stop early after this much loop time (reported)
  std::string stop_file;            // non-empty: stop early once this file exists (reported)
  std::uint64_t seed = 42;
  // Workload parameters (workload.hpp).
  double promote_share = 0.25;      // promote: share of arrays kept alive 1..50 iterations
  int burst_every = 50;             // burst: one burst step every N iterations
  double burst_fraction = 0.5;      // burst: share of the hard limit held at once
  // Where the iteration hint goes relative to the wait for the device:
  // true = hint, then the policy's synchronize (default); false = the
  // pre-sync-hint order (plain wait, then the hint).
  bool hint_before_sync = true;
  // Synchronize with the device every K iterations (and after the last one);
  // 1 = every iteration, 0 = only after the last. The iteration hint still
  // comes every iteration. With K > 1 the host runs up to K iterations ahead
  // of the device (Note [The device's lag] in core/src/pressure_policy.cpp).
  int sync_every = 1;
  // Where the runtime's array objects come from (Note [Array objects] in
  // workload.cpp): true = boehm::alloc_array_object (global free lists, what
  // the bridge asks runtimes to use), false = GC_MALLOC (thread-local lists).
  bool global_array_objects = true;
  std::string trace;                // CSV path ("" = none); expand() fills in {policy}, {workload}, {rep}
  bool json = false;
  bool quiet = false;
  bool version = false;             // --version: print version() and exit
};

// The usage text (the command-line contract).
std::string usage();
// What each line of summary_table() means (the end of usage()).
std::string summary_glossary();
// The library's version and the backends this build has (--version).
std::string version();
// A trace path for one run: `pattern` with {policy}, {workload} and {rep}
// (1-based) replaced.
std::string trace_name(const std::string& pattern, const std::string& policy, const std::string& workload, int rep);

// Parses argv (argv[0] skipped). Defaults come from `base`, then the
// GCPRESSURE_* environment (backend, limits, policy, budget, every_n,
// verbose, host capacity), then the flags. Throws usage_error for a bad flag,
// environment_error for a bad variable. `help` is set when --help was given.
options parse_args(int argc, char** argv, bool* help = nullptr, options base = {});

// The runs `o` names: reps x workloads x policies (policies innermost, so a
// repetition's oracle runs beside the policies it is compared with).
std::vector<options> expand(const options& o);

// "steady", "promote", "burst", "varied" (nullptr-terminated).
const char* const* workload_names() noexcept;

// The hard limit used when none is given: 50% of device memory on CUDA; on the
// host backend 256 MiB of the simulated device (about 240x the default model's
// live set, so that at_limit's growth shows, and it reaches the limit within
// the default 2000 iterations once the host heap is large enough that Boehm's
// own collections are rare).
gcpressure::size_spec default_hard_limit(bool cuda);

// A live host heap of `mib` MiB of 64-byte linked GC objects, reachable from an
// uncollectable root until destruction. Building 1 GiB takes a few seconds
// (collections are disabled while it is built). Not copyable.
class host_heap {
 public:
  explicit host_heap(std::size_t mib);
  ~host_heap();
  host_heap(const host_heap&) = delete;
  host_heap& operator=(const host_heap&) = delete;
  std::size_t mib() const noexcept { return mib_; }
  std::size_t objects() const noexcept { return objects_; }
  std::size_t bytes() const noexcept { return bytes_; }  // GC_size() of every object, summed
  double build_seconds() const noexcept { return build_seconds_; }

 private:
  std::size_t mib_ = 0, objects_ = 0, bytes_ = 0;
  double build_seconds_ = 0;
  void** roots_ = nullptr;  // uncollectable array of chain heads
  std::size_t chains_ = 0;
};

// Cumulative figures after an iteration (deltas from the loop's start).
struct iteration_sample {
  int iteration;
  std::size_t live, reserved;    // summed over the devices
  std::uint64_t collections;    // collections the policy ran so far (all kinds)
  double gc_seconds;             // their time so far
  std::uint64_t blocking_full;   // policy blocking whole-heap collections so far (blocking fulls + blocking_cycles)
  std::uint64_t runtime_full;    // the runtime's own whole-heap collections so far
  double exposed_gc_seconds;     // policy exposed + the runtime's own time so far
  double hidden_gc_seconds;      // policy time that overlapped device work so far
};

// One device's figures over the loop (deltas from the loop's start).
struct device_result {
  int device = 0;                        // its ordinal (the CUDA device, or the simulated device's index)
  std::size_t peak_live_bytes = 0, peak_reserved_bytes = 0, final_live_bytes = 0;
  std::uint64_t reclaimed_bytes = 0;     // device bytes the policy's collections reclaimed on this device
  std::uint64_t finalized = 0;           // handles of this device finalized
  std::uint64_t allocations = 0;
  std::uint64_t ooms = 0;                // out_of_memory caught in this device's replica
  std::size_t hard_limit = 0, soft_limit = 0, device_total = 0;
};

// Note [Figures over several devices]
// With --devices N > 1 the top-level figures cover every device: the byte
// peaks (peak_live_bytes, peak_reserved_bytes) are the maximum over the
// devices (the most-pressed device, the one that would run out first), and
// every other device figure is a total over the devices: counts
// (allocations, finalized, ooms, ladder_full_collections), bytes
// (final_live_bytes, final_reserved_bytes, bytes_per_iteration, model_bytes,
// live_at_exit_bytes) and the samples' live/reserved. hard_limit,
// soft_limit and device_total are device 0's (every device gets the same
// options); `devices` has each device's own. The collections and their times
// are the one policy's and so shared (Note [One policy, N devices]). With
// N = 1 every figure is that device's, as before --devices existed.
struct result {
  // configuration
  std::string policy, backend, workload;
  int iterations_requested = 0, layers = 0, d = 0, batch = 0, host_allocs = 0;
  std::size_t host_heap_mib = 0, host_heap_bytes = 0;
  std::size_t hard_limit = 0, soft_limit = 0, device_total = 0;  // device 0's
  double gc_budget = 0;
  bool hint_before_sync = true;
  int sync_every = 1;
  bool global_array_objects = true;
  // outcome
  int iterations = 0;               // iterations run (fewer than requested if stopped by max_seconds)
  bool stopped_early = false;
  std::uint64_t ooms = 0;
  std::size_t peak_live_bytes = 0, peak_reserved_bytes = 0;  // over devices: the maximum
  int peak_reserved_iteration = 0;  // the iteration (1-based) that set it; 0: the model's set-up
  std::size_t final_live_bytes = 0, final_reserved_bytes = 0;
  std::size_t bytes_per_iteration = 0;  // device bytes the loop allocates per iteration (mean over the run)
  std::size_t model_bytes = 0;          // parameters + input, kept alive (every replica's)
  std::uint64_t collections_minor = 0;          // minor collections the policy ran
  std::uint64_t collections_full = 0;           // whole-heap cycles the policy ran (incremental or blocking)
  std::uint64_t collections_incremental_full = 0;
  std::uint64_t collections_blocking_full = 0;
  std::uint64_t blocking_cycles = 0;            // policy whole-heap cycles whose slices ran back to back
  // Blocking whole-heap collections of any origin after the first 10% of
  // iterations: policy blocking fulls + policy blocking_cycles + the runtime's
  // own whole-heap collections (counted as blocking: Boehm's own fulls stop
  // the world). collections_full_steady has the same value (its meaning was
  // corrected from "the policy's own" to "any origin").
  std::uint64_t collections_full_steady_any = 0;
  std::uint64_t collections_full_steady = 0;
  std::uint64_t collections_by_reason[5] = {};  // early, quiet_moment, ladder, user, baseline
  std::uint64_t incremental_slices = 0;
  std::uint64_t ladder_full_collections = 0;    // reclaim ladder full_collection steps run
  double max_pause_seconds = 0;     // longest pause of a collection the policy ran
  double max_iteration_seconds = 0; // longest iteration, end to end (covers the runtime's own pauses)
  double gc_seconds = 0;            // time in collections the policy ran (+ finalizers, drain)
  double exposed_gc_seconds = 0;    // policy exposed (measured where timed) + the runtime's own time (all exposed)
  double exposed_gc_seconds_untimed = 0;  // of it, counted whole: the upper-bound part (collection_stats)
  double hidden_gc_seconds = 0;     // policy time that overlapped device work (measured where timed, else a lower bound)
  double gc_seconds_all = 0;        // policy + the runtime's own time
  double wall_seconds = 0;          // the loop only
  double time_per_iter = 0;
  double gc_fraction = 0;           // gc_seconds / wall
  double exposed_gc_fraction = 0;   // exposed_gc_seconds / wall
  double exposed_gc_seconds_charged = 0;  // as the policy's budget counts it (collection_stats)
  double exposed_gc_fraction_charged = 0;
  double host_seconds_per_iter = 0; // mean host time from iteration start to the hint/sync
  double sync_seconds = 0;          // total time in the sync call (collection work + wait)
  double sync_wait_seconds = 0;     // total time blocked waiting for the device (policy's figure)
  double slack_seconds = 0;         // the policy's smoothed slack at the end
  std::uint64_t syncs = 0;
  std::uint64_t finalized = 0;      // handles finalized (device blocks queued by finalizers)
  std::uint64_t allocations = 0;    // device allocations during the run
  // The collector's view during the loop (deltas from the loop's start).
  std::uint64_t collections_runtime = 0;        // collections the runtime started itself
  std::uint64_t runtime_full_collections = 0;   // of which whole-heap
  std::uint64_t runtime_full_collections_steady = 0;
  std::uint64_t collector_collections = 0;      // every collection the collector completed (GC_get_gc_no)
  bool runtime_seconds_exact = false;
  std::size_t runtime_heap_bytes = 0;  // Boehm's heap size (GC_get_heap_size) at the end of the loop
  double runtime_gc_seconds = 0;    // the runtime's own collections' time (a lower bound unless exact)
  double cpu_seconds = 0;           // process CPU time during the loop (all threads; robust to a busy machine)
  double checksum = 0;              // sum of the last output's first column (sanity)
  std::size_t live_at_exit_bytes = 0;   // device bytes still live after teardown's collections
  // Other tenants (Note [Limits of available memory], core config.hpp): the
  // allocators' headroom changes during the loop (summed over devices), the
  // iterations at whose end one was seen (the first 64), and the least
  // available memory seen (the minimum over devices).
  std::uint64_t headroom_changes = 0;
  std::vector<int> headroom_change_iterations;
  std::size_t available_bytes_min = 0;
  std::string first_oom;            // the first out_of_memory message ("" if none)
  int first_oom_iteration = -1;     // the iteration of first_oom (-1 if none)
  std::string pool_status;          // the library's status table at the end of the loop (since the heap was made)
  std::uint64_t collections_before_loop = 0;  // the policy's collections during set-up (in pool_status, not above)
  std::uint64_t allocations_before_loop = 0;  // device allocations during set-up (likewise)
  std::vector<iteration_sample> samples;  // one per iteration run
  int device_count = 1;
  std::vector<device_result> devices;     // one per device, in device order
};

// Runs the loop. `heap` must hold options.host_heap_mib MiB (or be null when
// it is 0); when null and host_heap_mib > 0, a heap is built for the run.
// Per-iteration lines go to `progress` unless null or options.quiet. Writes
// the trace CSV when options.trace is set. Every count and time in the result
// is a delta from this run's start, so runs in one process do not see each
// other's collections. Throws gcpressure::logic_error / cuda_error on setup
// failures; out_of_memory during the loop is counted.
result run(const options& o, host_heap* heap = nullptr, std::FILE* progress = stdout);

std::string to_json(const result& r);      // one line, no newline
std::string summary_table(const result& r);
// One line that says what result::pool_status covers and how it differs
// from the summary (set-up's collections and allocations).
std::string status_heading(const result& r);
void write_trace(const result& r, const std::string& path);  // throws logic_error if it cannot

}  // namespace fwd
