// tests/fake_runtime.hpp — a fake runtime for policy tests: a fake clock, a
// fake generational collector and a fake device whose streams finish work at
// fake-clock times.
//
// The fake collector owns "handles" to device blocks; the test drops them
// (makes them unreachable) and a collection of the right kind finds them and
// queues their blocks — the finalizers run in run_finalizers(), which pushes
// onto allocator.deferred() exactly as a Boehm finalizer does. It is
// generational like Boehm in incremental mode: a minor collection frees only
// unreachable *young* handles and promotes every survivor to old; a
// whole-heap cycle (incremental or blocking) frees every unreachable handle.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/clock.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/resource.hpp"

namespace gcp_test {

namespace gcp = gcpressure;

// Options of a host-backed allocator with these limits (bytes).
inline gcp::allocator_options host_limits(std::size_t hard, std::size_t soft) {
  gcp::allocator_options o;
  o.backend = gcp::backend_kind::host;
  o.hard_limit.bytes = hard;
  o.soft_limit.bytes = soft;
  return o;
}

// Time that moves only when told to. Thread-safe.
class fake_clock final : public gcp::clock_source {
 public:
  double now() const noexcept override {
    std::lock_guard<std::mutex> lk(mu_);
    t_ += tick_;
    return t_;
  }
  // Every read advances the clock by `s`: the microseconds a real host
  // spends between two reads (0: time moves only by advance).
  void set_tick(double s) {
    std::lock_guard<std::mutex> lk(mu_);
    tick_ = s;
  }
  void advance(double s) {
    std::lock_guard<std::mutex> lk(mu_);
    t_ += s;
  }
  void advance_to(double t) {
    std::lock_guard<std::mutex> lk(mu_);
    t_ = std::max(t_, t);
  }

 private:
  mutable std::mutex mu_;
  mutable double t_ = 1000.0;
  double tick_ = 0;
};

// A device with one queue of work measured in fake seconds: launch(s) queues
// s seconds of work behind what is queued; an event recorded now completes
// when the queue drains; synchronize moves the clock to that time (the host
// blocked). Memory comes from a host_resource.
class fake_device final : public gcp::device_resource, public gcp::stream_ops {
 public:
  fake_device(fake_clock& c, std::size_t capacity) : clock_(c), inner_(capacity) {}
  void launch(double seconds) {
    std::lock_guard<std::mutex> lk(mu_);
    busy_until_ = std::max(busy_until_, clock_.now()) + seconds;
  }
  double busy_until() const {
    std::lock_guard<std::mutex> lk(mu_);
    return busy_until_;
  }
  int records = 0, queries = 0, syncs = 0;

  gcp::event_ref record(gcp::stream_ref) override {
    std::lock_guard<std::mutex> lk(mu_);
    ++records;
    return new double(std::max(busy_until_, clock_.now()));
  }
  bool query(gcp::event_ref e) override {
    ++queries;
    return clock_.now() >= *static_cast<double*>(e);
  }
  void synchronize(gcp::event_ref e) override {
    ++syncs;
    clock_.advance_to(*static_cast<double*>(e));
  }
  void release(gcp::event_ref e) noexcept override { delete static_cast<double*>(e); }
  // One queue: idle since it drained (Note [Exposed GC time, measured]);
  // timed = false plays a backend that cannot tell (the probe's upper bound).
  bool timed = true;
  double idle_seconds(gcp::event_ref) override {
    if (!timed) return -1;
    std::lock_guard<std::mutex> lk(mu_);
    return std::max(0.0, clock_.now() - busy_until_);
  }

 private:
  void* do_allocate(std::size_t bytes, gcp::stream_ref s) override { return inner_.allocate(bytes, s); }
  void do_deallocate(void* p, std::size_t bytes, gcp::stream_ref s) noexcept override { inner_.deallocate(p, bytes, s); }
  gcp::device_memory_info do_memory_info() const override { return inner_.memory_info(); }
  gcp::stream_ops& do_streams() noexcept override { return *this; }
  const char* do_name() const noexcept override { return "fake_device"; }

  fake_clock& clock_;
  gcp::host_resource inner_;
  mutable std::mutex mu_;
  double busy_until_ = 0;
};

// A shared event log: the fake collector, the recording hook and the
// recording upstream all append to it, so one vector shows the interleaving.
struct timeline {
  std::mutex mu;
  std::vector<std::string> events;
  void add(std::string e) {
    std::lock_guard<std::mutex> lk(mu);
    events.push_back(std::move(e));
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lk(mu);
    return events;
  }
  void clear() {
    std::lock_guard<std::mutex> lk(mu);
    events.clear();
  }
};

class fake_collector final : public gcp::collector {
 public:
  explicit fake_collector(timeline* t = nullptr) : log_(t) {}

