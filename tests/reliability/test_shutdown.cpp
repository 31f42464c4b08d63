// test_shutdown.cpp — shutdown with Boehm (issue 6): handles finalized after
// main returns (subprocesses running gcpressure_shutdown_helper and
// gcpressure_shutdown_capi_helper), after their heap is gone, and
// concurrently with the heap's destruction: never a crash, a hang or a
// use-after-free (the ASan build runs these and would report one). Allocators
// destroyed with live blocks: test_shutdown_core.cpp.
#include "boehm_test_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include "reliability_support.hpp"

extern char** environ;

using namespace std::chrono_literals;
using gcp_test::clear_stack;

namespace {

[[maybe_unused]] const bool g_env = gcp_test::init_boehm_first();

// --- subprocesses --------------------------------------------------------------------

struct run_result {
  int status = -1;  // exit status, or 128 + signal
  bool timed_out = false;
  std::string output;
};

// Runs the helper with `mode`, output to a file; kills it after `limit`.
run_result run_helper(const std::string& exe_path, const std::string& mode, std::chrono::seconds limit) {
  run_result r;
  char path[] = "/tmp/gcp_shutdown_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  std::string exe = exe_path;
  char* argv[] = {exe.data(), const_cast<char*>(mode.c_str()), nullptr};
  pid_t pid = -1;
  const int err = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fd);
  EXPECT_EQ(err, 0) << "posix_spawn " << exe << ": " << std::strerror(err);
  if (err != 0) return r;
  const auto end = std::chrono::steady_clock::now() + limit;
  int st = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > end) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  unlink(path);
  return r;
}

// The helpers' "this mode cannot run here" (no usable GPU): the test skips.
constexpr int skip_exit_code = 77;

// `expect`: a line the helper prints only when its own checks passed (it
// exits 3 when one fails); a helper that never got there (its atexit
// handler skipped) fails here.
void expect_clean_exit(const std::string& mode, int runs, const char* exe = GCP_SHUTDOWN_HELPER,
                       const char* expect = nullptr) {
  for (int i = 0; i < runs; ++i) {
    const auto r = run_helper(exe, mode, std::chrono::seconds(60));
    if (r.status == skip_exit_code && !r.timed_out && mode.rfind("cuda-", 0) == 0) GTEST_SKIP() << r.output;
    SCOPED_TRACE(mode + " run " + std::to_string(i + 1) + " output:\n" + r.output);
    EXPECT_FALSE(r.timed_out) << "the process hung at exit";
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.output.find("Sanitizer"), std::string::npos);
    EXPECT_EQ(r.output.find("runtime error"), std::string::npos);
    EXPECT_EQ(r.output.find("FAILED"), std::string::npos);
    if (expect) {
      EXPECT_NE(r.output.find(expect), std::string::npos) << "no '" << expect << "'";
    }
    if (::testing::Test::HasFailure()) return;
    if (i == 0) std::printf("%s", r.output.c_str());
  }
}

// The helper asserts the counts (exit 3 otherwise): all 64 handles
// finalized and 0 bytes live after the drain (the bytes drained there vary:
// the finalizer thread may have drained them first); 64 orphaned
// finalizations.
constexpr const char* k_leaked_ok = "64 handles finalized";
constexpr const char* k_static_ok = "64 orphaned finalizations";
TEST(ShutdownAfterMain, LeakedHeapFinalizesAfterMain) {
  expect_clean_exit("leaked-heap", 3, GCP_SHUTDOWN_HELPER, k_leaked_ok);
}
TEST(ShutdownAfterMain, StaticHeapFinalizesAfterItsDestructor) {
  expect_clean_exit("static-heap", 3, GCP_SHUTDOWN_HELPER, k_static_ok);
}
// Races: exit() against a thread still allocating and the finalizer thread.
TEST(ShutdownAfterMain, ExitRacesAllocatingThreadAndFinalizers) {
  expect_clean_exit("racing-exit", static_cast<int>(gcp_rel::env_count("GCPRESSURE_SHUTDOWN_RUNS", gcp_rel::scaled(20, 5))));
}
// The C API (a C program, as a runtime): destroy with live blocks and
// handles, use after destroy, finalizers after the allocator is gone.
TEST(ShutdownAfterMain, CApiDestroyWithLiveBlocksThenFinalize) {
  expect_clean_exit("capi-after-destroy", 3, GCP_SHUTDOWN_CAPI_HELPER);
}
TEST(ShutdownAfterMain, CudaStaticHeap) { expect_clean_exit("cuda-static-heap", 2, GCP_SHUTDOWN_HELPER, k_static_ok); }
TEST(ShutdownAfterMain, CudaLeakedHeap) { expect_clean_exit("cuda-leaked-heap", 2, GCP_SHUTDOWN_HELPER, k_leaked_ok); }

// --- in process: handles outliving their heap ------------------------------------------

gb::buffer* volatile g_orphans[32];

[[gnu::noinline]] void make_orphans(gb::device_heap& h) {
  for (auto& o : g_orphans) {
    o = h.alloc(128 * KiB);
    std::memset(gb::device_heap::data(o), 7, 128);
  }
  clear_stack();
}

