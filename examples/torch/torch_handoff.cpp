// torch_handoff.cpp — handing a collection to a thread that can take the
// GIL (Note [GIL and the collection lock], rule 1, in torch_python.cpp): the
// helper thread, the main thread's pending call (Note [Nudging the main
// thread]), and the bounded wait of the thread that asked.
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "gcpressure/collection_scope.hpp"
#include "torch_shim.hpp"

namespace gcp_torch {

using namespace gcpressure;

namespace {

// Collections requested by threads that cannot take the GIL themselves. The
// helper (or the main thread's pending call) runs the largest generation
// asked for since its last batch, once, and completes every request made
// before that batch started.
struct handoff {
  std::mutex mu;  // never held while waiting for the GIL or running Python code
  std::condition_variable cv_req, cv_done;
  std::uint64_t requested = 0;  // last request's sequence number
  std::uint64_t done = 0;       // requests up to here have been served
  int pending_gen = -1;
  bool pending_call_queued = false;
  bool pending_mode = false;  // the pending-call hand-off: the helper only nudges
  bool nudge = false;         // Note [Nudging the main thread]
  bool helper_started = false;
  bool helper_failed = false;
  double gil_wait = 1.0;
};
handoff& H() {
  static handoff* h = new handoff();
  return *h;
}

// GIL held. Serves the pending requests (helper or pending call).
void run_batch() {
  handoff& h = H();
  int gen;
  std::uint64_t upto;
  double wait;
  {
    std::lock_guard<std::mutex> lk(h.mu);
    gen = h.pending_gen;
    upto = h.requested;
    wait = h.gil_wait;
    h.pending_gen = -1;
    h.pending_call_queued = false;
  }
  if (gen >= 0) {
    {
      // Rule 5: the requester's collection, run here; its finalizers'
      // allocations are served without the policy (the requester holds M).
      collection_scope inside;
      if (python_alive()) collect_with_gil(gen, wait, true);
    }
    C().helper_batches.fetch_add(1);
  }
  {
    std::lock_guard<std::mutex> lk(h.mu);
    h.done = std::max(h.done, upto);
  }
  h.cv_done.notify_all();
}

// Note [Nudging the main thread]
// A pending call from another thread can sit unrun while the main thread
// runs Python code: measured here (CPython 3.11, torch_cpu_pending_call,
// debug build): requests queued right after the previous batch ended waited
// the whole gil_wait (2 s), with the main thread spinning in bytecode, no
// thread waiting for M or holding the GIL in a wait — 1 to 4 times a run.
// The main thread then learns of it only when its eval loop breaks for
// another reason, typically another thread asking for the GIL; with the
// workers parked (waiting for M, the GIL let go) nobody asks. So the helper,
// in this mode, asks: it takes the GIL and gives it back, which makes the
// main thread break and run its pending calls first. It holds nothing of
// ours while it waits for the GIL (rule 1). Repeated every 5 ms of waiting.
int pending_call(void*) {
  // The main thread, with the GIL, at a safe point.
  run_batch();
  return 0;
}

// Note [GIL and the collection lock]: the helper holds nothing of ours while
// it waits for the GIL. It keeps one thread state for its whole life.
void* helper_main(void*) {
  handoff& h = H();
  PyThreadState* ts = nullptr;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(h.mu);
      h.cv_req.wait(lk, [&] {
        return h.nudge || (!h.pending_mode && h.pending_gen >= 0) || g_py_shutdown.load();
      });
      if (h.nudge && h.pending_mode) {
        h.nudge = false;
        lk.unlock();
        if (python_alive()) {  // take the GIL and give it back at once
          if (!ts) (void)PyGILState_Ensure();
          else PyEval_RestoreThread(ts);
          ts = PyEval_SaveThread();
          C().nudges.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      h.nudge = false;
      if (h.pending_gen < 0) {  // shutting down with nothing to do: stay parked
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::seconds(1));
        continue;
      }
    }
    if (!python_alive()) {  // complete the requests without collecting
      std::lock_guard<std::mutex> lk(h.mu);
      h.pending_gen = -1;
      h.done = h.requested;
      h.cv_done.notify_all();
      continue;
    }
    if (!ts) {
      (void)PyGILState_Ensure();  // creates our thread state; never released
    } else {
      PyEval_RestoreThread(ts);
    }
    run_batch();
    ts = PyEval_SaveThread();
  }
  return nullptr;
}

// h.mu held.
bool start_helper_locked(handoff& h) {
  if (h.helper_started) return true;
  if (h.helper_failed) return false;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  // Block every signal in the helper: signals belong to the main thread.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  const int rc = pthread_create(&t, &attr, helper_main, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    h.helper_failed = true;
    return false;
  }
  h.helper_started = true;
  return true;
}

