// test_fault_injection.cpp — the fault-injecting adaptor, and random
// workloads under it (issue 6, docs/RELIABILITY.md "Fault injection").
// GCPRESSURE_FAULT_OPS sets the operations per single-thread run (default
// 6000, 2000 in sanitizer builds; the 4-thread runs do half as many per
// thread).
//
// The workloads run device_allocator (with and without the pool) over
// fault_injecting_adaptor over host_resource, with a fake collector and each
// collecting policy, on host streams whose simulated kernels touch the blocks.
// Every run must end with
//  - exact accounting: the shadow model's live bytes (+ dropped blocks not yet
//    finalized + frees queued) equal the allocator's at every check point, and
//    live = 0 after the final drain;
//  - no leaked upstream memory: host_resource::used() == 0 and outstanding()
//    == 0 after trim, and nothing outstanding at the adaptor;
//  - every failure surfaced as the documented error: allocations throw only
//    out_of_memory or cuda_error; every injected cuda_error reaches a caller
//    exactly once; the allocator's OOM count equals the OOMs callers saw;
//    no misuse reported, no block lost by a finalizer, no overlap, no write
//    by a stream's late work into a block another stream was given.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/policy.hpp"
#include "fault_injection.hpp"
#include "reliability_support.hpp"

namespace gcp = gcpressure;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// --- the adaptor itself ----------------------------------------------------------

TEST(FaultAdaptor, EveryNthFailsExactlyThoseAttempts) {
  gcp::host_resource host(64 * MiB);
  gcp::fault_schedule s;
  s.every_nth = 3;
  gcp::fault_injecting_adaptor f(host, s);
  std::vector<void*> got;
  for (int i = 1; i <= 30; ++i) {
    try {
      got.push_back(f.allocate(4 * KiB));
      EXPECT_NE(i % 3, 0) << "attempt " << i << " should have failed";
    } catch (const gcp::out_of_memory& e) {
      EXPECT_EQ(i % 3, 0) << "attempt " << i << " failed: " << e.what();
      EXPECT_TRUE(contains(e.what(), "injected fault (every_nth)")) << e.what();
    }
  }
  EXPECT_EQ(got.size(), 20u);
  auto c = f.counters();
  EXPECT_EQ(c.attempts, 30u);
  EXPECT_EQ(c.injected_oom, 10u);
  EXPECT_EQ(c.passed, 20u);
  EXPECT_EQ(c.live_allocations, 20u);
  EXPECT_EQ(host.outstanding(), 20u);
  for (void* p : got) f.deallocate(p, 4 * KiB);
  c = f.counters();
  EXPECT_EQ(c.live_allocations, 0u);
  EXPECT_EQ(c.live_bytes, 0u);
  EXPECT_EQ(host.used(), 0u);
}

std::vector<bool> failure_pattern(std::uint64_t seed, double p, int n) {
  gcp::host_resource host(64 * MiB);
  gcp::fault_schedule s;
  s.probability = p;
  s.seed = seed;
  gcp::fault_injecting_adaptor f(host, s);
  std::vector<bool> failed;
  for (int i = 0; i < n; ++i) {
    try {
      f.deallocate(f.allocate(512), 512);
      failed.push_back(false);
    } catch (const gcp::out_of_memory&) {
      failed.push_back(true);
    }
  }
  EXPECT_EQ(host.used(), 0u);
  return failed;
}

TEST(FaultAdaptor, ProbabilityIsSeededAndReproducible) {
  const auto a = failure_pattern(42, 0.2, 5000);
  const auto b = failure_pattern(42, 0.2, 5000);
  const auto c = failure_pattern(43, 0.2, 5000);
  EXPECT_EQ(a, b) << "same seed, same order of attempts: same failures";
  EXPECT_NE(a, c);
  const auto failures = std::count(a.begin(), a.end(), true);
  EXPECT_GT(failures, 850);  // 1000 expected; sd ~28
  EXPECT_LT(failures, 1150);
}

