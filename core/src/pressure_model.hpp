// The pressure policy's decision model (Note [One decision over an explicit
// model]): internal to core/src, included by pressure_policy.cpp and its
// tests. Everything here is pure: no clock, no device, no collector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>

#include "gcpressure/policy.hpp"

namespace gcpressure {

namespace detail {

// Note [One decision over an explicit model]
// Every collection the pressure policy starts is one rule: the young bytes a
// collection would reclaim are worth its cost,
//
//   young >= max(floor, rate x exposed / gc_budget) / yield x futile,
//            capped by the headroom,
//
// where the predicted pause P (cost model: heap and young bytes) is split by
// the device's lag L (seconds of device work queued ahead of the host, known
// from events recorded at hints and the slack at syncs) into
// hidden = min(P, L), which the host would have spent waiting anyway, and
// exposed = P - hidden, which the user pays. Only exposed time is charged to
// the GC budget. A collection that is entirely hidden is free: it needs only
// min_young_bytes ("worth a collection at all"), and free collections cannot
// slow the loop down, because each one runs only while the device has more
// than its pause queued (the lag is re-polled at each decision, so the
// host's time spent collecting is seen in the next). One that is exposed
// also waits for growth x floor (the heap-doubling rule) times the share of
// its pause that is exposed: a minor that overruns the lag by a tenth waits
// for a tenth of it (a step from "free" to the whole rule made a minor 0.5 ms
// over a 5.7 ms slack wait for ten iterations of a loop that keeps 20 MiB
// alive, and the peak went from 4.9x to 7.9x the oracle's). With no lag
// (CPU-bound loops) the rule is the budget rule: rate x P / gc_budget.
// The allocation fast path's bounds are this threshold at the best lag the
// device can have, and the headroom bounds below (fast_bounds).
struct pressure_tuning {
  double gc_budget = 0.05;               // exposed GC seconds / wall seconds
  std::size_t min_young_bytes = std::size_t{1} << 20;
  double growth = 1.0;                   // exposed collections wait for growth x floor young bytes
  double quiet_fraction = 0.5;           // a hint collects once this share of the threshold is used...
  int headroom_collections_per_iteration = 2;  // Note [No collection storms]
  double max_futile_stretch = 16;        // Note [Collections that find nothing]
  double min_yield = 0.5;                // the threshold is divided by max(yield, this)
  double hard_margin = 0.05;             // live within 5% of the hard limit: over the headroom
  double free_margin = 0.1;              // reserved growth within 10% of the device's free memory: over
  double free_room = 0.9;                // young bytes may use 90% of the device's free memory
  double pressing_share = 0.8;           // live after a collection > 80% of soft: pressed
  double max_full_backoff = 64;          // a cycle that finds little doubles the next one's need, up to this
  double smoothing = 0.25;               // weight of a new sample in every learned average
  double refresh_seconds = 0.1;          // devices' free memory is read at most this often
  double rate_horizon_seconds = 0.5;     // Note [The allocation rate is per wall second]
  double budget_horizon_seconds = 1.0;   // Note [A budget of one second]: the bucket holds gc_budget x this
  double try_reach = 2.0;                // Note [A smaller minor is tried]: only minors priced within this x the lag
  static pressure_tuning from(const policy_options& o) {
    pressure_tuning t;
    t.gc_budget = o.gc_budget;
    t.min_young_bytes = o.min_young_bytes;
    t.growth = o.growth;
    t.quiet_fraction = o.quiet_fraction;
    return t;
  }
};

enum class pressure_event { allocation, hint, sync };

// What the policy knows of one device at a decision point.
struct device_snapshot {
  std::size_t young = 0;            // bytes allocated since the last collection (+ the allocation's)
  std::size_t live = 0, reserved = 0;  // now (+ the allocation's)
  std::size_t soft = 0, hard = 0;
  std::size_t live_after = 0;       // live right after the last collection
  std::size_t floor = 0;            // live right after the last whole-heap collection
  std::size_t device_free = 0, reserved_at_refresh = 0;  // the last driver read (0: unknown)
  double rate = 0;                  // young bytes per second (learned)
  double yield = 1;                 // share of young bytes gone at a collection (learned)
  double futile = 1;                // Note [Collections that find nothing] (learned)
  std::size_t backoff = 0;          // Note [No collection storms]
  double stretch = 0;               // young bytes between two hints (learned)
};

struct pressure_snapshot {
  pressure_event event = pressure_event::allocation;
  std::size_t device = 0;           // the device that decides (its index)
  device_snapshot dev;              // what is known of it
  bool cost_known = false;
  double pause = 0;                 // predicted pause of a minor now (cost model)
  double pause_growth = 0;          // the part of it that grows with the young bytes (Note [Waiting pays only the fixed part])
  double pause_slope = 0;           // seconds per young byte of that part (the cost model's fit)
  double lag = 0;                   // device seconds queued ahead of the host (a lower bound)
  double exposed = 0, wall = 0;     // the policy's exposed GC seconds so far, wall seconds
  int headroom_collections = 0;     // this iteration's (Note [No collection storms])
  bool cycle = false, minor_cycle = false;  // a sliced cycle is in progress (and it is a minor)
  double cycle_exposed = 0, cycle_wall = 0;  // since it started: exposed GC seconds, wall seconds
  double cycle_rest = 0;            // seconds a whole-heap cycle still needs (Note [Finishing a cycle costs its rest])
  bool syncing = false;             // the loop synchronizes at its hints (hints defer to syncs)
  bool smaller_wanted = false;      // the cost model asks to try this smaller minor (Note [A smaller minor is tried])
  bool loop_unpriced = false;       // the loop began and has no minor of its own (Note [The loop's first sync learns its minor])
};

enum class pressure_action { none, minor, step_cycle, finish_cycle };

struct pressure_decision {
  pressure_action action = pressure_action::none;
  std::size_t threshold = 0;        // the young bytes the rule asked for
  bool hidden = false;              // the predicted pause fits in the lag
  bool headroom = false;            // asked for by the headroom alone
  bool probe = false;               // a smaller minor tried at a sync (Note [A smaller minor is tried])
  bool learn = false;               // the loop's first minor, to learn its cost (Note [The loop's first sync learns its minor])
};

// Allocated bytes above which an allocation is over the headroom.
struct headroom_bounds {
  std::size_t live = 0, reserved = 0;
};

inline headroom_bounds fast_bounds(const device_snapshot& d, const pressure_tuning& t) {
  headroom_bounds b;
  const auto hard = static_cast<std::size_t>(static_cast<double>(d.hard) * (1 - t.hard_margin));
  b.live = std::min(d.soft, hard);
  const auto margin = static_cast<std::size_t>(static_cast<double>(d.device_free) * t.free_margin);
  b.reserved = d.device_free > 0 ? d.reserved_at_refresh + d.device_free - margin : ~std::size_t{0};
  return b;
}

// Note [No collection storms]: live bytes past the soft limit or near the
// hard one, or reserved bytes near the device's free memory (cached bytes
// are reclaimable without a collection, so the live test uses live bytes).
inline bool over_headroom(const device_snapshot& d, const pressure_tuning& t) {
  const headroom_bounds b = fast_bounds(d, t);
  return d.live > b.live || d.reserved > b.reserved;
}

// Room for young bytes under the soft limit and the device's free memory.
inline double headroom(const device_snapshot& d, const pressure_tuning& t) {
  const double live = static_cast<double>(d.live_after), soft = static_cast<double>(d.soft);
  double room = soft > live ? soft - live : 0;
  if (d.device_free > 0) room = std::min(room, t.free_room * static_cast<double>(d.device_free));
  return std::max(room, static_cast<double>(t.min_young_bytes));
}

// The exposed part of a pause of `pause` seconds against `lag` seconds of
// queued device work.
inline double exposed_part(double pause, double lag) { return std::max(0.0, pause - std::max(0.0, lag)); }

// Note [Allocations wait for the hint]
// A minor at an allocation runs inside an iteration, while that iteration's
// temporaries are alive: it promotes them (Note [Generations of device
// bytes]: a survivor is old, only a whole-heap cycle frees it). The same
// minor at the iteration's hint costs the same and promotes only what
// outlives the iteration. So in a loop that gives hints (stretch > 0, the
// young bytes between two hints), an allocation collects only for the
// headroom (the soft limit, the device's free memory): the budget and the
// lag decide at hints and syncs. On the H200 (RESULTS.md, 2026-12-02
// evening; 256 MiB host heap, a sync every 8 iterations) free minors at
// 16 MiB of young bytes, mid-iteration, promoted the layers' live arrays:
// live bytes grew from 560 MiB to 4.66 GiB and the peak was 9.86x the
// oracle's; a step that holds half the hard limit was collected in the
// middle, promoted whole, and took a 170 ms whole-heap cycle to get back.
inline std::size_t allocation_young_bound(const device_snapshot& d, std::size_t threshold,
                                          const pressure_tuning& t) {
  if (d.stretch <= 0) return threshold;
  return std::max(threshold, static_cast<std::size_t>(headroom(d, t)));
}

// Note [One decision over an explicit model]: the young bytes at which a
// minor with this pause and lag is worth its cost; `growth`: the part of
// the pause that grows with the young bytes, `slope` its seconds per byte.
//
// Note [Waiting pays only the fixed part]
// A minor costs a fixed part a and a part b per young byte (Note [Minor
// cost is fixed + per young byte]). The budget rule waits for young >=
// rate x (a + b x young - lag) / gc_budget: the exposed GC time is then
// rate x (a - lag) / young + b x rate of wall, within the budget where b x
// rate is below it. Where b x rate reaches the budget no spacing keeps
// minors within it: waiting spreads a over more bytes, but b is paid for
// every byte at any spacing, and the rule has no solution: each wait made
// the next minor dearer and the threshold moved on ahead of the young
// bytes until Note [A fit does not run away] capped it. There only the
// exposed part of a is amortized: young >= rate x max(0, a - lag) /
// gc_budget (the exposed time is then the budget plus b x rate, which no
// wait could lower by more than the budget). On the H100 at a 256 MiB host
// heap minors took 2.5 ms at one iteration's 256 MiB and 7-9 ms at 2.25
// GiB, ~46 GiB/s: b x rate ~ 13%. On the fake clock (2.4 ms + 0.0177 ms
// per MiB, b x rate 9.6%, ~5 ms of slack, a sync every iteration) a machine
// busy for 60 iterations, its minors 4 ms slower, took a loop that
// collected at every sync to 2112 MiB of peak, 33x the live set (the
// H100's untraced 14-17x repetitions have this shape); amortizing a alone,
// 256 MiB, and a minor per sync after it
// (LagSchedule.ABusySpellOfSlowMinorsDoesNotRunAway). Whether b x rate
// reaches the budget is asked of the fitted slope, not of growth / young:
// past the young bytes the fit is trusted for the pause is priced flat
// (Note [A fit does not run away]), but a minor there still pays b per
// byte, and one cost model yields one answer at every young volume.
inline std::size_t young_threshold(const device_snapshot& d, bool cost_known, double pause, double lag,
                                   const pressure_tuning& t, double growth = 0, double slope = 0) {
  const double exposed = cost_known ? exposed_part(pause, lag) : 0;
  const double share = !cost_known ? 1 : pause > 0 ? exposed / pause : 0;  // of the pause, exposed
  const double min_young = static_cast<double>(t.min_young_bytes);
  const double floor = std::max(share * t.growth * static_cast<double>(d.floor), min_young);
  // Note [Waiting pays only the fixed part]
  const double grows = cost_known ? std::clamp(growth, 0.0, pause) : 0;
  const bool unpayable = cost_known && d.rate * slope >= t.gc_budget;
  const double amortized = cost_known ? exposed_part(unpayable ? pause - grows : pause, lag) : 0;
  const double time = d.rate * amortized / t.gc_budget;
  const double b = std::max(floor, time) / std::clamp(d.yield, t.min_yield, 1.0) * d.futile;
  return static_cast<std::size_t>(std::min(b, headroom(d, t)));
}

// The lag a decision may count on: all of it while the exposed budget is
// not spent, none (the budget rule) once it is. A collection may overspend
// it by its own exposed part: the budget starts with the loop (Note [The
// budget starts with the loop]), when there is no wall yet to pay for any.
inline double usable_lag(const pressure_snapshot& s, const pressure_tuning& t) {
  const double exposed = s.cost_known ? exposed_part(s.pause, s.lag) : 0;
  if (exposed <= 0 || s.wall <= 0) return s.lag;
  return s.exposed > t.gc_budget * s.wall ? 0 : s.lag;
}

// Note [One decision over an explicit model]: what to do at `s.event`.
inline pressure_decision decide(const pressure_snapshot& s, const pressure_tuning& t) {
  pressure_decision r;
  const device_snapshot& d = s.dev;
  const double lag = usable_lag(s, t);
  r.threshold = young_threshold(d, s.cost_known, s.pause, lag, t, s.pause_growth, s.pause_slope);
  r.hidden = s.cost_known && lag > 0 && exposed_part(s.pause, lag) <= 0;
  const bool due = d.young >= r.threshold;
  const bool over = over_headroom(d, t);
  if (s.cycle) {
    // A sliced cycle: finished at once when memory is needed now, else a
    // whole-heap cycle advances paced by the exposed budget (or in the
    // device's time at a sync); a sliced minor waits for syncs. The pace is
    // the cycle's own: its exposed slices within gc_budget of its wall time.
    // Against the exposed share of the whole run, a cycle started early (or
    // after a long setup) ran a 1 ms slice at every allocation: 664 exposed
    // slices in one cycle, a third of the run's wall time (H200, 1 GiB heap).
    // Note [Finishing a cycle costs its rest]
    // Finishing a cycle at an allocation runs its rest back to back,
    // exposed: the young bytes that pay for that are the budget rule's at
    // the rest's length, not at a minor's. Priced as a minor (a 3 ms pause
    // where 130-170 ms of marking remained), the whole-heap cycles of the
    // promote workload on the H100 (256 MiB host heap, a sync every
    // iteration) were finished back to back once 11 iterations of young
    // bytes had piled up: 127-168 ms blocking in 5 of 6 runs, 1.09x the
    // oracle's time (bench/RESULTS.md, 2026-12-06 session 12).
    const double finish = s.minor_cycle ? s.pause : std::max(s.pause, s.cycle_rest);
    const std::size_t no_lag = young_threshold(d, s.cost_known, finish, 0, t);
    const bool paced = !s.minor_cycle && s.cycle_exposed < t.gc_budget * s.cycle_wall;
    if (s.event == pressure_event::sync) r.action = pressure_action::step_cycle;
    else if (s.event == pressure_event::allocation && (d.young >= no_lag || over))
      r.action = pressure_action::finish_cycle;
    else if (paced && (s.event == pressure_event::allocation || !s.syncing)) r.action = pressure_action::step_cycle;
    return r;
  }
  switch (s.event) {
    case pressure_event::allocation: {
      r.threshold = allocation_young_bound(d, r.threshold, t);  // Note [Allocations wait for the hint]
      const bool due_here = d.young >= r.threshold;
      const std::size_t need = std::max(t.min_young_bytes, d.backoff);
      r.headroom = !due_here && over && d.young >= need && s.headroom_collections < t.headroom_collections_per_iteration;
      if (due_here || r.headroom) r.action = pressure_action::minor;
      break;
    }
    case pressure_event::hint: {
      // Note [Quiet moments]: also when the next stretch (as much as since
      // the last hint) would cross the no-lag threshold anyway, so that the
      // collection comes where few temporaries are alive; a loop that syncs
      // at its hints gets that collection at the sync instead, where the
      // device hides it (Note [Quiet moments defer to syncs]).
      const std::size_t no_lag = young_threshold(d, s.cost_known, s.pause, 0, t, s.pause_growth, s.pause_slope);
      const double y = static_cast<double>(d.young);
      const bool quiet = !s.syncing && y >= t.quiet_fraction * static_cast<double>(no_lag) &&
                         y + d.stretch >= static_cast<double>(no_lag) && d.young >= t.min_young_bytes / 2;
      if ((due && (r.hidden || !s.syncing)) || quiet) r.action = pressure_action::minor;
      break;
    }
    case pressure_event::sync: {
      // Note [Syncs collect what the next stretch would]: also when the
      // young bytes of one more stretch would make an allocation's minor
      // due (at no lag: exposed whole) before the next sync; here the slack
      // hides part of it. Each such minor replaces one the allocations
      // would have taken, so the count is the same, and better placed (on
      // the H200 at 256 MiB, a sync every iteration: minors crossed the
      // budget's threshold mid-iteration, 6.5 ms exposed each, and none ran
      // at the syncs, whose 5.2 ms of slack went unused).
      const std::size_t at_alloc =
          allocation_young_bound(d, young_threshold(d, s.cost_known, s.pause, 0, t, s.pause_growth, s.pause_slope), t);
      const bool soon = static_cast<double>(d.young) + d.stretch >= static_cast<double>(at_alloc);
      // Note [A smaller minor is tried]: where the device hides part of it
      // (its lag, whether or not the exposed budget is spent: Note [A
      // fitted line is tried too]), and the minor is priced within
      // try_reach x the lag: bdwgc's minor is mostly
      // O(heap blocks) (docs/DESIGN.md, "What a minor costs"), so a smaller
      // young volume cannot take more than half of a minor's cost away (a
      // 1 GiB heap's 25 ms minor against 5 ms of slack: each try was one
      // more exposed minor, +1.3% of wall on the fake clock).
      r.probe = s.smaller_wanted && !r.hidden && s.lag > 0 && s.pause <= t.try_reach * s.lag && d.young < r.threshold &&
                !soon;
      // Note [The loop's first sync learns its minor]
      // The loop's minors are priced by the set-up's until the loop has one
      // of its own (Note [The loop's minors price the loop's]), and the
      // set-up's can be ten times dearer: V8's first scavenges, while Node
      // built its model, took 4.6-5.6 ms, the loop's 0.4-0.7 ms. In a loop
      // whose syncs find the device idle (no lag: no try, Note [A smaller
      // minor is tried]) the young bytes then ran to the headroom before
      // the loop's first minor, 6x the oracle's peak (bench/RESULTS.md,
      // session 22). So the loop's first sync with young bytes worth a
      // collection collects, if the budget's bucket can pay its exposed
      // part: it starts with two predicted pauses (Note [A budget of one
      // second]), so this costs the loop at most one minor it would have
      // paid for later anyway, once.
      r.learn = s.loop_unpriced && s.cost_known && s.exposed + exposed_part(s.pause, s.lag) <= t.gc_budget * s.wall;
      if (d.young >= t.min_young_bytes && (d.young >= r.threshold || soon || r.probe || r.learn))
        r.action = pressure_action::minor;
      break;
    }
  }
  return r;
}

// The fast path's young bound (Note [The allocation fast path]): the
// lowest threshold any lag the device can have now gives, so that no
// allocation below it could be due.
inline std::size_t fast_young_bound(const device_snapshot& d, bool cost_known, double pause, bool lag_possible,
                                    const pressure_tuning& t, double growth = 0, double slope = 0) {
  // The threshold falls as the lag grows: its lowest is at any lag.
  const double lag = lag_possible ? std::numeric_limits<double>::infinity() : 0;
  return allocation_young_bound(d, young_threshold(d, cost_known, pause, lag, t, growth, slope), t);
}

}  // namespace detail

}  // namespace gcpressure
