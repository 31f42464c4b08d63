// tests/test_tenants.cpp — other tenants (issue 14): the host backend's
// shared simulated capacity across processes, limits of available memory
// ("N%avail") resolving and re-resolving, and the pressure policy under a
// drop in available memory (fake clock). The two-process forward loop is
// tenants.forward_loop_with_hog (tests/tenants_forward.sh).
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "fake_runtime.hpp"
#include "gcpressure/allocator.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/policy.hpp"
#include "gcpressure/stats.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;

namespace {


// A fresh, empty file for a shared capacity; removed at the end.
struct temp_file {
  std::string path;
  temp_file() {
    char tmpl[] = "/tmp/gcp_tenants_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    ::close(fd);
    path = tmpl;
  }
  ~temp_file() { ::unlink(path.c_str()); }
};

// A child process: runs `body` (which returns its exit status) and never
// returns into the test. Pipes say when it is ready and when to go on.
struct child {
  pid_t pid = -1;
  int ready[2] = {-1, -1}, go[2] = {-1, -1};

  template <class F>
  explicit child(F body) {
    EXPECT_EQ(::pipe(ready), 0);
    EXPECT_EQ(::pipe(go), 0);
    pid = ::fork();
    if (pid == 0) {
      int status = 99;
      try {
        status = body(*this);
      } catch (...) {
        status = 98;
      }
      ::_exit(status);
    }
  }
  // In the child.
  void say_ready() { (void)!::write(ready[1], "r", 1); }
  void wait_go() {
    char c;
    (void)!::read(go[0], &c, 1);
  }
  // In the parent.
  bool wait_ready() {
    char c;
    return ::read(ready[0], &c, 1) == 1;
  }
  void say_go() { (void)!::write(go[1], "g", 1); }
  int join() {
    int st = 0;
    ::waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  }
};

// A child that takes `bytes` of the shared capacity, says so, and waits.
// On "go" it frees them (free_them) or exits holding them.
child tenant(const std::string& path, std::size_t capacity, std::size_t bytes, bool free_them) {
  return child([=](child& c) {
    gcp::host_resource r(capacity, path);
    void* p = r.allocate(bytes);
    c.say_ready();
    c.wait_go();
    if (!free_them) ::_exit(0);  // dies holding them: no destructor runs
    r.deallocate(p, bytes);
    return 0;
  });
}

// A 64 MiB shared device of which another process holds 40 MiB.
struct other_holds_40 {
  static constexpr std::size_t cap = 64 * MiB;
  temp_file f;
  child other;
  explicit other_holds_40(bool free_them) : other(tenant(f.path, cap, 40 * MiB, free_them)) {
    EXPECT_TRUE(other.wait_ready());
  }
};

}  // namespace

// --- the shared capacity ----------------------------------------------------------

TEST(SharedCapacity, TwoProcessesDrawFromOneCapacity) {
  other_holds_40 t(/*free_them=*/true);
  const std::size_t cap = t.cap;
  child& other = t.other;
  gcp::host_resource mine(cap, t.f.path);
  EXPECT_TRUE(mine.shared());
  EXPECT_EQ(mine.memory_info().total, cap);
  EXPECT_EQ(mine.memory_info().free, cap - 40 * MiB) << "the other process's bytes are not free";
  EXPECT_THROW(mine.allocate(30 * MiB), gcp::out_of_memory) << "only 24 MiB are left";
  void* p = mine.allocate(20 * MiB);
  EXPECT_EQ(mine.memory_info().free, 4 * MiB);
  other.say_go();
  EXPECT_EQ(other.join(), 0);
  EXPECT_EQ(mine.memory_info().free, cap - 20 * MiB) << "the other process gave its bytes back";
  void* q = mine.allocate(30 * MiB);
  mine.deallocate(q, 30 * MiB);
  mine.deallocate(p, 20 * MiB);
  EXPECT_EQ(mine.memory_info().free, cap);
}

// A tenant killed while holding bytes: they count until someone needs the
// room, then its slot (its pid is gone) is reclaimed.
TEST(SharedCapacity, DeadTenantsBytesAreReclaimedWhenNeeded) {
  other_holds_40 t(/*free_them=*/false);
  const std::size_t cap = t.cap;
  child& other = t.other;
  gcp::host_resource mine(cap, t.f.path);
  ::kill(other.pid, SIGKILL);
  EXPECT_EQ(other.join(), -SIGKILL);
  EXPECT_EQ(mine.memory_info().free, cap - 40 * MiB) << "counted until the room is needed";
  void* p = mine.allocate(50 * MiB);  // does not fit beside the dead tenant's 40 MiB
  EXPECT_EQ(mine.memory_info().free, cap - 50 * MiB) << "the dead tenant's 40 MiB were reclaimed";
  mine.deallocate(p, 50 * MiB);
}