TEST(ShutdownHeap, HandlesAfterTheirHeapIsGone) {
  auto h = std::make_unique<gb::device_heap>(gcp::allocator_options{}, "pressure");
  make_orphans(*h);
  gcp_rel::misuse_counter misuse;
  const auto freed0 = gb::blocks_freed_at_shutdown();
  h.reset();  // Note [Blocks still allocated at shutdown]: the roots' buffers are freed, not leaked
  EXPECT_EQ(misuse.count(), 0) << "a leak reported for buffers the heap frees";
  EXPECT_EQ(gb::blocks_freed_at_shutdown() - freed0, 32u);
  for (auto* o : g_orphans) {
    EXPECT_THROW(gb::device_heap::data(o), gcp::logic_error);
    EXPECT_EQ(gb::device_heap::size(o), 128 * KiB);
  }
  // A new heap (maybe in the same slot) refuses them too.
  gb::device_heap h2(gcp::allocator_options{}, "pressure");
  EXPECT_THROW(h2.unsafe_free(g_orphans[0]), gcp::logic_error);
  const auto before = gb::orphaned_finalizations();
  for (auto& o : g_orphans) o = nullptr;
  clear_stack();
  h2.collect(gcp::gc_kind::blocking_full);
  const auto end = std::chrono::steady_clock::now() + 2s;
  while (gb::orphaned_finalizations() < before + 32 && std::chrono::steady_clock::now() < end) {
    GC_gcollect();
    GC_invoke_finalizers();
    std::this_thread::sleep_for(1ms);
  }
  std::printf("orphaned finalizations: %llu of 32\n",
              static_cast<unsigned long long>(gb::orphaned_finalizations() - before));
  EXPECT_GE(gb::orphaned_finalizations(), before + 28) << "finalizers of a dead heap's handles did not run";
  EXPECT_EQ(h2.allocator().deferred().pushed(), 0u) << "a dead heap's block reached a new heap";
  EXPECT_EQ(h2.stats().misuse_errors, 0u);
}

// Heaps destroyed while other threads collect and run finalizers for their
// handles: each finalizer either reaches the heap's queue before the heap
// goes (and the heap's destructor drains it) or sees it gone and does
// nothing. Never a crash, a hang, a use-after-free, or a block reaching the
// next heap in the same slot.
// A heap's destructor collects and finalizes its garbage first (Note [Clean
// teardown] in gc_bridge/include/gcpressure/boehm.hpp): handles still
// reachable then (g_kept) are the ones finalized after their heap is gone.
gb::buffer* volatile g_kept[4];
[[gnu::noinline]] void drop_some(gb::device_heap& h, int n) {
  for (int i = 0; i < n; ++i) (void)h.alloc(16 * KiB + static_cast<std::size_t>(i) * 256);
  for (auto& k : g_kept) k = h.alloc(16 * KiB);
  clear_stack();
}

// Note [Paced collectors]
// The collectors used to loop GC_gcollect back to back. Two threads stopping
// the world without pause starve the main thread of bdwgc's allocation lock
// (every h.alloc takes it) on a loaded 2-core machine: 19-54 s alone and the
// 120 s watchdog under ctest -j2 — slow, not livelocked (each cycle still
// progressed). Now the main thread hands out one collection per collector per
// heap: each cycle's collections start (and run with finalizers) while that
// heap is being filled and destroyed, the count is exact, and the test takes
// about a second whatever the load.
class collection_tokens {
 public:
  // Main thread: waits until the previous grants were taken, then grants n.
  // Returns false if the collectors stopped taking them (they are gone).
  void grant(int n) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return tokens_ == 0; });
    tokens_ = n;
    cv_.notify_all();
  }
  // Collector: false once stopped.
  bool take() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return tokens_ > 0 || stop_; });
    if (tokens_ == 0) return false;
    --tokens_;
    cv_.notify_all();
    return true;
  }
  void stop() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return tokens_ == 0; });
    stop_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int tokens_ = 0;
  bool stop_ = false;
};

TEST(ShutdownHeap, DestroyWhileFinalizersRun) {
  gcp_rel::watchdog dog(120s, "heaps destroyed while finalizers run");
  constexpr int n_collectors = 2;
  collection_tokens tokens;
  std::atomic<std::uint64_t> collections{0};
  std::vector<std::thread> collectors;
  for (int t = 0; t < n_collectors; ++t)
    collectors.emplace_back([&] {
      gb::thread_scope reg;
      while (tokens.take()) {
        GC_gcollect();
        GC_invoke_finalizers();
        collections.fetch_add(1);
      }
    });
  const int cycles = static_cast<int>(gcp_rel::env_count("GCPRESSURE_SHUTDOWN_CYCLES", gcp_rel::scaled(200, 50)));
  gcp_rel::misuse_counter misuse;  // the destructors report live (not yet finalized) blocks: expected
  std::uint64_t foreign = 0;
  const auto orphaned_before = gb::orphaned_finalizations();
  for (int c = 0; c < cycles; ++c) {
    gcp::allocator_options o;
    o.host_capacity = 512 * MiB;
    auto h = std::make_unique<gb::device_heap>(o, "at_limit");
    tokens.grant(n_collectors);  // Note [Paced collectors]
    drop_some(*h, 64);
    if (c % 2) std::this_thread::sleep_for(std::chrono::microseconds(c % 7 * 100));
    const auto s = h->stats();
    foreign += s.misuse_errors;
    h.reset();
    for (auto& k : g_kept) k = nullptr;  // garbage now, of a heap that is gone
    dog.note("cycle " + std::to_string(c) + " of " + std::to_string(cycles));
  }
  tokens.stop();
  for (auto& t : collectors) t.join();
  EXPECT_EQ(foreign, 0u) << "a block was freed into a heap it did not come from";
  EXPECT_EQ(collections.load(), static_cast<std::uint64_t>(cycles) * n_collectors);
  EXPECT_GT(gb::orphaned_finalizations(), orphaned_before) << "no finalizer ran after its heap was gone";
  std::printf("%d heaps destroyed during %llu concurrent collections; %llu orphaned finalizations\n", cycles,
              static_cast<unsigned long long>(collections.load()),
              static_cast<unsigned long long>(gb::orphaned_finalizations() - orphaned_before));
}

}  // namespace
