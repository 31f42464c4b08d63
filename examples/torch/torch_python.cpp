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
//     (a) the thread it needs is waiting for M: a thread that holds the GIL
//     and could not let it go (rule 2(b)), or, with the pending-call
//     hand-off, the main thread, for holder_grace (1 ms); (c) Python is
//     shutting down, or (d) gil_wait seconds passed. Core says who waits for
//     M (Note [Waiting for a collection], collector.hpp). Until session 6,
//     (a) fired when a GIL holder merely sat in an entry point for 1 ms,
//     which a descheduled holder on a loaded machine also does: requests
//     were given up that would have been served (3 OOMs in 3 200 in a
//     stress round). (There was a (b): the thread serving the
//     request inside an entry point, for a finalizer of its collection that
//     allocates and might wait for M. It cannot since rule 5: it was also
//     what made finalizers that allocate fail allocations, by abandoning
//     collections that were making progress.)
//  2. A thread that holds the GIL and enters one of our entry points (alloc,
//     collect, hints, trim) while any collection request is in flight lets
//     the GIL go (PyEval_SaveThread) for the duration of the call, so that
//     the collecting thread (or the helper) can take it. A thread that
//     entered before the request keeps the GIL while it does not wait for M
//     (it leaves, and the helper takes the GIL at the interpreter's next
//     switch); if it comes to wait for M, (b):
//     (b) A thread in an entry point that still holds the GIL and is about
//     to wait for M (core announces it) lets the GIL go first, until the
//     entry point returns: it never holds the GIL while it waits for M.
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
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>

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
thread_local double t_py_gc_cpu0 = 0;  // Note [Collections priced in CPU time]

