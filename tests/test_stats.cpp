// tests/test_stats.cpp — stat_counter semantics, to_text / to_json, step names.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gcpressure/config.hpp"
#include "gcpressure/stats.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using gcp_test::contains;
using gcp_test::json_check;
using gcp_test::lower;

namespace {

allocator_stats sample_stats() {
  allocator_stats s;
  s.backend = backend_kind::host;
  s.device = 0;
  s.requested = {123456789, 223456789, 987654321};
  s.allocated = {123457024, 223457280, 987654656};
  s.reserved = {134217728, 268435456, 536870912};
  s.active_blocks = {17, 42, 1000};
  s.allocations = 1000;
  s.frees = 983;
  s.pool_hits = 900;
  s.upstream_allocations = 100;
  s.upstream_frees = 37;
  s.upstream_failures = 3;
  s.cross_stream_waits = 5;
  s.misuse_errors = 2;
  s.ooms = 1;
  s.cached = 134217728 - 123457024;
  s.since_mark = 4096;
  s.deferred_pending = 7;
  s.soft_limit = std::size_t{3} << 30;
  s.hard_limit = std::size_t{4} << 30;
  s.device_memory = {std::size_t{10} << 30, std::size_t{16} << 30};
  for (int i = 0; i < ladder_step_count; ++i) s.ladder[i] = 10 + i;
  s.gc.by_kind = {1, 2, 3};
  s.gc.by_reason = {4, 5, 6, 7, 8};
  s.gc.incremental_slices = 9;
  s.gc.gc_seconds = 1.25;
  s.gc.longest_pause_seconds = 0.5;
  s.gc.finalized = 11;
  s.gc.reclaimed_bytes = 12;
  s.gc.reclaimed_per_collection = 2.0;
  s.gc.policy = "pressure";
  auto& g = s.gc;  // the fields of Note [Every collection is counted], distinct values
  g.exposed_gc_seconds = 0.75, g.hidden_gc_seconds = 0.5, g.blocking_cycles = 13, g.syncs = 14;
  g.exposed_gc_seconds_charged = 0.625, g.exposed_gc_seconds_untimed = 0.125;
  g.slack_seconds = 0.00425, g.sync_wait_seconds = 3.5, g.runtime_collections = 15;
  g.runtime_full_collections = 16, g.runtime_gc_seconds = 0.375, g.runtime_seconds_exact = true;
  g.collector_collections = 17, g.gc_seconds_all = 1.625;
  return s;
}

}  // namespace

// --- stat_counter -------------------------------------------------------------

TEST(StatCounter, CurrentPeakTotal) {
  detail::stat_counter c;
  EXPECT_EQ(c.get().current, 0);
  c.add(10);
  c.add(5);
  EXPECT_EQ(c.get().current, 15);
  EXPECT_EQ(c.get().peak, 15);
  c.sub(12);
  EXPECT_EQ(c.current(), 3);
  EXPECT_EQ(c.get().peak, 15) << "peak must not drop when current drops";
  c.add(3);
  const stat_value v = c.get();
  EXPECT_EQ(v.current, 6);
  EXPECT_EQ(v.peak, 15);
  EXPECT_EQ(v.total, 18) << "total is the sum of all increments";
  c.add(20);
  EXPECT_EQ(c.get().peak, 26) << "peak follows a new maximum";
}

TEST(StatCounter, ResetPeak) {
  detail::stat_counter c;
  c.add(100);
  c.sub(60);
  c.reset_peak();
  EXPECT_EQ(c.get().peak, 40);
  EXPECT_EQ(c.get().total, 100);
  c.add(1);
  EXPECT_EQ(c.get().peak, 41);
}

TEST(StatCounter, ConcurrentAddSubIsExact) {
  detail::stat_counter c;
  constexpr int threads = 8, iters = 20000;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < iters; ++i) {
        c.add(3);
        c.sub(3);
      }
    });
  for (auto& t : ts) t.join();
  const stat_value v = c.get();
  EXPECT_EQ(v.current, 0);
  EXPECT_EQ(v.total, std::int64_t{3} * threads * iters);
  EXPECT_GE(v.peak, 3);
  EXPECT_LE(v.peak, 3 * threads);
}

// --- names --------------------------------------------------------------------

TEST(StatsNames, LadderStepNames) {
  EXPECT_STREQ(to_string(ladder_step::release_cache), "release_cache");
  EXPECT_STREQ(to_string(ladder_step::finish_and_drain), "finish_and_drain");
  EXPECT_STREQ(to_string(ladder_step::wait_streams), "wait_streams");
  EXPECT_STREQ(to_string(ladder_step::full_collection), "full_collection");
  EXPECT_STREQ(to_string(ladder_step::full_collection_2), "full_collection_2");
  EXPECT_STREQ(to_string(ladder_step::drain), "drain");
  EXPECT_STREQ(to_string(ladder_step::trim), "trim");
}

TEST(StatsNames, GcKindAndReasonNamesDistinct) {
  std::set<std::string> kinds, reasons;
  for (int i = 0; i < gc_kind_count; ++i) {
    const char* n = to_string(static_cast<gc_kind>(i));
    ASSERT_NE(n, nullptr);
    EXPECT_STRNE(n, "");
    kinds.insert(n);
  }
  for (int i = 0; i < gc_reason_count; ++i) {
    const char* n = to_string(static_cast<gc_reason>(i));
    ASSERT_NE(n, nullptr);
    EXPECT_STRNE(n, "");
    reasons.insert(n);
  }
  EXPECT_EQ(kinds.size(), static_cast<std::size_t>(gc_kind_count));
  EXPECT_EQ(reasons.size(), static_cast<std::size_t>(gc_reason_count));
}

