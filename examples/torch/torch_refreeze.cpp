// torch_refreeze.cpp — the CPython collector's automatic re-freeze (Note
// [Freezing again after the heap grew]): after a whole-heap collection that
// was too costly for whole-heap minors and found little, its survivors go to
// CPython's permanent generation, a bounded number of times per process.
//
// Note [Freezing again after the heap grew]
// gcpressure._plugin freezes the import-time heap at install (Note [Freezing
// the heap at install]), so that a whole-heap gc.collect() costs what the
// program made since, and auto minors can be whole-heap ones (Note [Choosing
// the minor's generation], torch_python.cpp), which find every dead owner of
// a block one allocation later. A framework that builds a large long-lived
// heap after install undoes that: numba-cuda's first kernel compile left
// ~100-200k objects (H200, 2026-12-03: whole-heap collections 13-21 ms
// against a young one's 4 us), auto minors went generational, and peaks were
// 5-220x the live set where freezing once after that compile
// (bench_cycles --freeze-after-setup) gave 1-5x. The rule does that freeze
// by itself. Right after a whole-heap collection of ours returns (GIL held;
// nothing has run since but its finalizers, so what is unfrozen is what it
// found reachable), gc.freeze() runs when all of these hold:
//  (a) auto minors (minor_generation "auto") and re-freezes left: at most
//      `refreeze` (default 2; 0 with install(freeze=False)) per process;
//  (b) the collection cost more than auto's threshold for leaving whole-heap
//      minors (k_leave_ratio x a young collection + k_leave_slack): with this
//      heap the minors are generational;
//  (c) the heap is long-lived: it has at least k_min_objects unfrozen
//      objects (len(gc.get_objects())) and the collection found at most
//      1/k_garbage_share of that (a heap made of garbage is freed by the
//      collection itself, freezing would only keep it);
//  (d) the device bytes live now (every framework, every device) are at most
//      1/k_pin_share of the smallest hard limit.
// Then one gc.collect() over the frozen heap re-learns the whole-heap cost
// (the smoothed estimate would take seconds to forget 15 ms), so the next
// minor can be whole-heap. A whole-heap collection that qualifies by (b) but
// was not ours (CPython's own, the program's gc.collect()) makes the next
// requested collection a whole-heap one, where the rule is checked; (c)'s
// count is taken at most k_max_declines times in a process without a freeze
// following (each costs a walk of the heap, ~1/10 of the collection it
// follows).
// What a re-freeze can leak, and why it is bounded: frozen objects are still
// freed by reference counting, and objects they refer to are still found
// reachable; what is lost is cyclic garbage among the frozen objects that
// appears later. The host side of that is at most the survivors frozen
// (refrozen_objects), a bound that does not grow. The device side is the
// blocks owned by frozen objects that later die in a cycle: at most the
// bytes live at the freeze, so at most refreeze / k_pin_share of the hard
// limit in all (2/32 = 1/16 by default), whatever the program does after;
// refreeze_live_bytes in the stats is the exact figure. gc.unfreeze() (at
// exit, or by the program) gives all of it back to the collector.
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#include "torch_state.hpp"

namespace gcp_torch {

namespace {

constexpr Py_ssize_t k_min_objects = 20000;
constexpr long k_garbage_share = 8;
constexpr std::size_t k_pin_share = 32;
constexpr int k_max_declines = 16;

// Written with the GIL held (on_gc, the collector's request), read by the
// stats without it: atomics.
struct refreeze_state {
  std::atomic<int> allowed{0};      // settings: refreeze (0 when not auto)
  std::atomic<int> done{0};
  std::atomic<int> declined{0};     // evaluations of (c)/(d) that did not freeze
  std::atomic<bool> due{false};     // a qualifying whole-heap collection that was not ours
  std::atomic<std::uint64_t> objects{0}, live_bytes{0};
  // The last whole-heap collection (GIL).
  bool last_costly = false;
  long last_collected = 0;
};

refreeze_state& R() {
  static refreeze_state* r = new refreeze_state();  // leaked: Note [Finalization]
  return *r;
}

// (d): the device bytes live now and the smallest hard limit.
bool few_bytes_live(std::uint64_t* live) {
  std::size_t sum = 0, hard = std::numeric_limits<std::size_t>::max();
  for (int d = 0; d < k_max_devices; ++d) {
    device_slot* s = existing(d);
    if (!s || !s->alloc) continue;
    sum += s->alloc->live_bytes();
    hard = std::min(hard, s->alloc->hard_limit());
  }
  *live = sum;
  return sum <= hard / k_pin_share;
}

// gc.<name>(*args) with the GIL; a new reference or null (error cleared).
PyObject* call_gc(const char* name, PyObject* arg = nullptr) {
  PyObject* gc = PyImport_ImportModule("gc");
  PyObject* fn = gc ? PyObject_GetAttrString(gc, name) : nullptr;
  PyObject* r = fn ? PyObject_CallFunctionObjArgs(fn, arg, nullptr) : nullptr;
  Py_XDECREF(fn);
  Py_XDECREF(gc);
  if (!r) {
    PyErr_Clear();
    C().callback_errors.fetch_add(1);
  }
  return r;
}

}  // namespace

void configure_refreeze(int allowed) noexcept { R().allowed.store(std::max(0, allowed)); }

void note_whole_collection(double seconds, double leave_threshold, long collected, bool ours) noexcept {
  refreeze_state& r = R();
  r.last_costly = seconds > leave_threshold;
  r.last_collected = collected;
  if (!ours && r.last_costly && r.done.load() < r.allowed.load() && r.declined.load() < k_max_declines)
    r.due.store(true, std::memory_order_relaxed);
}

bool refreeze_due() noexcept { return R().due.load(std::memory_order_relaxed); }

bool maybe_refreeze() {
  refreeze_state& r = R();
  r.due.store(false, std::memory_order_relaxed);
  if (!r.last_costly || r.done.load() >= r.allowed.load() || r.declined.load() >= k_max_declines) return false;
  r.last_costly = false;  // one evaluation per collection
  std::uint64_t live = 0;
  if (!few_bytes_live(&live)) {  // (d) needs no walk of the heap: not counted as a decline
    return false;
  }
  PyObject* objs = call_gc("get_objects");  // (c)
  const Py_ssize_t n = objs ? PyList_Size(objs) : -1;
  Py_XDECREF(objs);
  if (n < k_min_objects || r.last_collected * k_garbage_share > n) {
    r.declined.fetch_add(1);
    return false;
  }
  PyObject* ok = call_gc("freeze");
  if (!ok) return false;
  Py_DECREF(ok);
  r.done.fetch_add(1);
  r.objects.fetch_add(static_cast<std::uint64_t>(n));
  r.live_bytes.fetch_add(live);
  forget_whole_cost();
  PyObject* two = PyLong_FromLong(2);
  Py_XDECREF(call_gc("collect", two));  // timed by on_gc: the whole heap's cost now
  Py_XDECREF(two);
  return true;
}

refreeze_counts refreeze_stats() noexcept {
  refreeze_state& r = R();
  return {r.allowed.load(), r.done.load(), r.declined.load(), r.objects.load(), r.live_bytes.load()};
}

}  // namespace gcp_torch