// Note [Collections priced in CPU time]
// The choice of a minor's generation (Note [Choosing the minor's
// generation]) and the re-freeze rule compare what collections cost: a few
// microseconds apart over a frozen heap (whole-heap ~4-10 us, young ~2-5
// us). In wall time, a thread descheduled inside a collection on a loaded
// machine made two samples in a row look 8x dearer, auto left whole-heap
// minors, and the promoted owners' arrays stayed: beside one CPU hog on the
// 2-core CI machine, test_cupy_cpu's auto_minors_are_whole_over_a_frozen_heap
// failed 8 of 20 runs (peak 7-15x) and pressure_policy_holds_slow_cycles_at_2x
// 4 of 20 (young minors among the whole-heap ones: 4-8x). A collection is
// CPU work on the collecting thread; its thread's CPU time is what it costs,
// whatever else the machine runs. The counters (python_ns) and the policy's
// own budget stay in wall time: they account for the user's time.
double thread_cpu_seconds() noexcept {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::atomic<int> g_requests{0};      // collection requests in flight (rule 2)
std::atomic<std::uint64_t> g_main_thread{0};
// Rule 1(a)'s facts, from Note [Waiting for a collection]: threads waiting
// for M while holding the GIL (outside an entry point's guard), and whether
// the main thread waits for M.
std::atomic<int> g_gil_waiters{0};
std::atomic<int> g_main_waiting{0};
thread_local entry_guard* t_guard = nullptr;  // this thread's innermost entry guard

std::uint64_t self_id() noexcept { return static_cast<std::uint64_t>(pthread_self()); }
// --- the CPython side (GIL held) -------------------------------------------------

// Note [Choosing the minor's generation]: what CPython's collections cost,
// seconds, smoothed (0 until one was seen): gc.collect(0/1) and whole-heap
// ones, ours and CPython's own alike; and when the last whole-heap one ended
// (seconds on clock_type's epoch). Written by on_gc (GIL held), read by the
// policy's thread (which may not hold it): relaxed atomics.
std::atomic<double> g_cost_young{0}, g_cost_whole{0}, g_last_whole_at{0};

double clock_seconds() noexcept {
  return std::chrono::duration<double>(clock_type::now().time_since_epoch()).count();
}

// A sample over 8x the estimate counts as 8x unless the one before it was
// over too: a thread descheduled mid-collection on a loaded machine (one
// sample) must not flip the choice, a heap that grew (every sample) does.
bool g_cost_over[2] = {false, false};  // (GIL)
// Note [A cold first sample]: samples since the estimate (re)started (GIL).
int g_cost_samples[2] = {0, 0};

// Note [Choosing the minor's generation]: whole-heap minors while the whole
// heap costs at most k_whole_ratio x a young collection + k_whole_slack, and
// until it costs k_leave_ratio x + k_leave_slack; probing at most
// k_probe_share of the wall. Note [Freezing again after the heap grew] uses
// the leaving threshold too.
constexpr double k_whole_ratio = 2.0, k_whole_slack = 20e-6;
constexpr double k_leave_ratio = 4.0, k_leave_slack = 50e-6;
constexpr double k_probe_share = 0.01;
double leave_threshold() noexcept {
  return k_leave_ratio * g_cost_young.load(std::memory_order_relaxed) + k_leave_slack;
}
thread_local bool t_requesting = false;  // inside collect_with_gil: a CPython collection now is ours

void learn_collection_cost(long gen, double seconds) noexcept {
  const int k = gen >= 2 ? 1 : 0;
  std::atomic<double>& c = k ? g_cost_whole : g_cost_young;
  const double old = c.load(std::memory_order_relaxed);
  // Note [A cold first sample]
  // The first collection after a freeze runs on cold caches: in CPU time
  // 6-32 us over the fake CuPy's frozen heap beside a CPU hog, where the
  // next ones cost 4-11. Taken as the estimate, it sat on either side of
  // k_whole_slack (20 us, the young cost still unknown) and a quarter of
  // the processes began with young minors, each promoting an owner (4x the
  // live array in pressure_policy_holds_slow_cycles_at_2x). So the second
  // sample may lower the first: the estimate starts at the cheaper of the
  // two (configure() times two whole-heap collections after the freeze).
  if (g_cost_samples[k]++ == 1 && old > 0) {
    c.store(std::min(old, seconds), std::memory_order_relaxed);
    if (k) g_last_whole_at.store(clock_seconds(), std::memory_order_relaxed);
    return;
  }
  double x = seconds;
  if (old > 0 && seconds > 8 * old) {
    if (!g_cost_over[k]) x = 8 * old;
    g_cost_over[k] = true;
  } else {
    g_cost_over[k] = false;
  }
  c.store(old > 0 ? 0.75 * old + 0.25 * x : x, std::memory_order_relaxed);
  if (k) g_last_whole_at.store(clock_seconds(), std::memory_order_relaxed);
}

void forget_whole_cost() noexcept {
  g_cost_whole.store(0, std::memory_order_relaxed);
  g_cost_over[1] = false;
  g_cost_samples[1] = 0;
}

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
    if (t_py_gc_depth++ == 0) {
      t_py_gc_t0 = clock_type::now();
      t_py_gc_cpu0 = thread_cpu_seconds();
    }
    ++t_py_gc_starts;
    enter_collection();  // rule 5
  } else if (t_py_gc_depth > 0) {  // a stop without its start (entry added mid-collection) leaves nothing
    leave_collection();
    long gen = 2;
    if (PyObject* g = PyDict_GetItemString(info, "generation")) gen = PyLong_AsLong(g);
    if (PyErr_Occurred()) PyErr_Clear();
    if (--t_py_gc_depth == 0) {
      const double dt = seconds_since(t_py_gc_t0);
      add_ns(C().python_ns, dt);
      const double cpu = thread_cpu_seconds() - t_py_gc_cpu0;  // Note [Collections priced in CPU time]
      if (gen >= 0 && gen < 3) learn_collection_cost(gen, cpu);
      if (gen == 2) {  // Note [Freezing again after the heap grew]
        long found = 0;
        if (PyObject* n = PyDict_GetItemString(info, "collected")) found = PyLong_AsLong(n);
        if (PyErr_Occurred()) PyErr_Clear();
        note_whole_collection(cpu, leave_threshold(), found, t_requesting);
      }
    }
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
  struct requesting {  // on_gc: the collections until we return are ours
    bool saved = std::exchange(t_requesting, true);
    ~requesting() { t_requesting = saved; }
  } mark;
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
    if (!g_hook_installed || t_py_gc_starts != before || n > 0) {
      if (gen == 2) maybe_refreeze();  // Note [Freezing again after the heap grew]
      return true;
    }
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

// --- the collector the policy drives ----------------------------------------------

class py_collector final : public collector {
 public:
  const char* name() const noexcept override { return "cpython"; }

  void collect_minor() override {
    C().requested_minor.fetch_add(1);
    // Note [Choosing the minor's generation]; Note [Freezing again after the heap grew]
    request(mode_ < 0 && (whole_next() || refreeze_due()) ? 2 : minor_generation());
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
  // Note [A minor promotes the owner it runs beside]: with minor_generation
  // 2 every minor examines the whole heap, so nothing it leaves is suspected
  // garbage (the policy's floor is what it leaves).
  // In auto mode a minor is whole-heap when the last one was and the next
  // one will be (Note [Choosing the minor's generation]): the policy asks
  // before a minor (a blocking full one then) and after it (its floor), and
  // the answer must hold for both; at a change of mode it says no, and
  // collect_minor() runs what whole_next() chose.
  bool minor_is_whole_heap() const noexcept override {
    return mode_ == 2 || (mode_ < 0 && last_whole_.load(std::memory_order_relaxed) && whole_next());
  }
  // CPython runs __del__ and weakref callbacks inside the collection, and
  // PyTorch's deleter frees the block at once (gcp_torch_free).
  std::size_t run_finalizers() override { return 0; }

  // Rules 2(b) and 1(a) (Note [GIL and the collection lock]).
  void waiting_for_collection(bool begins) noexcept override {
    thread_local bool t_gil_waiter = false, t_main_waiter = false;
    if (begins) {
      if (t_guard && t_guard->counted_ && python_alive() && holds_gil()) {
        t_guard->release();  // rule 2(b): restored when the entry point returns
        C().gil_released_for_wait.fetch_add(1, std::memory_order_relaxed);
      } else if (python_alive() && holds_gil()) {
        t_gil_waiter = true;
        g_gil_waiters.fetch_add(1, std::memory_order_seq_cst);
      }
      if (g_main_thread.load() == self_id()) {
        t_main_waiter = true;
        g_main_waiting.fetch_add(1, std::memory_order_seq_cst);
      }
      return;
    }
    if (t_gil_waiter) g_gil_waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (t_main_waiter) g_main_waiting.fetch_sub(1, std::memory_order_seq_cst);
    t_gil_waiter = t_main_waiter = false;
  }
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
    configure_handoff(s.gil_wait, s.pending_handoff);
    configure_refreeze(s.minor_generation < 0 ? s.refreeze : 0);
  }

 private:
  // Note [A minor promotes the owner it runs beside]
  // The policy collects at an allocation, and the object that will own the
  // new block (a node of the user's graph, made just before) is alive then:
  // CPython promotes it, gen 0 -> 1 (-> 2 at a gc.collect(1)). When it dies
  // (at the next iteration) only a collection of its new generation finds
  // it. A loop that makes one owner in a cycle per iteration and is collected
  // at every allocation therefore frees nothing at its gen-0 minors: measured
  // on the host backend (fake CuPy, 4 GiB, 64 MiB per iteration, 2026-12-02)
  // a minor per allocation held 39x the live set, one every ~10 allocations
  // 40x; 512 MiB: 5x whatever the cadence. Whole-heap minors (mode 2) find
  // every dead owner one allocation later (1x at 512 MiB), at the price of a
  // gc.collect() over the whole heap, which gc.freeze() of the import-time
  // heap makes small (install(freeze=True) in gcpressure._plugin).
  // Minor: gc.collect(0), and gc.collect(1) every every_-th time. A minor
  // collection promotes what is alive then (typically the object about to
  // receive the next tensor) to generation 1, where gc.collect(0) never looks
  // again: the periodic gc.collect(1) frees it once it is garbage, and only
  // what is alive at those collections reaches generation 2 (the whole-heap
  // collection's, ~80 ms in a process that imported torch).
  // Note [Choosing the minor's generation]
  // A minor exists to be cheaper than a whole-heap collection; where it is
  // not, it is only worse: it promotes the owner it runs beside (the Note
  // above) and leaves that owner's array to a whole-heap collection. So in
  // auto mode a minor is a whole-heap gc.collect() while the whole heap
  // costs at most k_whole_ratio times a young collection plus k_whole_slack
  // (CPython's collections as on_gc timed them, ours and its own). That is
  // the case over a heap frozen at install (gcpressure._plugin freezes it by
  // default): the whole heap is then what the program made since, often a
  // few thousand objects (on the host backend, fake CuPy: gc.collect(2)
  // 1.9 us, a young one 1.2 us). Where the heap is large (a model built after
  // install, numba-cuda's compiler state: 13-21 ms on the H200 against
  // 10 us), the minors stay generational (0, and 1 every gen1_every-th), and
  // one whole-heap minor re-measures it once 1/k_probe_share of the wall
  // time since the last whole-heap collection pays for it (so probing costs
  // at most ~1%). Until a whole-heap collection was seen (configure() times
  // one right after freezing), the minors are generational.
  // Both costs include freeing what the collection found, which grows with
  // the garbage and not with the heap, and the young cost is only refreshed
  // while young collections run: so once whole-heap, the minors stay so
  // until the whole heap costs k_leave_ratio times a young collection plus
  // k_leave_slack (hysteresis: with one threshold, c2_4 on the host
  // alternated, 313 young minors among 553, each young one promoting an
  // owner).
  bool whole_next() const noexcept {
    const double w = g_cost_whole.load(std::memory_order_relaxed);
    if (w <= 0) return false;
    const double y = g_cost_young.load(std::memory_order_relaxed);
    const bool stay = last_whole_.load(std::memory_order_relaxed);
    if (w <= (stay ? k_leave_ratio * y + k_leave_slack : k_whole_ratio * y + k_whole_slack)) return true;
    return clock_seconds() - g_last_whole_at.load(std::memory_order_relaxed) >= w / k_probe_share;
  }

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
      hand_off(gen, gil_wait_, grace_, pending_);
    }
    g_requests.fetch_sub(1, std::memory_order_seq_cst);
    add_ns(C().requested_ns, seconds_since(t0));
    last_whole_.store(gen == 2, std::memory_order_relaxed);
  }

  int mode_ = -1;
  int every_ = 4;
  double gil_wait_ = 1.0;
  double grace_ = 0.001;
  bool pending_ = false;
  std::atomic<std::uint64_t> minors_{0};
  std::atomic<bool> last_whole_{false};  // the last collection asked for was whole-heap
};