TEST(FaultAdaptor, ByteBudgetIsCumulativeNotLive) {
  gcp::host_resource host(64 * MiB);
  gcp::fault_schedule s;
  s.byte_budget = 10 * KiB;
  gcp::fault_injecting_adaptor f(host, s);
  for (int i = 0; i < 10; ++i) f.deallocate(f.allocate(1 * KiB), 1 * KiB);  // live stays 0
  EXPECT_THROW(f.allocate(1), gcp::out_of_memory);
  try {
    f.allocate(1);
  } catch (const gcp::out_of_memory& e) {
    EXPECT_TRUE(contains(e.what(), "byte_budget")) << e.what();
  }
  EXPECT_EQ(f.counters().bytes_handed_out, 10 * KiB);
  f.disarm();
  f.deallocate(f.allocate(1), 1);
  EXPECT_EQ(host.used(), 0u);
}

TEST(FaultAdaptor, InjectedCudaErrorsAreCudaErrors) {
  gcp::host_resource host(64 * MiB);
  gcp::fault_schedule s;
  s.every_nth = 1;
  s.cuda_error_fraction = 1;
  gcp::fault_injecting_adaptor f(host, s);
  try {
    f.allocate(256);
    FAIL() << "no fault";
  } catch (const gcp::cuda_error& e) {
    EXPECT_TRUE(contains(e.what(), "CUDA error 719")) << e.what();
    EXPECT_TRUE(contains(e.what(), "injected")) << e.what();
  }
  // A mix: both kinds, about half each.
  s.cuda_error_fraction = 0.5;
  f.set_schedule(s);
  int oom = 0, cuda = 0;
  for (int i = 0; i < 2000; ++i) {
    try {
      f.allocate(256);
      ADD_FAILURE() << "no fault";
    } catch (const gcp::out_of_memory&) {
      ++oom;
    } catch (const gcp::cuda_error&) {
      ++cuda;
    }
  }
  EXPECT_GT(oom, 850);
  EXPECT_GT(cuda, 850);
  EXPECT_EQ(f.counters().injected_oom + f.counters().injected_cuda, 2001u);
  EXPECT_EQ(host.outstanding(), 0u);
}

TEST(FaultAdaptor, StreamOpsFailAsCudaErrors) {
  gcp::host_resource host(64 * MiB);
  gcp::host_stream st;
  gcp::fault_schedule s;
  s.stream_op_probability = 1;
  gcp::fault_injecting_adaptor f(host, s);
  EXPECT_THROW(f.streams().record(st.ref()), gcp::cuda_error);
  f.disarm();
  gcp::event_ref e = f.streams().record(st.ref());
  s.stream_op_probability = 1;
  f.set_schedule(s);
  EXPECT_THROW(f.streams().query(e), gcp::cuda_error);
  EXPECT_THROW(f.streams().synchronize(e), gcp::cuda_error);
  f.streams().release(e);  // never fails
  EXPECT_EQ(f.counters().injected_stream_ops, 3u);
}

TEST(FaultAdaptor, BadScheduleIsLogicError) {
  gcp::host_resource host(64 * MiB);
  gcp::fault_injecting_adaptor f(host);
  gcp::fault_schedule s;
  s.probability = 1.5;
  EXPECT_THROW(f.set_schedule(s), gcp::logic_error);
  s.probability = 0;
  s.cuda_error_fraction = -0.1;
  EXPECT_THROW(f.set_schedule(s), gcp::logic_error);
  s.cuda_error_fraction = 0;
  s.stream_op_probability = 2;
  EXPECT_THROW(f.set_schedule(s), gcp::logic_error);
}