// A file left by tenants that are all gone is reset by the next open (even
// with another capacity); a live tenant's capacity binds the others.
TEST(SharedCapacity, CapacityIsTheFilesWhileATenantLives) {
  temp_file f;
  {
    child gone = tenant(f.path, 64 * MiB, 8 * MiB, /*free_them=*/false);
    ASSERT_TRUE(gone.wait_ready());
    gone.say_go();
    EXPECT_EQ(gone.join(), 0);
  }
  gcp::host_resource fresh(32 * MiB, f.path);
  EXPECT_EQ(fresh.memory_info().total, 32 * MiB) << "no live tenant: the file was reset";
  EXPECT_EQ(fresh.memory_info().free, 32 * MiB) << "the gone tenant's 8 MiB went with the reset";
  try {
    gcp::host_resource other(64 * MiB, f.path);
    ADD_FAILURE() << "a second capacity was accepted";
  } catch (const gcp::logic_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("GCPRESSURE_HOST_SHARED"), std::string::npos) << m;
    EXPECT_NE(m.find("32.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("64.00 MiB"), std::string::npos) << m;
  }
  gcp::host_resource same(32 * MiB, f.path);  // in one process too: a slot each
  void* p = same.allocate(20 * MiB);
  EXPECT_EQ(fresh.memory_info().free, 12 * MiB);
  same.deallocate(p, 20 * MiB);
}

TEST(SharedCapacity, AFileThatIsNotOursIsRefusedAndLeftAlone) {
  temp_file f;
  { std::ofstream(f.path) << "precious data\n"; }
  try {
    gcp::host_resource r(64 * MiB, f.path);
    ADD_FAILURE() << "a foreign file was used";
  } catch (const gcp::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a gcpressure shared-capacity file"), std::string::npos) << e.what();
  }
  std::ifstream in(f.path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "precious data") << "the file was modified";
  EXPECT_THROW(gcp::host_resource(64 * MiB, "/nonexistent-dir/x"), gcp::logic_error);
}

TEST(SharedCapacity, ChosenByTheEnvironment) {
  temp_file f;
  ::setenv("GCPRESSURE_HOST_SHARED", f.path.c_str(), 1);
  ::setenv("GCPRESSURE_BACKEND", "host", 1);
  ::setenv("GCPRESSURE_HOST_CAPACITY", "64MiB", 1);
  const gcp::config c = gcp::config_from_env();
  EXPECT_EQ(c.host_shared, f.path);
  const auto ao = gcp::allocator_options::from_config(c);
  EXPECT_EQ(ao.host_shared, f.path);
  gcp::device_allocator a(ao);
  gcp::host_resource other(64 * MiB, f.path);
  void* p = other.allocate(16 * MiB);
  EXPECT_EQ(a.device_memory().free, 48 * MiB);
  other.deallocate(p, 16 * MiB);
  auto ao1 = ao;
  ao1.device = 1;
  gcp::device_allocator a1(ao1);
  EXPECT_EQ(a1.device_memory().free, 64 * MiB) << "device 1 is another simulated device (its own file)";
  ::unlink((f.path + ".1").c_str());
  gcp::options o;
  o.host_shared = "";
  EXPECT_EQ(gcp::apply_options(o, c).host_shared, "") << "a program's explicit option wins";
  bool listed = false;
  for (const gcp::option_info* i = gcp::options_table(); i->env; ++i)
    listed = listed || std::string(i->env) == "GCPRESSURE_HOST_SHARED";
  EXPECT_TRUE(listed);
  ::unsetenv("GCPRESSURE_HOST_SHARED");
  ::unsetenv("GCPRESSURE_BACKEND");
  ::unsetenv("GCPRESSURE_HOST_CAPACITY");
}

// --- "%avail": parsing ------------------------------------------------------------

TEST(AvailableLimits, ParseAndPrint) {
  const auto s = gcp::parse_size("80%avail", "GCPRESSURE_HARD_LIMIT");
  EXPECT_EQ(s.percent, 80);
  EXPECT_TRUE(s.of_available);
  EXPECT_EQ(s.to_string(), "80%avail");
  EXPECT_TRUE(gcp::parse_size(" 12.5 % AVAIL ").of_available);
  EXPECT_FALSE(gcp::parse_size("80%").of_available);
  EXPECT_EQ(gcp::parse_size("80%").to_string(), "80%");
  for (const char* bad : {"80%av", "0%avail", "101%avail", "%avail", "80%availx"}) {
    try {
      gcp::parse_size(bad, "GCPRESSURE_HARD_LIMIT");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const gcp::logic_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("GCPRESSURE_HARD_LIMIT"), std::string::npos) << m;
      EXPECT_NE(m.find(bad), std::string::npos) << m;
    }
  }
  try {
    gcp::parse_size("80%av", "x");
  } catch (const gcp::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("%avail"), std::string::npos) << "the error names the spelling";
  }
  ::setenv("GCPRESSURE_SOFT_LIMIT", "50%avail", 1);
  EXPECT_TRUE(gcp::config_from_env().soft_limit.of_available);
  ::unsetenv("GCPRESSURE_SOFT_LIMIT");
}

