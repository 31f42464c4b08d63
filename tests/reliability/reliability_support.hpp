// tests/reliability/reliability_support.hpp — helpers of the reliability tests
// (issue 6; docs/RELIABILITY.md):
// (the watchdog, misuse capture, clear_stack, settle and block tags are the
// shared ones of tests/test_support.hpp, named here too)
// - scaled / env_count: counts scaled down in sanitizer builds, and from the
//   environment (see docs/RELIABILITY.md);
// - fake_collector: a collector over blocks "dropped" by a workload, with
//   young/old generations, an incremental whole-heap cycle and on-demand
//   finalizers that queue frees as real finalizers do;
// - live_set: the workload's shadow model of live blocks (overlap detection).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/error.hpp"
#include "test_support.hpp"

namespace gcp_rel {

// --- environment -------------------------------------------------------------

// A default count: `full` normally, `sanitized` in the ASan/UBSan and TSan
// builds (CMake defines GCP_SANITIZED_BUILD there). The GCPRESSURE_* variables
// read with env_count override either (docs/RELIABILITY.md).
constexpr std::uint64_t scaled([[maybe_unused]] std::uint64_t full, [[maybe_unused]] std::uint64_t sanitized) {
#ifdef GCP_SANITIZED_BUILD
  return sanitized;
#else
  return full;
#endif
}

// A positive integer from the environment, or `fallback` (also for garbage).
inline std::uint64_t env_count(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || n == 0) return fallback;
  return n;
}

// --- shared with every test (tests/test_support.hpp) ---------------------------

using gcp_test::clear_stack;
using gcp_test::settle;
using gcp_test::watchdog;
using misuse_counter = gcp_test::misuse_capture;
using gcp_test::put_tags;
using gcp_test::tags_ok;

// --- a collector without a runtime ------------------------------------------------

// Blocks a workload "drops" become garbage. A minor collection finds the young
// garbage (dropped since the last collection); old garbage needs a whole-heap
// cycle (collect_full, or start_full + step_full, which completes after
// `steps_per_full` slices). Found garbage is finalizable; run_finalizers()
// (or the workload's own "finalizer thread" calling it) pushes each block
// onto the allocator's deferred-free queue, as gc_bridge's finalizers do.
// Thread-safe.
class fake_collector final : public gcpressure::collector {
 public:
  explicit fake_collector(gcpressure::device_allocator& a, int steps_per_full = 3)
      : alloc_(a), steps_per_full_(steps_per_full) {}
  const char* name() const noexcept override { return "fake"; }

  // The collection count: a block allocated at epoch e and dropped after a
  // later collection survived it, so it is old garbage (found by full ones only).
  std::uint64_t epoch() const {
    std::lock_guard<std::mutex> lk(mu_);
    return collections_;
  }
  void drop(void* p, std::size_t bytes, gcpressure::stream_ref s, std::uint64_t allocated_at) {
    std::lock_guard<std::mutex> lk(mu_);
    (allocated_at < collections_ ? old_ : young_).push_back({p, bytes, s});
  }
  void collect_minor() override {
    std::lock_guard<std::mutex> lk(mu_);
    ++collections_;
    finalizable_.insert(finalizable_.end(), young_.begin(), young_.end());
    young_.clear();  // blocks live now are old from here on (see epoch())
  }
  void start_full() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!full_active_) {
      full_active_ = true;
      steps_left_ = steps_per_full_;
    }
  }
  bool step_full(double) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!full_active_) return true;
    if (--steps_left_ > 0) return false;
    full_locked();
    return true;
  }
  void collect_full() override {
    std::lock_guard<std::mutex> lk(mu_);
    full_locked();
  }
  std::size_t run_finalizers() override {
    std::vector<item> batch;
    {
      std::lock_guard<std::mutex> lk(mu_);
      batch.swap(finalizable_);
    }
    for (const auto& it : batch)
      if (!alloc_.deferred().push(it.p, it.bytes, it.s)) lost_.fetch_add(1);
    finalized_.fetch_add(batch.size());
    return batch.size();
  }
  gcpressure::collector_counters counters() const override {
    std::lock_guard<std::mutex> lk(mu_);
    gcpressure::collector_counters c;
    c.collections = collections_;
    c.full_collections = fulls_;
    return c;
  }
  // Dropped blocks not yet finalized (garbage not found yet, or found and
  // waiting for run_finalizers): count and bytes.
  std::size_t unfinalized() const {
    std::lock_guard<std::mutex> lk(mu_);
    return young_.size() + old_.size() + finalizable_.size();
  }
  std::size_t unfinalized_bytes() const {
    std::lock_guard<std::mutex> lk(mu_);
    std::size_t n = 0;
    for (const auto* v : {&young_, &old_, &finalizable_})
      for (const auto& it : *v) n += it.bytes;
    return n;
  }
  std::uint64_t finalized() const { return finalized_.load(); }
  std::uint64_t lost() const { return lost_.load(); }

 private:
  struct item {
    void* p;
    std::size_t bytes;
    gcpressure::stream_ref s;
  };
  void full_locked() {
    ++collections_;
    ++fulls_;
    full_active_ = false;
    finalizable_.insert(finalizable_.end(), young_.begin(), young_.end());
    finalizable_.insert(finalizable_.end(), old_.begin(), old_.end());
    young_.clear();
    old_.clear();
  }

  gcpressure::device_allocator& alloc_;
  const int steps_per_full_;
  mutable std::mutex mu_;
  std::vector<item> young_, old_, finalizable_;
  bool full_active_ = false;
  int steps_left_ = 0;
  std::uint64_t collections_ = 0, fulls_ = 0;
  std::atomic<std::uint64_t> finalized_{0}, lost_{0};
};

// --- shadow model of live blocks ----------------------------------------------------

// Live blocks by address; insert() reports an overlap with any live block.
// Thread-safe.
class live_set {
 public:
  // False (and not inserted) if [p, p+n) overlaps a live block.
  bool insert(const void* p, std::size_t n, std::string* why = nullptr) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lk(mu_);
    auto next = blocks_.lower_bound(a);
    if (next != blocks_.end() && next->first < a + n) return overlap(why, a, n, next->first, next->second);
    if (next != blocks_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second > a) return overlap(why, a, n, prev->first, prev->second);
    }
    blocks_.emplace(a, n);
    bytes_ += n;
    return true;
  }
  bool erase(const void* p) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == blocks_.end()) return false;
    bytes_ -= it->second;
    blocks_.erase(it);
    return true;
  }
  std::size_t bytes() const {
    std::lock_guard<std::mutex> lk(mu_);
    return bytes_;
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return blocks_.size();
  }

 private:
  static bool overlap(std::string* why, std::uintptr_t a, std::size_t n, std::uintptr_t b, std::size_t m) {
    if (why) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "new block [%#zx, +%zu) overlaps live block [%#zx, +%zu)",
                    static_cast<std::size_t>(a), n, static_cast<std::size_t>(b), m);
      *why = buf;
    }
    return false;
  }
  mutable std::mutex mu_;
  std::map<std::uintptr_t, std::size_t> blocks_;
  std::size_t bytes_ = 0;
};

// xorshift64*: deterministic per seed.
struct rng {
  std::uint64_t s;
  explicit rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL) {}
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
  std::uint64_t below(std::uint64_t n) { return n ? next() % n : 0; }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
};

}  // namespace gcp_rel