// Attempts are numbered across threads: every_nth injects exactly
// attempts / N faults, and a byte budget is never overshot by racing threads.
TEST(FaultAdaptor, ConcurrentAttemptsAreCountedExactly) {
  gcp::host_resource host(1024 * MiB);
  gcp::fault_schedule s;
  s.every_nth = 7;
  s.byte_budget = 3000 * 512;
  gcp::fault_injecting_adaptor f(host, s);
  constexpr int threads = 8, per = 700;
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      std::vector<void*> mine;
      for (int i = 0; i < per; ++i) {
        try {
          mine.push_back(f.allocate(512));
          ok.fetch_add(1);
        } catch (const gcp::out_of_memory&) {
          failed.fetch_add(1);
        }
      }
      for (void* p : mine) f.deallocate(p, 512);
    });
  for (auto& t : ts) t.join();
  const auto c = f.counters();
  EXPECT_EQ(c.attempts, static_cast<std::uint64_t>(threads * per));
  EXPECT_EQ(ok.load() + failed.load(), threads * per);
  EXPECT_EQ(c.injected_oom, static_cast<std::uint64_t>(failed.load()));
  EXPECT_LE(c.bytes_handed_out, s.byte_budget);
  EXPECT_EQ(ok.load(), 3000) << "the budget allows exactly 3000 blocks of 512 bytes";
  EXPECT_EQ(c.live_allocations, 0u);
  EXPECT_EQ(host.used(), 0u);
}

// --- random workloads under faults --------------------------------------------------

enum class fault_mode { every_nth, random_mixed, byte_budget, stream_ops, everything };

const char* to_string(fault_mode m) {
  switch (m) {
    case fault_mode::every_nth: return "every_nth";
    case fault_mode::random_mixed: return "random_mixed";
    case fault_mode::byte_budget: return "byte_budget";
    case fault_mode::stream_ops: return "stream_ops";
    case fault_mode::everything: return "everything";
  }
  return "?";
}

gcp::fault_schedule schedule_for(fault_mode m, std::uint64_t seed, bool pool) {
  gcp::fault_schedule s;
  s.seed = seed;
  switch (m) {
    case fault_mode::every_nth: s.every_nth = 5; break;
    case fault_mode::random_mixed:
      s.probability = 0.15;
      s.cuda_error_fraction = 0.3;
      break;
    case fault_mode::byte_budget:  // the pool asks the upstream far less often
      s.byte_budget = pool ? 64 * MiB : 256 * MiB;
      break;
    case fault_mode::stream_ops: s.stream_op_probability = 0.05; break;
    case fault_mode::everything:
      s.every_nth = 11;
      s.probability = 0.05;
      s.cuda_error_fraction = 0.5;
      s.byte_budget = 600 * MiB;
      s.stream_op_probability = 0.02;
      break;
  }
  return s;
}

struct workload_config {
  bool pool = true;
  std::string policy;  // "" = no collector and no policy
  fault_mode faults = fault_mode::every_nth;
  int threads = 1;
  int ops_per_thread = 6000;
  std::uint64_t seed = 1;
};

std::string describe(const workload_config& c) {
  return std::string(c.pool ? "pool" : "nopool") + "/" + (c.policy.empty() ? "nopolicy" : c.policy) + "/" +
         to_string(c.faults) + "/t" + std::to_string(c.threads) + "/seed" + std::to_string(c.seed);
}

std::size_t random_size(gcp_rel::rng& r) {
  static constexpr std::size_t edges[] = {1,       255,         256,        257,         512,
                                          513,     1 * MiB - 1, 1 * MiB,    1 * MiB + 1, 2 * MiB,
                                          10 * MiB, 10 * MiB + 1, 20 * MiB + 1};
  const auto k = r.below(100);
  if (k < 5) return edges[r.below(std::size(edges))];
  if (k < 60) return 1 + r.below(4 * KiB);
  if (k < 95) return 4 * KiB + r.below(1 * MiB);
  return 1 * MiB + r.below(12 * MiB);
}

// Counters every workload thread adds to.
struct tally {
  std::atomic<std::uint64_t> allocations{0}, ooms{0}, cuda_errors{0}, other_errors{0}, frees{0}, drops{0};
  std::atomic<std::uint64_t> overlaps{0}, tag_failures{0}, stream_tag_failures{0}, limit_violations{0};
  std::atomic<std::uint64_t> check_points{0};
};

struct block_rec {
  void* p;
  std::size_t n;
  gcp::stream_ref s;
  std::uint64_t tag;
  std::uint64_t epoch;
};