// --- "%avail": resolving ----------------------------------------------------------

namespace {

// An allocator on a shared 100 MiB device, and another tenant in the same
// process (a host_resource on the same file: a slot of its own).
struct two_tenants {
  temp_file f;
  gcp::device_allocator alloc;
  gcp::host_resource other;
  std::vector<std::pair<void*, std::size_t>> taken;

  explicit two_tenants(gcp::allocator_options o) : alloc(with_file(o, f.path)), other(100 * MiB, f.path) {}
  ~two_tenants() {
    for (auto [p, n] : taken) other.deallocate(p, n);
  }
  static gcp::allocator_options with_file(gcp::allocator_options o, const std::string& path) {
    o.backend = gcp::backend_kind::host;
    o.host_capacity = 100 * MiB;
    o.host_shared = path;
    return o;
  }
  void take(std::size_t n) { taken.emplace_back(other.allocate(n), n); }
  void give_back() {
    for (auto [p, n] : taken) other.deallocate(p, n);
    taken.clear();
  }
};

gcp::allocator_options avail_opts(double hard_pct, double soft_pct = -1, bool pool = false) {
  gcp::allocator_options o;
  o.hard_limit.percent = hard_pct;
  o.hard_limit.of_available = true;
  if (soft_pct > 0) {
    o.soft_limit.percent = soft_pct;
    o.soft_limit.of_available = true;
  }
  o.pool = pool;
  return o;
}

}  // namespace

TEST(AvailableLimits, ResolveAgainstFreePlusOwnReservedAndFollowIt) {
  two_tenants t(avail_opts(80));
  EXPECT_TRUE(t.alloc.limits_follow_available());
  EXPECT_EQ(t.alloc.hard_limit(), 80 * MiB);
  EXPECT_EQ(t.alloc.soft_limit(), 60 * MiB) << "75% of the hard limit";
  void* mine = t.alloc.allocate(10 * MiB);
  t.take(50 * MiB);
  EXPECT_EQ(t.alloc.refresh_limits().free, 40 * MiB);
  EXPECT_EQ(t.alloc.available_bytes(), 50 * MiB) << "40 free + our own 10";
  EXPECT_EQ(t.alloc.hard_limit(), 40 * MiB);
  EXPECT_EQ(t.alloc.soft_limit(), 30 * MiB);
  auto s = t.alloc.stats();
  EXPECT_EQ(s.available_bytes, 50 * MiB);
  EXPECT_EQ(s.available_bytes_min, 50 * MiB);
  EXPECT_EQ(s.headroom_changes, 1u);
  t.give_back();
  t.alloc.refresh_limits();
  EXPECT_EQ(t.alloc.hard_limit(), 80 * MiB) << "the other tenant left: the limit grows back";
  s = t.alloc.stats();
  EXPECT_EQ(s.headroom_changes, 2u);
  EXPECT_EQ(s.available_bytes_min, 50 * MiB) << "the least seen stays";
  for (const char* key : {"\"available_bytes\":", "\"available_bytes_min\":", "\"headroom_changes\":2"})
    EXPECT_NE(gcp::to_json(s).find(key), std::string::npos) << key;
  EXPECT_NE(gcp::to_text(s).find("headroom changes 2"), std::string::npos) << gcp::to_text(s);
  t.alloc.free(mine, 10 * MiB);
}

// Below 10% of movement nothing is counted; small moves that add up to 10%
// since the last change are.
TEST(AvailableLimits, HeadroomChangesCountTenPercentMoves) {
  two_tenants t(avail_opts(100));
  t.take(6 * MiB);
  t.alloc.refresh_limits();
  EXPECT_EQ(t.alloc.headroom_changes(), 0u) << "6% is jitter";
  t.take(6 * MiB);
  t.alloc.refresh_limits();
  EXPECT_EQ(t.alloc.headroom_changes(), 1u) << "12% since the start";
  t.take(6 * MiB);
  t.alloc.refresh_limits();
  EXPECT_EQ(t.alloc.headroom_changes(), 1u) << "6.8% since the last change";
}

