// workload.cpp — the device arrays of a run and the workloads (forward.hpp).
//
// Note [The workloads]
// Each one is the steady loop plus one departure from it, defined without
// reference to any policy (the same definition runs under every policy and
// under the oracle, which frees each array the moment it dies):
//   steady   every iteration allocates the same arrays (per layer: the W*x
//            temporary and the output) and drops them all before the hint.
//   promote  as steady, and each array is also kept alive, with probability
//            --promote-share (default 0.25), for a lifetime drawn uniformly
//            from 1..50 iterations (fixed seed), in a ring of GC-visible
//            slots: such arrays survive minor collections, become old, then
//            die at the start of the iteration their lifetime ends.
//   burst    as steady, and every --burst-every iterations (default 50; the
//            last iteration of each period) one step allocates arrays
//            totalling --burst-fraction (default 0.5) of the hard limit in
//            chunks of min(256 MiB, hard limit / 16), holds them all at once,
//            writes them on the device, then drops them.
//   varied   as steady, and each layer also allocates one side array whose
//            size is drawn log-uniformly (fixed seed) from 4 KiB to
//            min(256 MiB, hard limit / 16) (so it fits a small host limit;
//            256 MiB on an H200), writes it on the device and drops it at the
//            end of the layer.
#ifndef GC_THREADS
#define GC_THREADS 1  // as in gc_bridge: must precede gc.h
#endif
#include <gc/gc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "detail.hpp"
#include "gcpressure/error.hpp"

namespace fwd::detail {

// --- arrays ------------------------------------------------------------------

// Note [Array objects]
// The runtime's array object points at its buffer handle, so it decides when
// the buffer is found dead. Allocated with GC_MALLOC it comes from the
// thread's local free list, whose objects bdwgc marks at every collection: a
// partial collection then finds it (and its device buffer) live although it
// is garbage, and the buffer waits for a whole-heap cycle. The bridge asks
// runtimes to allocate such objects with boehm::alloc_array_object (global
// free lists); --array-objects thread-local keeps GC_MALLOC to show the
// difference (bench/RESULTS.md has both).
darray* arrays::make(int rows, int cols) {
  const std::size_t bytes = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(float);
  boehm::buffer* b = heap_.alloc(bytes, stream_, device_);
  auto* a = static_cast<darray*>(global_ ? boehm::alloc_array_object(sizeof(darray)) : GC_MALLOC(sizeof(darray)));
  if (!a) {
    if (oracle_) heap_.unsafe_free(b);
    throw std::bad_alloc();
  }
  a->buf = b;
  a->rows = rows;
  a->cols = cols;
  a->kept = 0;
  bytes_ += bytes;
  return a;
}

darray* arrays::make_bytes(std::size_t bytes) {
  const std::size_t n = std::max<std::size_t>(1, bytes / sizeof(float));
  return make(static_cast<int>(n), 1);
}

void arrays::died(darray* a) {
  if (oracle_ && a && !a->kept && boehm::device_heap::is_live(a->buf)) heap_.unsafe_free(a->buf);
}

float* ptr(const darray* a) { return static_cast<float*>(boehm::device_heap::data(a->buf)); }

namespace {

// An uncollectable (scanned, never collected) array of n pointers: GC-visible
// slots for arrays a workload holds across iterations.
template <class T>
class gc_slots {
 public:
  explicit gc_slots(std::size_t n) : n_(n) {
    p_ = static_cast<T*>(GC_MALLOC_UNCOLLECTABLE(std::max<std::size_t>(n, 1) * sizeof(T)));
    if (!p_) throw std::bad_alloc();
    std::memset(static_cast<void*>(p_), 0, std::max<std::size_t>(n, 1) * sizeof(T));
  }
  ~gc_slots() { GC_FREE(p_); }
  gc_slots(const gc_slots&) = delete;
  gc_slots& operator=(const gc_slots&) = delete;
  T& operator[](std::size_t i) noexcept { return p_[i]; }
  std::size_t size() const noexcept { return n_; }