// Everything one workload shares between its threads.
struct world {
  gcp::host_resource host{std::size_t{2} << 30};
  gcp::fault_injecting_adaptor fault;
  std::unique_ptr<gcp::device_allocator> alloc;
  std::unique_ptr<gcp_rel::fake_collector> gc;
  std::unique_ptr<gcp::gc_policy> policy;
  gcp_rel::live_set live;
  tally t;
  std::atomic<std::size_t> max_hard{0};

  explicit world(const workload_config& c) : fault(host, schedule_for(c.faults, c.seed, c.pool)) {
    gcp::allocator_options o;
    o.pool = c.pool;
    o.hard_limit.bytes = 64 * MiB;
    o.soft_limit.bytes = 48 * MiB;
    alloc = std::make_unique<gcp::device_allocator>(fault, o);
    max_hard = alloc->hard_limit();
    gc = std::make_unique<gcp_rel::fake_collector>(*alloc);
    if (!c.policy.empty()) policy = gcp::make_policy(c.policy, *alloc, *gc);
  }
};

// Runs `f`, classifying what it throws. Returns true if it returned normally.
template <class F>
bool classify(tally& t, F&& f, std::string* last_error = nullptr) {
  try {
    f();
    return true;
  } catch (const gcp::out_of_memory& e) {
    t.ooms.fetch_add(1);
    if (!contains(e.what(), "out of memory")) {
      t.other_errors.fetch_add(1);
      if (last_error) *last_error = std::string("out_of_memory without the allocator's report: ") + e.what();
    }
  } catch (const gcp::cuda_error& e) {
    t.cuda_errors.fetch_add(1);
    if (!contains(e.what(), "injected")) {
      t.other_errors.fetch_add(1);
      if (last_error) *last_error = std::string("cuda_error not injected: ") + e.what();
    }
  } catch (const std::exception& e) {
    t.other_errors.fetch_add(1);
    if (last_error) *last_error = std::string("undocumented exception: ") + e.what();
  } catch (...) {
    t.other_errors.fetch_add(1);
    if (last_error) *last_error = "undocumented non-std exception";
  }
  return false;
}

// Simulated kernels: work queued on a host stream reads the block's tag and
// then writes a poison pattern over its ends, as a kernel still running when
// the handle is dropped would. If the pool handed the block to another stream
// before this work ran, the poison lands in the new owner's block and the new
// owner's tag check fails.
constexpr std::uint64_t k_poison = 0xDEADBEEFDEADBEEFULL;

void write_tag(gcp::host_stream* hs, void* p, std::size_t n, std::uint64_t tag) {
  if (hs) hs->enqueue([p, n, tag] { gcp_rel::put_tags(p, n, tag); });
  else gcp_rel::put_tags(p, n, tag);
}

