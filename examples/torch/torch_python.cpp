// torch_python.cpp — the CPython side of libgcpressure_torch.so: the
// collector the pressure policies drive (gc.collect run by a thread that may
// take the GIL), the GIL discipline of the entry points, and Python's
// liveness at exit. torch_shim.hpp is its interface.
//
// Note [GIL and the collection lock]
// Two locks matter: the GIL, and the policy's collection mutex M
// (gc_policy::collect_mu_). M is held across a whole collection; allocating
// threads wait for it (bounded, 5 s, in before_allocate when over the
// headroom; unbounded in the reclaim ladder). Allocations reach us from
// threads that hold the GIL (PyTorch code that keeps it), from Python threads
// that released it (most ATen bindings drop it before dispatch), and from
// threads Python has never seen (autograd's device threads). A deadlock needs
// a thread that holds M and waits for the GIL while the GIL's holder waits
// for M. The rules that exclude it:
//  1. A thread holding M never blocks on the GIL itself. If it already holds
//     the GIL (PyGILState_Check) it calls gc.collect directly. Otherwise it
//     hands the collection to our helper thread (which takes the GIL with
//     PyGILState_Ensure and holds nothing else of ours) and waits, bounded.
//     It stops waiting — the collection still runs later on the helper — when
//     (a) a thread that holds the GIL has stayed inside one of our entry
//     points for over a millisecond (it may be waiting for M: the helper
//     cannot get the GIL before it leaves), (c) Python is shutting down, or
//     (d) gil_wait seconds passed. (There was a (b): the thread serving the
//     request inside an entry point, for a finalizer of its collection that
//     allocates and might wait for M. It cannot since rule 5: it was also
//     what made finalizers that allocate fail allocations, by abandoning
//     collections that were making progress.)
//  2. A thread that holds the GIL and enters one of our entry points (alloc,
//     collect, hints, trim) while any collection request is in flight lets
//     the GIL go (PyEval_SaveThread) for the duration of the call, so that
//     the collecting thread (or the helper) can take it. g_gil_holders and
//     g_requests form a Dekker pair (sequentially consistent): either the
//     entering thread sees the request and lets the GIL go, or the requester
//     sees the entering thread and stops waiting under rule 1(a).
//  3. A direct collector (GIL + M) loses the GIL whenever finalizers run
//     Python code; a thread that takes it and then allocates meets rule 2 and
//     gives it back before it can wait for M.
//  4. Frees never take M: they take the pool lock only, and no thread holds
//     the pool lock across a collection or a GIL wait (Note [Locks and
//     collections] in core/src/allocator.cpp). So every __del__ a collection
//     runs completes.
//  5. Inside a collection no thread waits for M or starts a collection
//     (Note [Inside a collection], core's collection_scope.hpp): the policy
//     collects inside the scope (the requester, waiting or collecting
//     directly, is inside it), the helper and the pending call serve a batch
//     inside it, and every CPython collection is inside it from its
//     gc.callbacks "start" to its "stop", whoever started it. So a finalizer
//     that allocates is served at once (or fails, where only a collection
//     would help) on whichever thread it runs, and never nests a collection
//     (CPython's gc.collect would return 0 there anyway).
// Every wait is then either bounded or made by a thread that holds nothing
// the others wait for (the helper waiting for the GIL). The price: a request
// given up under rule 1 looks to the policy like a collection that reclaimed
// little; the memory comes back moments later, when the helper runs it. Stats
// count each case ("abandoned_*").
//
// Why a helper thread and not PyGILState_Ensure on the allocating thread: the
// GIL has no timed acquire, so a blocked PyGILState_Ensure could never give
// up under rule 1 (the GIL holder may wait for M, or for a PyTorch mutex the
// allocating thread holds); and in a finalizing interpreter PyGILState_Ensure
// terminates (3.12) or hangs (3.14) the calling thread: only our helper ever
// runs that risk, never an autograd thread. The alternative handoff,
// Py_AddPendingCall (set_option("handoff", "pending")), runs the collection on
// the main thread at its next safe point; it cannot help while the main
// thread itself waits (for us, or in backward() for autograd's threads), so
// waits for it give up at once when the requester is the main thread.
//
// Note [Finalization]
// Python code runs only while python_alive(): gcp_torch_python_shutdown()
// (registered with atexit by gcpressure_torch.py) has not been called,
// Py_IsInitialized() and not Py_IsFinalizing(). Afterwards allocations and
// frees still work (tensors die during finalization and at exit) but no
// collection runs. Everything global is leaked on purpose: PyTorch frees
// tensors from static destructors after ours would have run.
//
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

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

// --- Python liveness and GIL state ----------------------------------------------