// h.mu held. Note [Nudging the main thread].
void nudge_locked(handoff& h) {
  if (!h.pending_mode || !start_helper_locked(h)) return;
  h.nudge = true;
  h.cv_req.notify_one();
}

}  // namespace

void hand_off(int gen, double gil_wait, double grace, bool pending_mode) {
  handoff& h = H();
  std::unique_lock<std::mutex> lk(h.mu);
  const std::uint64_t seq = ++h.requested;
  h.pending_gen = std::max(h.pending_gen, gen);
  bool pending = pending_mode || !start_helper_locked(h);
  if (pending) {
    if (!h.pending_call_queued) {
      if (Py_AddPendingCall(pending_call, nullptr) != 0) {
        C().abandoned_timeout.fetch_add(1);
        return;  // the queue is full; the request stays for the next batch
      }
      h.pending_call_queued = true;
      C().pending_calls.fetch_add(1);
    }
    // The main thread runs it at its next safe point; it cannot while it
    // is this thread.
    if (g_main_thread.load() == self_id()) {
      C().abandoned_main_thread.fetch_add(1);
      return;
    }
    nudge_locked(h);
  } else {
    h.cv_req.notify_one();
  }
  C().handed_off.fetch_add(1);
  const auto deadline = clock_type::now() + std::chrono::duration<double>(gil_wait);
  clock_type::time_point holder_since{}, nudged = clock_type::now();
  while (h.done < seq) {
    h.cv_done.wait_for(lk, std::chrono::microseconds(250));
    if (h.done >= seq) break;
    const auto now = clock_type::now();
    if (pending && now - nudged > std::chrono::milliseconds(5)) {
      nudge_locked(h);
      nudged = now;
    }
    if (g_gil_waiters.load(std::memory_order_seq_cst) > 0 ||
        (pending && g_main_waiting.load(std::memory_order_seq_cst) > 0)) {  // rule 1(a)
      if (holder_since == clock_type::time_point{}) holder_since = now;
      if (std::chrono::duration<double>(now - holder_since).count() >= grace) {
        C().abandoned_gil_holder.fetch_add(1);
        return;
      }
    } else {
      holder_since = {};
    }
    if (!python_alive()) {  // rule 1(c)
      C().abandoned_no_python.fetch_add(1);
      return;
    }
    if (now > deadline) {  // rule 1(d)
      C().abandoned_timeout.fetch_add(1);
      return;
    }
  }
}

bool start_helper() {
  std::lock_guard<std::mutex> lk(H().mu);
  return start_helper_locked(H());
}

void configure_handoff(double gil_wait, bool pending_mode) {
  std::lock_guard<std::mutex> lk(H().mu);
  H().gil_wait = gil_wait;
  H().pending_mode = pending_mode;
}

void wake_handoff_waiters() noexcept {
  handoff& h = H();
  {
    std::lock_guard<std::mutex> lk(h.mu);
  }
  h.cv_req.notify_all();
  h.cv_done.notify_all();
}

}  // namespace gcp_torch