// --- entry points' GIL discipline (rule 2) ------------------------------------------

entry_guard::entry_guard() {
  // Inside a collection (rule 5: ours, the helper's batch, or any CPython
  // collection) this thread never waits for M, so keeping the GIL blocks
  // nobody for long; letting it go mid-collection would let every other
  // thread in.
  if (in_collection() || !python_alive() || !holds_gil()) return;
  C().entries_with_gil.fetch_add(1, std::memory_order_relaxed);
  counted_ = true;
  outer_ = t_guard;
  t_guard = this;
  if (g_requests.load(std::memory_order_seq_cst) > 0) release();
}

entry_guard::~entry_guard() {
  if (t_guard == this) t_guard = outer_;
  if (saved_) PyEval_RestoreThread(static_cast<PyThreadState*>(saved_));
}

void entry_guard::release() {
  saved_ = PyEval_SaveThread();
  counted_ = false;
  C().gil_released.fetch_add(1, std::memory_order_relaxed);
}

// --- what the entry points call -----------------------------------------------------

bool gil_check_available() noexcept {
  resolve_symbols();
  return g_gil_check.load() != nullptr;
}

bool gc_hook_installed() noexcept { return g_hook_installed; }


void python_shutdown() noexcept {
  g_py_shutdown.store(true, std::memory_order_release);
  wake_handoff_waiters();
}

namespace {
py_collector& the_collector() {
  static py_collector* c = new py_collector();  // leaked: Note [Finalization]
  return *c;
}
}  // namespace

gcpressure::collector& python_collector() { return the_collector(); }

void configure_python_collector(const settings& s) { the_collector().configure(s); }

double collection_cost(bool whole) noexcept {
  return (whole ? g_cost_whole : g_cost_young).load(std::memory_order_relaxed);
}

}  // namespace gcp_torch
