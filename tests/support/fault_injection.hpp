// tests/support/fault_injection.hpp — a resource adaptor that makes its
// upstream fail on a schedule, for reliability tests (issue 6,
// docs/RELIABILITY.md). Test support: built into the gcpressure_testing
// library of tests/CMakeLists.txt, never installed.
//
// Note [Fault injection]
// fault_injecting_adaptor wraps any device_resource (RMM style: it does not
// own the upstream, which must outlive it) and decides, before each upstream
// allocation is attempted, whether to fail it instead:
//  - every_nth:   attempts N, 2N, 3N, ... fail (attempts are numbered from 1
//                 across all threads, in the order they reach the adaptor);
//  - probability: each attempt fails with this probability; the decision is a
//                 hash of (seed, attempt number), so a run is reproducible
//                 whenever the order of attempts is;
//  - byte_budget: attempts succeed until `byte_budget` bytes have been handed
//                 out in total (cumulative, not live); every attempt that
//                 would go past it fails ("fuel").
// Any rule firing fails the attempt. A failure is thrown as
// gcpressure::out_of_memory or, for a `cuda_error_fraction` share of them
// (chosen by the same seeded hash), as gcpressure::cuda_error — the two
// errors a real CUDA upstream throws. The upstream is never called for an
// injected failure, so nothing leaks.
//
// stream_op_probability makes the adaptor's stream_ops (record, query,
// synchronize — what the pool uses for cross-stream reuse) throw cuda_error
// with that probability, before the upstream's op is called. release() never
// fails (it is noexcept everywhere).
//
// Deallocations always pass through: frees cannot fail (they are noexcept).
// The adaptor counts what passed through, so a test can check that nothing it
// handed out is still outstanding. It keeps no table of live pointers: a
// double or foreign free reaching it is passed on (the upstream reports it)
// and skews live_* — under a device_allocator the limiting adaptor above it
// already drops such frees.
//
// Thread safety: every member is thread-safe; the schedule can be changed
// while other threads allocate. From a finalizer: no (as every resource).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "gcpressure/resource.hpp"

namespace gcpressure {

struct fault_schedule {
  std::uint64_t every_nth = 0;       // 0: off
  double probability = 0;            // 0: off; in [0, 1]
  std::size_t byte_budget = 0;       // 0: off (no budget)
  double cuda_error_fraction = 0;    // share of injected faults thrown as cuda_error, in [0, 1]
  double stream_op_probability = 0;  // stream ops (record/query/synchronize) throwing cuda_error, in [0, 1]
  std::uint64_t seed = 1;
};

struct fault_counters {
  std::uint64_t attempts = 0;             // upstream allocations asked of the adaptor
  std::uint64_t passed = 0;               // handed to the upstream, which succeeded
  std::uint64_t upstream_failures = 0;    // handed to the upstream, which threw
  std::uint64_t injected_oom = 0;         // failed by the schedule as out_of_memory
  std::uint64_t injected_cuda = 0;        // failed by the schedule as cuda_error
  std::uint64_t stream_op_calls = 0;      // record/query/synchronize calls seen
  std::uint64_t injected_stream_ops = 0;  // of those, failed by the schedule
  std::uint64_t deallocations = 0;
  std::size_t bytes_handed_out = 0;       // cumulative (what byte_budget counts)
  std::size_t live_bytes = 0;             // handed out and not yet returned (as requested)
  std::size_t live_allocations = 0;
};

class fault_injecting_adaptor final : public device_resource {
 public:
  explicit fault_injecting_adaptor(device_resource& upstream, fault_schedule s = {});
  ~fault_injecting_adaptor() override;

  // Replaces the schedule (thread-safe; takes effect for the next attempt).
  // Validates it: logic_error for a probability or fraction outside [0, 1].
  void set_schedule(const fault_schedule& s);
  fault_schedule schedule() const;
  // No more faults from now on (counters are kept).
  void disarm() { set_schedule(fault_schedule{}); }

  fault_counters counters() const noexcept;
  std::uint64_t injected() const noexcept;  // injected_oom + injected_cuda + injected_stream_ops
  device_resource& upstream() noexcept { return upstream_; }

 private:
  class faulty_streams;
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  device_memory_info do_memory_info() const override { return upstream_.memory_info(); }
  stream_ops& do_streams() noexcept override;
  const char* do_name() const noexcept override { return "fault_injecting"; }
  // Throws cuda_error when the schedule fails this stream op.
  void maybe_fail_stream_op(const char* op);

  device_resource& upstream_;
  mutable std::mutex mu_;  // guards schedule_ only
  fault_schedule schedule_;
  std::atomic<std::uint64_t> attempts_{0}, passed_{0}, upstream_failures_{0};
  std::atomic<std::uint64_t> injected_oom_{0}, injected_cuda_{0};
  std::atomic<std::uint64_t> stream_calls_{0}, injected_stream_{0}, deallocations_{0};
  std::atomic<std::size_t> handed_out_{0}, live_bytes_{0}, live_allocations_{0};
  faulty_streams* streams_ = nullptr;  // owned
};

}  // namespace gcpressure