void check_and_poison(tally& t, gcp::host_stream* hs, void* p, std::size_t n, std::uint64_t tag, bool slow) {
  auto work = [&t, p, n, tag, slow] {
    if (slow) {
      const auto until = std::chrono::steady_clock::now() + 50us;
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    if (!gcp_rel::tags_ok(p, n, tag)) t.stream_tag_failures.fetch_add(1);
    gcp_rel::put_tags(p, n, k_poison);
  };
  if (hs) hs->enqueue(work);
  else if (!gcp_rel::tags_ok(p, n, tag)) t.tag_failures.fetch_add(1);
}

// One thread of a workload. Thread 0 also does the maintenance that a
// runtime would do from one place (trim, limit changes), and — when it is the
// only thread — checks exact accounting at random points.
void workload_thread(world& w, const workload_config& c, int index, gcp::host_stream* own, gcp::host_stream* shared,
                     std::string& error) {
  gcp_rel::rng r(c.seed * 1000003 + static_cast<std::uint64_t>(index));
  gcp::host_stream* streams[] = {nullptr, own, shared};
  std::vector<block_rec> mine;
  auto& a = *w.alloc;
  auto& t = w.t;
  std::uint64_t next_tag = (static_cast<std::uint64_t>(index) + 1) << 48;
  const bool solo = c.threads == 1;

  auto free_one = [&](std::size_t i, bool drop) {
    block_rec b = mine[i];
    mine[i] = mine.back();
    mine.pop_back();
    w.live.erase(b.p);
    auto* hs = static_cast<gcp::host_stream*>(b.s);
    check_and_poison(t, hs, b.p, b.n, b.tag, r.chance(0.1));
    if (drop) {
      w.gc->drop(b.p, b.n, b.s, b.epoch);
      t.drops.fetch_add(1);
    } else {
      // The checked free must accept every block the allocator handed out.
      if (!classify(t, [&] { a.free(b.p, b.n, b.s); }, &error)) t.other_errors.fetch_add(1);
      t.frees.fetch_add(1);
    }
  };

  for (int op = 0; op < c.ops_per_thread; ++op) {
    const auto k = r.below(100);
    if (k < 45 || mine.empty()) {
      const std::size_t n = random_size(r);
      auto* hs = streams[r.below(3)];
      const std::size_t reserved_before = a.reserved_bytes();
      const std::size_t hard = a.hard_limit();
      void* p = nullptr;
      const auto ooms_before = t.ooms.load();
      const bool ok = classify(t, [&] { p = a.allocate(n, hs ? hs->ref() : nullptr); }, &error);
      if (!ok && !w.policy && t.ooms.load() != ooms_before) {
        // Without a policy nothing collects for the allocator: the runtime
        // collects after an OOM and goes on (its next allocation may succeed).
        w.gc->collect_full();
        w.gc->run_finalizers();
      }
      if (ok) {
        t.allocations.fetch_add(1);
        if (!p || reinterpret_cast<std::uintptr_t>(p) % gcp::alignment != 0) t.other_errors.fetch_add(1);
        std::string why;
        if (!w.live.insert(p, n, &why)) {
          t.overlaps.fetch_add(1);
          error = why;
        }
        const std::uint64_t tag = next_tag++;
        write_tag(hs, p, n, tag);
        mine.push_back({p, n, hs ? hs->ref() : nullptr, tag, w.gc->epoch()});
        // Reserved bytes grow only within the hard limit (solo: nobody
        // else changes either meanwhile).
        if (solo && a.reserved_bytes() > reserved_before && a.reserved_bytes() > hard) t.limit_violations.fetch_add(1);
      }
    } else if (k < 63) {
      free_one(r.below(mine.size()), false);
    } else if (k < 83) {
      free_one(r.below(mine.size()), true);
    } else if (k < 86) {
      classify(t, [&] { a.trim(); }, &error);
    } else if (k < 88) {
      a.release_cached();
    } else if (k < 90) {
      classify(t, [&] { a.wait_pending(); }, &error);
    } else if (k < 92) {
      a.drain();
    } else if (k < 94) {
      if (w.policy) {
        classify(t, [&] { w.policy->collect(r.chance(0.2) ? gcp::gc_kind::blocking_full : gcp::gc_kind::minor); },
                 &error);
      } else {
        w.gc->collect_minor();
        w.gc->run_finalizers();
      }
    } else if (k < 95) {
      if (w.policy) classify(t, [&] { w.policy->quiet_moment(); }, &error);
    } else if (k < 96 && index == 0) {
      const std::size_t hard = (16 + r.below(81)) * MiB;  // 16..96 MiB
      a.set_hard_limit(hard);
      a.set_soft_limit(hard / 4 * 3);
      std::size_t m = w.max_hard.load();
      while (hard > m && !w.max_hard.compare_exchange_weak(m, hard)) {
      }
    } else if (solo) {
      // Exact accounting at a check point: every dropped block is in the
      // collector, in the deferred queue, or freed.
      t.check_points.fetch_add(1);
      const auto s = a.stats();
      const std::size_t expect = w.live.bytes() + w.gc->unfinalized_bytes() + a.deferred().pending_bytes();
      const std::size_t expect_blocks = w.live.size() + w.gc->unfinalized() + a.deferred().pending();
      if (a.live_bytes() != expect || static_cast<std::size_t>(s.requested.current) != expect ||
          static_cast<std::size_t>(s.active_blocks.current) != expect_blocks) {
        error = "accounting mismatch at op " + std::to_string(op) + ": allocator live " +
                std::to_string(a.live_bytes()) + " / stats " + std::to_string(s.requested.current) + ", model " +
                std::to_string(expect) + "; blocks " + std::to_string(s.active_blocks.current) + " vs " +
                std::to_string(expect_blocks);
        t.other_errors.fetch_add(1);
      }
      if (s.allocations != t.allocations.load()) {
        error = "allocation count mismatch";
        t.other_errors.fetch_add(1);
      }
      if (s.ooms != t.ooms.load()) {
        error = "ooms: allocator counted " + std::to_string(s.ooms) + ", callers saw " + std::to_string(t.ooms.load());
        t.other_errors.fetch_add(1);
      }
    }
  }
  // Give back what this thread still holds: half freed, half dropped.
  while (!mine.empty()) free_one(mine.size() - 1, mine.size() % 2 == 0);
}

void run_workload(const workload_config& c) {
  SCOPED_TRACE(describe(c));
  gcp_rel::watchdog dog(std::chrono::seconds(240), "fault workload " + describe(c));
  gcp_rel::misuse_counter misuse;
  world w(c);
  gcp::host_stream shared;
  std::vector<std::unique_ptr<gcp::host_stream>> own;
  for (int i = 0; i < c.threads; ++i) own.push_back(std::make_unique<gcp::host_stream>());
  std::vector<std::string> errors(c.threads);

  // A finalizer thread, as gc_bridge has: finalizers queue, then a drain.
  std::atomic<bool> stop{false};
  std::thread finalizer;
  if (c.threads > 1)
    finalizer = std::thread([&] {
      while (!stop.load()) {
        w.gc->run_finalizers();
        w.alloc->drain();
        std::this_thread::sleep_for(200us);
      }
    });

  std::vector<std::thread> ts;
  for (int i = 0; i < c.threads; ++i)
    ts.emplace_back([&, i] { workload_thread(w, c, i, own[i].get(), &shared, errors[i]); });
  for (auto& t : ts) t.join();
  stop = true;
  if (finalizer.joinable()) finalizer.join();

  // Drain everything with the faults off: a full collection finds every
  // dropped block, the finalizers queue them, the drain frees them.
  w.fault.disarm();
  auto& a = *w.alloc;
  w.gc->collect_full();
  w.gc->run_finalizers();
  a.drain();
  const auto live_after_drain = a.live_bytes();
  a.trim();
  shared.synchronize();
  for (auto& s : own) s->synchronize();
  a.forget_stream(shared.ref());
  for (auto& s : own) a.forget_stream(s->ref());

  const auto s = a.stats();
  const auto f = w.fault.counters();
  const auto& t = w.t;
  for (int i = 0; i < c.threads; ++i) EXPECT_EQ(errors[i], "") << "thread " << i;
  EXPECT_EQ(t.other_errors.load(), 0u) << "undocumented errors or broken accounting";
  EXPECT_EQ(t.overlaps.load(), 0u) << "overlapping live blocks";
  EXPECT_EQ(t.tag_failures.load(), 0u) << "a block's contents changed while it was live";
  EXPECT_EQ(t.stream_tag_failures.load(), 0u)
      << "a stream's queued work met another owner's data: a block was reused across streams too early";
  EXPECT_EQ(t.limit_violations.load(), 0u) << "reserved bytes grew past the hard limit";
  EXPECT_LE(static_cast<std::size_t>(s.reserved.peak), w.max_hard.load()) << "peak reserved above every hard limit";

  // Exact accounting.
  EXPECT_EQ(live_after_drain, 0u);
  EXPECT_EQ(s.requested.current, 0);
  EXPECT_EQ(s.allocated.current, 0);
  EXPECT_EQ(s.active_blocks.current, 0);
  EXPECT_EQ(s.allocations, t.allocations.load());
  EXPECT_EQ(s.frees, s.allocations);
  EXPECT_EQ(t.frees.load() + t.drops.load(), t.allocations.load());
  EXPECT_EQ(w.gc->finalized(), t.drops.load());
  EXPECT_EQ(w.gc->lost(), 0u);
  EXPECT_EQ(s.deferred_pending, 0u);
  EXPECT_EQ(s.misuse_errors, 0u);
  EXPECT_EQ(misuse.count(), 0) << misuse.last();

  // No leaked upstream memory.
  EXPECT_EQ(a.reserved_bytes(), 0u);
  EXPECT_EQ(s.reserved.current, 0);
  EXPECT_EQ(w.host.used(), 0u);
  EXPECT_EQ(w.host.outstanding(), 0u);
  EXPECT_EQ(f.live_allocations, 0u);
  EXPECT_EQ(f.live_bytes, 0u);
  EXPECT_EQ(s.upstream_allocations, f.passed);
  EXPECT_EQ(s.upstream_frees, f.deallocations);

  // Every failure surfaced as the documented error, exactly once.
  EXPECT_EQ(s.ooms, t.ooms.load()) << "OOMs thrown vs OOMs callers saw";
  EXPECT_EQ(t.cuda_errors.load(), f.injected_cuda + f.injected_stream_ops)
      << "every injected cuda_error must reach a caller exactly once";

  std::printf("[ workload ] %-40s ops %6d x %d: allocations %llu, frees %llu, drops %llu, OOMs %llu, "
              "cuda errors %llu; injected: oom %llu, cuda %llu, stream ops %llu; upstream attempts %llu "
              "(%.0f MiB); check points %llu\n",
              describe(c).c_str(), c.ops_per_thread, c.threads, (unsigned long long)t.allocations.load(),
              (unsigned long long)t.frees.load(), (unsigned long long)t.drops.load(),
              (unsigned long long)t.ooms.load(), (unsigned long long)t.cuda_errors.load(),
              (unsigned long long)f.injected_oom, (unsigned long long)f.injected_cuda,
              (unsigned long long)f.injected_stream_ops, (unsigned long long)f.attempts,
              static_cast<double>(f.bytes_handed_out) / MiB, (unsigned long long)t.check_points.load());
  // The faults actually fired (otherwise the run proves nothing). Without a
  // pool no events are recorded, so stream-op faults have nothing to hit.
  if (c.pool || c.faults != fault_mode::stream_ops) EXPECT_GT(w.fault.injected(), 0u);
  w.policy.reset();
}

class FaultWorkload : public ::testing::TestWithParam<std::tuple<bool, const char*, fault_mode>> {};

TEST_P(FaultWorkload, SingleThreadExactAccounting) {
  const auto [pool, policy, faults] = GetParam();
  for (std::uint64_t seed : {1u, 2u}) {
    workload_config c;
    c.pool = pool;
    c.policy = policy;
    c.faults = faults;
    c.seed = seed;
    c.ops_per_thread = static_cast<int>(gcp_rel::env_count("GCPRESSURE_FAULT_OPS", gcp_rel::scaled(6000, 2000)));
    run_workload(c);
    if (HasFailure()) return;
  }
}

TEST_P(FaultWorkload, FourThreadsExactAccounting) {
  const auto [pool, policy, faults] = GetParam();
  workload_config c;
  c.pool = pool;
  c.policy = policy;
  c.faults = faults;
  c.threads = 4;
  c.ops_per_thread = static_cast<int>(gcp_rel::env_count("GCPRESSURE_FAULT_OPS", gcp_rel::scaled(6000, 2000)) / 2);
  c.seed = 7;
  run_workload(c);
}

std::string param_name(const ::testing::TestParamInfo<FaultWorkload::ParamType>& info) {
  const auto [pool, policy, faults] = info.param;
  std::string p = *policy ? policy : "nopolicy";
  return std::string(pool ? "pool_" : "nopool_") + p + "_" + to_string(faults);
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultWorkload,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values("", "pressure", "at_limit", "cudajl", "dotnet"),
                                            ::testing::Values(fault_mode::every_nth, fault_mode::random_mixed,
                                                              fault_mode::byte_budget, fault_mode::stream_ops,
                                                              fault_mode::everything)),
                         param_name);

}  // namespace
