// libgcpressure_torch.so — PyTorch's CUDA memory through gcpressure's pool and
// pressure policy, with CPython's cyclic collector as the collector.
//
//   alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "gcp_torch_alloc", "gcp_torch_free")
//   torch.cuda.memory.change_current_allocator(alloc)
//
// (gcpressure_torch.py does this, and more: limits, policy, stats.)
//
// PyTorch frees tensors by reference counting; a tensor held in a reference
// cycle waits for CPython's cyclic collector, whose thresholds count objects,
// not bytes (PyTorch issue #50185). Here every allocation goes through a
// gcpressure::device_allocator (cuda_async backend, one per device) whose
// pressure policy asks CPython for a collection when device bytes justify
// one: minor = gc.collect(0) / gc.collect(1), whole heap = gc.collect(2).
//
// Built against the stable ABI (Py_LIMITED_API = 3.11): one build loads into
// any CPython >= 3.11. Nothing from libpython is linked: the symbols resolve
// from the interpreter that loads us. Two functions outside the limited API
// are looked up at run time with dlsym (PyGILState_Check, present in every
// CPython since 3.4, and Py_IsFinalizing / _Py_IsFinalizing).
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
//     cannot get the GIL before it leaves), (b) the thread serving the
//     request (the helper, or the main thread in a pending call) is itself
//     inside an entry point (a finalizer of its collection allocates and may
//     wait for M), (c) Python is shutting down, or (d) gil_wait seconds
//     passed.
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
//  5. No nested collection: a request from a thread already inside one
//     (ours: t_in_request; CPython's, seen through gc.callbacks: t_py_gc_depth)
//     does nothing (CPython's gc.collect would return 0 there anyway).
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
// Note [Out of memory]
// CUDAPluggableAllocator does not check the pointer our alloc returns, so
// returning NULL would crash later in a kernel. By default (oom=throw) an
// allocation that fails after the reclaim ladder throws std::runtime_error
// ("CUDA out of memory (gcpressure): ..."); PyTorch's bindings turn it into a
// Python RuntimeError, as its own allocator's OutOfMemoryError (a
// RuntimeError) would be. oom=null returns NULL instead (ctypes callers: a C++
// exception cannot cross ctypes).
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/policy.hpp"
#include "torch_graphs.hpp"
#include "torch_profile.hpp"

#define GCP_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace gcpressure;
using gcp_torch::graph_memory;
using gcp_torch::prof_scope;
using gcp_torch::prof_site;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

constexpr int k_max_devices = 64;

// --- settings -------------------------------------------------------------------

struct settings {
  config cfg;                 // backend, limits, policy, budget, host capacity (GCPRESSURE_* first)
  double gil_wait = 1.0;      // longest wait for a handed-off collection (seconds)
  double holder_grace = 0.001;  // rule 1(a): how long a GIL holder may sit in an entry point
  int minor_generation = -1;  // -1: auto (0, and 1 every gen1_every-th minor); 0 or 1: always
  int gen1_every = 4;
  bool pending_handoff = false;  // Py_AddPendingCall instead of the helper thread
  bool oom_null = false;         // Note [Out of memory]
  bool capture_check = true;     // Note [Graph capture]: ask every allocation's stream
};

struct device_slot {
  std::unique_ptr<device_allocator> alloc;
  std::unique_ptr<gc_policy> policy;
  std::unique_ptr<gcp_torch::hook_gate> gate;  // the allocator's hook: the policy, off during captures
  std::unique_ptr<graph_memory> graphs;        // Note [Graph capture]
  bool capture_check = true;
};

class py_collector;

struct globals {
  std::mutex mu;  // settings and device creation; never held while waiting for the GIL
  settings s;
  bool configured = false;
  std::array<std::atomic<device_slot*>, k_max_devices> devices{};
  py_collector* collector = nullptr;
};

globals& G() {
  static globals* g = new globals();  // leaked: Note [Finalization]
  return *g;
}

thread_local std::string t_error;

int fail(const std::string& msg) {
  t_error = msg;
  return -1;
}

// --- Python liveness and GIL state ----------------------------------------------

using int_fn = int (*)();
std::atomic<int_fn> g_gil_check{nullptr};
std::atomic<int_fn> g_is_finalizing{nullptr};
std::atomic<bool> g_py_shutdown{false};
std::atomic<bool> g_attached{false};
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

thread_local int t_in_request = 0;    // inside our collector (direct, waiting, or the helper's batch)
thread_local int t_py_gc_depth = 0;   // inside a CPython collection (gc.callbacks)
thread_local std::uint64_t t_py_gc_starts = 0;
thread_local clock_type::time_point t_py_gc_t0;
thread_local bool t_is_helper = false;
thread_local int t_running_batch = 0;  // serving handed-off requests (helper or pending call)