 private:
  T* p_;
  std::size_t n_;
};

std::size_t chunk_cap(std::size_t hard_limit) {
  return std::max<std::size_t>(4096, std::min<std::size_t>(std::size_t{256} << 20, hard_limit / 16));
}

class steady final : public workload {};

// promote: see Note [The workloads].
class promote final : public workload {
 public:
  static constexpr int max_life = 50;
  promote(const workload_context& c, double share, std::uint64_t seed)
      : c_(c), share_(share), rng_(seed ^ 0x70726f6d6f7465ull), slots_(2 * c.layers * (max_life + 1)),
        expiry_(slots_.size(), -1) {}

  void begin_iteration(int it) override {
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i] && expiry_[i] <= it) drop(i);
  }
  void after_layer(int it, int, darray* t, darray* y) override {
    for (darray* a : {t, y}) {
      if (!coin_(rng_, std::bernoulli_distribution::param_type(share_))) continue;
      const int life = std::uniform_int_distribution<int>(1, max_life)(rng_);
      for (std::size_t i = 0; i < slots_.size(); ++i)
        if (!slots_[i]) {
          slots_[i] = a;
          expiry_[i] = it + life;
          a->kept = 1;
          break;
        }
    }
  }
  void release() override {
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i]) drop(i);
  }

 private:
  void drop(std::size_t i) {
    darray* a = slots_[i];
    slots_[i] = nullptr;
    expiry_[i] = -1;
    a->kept = 0;  // the layer chain let go of it long ago
    c_.arr.died(a);
  }
  workload_context c_;
  double share_;
  std::mt19937_64 rng_;
  std::bernoulli_distribution coin_;
  gc_slots<darray*> slots_;  // GC-visible: a kept array is reachable from here
  std::vector<int> expiry_;  // plain integers: malloc'd is fine
};

// burst: see Note [The workloads].
class burst final : public workload {
 public:
  burst(const workload_context& c, int every, double fraction)
      : c_(c), every_(every), total_(static_cast<std::size_t>(fraction * static_cast<double>(c.hard_limit))),
        chunk_(chunk_cap(c.hard_limit)), held_(total_ / chunk_ + 1) {}

  void end_iteration(int it) override {
    if ((it + 1) % every_ != 0 || total_ == 0) return;
    std::size_t n = 0;
    try {
      for (std::size_t got = 0; got < total_; got += chunk_) {
        darray* a = c_.arr.make_bytes(std::min(chunk_, total_ - got));
        held_[n++] = a;
        c_.comp.fill(ptr(a), boehm::device_heap::size(a->buf));
      }
    } catch (...) {
      let_go(n);
      throw;
    }
    let_go(n);
  }

 private:
  void let_go(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      c_.arr.died(held_[i]);
      held_[i] = nullptr;
    }
  }
  workload_context c_;
  int every_;
  std::size_t total_, chunk_;
  gc_slots<darray*> held_;
};

// varied: see Note [The workloads].
class varied final : public workload {
 public:
  varied(const workload_context& c, std::uint64_t seed)
      : c_(c), rng_(seed ^ 0x766172696564ull), log_lo_(std::log(4096.0)),
        log_hi_(std::log(static_cast<double>(chunk_cap(c.hard_limit)))) {}

  void after_layer(int, int, darray*, darray*) override {
    const double lg = std::uniform_real_distribution<double>(log_lo_, log_hi_)(rng_);
    const std::size_t bytes = static_cast<std::size_t>(std::exp(lg)) & ~std::size_t{3};
    darray* side = c_.arr.make_bytes(bytes);  // a local: on the stack, GC-visible while used
    c_.comp.fill(ptr(side), boehm::device_heap::size(side->buf));
    c_.arr.died(side);
  }

 private:
  workload_context c_;
  std::mt19937_64 rng_;
  double log_lo_, log_hi_;
};

}  // namespace

std::unique_ptr<workload> make_workload(const options& o, const workload_context& c) {
  if (o.workload == "steady") return std::make_unique<steady>();
  if (o.workload == "promote") return std::make_unique<promote>(c, o.promote_share, o.seed);
  if (o.workload == "burst") return std::make_unique<burst>(c, o.burst_every, o.burst_fraction);
  if (o.workload == "varied") return std::make_unique<varied>(c, o.seed);
  GCPRESSURE_FAIL("forward_loop: unknown workload '" + o.workload + "'");
}

}  // namespace fwd::detail

const char* const* fwd::workload_names() noexcept {
  static const char* const names[] = {"steady", "promote", "burst", "varied", nullptr};
  return names;
}