// --- to_json ------------------------------------------------------------------

TEST(StatsJson, ValidJsonWithAllSections) {
  const std::string j = to_json(sample_stats());
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(j.back(), '}') << "one JSON object, no trailing newline";
  json_check chk(j);
  ASSERT_TRUE(chk.valid()) << chk.error() << "\n" << j;
  for (const char* key : {"requested", "reserved", "allocated", "peak", "current", "total", "ladder", "gc"})
    EXPECT_TRUE(chk.keys().count(key)) << "missing key \"" << key << "\" in " << j;
}

TEST(StatsJson, ContainsTheValues) {
  const std::string j = to_json(sample_stats());
  // Distinctive numbers from the snapshot must appear verbatim.
  for (const char* v : {"123456789", "223456789", "987654321", "134217728", "536870912"})
    EXPECT_TRUE(contains(j, v)) << v << " not in " << j;
  EXPECT_TRUE(contains(j, "pressure")) << j;
}

// Every collection_stats field the benchmarks read is in the JSON under its
// own name with its value (Note [Every collection is counted]).
TEST(StatsJson, CollectionFieldsEachUnderItsName) {
  const allocator_stats s = sample_stats();
  const std::string j = to_json(s);
  json_check chk(j);
  ASSERT_TRUE(chk.valid()) << chk.error() << "\n" << j;
  const std::pair<const char*, const char*> expect[] = {
      {"exposed_gc_seconds", "0.750000"},   {"hidden_gc_seconds", "0.500000"},
      {"blocking_cycles", "13"},            {"syncs", "14"},
      {"slack_seconds", "0.004250"},        {"sync_wait_seconds", "3.500000"},
      {"runtime_collections", "15"},        {"runtime_full_collections", "16"},
      {"runtime_gc_seconds", "0.375000"},   {"runtime_seconds_exact", "true"},
      {"collector_collections", "17"},      {"gc_seconds_all", "1.625000"},
      {"exposed_gc_seconds_is_upper_bound", "true"}, {"exposed_gc_seconds_untimed", "0.125000"},
      {"exposed_gc_seconds_charged", "0.625000"}};
  for (const auto& [key, value] : expect)
    EXPECT_TRUE(contains(j, std::string("\"") + key + "\":" + value)) << key << " != " << value << " in " << j;
  allocator_stats inexact = s;
  inexact.gc.runtime_seconds_exact = false;
  EXPECT_TRUE(contains(to_json(inexact), "\"runtime_seconds_exact\":false"));
  allocator_stats measured = s;  // Note [Exposed GC time, measured]: nothing untimed, no bound
  measured.gc.exposed_gc_seconds_untimed = 0;
  EXPECT_TRUE(contains(to_json(measured), "\"exposed_gc_seconds_is_upper_bound\":false"));
}

TEST(StatsJson, ChangesWithInput) {
  allocator_stats a = sample_stats();
  allocator_stats b = sample_stats();
  b.requested.current = 55555;
  EXPECT_NE(to_json(a), to_json(b));
  EXPECT_TRUE(contains(to_json(b), "55555"));
}

TEST(StatsJson, EscapesStrings) {
  allocator_stats s = sample_stats();
  s.gc.policy = "we\"ird\\name\nline";
  const std::string j = to_json(s);
  json_check chk(j);
  EXPECT_TRUE(chk.valid()) << "policy string not escaped: " << chk.error() << "\n" << j;
}

TEST(StatsJson, DefaultSnapshotIsValid) {
  const std::string j = to_json(allocator_stats{});
  json_check chk(j);
  EXPECT_TRUE(chk.valid()) << chk.error() << "\n" << j;
}

// --- to_text ------------------------------------------------------------------

TEST(StatsText, HeaderAndRows) {
  const std::string t = to_text(sample_stats());
  ASSERT_FALSE(t.empty());
  const auto first_nl = t.find('\n');
  ASSERT_NE(first_nl, std::string::npos) << "a table has more than one line";
  const std::string header = t.substr(0, first_nl);
  EXPECT_FALSE(header.find_first_not_of(" \t-=|") == std::string::npos) << "empty header line";
  std::size_t lines = 0;
  for (char c : t) lines += c == '\n';
  EXPECT_GE(lines, 3u) << t;
  const std::string lt = lower(t);
  for (const char* word : {"requested", "reserved", "allocated"})
    EXPECT_TRUE(contains(lt, word)) << word << " not in\n" << t;
  EXPECT_TRUE(contains(lt, "host")) << "backend not named\n" << t;
}

TEST(StatsText, ShowsCollectionFields) {
  allocator_stats s = sample_stats();
  const std::string t = to_text(s);
  for (const char* v : {"exposed 0.750 s", "hidden 0.500 s", "blocking cycles 13", "syncs 14", "slack 4.250 ms",
                        "sync wait 3.500 s", "own collections 15 (whole-heap 16), 0.375 s (exact)",
                        "collector total 17", "gc all 1.625 s"})
    EXPECT_TRUE(contains(t, v)) << v << " not in\n" << t;
  s.gc.runtime_seconds_exact = false;
  EXPECT_TRUE(contains(to_text(s), "(lower bound)")) << to_text(s);
}

TEST(StatsText, ShowsSizes) {
  allocator_stats s = sample_stats();
  s.requested.current = std::int64_t{3} << 29;  // 1.50 GiB
  const std::string t = to_text(s);
  EXPECT_TRUE(contains(t, format_bytes(std::size_t{3} << 29)) || contains(t, std::to_string(std::int64_t{3} << 29)))
      << t;
  allocator_stats z = s;
  z.requested.current = 0;
  EXPECT_NE(to_text(z), t) << "text does not depend on requested.current";
}