std::atomic<int> g_requests{0};      // collection requests in flight (rule 2)
std::atomic<int> g_gil_holders{0};   // threads in an entry point still holding the GIL (rule 1a)
std::atomic<int> g_runner_in_entry{0};  // a thread serving handed-off requests is in an entry point
std::atomic<int> g_py_gc_in_entry{0};  // threads in an entry point from inside a CPython collection
std::atomic<std::uint64_t> g_main_thread{0};
std::atomic<std::uint64_t> g_alloc_entries{0};  // allocation attempts, all threads

std::uint64_t self_id() noexcept { return static_cast<std::uint64_t>(pthread_self()); }

struct counters {
  std::atomic<std::uint64_t> alloc_calls{0}, free_calls{0}, zero_size{0}, ooms{0}, oom_retries{0}, errors{0};
  std::atomic<std::uint64_t> entries_with_gil{0}, gil_released{0};
  std::atomic<std::uint64_t> requested_minor{0}, requested_full{0};
  std::array<std::atomic<std::uint64_t>, 3> requested_gen{};
  std::atomic<std::uint64_t> direct{0}, handed_off{0}, pending_calls{0}, helper_batches{0};
  std::atomic<std::uint64_t> skipped_nested{0}, skipped_no_python{0}, skipped_busy{0};
  std::atomic<std::uint64_t> waits_other_collection{0};
  std::atomic<std::uint64_t> abandoned_gil_holder{0}, abandoned_helper_busy{0}, abandoned_timeout{0},
      abandoned_no_python{0}, abandoned_main_thread{0};
  std::array<std::atomic<std::uint64_t>, 3> python_collections{};  // every CPython collection (gc.callbacks)
  std::atomic<std::uint64_t> python_ns{0};      // time in every CPython collection
  std::atomic<std::uint64_t> requested_ns{0};   // time our requests took (waits included)
  std::atomic<std::uint64_t> unreachable{0};    // gc.collect's results
  std::atomic<std::uint64_t> callback_errors{0};
};
counters& C() {
  static counters* c = new counters();
  return *c;
}

