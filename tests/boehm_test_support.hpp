// tests/boehm_test_support.hpp — the Boehm half of tests/test_support.hpp:
// what every test over the Boehm bridge needs (gc.h with thread support,
// boehm::init before the first test, settling a heap, Boehm's full_freq).
// Only binaries that link the bridge include it: gc.h redirects
// pthread_create to Boehm's.
#pragma once

#ifndef GC_THREADS
#define GC_THREADS 1
#endif
#include <gc/gc.h>
#include <gc/gc_mark.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "gcpressure/boehm.hpp"
#include "gcpressure/error.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;
namespace gb = gcpressure::boehm;

namespace gcp_test {

// Registers a gtest environment that calls boehm::init(o) before the first
// test of the binary. Use: `const bool g_env = gcp_test::init_boehm_first();`
// at namespace scope.
inline bool init_boehm_first(gb::runtime_options o = {}) {
  class boehm_env final : public ::testing::Environment {
   public:
    explicit boehm_env(gb::runtime_options o) : o_(o) {}
    void SetUp() override { gb::init(o_); }

   private:
    gb::runtime_options o_;
  };
  ::testing::AddGlobalTestEnvironment(new boehm_env(o));
  return true;
}

// settle() over a heap: runs its finalizers and drains its queue before each
// check of `done`.
template <class Done>
bool settle(gb::device_heap& h, Done&& done, std::chrono::milliseconds limit = std::chrono::milliseconds(2000)) {
  return settle(
      [&] {
        h.gc().run_finalizers();
        h.allocator().drain();
      },
      done, limit);
}

// GC_call_with_alloc_lock callback: swaps Boehm's full_freq with *(int*)p.
inline void* GC_CALLBACK swap_full_freq(void* p) {
  auto* v = static_cast<int*>(p);
  const int old = GC_get_full_freq();
  GC_set_full_freq(*v);
  *v = old;
  return nullptr;
}

// Boehm makes every GC_full_freq-th collection a full one on its own; a test
// of what partial collections do must not meet one.
struct no_automatic_full {
  int saved = 1000000;
  no_automatic_full() { GC_call_with_alloc_lock(swap_full_freq, &saved); }
  ~no_automatic_full() { GC_call_with_alloc_lock(swap_full_freq, &saved); }
  no_automatic_full(const no_automatic_full&) = delete;
  no_automatic_full& operator=(const no_automatic_full&) = delete;
};

}  // namespace gcp_test