// Fixed limits stay; an explicit set_* pins a following limit; a fixed soft
// limit is capped by a following hard one and comes back with it.
TEST(AvailableLimits, OnlyAvailLimitsFollow) {
  gcp::allocator_options fixed;
  fixed.hard_limit.percent = 80;
  fixed.pool = false;
  two_tenants a(fixed);
  EXPECT_FALSE(a.alloc.limits_follow_available());
  a.take(60 * MiB);
  a.alloc.refresh_limits();
  EXPECT_EQ(a.alloc.available_bytes(), 40 * MiB);
  EXPECT_EQ(a.alloc.hard_limit(), 80 * MiB) << "80% of the device total, whoever uses it";
  EXPECT_EQ(a.alloc.headroom_changes(), 1u) << "available memory moved even though the limit did not";

  auto o = avail_opts(80);
  o.soft_limit.bytes = 50 * MiB;
  two_tenants b(o);
  EXPECT_EQ(b.alloc.soft_limit(), 50 * MiB);
  b.take(50 * MiB);
  b.alloc.refresh_limits();
  EXPECT_EQ(b.alloc.hard_limit(), 40 * MiB);
  EXPECT_EQ(b.alloc.soft_limit(), 40 * MiB) << "capped by the hard limit";
  b.give_back();
  b.alloc.refresh_limits();
  EXPECT_EQ(b.alloc.soft_limit(), 50 * MiB);
  b.alloc.set_hard_limit(30 * MiB);
  EXPECT_FALSE(b.alloc.limits_follow_available());
  b.take(50 * MiB);
  b.alloc.refresh_limits();
  EXPECT_EQ(b.alloc.hard_limit(), 30 * MiB) << "pinned by set_hard_limit";

  two_tenants c(avail_opts(100, 50));
  EXPECT_EQ(c.alloc.soft_limit(), 50 * MiB);
  c.take(40 * MiB);
  c.alloc.refresh_limits();
  EXPECT_EQ(c.alloc.soft_limit(), 30 * MiB) << "50% of 60 MiB available";
}

// The other tenant left while our limit was stale: the failed allocation
// re-resolves it and succeeds without a reclaim step.
TEST(AvailableLimits, AFailureReResolvesBeforeTheLadder) {
  two_tenants t(avail_opts(50));
  void* a = t.alloc.allocate(20 * MiB);
  t.take(40 * MiB);
  t.alloc.refresh_limits();
  EXPECT_EQ(t.alloc.hard_limit(), 30 * MiB) << "50% of 40 free + 20 ours";
  t.give_back();
  void* b = t.alloc.allocate(20 * MiB);  // 40 > 30: fails, unless re-resolved (50 MiB)
  EXPECT_EQ(t.alloc.hard_limit(), 50 * MiB);
  const auto s = t.alloc.stats();
  EXPECT_EQ(s.ooms, 0u);
  for (int i = 0; i < gcp::ladder_step_count; ++i) EXPECT_EQ(s.ladder[i], 0u) << gcp::to_string(gcp::ladder_step(i));
  t.alloc.free(b, 20 * MiB);
  t.alloc.free(a, 20 * MiB);
}

// A limit that shrinks below the pool's reserved bytes gives the idle
// segments back at once, so the tenant that wants them gets them.
TEST(AvailableLimits, ShrinkingBelowReservedReleasesTheCache) {
  two_tenants t(avail_opts(50, -1, /*pool=*/true));
  void* p = t.alloc.allocate(20 * MiB);
  t.alloc.free(p, 20 * MiB);
  ASSERT_GE(t.alloc.reserved_bytes(), 20 * MiB) << "the pool keeps the freed block";
  t.take(70 * MiB);  // leaves 10 MiB free: available 30, limit 15 < reserved
  t.alloc.refresh_limits();
  EXPECT_EQ(t.alloc.hard_limit(), 15 * MiB);
  EXPECT_EQ(t.alloc.reserved_bytes(), 0u);
  EXPECT_EQ(t.other.memory_info().free, 30 * MiB) << "the cache went back to the shared device";
}

// --- the pressure policy under a drop in available memory -------------------------

namespace {

}  // namespace