using int_fn = int (*)();
std::atomic<int_fn> g_gil_check{nullptr};
std::atomic<int_fn> g_is_finalizing{nullptr};
std::atomic<bool> g_py_shutdown{false};
std::atomic<bool> g_symbols{false};

void resolve_symbols() {
  if (g_symbols.load(std::memory_order_acquire)) return;
  auto gil = reinterpret_cast<int_fn>(dlsym(RTLD_DEFAULT, "PyGILState_Check"));
  auto fin = reinterpret_cast<int_fn>(dlsym(RTLD_DEFAULT, "Py_IsFinalizing"));
  if (!fin) fin = reinterpret_cast<int_fn>(dlsym(RTLD_DEFAULT, "_Py_IsFinalizing"));
  g_gil_check.store(gil);
  g_is_finalizing.store(fin);
  g_symbols.store(true, std::memory_order_release);
}

// Note [Finalization]. Callable without the GIL.
bool python_alive() noexcept {
  if (g_py_shutdown.load(std::memory_order_acquire)) return false;
  resolve_symbols();
  if (!g_gil_check.load(std::memory_order_relaxed)) return false;  // cannot tell who holds the GIL
  if (!Py_IsInitialized()) return false;
  auto fin = g_is_finalizing.load(std::memory_order_relaxed);
  return !(fin && fin());
}

// Only meaningful while python_alive().
bool holds_gil() noexcept {
  auto f = g_gil_check.load(std::memory_order_relaxed);
  return f && f() == 1;
}
// --- threads, counters ---------------------------------------------------------

// Inside a CPython collection (gc.callbacks), for its timing and to tell a
// requester whether its gc.collect ran. Rule 5 does not read it: "start"
// also enters the one collection scope of core, which is what stops nested
// collections and waits for M.
thread_local int t_py_gc_depth = 0;
thread_local std::uint64_t t_py_gc_starts = 0;
thread_local clock_type::time_point t_py_gc_t0;
thread_local bool t_is_helper = false;

std::atomic<int> g_requests{0};      // collection requests in flight (rule 2)
std::atomic<int> g_gil_holders{0};   // threads in an entry point still holding the GIL (rule 1a)
std::atomic<std::uint64_t> g_main_thread{0};

std::uint64_t self_id() noexcept { return static_cast<std::uint64_t>(pthread_self()); }
// --- the CPython side (GIL held) -------------------------------------------------

PyObject* g_gc_collect = nullptr;  // gc.collect, a new reference kept forever (GIL to touch)
PyObject* g_gc_callbacks = nullptr;  // gc.callbacks (the list), kept forever
PyObject* g_hook_fn = nullptr;     // our entry in it
bool g_hook_installed = false;     // (GIL)

// gc.callbacks entry: counts and times every CPython collection and tells a
// requester whether its gc.collect() really ran (Note [A collection already
// running] in examples/runtimes/python/gcpressure_py/collector.py).
PyObject* on_gc(PyObject*, PyObject* args) {
  PyObject* phase = PyTuple_GetItem(args, 0);
  PyObject* info = PyTuple_GetItem(args, 1);
  if (!phase || !info) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  if (PyUnicode_CompareWithASCIIString(phase, "start") == 0) {
    if (t_py_gc_depth++ == 0) t_py_gc_t0 = clock_type::now();
    ++t_py_gc_starts;
    enter_collection();  // rule 5
  } else if (t_py_gc_depth > 0) {  // a stop without its start (entry added mid-collection) leaves nothing
    leave_collection();
    if (--t_py_gc_depth == 0) add_ns(C().python_ns, seconds_since(t_py_gc_t0));
    long gen = 2;
    if (PyObject* g = PyDict_GetItemString(info, "generation")) gen = PyLong_AsLong(g);
    if (PyErr_Occurred()) PyErr_Clear();
    if (gen >= 0 && gen < 3) C().python_collections[static_cast<std::size_t>(gen)].fetch_add(1);
  }
  Py_RETURN_NONE;
}

PyMethodDef g_on_gc_def = {"gcpressure_torch_on_gc", on_gc, METH_VARARGS,
                           "gcpressure_torch: counts CPython collections"};

// GIL held. Imports gc.collect once; installs the gc.callbacks entry once.
bool ensure_gc_objects() {
  if (g_gc_collect) return true;
  PyObject* gc = PyImport_ImportModule("gc");
  if (!gc) {
    PyErr_Clear();
    return false;
  }
  PyObject* collect = PyObject_GetAttrString(gc, "collect");
  if (!collect) {
    PyErr_Clear();
    Py_DECREF(gc);
    return false;
  }
  if (!g_hook_installed) {
    PyObject* cbs = PyObject_GetAttrString(gc, "callbacks");
    PyObject* fn = PyCFunction_NewEx(&g_on_gc_def, nullptr, nullptr);
    if (cbs && fn && PyList_Append(cbs, fn) == 0) {
      g_hook_installed = true;
      g_gc_callbacks = cbs;  // both kept
      g_hook_fn = fn;
    } else {
      Py_XDECREF(fn);
      Py_XDECREF(cbs);
    }
    if (PyErr_Occurred()) PyErr_Clear();
  }
  Py_DECREF(gc);
  g_gc_collect = collect;
  return true;
}

