// replica.hpp — one data-parallel replica of the forward loop's model (Note
// [Replicas]): its compute, its model copy, its arrays and its workload, on
// one device of the run's device_heap. Internal to gcpressure_forward (not
// installed). Thread-compatible: the loop's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "detail.hpp"

namespace fwd::detail {

// Note [Replicas]
// --devices N runs N replicas of the model, data-parallel as a runtime with
// one model copy per GPU would: replica k has its own compute (a stream on
// device k), its own W, b and x on device k, its own arrays (allocated on
// device k) and its own workload instance (same seed, so the replicas do the
// same work). One device_heap over the N devices, hence one collector and one
// policy (Note [One policy, N devices], policy.hpp), serves them all. Each
// iteration runs every replica's forward pass in turn, then the iteration
// hint once, then synchronizes every replica's stream (loop.cpp,
// end_iteration). With N = 1 this is the loop as it was.

// Model roots: uncollectable (scanned, never freed by the collector).
struct model_roots {
  darray* x;
  darray* out;       // the last iteration's output, read back after the sync
  darray* items[1];  // W[0..layers), b[0..layers)
};

struct replica {
  std::size_t device = 0;      // index in the device_heap
  compute* comp = nullptr;     // owned by the loop: it must outlive the device heap
  std::unique_ptr<arrays> arr;
  std::unique_ptr<workload> wl;
  model_roots* roots = nullptr;
  std::uint64_t ooms = 0;      // out_of_memory caught in this replica's passes
  double checksum = 0;         // checksum() of the last output read back
  gcp::collection_stats base;  // this device's view of the policy at the loop's start
  std::uint64_t allocs0 = 0;   // this device's allocation count at the loop's start

  replica() = default;
  replica(const replica&) = delete;
  replica& operator=(const replica&) = delete;
  ~replica();  // on an exception: unroots the model (its arrays become garbage)
};

// Parameters and input, initialised on the host from o.seed (every replica
// gets the same model) and uploaded; then the workload. Returns the model's
// device bytes (parameters + input).
std::size_t init_model(replica& rp, const options& o, std::size_t hard_limit);

// The layers of iteration `it` and the workload's part; an out_of_memory is
// counted (rp.ooms, r.ooms, r.first_oom) and the iteration's in-flight arrays
// dropped (the oracle frees them). `last`: keep the output for checksum().
void forward_pass(replica& rp, const options& o, int it, bool last, result& r);

// The sum of the last output's first column (a sanity check), read after the
// iteration's sync so that the host time does not include the device's; the
// output is dropped. No-op when no output was kept.
void checksum(replica& rp, int d);

// Outside the measurement: the workload lets go of what it holds, the oracle
// frees the model, and the model's roots go.
void release(replica& rp, int layers);

}  // namespace fwd::detail
