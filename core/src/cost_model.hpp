// The pressure policy's cost model (Note [Minor cost is fixed + per young
// byte]): internal to core/src, included by pressure_policy.cpp and its tests.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gcpressure {

namespace detail {

// Note [Minor cost is fixed + per young byte]
// A minor collection costs a fixed part (roots, dirty pages, re-protecting
// the heap: O(heap) with mprotect dirty bits) plus a part that grows with
// the young objects it must mark and sweep. Least squares over the recent
// (young bytes, seconds) samples separates the two; treating the whole cost
// as fixed makes the young budget and the cost chase each other upwards.
// The first sample (the runtime's first mark of a freshly built heap) is
// skipped, later ones are clamped to 8x the running estimate.
class cost_model {
 public:
  // `probe`: the collection was taken to try a smaller minor (Note [A
  // smaller minor is tried]).
  // `loop`: the collection belongs to the loop (Note [The loop's minors
  // price the loop's]).
  void add(double young, double seconds, bool probe = false, bool loop = true) {
    if (++seen_ == 1) return;
    // Note [The loop's minors price the loop's]
    // Minors while a program builds its model mark a heap whose objects
    // are all new: on the H100 at a 256 MiB host heap they took 4.4-4.7
    // ms where the loop's took 2.0-2.5. Priced at their mean, the loop's
    // first minors did not fit the slack for four iterations, and the
    // young bytes of those iterations (1 GiB, 2.7x the oracle's peak) set
    // the run's peak (bench/RESULTS.md, 2026-12-07 session 19). So the
    // first loop minor's sample replaces the set-up's, which price minors
    // only until there is one.
    if (loop && !loop_seen_) {
      loop_seen_ = true;
      samples_.clear();
      tried_.clear();
      ema_ = 0;
      since_probe_ = probe_gap_ = 0;  // Note [The loop's first minors are tried smaller]
    }
    if (probe) {
      // A probe that was not clearly cheaper than the fixed cost it tested
      // spaces the next one out: a cost that does not grow with the young
      // bytes is not re-tried every few minors.
      const bool cheaper = seconds < k_probe_cheaper * predict(young);
      probe_gap_ = cheaper ? 0 : std::min(2 * std::max(probe_gap_, k_probe_window), k_max_probe_gap);
      cheaper_young_ = cheaper ? young : 0;
      since_probe_ = 0;
    }
    const double x = ema_ > 0 ? std::min(seconds, 8 * ema_) : seconds;
    ema_ = ema_ > 0 ? 0.75 * ema_ + 0.25 * x : x;
    if (samples_.size() == 16) {
      samples_.erase(samples_.begin());
      tried_.erase(tried_.begin());
    }
    samples_.emplace_back(young, x);
    tried_.push_back(probe);
    max_young_ = 0;
    for (const auto& smp : samples_) max_young_ = std::max(max_young_, smp.first);
  }
  // A sync passed (Note [Tries are paced in syncs]).
  void sync_passed() noexcept { ++since_probe_; }
  // The loop began (its first hint or sync): a minor before it, whatever
  // it found, was the set-up's, and the loop's first replaces it (Note
  // [The loop's first sync learns its minor], pressure_model.hpp).
  void loop_begins() noexcept { loop_seen_ = false; }
  // The loop has a minor of its own among the samples.
  bool loop_priced() const noexcept { return loop_seen_; }
  bool known() const noexcept { return !samples_.empty(); }
  double mean() const noexcept { return ema_; }
  // Fixed part a and per-byte part b of a collection's cost.
  // Note [A slope must explain the samples]
  // Least squares always returns a slope, even over noise. A runtime whose
  // collection is a fixed cost with jitter (CPython's gc.collect: ~100 us,
  // +-30%) and young sizes a few MB apart got a positive slope that pushed
  // the intercept to ~0 in 20-43% of fits; predict(1 MiB) then said "almost
  // free", the young budget collapsed to its minimum and the PyTorch plug-in
  // collected more than once per 1.7 ms step (RESULTS.md, 2026-12-01 s4).
  // So the slope is used only when there are enough samples to see one
  // (k_min_fit) and it explains most of their spread (R^2 >= k_min_r2);
  // otherwise the cost is called fixed, at the samples' mean: the budget
  // pays for what collections really take, jitter included (the cheapest
  // sample instead made Boehm's 12 ms minors look ~30% cheaper on the H200:
  // twice the minors and twice the exposed GC time).
  //
  // Note [One slow collection is not the cost]
  // A collection the machine preempted (a loaded CI core, the first minors
  // after a large host heap was built) can take 5-25x the others. In the mean
  // of 16 it priced every later minor for 16 collections (Node on the host
  // backend: one 1.93 ms minor among 0.34 ms ones made the fit price a 10 MiB
  // minor at 8.7 ms, so the next one waited for 10 MiB: 6x the oracle's
  // peak; thread_c2_64 in the Python package went to the soft limit in 3-4
  // of 8-10 runs). So samples over 3x the samples' median are left out of
  // the mean and the fit: jitter stays priced, a lone outlier does not.
  void fit(double* a, double* b) const {
    *a = ema_;
    *b = 0;
    if (samples_.empty()) return;
    std::vector<double> ys;
    ys.reserve(samples_.size());
    for (const auto& s : samples_) ys.push_back(s.second);
    std::nth_element(ys.begin(), ys.begin() + static_cast<std::ptrdiff_t>(ys.size() / 2), ys.end());
    const double cap = 3 * ys[ys.size() / 2];
    std::vector<std::pair<double, double>> kept;
    kept.reserve(samples_.size());
    for (const auto& s : samples_)
      if (s.second <= cap) kept.push_back(s);
    const double n = static_cast<double>(kept.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    double lo = kept.front().first, hi = lo;  // Note [A slope needs young bytes that differ]
    for (const auto& [x, y] : kept) {
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    *a = sy / n;
    const double den = n * sxx - sx * sx;
    if (kept.size() < k_min_fit || den <= 1e-9 * n * sxx) return;
    // Note [A slope needs young bytes that differ]: samples whose young
    // bytes span less than a factor of k_min_spread (3) cannot tell a per-byte
    // cost from jitter: two clusters (most minors at one size, a few at
    // another that happened to be slower) fit any slope with a high R^2.
    // On the host backend minors at 1.25-2.25 MiB of young (3-4 ms each)
    // fitted 10 ms per MiB and priced a 2.5 MiB minor at 24.8 ms.
    if (hi < k_min_spread * lo) return;
    const double slope = (n * sxy - sx * sy) / den;
    if (slope <= 0) return;
    const double intercept = (sy - slope * sx) / n;
    double ss_tot = 0, ss_res = 0;
    for (const auto& [x, y] : kept) {
      ss_tot += (y - sy / n) * (y - sy / n);
      ss_res += (y - intercept - slope * x) * (y - intercept - slope * x);
    }
    if (ss_tot <= 0 || 1 - ss_res / ss_tot < k_min_r2) return;
    *b = slope;
    *a = std::max(0.0, intercept);
  }
  // Note [A fit does not run away]
  // The per-byte part is trusted up to twice the largest young bytes among
  // the samples; beyond that a minor is priced as there. The budget rule
  // asks for young >= rate x (pause(young) - lag) / budget: with the pause
  // extrapolated along a slope steeper than budget / rate, the threshold
  // grew faster than the young bytes and no minor came until the headroom.
  // On the host backend (256 MiB host heap, 64 MiB hard limit, a sync every
  // 8) a slope fitted over minors at 1.25-2.25 MiB priced a 16 MiB minor at
  // 28.7 ms (they took 3-4 ms): young bytes ran to the soft limit, 9-19x
  // the oracle's peak in 2 of 24 repetitions (bench/RESULTS.md, 2026-12-06
  // session 15; that slope is now refused: Note [A slope needs young bytes
  // that differ]). Capped, the threshold is finite, and the minor it brings
  // is a sample further out: a real slope is learned step by step.
  double predict(double young) const { return price(young).pause; }
  // A minor's price at `young` bytes, from one fit: its pause, the part of
  // it that grows with the young bytes and the per-byte slope (Note
  // [Waiting pays only the fixed part], pressure_model.hpp).
  struct minor_price {
    double pause = 0, growth = 0, slope = 0;
  };
  minor_price price(double young) const {
    double a, b;
    fit(&a, &b);
    const double grows = b * std::min(young, 2 * max_young_);
    return {a + grows, grows, b};
  }
  // Note [A smaller minor is tried]
  // The model learns a per-byte cost only from minors at young bytes that
  // differ (Note [A slope needs young bytes that differ]), but where minors
  // run depends on what the model predicts: priced at the cost of the
  // minors it has seen, a minor at a sync does not fit the slack, the budget
  // spaces minors out, and every sample is again at the same large young
  // bytes. On the H100 (2026-12-07; 256 MiB host heap, a sync every
  // iteration) that held a loop at minors of 2-2.25 GiB of young bytes, 7-9
  // ms each (exposed: the slack is 5 ms), 8.5x the oracle's peak, while
  // another repetition of the same process whose samples happened to spread
  // learned the slope and walked down to a minor per iteration at 2.6-3.0
  // ms, hidden. So when the cost is called fixed, a minor at a young volume
  // k_min_spread times below every recent sample is worth one try (the
  // caller, decide() in pressure_model.hpp, runs it at a sync whose device
  // hides part of it, and only for a minor priced within try_reach x the
  // lag): its sample is the spread the fit needs. A try that was not
  // cheaper doubles the number of syncs before the next one (up to
  // k_max_probe_gap: Note [Tries are paced in syncs]). One that was
  // cheaper is tried again at the next sync at about its size (k_near),
  // until the fit has the samples a slope needs (Note [A slope must explain
  // the samples]): one cheap sample among
  // big ones with jitter fits no slope, and the next try came only after
  // four more minors at the budget's spacing, 30-40 iterations of a loop
  // whose minors at one iteration's young bytes fit the slack. On the fake
  // clock (2.4 ms + 0.0177 ms/MiB, 2 ms more every third minor, 5 ms of
  // slack, a sync every iteration) three tries at 32 MiB, 2.97 ms each,
  // came 30-40 iterations apart, between minors at 320 MiB of 8-10 ms;
  // repeated, exposed GC time fell from 4.7% to 2.7% of wall
  // (bench/RESULTS.md, 2026-12-07 session 19).
  //
  // Note [The loop's first minors are tried smaller]
  // The loop's first minor is often as slow as the set-up's (on the H100 at
  // a 256 MiB host heap, 2026-12-07 session 20: 6.8 ms at 384 MiB of young
  // where the loop's minors at one iteration's 256 MiB took 3.5-3.9 ms), and
  // it alone prices the next ones (Note [The loop's minors price the
  // loop's]). Waiting for k_probe_window minors before a try let the
  // budget's spacing of those first minors (2.25 GiB of young bytes) set the
  // run's peak at iteration 10: 3.13x the oracle's. So until the loop has
  // k_probe_window minors of its own, a sync whose young bytes are about
  // the size of every one of them or fewer (k_near) is worth a try (the same
  // reach as any try: decide(); and on a lag the device had, not on the
  // guess of Note [A guess before the first sync]). About the size, not
  // fewer: the loop's first minor ran at a hint on that guess at 384 MiB
  // (1.5 iterations' young bytes), the first sync's lag is the guess, and
  // every later sync had more young bytes than 384 MiB; the first try came
  // at 1.25 GiB, still 3.1x (session 20's second call).
  //
  // Note [A fitted line is tried too]
  // A fitted slope used to end the tries: the line prices every young
  // volume. But its intercept below every recent sample is an
  // extrapolation, and a machine's busy spell leaves it wrong: on the fake
  // clock (the H100-like minor, 8 ms slower for 60 iterations) the spell's
  // small minors (32 MiB at 11 ms) and the later big ones fitted ~11 ms +
  // half the real slope, over the 5 ms slack; minors ran at ~1 GiB, 17-23
  // ms each and exposed, until the end (1248 MiB of peak; 16 samples 35
  // iterations apart to replace them). So a minor k_min_spread times below
  // every recent sample is worth a try with a line fitted too; where the
  // line was right the try was not cheaper and the next waits twice as many
  // syncs, as for a fixed cost. (decide() prices a try on the device's lag
  // even with the exposed budget spent: a spell that spent it would
  // otherwise be paid for to the end.) Back to a minor per sync there; in
  // a spell 4 ms slower one try ran in the spell, exposed: 384 MiB of
  // peak against 256 (LagSchedule.ABusySpellOfSlowMinorsDoesNotRunAway).
  //
  // Note [Tries are paced in syncs]
  // The wait after a try that was not cheaper was counted in minors. But
  // minors are what a wrong price spaces out: on the fake clock (minors of
  // 2.1 ms + 0.027 ms per MiB, the loop's first 10 iterations 2.5 ms slower,
  // as an H100's first loop minors were in session 23) the one try, inside
  // the slow start, was not cheaper; the minors priced at the slow samples'
  // mean were exposed, so the budget spaced them further, each one dearer
  // than the last (b > 0), and 4 minors to the next try were 40-100
  // iterations: 1344-1920 MiB of peak where a minor per sync at 3 ms fits
  // the 5 ms slack (on the H100: 8.9x the oracle's peak, 25 minors of 9
  // ms). The chances a try gets are the syncs it could run at, so the wait is
  // counted in syncs: 4, 8, ... up to 64 after failed tries. A minor that
  // really costs more than the slack pays one exposed try per 64 syncs at
  // most (a few percent of one minor per sync).
  bool wants_smaller(double young) const {
    const bool first = samples_.size() < k_probe_window;  // only the loop's own first minors may try
    if (samples_.empty() || (first && !loop_seen_) || since_probe_ < probe_gap_ || young <= 0) return false;
    // The young bytes of the recent minors the budget spaced (a try's own
    // sample says what a try found: Note [Tries are paced in syncs]).
    double lo = 0;
    for (std::size_t i = samples_.size(), n = 0; i-- > 0 && n < k_probe_window;)
      if (!tried_[i] || first) {
        lo = lo > 0 ? std::min(lo, samples_[i].first) : samples_[i].first;
        ++n;
      }
    if (lo <= 0) return false;
    const bool below = first ? young <= k_near * lo : young * k_min_spread <= lo;
    return below || (cheaper_young_ > 0 && young <= k_near * cheaper_young_);
  }

 private:
  static constexpr std::size_t k_probe_window = 4;      // Note [A smaller minor is tried]
  static constexpr std::size_t k_max_probe_gap = 64;
  static constexpr double k_probe_cheaper = 0.75;
  static constexpr double k_near = 1.5;  // young bytes "about the size" of a cheaper try
  static constexpr std::size_t k_min_fit = 8;
  static constexpr double k_min_r2 = 0.5;
  static constexpr double k_min_spread = 3;  // Note [A slope needs young bytes that differ]
  std::vector<std::pair<double, double>> samples_;
  std::vector<bool> tried_;  // samples_[i] came from a try
  double ema_ = 0;
  double max_young_ = 0;  // Note [A fit does not run away]
  std::uint64_t seen_ = 0;
  bool loop_seen_ = false;  // Note [The loop's minors price the loop's]
  std::size_t since_probe_ = 0, probe_gap_ = k_probe_window;  // Note [A smaller minor is tried]
  double cheaper_young_ = 0;  // the young bytes of the last try, if it was cheaper
};

}  // namespace detail

}  // namespace gcpressure