// GIL held. Runs gc.collect(gen) for real: if another thread's collection is
// running (its finalizers let the GIL go), gc.collect returns 0 at once
// without collecting. A thread serving handed-off requests (may_wait: it
// holds no M) then lets that collection finish (GIL released while sleeping)
// and tries again, within gil_wait. A direct collector holds M and must not
// wait for the GIL (rule 1; found by test_cpu_ctypes --del-allocates: the
// other collection's finalizer held the GIL while waiting for M): it gives
// up at once — the running collection frees the garbage anyway. Returns
// false if it never ran.
bool collect_with_gil(int gen, double gil_wait, bool may_wait) {
  if (!ensure_gc_objects()) {
    C().callback_errors.fetch_add(1);
    return false;
  }
  const auto deadline = clock_type::now() + std::chrono::duration<double>(gil_wait);
  for (;;) {
    const std::uint64_t before = t_py_gc_starts;
    PyObject* arg = PyLong_FromLong(gen);
    PyObject* r = arg ? PyObject_CallFunctionObjArgs(g_gc_collect, arg, nullptr) : nullptr;
    Py_XDECREF(arg);
    Py_ssize_t n = 0;
    if (r) {
      n = PyLong_AsSsize_t(r);
      if (n > 0) C().unreachable.fetch_add(static_cast<std::uint64_t>(n));
      Py_DECREF(r);
    }
    if (PyErr_Occurred()) {
      C().callback_errors.fetch_add(1);
      if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        PyErr_Clear();
        PyErr_SetInterrupt();  // delivered again at the main thread's next check
      } else {
        PyErr_WriteUnraisable(g_gc_collect);
      }
    }
    if (!g_hook_installed || t_py_gc_starts != before || n > 0) return true;
    // Nothing seen: another thread's collection is running — or someone
    // removed our gc.callbacks entry (then we cannot tell; assume it ran).
    if (PySequence_Contains(g_gc_callbacks, g_hook_fn) != 1) {
      if (PyErr_Occurred()) PyErr_Clear();
      g_hook_installed = false;
      return true;
    }
    // Give up when out of time. The running collection's finalizers never
    // wait for the lock our requester holds (rule 5), so it ends by itself.
    if (!may_wait || clock_type::now() > deadline) {
      C().skipped_busy.fetch_add(1);
      return false;
    }
    C().waits_other_collection.fetch_add(1);
    Py_BEGIN_ALLOW_THREADS
    usleep(200);
    Py_END_ALLOW_THREADS
  }
}

// --- handing a collection to a thread that can take the GIL --------------------

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

int pending_call(void*) {
  // The main thread, with the GIL, at a safe point.
  run_batch();
  return 0;
}

