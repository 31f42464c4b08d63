// The "pressure" policy's class and per-device state (internal to core/src):
// its events in pressure_policy.cpp, what it learns in pressure_learn.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cost_model.hpp"
#include "device_lag.hpp"
#include "gcpressure/policy.hpp"
#include "pressure_model.hpp"

namespace gcpressure::detail {

// Note [Per-device state]
// What the policy learns about device memory is per device (Note [One
// policy, N devices] in policy.hpp): its floor, old and live bytes, its
// allocation rate and yield, its headroom, its lag and the other tenants'
// share of it. What it learns about the collector is shared: the cost of a
// minor (which depends on the host heap, and on the young objects of all
// devices together), the cost and wall time of a whole-heap cycle, the
// exposed time.
struct device_state {
  // Guarded by collect_mu_.
  double rate = 0, yield = 1.0;  // young bytes per second; share of young bytes gone at a collection
  double rate_bytes = 0, rate_seconds = 0;  // Note [The allocation rate is per wall second]
  std::size_t live_after = 0, old = 0, floor = 0;  // Note [Generations of device bytes]
  double stretch = 0;            // Note [Quiet moments]: bytes per stretch between hints
  double last_hint_at = 0;       // Note [The allocation rate is per wall second]
  std::uint64_t hints_seen = 0;
  std::size_t young_at_quiet = 0, collected_since_quiet = 0;
  std::size_t backoff = 0;       // Note [No collection storms]
  double futile = 1;             // Note [Collections that find nothing]: the threshold's stretch
  detail::device_lag lag;        // Note [The device's lag]
  // Relaxed atomics: read without the lock (Note [Concurrent allocators],
  // Note [The allocation fast path]).
  std::atomic<stream_ref> last_stream{nullptr};  // of the last allocation: hints record on it
  std::atomic<std::size_t> device_free{0}, reserved_at_refresh{0};
  std::atomic<std::size_t> fast_young{0}, fast_live{0}, fast_reserved{0};  // 0 fast_young: slow path
  // Note [Allowances of the fast path]: written at a grant, not per allocation.
  alignas(64) std::atomic<std::size_t> fast_allowance{0};
  std::atomic<std::uint64_t> fast_epoch{0};
};

class pressure_policy final : public gc_policy {
 public:
  pressure_policy(const std::vector<device_allocator*>& d, collector& c, policy_options o);
  const char* name() const noexcept override { return "pressure"; }
  void before_allocate(device_allocator& a, std::size_t bytes, stream_ref stream) override;
  void iteration() override;
  void quiet_moment(bool will_block) override;

 protected:
  void device_added(std::size_t) override;
  void before_block(device_allocator&, const std::function<bool()>& device_busy) override;
  void at_idle_sync(device_allocator&) override;
  void after_sync(device_allocator& on, bool waited, double device_done_at) override;

 private:
  // The event side (pressure_policy.cpp).
  std::size_t young_of(std::size_t i) const noexcept { return device(i).since_mark(); }
  std::size_t young_all() const noexcept;
  detail::device_snapshot device_view(std::size_t i, std::size_t bytes) const;
  detail::pressure_snapshot snapshot(std::size_t i, pressure_event event, std::size_t bytes, double at = -1);
  void hint_work(double at);
  bool sync_due(bool idle, double* guessed);
  void block_work(const std::function<bool()>& device_busy);
  bool nothing_due(std::size_t i, device_allocator& a, std::size_t bytes) const noexcept;
  bool take_allowance(std::size_t i, std::size_t bytes) const noexcept;
  void publish_fast_path() noexcept;

  // The learning side (pressure_learn.cpp).
  void start_budget();
  double budget_exposed() const noexcept;
  double budget_wall() const noexcept;
  double budget_spent(double pause);
  double exposed_fraction() const;
  void explain_early(const detail::pressure_snapshot& s, const detail::pressure_decision& dec) const;
  void refresh_device();
  double smooth(double old, double sample) const;
  void learn_stretch(std::size_t i, double t);
  void learn_rate_at_hint(device_state& d, double bytes, double t);
  void learn_rate(const outcome& o);
  double found_queued(const outcome& o) const;
  void explain_guess(const outcome& o, double share, double found) const;
  void begin_minor(double guessed = 0, double lag = 0, bool from_events = false);
  void charge_minor(const outcome& o, double timed = -1);  // timed: a stood guess's measured exposed seconds
  // The exposed GC seconds the budget counts (Note [Charging what the lag hid]).
  double charged_exposed() const noexcept { return own_exposed_seconds() - overcharge_.load(std::memory_order_relaxed); }
  double uncharged_seconds() const noexcept override { return overcharge_.load(std::memory_order_relaxed); }
  void learn_minor(const outcome& o, bool loop);
  void learn_full(const outcome& o);
  void finish_minor(const outcome& o, gc_reason reason);
  void finish_cycle(gc_reason reason);
  bool full_worth(std::size_t* suspect_sum);
  bool pressing(std::size_t i) const;
  double expected_full_cost() const;
  void maybe_start_full(gc_reason reason);

  const detail::pressure_tuning tuning_;
  std::unique_ptr<device_state[]> dev_;  // one per device (capacity: add_device)
  detail::cost_model minor_cost_;
  double exposed_at_minor_start_ = 0, lag_at_minor_start_ = 0;
  bool lag_from_events_ = false;  // begin_minor's `from_events`
  // Note [Charging what the lag hid]; written under the collection lock,
  // read by stats() from any thread.
  std::atomic<double> overcharge_{0};
  bool minor_begun_ = false;  // begin_minor() set the two above for the minor in progress
  bool lag_guessed_ = false;        // the last snapshot's lag rests on the guess
  double guess_at_minor_start_ = 0;  // the guessed lag the minor in progress was taken in (0: none)
  exposure exposure_at_minor_start_;  // own_exposure() then (Note [An overrun minor does not refute the guess])
  bool probing_ = false;            // the minor in progress tries a smaller one (Note [A smaller minor is tried])
  bool learning_ = false;           // the sync's minor is the loop's first (verbose; Note [The loop's first sync learns its minor])
  double lag_guess_share_ = 1;      // the guess, x the predicted pause (Note [A guess before the first sync])
  double full_cost_ = 0, full_wall_ = 0;
  double cycle_started_ = 0, exposed_at_cycle_start_ = 0;
  double loop_started_ = -1, exposed_before_loop_ = 0;  // Note [The budget starts with the loop]
  double forgiven_ = 0;  // Note [A budget of one second]: the surplus it cannot keep
  bool bucket_started_ = false;
  // A cycle that found less than a quarter of the suspected garbage doubles
  // the suspicion the next one needs (the live set grew instead).
  double full_backoff_ = 1;
  std::size_t suspect_at_start_ = 0;
  std::uint64_t own_full_seen_ = 0;
  int headroom_collections_ = 0;  // Note [No collection storms]
  std::atomic<double> fast_refreshed_{0};
  std::uint64_t syncs_at_quiet_ = 0;
  bool syncing_ = false;          // a sync came within the last 64 hints
  std::uint64_t hints_since_sync_ = 0;
  double refreshed_at_ = 0;
  double last_end_ = 0;
  bool rate_started_ = false;  // Note [The allocation rate is per wall second]
  bool floor_known_ = false;   // Note [A floor before the first whole-heap collection]
};

}  // namespace gcpressure::detail