  // Binds the allocator whose deferred queue "finalizers" push onto.
  void bind(gcp::device_allocator& a) { alloc_ = &a; }

  // Registers a device block as owned by a new (reachable, young) handle.
  // `on`: the allocator it came from (nullptr: the bound one), whose
  // deferred queue its "finalizer" pushes onto (several devices: Note [One
  // policy, N devices]).
  int track(void* p, std::size_t bytes, gcp::device_allocator* on = nullptr) {
    std::lock_guard<std::mutex> lk(mu_);
    const int id = next_id_++;
    objs_[id] = obj{p, bytes, true, false, on};
    young_tracked_ += bytes;
    return id;
  }
  // The handle becomes garbage.
  void drop(int id) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = objs_.find(id);
    ASSERT_NE(it, objs_.end());
    it->second.reachable = false;
  }
  // The runtime freed the block itself (reference counting): the handle is
  // gone without a finalizer; the caller frees the block.
  void forget(int id) {
    std::lock_guard<std::mutex> lk(mu_);
    ASSERT_EQ(objs_.erase(id), 1u);
  }
  bool is_old(int id) {
    std::lock_guard<std::mutex> lk(mu_);
    return objs_.at(id).old;
  }
  bool tracked(int id) {
    std::lock_guard<std::mutex> lk(mu_);
    return objs_.count(id) != 0;
  }
  // End of the test: every handle dies and its block goes back.
  void release_all() {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [_, o] : objs_) pending_.push_back(o);
    objs_.clear();
    std::vector<gcp::device_allocator*> touched;
    for (const auto& o : pending_)
      if (auto* a = o.on ? o.on : alloc_) {
        a->deferred().push(o.p, o.bytes, nullptr);
        if (std::find(touched.begin(), touched.end(), a) == touched.end()) touched.push_back(a);
      }
    pending_.clear();
    for (auto* a : touched) a->drain();
  }

  // Knobs. With a fake clock, each collection advances it by its cost
  // instead of sleeping (deterministic timing: Note [Timing is injected]).
  fake_clock* clock = nullptr;
  double minor_seconds = 0, full_seconds = 0, slice_seconds = 0;
  // A minor also costs this per MiB of blocks tracked since the last one
  // (the young volume: Note [A smaller minor is tried]); not with slices.
  double minor_seconds_per_young_mib = 0;
  // Added to the minors in turn (the n-th minor gets minor_extra_seconds[n %
  // size]): a machine's jitter, deterministic.
  std::vector<double> minor_extra_seconds;
  // A machine's busy spell in time: minors that start in [spell_from,
  // spell_until) of the clock take spell_extra_seconds more.
  double spell_from = 0, spell_until = 0, spell_extra_seconds = 0;
  std::chrono::milliseconds sleep_per_collection{0};
  int slices_per_full = 3;
  std::size_t heap_bytes = 0;
  double last_nap_seconds = 0;  // how long the last collection really slept (loaded machines oversleep)

  // Call counts.
  int minors = 0, fulls = 0, full_starts = 0, full_steps = 0, full_cycles_done = 0, finalizer_runs = 0;
  int collections() const { return minors + fulls + full_cycles_done; }

  const char* name() const noexcept override { return "fake"; }

  void collect_minor() override {
    note("collect_minor");
    std::lock_guard<std::mutex> lk(mu_);
    ++minors;
    ++counters_.collections;
    nap();
    if (clock) {
      const double at = spell_until > 0 ? clock->now() : 0;  // a read ticks the clock
      const double extra = (minor_extra_seconds.empty()
                                ? 0
                                : minor_extra_seconds[static_cast<std::size_t>(minors) % minor_extra_seconds.size()]) +
                           (at >= spell_from && at < spell_until ? spell_extra_seconds : 0);
      clock->advance(minor_seconds + extra +
                     minor_seconds_per_young_mib * static_cast<double>(young_tracked_) / (1 << 20));
    }
    young_tracked_ = 0;
    sweep_young();
  }

  // Sliced minors (Note [Sliced cycles]) when incremental_minor is set: the
  // minor's cost is spread over minor_slices slices.
  bool incremental_minor = false;
  int minor_slices = 4;
  int minor_cycles_done = 0;
  bool has_incremental_minor() const noexcept override { return incremental_minor; }
  void start_minor() override {
    if (!incremental_minor) return collect_minor();
    note("start_minor");
    std::lock_guard<std::mutex> lk(mu_);
    minor_active_ = true;
    minor_left_ = minor_slices;
  }
  bool step_minor(double) override {
    if (!incremental_minor) return true;
    note("step_minor");
    std::lock_guard<std::mutex> lk(mu_);
    if (!minor_active_) return true;
    if (clock) clock->advance(minor_seconds / minor_slices);
    if (--minor_left_ > 0) return false;
    minor_active_ = false;
    ++minors;
    ++minor_cycles_done;
    ++counters_.collections;
    sweep_young();
    return true;
  }

  void start_full() override {
    note("start_full");
    std::lock_guard<std::mutex> lk(mu_);
    if (full_active_) return;
    ++full_starts;
    full_active_ = true;
    slices_left_ = slices_per_full;
  }

  bool step_full(double) override {
    note("step_full");
    std::lock_guard<std::mutex> lk(mu_);
    ++full_steps;
    if (!full_active_) return true;
    nap();
    if (clock) clock->advance(slice_seconds);
    if (--slices_left_ > 0) return false;
    full_active_ = false;
    ++full_cycles_done;
    ++counters_.collections;
    ++counters_.full_collections;
    sweep_all();
    return true;
  }

  // Test-side view (not part of gcp::collector): a cycle is in progress.
  bool full_in_progress() const {
    std::lock_guard<std::mutex> lk(mu_);
    return full_active_;
  }

  void collect_full() override {
    note("collect_full");
    std::lock_guard<std::mutex> lk(mu_);
    ++fulls;
    ++counters_.collections;
    ++counters_.full_collections;
    nap();
    if (clock) clock->advance(full_seconds);
    full_active_ = false;
    sweep_all();
  }

  std::size_t run_finalizers() override {
    note("run_finalizers");
    std::vector<obj> batch;
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++finalizer_runs;
      batch.swap(pending_);
    }
    for (const auto& o : batch) {
      gcp::device_allocator* a = o.on ? o.on : alloc_;
      EXPECT_NE(a, nullptr);
      if (a) a->deferred().push(o.p, o.bytes, nullptr);
    }
    return batch.size();
  }

  // A collection the runtime starts on its own (not through the interface):
  // counted as "own"; whole = a whole-heap one.
  void runtime_collection(bool whole) {
    std::lock_guard<std::mutex> lk(mu_);
    ++counters_.collections;
    ++counters_.own_collections;
    if (whole) {
      ++counters_.full_collections;
      ++counters_.own_full_collections;
      sweep_all();
    } else {
      sweep_young();
    }
  }

  gcp::collector_counters counters() const override {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = counters_;
    c.heap_bytes = heap_bytes;
    return c;
  }

 private:
  struct obj {
    void* p;
    std::size_t bytes;
    bool reachable;
    bool old;
    gcp::device_allocator* on;  // nullptr: alloc_
  };
  void note(const char* what) {
    if (log_) log_->add(std::string("gc.") + what);
  }
  void nap() {
    if (sleep_per_collection.count() <= 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(sleep_per_collection);
    last_nap_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void sweep_young() {
    for (auto it = objs_.begin(); it != objs_.end();) {
      if (!it->second.reachable && !it->second.old) {
        pending_.push_back(it->second);
        it = objs_.erase(it);
      } else {
        it->second.old = true;  // survived a collection: promoted
        ++it;
      }
    }
  }
  void sweep_all() {
    for (auto it = objs_.begin(); it != objs_.end();) {
      if (!it->second.reachable) {
        pending_.push_back(it->second);
        it = objs_.erase(it);
      } else {
        it->second.old = true;
        ++it;
      }
    }
  }

  timeline* log_;
  gcp::device_allocator* alloc_ = nullptr;
  mutable std::mutex mu_;
  std::map<int, obj> objs_;
  std::vector<obj> pending_;  // found dead, finalizers not yet run
  int next_id_ = 1;
  std::size_t young_tracked_ = 0;  // bytes tracked since the last minor (minor_seconds_per_young_mib)
  bool full_active_ = false;
  int slices_left_ = 0;
  bool minor_active_ = false;
  int minor_left_ = 0;
  gcp::collector_counters counters_;
};

}  // namespace gcp_test