void add_ns(std::atomic<std::uint64_t>& a, double seconds) {
  a.fetch_add(static_cast<std::uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

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
  } else if (t_py_gc_depth > 0) {
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
bool collect_with_gil(int gen, double gil_wait, double grace, bool may_wait) {
  if (!ensure_gc_objects()) {
    C().callback_errors.fetch_add(1);
    return false;
  }
  const auto deadline = clock_type::now() + std::chrono::duration<double>(gil_wait);
  clock_type::time_point in_entry_since{};
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
    // Give up when out of time, or when the running collection's finalizer
    // has sat in one of our entry points for over `grace` (it may be waiting
    // for the lock we hold).
    const auto now = clock_type::now();
    bool stuck = false;
    if (g_py_gc_in_entry.load() > 0) {
      if (in_entry_since == clock_type::time_point{}) in_entry_since = now;
      stuck = std::chrono::duration<double>(now - in_entry_since).count() >= grace;
    } else {
      in_entry_since = {};
    }
    if (!may_wait || now > deadline || stuck) {
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
  double grace = 0.001;
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
  double wait, grace;
  {
    std::lock_guard<std::mutex> lk(h.mu);
    gen = h.pending_gen;
    upto = h.requested;
    wait = h.gil_wait;
    grace = h.grace;
    h.pending_gen = -1;
    h.pending_call_queued = false;
  }
  if (gen >= 0) {
    ++t_in_request;
    ++t_running_batch;
    if (python_alive()) collect_with_gil(gen, wait, grace, true);
    --t_running_batch;
    --t_in_request;
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
  bool has_incremental_full() const noexcept override { return false; }
  void start_full() override {}
  bool step_full(double) override {
    collect_full();
    return true;
  }
  bool full_in_progress() const override { return false; }
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
    H().grace = s.holder_grace;
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

  // Note [GIL and the collection lock]
  void request(int gen) {
    C().requested_gen[static_cast<std::size_t>(gen)].fetch_add(1);
    if (t_in_request || t_py_gc_depth > 0) {  // rule 5
      C().skipped_nested.fetch_add(1);
      return;
    }
    if (!python_alive()) {
      C().skipped_no_python.fetch_add(1);
      return;
    }
    const auto t0 = clock_type::now();
    ++t_in_request;
    g_requests.fetch_add(1, std::memory_order_seq_cst);
    if (holds_gil()) {
      C().direct.fetch_add(1);
      collect_with_gil(gen, gil_wait_, grace_, false);
    } else {
      hand_off(gen);
    }
    g_requests.fetch_sub(1, std::memory_order_seq_cst);
    --t_in_request;
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
    clock_type::time_point holder_since{}, runner_since{};
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
      if (g_runner_in_entry.load() > 0) {  // rule 1(b), after the grace (an
        // immediate give-up, tried, made collections under finalizers that
        // allocate ineffective: 5-15% of allocations failed instead of 0-3%)
        if (runner_since == clock_type::time_point{}) runner_since = now;
        if (std::chrono::duration<double>(now - runner_since).count() >= grace_) {
          C().abandoned_helper_busy.fetch_add(1);
          return;
        }
      } else {
        runner_since = {};
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

class entry_guard {
 public:
  entry_guard() {
    if (t_running_batch) {
      g_runner_in_entry.fetch_add(1);
      runner_ = true;
    }
    if (t_py_gc_depth > 0) {
      g_py_gc_in_entry.fetch_add(1);
      in_gc_ = true;
    }
    // Inside a collection we run: a direct collector's finalizer holds M
    // (recursive) and its hook does not run nested, so it never waits for M;
    // the helper's (or pending call's) finalizer may wait for M, whose holder
    // then stops waiting for it under rule 1(b). Either way the GIL stays:
    // letting it go mid-collection would let every other thread in.
    if (t_in_request || !python_alive() || !holds_gil()) return;
    C().entries_with_gil.fetch_add(1, std::memory_order_relaxed);
    g_gil_holders.fetch_add(1, std::memory_order_seq_cst);
    counted_ = true;
    if (g_requests.load(std::memory_order_seq_cst) > 0) release();
  }
  ~entry_guard() {
    if (counted_) g_gil_holders.fetch_sub(1, std::memory_order_seq_cst);
    if (saved_) PyEval_RestoreThread(saved_);
    if (in_gc_) g_py_gc_in_entry.fetch_sub(1);
    if (runner_) g_runner_in_entry.fetch_sub(1);
  }
  entry_guard(const entry_guard&) = delete;
  entry_guard& operator=(const entry_guard&) = delete;

 private:
  void release() {
    saved_ = PyEval_SaveThread();
    g_gil_holders.fetch_sub(1, std::memory_order_seq_cst);
    counted_ = false;
    C().gil_released.fetch_add(1, std::memory_order_relaxed);
  }
  PyThreadState* saved_ = nullptr;
  bool counted_ = false, runner_ = false, in_gc_ = false;
};

// --- devices ------------------------------------------------------------------------

void ensure_configured_locked(globals& g) {
  if (g.configured) return;
  g.s.cfg = config_from_env(g.s.cfg);
  if (g.s.cfg.backend == backend_choice::automatic) g.s.cfg.backend = backend_choice::cuda_async;
  if (const char* v = std::getenv("GCPRESSURE_TORCH_OOM")) g.s.oom_null = std::strcmp(v, "null") == 0;
  g.configured = true;
}

py_collector& collector_locked(globals& g) {
  if (!g.collector) {
    g.collector = new py_collector();  // leaked: Note [Finalization]
    g.collector->configure(g.s);
  }
  return *g.collector;
}

device_slot& slot(int device) {
  if (device < 0 || device >= k_max_devices) GCPRESSURE_FAIL("gcpressure_torch: device index out of range");
  globals& g = G();
  if (device_slot* s = g.devices[static_cast<std::size_t>(device)].load(std::memory_order_acquire)) return *s;
  std::lock_guard<std::mutex> lk(g.mu);
  if (device_slot* s = g.devices[static_cast<std::size_t>(device)].load(std::memory_order_acquire)) return *s;
  ensure_configured_locked(g);
  config c = g.s.cfg;
  c.device = device;
  auto s = std::make_unique<device_slot>();
  s->alloc = std::make_unique<device_allocator>(allocator_options::from_config(c));
  s->policy = make_policy(c.policy, *s->alloc, collector_locked(g), policy_options::from_config(c));
  s->gate = std::make_unique<gcp_torch::hook_gate>(*s->policy);
  s->alloc->set_hook(s->gate.get());
  s->graphs = std::make_unique<graph_memory>(*s->alloc, device, c.backend == backend_choice::host);
  s->capture_check = g.s.capture_check;
  device_slot* p = s.release();  // leaked: Note [Finalization]
  g.devices[static_cast<std::size_t>(device)].store(p, std::memory_order_release);
  return *p;
}

device_slot* existing(int device) {
  if (device < 0 || device >= k_max_devices) return nullptr;
  return G().devices[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

bool oom_null() {
  globals& g = G();
  std::lock_guard<std::mutex> lk(g.mu);
  ensure_configured_locked(g);
  return g.s.oom_null;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += ch;
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += ch;
    }
  }
  return o;
}

std::string stats_json() {
  globals& g = G();
  counters& c = C();
  std::ostringstream os;
  settings s;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    ensure_configured_locked(g);
    s = g.s;
  }
  auto u = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  os << "{\"library\":\"gcpressure_torch\",\"version\":\"0.1.0\",\"settings\":{\"backend\":\""
     << to_string(s.cfg.backend) << "\",\"policy\":\"" << json_escape(s.cfg.policy)
     << "\",\"soft_limit\":\"" << json_escape(s.cfg.soft_limit.to_string()) << "\",\"hard_limit\":\""
     << json_escape(s.cfg.hard_limit.to_string()) << "\",\"gc_budget\":" << s.cfg.gc_budget
     << ",\"gil_wait\":" << s.gil_wait << ",\"minor_generation\":" << s.minor_generation
     << ",\"gen1_every\":" << s.gen1_every << ",\"handoff\":\"" << (s.pending_handoff ? "pending" : "helper")
     << "\",\"oom\":\"" << (s.oom_null ? "null" : "throw") << "\",\"capture_check\":"
     << (s.capture_check ? "true" : "false") << "},";
  os << "\"entries\":{\"alloc_calls\":" << u(c.alloc_calls) << ",\"free_calls\":" << u(c.free_calls)
     << ",\"zero_size\":" << u(c.zero_size) << ",\"ooms\":" << u(c.ooms) << ",\"oom_retries\":" << u(c.oom_retries) << ",\"errors\":" << u(c.errors)
     << ",\"entries_with_gil\":" << u(c.entries_with_gil) << ",\"gil_released\":" << u(c.gil_released) << "},";
  os << "\"python\":{\"requested_minor\":" << u(c.requested_minor) << ",\"requested_full\":" << u(c.requested_full)
     << ",\"requested_gen\":[" << u(c.requested_gen[0]) << "," << u(c.requested_gen[1]) << ","
     << u(c.requested_gen[2]) << "],\"direct\":" << u(c.direct) << ",\"handed_off\":" << u(c.handed_off)
     << ",\"pending_calls\":" << u(c.pending_calls) << ",\"helper_batches\":" << u(c.helper_batches)
     << ",\"skipped_nested\":" << u(c.skipped_nested) << ",\"skipped_no_python\":" << u(c.skipped_no_python)
     << ",\"skipped_busy\":" << u(c.skipped_busy) << ",\"waits_other_collection\":" << u(c.waits_other_collection)
     << ",\"abandoned_gil_holder\":" << u(c.abandoned_gil_holder)
     << ",\"abandoned_helper_busy\":" << u(c.abandoned_helper_busy)
     << ",\"abandoned_timeout\":" << u(c.abandoned_timeout) << ",\"abandoned_no_python\":" << u(c.abandoned_no_python)
     << ",\"abandoned_main_thread\":" << u(c.abandoned_main_thread) << ",\"python_collections\":["
     << u(c.python_collections[0]) << "," << u(c.python_collections[1]) << "," << u(c.python_collections[2])
     << "],\"python_gc_seconds\":" << static_cast<double>(u(c.python_ns)) * 1e-9
     << ",\"requested_seconds\":" << static_cast<double>(u(c.requested_ns)) * 1e-9
     << ",\"unreachable\":" << u(c.unreachable) << ",\"callback_errors\":" << u(c.callback_errors)
     << ",\"hook_installed\":" << (g_hook_installed ? "true" : "false") << "},";
  os << "\"profile\":" << gcp_torch::P().json() << ",\"graphs\":[";
  for (int d = 0, n = 0; d < k_max_devices; ++d) {
    device_slot* sl = existing(d);
    if (!sl) continue;
    os << (n++ ? "," : "") << sl->graphs->stats_json().insert(1, "\"hook_skipped\":" + std::to_string(sl->gate->skipped()) + ",");
  }
  os << "],";
  os << "\"devices\":[";
  bool first = true;
  for (int d = 0; d < k_max_devices; ++d) {
    device_slot* sl = existing(d);
    if (!sl) continue;
    os << (first ? "" : ",") << sl->alloc->stats_json();
    first = false;
  }
  os << "]}";
  return os.str();
}

template <class F>
int guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    C().errors.fetch_add(1);
    return fail(e.what());
  } catch (...) {
    C().errors.fetch_add(1);
    return fail("gcpressure_torch: unknown exception");
  }
}

}  // namespace

// --- the exported C functions ---------------------------------------------------------

namespace {
void* alloc_impl(size_t size, int device, void* stream, bool nothrow) {
  prof_scope timed(prof_site::alloc);
  C().alloc_calls.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) {
    C().zero_size.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  std::string err;
  try {
    device_slot& s = slot(device);
    if (s.capture_check) {  // Note [Graph capture]: no hook, no GIL, no event
      std::uint64_t capture;
      {
        prof_scope t(prof_site::capture_check);
        capture = s.graphs->capture_id(stream);
      }
      if (capture) return s.graphs->allocate(size, stream, capture);
    }
    std::optional<entry_guard> guard;
    {
      prof_scope t(prof_site::entry_guard);
      guard.emplace();
    }
    // Note [Retrying an OOM under contention]: while one thread runs the
    // reclaim ladder, others keep allocating (the policy lets them past a
    // running collection); they can take what the ladder freed before its
    // retry. If other threads entered during a failed call, try again (at
    // most twice); a thread allocating alone gets the failure at once.
    for (int attempt = 0;; ++attempt) {
      const std::uint64_t before = g_alloc_entries.fetch_add(1, std::memory_order_relaxed) + 1;
      try {
        prof_scope t(prof_site::allocate_core);
        return s.alloc->allocate(size, stream);
      } catch (const out_of_memory&) {
        if (attempt >= 2 || g_alloc_entries.load(std::memory_order_relaxed) == before) throw;
        C().oom_retries.fetch_add(1, std::memory_order_relaxed);
      }
    }
  } catch (const out_of_memory& e) {
    C().ooms.fetch_add(1, std::memory_order_relaxed);
    err = std::string("CUDA out of memory (gcpressure): ") + e.what();
  } catch (const std::exception& e) {
    C().errors.fetch_add(1, std::memory_order_relaxed);
    err = std::string("gcpressure_torch: allocation failed: ") + e.what();
  }
  t_error = err;
  if (nothrow || oom_null()) return nullptr;
  throw std::runtime_error(err);
}
}  // namespace

// The allocation function CUDAPluggableAllocator calls. Any thread, with or
// without the GIL. Zero bytes: NULL (PyTorch never frees a NULL data pointer).
// Note [Out of memory] for failures.
GCP_EXPORT void* gcp_torch_alloc(size_t size, int device, void* stream) {
  return alloc_impl(size, device, stream, false);
}

// The same, returning NULL on failure whatever the oom option says: for
// callers that cannot take a C++ exception (ctypes).
GCP_EXPORT void* gcp_torch_alloc_nothrow(size_t size, int device, void* stream) {
  return alloc_impl(size, device, stream, true);
}

// The free function CUDAPluggableAllocator calls: the block goes back to the
// pool at once, ordered on `stream` (the allocation's stream). Never takes
// the collection lock, never touches Python; safe from finalizers, during
// interpreter shutdown and at process exit. Misuse is reported on stderr.
GCP_EXPORT void gcp_torch_free(void* ptr, size_t size, int device, void* stream) {
  prof_scope timed(prof_site::free);
  C().free_calls.fetch_add(1, std::memory_order_relaxed);
  if (!ptr) return;
  device_slot* s = existing(device);
  if (!s) {
    std::fprintf(stderr, "gcpressure_torch: free of %p on device %d, which never allocated\n", ptr, device);
    return;
  }
  if (s->graphs->deallocate(ptr, size, stream)) return;  // a graph pool's block (Note [Graph capture])
  s->alloc->deallocate(ptr, size, stream);
}

// Chooses the backend ("auto", "host", "cuda", "cuda_async"; NULL: cuda_async
// or $GCPRESSURE_BACKEND), limits ("4GiB", "80%", bytes; NULL: 75% of the
// hard limit / the device), policy (NULL: "pressure") and GC time budget
// (0: 0.05). GCPRESSURE_* variables are read first; arguments override them.
// Only before the first allocation. Returns 0, or -1 (gcp_torch_last_error).
GCP_EXPORT int gcp_torch_init(const char* backend, const char* soft_limit, const char* hard_limit,
                              const char* policy, double gc_budget) {
  return guarded([&] {
    globals& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    for (int d = 0; d < k_max_devices; ++d)
      if (existing(d)) return fail("gcp_torch_init: too late, the allocator has already allocated");
    ensure_configured_locked(g);
    settings s = g.s;
    if (backend) s.cfg.backend = parse_backend(backend, "gcp_torch_init backend");  // throws, naming it
    if (s.cfg.backend == backend_choice::automatic)
      s.cfg.backend = cuda_available() ? backend_choice::cuda_async : backend_choice::host;
    if (soft_limit) s.cfg.soft_limit = parse_size(soft_limit, "soft_limit");
    if (hard_limit) s.cfg.hard_limit = parse_size(hard_limit, "hard_limit");
    if (policy) {
      bool known = false;
      for (const char* const* n = policy_names(); *n; ++n) known = known || std::strcmp(policy, *n) == 0;
      if (!known) return fail(std::string("gcp_torch_init: unknown policy '") + policy + "'");
      s.cfg.policy = policy;
    }
    if (gc_budget < 0 || gc_budget > 1) return fail("gcp_torch_init: gc_budget must be in [0, 1]");
    if (gc_budget > 0) s.cfg.gc_budget = gc_budget;
    if ((s.cfg.backend == backend_choice::cuda || s.cfg.backend == backend_choice::cuda_async) && !cuda_available())
      return fail("gcp_torch_init: a CUDA backend was asked for, but no CUDA device is usable");
    g.s = s;
    if (g.collector) g.collector->configure(g.s);
    return 0;
  });
}

// Options outside gcp_torch_init (before the first allocation, except "oom"):
//   host_capacity  simulated device size of the host backend ("1GiB")
//   gil_wait       seconds a handed-off collection is waited for (default 1)
//   minor_generation  "auto" (default: 0, and 1 every gen1_every-th), "0", "1"
//   gen1_every     see above (default 4)
//   handoff        "helper" (default) or "pending" (Py_AddPendingCall)
//   oom            "throw" (default) or "null"  (Note [Out of memory])
//   every_n        the every_iteration policy's N
//   verbose        "1": one stderr line per collection
//   capture_check  "on" (default): every allocation asks whether its stream
//                  is capturing a CUDA graph (Note [Graph capture]); "off"
//                  saves that call where no graph is ever captured
GCP_EXPORT int gcp_torch_set_option(const char* key, const char* value) {
  if (!key || !value) return fail("gcp_torch_set_option: null key or value");
  return guarded([&] {
    globals& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    ensure_configured_locked(g);
    const std::string k = key, v = value;
    bool allocated = false;
    for (int d = 0; d < k_max_devices; ++d) allocated = allocated || existing(d);
    if (k == "oom") {
      if (v != "throw" && v != "null") return fail("gcp_torch_set_option: oom must be throw or null");
      g.s.oom_null = v == "null";
      return 0;
    }
    if (allocated) return fail("gcp_torch_set_option: '" + k + "' only before the first allocation");
    if (k == "host_capacity") {
      g.s.cfg.host_capacity = parse_size(v, "host_capacity").bytes;
      if (!g.s.cfg.host_capacity) return fail("gcp_torch_set_option: host_capacity must be a size in bytes");
    } else if (k == "gil_wait") {
      g.s.gil_wait = std::stod(v);
      if (!(g.s.gil_wait >= 0 && g.s.gil_wait <= 600)) return fail("gcp_torch_set_option: gil_wait in [0, 600] s");
    } else if (k == "holder_grace") {
      g.s.holder_grace = std::stod(v);
    } else if (k == "minor_generation") {
      if (v == "auto") g.s.minor_generation = -1;
      else if (v == "0" || v == "1") g.s.minor_generation = v[0] - '0';
      else return fail("gcp_torch_set_option: minor_generation must be auto, 0 or 1");
    } else if (k == "gen1_every") {
      g.s.gen1_every = std::stoi(v);
      if (g.s.gen1_every < 1) return fail("gcp_torch_set_option: gen1_every must be >= 1");
    } else if (k == "handoff") {
      if (v != "helper" && v != "pending") return fail("gcp_torch_set_option: handoff must be helper or pending");
      g.s.pending_handoff = v == "pending";
    } else if (k == "every_n") {
      g.s.cfg.every_n = std::stoi(v);
      if (g.s.cfg.every_n < 1) return fail("gcp_torch_set_option: every_n must be >= 1");
    } else if (k == "capture_check") {
      if (v != "on" && v != "off") return fail("gcp_torch_set_option: capture_check must be on or off");
      g.s.capture_check = v == "on";
    } else if (k == "verbose") {
      g.s.cfg.verbose = v == "1" || v == "true";
    } else {
      return fail("gcp_torch_set_option: unknown option '" + k + "'");
    }
    if (g.collector) g.collector->configure(g.s);
    return 0;
  });
}

// Call with the GIL held (ctypes.PyDLL), from the main thread if
// is_main_thread: imports gc.collect, adds the gc.callbacks entry that counts
// CPython's collections, starts the helper thread. Optional — without it the
// first collection does the same lazily — but it makes stats complete from
// the start. Returns 0 or -1.
GCP_EXPORT int gcp_torch_attach_python(int is_main_thread) {
  resolve_symbols();
  if (!g_gil_check.load()) return fail("gcp_torch_attach_python: PyGILState_Check not found in this process");
  if (!python_alive() || !holds_gil()) return fail("gcp_torch_attach_python: call it with the GIL held (ctypes.PyDLL)");
  if (is_main_thread) g_main_thread.store(self_id());
  if (!ensure_gc_objects()) return fail("gcp_torch_attach_python: cannot import gc.collect");
  {
    std::lock_guard<std::mutex> lk(G().mu);
    ensure_configured_locked(G());
    collector_locked(G());
  }
  {
    std::lock_guard<std::mutex> lk(H().mu);
    start_helper_locked(H());
  }
  g_attached.store(true);
  return 0;
}

// atexit: no Python code from here on (Note [Finalization]). Waiters give up.
GCP_EXPORT void gcp_torch_python_shutdown(void) {
  g_py_shutdown.store(true, std::memory_order_release);
  handoff& h = H();
  {
    std::lock_guard<std::mutex> lk(h.mu);
  }
  h.cv_req.notify_all();
  h.cv_done.notify_all();
}

// A collection asked for by the user (policy reason "user"): minor (0) or
// whole heap (1). Any thread; the GIL may be held.
GCP_EXPORT int gcp_torch_collect(int device, int full) {
  return guarded([&] {
    device_slot& s = slot(device);
    entry_guard guard;
    s.policy->collect(full ? gc_kind::blocking_full : gc_kind::minor);
    return 0;
  });
}

// Hints: an iteration boundary / a quiet moment (few temporaries alive).
GCP_EXPORT int gcp_torch_iteration(int device) {
  return guarded([&] {
    device_slot& s = slot(device);
    entry_guard guard;
    s.policy->iteration();
    return 0;
  });
}

GCP_EXPORT int gcp_torch_quiet_moment(int device) {
  return guarded([&] {
    device_slot& s = slot(device);
    entry_guard guard;
    s.policy->quiet_moment();
    return 0;
  });
}

// The host is about to wait for all work queued on `stream` (issue 11):
// runs the collection work that is due while that work still runs, then
// blocks until it has completed (gc_policy::synchronize, Note [Collect in the
// device's time] in core/src/policy.cpp). The GIL may be held or not (the
// Python side calls it through ctypes.CDLL: released). During a capture
// (this stream's, or any announced one) it does nothing: synchronising there
// is illegal, and the caller's own synchronize reports it as PyTorch does.
GCP_EXPORT int gcp_torch_synchronize(int device, void* stream) {
  return guarded([&] {
    device_slot& s = slot(device);
    if (graph_memory::active_captures().load() > 0 || s.graphs->capture_id(stream)) return 0;
    entry_guard guard;
    s.policy->synchronize(stream);
    return 0;
  });
}

// CUDA graphs (Note [Graph capture]; gcpressure_torch.py calls these from
// its wrappers of CUDAGraph.capture_begin / capture_end and a weakref
// finalizer on the graph). capture_begin: `stream` has just begun capturing
// into PyTorch's pool {pool_hi, pool_lo} ({0, 0}: a pool of its own; the key
// used is written to *out_hi/*out_lo). Returns 0, or -1 if the stream is not
// capturing. capture_end: before PyTorch ends the capture. graph_release: a
// graph that captured into the pool was destroyed.
GCP_EXPORT int gcp_torch_capture_begin(int device, void* stream, unsigned long long pool_hi,
                                       unsigned long long pool_lo, unsigned long long* out_hi,
                                       unsigned long long* out_lo) {
  return guarded([&] {
    gcp_torch::pool_key key{pool_hi, pool_lo};
    if (!slot(device).graphs->begin(stream, key)) return fail("gcp_torch_capture_begin: the stream is not capturing");
    if (out_hi) *out_hi = key.first;
    if (out_lo) *out_lo = key.second;
    return 0;
  });
}

GCP_EXPORT int gcp_torch_capture_end(int device, void* stream) {
  return guarded([&] {
    slot(device).graphs->end(stream);
    return 0;
  });
}

GCP_EXPORT int gcp_torch_graph_release(int device, unsigned long long pool_hi, unsigned long long pool_lo) {
  return guarded([&] {
    if (device_slot* s = existing(device)) s->graphs->release({pool_hi, pool_lo});
    return 0;
  });
}

// Test support (CPU ctests, host backend): allocations on `stream` behave as
// if it captured, with capture id `id` (0: no longer).
GCP_EXPORT int gcp_torch_test_capture(int device, void* stream, unsigned long long id) {
  return guarded([&] {
    slot(device).graphs->set_test_capture(stream, id);
    return 0;
  });
}

// Test support: a new host_stream (the host backend's streams: an in-order
// worker thread each) as a stream handle; never destroyed. NULL on failure.
GCP_EXPORT void* gcp_torch_test_host_stream(void) {
  try {
    return (new host_stream())->ref();
  } catch (const std::exception& e) {
    fail(e.what());
    return nullptr;
  }
}

// Returns idle cached memory to the driver (torch.cuda.empty_cache's job).
GCP_EXPORT int gcp_torch_trim(int device) {
  return guarded([&] {
    device_slot* s = existing(device);
    if (!s) return 0;
    entry_guard guard;
    s->alloc->drain();
    s->alloc->trim();
    s->graphs->release_retired();
    return 0;
  });
}

// Limits in bytes (0 leaves one unchanged). Any time.
GCP_EXPORT int gcp_torch_set_limits(int device, size_t soft, size_t hard) {
  return guarded([&] {
    device_allocator& a = *slot(device).alloc;
    const size_t h = hard ? hard : a.hard_limit();
    size_t s = soft ? soft : a.soft_limit();
    if (soft && s > h) return fail("gcp_torch_set_limits: soft limit above hard limit");
    a.set_hard_limit(h);
    a.set_soft_limit(std::min(s, h));
    return 0;
  });
}

GCP_EXPORT int gcp_torch_usage(int device, size_t* live, size_t* reserved) {
  device_slot* s = existing(device);
  if (live) *live = s ? s->alloc->live_bytes() : 0;
  if (reserved) *reserved = s ? s->alloc->reserved_bytes() : 0;
  return 0;
}

GCP_EXPORT int gcp_torch_reset_peaks(int device) {
  if (device_slot* s = existing(device)) s->alloc->reset_peaks();
  return 0;
}

// Stats as one JSON object. Writes it (NUL-terminated) if cap is enough;
// returns the size needed including the NUL. Any thread, GIL or not.
GCP_EXPORT size_t gcp_torch_stats_json(char* buf, size_t cap) {
  std::string j;
  try {
    j = stats_json();
  } catch (const std::exception& e) {
    j = std::string("{\"error\":\"") + json_escape(e.what()) + "\"}";
  }
  if (buf && cap >= j.size() + 1) std::memcpy(buf, j.c_str(), j.size() + 1);
  else if (buf && cap) buf[0] = '\0';
  return j.size() + 1;
}

GCP_EXPORT const char* gcp_torch_last_error(void) { return t_error.c_str(); }

// Test support (CPU ctests): `threads` native threads that Python has never
// seen — like autograd's device threads — each allocate `iters` blocks of
// `bytes`, keeping the last `keep`, writing a tag into each and checking it
// before the free. Call through ctypes.CDLL (GIL released). Returns the number
// of failed allocations (NULL with oom=null) plus corrupted blocks, or -1.
GCP_EXPORT long gcp_torch_selftest_native(int threads, int iters, size_t bytes, int keep, int device) {
  if (threads < 1 || iters < 1 || bytes < 8 || keep < 1) return fail("gcp_torch_selftest_native: bad arguments");
  bool host;
  {
    std::lock_guard<std::mutex> lk(G().mu);
    ensure_configured_locked(G());
    host = G().s.cfg.backend == backend_choice::host;
  }
  std::atomic<long> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<void*> held;
      for (int i = 0; i < iters; ++i) {
        void* p = nullptr;
        try {
          p = gcp_torch_alloc(bytes, device, nullptr);
        } catch (const std::exception&) {
          p = nullptr;
        }
        if (!p) {
          bad.fetch_add(1);
          continue;
        }
        if (host) {
          const unsigned long tag = (static_cast<unsigned long>(t) << 32) | static_cast<unsigned long>(i);
          std::memcpy(p, &tag, sizeof tag);
          std::memcpy(static_cast<char*>(p) + bytes - sizeof tag, &tag, sizeof tag);
        }
        held.push_back(p);
        if (static_cast<int>(held.size()) > keep) {
          void* q = held.front();
          held.erase(held.begin());
          if (host) {
            unsigned long a, b;
            std::memcpy(&a, q, sizeof a);
            std::memcpy(&b, static_cast<char*>(q) + bytes - sizeof b, sizeof b);
            if (a != b) bad.fetch_add(1);
          }
          gcp_torch_free(q, bytes, device, nullptr);
        }
      }
      for (void* q : held) gcp_torch_free(q, bytes, device, nullptr);
    });
  }
  for (auto& th : ts) th.join();
  return bad.load();
}
