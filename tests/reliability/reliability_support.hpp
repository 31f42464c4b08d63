// tests/reliability/reliability_support.hpp — helpers of the reliability tests
// (issue 6; docs/RELIABILITY.md):
// - watchdog: fails the process (exit 124, with a message) instead of letting
//   a deadlocked test hang ctest;
// - scaled / env_count: counts scaled down in sanitizer builds, and from the
//   environment (see docs/RELIABILITY.md);
// - misuse_counter: counts misuse reported from noexcept paths;
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

namespace gcp_rel {

// --- watchdog ------------------------------------------------------------------

// Fails the process if not destroyed within `limit`. A deadlock then reports
// itself (test name, what it was doing) and ctest sees exit code 124.
class watchdog {
 public:
  watchdog(std::chrono::seconds limit, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lk(mu_);
      if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
        std::fprintf(stderr,
                     "\n[  FAILED  ] WATCHDOG: '%s' did not finish within %lld s (deadlock or livelock?); "
                     "last progress note: %s\n",
                     what_.c_str(), static_cast<long long>(limit.count()), note_.c_str());
        std::fflush(stderr);
        std::fflush(stdout);
        std::_Exit(124);
      }
    });
  }
  ~watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  // A line printed if the watchdog fires.
  void note(std::string s) {
    std::lock_guard<std::mutex> lk(mu_);
    note_ = std::move(s);
  }

 private:
  std::string what_, note_ = "(none)";
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// --- environment -------------------------------------------------------------

// A default count: `full` normally, `sanitized` in the ASan/UBSan and TSan
// builds (CMake defines GCP_SANITIZED_BUILD there). The GCPRESSURE_* variables
// read with env_count override either (docs/RELIABILITY.md).
constexpr std::uint64_t scaled(std::uint64_t full, [[maybe_unused]] std::uint64_t sanitized) {
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

// --- misuse reports --------------------------------------------------------------

class misuse_counter {
 public:
  misuse_counter() {
    count_.store(0);
    old_ = gcpressure::set_misuse_handler(&handler);
  }
  ~misuse_counter() { gcpressure::set_misuse_handler(old_); }
  misuse_counter(const misuse_counter&) = delete;
  misuse_counter& operator=(const misuse_counter&) = delete;
  int count() const { return count_.load(); }
  std::string last() const {
    std::lock_guard<std::mutex> lk(mu());
    return last_();
  }

 private:
  static void handler(const char* msg) {
    count_.fetch_add(1);
    std::lock_guard<std::mutex> lk(mu());
    last_() = msg ? msg : "";
  }
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::string& last_() {
    static std::string s;
    return s;
  }
  static inline std::atomic<int> count_{0};
  gcpressure::misuse_handler old_ = nullptr;
};

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
  bool has_incremental_full() const noexcept override { return true; }
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
  bool full_in_progress() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return full_active_;
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

// A tag written at both ends of a block (as far as it fits) and checked at free.
inline void put_tag(void* p, std::size_t n, std::uint64_t tag) {
  std::memcpy(p, &tag, std::min(n, sizeof tag));
  if (n >= 2 * sizeof tag) std::memcpy(static_cast<char*>(p) + n - sizeof tag, &tag, sizeof tag);
}
inline bool tag_ok(const void* p, std::size_t n, std::uint64_t tag) {
  std::uint64_t a = 0, t = 0;
  std::memcpy(&a, p, std::min(n, sizeof tag));
  std::memcpy(&t, &tag, std::min(n, sizeof tag));
  if (a != t) return false;
  if (n < 2 * sizeof tag) return true;
  std::memcpy(&a, static_cast<const char*>(p) + n - sizeof tag, sizeof tag);
  return a == tag;
}

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
