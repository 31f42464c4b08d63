// gcpressure/deferred_free_queue.hpp — where finalizers put device blocks.
//
// Note [Finalizers only queue]
// A finalizer may run on any thread, inside a collection that another
// allocation triggered while the caller holds who-knows-what. So it never
// calls CUDA and never takes an allocator lock: it pushes {ptr, bytes,
// stream} onto this lock-free stack and returns. The queue is drained at safe
// points (the next allocation, an explicit drain, the finalizer thread), where
// the block goes back to the pool ordered on its stream.
#pragma once

#include <atomic>
#include <cstddef>

#include "gcpressure/types.hpp"

namespace gcpressure {

struct deferred_free {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  stream_ref stream = nullptr;
  deferred_free* next = nullptr;
};

class deferred_free_queue {
 public:
  deferred_free_queue() = default;
  deferred_free_queue(const deferred_free_queue&) = delete;
  deferred_free_queue& operator=(const deferred_free_queue&) = delete;
  ~deferred_free_queue();

  // Lock-free. Thread-safe; callable from a finalizer and from a signal-free
  // context holding any lock. Returns false only if the node could not be
  // allocated (then the caller must leak the block rather than block).
  bool push(void* ptr, std::size_t bytes, stream_ref stream) noexcept;

  // Takes every queued entry (LIFO order reversed to FIFO) and calls
  // fn(ptr, bytes, stream) for each. Thread-safe (concurrent drains each get a
  // disjoint batch). Returns the number drained. fn must not throw.
  template <class Fn>
  std::size_t drain(Fn&& fn) noexcept {
    deferred_free* list = head_.exchange(nullptr, std::memory_order_acquire);
    deferred_free* fifo = nullptr;
    while (list) {
      deferred_free* n = list->next;
      list->next = fifo;
      fifo = list;
      list = n;
    }
    std::size_t count = 0;
    while (fifo) {
      deferred_free* n = fifo->next;
      fn(fifo->ptr, fifo->bytes, fifo->stream);
      pending_.fetch_sub(1, std::memory_order_relaxed);
      pending_bytes_.fetch_sub(fifo->bytes, std::memory_order_relaxed);
      delete fifo;
      fifo = n;
      ++count;
    }
    return count;
  }

  // Cheap check before a drain (a plain load; no read-modify-write).
  bool empty() const noexcept { return head_.load(std::memory_order_relaxed) == nullptr; }
  std::size_t pending() const noexcept { return pending_.load(std::memory_order_relaxed); }
  std::size_t pending_bytes() const noexcept { return pending_bytes_.load(std::memory_order_relaxed); }
  std::uint64_t pushed() const noexcept { return pushed_.load(std::memory_order_relaxed); }

 private:
  std::atomic<deferred_free*> head_{nullptr};
  std::atomic<std::size_t> pending_{0};
  std::atomic<std::size_t> pending_bytes_{0};
  std::atomic<std::uint64_t> pushed_{0};
};

}  // namespace gcpressure