// Note [GIL and the collection lock]: the helper holds nothing of ours while
// it waits for the GIL. It keeps one thread state for its whole life.
void* helper_main(void*) {
  t_is_helper = true;
  handoff& h = H();
  PyThreadState* ts = nullptr;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(h.mu);
      h.cv_req.wait(lk, [&] { return h.pending_gen >= 0 || g_py_shutdown.load(); });
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

// --- the collector the policy drives ----------------------------------------------

class py_collector final : public collector {
 public:
  const char* name() const noexcept override { return "cpython"; }

  void collect_minor() override {
    C().requested_minor.fetch_add(1);
    request(minor_generation());
  }
  void start_full() override {}
  bool step_full(double) override {
    collect_full();
    return true;
  }
  void collect_full() override {
    C().requested_full.fetch_add(1);
    request(2);
  }
  // CPython runs __del__ and weakref callbacks inside the collection, and
  // PyTorch's deleter frees the block at once (gcp_torch_free).
  std::size_t run_finalizers() override { return 0; }
  collector_counters counters() const override {
    collector_counters c;
    for (auto& n : C().python_collections) c.collections += n.load();
    c.full_collections = C().python_collections[2].load();
    c.seconds = static_cast<double>(C().python_ns.load()) * 1e-9;
    return c;
  }

  void configure(const settings& s) {
    mode_ = s.minor_generation;
    every_ = std::max(1, s.gen1_every);
    gil_wait_ = s.gil_wait;
    grace_ = s.holder_grace;
    pending_ = s.pending_handoff;
    std::lock_guard<std::mutex> lk(H().mu);
    H().gil_wait = s.gil_wait;
  }

 private:
  // Minor: gc.collect(0), and gc.collect(1) every every_-th time. A minor
  // collection promotes what is alive then (typically the object about to
  // receive the next tensor) to generation 1, where gc.collect(0) never looks
  // again: the periodic gc.collect(1) frees it once it is garbage, and only
  // what is alive at those collections reaches generation 2 (the whole-heap
  // collection's, ~80 ms in a process that imported torch).
  int minor_generation() {
    if (mode_ >= 0) return mode_;
    return (++minors_ % static_cast<std::uint64_t>(every_)) == 0 ? 1 : 0;
  }

  // Note [GIL and the collection lock]. The policy calls this inside its
  // collection scope, never nested (rule 5); skipped_nested stays 0.
  void request(int gen) {
    C().requested_gen[static_cast<std::size_t>(gen)].fetch_add(1);
    if (!python_alive()) {
      C().skipped_no_python.fetch_add(1);
      return;
    }
    const auto t0 = clock_type::now();
    g_requests.fetch_add(1, std::memory_order_seq_cst);
    if (holds_gil()) {
      C().direct.fetch_add(1);
      collect_with_gil(gen, gil_wait_, false);
    } else {
      hand_off(gen);
    }
    g_requests.fetch_sub(1, std::memory_order_seq_cst);
    add_ns(C().requested_ns, seconds_since(t0));
  }

  void hand_off(int gen) {
    handoff& h = H();
    std::unique_lock<std::mutex> lk(h.mu);
    const std::uint64_t seq = ++h.requested;
    h.pending_gen = std::max(h.pending_gen, gen);
    bool pending = pending_ || !start_helper_locked(h);
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
    } else {
      h.cv_req.notify_one();
    }
    C().handed_off.fetch_add(1);
    const auto deadline = clock_type::now() + std::chrono::duration<double>(gil_wait_);
    clock_type::time_point holder_since{};
    while (h.done < seq) {
      h.cv_done.wait_for(lk, std::chrono::microseconds(250));
      if (h.done >= seq) break;
      const auto now = clock_type::now();
      if (g_gil_holders.load(std::memory_order_seq_cst) > 0) {  // rule 1(a)
        if (holder_since == clock_type::time_point{}) holder_since = now;
        if (std::chrono::duration<double>(now - holder_since).count() >= grace_) {
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

  int mode_ = -1;
  int every_ = 4;
  double gil_wait_ = 1.0;
  double grace_ = 0.001;
  bool pending_ = false;
  std::atomic<std::uint64_t> minors_{0};
};

// --- entry points' GIL discipline (rule 2) ------------------------------------------

entry_guard::entry_guard() {
  // Inside a collection (rule 5: ours, the helper's batch, or any CPython
  // collection) this thread never waits for M, so keeping the GIL blocks
  // nobody for long; letting it go mid-collection would let every other
  // thread in.
  if (in_collection() || !python_alive() || !holds_gil()) return;
  C().entries_with_gil.fetch_add(1, std::memory_order_relaxed);
  g_gil_holders.fetch_add(1, std::memory_order_seq_cst);
  counted_ = true;
  if (g_requests.load(std::memory_order_seq_cst) > 0) release();
}

entry_guard::~entry_guard() {
  if (counted_) g_gil_holders.fetch_sub(1, std::memory_order_seq_cst);
  if (saved_) PyEval_RestoreThread(static_cast<PyThreadState*>(saved_));
}

void entry_guard::release() {
  saved_ = PyEval_SaveThread();
  g_gil_holders.fetch_sub(1, std::memory_order_seq_cst);
  counted_ = false;
  C().gil_released.fetch_add(1, std::memory_order_relaxed);
}

// --- what the entry points call -----------------------------------------------------

bool gil_check_available() noexcept {
  resolve_symbols();
  return g_gil_check.load() != nullptr;
}

bool gc_hook_installed() noexcept { return g_hook_installed; }

bool start_helper() {
  std::lock_guard<std::mutex> lk(H().mu);
  return start_helper_locked(H());
}

void python_shutdown() noexcept {
  g_py_shutdown.store(true, std::memory_order_release);
  handoff& h = H();
  {
    std::lock_guard<std::mutex> lk(h.mu);
  }
  h.cv_req.notify_all();
  h.cv_done.notify_all();
}

namespace {
py_collector& the_collector() {
  static py_collector* c = new py_collector();  // leaked: Note [Finalization]
  return *c;
}
}  // namespace

gcpressure::collector& python_collector() { return the_collector(); }

void configure_python_collector(const settings& s) { the_collector().configure(s); }

}  // namespace gcp_torch
