// torch_shim.hpp — what the parts of libgcpressure_torch.so share (internal):
// the settings, the entry-point counters, the thread's last error, and the
// CPython side's interface (torch_python.cpp: the collector the policies
// drive, the GIL discipline of the entry points, Python's liveness;
// torch_handoff.cpp: collections handed to a thread that can take the GIL).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "gcpressure/collector.hpp"
#include "gcpressure/config.hpp"

namespace gcp_torch {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

struct settings {
  gcpressure::config cfg;     // backend, limits, policy, budget, host capacity (GCPRESSURE_* first)
  double gil_wait = 1.0;      // longest wait for a handed-off collection (seconds)
  double holder_grace = 0.001;  // rule 1(a): how long a GIL holder may wait for M before requests give up
  int minor_generation = -1;  // -1: auto (Note [Choosing the minor's generation]); 0, 1 or 2: always
  int gen1_every = 4;
  int refreeze = 2;           // Note [Freezing again after the heap grew]: at most this many per process
  bool pending_handoff = false;  // Py_AddPendingCall instead of the helper thread
  bool oom_null = false;         // Note [Out of memory]
  // Note [Graph capture]: which allocations ask whether their stream captures.
  enum class capture_check_mode { off, announced, on } capture_check = capture_check_mode::on;
};

struct counters {
  std::atomic<std::uint64_t> alloc_calls{0}, free_calls{0}, zero_size{0}, ooms{0}, oom_retries{0}, errors{0};
  std::atomic<std::uint64_t> entries_with_gil{0}, gil_released{0}, gil_released_for_wait{0};
  std::atomic<std::uint64_t> requested_minor{0}, requested_full{0};
  std::array<std::atomic<std::uint64_t>, 3> requested_gen{};
  std::atomic<std::uint64_t> direct{0}, handed_off{0}, pending_calls{0}, helper_batches{0}, nudges{0};
  // skipped_nested and abandoned_helper_busy stay 0 since rule 5 is core's
  // collection scope (kept: the stats' keys are a contract).
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
inline counters& C() {
  static counters* c = new counters();  // leaked: Note [Finalization]
  return *c;
}
inline void add_ns(std::atomic<std::uint64_t>& a, double seconds) {
  a.fetch_add(static_cast<std::uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

// The calling thread's last error (gcp_torch_last_error); fail() sets it and
// returns -1. Any thread.
int fail(const std::string& msg);
const std::string& last_error() noexcept;

// --- torch_python.cpp: the CPython side (Note [GIL and the collection lock]) ---

extern std::atomic<std::uint64_t> g_main_thread;  // the thread that attached as main (pending calls)
std::uint64_t self_id() noexcept;
// Note [Finalization]. Callable without the GIL.
bool python_alive() noexcept;
// Only meaningful while python_alive().
bool holds_gil() noexcept;
// PyGILState_Check was found in this process.
bool gil_check_available() noexcept;
// GIL held: imports gc.collect, adds our gc.callbacks entry (once).
bool ensure_gc_objects();
bool gc_hook_installed() noexcept;
// atexit: no Python code from here on; waiters give up.
void python_shutdown() noexcept;
extern std::atomic<bool> g_py_shutdown;  // python_shutdown() was called
// GIL held: gc.collect(gen) for real, retrying while another collection runs
// when may_wait (and for at most gil_wait); false if it never ran.
bool collect_with_gil(int gen, double gil_wait, bool may_wait);
// Rule 1(a)'s facts (Note [Waiting for a collection]): threads waiting for
// the collection lock with the GIL, and whether the main thread waits for it.
extern std::atomic<int> g_gil_waiters;
extern std::atomic<int> g_main_waiting;

// --- torch_handoff.cpp: collections handed to a thread that can take the GIL ---

// Starts the helper thread (once). Any thread.
bool start_helper();
// Without the GIL, holding the collection lock: has gc.collect(gen) run by
// the helper (or by the main thread's pending call when pending_mode) and
// waits for it, giving up under rule 1 (gil_wait, grace: settings).
void hand_off(int gen, double gil_wait, double grace, bool pending_mode);
void configure_handoff(double gil_wait, bool pending_mode);
// python_shutdown(): waiters re-check and give up.
void wake_handoff_waiters() noexcept;
// The collector every device's policy drives (made once, leaked), and its
// settings (gil_wait, handoff, minor generation).
gcpressure::collector& python_collector();
void configure_python_collector(const settings& s);
// Note [Choosing the minor's generation]: CPython's collections' smoothed
// cost in seconds (0: none seen yet), young (gen 0/1) and whole-heap.
double collection_cost(bool whole) noexcept;

// The cost estimate of whole-heap collections starts again (GIL held).
void forget_whole_cost() noexcept;

// --- torch_refreeze.cpp: Note [Freezing again after the heap grew] ---

// How many re-freezes the process may make (0: none). Any thread.
void configure_refreeze(int allowed) noexcept;
// on_gc at the stop of a whole-heap collection (GIL held): its time, auto's
// threshold for leaving whole-heap minors, what it found, whether it was ours.
void note_whole_collection(double seconds, double leave_threshold, long collected, bool ours) noexcept;
// The next requested collection should be a whole-heap one (a qualifying one
// ran that was not ours).
bool refreeze_due() noexcept;
// GIL held, right after a whole-heap gc.collect() of ours ran: gc.freeze()
// when the rule says so; true if it froze.
bool maybe_refreeze();
struct refreeze_counts {
  int allowed, done, declined;
  std::uint64_t objects, live_bytes;  // frozen by re-freezes; device bytes live at them (the pinning bound)
};
refreeze_counts refreeze_stats() noexcept;

// Rule 2 of Note [GIL and the collection lock]: an entry point's GIL
// bookkeeping for the duration of the call (a stack object).
class entry_guard {
 public:
  entry_guard();
  ~entry_guard();
  entry_guard(const entry_guard&) = delete;
  entry_guard& operator=(const entry_guard&) = delete;

 private:
  friend class py_collector;
  void release();
  void* saved_ = nullptr;  // PyThreadState* while the GIL is let go
  bool counted_ = false;
  entry_guard* outer_ = nullptr;  // this thread's enclosing guard (t_guard before this one)
};

}  // namespace gcp_torch