// A loop keeps 20 MiB live and drops 1 MiB blocks at 50 MiB per fake second:
// the young budget is about the live set (growth 1). Then another tenant takes all but 12 MiB of the free memory. Within the
// policy's bounded refresh (0.1 s: 5 blocks) it must see the drop, shrink its
// young budget below what is left and collect in before_allocate: no
// allocation fails and no reclaim step runs.
TEST(TenantsPolicy, ADropInAvailableMemoryShrinksTheBudgetBeforeAFailure) {
  gcp_test::fake_clock clock;
  temp_file f;
  gcp::allocator_options ao = two_tenants::with_file(avail_opts(90), f.path);
  ao.host_capacity = 256 * MiB;
  gcp::device_allocator alloc(ao);
  gcp::host_resource other(256 * MiB, f.path);
  gcp_test::fake_collector gc;
  gc.clock = &clock;
  gc.minor_seconds = 0.002;
  gc.slice_seconds = 0.002;
  gc.bind(alloc);
  gcp::policy_options po;
  po.clock = &clock;
  auto policy = gcp::make_policy("pressure", alloc, gc, po);
  for (int i = 0; i < 20; ++i) gc.track(alloc.allocate(MiB), MiB);  // the live set, never dropped
  gc.runtime_collection(true);  // the runtime's own whole-heap collection: the policy learns the 20 MiB floor
  // The most young bytes (allocated since the last collection) seen.
  auto run = [&](int blocks, int skip) {
    std::size_t most = 0;
    for (int i = 0; i < blocks; ++i) {
      gc.drop(gc.track(alloc.allocate(MiB), MiB));
      if (i >= skip) most = std::max(most, alloc.since_mark());
      clock.advance(0.02);
      if (i % 10 == 9) policy->iteration();
    }
    return most;
  };
  const std::size_t young_before = run(400, 0);
  const auto s0 = alloc.stats();
  const std::size_t free_now = alloc.device_memory().free;
  ASSERT_GT(free_now, 40 * MiB);
  void* hog = other.allocate(free_now - 12 * MiB);
  // After the first 0.2 s: the refresh is bounded (0.1 s), so young bytes
  // from before the drop may still grow for a few blocks.
  const std::size_t young_after = run(400, 10);
  const auto s = alloc.stats();
  SCOPED_TRACE(gcp::to_text(s));
  std::printf("young bytes: up to %s before the other tenant, %s after\n", gcp::format_bytes(young_before).c_str(),
              gcp::format_bytes(young_after).c_str());
  EXPECT_EQ(s.ooms, 0u);
  for (int i = 0; i < gcp::ladder_step_count; ++i) EXPECT_EQ(s.ladder[i], 0u) << gcp::to_string(gcp::ladder_step(i));
  EXPECT_EQ(s.gc.by_reason[static_cast<int>(gcp::gc_reason::ladder)], 0u);
  EXPECT_GT(young_before, 12 * MiB) << "the test needs a young budget above what the other tenant leaves";
  EXPECT_LE(young_after, 11 * MiB) << "the budget did not shrink to 90% of the memory left";
  EXPECT_GT(s.gc.by_kind[0] + s.gc.by_kind[1], s0.gc.by_kind[0] + s0.gc.by_kind[1]);
  EXPECT_LT(s.hard_limit, s0.hard_limit / 4) << "90%avail follows the memory left";
  EXPECT_LT(s.soft_limit, s0.soft_limit / 4);
  EXPECT_GE(s.headroom_changes, 1u);
  policy.reset();
  gc.release_all();
  other.deallocate(hog, free_now - 12 * MiB);
}

// The policy's bounded device refresh is what re-resolves the allocator's
// limits and records the headroom change when nothing else does: fixed
// limits (the allocator does not refresh by itself) and no failure.
TEST(TenantsPolicy, ThePolicysRefreshRecordsTheHeadroomChange) {
  gcp_test::fake_clock clock;
  temp_file f;
  gcp::allocator_options ao = two_tenants::with_file(gcp::allocator_options{}, f.path);
  gcp::device_allocator alloc(ao);
  gcp::host_resource other(100 * MiB, f.path);
  gcp_test::fake_collector gc;
  gc.bind(alloc);
  gcp::policy_options po;
  po.clock = &clock;
  auto policy = gcp::make_policy("pressure", alloc, gc, po);
  EXPECT_FALSE(alloc.limits_follow_available());
  void* hog = other.allocate(60 * MiB);
  EXPECT_EQ(alloc.headroom_changes(), 0u) << "nothing refreshed yet";
  clock.advance(0.2);
  void* p = alloc.allocate(MiB);
  EXPECT_EQ(alloc.headroom_changes(), 1u);
  EXPECT_EQ(alloc.available_bytes(), 40 * MiB) << "what the other tenant left (+ our own bytes)";
  alloc.free(p, MiB);
  policy.reset();
  other.deallocate(hog, 60 * MiB);
}
